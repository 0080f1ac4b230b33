// A KvReader decorator that injects faults, so every error path above the backend can be
// tested without damaging real files.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "backend/kv_open.h"

namespace dsfs {

enum class Fault {
  kNone,
  kError,     // Get fails with IOError
  kFlipBit,   // the value comes back with one bit flipped
  kTruncate,  // the value comes back with its second half missing (a short read)
  kTimeout,   // Get blocks for the reader's timeout, then fails with IOError ("timed out")
};

// Decides, per Get, what fault to inject for `key`. Called concurrently: must be thread-safe.
using FaultPolicy = std::function<Fault(std::string_view key)>;

// `timeout`: how long a kTimeout fault blocks before it fails.
std::unique_ptr<KvReader> NewFaultyReader(
    std::unique_ptr<KvReader> base, FaultPolicy policy,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(2));

// A policy injecting `faults` (chosen uniformly) into a `rate` fraction (0..1) of the reads of
// keys that start with one of `prefixes` (e.g. "PQ": payload and pixel groups), at random from
// `seed`. Each injected fault is counted in the calling thread's InjectedFaults(), so a test can
// tell which of its requests were hit. Thread-safe.
FaultPolicy RandomFaults(double rate, uint64_t seed, std::string_view prefixes,
                         std::vector<Fault> faults);
// Faults RandomFaults injected on this thread so far.
uint64_t InjectedFaults();

}  // namespace dsfs
