// dsfs stats MOUNTPOINT: the live counters of a mount, from its hidden /.dsfs/stats file.
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/mount_table.h"
#include "common/system.h"
#include "common/units.h"
#include "kernel/kernel_mount.h"
#include "mount/metrics.h"
#include "mount/mount.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

// Flattens the stats JSON into "a.b: value" lines (members of arrays by index); a string is
// shown without its quotes. The file is ours, so anything but a JSON object means it is not a
// dsfs stats file.
bool Flatten(std::string_view text, std::vector<std::pair<std::string, std::string>>* out) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return false;
  std::function<void(const std::string&, const nlohmann::ordered_json&)> walk =
      [&](const std::string& prefix, const nlohmann::ordered_json& v) {
        const bool scalars = v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) {
                               return e.is_primitive();
                             });
        if (scalars) {
          // A histogram's buckets (fs/stats.h): one line, the counts separated by spaces.
          std::string line;
          for (const auto& e : v) line += (line.empty() ? "" : " ") + e.dump();
          out->emplace_back(prefix, line);
        } else if (v.is_object() || v.is_array()) {
          size_t index = 0;
          for (auto it = v.begin(); it != v.end(); ++it, ++index) {
            std::string key = v.is_object() ? it.key() : std::to_string(index);
            walk(prefix.empty() ? key : prefix + "." + key, *it);
          }
        } else {
          out->emplace_back(prefix, v.is_string()
                                        ? v.get<std::string>()
                                        : v.dump(-1, ' ', false,
                                                 nlohmann::ordered_json::error_handler_t::replace));
        }
      };
  walk("", doc);
  return true;
}

}  // namespace

Status RunStats(const std::string& mountpoint_arg, bool json, std::ostream& out, bool prometheus) {
  // A symbolic link to the mountpoint names the mount too (-o kernel mounts are found by
  // their path in the mount table). A dead mount does not resolve (ENOTCONN): kept as given.
  std::string mountpoint = mountpoint_arg;
  if (char* real = ::realpath(mountpoint_arg.c_str(), nullptr)) {
    mountpoint = real;
    ::free(real);
  }
  std::string path = mountpoint + "/.dsfs/stats";
  const bool kernel = KernelStatsPath(mountpoint, &path);  // -o kernel: the image mount's
  // A regular file of at most a stats file's size (fs/filesystem.h: 16 KiB of JSON), read
  // before the mount is looked up: the open mounts an automount point (x-systemd.automount).
  constexpr size_t kMaxStatsBytes = 1 << 20;
  std::string text;
  const bool read = ReadSmallRegularFile(path, &text, kMaxStatsBytes + 1);
  const int read_errno = errno;
  if (!read && kernel && read_errno == EACCES) {
    return Status::FromErrno(EACCES, "the counters of the -o kernel mount " + mountpoint +
                                         " are root's (" + std::string(kKernelRunDir) +
                                         " is 0700): run dsfs stats as root");
  }
  if (!read && kernel) {
    return Status::NotFound(mountpoint + " is a -o kernel mount whose daemon is gone (no " + path +
                            "); clear it with: dsfs umount " + mountpoint);
  }
  // Only a dsfs mount's counters: a directory that merely holds .dsfs/stats (a FIFO, a link to
  // /dev/zero, a file of made-up figures) is not one.
  MountInfo m;
  const bool dsfs = kernel || (FindMount(mountpoint, &m) && m.fstype == kDsfsFsType);
  if (!read) {
    // statfs is never answered from a cache: it tells a dead daemon (mount/mount.cc).
    struct statfs sfs;
    if (dsfs && ::statfs(mountpoint.c_str(), &sfs) != 0 &&
        (errno == ENOTCONN || errno == ECONNABORTED)) {
      const std::string what = " is a dead dsfs mount (its daemon is gone); clear it with: ";
      return Status::NotFound(mountpoint + what + "dsfs umount " + mountpoint);
    }
    if (!dsfs) return Status::NotFound(mountpoint + " is not a dsfs mount");
    return Status::FromErrno(read_errno, path);
  }
  if (!dsfs) return Status::NotFound(mountpoint + " is not a dsfs mount");
  if (text.size() > kMaxStatsBytes) return Status::Corruption(path + ": not a dsfs stats file");
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (json) {
    out << text << "\n";
    return Status::OK();
  }
  if (prometheus) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
      return Status::Corruption(path + ": not a dsfs stats file");
    }
    out << PrometheusText(doc, mountpoint);
    return Status::OK();
  }
  std::vector<std::pair<std::string, std::string>> fields;
  if (!Flatten(text, &fields)) return Status::Corruption(path + ": not a dsfs stats file");
  // The memory limit on one line, as a size and where it came from.
  auto bytes = std::find_if(fields.begin(), fields.end(),
                            [](const auto& f) { return f.first == "memory_limit.bytes"; });
  if (bytes != fields.end() && std::next(bytes) != fields.end() &&
      std::next(bytes)->first == "memory_limit.source") {
    uint64_t n = std::strtoull(bytes->second.c_str(), nullptr, 10);
    bytes->first = "memory_limit";
    bytes->second = FormatBytes(n) + " (" + std::next(bytes)->second + ")";
    fields.erase(std::next(bytes));
  }
  size_t width = 0;
  for (const auto& [k, v] : fields) width = std::max(width, k.size());
  for (const auto& [k, v] : fields) {
    out << k << ":" << std::string(width + 2 - k.size(), ' ') << v << "\n";
  }
  return Status::OK();
}

}  // namespace dsfs
