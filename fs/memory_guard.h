// MemoryGuard: the daemon sheds its RAM cache before the kernel has to kill anything (issue 29).
//
// The budgets (common/memory_limit.h) keep the daemon's own memory within a share of the limit,
// but the limit is shared: the reader's RSS, an explicit cache_size=, the -o kernel layout and
// the kernel's own memory are charged to it too, and page cache can be reclaimed while those
// cannot. So a thread watches the memory of the scope the limit came from that the kernel
// cannot reclaim ("used"): its usage less its file pages (cgroup v1 memory.usage_in_bytes less
// total_active_file and total_inactive_file; v2 memory.current less active_file and
// inactive_file), or MemTotal less MemAvailable where the limit is physical memory. When used
// passes the limit less a headroom (an eighth of the limit, at least 24 MiB, at most a
// quarter), the RAM cache's capacity is lowered by what is over and half a headroom more, and
// evicted down to at once (ByteCache::SetCapacity), down to a floor of min(its capacity,
// 4 MiB), and the freed memory is given back to the system (malloc_trim); each time pressure
// starts is one pressure event. Between two samples the cache may grow only by the room left
// below the threshold at the last one (its capacity is what it holds plus that room), so a
// burst of reads cannot outrun the guard. Once used has stayed half a headroom below the
// threshold for 5 s, the capacity is raised by a 16th of the original every 2 s, never above
// it. One mechanism on every kind of limit: reading two small files every 50 ms (every 200 ms
// while used is under half the limit) costs tens of microseconds.
//
// With default budgets the daemon's own anonymous memory (RssAnon, /proc/self/statm) is held
// to a resident limit too (half the memory limit: MemoryBudgets::resident_bytes): its budgets
// only estimate what is not the cache (threads, request buffers, the tables of the tree, the
// -o kernel layout), and in CI that was 8 MB more than on a quiet machine (49.4 of 48 MiB).
// Past the resident limit less its own headroom (a 16th of it), the cache is shed the same way,
// by what is over and half that headroom more; the room the cache may grow by between samples
// is the smaller of the two. An explicit cache_size= is held by the scope's threshold alone.
//
// Thread safety: stats() and Running() from any thread; the guard's own thread is the only one
// that changes the cache's capacity.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "cache/byte_cache.h"
#include "common/memory_limit.h"

namespace dsfs {

// What the guard watches for a limit: the files it reads and how.
struct MemoryWatch {
  enum class Kind { kNone, kCgroupV1, kCgroupV2, kPhysical };
  Kind kind = Kind::kNone;
  std::string dir;             // the cgroup's directory (cgroup kinds), "/proc" (kPhysical)
  std::string proc = "/proc";  // where meminfo is read (cgroup v1: the kernel's share below)
  // The watch for `limit` (from its source: the file the limit was read from names the cgroup).
  // `root` prefixes every path, as in FindMemoryLimit (tests).
  static MemoryWatch For(const MemoryLimit& limit, const std::string& root = "/");
  // The memory the kernel cannot reclaim in that scope, in bytes; false when it cannot be read.
  bool ReadUsedBytes(uint64_t* used) const;
  std::string Describe() const;  // "cgroup v1 /sys/fs/cgroup/memory/job"

  // The kernel memory charged to the cgroup that the kernel reclaims under pressure (the
  // inode and dentry slab of the files read: tens of MB in a 103 MB limit), counted as
  // reclaimable like file pages. v2: memory.stat's slab_reclaimable. v1 says nothing of its
  // slab (memory.kmem.slabinfo is empty since Linux 5.9): memory.kmem.usage_in_bytes in the
  // share of the system's kernel memory that is reclaimable slab (/proc/meminfo SReclaimable
  // of Slab + KernelStack + PageTables). 0 when it cannot be read.
  static uint64_t V2ReclaimableKernelBytes(const std::string& memory_stat);
  uint64_t V1ReclaimableKernelBytes() const;

  // This process's anonymous resident memory (RssAnon: statm's resident less shared pages);
  // false when it cannot be read.
  static bool ReadResidentAnonBytes(uint64_t* bytes, const std::string& statm = "/proc/self/statm");
};

// The guard's decision for one sample, apart from its thread (unit-tested).
class MemoryGuardPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // `resident_limit_bytes`: the most the daemon's own memory may hold (0: no such limit).
  MemoryGuardPolicy(uint64_t limit_bytes, uint64_t initial_capacity_bytes,
                    uint64_t resident_limit_bytes = 0);
  // Given the used bytes and the daemon's own (`resident_bytes`) sampled at `now` and the
  // cache's current charge, the capacity to set until the next sample: the budget
  // (capacity()), but no more than the cache holds plus the room left below the thresholds.
  // Counts pressure events.
  uint64_t Next(uint64_t used_bytes, uint64_t cache_bytes, Clock::time_point now,
                uint64_t resident_bytes = 0);
  // The budget: lowered under pressure, raised back slowly.
  uint64_t capacity() const { return capacity_; }
  uint64_t threshold_bytes() const { return threshold_; }
  uint64_t resident_threshold_bytes() const { return resident_threshold_; }
  uint64_t pressure_events() const { return events_; }
  bool under_pressure() const { return pressure_; }

  static constexpr uint64_t kFloorBytes = 4ull << 20;
  static constexpr std::chrono::seconds kCalmBeforeRaise{5};
  static constexpr std::chrono::seconds kRaiseEvery{2};

 private:
  const uint64_t limit_, initial_, floor_, headroom_, threshold_;
  const uint64_t resident_headroom_, resident_threshold_;  // 0: no resident limit
  uint64_t capacity_;
  uint64_t events_ = 0;
  bool pressure_ = false;
  Clock::time_point last_pressure_{}, last_raise_{};
};

class MemoryGuard {
 public:
  // Watches `limit` and sheds `cache` (REQUIRES: outlives this; null or a disabled cache: the
  // guard only counts), and holds this process's anonymous memory to `resident_limit_bytes`
  // (0: only the scope's). Registers itself as Running() until destroyed.
  MemoryGuard(ByteCache* cache, const MemoryLimit& limit, uint64_t resident_limit_bytes = 0);
  ~MemoryGuard();
  MemoryGuard(const MemoryGuard&) = delete;
  MemoryGuard& operator=(const MemoryGuard&) = delete;

  struct Stats {
    std::string watching;  // MemoryWatch::Describe(), "" when nothing can be read
    uint64_t used_bytes = 0, threshold_bytes = 0, pressure_events = 0;
    uint64_t resident_bytes = 0, resident_threshold_bytes = 0;  // 0: no resident limit
    uint64_t cache_capacity_bytes = 0, shed_bytes = 0;
  };
  Stats stats() const;
  // The guard of this process's mount (the stats file reports it), or nullptr.
  static const MemoryGuard* Running();

 private:
  void Run();

  ByteCache* const cache_;
  const MemoryWatch watch_;
  MemoryGuardPolicy policy_;  // the guard's thread only
  std::atomic<uint64_t> used_{0}, resident_{0}, events_{0}, capacity_{0}, shed_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace dsfs
