// Mounting and unmounting: mountpoint checks, the background daemon, `dsfs umount`.
#pragma once

#include <functional>
#include <string>

#include "common/mount_table.h"
#include "common/status.h"
#include "fs/filesystem.h"
#include "mount/serve.h"
#include "store/store.h"

namespace dsfs {

struct MountConfig {
  std::string store_path;
  std::string mountpoint;
  bool foreground = false;   // serve in this process; otherwise fork a daemon
  bool kernel = false;       // -o kernel: the tree served by EROFS (kernel/kernel_mount.h)
  bool kernel_loop = false;  // -o kernel=loop: EROFS over a loop device, never over the file
  // RAM cache of decompressed chunks; kDefaultCache = an eighth of the memory limit
  // (common/memory_limit.h: the cgroup's, else physical memory).
  static constexpr uint64_t kDefaultCache = UINT64_MAX;
  uint64_t cache_bytes = kDefaultCache;
  // Bytes pushed into the kernel page cache after listings; kDefaultCache = a quarter of the
  // memory limit.
  uint64_t push_bytes = kDefaultCache;
  // Logging: a level name ("" = as set by --log-level) and a file to append to ("" = stderr in
  // the foreground, syslog for the background daemon). Applied by the dsfs command.
  std::string log_level;
  std::string log_file;
  // -o metrics_file=PATH (absolute): the mount's metrics for node_exporter (mount/metrics.h).
  std::string metrics_file;
  FuseOptions fuse;
  FsOptions fs;
  StoreOptions store;
  // -o cache_disk given (else a remote store gets kDefaultCacheDiskBytes; tools/cmd_mount.cc).
  bool cache_disk_set = false;
};
inline constexpr uint64_t kDefaultCacheDiskBytes = 8ull << 30;

// OK if `mountpoint` is an existing directory that nothing is mounted on. Otherwise NotFound,
// InvalidArgument (not a directory) or Busy (already mounted, or a dead FUSE mount left behind
// by a killed daemon), each with a one-line message that says what to do.
Status CheckMountpoint(const std::string& mountpoint);

// Opens the store and mounts it. In the foreground, serves until unmounted or signalled (and
// reports to systemd if $NOTIFY_SOCKET is set, see mount/service.h). In the background, returns
// OK only once the daemon's mount answers requests, or the daemon's error.
Status MountStore(const MountConfig& config);

// Unmounts a dsfs mount (also one whose daemon was killed): InvalidArgument for a path that
// is not a mountpoint or whose topmost mount is not of type kDsfsFsType (nothing else is ever
// unmounted). `lazy` detaches a busy mount. Otherwise returns once the daemon that served the
// mount has exited (and so closed the store), or after kDaemonExitWaitMs.
Status Unmount(const std::string& mountpoint, bool lazy);
inline constexpr int kDaemonExitWaitMs = 10000;

// The type /proc/self/mountinfo shows for every dsfs mount, whether made by `dsfs mount`, the
// mount helper (fstab, mount -t fuse.dsfs) or systemd, and also once its daemon is dead.
inline constexpr std::string_view kDsfsFsType = "fuse.dsfs";

}  // namespace dsfs
