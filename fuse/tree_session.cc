#include "fuse/tree_session.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "common/log.h"
#include "fuse/fuse_ops.h"
#include "fuse/fuse_session.h"

namespace dsfs {

struct TreeSession::State {
  FuseContext ctx;
  struct fuse_session* se = nullptr;
  // Null where the classic loop serves; the session outlives it (its custom I/O).
  std::unique_ptr<FuseTransport> transport;
  bool closed = false;
};

bool IsFuseFdPath(std::string_view path, int* fd) {
  constexpr std::string_view kPrefix = "/dev/fd/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view digits = path.substr(kPrefix.size());
  int n = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  const bool plain = !digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size() &&
                     n >= 0 && (digits[0] != '0' || digits.size() == 1);
  *fd = plain ? n : -1;
  return true;
}

TreeSession::TreeSession(std::unique_ptr<State> state) : s_(std::move(state)) {}

Status TreeSession::Mount(Filesystem* fs, const std::string& mountpoint, const FuseOptions& options,
                          std::unique_ptr<TreeSession>* out) {
  auto st = std::make_unique<State>(State{FuseContext{fs, options}});
  FuseArgs args("dsfs", options.session.fsname.empty() ? "dsfs" : options.session.fsname,
                options.allow_other, options.session.debug);
  static const fuse_lowlevel_ops ops = FuseOps();
  struct fuse_session* se = fuse_session_new(args.get(), &ops, sizeof(ops), &st->ctx);
  if (!se) return Status::InvalidArgument("cannot create FUSE session (bad options?)");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Status::IOError("cannot install signal handlers");
  }
  // libfuse ends the session on SIGHUP; dsfs reopens its log instead (ServiceMonitor). Until
  // the monitor runs, a SIGHUP is ignored rather than fatal.
  ::signal(SIGHUP, SIG_IGN);
  const std::string& target = options.mount_target.empty() ? mountpoint : options.mount_target;
  if (Status ms = MountSession(se, target, mountpoint); !ms.ok()) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return ms;
  }
  st->se = se;
  // Before anything reads from the session: the transport must see the kernel's INIT. It
  // decides there (and logs in one line) whether io_uring or the classic loop serves.
  TransportOptions to;
  to.mode = options.session.transport;
  to.classic_threads = std::max(1, options.session.threads);
  to.answer_ioctls = ops.ioctl == nullptr;
  to.parallel_dirops = true;
  std::string no_transport;
  st->transport = CreateTransportOrClassic(se, to, "", &no_transport);
  FuseTransport* tp = st->transport.get();
  fs->SetTransportStats([tp, no_transport] {
    Filesystem::TransportStats ts;
    if (!tp) {
      ts.description = no_transport;
      return ts;
    }
    TransportInfo info = tp->info();
    ts.description = info.Describe();
    ts.ring_requests = info.ring_requests;
    ts.classic_requests = info.classic_requests;
    ts.per_queue_requests = info.per_queue_requests;
    ts.ioctls = info.ioctls;
    return ts;
  });
  out->reset(new TreeSession(std::move(st)));
  return Status::OK();
}

TreeSession::~TreeSession() {
  if (!s_->closed) Close(false);
  // No request is served any more (the stats file included); the session outlives the
  // transport (its custom I/O), which the prefetcher's pushes went through until now.
  s_->ctx.fs->SetTransportStats(nullptr);
  s_->transport.reset();
  fuse_remove_signal_handlers(s_->se);
  fuse_session_destroy(s_->se);
}

int TreeSession::Push(uint64_t ino, uint64_t offset, std::string_view data) {
  struct fuse_bufvec bufv = FUSE_BUFVEC_INIT(data.size());
  bufv.buf[0].mem = const_cast<char*>(data.data());
  return fuse_lowlevel_notify_store(s_->se, ino, static_cast<off_t>(offset), &bufv,
                                    fuse_buf_copy_flags{});
}

void TreeSession::SetPrefetcher(Prefetcher* prefetcher) { s_->ctx.prefetcher = prefetcher; }

void TreeSession::SetWorkers(WorkerGroup* decoders, WorkerGroup* fetchers) {
  s_->ctx.decoders = decoders;
  s_->ctx.fetchers = fetchers;
}

int TreeSession::Serve() {
  return ServeFuseSession(s_->se, s_->transport.get(), s_->ctx.options.session.threads, "");
}

void TreeSession::Close(bool unmount) {
  if (s_->closed) return;
  s_->closed = true;
  if (unmount) {
    fuse_session_unmount(s_->se);
    return;
  }
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, fuse_session_fd(s_->se));
    ::close(null);
  }
}

}  // namespace dsfs
