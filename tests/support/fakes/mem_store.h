// In-memory backend for tests: a sorted map shared by a writer and any number of readers.
#pragma once

#include <map>
#include <memory>
#include <shared_mutex>
#include <string>

#include "backend/kv_open.h"

namespace dsfs {

struct MemTable {
  std::shared_mutex mu;  // guards data
  std::map<std::string, std::string, std::less<>> data;
};

// The writer's puts become visible to readers at Commit(); without Commit they are dropped.
std::unique_ptr<KvWriter> NewMemWriter(std::shared_ptr<MemTable> table);
// Values point into the table: do not modify the table while a reader is in use.
std::unique_ptr<KvReader> NewMemReader(std::shared_ptr<MemTable> table);

}  // namespace dsfs
