// A KvReader decorator that injects faults, so every error path above the backend can be
// tested without damaging real files.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "backend/kv_store.h"

namespace dsfs {

enum class Fault {
  kNone,
  kError,     // Get fails with IOError
  kFlipBit,   // the value comes back with one bit flipped
  kTruncate,  // the value comes back with its second half missing
};

// Decides, per Get, what fault to inject for `key`. Called concurrently: must be thread-safe.
using FaultPolicy = std::function<Fault(std::string_view key)>;

std::unique_ptr<KvReader> NewFaultyReader(std::unique_ptr<KvReader> base, FaultPolicy policy);

}  // namespace dsfs
