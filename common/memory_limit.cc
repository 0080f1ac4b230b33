#include "common/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/system.h"
#include "common/units.h"

namespace dsfs {
namespace {

// cgroup v1 writes "no limit" as LONG_MAX rounded down to a page (9223372036854771712); any
// figure this large is no limit (no machine has 4 EiB).
constexpr uint64_t kUnlimitedFrom = 1ull << 62;
// The files read here are a few bytes (mountinfo a few hundred per mount): anything longer is
// not what it should be, and is not read whole.
constexpr size_t kMaxValueFileBytes = 64 << 10;
constexpr size_t kMaxListFileBytes = 16 << 20;

std::string Join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r + path;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A limit as a cgroup file holds it: a decimal number of bytes, or "max". False for no limit
// and for anything else (garbage is no limit, never an error).
bool ParseLimit(std::string_view text, uint64_t* bytes) {
  text = Trim(text);
  if (text.empty() || text == "max") return false;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  if (v >= kUnlimitedFrom) return false;
  *bytes = v;
  return true;
}

// Undoes mountinfo's octal escapes (\040 for a space, \134 for a backslash).
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct CgroupMount {
  std::string root;        // the cgroup the mount shows at its mountpoint
  std::string mountpoint;  // as the process sees it
};

// The first mount of `fstype` (and for v1, with `controller` among its super options) from
// mountinfo, whose root holds `cgroup_path` if any does.
bool FindCgroupMount(const std::vector<std::string>& mountinfo, std::string_view fstype,
                     std::string_view controller, const std::string& cgroup_path,
                     CgroupMount* found) {
  bool any = false;
  for (const std::string& line : mountinfo) {
    std::istringstream ls(line);
    std::string id, parent, dev, root, mp, field, type, source, super;
    if (!(ls >> id >> parent >> dev >> root >> mp)) continue;
    while (ls >> field && field != "-") {
    }
    if (field != "-" || !(ls >> type >> source >> super) || type != fstype) continue;
    if (!controller.empty()) {
      bool has = false;
      std::istringstream opts(super);
      std::string opt;
      while (std::getline(opts, opt, ',')) has = has || opt == controller;
      if (!has) continue;
    }
    CgroupMount m{Unescape(root), Unescape(mp)};
    if (m.mountpoint.empty() || m.mountpoint[0] != '/') continue;
    const bool holds = m.root == "/" || cgroup_path == m.root ||
                       cgroup_path.compare(0, m.root.size() + 1, m.root + "/") == 0;
    if (holds) {
      *found = m;
      return true;
    }
    if (!any) *found = m;
    any = true;
  }
  return any;
}

// The directories of the cgroup at `cgroup_path` and of its ancestors, child first, down to
// the mount's root (the mountpoint itself). A path outside the mount's root (or with ".."):
// only the mountpoint.
std::vector<std::string> CgroupDirs(const CgroupMount& m, const std::string& cgroup_path) {
  std::string rel;
  if (m.root == "/") {
    rel = cgroup_path;
  } else if (cgroup_path == m.root ||
             cgroup_path.compare(0, m.root.size() + 1, m.root + "/") == 0) {
    rel = cgroup_path.substr(m.root.size());
  }
  std::vector<std::string> parts;
  std::istringstream in(rel);
  std::string part;
  bool sane = true;
  while (std::getline(in, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") sane = false;
    parts.push_back(part);
  }
  if (!sane) parts.clear();
  std::string base = m.mountpoint;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::vector<std::string> dirs;
  for (size_t n = parts.size() + 1; n-- > 0;) {
    std::string d = base == "/" ? "" : base;
    for (size_t i = 0; i < n; ++i) d += "/" + parts[i];
    dirs.push_back(d.empty() ? "/" : d);
  }
  return dirs;
}

class Finder {
 public:
  explicit Finder(const std::string& root) : root_(root) {}

  // Takes the limit in the file at `path` (as the process sees it) if it is the smallest yet.
  void Consider(const std::string& path, std::string_view version) {
    std::string text;
    uint64_t v;
    if (ReadSmallFile(Join(root_, path), &text, kMaxValueFileBytes) && ParseLimit(text, &v)) {
      Take(v, std::string(version) + " " + path);
    }
  }
  // hierarchical_memory_limit in the v1 memory.stat at `path`.
  void ConsiderStat(const std::string& path) {
    std::string text;
    if (!ReadSmallFile(Join(root_, path), &text, kMaxValueFileBytes)) return;
    for (const std::string& line : Lines(text)) {
      std::string_view l = line;
      constexpr std::string_view kKey = "hierarchical_memory_limit ";
      uint64_t v;
      if (l.substr(0, kKey.size()) == kKey && ParseLimit(l.substr(kKey.size()), &v)) {
        Take(v, "cgroup v1 " + path + " hierarchical_memory_limit");
      }
    }
  }
  bool found() const { return found_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& source() const { return source_; }

 private:
  void Take(uint64_t v, std::string source) {
    if (found_ && v >= bytes_) return;
    found_ = true;
    bytes_ = v;
    source_ = std::move(source);
  }

  const std::string root_;
  bool found_ = false;
  uint64_t bytes_ = 0;
  std::string source_;
};

std::string Dir(const std::string& dir, const char* file) {
  return (dir == "/" ? "" : dir) + "/" + file;
}

}  // namespace

std::string MemoryLimit::ToString() const { return FormatBytes(bytes) + " (" + source + ")"; }

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 2ull << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

MemoryLimit FindMemoryLimit(const std::string& root, uint64_t physical_bytes) {
  if (physical_bytes == 0) physical_bytes = PhysicalMemoryBytes();
  Finder finder(root);
  std::string cgroup_text, mountinfo_text;
  if (ReadSmallFile(Join(root, "/proc/self/cgroup"), &cgroup_text, kMaxListFileBytes) &&
      ReadSmallFile(Join(root, "/proc/self/mountinfo"), &mountinfo_text, kMaxListFileBytes)) {
    const std::vector<std::string> mountinfo = Lines(mountinfo_text);
    for (const std::string& line : Lines(cgroup_text)) {
      // "ID:CONTROLLERS:PATH"; the path may hold colons itself.
      const size_t c1 = line.find(':');
      const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
      if (c2 == std::string::npos) continue;
      const std::string id = line.substr(0, c1);
      const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
      const std::string path = line.substr(c2 + 1);
      if (path.empty() || path[0] != '/') continue;
      CgroupMount m;
      if (id == "0" && controllers.empty()) {
        if (!FindCgroupMount(mountinfo, "cgroup2", "", path, &m)) continue;
        for (const std::string& d : CgroupDirs(m, path)) {
          finder.Consider(Dir(d, "memory.max"), "cgroup v2");
          finder.Consider(Dir(d, "memory.high"), "cgroup v2");
        }
      } else {
        bool memory = false;
        std::istringstream cs(controllers);
        std::string c;
        while (std::getline(cs, c, ',')) memory = memory || c == "memory";
        if (!memory || !FindCgroupMount(mountinfo, "cgroup", "memory", path, &m)) continue;
        // memory.stat last: on a tie the file that sets the limit is the one named.
        const std::vector<std::string> dirs = CgroupDirs(m, path);
        for (const std::string& d : dirs) {
          finder.Consider(Dir(d, "memory.limit_in_bytes"), "cgroup v1");
        }
        if (!dirs.empty()) finder.ConsiderStat(Dir(dirs.front(), "memory.stat"));
      }
    }
  }
  if (!finder.found() || finder.bytes() >= physical_bytes) {
    return MemoryLimit{physical_bytes, "physical memory"};
  }
  return MemoryLimit{finder.bytes(), finder.source()};
}

const MemoryLimit& ProcessMemoryLimit() {
  static const MemoryLimit limit = FindMemoryLimit();
  return limit;
}

MemoryBudgets BudgetsFor(uint64_t limit_bytes) {
  const uint64_t l = limit_bytes;
  MemoryBudgets b;
  b.resident_bytes = l / 2;
  // The kernel's page cache, which serves every repeated read, keeps what these leave (and
  // reclaims pushed pages like any others); the reader's own memory comes out of it too.
  b.cache_bytes = l / 8;
  b.push_bytes = l / 4;
  b.metadata_readahead_bytes = l / 8;
  b.metadata_cache_bytes = std::max(l / 32, std::min<uint64_t>(32ull << 20, l / 8));
  // The daemon's resident memory stays within half the limit: the tight cache leaves room in
  // it for the metadata cache and a 16th more (threads, buffers, the tables of the tree).
  b.tight_cache_bytes = std::min(l / 8 * 3, b.resident_bytes - b.metadata_cache_bytes - l / 16);
  b.remote_recent_bytes = std::clamp<uint64_t>(l / 64, 1ull << 20, 8ull << 20);
  b.remote_fetch_bytes = std::clamp<uint64_t>(l / 16, 2ull << 20, 64ull << 20);
  b.pack_sample_bytes = l / 16;
  b.pack_held_bytes = std::min<uint64_t>(32ull << 20, l / 16);
  b.pack_pipeline_bytes = l / 4;
  return b;
}

uint64_t CacheBytesFor(const MemoryBudgets& b, uint64_t limit_bytes, uint64_t footprint_bytes,
                       uint64_t hold_all_bytes) {
  if (footprint_bytes <= limit_bytes / 2) return b.cache_bytes;
  return std::max(b.cache_bytes, std::min(b.tight_cache_bytes, hold_all_bytes));
}

const MemoryBudgets& DefaultBudgets() {
  static const MemoryBudgets budgets = BudgetsFor(ProcessMemoryLimit().bytes);
  return budgets;
}

uint64_t MinimumMountLimitBytes(bool remote) { return (remote ? 48ull : 32ull) << 20; }

std::string MinimumLimitWarning(bool remote, const MemoryLimit& limit) {
  const uint64_t need = MinimumMountLimitBytes(remote);
  if (limit.bytes >= need) return "";
  return std::string("a mount of a store ") + (remote ? "in object storage" : "on disk") +
         " needs a memory limit of " + FormatBytes(need) + " at least; this one has " +
         limit.ToString() + ": the daemon may be killed (out of memory)";
}

std::string ExplicitSizeWarning(std::string_view what, uint64_t bytes, bool resident,
                                const MemoryLimit& limit) {
  const uint64_t allowed = resident ? limit.bytes / 2 : limit.bytes;
  if (bytes <= allowed) return "";
  std::string line = std::string(what) + "=" + FormatBytes(bytes) + " is more than " +
                     (resident ? "half " : "") + "the memory limit of " + limit.ToString() + ": ";
  line += resident ? "the daemon may be killed for it (out of memory); honoured"
                   : "the pages will push each other out; honoured";
  return line;
}

}  // namespace dsfs
