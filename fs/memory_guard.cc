#include "fs/memory_guard.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "common/system.h"
#include "common/units.h"

namespace dsfs {
namespace {

std::atomic<const MemoryGuard*> g_running{nullptr};

// A small file read whole with one read(2) (cgroup files are generated per read).
bool ParseU64(std::string_view s, uint64_t* v) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size();
}

// The value of `key` in "key value" lines (memory.stat; /proc/meminfo with `suffix` ":").
bool StatValue(std::string_view text, std::string_view key, uint64_t* v) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == '\t')) {
      std::string_view rest = line.substr(key.size());
      if (rest.size() > 3 && rest.substr(rest.size() - 3) == " kB") {
        if (!ParseU64(rest.substr(0, rest.size() - 3), v)) return false;
        *v <<= 10;
        return true;
      }
      return ParseU64(rest, v);
    }
    pos = eol + 1;
  }
  return false;
}

std::string Join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

}  // namespace

MemoryWatch MemoryWatch::For(const MemoryLimit& limit, const std::string& root) {
  MemoryWatch w;
  std::string_view src = limit.source;
  auto cgroup_dir = [&](std::string_view prefix, Kind kind) {
    if (src.substr(0, prefix.size()) != prefix) return false;
    std::string_view file = src.substr(prefix.size());
    constexpr std::string_view kHier = " hierarchical_memory_limit";
    if (file.size() > kHier.size() && file.substr(file.size() - kHier.size()) == kHier) {
      file.remove_suffix(kHier.size());
    }
    size_t slash = file.rfind('/');
    if (slash == std::string_view::npos || file.empty() || file[0] != '/') return false;
    w.kind = kind;
    w.dir = Join(root, std::string(slash == 0 ? "/" : file.substr(0, slash)));
    w.proc = Join(root, "/proc");
    return true;
  };
  if (cgroup_dir("cgroup v1 ", Kind::kCgroupV1) || cgroup_dir("cgroup v2 ", Kind::kCgroupV2)) {
    return w;
  }
  w.kind = Kind::kPhysical;
  w.dir = w.proc = Join(root, "/proc");
  return w;
}

bool MemoryWatch::ReadUsedBytes(uint64_t* used) const {
  std::string text, stat;
  uint64_t usage = 0, active = 0, inactive = 0;
  auto sub = [](const std::string& dir, const char* file) {
    return (dir == "/" ? std::string() : dir) + "/" + file;
  };
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kCgroupV1:
    case Kind::kCgroupV2: {
      const bool v1 = kind == Kind::kCgroupV1;
      if (!ReadSmallFile(sub(dir, v1 ? "memory.usage_in_bytes" : "memory.current"), &text) ||
          !ParseU64(text, &usage) || !ReadSmallFile(sub(dir, "memory.stat"), &stat)) {
        return false;
      }
      // v1's total_* count the whole subtree (the limit's, when it is an ancestor's); v2's
      // memory.stat always does.
      if (!StatValue(stat, v1 ? "total_active_file" : "active_file", &active) ||
          !StatValue(stat, v1 ? "total_inactive_file" : "inactive_file", &inactive)) {
        return false;
      }
      // File pages not yet written back cannot be reclaimed until they are (a cgroup v1 does
      // not throttle its writers: the S3 disk cache's blocks were tens of MB of them).
      uint64_t dirty = 0, writeback = 0;
      StatValue(stat, v1 ? "total_dirty" : "file_dirty", &dirty);
      StatValue(stat, v1 ? "total_writeback" : "file_writeback", &writeback);
      const uint64_t file = active + inactive - std::min(active + inactive, dirty + writeback);
      const uint64_t kernel = v1 ? V1ReclaimableKernelBytes() : V2ReclaimableKernelBytes(stat);
      *used = usage - std::min(usage, file + kernel);
      return true;
    }
    case Kind::kPhysical: {
      uint64_t total = 0, available = 0;
      if (!ReadSmallFile(sub(dir, "meminfo"), &text) || !StatValue(text, "MemTotal:", &total) ||
          !StatValue(text, "MemAvailable:", &available)) {
        return false;
      }
      *used = total - std::min(total, available);
      return true;
    }
  }
  return false;
}

uint64_t MemoryWatch::V2ReclaimableKernelBytes(const std::string& stat) {
  uint64_t slab = 0;
  return StatValue(stat, "slab_reclaimable", &slab) ? slab : 0;  // since Linux 4.14
}

