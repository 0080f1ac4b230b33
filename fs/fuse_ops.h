// The libfuse3 low-level callbacks of a mount: each unpacks its arguments, calls one Filesystem
// method and replies once (the model is libfuse's passthrough_hp.cc). Nothing here builds
// anything: the assembly of a mount (session, transport, prefetcher, preload, systemd status,
// thread priorities) is fs/serve.h.
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "fs/uring_transport.h"

namespace dsfs {

struct FuseOptions {
  int threads = 2;  // session loop threads (on 2 cores 1-2 beat libfuse's 10)
  // How requests reach the daemon (`-o transport=`): FUSE over io_uring where the kernel, its
  // enable_uring parameter and io_uring allow it, else the classic /dev/fuse loop with
  // `threads` threads (see fs/uring_transport.h). The choice is logged in one line and shown
  // in the stats file.
  TransportMode transport = TransportMode::kAuto;
  // Nice value of the session loop threads. Every request is a round trip a reader waits on
  // (Python's open() alone costs one: an ioctl FUSE cannot answer in the kernel), so under
  // CPU-bound readers (DataLoader workers) the threads must be scheduled first: -10 cut the
  // cost of a hot open from ~50 to ~12 us with two busy workers on two cores. Needs root or
  // CAP_SYS_NICE; without them the threads keep the caller's.
  int nice = -10;
  double timeout_s = 1e6;  // entry/attr cache timeouts: the tree never changes
  // Answer OPEN with ENOSYS where the kernel supports it (FUSE_CAP_NO_OPEN_SUPPORT): it then
  // sends no OPEN/FLUSH/RELEASE at all and keeps the page cache across opens, so a file read
  // once is served by the kernel alone.
  bool zero_message_open = true;
  // After readdirplus, push the directory's files into the kernel page cache (up to this many
  // bytes in total; 0 = never), so even the first read of a file sends no request.
  uint64_t push_bytes = 0;
  // Decompress this subtree of the store into the RAM cache after mounting ("" = nothing).
  std::string preload_path;
  bool allow_other = false;  // let other users in (kernel checks the stored modes)
  bool debug = false;        // libfuse request tracing to stderr
  std::string fsname;        // shown in /proc/mounts (the store path)
  // What mount(2) is given instead of the mountpoint's path ("" = the path): the directory
  // `dsfs mount` checked and locked, by descriptor (/proc/self/fd/N), so that a path changed
  // in between (a symlink swapped) cannot have the mount land elsewhere. Only for root, which
  // mounts itself (libfuse's fusermount3 for users resolves the path on its own).
  std::string mount_target;
  // Report to systemd ($NOTIFY_SOCKET): READY=1 once the mount answers, STATUS= every
  // status_interval_s, STOPPING=1 on the way out (see fs/service.h).
  bool notify_systemd = false;
  double status_interval_s = 5;
};

class RequestWorkers;

// What the callbacks serve from: the session's userdata, filled in by whoever assembles the
// mount. The pointers change only while no request is served.
struct FuseContext {
  Filesystem* fs;
  FuseOptions options;
  bool no_open = false;  // set in init: OPEN may be answered ENOSYS
  // Told of every complete readdirplus (it pushes the files); null: nothing pushed.
  Prefetcher* prefetcher = nullptr;
  // Requests that render an image not in the cache are handed to these, and on a remote
  // store those that may fetch what is not in memory to `fetchers` (fs/request_workers.h,
  // Filesystem::*Fetches); null: served on the request thread.
  RequestWorkers* decoders = nullptr;
  RequestWorkers* fetchers = nullptr;
};

// The callbacks. REQUIRES: the session's userdata is a FuseContext that outlives it.
fuse_lowlevel_ops FuseOps();

}  // namespace dsfs
