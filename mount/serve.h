// ServeFuse and ServeKernel: the assembly of a mount of a Filesystem, classic or -o kernel.
// ServeFuse: It creates and mounts the
// session (fuse/fuse_session.h) with the callbacks of fuse/fuse_ops.h, picks the transport
// (fuse/uring_transport.h), starts the prefetcher (fs/prefetcher.h: push, readahead, preload),
// the metadata warming, the systemd monitor (mount/service.h) and the decode workers, sets the
// request threads' priority, serves, and takes it all down in order.
#pragma once

#include <functional>
#include <string>

#include "cache/byte_cache.h"
#include "common/status.h"
#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "fuse/tree_session.h"
#include "kernel/kernel_mount.h"
#include "mount/service.h"

namespace dsfs {

// Fetch threads of a mount of a store in object storage, the tree's and the EROFS image's:
// requests that may fetch wait on the network, not on a core, so more threads than cores,
// bounded, so that a stalled endpoint holds these and never the request threads.
inline constexpr int kRemoteFetchThreads = 16;

// What the mount adds around either path.
struct ServeOptions {
  // -o metrics_file=PATH: the mount's metrics (mount/metrics.h), rewritten every
  // status_interval while it serves and removed as it ends; "": none. REQUIRES: checked
  // (MetricsFile::Check) before mounting.
  std::string metrics_file;
  // The most the daemon's own anonymous memory may hold before the memory guard sheds the RAM
  // cache (fs/memory_guard.h): MemoryBudgets::resident_bytes with a default cache; 0 (none)
  // with an explicit cache_size=, which only the memory limit holds.
  uint64_t resident_limit_bytes = 0;
};

// Mounts `fs` at `mountpoint`, calls `on_mounted` once the kernel mount exists, then serves
// requests until the filesystem is unmounted or SIGINT/SIGTERM arrives; unmounts on the way
// out. SIGHUP reopens the log file and does not end the session. Errors are returned before
// `on_mounted` is called. `cache` is the RAM cache the mount gave the store and `fs` (null:
// none): readahead and preload fill it.
// The stats file shows the mount's stats (mount/stats.h) while it serves.
Status ServeFuse(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                 const FuseOptions& options, const std::function<void()>& on_mounted,
                 const ServeOptions& serve = {});

// -o preload=PATH: OK if PATH is a directory of the store; otherwise the one-line error the
// mount fails with (checked before mounting, classic and -o kernel alike).
Status CheckPreloadPath(const Filesystem& fs, const std::string& path);

// -o preload=PATH: has `prefetcher` decompress the store's subtree PATH into the RAM cache in
// the background (a log line if PATH is no directory of the store).
void StartPreload(const Filesystem& fs, const std::string& path, Prefetcher* prefetcher);

// -o kernel: serves `fs` at `mountpoint` as EROFS (kernel/kernel_mount.h), as ServeFuse does
// for a classic mount: calls `on_mounted` once EROFS is mounted, then serves the image until
// the EROFS mount is gone or SIGINT/SIGTERM arrives (which unmount it, lazily if busy). Not
// root: an error that says so. Where this machine cannot (no loop devices, no EROFS, a jpeg-N
// view): one log line saying why, then a classic mount (ServeFuse with `fuse`): the one
// fallback of -o kernel.
Status ServeKernel(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                   const FuseOptions& fuse, const KernelOptions& kernel,
                   const std::function<void()>& on_mounted, const ServeOptions& serve = {});

}  // namespace dsfs
