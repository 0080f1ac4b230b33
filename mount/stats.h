// MountStats: the one place that assembles the stats of a mount, whichever path serves it
// (issue 30): the kernel path's block (-o kernel: the EROFS image and its server), the tree's
// own counters (fs/: requests and their latency, the RAM cache, decodes, the store's backend,
// and the FUSE transport the tree's session reports to it), the memory guard and the memory
// limit. Both stats files read it: /.dsfs/stats of a classic mount (the Filesystem's stats
// source) and the image server's of a -o kernel mount (KernelOptions::stats_json); so do the
// metrics file (mount/metrics.h) and, through either file, `dsfs stats`.
//
// The layout, one JSON object on one line (fs/stats.h, OneLineJson):
//   {"kernel": {...}            -o kernel only
//    "uptime_s", "transport", "requests", ..., "store", "latency"   the tree's (fs/stats.cc)
//    "memory_guard": {...}      while a guard runs (fs/memory_guard.h)
//    "memory_limit": {"bytes", "source"}}
//
// Thread safety: Object and Json are safe from any thread, concurrently with SetKernel.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/filesystem.h"
#include "kernel/kernel_mount.h"

namespace dsfs {

class MountStats {
 public:
  // Sets itself as `fs`'s stats source until destroyed. REQUIRES: `fs` outlives it, and no
  // request is served while it is made or destroyed (before the mount exists, after it ended).
  explicit MountStats(Filesystem* fs);
  ~MountStats();
  MountStats(const MountStats&) = delete;
  MountStats& operator=(const MountStats&) = delete;

  // The kernel path's block comes from `km` while it is set (null: none). REQUIRES: `km`
  // outlives its setting, i.e. SetKernel(nullptr) before it goes.
  void SetKernel(const KernelMount* km) { kernel_.store(km, std::memory_order_release); }

  nlohmann::ordered_json Object() const;
  std::string Json() const;  // Object() on one line

 private:
  Filesystem* fs_;
  std::atomic<const KernelMount*> kernel_{nullptr};
};

}  // namespace dsfs