uint64_t MemoryWatch::V1ReclaimableKernelBytes() const {
  std::string text, meminfo;
  uint64_t kmem = 0, reclaimable = 0, slab = 0, stacks = 0, tables = 0;
  if (!ReadSmallFile((dir == "/" ? std::string() : dir) + "/memory.kmem.usage_in_bytes", &text) ||
      !ParseU64(text, &kmem) || !ReadSmallFile(proc + "/meminfo", &meminfo) ||
      !StatValue(meminfo, "SReclaimable:", &reclaimable) || !StatValue(meminfo, "Slab:", &slab)) {
    return 0;
  }
  StatValue(meminfo, "KernelStack:", &stacks);
  StatValue(meminfo, "PageTables:", &tables);
  const uint64_t kernel = slab + stacks + tables;
  if (kernel == 0 || reclaimable > slab) return 0;
  // The cgroup's kernel memory in the share the whole system's is reclaimable (slab it can
  // shrink, of the slab, stacks and page tables it holds): kmem x SReclaimable / that.
  return static_cast<uint64_t>(static_cast<unsigned __int128>(kmem) * reclaimable / kernel);
}

bool MemoryWatch::ReadResidentAnonBytes(uint64_t* bytes, const std::string& statm) {
  std::string text;
  if (!ReadSmallFile(statm, &text)) return false;
  // "size resident shared text lib data dt", in pages.
  uint64_t pages[3];
  std::string_view rest = text;
  for (uint64_t& v : pages) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const size_t end = std::min(rest.find(' '), rest.find('\n'));
    if (!ParseU64(rest.substr(0, end), &v)) return false;
    rest.remove_prefix(std::min(end, rest.size()));
  }
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  *bytes = (pages[1] - std::min(pages[1], pages[2])) * page;
  return true;
}

std::string MemoryWatch::Describe() const {
  switch (kind) {
    case Kind::kCgroupV1:
      return "cgroup v1 " + dir;
    case Kind::kCgroupV2:
      return "cgroup v2 " + dir;
    case Kind::kPhysical:
      return "physical memory";
    case Kind::kNone:
      break;
  }
  return "";
}

MemoryGuardPolicy::MemoryGuardPolicy(uint64_t limit_bytes, uint64_t initial_capacity_bytes,
                                     uint64_t resident_limit_bytes)
    : limit_(limit_bytes),
      initial_(initial_capacity_bytes),
      floor_(std::min(initial_capacity_bytes, kFloorBytes)),
      headroom_(std::min(limit_bytes / 4, std::max(limit_bytes / 8, uint64_t{24} << 20))),
      threshold_(limit_bytes - headroom_),
      resident_headroom_(resident_limit_bytes / 16),
      resident_threshold_(resident_limit_bytes - resident_headroom_),
      capacity_(initial_capacity_bytes) {}

uint64_t MemoryGuardPolicy::Next(uint64_t used_bytes, uint64_t cache_bytes, Clock::time_point now,
                                 uint64_t resident_bytes) {
  // What is over a threshold and half its headroom more (0: under both).
  const bool resident_limited = resident_threshold_ > 0;
  uint64_t over = used_bytes > threshold_ ? used_bytes - threshold_ + headroom_ / 2 : 0;
  if (resident_limited && resident_bytes > resident_threshold_) {
    over = std::max(over, resident_bytes - resident_threshold_ + resident_headroom_ / 2);
  }
  if (over > 0) {
    if (!pressure_) ++events_;
    pressure_ = true;
    last_pressure_ = now;
    // Shed off what the cache holds now (a capacity far above its contents frees nothing); the
    // next sample sheds again if that was not enough. Halving instead left a 103 MiB limit's
    // cache at the floor for good: the rest of the scope (the reader, the kernel's inodes)
    // never fell a whole headroom below.
    const uint64_t held = std::min(capacity_, cache_bytes);
    capacity_ = std::max(floor_, held > over ? held - over : 0);
    return capacity_;
  }
  // Calm: below the threshold by half a headroom, where shedding aims.
  const bool calm =
      used_bytes + headroom_ / 2 < threshold_ &&
      (!resident_limited || resident_bytes + resident_headroom_ / 2 < resident_threshold_);
  if (pressure_ && calm) pressure_ = false;
  if (calm && capacity_ < initial_ && now - last_pressure_ >= kCalmBeforeRaise &&
      now - last_raise_ >= kRaiseEvery) {
    last_raise_ = now;
    capacity_ = std::min(initial_, capacity_ + std::max<uint64_t>(initial_ / 16, 1));
  }
  // Until the next sample the cache grows by at most the room left below the threshold: what
  // it holds plus that room (never below the floor), so that a burst of inserts between two
  // samples cannot carry the scope past its limit before the guard sees it.
  uint64_t room = threshold_ - used_bytes;
  if (resident_limited) room = std::min(room, resident_threshold_ - resident_bytes);
  return std::min(capacity_, std::max(floor_, cache_bytes + room));
}

