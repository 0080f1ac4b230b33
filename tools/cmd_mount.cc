#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "common/log.h"
#include "common/path.h"
#include "common/units.h"
#include "fs/views.h"
#include "s3/credentials.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

// A whole number from `min` to `max`; the error names the range.
Status ParseNumber(std::string_view key, std::string_view value, uint64_t min, uint64_t max,
                   uint64_t* out) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v < min ||
      v > max) {
    return Status::InvalidArgument("mount option " + std::string(key) + "=" + std::string(value) +
                                   ": not a whole number from " + std::to_string(min) + " to " +
                                   std::to_string(max));
  }
  *out = v;
  return Status::OK();
}

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status ParseSeconds(std::string_view key, std::string_view value, double min, double max,
                    double* out) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || !(v >= min) ||
      !(v <= max)) {
    return Status::InvalidArgument("mount option " + std::string(key) + "=" + std::string(value) +
                                   ": not a number of seconds from " + FormatNumber(min) + " to " +
                                   FormatNumber(max));
  }
  *out = v;
  return Status::OK();
}

// The options ParseOptionList knows, as dsfs mount --help lists them: named by the error for
// one it does not know.
constexpr const char* kMountOptionNames =
    "cache_size, push, cache_dir, cache_disk, s3_attempts, s3_timeout, s3_anonymous, "
    "s3_addressing, preload, threads, nice, transport, timeout, zero_open, os_readahead, "
    "allow_other, uid, gid, umask, view, kernel, log_level, log_file, status_interval, "
    "metrics_file, debug, ro";

// A size (cache_size=8G); the error says how one is written.
Status ParseSizeOption(std::string_view key, std::string_view value, uint64_t* bytes) {
  Status s = ParseSize(value, bytes);
  if (s.ok()) return s;
  return Status::InvalidArgument("mount option " + std::string(key) + ": " + s.message() + " (" +
                                 kSizeSyntax + ")");
}

// Options mount(8) passes to every helper (from fstab or -o) that mean nothing to a read-only
// FUSE mount, or that mount(8) and systemd act on themselves. "rw" is not one of them: `dsfs
// mount -o rw` is refused (ParseMountOptions); the helper mounts read-only and warns.
bool IsGenericMountOption(std::string_view key) {
  static const std::string_view kGeneric[] = {
      "defaults", "ro",        "auto",       "noauto",      "nofail",        "user",
      "nouser",   "users",     "owner",      "group",       "_netdev",       "nodev",
      "dev",      "nosuid",    "suid",       "noexec",      "exec",          "noatime",
      "atime",    "relatime",  "norelatime", "strictatime", "nostrictatime", "nodiratime",
      "diratime", "lazytime",  "nolazytime", "async",       "sync",          "dirsync",
      "silent",   "loud",      "nomand",     "mand",        "comment",       "nosymfollow",
      "iversion", "noiversion"};
  if (key.rfind("x-", 0) == 0 || key.rfind("X-", 0) == 0) return true;
  for (std::string_view g : kGeneric) {
    if (key == g) return true;
  }
  return false;
}

// The options of one list given so far: key -> the item as written.
using SeenOptions = std::map<std::string, std::string, std::less<>>;

// A repeated option is refused (the last one silently won before: -o view=bmp,view=npy or
// kernel,kernel=loop). "ro" is exempt: the systemd unit passes "-o ro,${OPTIONS}", and fstab
// lines and mount(8) may repeat it; it changes nothing.
Status NoteOption(std::string_view key, std::string_view opt, SeenOptions* seen) {
  if (key == "ro") return Status::OK();
  auto it = seen->find(key);
  if (it != seen->end()) {
    return Status::InvalidArgument("mount option " + std::string(key) + " given twice (" +
                                   it->second + " and " + std::string(opt) +
                                   "): give each option once");
  }
  seen->emplace(std::string(key), std::string(opt));
  return Status::OK();
}

Status ParseOptionList(const std::string& list, MountConfig* config, SeenOptions* seen);

}  // namespace

Status ParseMountOptions(const std::string& list, MountConfig* config) {
  SeenOptions seen;
  return ParseOptionList(list, config, &seen);
}

