// LatencyHistogram: a small lock-free histogram of durations, for the request latencies the
// stats file shows and `dsfs stats --prometheus` exports (mount/metrics.h).
//
// Fixed logarithmic buckets: bucket i counts durations of at most 4^i microseconds (1 us, 4 us,
// 16 us, ... 4^11 us = 4.19 s), the last one (kBuckets) everything longer. Fixed bounds make
// the histograms of every mount and every opcode comparable and adding up, and cost one bit
// scan per sample; a factor of 4 keeps the series few (13 per histogram) while telling a
// cached read (microseconds) from a decode (milliseconds) from a fetch (tens of ms).
//
// Thread safety: Record is safe from any number of threads at once (relaxed atomics: a
// statistic, never used to order other memory). Snapshot may run concurrently with Record; it
// then sees some of the concurrent samples and not others, and its count is the sum of the
// bucket counts it read, so a snapshot is always consistent with itself (sum_ns aside).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>

namespace dsfs {

class LatencyHistogram {
 public:
  static constexpr int kBuckets = 12;  // finite buckets; index kBuckets holds the rest (+Inf)

  // Upper bound of bucket `i` (< kBuckets), in microseconds: 4^i.
  static constexpr uint64_t BoundUs(int i) { return uint64_t{1} << (2 * i); }

  // The bucket a duration of `ns` nanoseconds falls in: the smallest i with ns <= 4^i us, or
  // kBuckets when it is longer than the last bound.
  static constexpr int BucketOf(uint64_t ns) {
    const uint64_t us = ns / 1000 + (ns % 1000 != 0);  // ceil: ns <= 1000 * b iff us <= b
    if (us <= 1) return 0;
    const int i = (std::bit_width(us - 1) + 1) / 2;
    return i > kBuckets ? kBuckets : i;
  }

  void Record(uint64_t ns) {
    counts_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  void Record(std::chrono::steady_clock::duration d) {
    Record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }

  struct Snapshot {
    std::array<uint64_t, kBuckets + 1> counts{};  // per bucket, not cumulative
    uint64_t count = 0;                           // the sum of `counts`
    uint64_t sum_ns = 0;
  };
  Snapshot snapshot() const {
    Snapshot s;
    for (int i = 0; i <= kBuckets; ++i) {
      s.counts[i] = counts_[i].load(std::memory_order_relaxed);
      s.count += s.counts[i];
    }
    s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Records the time from its construction to its destruction into `h`.
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram& h) : h_(h), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedLatency() { h_.Record(std::chrono::steady_clock::now() - t0_); }
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  LatencyHistogram& h_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace dsfs