MemoryGuard::MemoryGuard(ByteCache* cache, const MemoryLimit& limit, uint64_t resident_limit_bytes)
    : cache_(cache),
      watch_(MemoryWatch::For(limit)),
      policy_(limit.bytes, cache ? cache->capacity_bytes() : 0, resident_limit_bytes) {
  capacity_.store(policy_.capacity());
  uint64_t used;
  if (!watch_.ReadUsedBytes(&used)) {
    Log()->info("memory guard: cannot read the memory used in {}: not watching", watch_.Describe());
    g_running.store(this);
    return;
  }
  used_.store(used);
  g_running.store(this);
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "dsfs-memguard");
    Run();
  });
}

MemoryGuard::~MemoryGuard() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const MemoryGuard* self = this;
  g_running.compare_exchange_strong(self, nullptr);
}

void MemoryGuard::Run() {
  using std::chrono::milliseconds;
  std::unique_lock lock(mu_);
  for (;;) {
    uint64_t used = 0, resident = 0;
    const bool read = watch_.ReadUsedBytes(&used);
    if (read) used_.store(used, std::memory_order_relaxed);
    if (MemoryWatch::ReadResidentAnonBytes(&resident)) {
      resident_.store(resident, std::memory_order_relaxed);
    }
    const uint64_t threshold = policy_.threshold_bytes();
    if (read && cache_ && cache_->capacity_bytes() > 0) {
      const uint64_t before = cache_->stats().bytes;
      const uint64_t budget = policy_.capacity();
      const uint64_t was = capacity_.load(std::memory_order_relaxed);
      const uint64_t next = policy_.Next(used, before, MemoryGuardPolicy::Clock::now(), resident);
      // Before the cache is shed: a reader of stats() never sees a shed cache without its event.
      events_.store(policy_.pressure_events(), std::memory_order_relaxed);
      if (next != was) {
        lock.unlock();
        cache_->SetCapacity(next);
        const uint64_t after = cache_->stats().bytes;
        shed_.fetch_add(before - std::min(before, after), std::memory_order_relaxed);
        if (policy_.capacity() < budget) {
          ::malloc_trim(0);  // what was evicted goes back to the system, not to malloc's lists
          Log()->info(
              "memory pressure in {}: {} not reclaimable (threshold {}), the daemon's {} "
              "(threshold {}): RAM cache {} -> {}",
              watch_.Describe(), FormatBytes(used), FormatBytes(threshold), FormatBytes(resident),
              FormatBytes(policy_.resident_threshold_bytes()), FormatBytes(budget),
              FormatBytes(policy_.capacity()));
        }
        lock.lock();
        capacity_.store(next, std::memory_order_relaxed);
      }
    } else if (read) {
      policy_.Next(used, 0, MemoryGuardPolicy::Clock::now(), resident);  // counts events only
    }
    events_.store(policy_.pressure_events(), std::memory_order_relaxed);
    // Sampled more often once half the limit is used: the cache may grow by tens of MB a tick.
    const milliseconds interval(used > threshold / 2 ? 50 : 200);
    if (cv_.wait_for(lock, interval, [&] { return stop_; })) return;
  }
}

MemoryGuard::Stats MemoryGuard::stats() const {
  Stats st;
  st.watching = watch_.Describe();
  st.used_bytes = used_.load(std::memory_order_relaxed);
  st.threshold_bytes = policy_.threshold_bytes();
  st.pressure_events = events_.load(std::memory_order_relaxed);
  st.resident_bytes = resident_.load(std::memory_order_relaxed);
  st.resident_threshold_bytes = policy_.resident_threshold_bytes();
  st.cache_capacity_bytes = cache_ ? cache_->capacity_bytes() : 0;
  st.shed_bytes = shed_.load(std::memory_order_relaxed);
  return st;
}

const MemoryGuard* MemoryGuard::Running() { return g_running.load(); }

}  // namespace dsfs