namespace {

Status ParseOptionList(const std::string& list, MountConfig* config, SeenOptions* seen) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string_view opt = std::string_view(list).substr(pos, comma - pos);
    pos = comma + 1;
    if (opt.empty()) continue;
    size_t eq = opt.find('=');
    std::string_view key = opt.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
    uint64_t n;
    if (key == "threads") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1, 256, &n));
      config->fuse.session.threads = static_cast<int>(n);
    } else if (key == "transport") {
      DSFS_RETURN_IF_ERROR(ParseTransportMode(value, &config->fuse.session.transport)
                               .WithContext("mount option transport"));
    } else if (key == "cache_size") {
      uint64_t bytes;
      DSFS_RETURN_IF_ERROR(ParseSizeOption(key, value, &bytes));
      config->cache_bytes = bytes;
    } else if (key == "push") {
      uint64_t bytes;
      DSFS_RETURN_IF_ERROR(ParseSizeOption(key, value, &bytes));
      config->push_bytes = bytes;
    } else if (key == "cache_dir") {
      if (value.empty()) return Status::InvalidArgument("mount option cache_dir needs a path");
      // The daemon changes to "/": a relative path is taken from the caller's directory.
      config->store.kv.cache_dir =
          std::filesystem::absolute(std::string(value)).lexically_normal().string();
    } else if (key == "cache_disk") {
      uint64_t bytes;
      DSFS_RETURN_IF_ERROR(ParseSizeOption(key, value, &bytes));
      config->store.kv.cache_disk_bytes = bytes;
      config->cache_disk_set = true;
    } else if (key == "s3_attempts") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1, 1000, &n));
      config->store.kv.remote_attempts = static_cast<int>(n);
    } else if (key == "s3_timeout") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1, 86400, &n));
      config->store.kv.remote_timeout_s = static_cast<int>(n);
    } else if (key == "s3_anonymous" && value.empty()) {
      config->store.kv.s3.anonymous = true;
    } else if (key == "s3_addressing") {
      DSFS_RETURN_IF_ERROR(
          ParseS3Addressing(value, &config->store.kv.s3.addressing).WithContext("mount option"));
    } else if (key == "preload") {
      config->fuse.preload_path = value.empty() ? "/" : std::string(value);
    } else if (key == "timeout") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 0, 1000000000, &n));
      config->fuse.timeout_s = static_cast<double>(n);
    } else if (key == "os_readahead") {
      // Off by default (MDB_NORDAHEAD): random small reads must not pull in neighbours.
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 0, 1, &n));
      config->store.kv.random_access = n == 0;
    } else if (key == "zero_open") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 0, 1, &n));
      config->fuse.zero_message_open = n == 1;
    } else if (key == "nice") {
      int64_t v = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v < -20 ||
          v > 19) {
        return Status::InvalidArgument("mount option nice=" + std::string(value) +
                                       ": not a nice value (-20 to 19)");
      }
      config->fuse.session.nice = static_cast<int>(v);
    } else if (key == "view") {
      DSFS_RETURN_IF_ERROR(ParseView(value, &config->fs.view).WithContext("mount option view"));
    } else if (key == "uid") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 0, UINT32_MAX - 1, &n));
      config->fs.uid = static_cast<uid_t>(n);
    } else if (key == "gid") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 0, UINT32_MAX - 1, &n));
      config->fs.gid = static_cast<gid_t>(n);
    } else if (key == "umask") {
      // Octal, as for other filesystems' umask= (0022, 077, 0).
      uint32_t mask = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), mask, 8);
      if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || mask > 0777) {
        return Status::InvalidArgument("mount option umask=" + std::string(value) +
                                       ": not an octal mode (0 to 0777)");
      }
      config->fs.umask = static_cast<mode_t>(mask);
    } else if (key == "kernel") {
      if (!value.empty() && value != "loop") {
        return Status::InvalidArgument("mount option kernel=" + std::string(value) +
                                       ": only kernel or kernel=loop");
      }
      config->kernel = true;
      config->kernel_loop = value == "loop";
    } else if (key == "allow_other" && value.empty()) {
      config->fuse.allow_other = true;
    } else if (key == "debug" && value.empty()) {
      config->fuse.session.debug = true;
      SetLogLevel("debug");
    } else if (key == "log_level") {
      if (!IsLogLevel(value)) {
        return Status::InvalidArgument("mount option log_level=" + std::string(value) +
                                       ": not one of trace, debug, info, warn, error, off");
      }
      config->log_level = std::string(value);
    } else if (key == "log_file") {
      if (value.empty()) return Status::InvalidArgument("mount option log_file needs a path");
      // The daemon changes to "/": a relative path is taken from the caller's directory.
      config->log_file = std::filesystem::absolute(std::string(value)).lexically_normal().string();
    } else if (key == "metrics_file") {
      if (value.empty()) return Status::InvalidArgument("mount option metrics_file needs a path");
      // The daemon changes to "/": a relative path is taken from the caller's directory.
      config->metrics_file =
          std::filesystem::absolute(std::string(value)).lexically_normal().string();
    } else if (key == "status_interval") {
      DSFS_RETURN_IF_ERROR(ParseSeconds(key, value, 0.1, 86400, &config->fuse.status_interval_s));
    } else if (key == "ro" && value.empty()) {
      // Always read-only; accepted for fstab compatibility.
    } else if (key == "rw") {
      return Status::InvalidArgument(
          "dsfs mounts are read-only: option 'rw' is not supported (mount with -o ro)");
    } else {
      return Status::InvalidArgument("unknown mount option '" + std::string(opt) + "' (one of " +
                                     kMountOptionNames + "; see dsfs mount --help)");
    }
    DSFS_RETURN_IF_ERROR(NoteOption(key, opt, seen));
  }
  return Status::OK();
}

}  // namespace

