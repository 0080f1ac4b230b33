#include "tests/support/fakes/mem_store.h"

#include <mutex>
#include <utility>

namespace dsfs {
namespace {

class MemWriter final : public KvWriter {
 public:
  explicit MemWriter(std::shared_ptr<MemTable> table) : table_(std::move(table)) {}
  Status Put(std::string_view key, std::string_view value) override {
    pending_[std::string(key)] = std::string(value);
    return Status::OK();
  }
  // Like LMDB: tests then exercise records grouped into one value, and a store written here
  // holds the same values as one written to LMDB.
  ValueSizing value_sizing() const override { return BackendValueSizing("lmdb"); }
  Status Commit() override {
    std::unique_lock lock(table_->mu);
    for (auto& [k, v] : pending_) table_->data[k] = std::move(v);
    pending_.clear();
    return Status::OK();
  }

 private:
  std::shared_ptr<MemTable> table_;
  std::map<std::string, std::string> pending_;
};

class MemReader final : public KvReader {
 public:
  explicit MemReader(std::shared_ptr<MemTable> table) : table_(std::move(table)) {}
  Status Get(std::string_view key, PinnedValue* value) override {
    std::shared_lock lock(table_->mu);
    auto it = table_->data.find(key);
    if (it == table_->data.end()) return Status::NotFound("key not found");
    value->Set(it->second, nullptr);
    return Status::OK();
  }
  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    std::shared_lock lock(table_->mu);
    auto it = table_->data.lower_bound(key);
    if (it == table_->data.end()) return Status::NotFound("no key at or after");
    *found_key = it->first;
    value->Set(it->second, nullptr);
    return Status::OK();
  }
  std::string_view Name() const override { return "memory"; }

 private:
  std::shared_ptr<MemTable> table_;
};

}  // namespace

std::unique_ptr<KvWriter> NewMemWriter(std::shared_ptr<MemTable> table) {
  return std::make_unique<MemWriter>(std::move(table));
}

std::unique_ptr<KvReader> NewMemReader(std::shared_ptr<MemTable> table) {
  return std::make_unique<MemReader>(std::move(table));
}

}  // namespace dsfs
