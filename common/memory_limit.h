// The memory this process is given (its cgroup's limit, else physical RAM) and the default
// budgets derived from it: the one place the fractions live.
//
// A training job runs inside a memory limit (a Kubernetes pod, a Slurm job, `docker run
// --memory`, a systemd unit's MemoryMax=) on a node with far more RAM; the page cache its reads
// fill is charged to that limit too. A budget sized from sysconf's physical RAM there gets the
// daemon OOM-killed, so every default budget comes from MemoryLimit instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsfs {

struct MemoryLimit {
  uint64_t bytes = 0;  // never more than physical memory
  // Where the figure came from: "cgroup v2 /sys/fs/cgroup/job/memory.high",
  // "cgroup v1 /sys/fs/cgroup/memory/job/memory.limit_in_bytes", "cgroup v1
  // /sys/fs/cgroup/memory/job/memory.stat hierarchical_memory_limit" or "physical memory".
  std::string source;
  // "167.8 MB (cgroup v1 /sys/fs/cgroup/memory/job/memory.limit_in_bytes)"
  std::string ToString() const;
};

// Physical RAM (sysconf); 2 GiB when sysconf does not say.
uint64_t PhysicalMemoryBytes();

// The smallest of the limits that apply to this process:
//   cgroup v2: memory.max and memory.high of the process's cgroup (the "0::PATH" line of
//     /proc/self/cgroup) and of each ancestor up to the unified hierarchy's mount (found in
//     /proc/self/mountinfo, wherever it is mounted); "max" is no limit.
//   cgroup v1: memory.limit_in_bytes of the memory controller's cgroup and of each ancestor,
//     and hierarchical_memory_limit in its memory.stat; values near 2^63 are no limit.
//   Both are read on a hybrid system; then physical memory (`physical_bytes`, 0 = sysconf),
//   which caps them all.
// A cgroup namespace shows the process's cgroup as "/": the files at the mount's root are then
// its limits, and are read like any other. `root` is prefixed to every path read (tests point
// it at a fake tree holding proc/self/... and sys/fs/cgroup/...); `source` names the file as
// the process sees it, without the prefix. Never fails: a file that is missing, unreadable or
// holds anything but a number is skipped.
MemoryLimit FindMemoryLimit(const std::string& root = "/", uint64_t physical_bytes = 0);

// FindMemoryLimit("/"), found once per process (the first call). Thread-safe.
const MemoryLimit& ProcessMemoryLimit();

// The default budgets for a process given `limit_bytes`. Explicit sizes (mount options) take
// their place; see ExplicitSizeWarning.
struct MemoryBudgets {
  // The daemon's own anonymous memory, which every budget below that it holds fits in: half.
  // The memory guard holds it there (fs/memory_guard.h) where the RAM cache's size is a default.
  uint64_t resident_bytes = 0;
  // The mount's RAM cache of decompressed chunks (daemon RSS): an eighth, where the page cache
  // can keep the tree's files (CacheBytesFor).
  uint64_t cache_bytes = 0;
  // Its most where it cannot: three eighths, less where the metadata cache and a 16th more
  // would take the daemon over half the limit (below 512 MiB: 5/16 at 96 MiB).
  uint64_t tight_cache_bytes = 0;
  // Files pushed into the kernel's page cache after a listing, and -o kernel's read-ahead into
  // the image's page cache (reclaimable, but charged to the limit): a quarter.
  uint64_t push_bytes = 0;
  // The store's metadata tables read ahead into the page cache after mounting: an eighth.
  uint64_t metadata_readahead_bytes = 0;
  // The store's cache of decompressed metadata segments: a 32nd, at least 32 MiB unless that
  // is more than an eighth.
  uint64_t metadata_cache_bytes = 0;
  // A store in object storage (backend/s3/s3_kv_reader.cc), what the RAM cache's guard cannot
  // shed and so is sized here: the window of values read last (a 64th, 1 to 8 MiB) and the
  // bytes of fetches in flight at once, each GET's blocks and the value taken from them (a
  // 16th, 2 to 64 MiB: a 1 MiB block and its value, at least; 16 fetch threads of a block
  // each, at most).
  uint64_t remote_recent_bytes = 0;
  uint64_t remote_fetch_bytes = 0;
  // dsfs pack: sample files held to train the dictionary (at most a 16th, and never more than
  // pack's own cap), the other files held meanwhile (a 16th, at most 32 MiB) and the batches
  // in flight through the compressor (a quarter).
  uint64_t pack_sample_bytes = 0;
  uint64_t pack_held_bytes = 0;
  uint64_t pack_pipeline_bytes = 0;
};
MemoryBudgets BudgetsFor(uint64_t limit_bytes);

// The RAM cache's default budget for a tree whose files fill at least `footprint_bytes` of page
// cache (a page per file) and whose files a cache of `hold_all_bytes` holds all of, inside
// `limit_bytes`. Where the page cache can keep the files (their footprint is at most half the
// limit), `b.cache_bytes`: the kernel serves every repeated read. Where it cannot, the RAM cache
// takes their place, up to `b.tight_cache_bytes` and no more than it needs to hold them all: it
// keeps a 1 KiB file in about 1.1 KiB where the page cache takes 4 KiB, so the page cache's
// misses are served from RAM instead of decompressing groups (bench/memory_bench.py: at half the
// footprint, 1.6x the reads of an eighth, classic and -o kernel).
uint64_t CacheBytesFor(const MemoryBudgets& b, uint64_t limit_bytes, uint64_t footprint_bytes,
                       uint64_t hold_all_bytes);
// BudgetsFor(ProcessMemoryLimit().bytes).
const MemoryBudgets& DefaultBudgets();

// The smallest memory limit a mount lives in: its daemon at its floor (the RAM cache at the
// guard's 4 MiB, the store's metadata cache, the S3 reader's window and fetches, the request
// threads' buffers and its code) beside a reader of two threads and the kernel's share, measured
// (bench/memory_floor.py: every file of a tree of 8,000 small files and 4 large ones read three
// times, no OOM kill). `remote`: a store in object storage.
uint64_t MinimumMountLimitBytes(bool remote);
// One line if `limit` is below MinimumMountLimitBytes(remote), else "": what the mount needs and
// what it has (`dsfs mount` prints it at start).
std::string MinimumLimitWarning(bool remote, const MemoryLimit& limit);

// An explicit size of `what` (a mount option, e.g. "cache_size") that the limit does not
// allow: "" if it does, else one line saying so. `resident` sizes are the daemon's own memory
// (more than half the limit leaves too little for the reader and the page cache); others are
// page cache (more than the whole limit only evicts itself).
std::string ExplicitSizeWarning(std::string_view what, uint64_t bytes, bool resident,
                                const MemoryLimit& limit);

}  // namespace dsfs