Status ParseFstabMountOptions(const std::string& list, bool sloppy, MountConfig* config,
                              std::vector<std::string>* ignored) {
  SeenOptions seen;  // across the whole list: each item is parsed on its own below
  for (std::string_view item : SplitList(list, ',')) {
    std::string opt(item);
    std::string key = opt.substr(0, opt.find('='));
    if (key == "remount" || key == "bind" || key == "rbind" || key == "move") {
      return Status::InvalidArgument("mount option '" + key + "' is not supported by dsfs");
    }
    // "rw" too: fstab's "defaults" makes mount(8) pass it. Mounted read-only all the same, as
    // squashfs and EROFS are (the helper says so in one line).
    if ((key != "ro" && IsGenericMountOption(key)) || opt == "rw") {
      if (ignored) ignored->push_back(opt);
      continue;
    }
    Status s = ParseOptionList(opt, config, &seen);
    if (!s.ok() && sloppy && s.message().rfind("unknown mount option", 0) == 0) {
      // mount -s: tolerate options this helper does not know.
      if (ignored) ignored->push_back(opt);
      continue;
    }
    DSFS_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status ParseMountHelperArgs(const std::vector<std::string>& args, MountHelperArgs* out) {
  std::vector<std::string> positional;
  std::string options;
  bool sloppy = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&](const char* what) -> Status {
      if (i + 1 >= args.size()) return Status::InvalidArgument(a + " needs " + what);
      ++i;
      return Status::OK();
    };
    if (a == "-o") {
      DSFS_RETURN_IF_ERROR(next("an option list"));
      options += (options.empty() ? "" : ",") + args[i];
    } else if (a.rfind("-o", 0) == 0) {
      options += (options.empty() ? "" : ",") + a.substr(2);
    } else if (a == "-t") {
      DSFS_RETURN_IF_ERROR(next("a filesystem type"));
      if (args[i] != "fuse.dsfs" && args[i] != "dsfs") {
        return Status::InvalidArgument("filesystem type " + args[i] +
                                       " is not dsfs (use -t fuse.dsfs)");
      }
    } else if (a == "-N" || a.rfind("--namespace", 0) == 0) {
      return Status::InvalidArgument("mounting in another namespace (-N) is not supported");
    } else if (a == "-h" || a == "--help") {
      out->help = true;
    } else if (a == "-V" || a == "--version") {
      out->version = true;
    } else if (a.size() >= 2 && a[0] == '-' && a != "-") {
      // mount(8) passes -s (sloppy), -f (fake), -n (no mtab), -v (verbose), possibly grouped.
      for (size_t k = 1; k < a.size(); ++k) {
        switch (a[k]) {
          case 's':
            sloppy = true;
            break;
          case 'f':
            out->fake = true;
            break;
          case 'v':
            out->verbose = true;
            break;
          case 'n':
          case 'r':  // read-only: dsfs always is
            break;
          case 'w':  // read-write: mounted read-only, with a warning (as "rw")
            out->asked_rw = true;
            break;
          default:
            return Status::InvalidArgument("unknown flag " + a);
        }
      }
    } else {
      positional.push_back(a);
    }
  }
  if (out->help) return Status::OK();
  if (positional.size() != 2) {
    return Status::InvalidArgument("expected STORE MOUNTPOINT [-o OPTIONS], got " +
                                   std::to_string(positional.size()) + " arguments");
  }
  out->config.store_path = positional[0];
  out->config.mountpoint = positional[1];
  out->config.foreground = false;
  DSFS_RETURN_IF_ERROR(ParseFstabMountOptions(options, sloppy, &out->config, &out->ignored));
  if (std::find(out->ignored.begin(), out->ignored.end(), "rw") != out->ignored.end()) {
    out->asked_rw = true;
  }
  return Status::OK();
}

Status RunMount(const MountConfig& config_in) {
  MountConfig config = config_in;
  DSFS_RETURN_IF_ERROR(CheckUrlScheme(config.store_path, kStoreSources));
  if (!config.log_file.empty()) DSFS_RETURN_IF_ERROR(LogToFile(config.log_file));
  if (!config.log_level.empty()) SetLogLevel(config.log_level);
  if (IsRemoteStore(config.store_path)) {
    // A store in object storage keeps what it fetched on the local disk unless told otherwise.
    if (!config.cache_disk_set) config.store.kv.cache_disk_bytes = kDefaultCacheDiskBytes;
    if (config.store.kv.cache_dir.empty() && config.store.kv.cache_disk_bytes > 0) {
      config.store.kv.cache_dir = DefaultCacheDir();
    }
  }
  return MountStore(config);
}

Status RunUmount(const std::string& mountpoint, bool lazy) { return Unmount(mountpoint, lazy); }

}  // namespace dsfs
