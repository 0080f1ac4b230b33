#include "fs/serve.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/memory_limit.h"
#include "fs/fuse_session.h"
#include "fs/memory_guard.h"
#include "fs/own_mount.h"
#include "fs/prefetcher.h"
#include "fs/request_workers.h"
#include "fs/service.h"

namespace dsfs {

Status CheckPreloadPath(const Filesystem& fs, const std::string& path) {
  uint32_t ino;
  InodeRecord rec;
  Status ps = fs.store().LookupPath(path, &ino, &rec);
  if (ps.code() == Status::Code::kNotFound) {
    return Status::NotFound("mount option preload=" + path + ": no such directory in the store");
  }
  if (!ps.ok()) return ps.WithContext("mount option preload=" + path);
  if (!IsDir(rec)) {
    return Status::InvalidArgument("mount option preload=" + path +
                                   ": not a directory in the store");
  }
  return Status::OK();
}

void StartPreload(const Filesystem& fs, const std::string& path, Prefetcher* prefetcher) {
  uint32_t ino;
  InodeRecord rec;
  Status ps = fs.store().LookupPath(path, &ino, &rec);
  if (ps.ok() && IsDir(rec)) {
    prefetcher->Preload(fs.inode_space().FromStore(ino));
  } else {
    Log()->warn("preload: {}: not a directory in the store", path);
  }
}

ServiceMonitor::Options MonitorOptions(const std::string& mountpoint, const FuseOptions& options) {
  ServiceMonitor::Options mo;
  mo.mountpoint = mountpoint;
  mo.notify = options.notify_systemd;
  mo.status_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.05, options.status_interval_s) * 1000));
  return mo;
}

