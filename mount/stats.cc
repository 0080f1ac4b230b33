#include "mount/stats.h"

#include "common/memory_limit.h"
#include "fs/memory_guard.h"
#include "fs/stats.h"

namespace dsfs {

MountStats::MountStats(Filesystem* fs) : fs_(fs) {
  fs_->SetStatsSource([this] { return Json(); });
}

MountStats::~MountStats() { fs_->SetStatsSource(nullptr); }

nlohmann::ordered_json MountStats::Object() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  // The kernel path first: `dsfs stats` of a -o kernel mount opens with what serves it.
  if (const KernelMount* km = kernel_.load(std::memory_order_acquire))
    j["kernel"] = km->StatsObject();
  // Then the tree's own counters: its members follow.
  nlohmann::ordered_json tree = fs_->StatsObject();
  for (auto& [key, value] : tree.items()) j[key] = std::move(value);
  // The memory guard (fs/memory_guard.h): what it watches, how often pressure began, and the
  // RAM cache's capacity now (lowered under pressure, raised back slowly).
  if (const MemoryGuard* guard = MemoryGuard::Running()) {
    const MemoryGuard::Stats gs = guard->stats();
    j["memory_guard"] = {{"watching", gs.watching},
                         {"used_bytes", gs.used_bytes},
                         {"threshold_bytes", gs.threshold_bytes},
                         {"resident_bytes", gs.resident_bytes},
                         {"resident_threshold_bytes", gs.resident_threshold_bytes},
                         {"memory_pressure_events", gs.pressure_events},
                         {"cache_capacity_bytes", gs.cache_capacity_bytes},
                         {"shed_bytes", gs.shed_bytes}};
  }
  // What the default budgets (the cache's, the push's) were derived from, and where it was
  // found (common/memory_limit.h).
  const MemoryLimit& limit = ProcessMemoryLimit();
  j["memory_limit"] = {{"bytes", limit.bytes}, {"source", limit.source}};
  return j;
}

std::string MountStats::Json() const { return OneLineJson(Object()); }

}  // namespace dsfs
