#include <unistd.h>

#include <charconv>

#include "common/log.h"
#include "common/units.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

Status ParseNumber(std::string_view key, std::string_view value, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v > max) {
    return Status::InvalidArgument("mount option " + std::string(key) + "=" + std::string(value) +
                                   ": not a valid number");
  }
  *out = v;
  return Status::OK();
}

}  // namespace

Status ParseMountOptions(const std::string& list, MountConfig* config) {
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
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 256, &n));
      if (n == 0) return Status::InvalidArgument("mount option threads must be at least 1");
      config->fuse.threads = static_cast<int>(n);
    } else if (key == "cache_size") {
      uint64_t bytes;
      DSFS_RETURN_IF_ERROR(ParseSize(value, &bytes).WithContext("mount option cache_size"));
      config->cache_bytes = bytes;
    } else if (key == "push") {
      uint64_t bytes;
      DSFS_RETURN_IF_ERROR(ParseSize(value, &bytes).WithContext("mount option push"));
      config->push_bytes = bytes;
    } else if (key == "preload") {
      config->fuse.preload_path = value.empty() ? "/" : std::string(value);
    } else if (key == "timeout") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1000000000, &n));
      config->fuse.timeout_s = static_cast<double>(n);
    } else if (key == "os_readahead") {
      // Off by default (MDB_NORDAHEAD): random small reads must not pull in neighbours.
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1, &n));
      config->store.random_access = n == 0;
    } else if (key == "zero_open") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, 1, &n));
      config->fuse.zero_message_open = n == 1;
    } else if (key == "uid") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, UINT32_MAX - 1, &n));
      config->fs.uid = static_cast<uid_t>(n);
    } else if (key == "gid") {
      DSFS_RETURN_IF_ERROR(ParseNumber(key, value, UINT32_MAX - 1, &n));
      config->fs.gid = static_cast<gid_t>(n);
    } else if (key == "allow_other" && value.empty()) {
      config->fuse.allow_other = true;
    } else if (key == "debug" && value.empty()) {
      config->fuse.debug = true;
      SetLogLevel("debug");
    } else if (key == "ro" && value.empty()) {
      // Always read-only; accepted for fstab compatibility.
    } else if (key == "rw") {
      return Status::InvalidArgument("dsfs mounts are read-only: option 'rw' is not supported");
    } else {
      return Status::InvalidArgument("unknown mount option '" + std::string(opt) + "'");
    }
  }
  return Status::OK();
}

Status RunMount(const MountConfig& config) { return MountStore(config); }

Status RunUmount(const std::string& mountpoint, bool lazy) { return Unmount(mountpoint, lazy); }

}  // namespace dsfs
