// TreeSession: the FUSE session of a classic mount of a Filesystem, and the options of the
// tree's FUSE layer. It creates the session with the callbacks of fuse/fuse_ops.h, installs
// libfuse's signal handlers, mounts, picks the transport (fuse/uring_transport.h), serves, and
// closes. What runs beside it (the prefetcher, the service monitor, the memory guard) is the
// mount's (mount/serve.h). No libfuse header here: the layers above see none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/worker_group.h"
#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "fuse/uring_transport.h"

namespace dsfs {

struct FuseOptions {
  SessionOptions session;  // threads, transport, nice, debug, fsname
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
  // What mount(2) is given instead of the mountpoint's path ("" = the path): the directory
  // `dsfs mount` checked and locked, by descriptor (/proc/self/fd/N), so that a path changed
  // in between (a symlink swapped) cannot have the mount land elsewhere. Only for root, which
  // mounts itself (libfuse's fusermount3 for users resolves the path on its own).
  std::string mount_target;
  // The mount is another process's (libfuse's "/dev/fd/N": a privileged parent opened /dev/fuse,
  // mounted it and passed the descriptor on, mount_target): the session never unmounts it,
  // it only closes its descriptor as it ends.
  bool parent_mounted = false;
  // Report to systemd ($NOTIFY_SOCKET): READY=1 once the mount answers, STATUS= every
  // status_interval_s, STOPPING=1 on the way out (see mount/service.h).
  bool notify_systemd = false;
  double status_interval_s = 5;
};

// libfuse's convention for a mount made by a privileged parent (fuse_session_mount): a
// mountpoint spelled "/dev/fd/N" is the /dev/fuse descriptor N, already mounted. True if `path`
// starts with "/dev/fd/"; *fd is then N, or -1 where the rest is not a plain decimal number.
bool IsFuseFdPath(std::string_view path, int* fd);

class TreeSession {
 public:
  // Creates the session of `fs` (whose userdata lives in the result), installs libfuse's
  // handlers of SIGINT and SIGTERM (they end Serve) and ignores SIGHUP (the service monitor
  // takes it later), mounts at options.mount_target or else `mountpoint` (`mountpoint` names
  // it in errors) and picks the transport, which reads the kernel's INIT (one log line says
  // which serves); the stats of `fs` show it. On error nothing is left.
  static Status Mount(Filesystem* fs, const std::string& mountpoint, const FuseOptions& options,
                      std::unique_ptr<TreeSession>* out);
  ~TreeSession();  // Close(false) if not closed; the transport, the handlers, the session
  TreeSession(const TreeSession&) = delete;
  TreeSession& operator=(const TreeSession&) = delete;

  // Stores `data` in the kernel's page cache of inode `ino` at `offset`
  // (fuse_lowlevel_notify_store): the prefetcher's push. 0 or -errno.
  int Push(uint64_t ino, uint64_t offset, std::string_view data);
  // What the callbacks tell of readdirplus (null: nothing pushed), and hand requests to
  // (common/worker_group.h; null: served on the request thread). REQUIRES: no request is
  // being served (before Serve, after it returns).
  void SetPrefetcher(Prefetcher* prefetcher);
  void SetWorkers(WorkerGroup* decoders, WorkerGroup* fetchers);

  // Serves requests until the filesystem is unmounted or a signal ends the session; returns
  // the classic loop's result (0 over io_uring).
  int Serve();
  // Ends the connection: with `unmount`, libfuse's unmount by the path it mounted (it closes
  // the device first, so a readiness probe still waiting fails instead of hanging); without,
  // only the device is closed (the caller detached the mount, or it is gone already).
  void Close(bool unmount);

 private:
  struct State;
  explicit TreeSession(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace dsfs
