// ServeFuse: the assembly of a classic FUSE mount of a Filesystem. It creates and mounts the
// session (fs/fuse_session.h) with the callbacks of fs/fuse_ops.h, picks the transport
// (fs/uring_transport.h), starts the prefetcher (fs/prefetcher.h: push, readahead, preload),
// the metadata warming, the systemd monitor (fs/service.h) and the decode workers, sets the
// request threads' priority, serves, and takes it all down in order.
#pragma once

#include <functional>
#include <string>

#include "cache/byte_cache.h"
#include "common/status.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/prefetcher.h"
#include "fs/service.h"

namespace dsfs {

// Mounts `fs` at `mountpoint`, calls `on_mounted` once the kernel mount exists, then serves
// requests until the filesystem is unmounted or SIGINT/SIGTERM arrives; unmounts on the way
// out. SIGHUP reopens the log file and does not end the session. Errors are returned before
// `on_mounted` is called. `cache` is the RAM cache the mount gave the store and `fs` (null:
// none): readahead and preload fill it.
Status ServeFuse(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                 const FuseOptions& options, const std::function<void()>& on_mounted);

// -o preload=PATH: OK if PATH is a directory of the store; otherwise the one-line error the
// mount fails with (checked before mounting, classic and -o kernel alike).
Status CheckPreloadPath(const Filesystem& fs, const std::string& path);

// -o preload=PATH: has `prefetcher` decompress the store's subtree PATH into the RAM cache in
// the background (a log line if PATH is no directory of the store).
void StartPreload(const Filesystem& fs, const std::string& path, Prefetcher* prefetcher);

// What the systemd monitor of a mount at `mountpoint` is told by `options` (notify_systemd,
// status_interval_s): ServeFuse's and ServeKernel's.
ServiceMonitor::Options MonitorOptions(const std::string& mountpoint, const FuseOptions& options);

}  // namespace dsfs