Status ServeFuse(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                 const FuseOptions& options, const std::function<void()>& on_mounted) {
  FuseContext ctx{fs, options};
  FuseArgs args("dsfs", options.fsname.empty() ? "dsfs" : options.fsname, options.allow_other,
                options.debug);
  fuse_lowlevel_ops ops = FuseOps();
  struct fuse_session* se = fuse_session_new(args.get(), &ops, sizeof(ops), &ctx);
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
  // As the session ends, this mount is unmounted, never what the mountpoint carries by then.
  const OwnMount own(mountpoint);
  // Before anything reads from the session: the transport must see the kernel's INIT. It
  // decides there (and logs in one line) whether io_uring or the classic loop serves.
  TransportOptions to;
  to.mode = options.transport;
  to.classic_threads = std::max(1, options.threads);
  to.answer_ioctls = ops.ioctl == nullptr;
  to.parallel_dirops = true;
  std::string no_transport;
  std::unique_ptr<FuseTransport> transport = CreateTransportOrClassic(se, to, "", &no_transport);
  FuseTransport* tp = transport.get();
  fs->SetTransportStats([tp, no_transport] {
    Filesystem::TransportStats st;
    if (!tp) {
      st.description = no_transport;
      return st;
    }
    TransportInfo info = tp->info();
    st.description = info.Describe();
    st.ring_requests = info.ring_requests;
    st.classic_requests = info.classic_requests;
    st.per_queue_requests = info.per_queue_requests;
    st.ioctls = info.ioctls;
    return st;
  });
  Prefetcher::Options po;
  po.push_budget_bytes = options.push_bytes;
  auto prefetcher = std::make_unique<Prefetcher>(
      &fs->store(), cache, fs->inode_space(), po,
      [se](uint64_t ino, uint64_t offset, std::string_view data) {
        struct fuse_bufvec bufv = FUSE_BUFVEC_INIT(data.size());
        bufv.buf[0].mem = const_cast<char*>(data.data());
        return fuse_lowlevel_notify_store(se, ino, static_cast<off_t>(offset), &bufv,
                                          fuse_buf_copy_flags{});
      },
      fs);
  ctx.prefetcher = prefetcher.get();
  fs->SetPrefetcher(prefetcher.get());
  if (!options.preload_path.empty()) StartPreload(*fs, options.preload_path, prefetcher.get());
  // Keep the metadata hot: read the tree's tables ahead in the background, so a cold scan or
  // stat storm after mounting does not wait on one page fault after another. Bounded so a
  // store with huge metadata does not push everything else out of the page cache.
  std::thread warm([store = &fs->store()] {
    uint64_t bytes = store->WillNeedMetadata(DefaultBudgets().metadata_readahead_bytes);
    Log()->debug("metadata read ahead: {} bytes", bytes);
  });
  // Sheds the RAM cache under memory pressure, before the kernel kills anything.
  MemoryGuard memory_guard(cache, ProcessMemoryLimit());
  if (on_mounted) on_mounted();
  ServiceMonitor monitor(MonitorOptions(mountpoint, options), [fs] { return fs->StatusLine(); });
  Status ms = monitor.Start();
  if (!ms.ok()) Log()->warn("service monitor: {}", ms.message());
  // The loop threads libfuse starts from here, and the transport's ring threads, inherit this
  // thread's nice value (per thread on Linux); the prefetch workers set their own (19) and stay
  // in the background.
  int old_nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  if (options.nice != old_nice &&
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), options.nice) != 0) {
    Log()->debug("cannot set the request threads' nice value to {}: {}", options.nice,
                 std::strerror(errno));
  }
  // No more decoders than cores: more would only hold more decoded images at once.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto decoders = std::make_unique<RequestWorkers>("dsfs-decode", std::min(options.threads, cores));
  ctx.decoders = decoders.get();
  // On a store in object storage, requests that may fetch (what they need is not in memory)
  // wait on the network, not on a core: more threads than cores, bounded, so a stalled
  // endpoint holds these and never the request threads, and slow fetches do not starve
  // decodes either. A local store has none (its requests never ask).
  constexpr int kFetchThreads = 16;
  std::unique_ptr<RequestWorkers> fetchers;
  if (fs->store().remote()) {
    fetchers = std::make_unique<RequestWorkers>("dsfs-fetch", kFetchThreads);
  }
  ctx.fetchers = fetchers.get();
  const int rc = ServeFuseSession(se, transport.get(), options.threads, "");
  // Before the session goes: every request handed over is answered (a fetch still queued
  // with EIO, a decode by running it; or the reply fails on the closed connection). A fetch
  // under way ends within the backend's deadline.
  ctx.fetchers = nullptr;
  fetchers.reset();
  ctx.decoders = nullptr;
  decoders.reset();
  monitor.Stopping();
  warm.join();
  Prefetcher::Stats ps = prefetcher->stats();
  Log()->info("unmounting: pushed {} files ({} bytes, {} retries, {} failures), readahead {} files",
              ps.pushed_files, ps.pushed_bytes, ps.push_retries, ps.push_failures,
              ps.readahead_files);
  // The workers use the session: stop them before it goes.
  fs->SetPrefetcher(nullptr);
  ctx.prefetcher = nullptr;
  prefetcher.reset();
  if (own.StillMounted() && options.mount_target.empty()) {
    // Closes the device first (a readiness probe still waiting fails instead of hanging
    // Stop), then detaches the mount by its path (fusermount3 -u for a user's mount).
    fuse_session_unmount(se);
  } else {
    // Not libfuse's unmount by the path it was given: that path may carry another mount by
    // now (this one was detached while still read, --lazy), or be a descriptor's, which
    // names the directory under the mount. Detached here if it is still this daemon's (not
    // if unmounted already, the common case: dsfs umount); the device is closed either way
    // (the session closes what stands in its place).
    if (!own.Unmount(MNT_DETACH)) {
      Log()->debug("{} no longer carries this daemon's mount: left alone", mountpoint);
    }
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, fuse_session_fd(se));
      ::close(null);
    }
  }
  monitor.Stop();
  // No request is served any more (the stats file included); the session outlives the
  // transport (its custom I/O), which the prefetcher's pushes went through until now.
  fs->SetTransportStats(nullptr);
  transport.reset();
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (rc != 0) Log()->info("FUSE session loop returned {}", rc);
  return Status::OK();
}

}  // namespace dsfs
