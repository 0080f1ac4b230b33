#include "mount/serve.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/memory_limit.h"
#include "common/system.h"
#include "fs/memory_guard.h"
#include "fs/prefetcher.h"
#include "mount/metrics.h"
#include "mount/own_mount.h"
#include "mount/service.h"
#include "mount/stats.h"

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

namespace {

// What the systemd monitor of a mount at `mountpoint` is told by `options` (notify_systemd,
// status_interval_s): ServeFuse's and ServeKernel's.
ServiceMonitor::Options MonitorOptions(const std::string& mountpoint, const FuseOptions& options) {
  ServiceMonitor::Options mo;
  mo.mountpoint = mountpoint;
  mo.notify = options.notify_systemd;
  mo.status_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.05, options.status_interval_s) * 1000));
  return mo;
}

// The metrics file of `serve` (null: none), written from `stats`.
std::unique_ptr<MetricsFile> NewMetricsFile(const ServeOptions& serve, const std::string& mnt,
                                            const MountStats& stats) {
  if (serve.metrics_file.empty()) return nullptr;
  return std::make_unique<MetricsFile>(serve.metrics_file, AbsolutePath(mnt),
                                       [&stats] { return stats.Object(); });
}

// The write end of the running ServeKernel's signal pipe (-1: none).
std::atomic<int> g_signal_fd{-1};

void OnStopSignal(int) {
  int fd = g_signal_fd.load();
  if (fd >= 0) (void)!::write(fd, "s", 1);
}

// ServeFuse with the mount's stats `stats` (ServeKernel's when it falls back).
Status ServeFuseWith(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                     const FuseOptions& options, const std::function<void()>& on_mounted,
                     const ServeOptions& serve, MountStats* stats) {
  std::unique_ptr<MetricsFile> metrics = NewMetricsFile(serve, mountpoint, *stats);
  std::unique_ptr<TreeSession> session;
  DSFS_RETURN_IF_ERROR(TreeSession::Mount(fs, mountpoint, options, &session));
  // As the session ends, this mount is unmounted, never what the mountpoint carries by then.
  const OwnMount own(options.parent_mounted ? std::string() : mountpoint);
  Prefetcher::Options po;
  po.push_budget_bytes = options.push_bytes;
  TreeSession* se = session.get();
  auto prefetcher = std::make_unique<Prefetcher>(
      &fs->store(), cache, fs->inode_space(), po,
      [se](uint64_t ino, uint64_t offset, std::string_view data) {
        return se->Push(ino, offset, data);
      },
      fs);
  session->SetPrefetcher(prefetcher.get());
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
  MemoryGuard memory_guard(cache, ProcessMemoryLimit(), serve.resident_limit_bytes);
  if (on_mounted) on_mounted();
  ServiceMonitor::Options mo = MonitorOptions(mountpoint, options);
  if (metrics) mo.on_interval = [m = metrics.get()] { m->Write(); };
  ServiceMonitor monitor(mo, [fs] { return fs->StatusLine(); });
  Status ms = monitor.Start();
  if (!ms.ok()) Log()->warn("service monitor: {}", ms.message());
  // The loop threads libfuse starts from here, and the transport's ring threads, inherit this
  // thread's nice value (per thread on Linux); the prefetch workers set their own (19) and stay
  // in the background.
  int old_nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  const int nice = options.session.nice;
  if (nice != old_nice && ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) != 0) {
    Log()->debug("cannot set the request threads' nice value to {}: {}", nice,
                 std::strerror(errno));
  }
  // No more decoders than cores: more would only hold more decoded images at once.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Every request handed over owes a reply: one still queued when the pool goes runs then
  // (a decode) or is answered EIO (a fetch, its `abandon`).
  auto decoders =
      std::make_unique<WorkerGroup>("dsfs-decode", std::min(options.session.threads, cores),
                                    WorkerGroup::kKeepNice, WorkerGroup::OnStop::kAbandon);
  // On a store in object storage, requests that may fetch (what they need is not in memory)
  // wait on the network, not on a core: more threads than cores, bounded, so a stalled
  // endpoint holds these and never the request threads, and slow fetches do not starve
  // decodes either. A local store has none (its requests never ask).
  std::unique_ptr<WorkerGroup> fetchers;
  if (fs->store().remote()) {
    fetchers = std::make_unique<WorkerGroup>("dsfs-fetch", kRemoteFetchThreads,
                                             WorkerGroup::kKeepNice, WorkerGroup::OnStop::kAbandon);
  }
  session->SetWorkers(decoders.get(), fetchers.get());
  const int rc = session->Serve();
  // Before the session goes: every request handed over is answered (a fetch still queued
  // with EIO, a decode by running it; or the reply fails on the closed connection). A fetch
  // under way ends within the backend's deadline.
  session->SetWorkers(nullptr, nullptr);
  fetchers.reset();
  decoders.reset();
  monitor.Stopping();
  warm.join();
  Prefetcher::Stats ps = prefetcher->stats();
  Log()->info("unmounting: pushed {} files ({} bytes, {} retries, {} failures), readahead {} files",
              ps.pushed_files, ps.pushed_bytes, ps.push_retries, ps.push_failures,
              ps.readahead_files);
  // The workers use the session: stop them before it goes.
  fs->SetPrefetcher(nullptr);
  session->SetPrefetcher(nullptr);
  prefetcher.reset();
  if (options.parent_mounted) {
    // The parent that mounted it unmounts it (it ended the session, or will find the mount
    // dead once the last descriptor is closed).
    session->Close(/*unmount=*/false);
  } else if (own.StillMounted() && options.mount_target.empty()) {
    session->Close(/*unmount=*/true);
  } else {
    // Not libfuse's unmount by the path it was given: that path may carry another mount by
    // now (this one was detached while still read, --lazy), or be a descriptor's, which
    // names the directory under the mount. Detached here if it is still this daemon's (not
    // if unmounted already, the common case: dsfs umount); the device is closed either way.
    if (!own.Unmount(MNT_DETACH)) {
      Log()->debug("{} no longer carries this daemon's mount: left alone", mountpoint);
    }
    session->Close(/*unmount=*/false);
  }
  monitor.Stop();
  session.reset();
  if (rc != 0) Log()->info("FUSE session loop returned {}", rc);
  return Status::OK();
}

}  // namespace

Status ServeFuse(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                 const FuseOptions& options, const std::function<void()>& on_mounted,
                 const ServeOptions& serve) {
  MountStats stats(fs);
  return ServeFuseWith(fs, cache, mountpoint, options, on_mounted, serve, &stats);
}

Status ServeKernel(Filesystem* fs, ByteCache* cache, const std::string& mnt,
                   const FuseOptions& fuse, const KernelOptions& kernel_in,
                   const std::function<void()>& on_mounted, const ServeOptions& serve) {
  DSFS_RETURN_IF_ERROR(CheckKernelMountAllowed());
  // The stats of either path, assembled in one place; the image server's stats file too.
  MountStats stats(fs);
  KernelOptions kernel = kernel_in;
  kernel.stats_json = [&stats] { return stats.Json(); };
  // mount(2) is given the directory dsfs mount checked and locked (FuseOptions::mount_target).
  const std::string& target = fuse.mount_target.empty() ? mnt : fuse.mount_target;
  // What a classic mount's FUSE layer does and EROFS does in the kernel by itself.
  {
    const FuseOptions plain;
    std::string moot;
    if (fuse.timeout_s != plain.timeout_s) moot += " timeout";
    if (fuse.zero_message_open != plain.zero_message_open) moot += " zero_open";
    if (!moot.empty()) {
      Log()->warn("-o kernel: EROFS caches entries and opens itself; ignored:{}", moot);
    }
  }
  // SIGINT/SIGTERM end the serving loop below through a self-pipe. A handler, not a blocked
  // mask: threads started before this one (a RocksDB store's) would otherwise take the signal
  // with its default action. Until the service monitor takes SIGHUP, it is ignored.
  int sig_pipe[2];
  if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno(errno, "pipe");
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } close_sig0{sig_pipe[0]}, close_sig1{sig_pipe[1]};
  g_signal_fd.store(sig_pipe[1]);
  struct sigaction sa, old_int, old_term;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  struct RestoreSignals {
    struct sigaction si, st;
    ~RestoreSignals() {
      ::sigaction(SIGINT, &si, nullptr);
      ::sigaction(SIGTERM, &st, nullptr);
      g_signal_fd.store(-1);
    }
  } restore_signals{old_int, old_term};
  ::signal(SIGHUP, SIG_IGN);

  std::unique_ptr<KernelMount> km;
  Status s = KernelMount::Mount(fs, cache, mnt, target, kernel, &km);
  if (s.code() == Status::Code::kNotSupported) {
    Log()->warn("-o kernel: {}; mounting with FUSE", s.message());
    return ServeFuseWith(fs, cache, mnt, fuse, on_mounted, serve, &stats);
  }
  DSFS_RETURN_IF_ERROR(s);
  stats.SetKernel(km.get());
  struct ForgetKernel {
    MountStats* stats;
    ~ForgetKernel() { stats->SetKernel(nullptr); }
  } forget_kernel{&stats};
  std::unique_ptr<MetricsFile> metrics = NewMetricsFile(serve, mnt, stats);
  const OwnMount own(mnt);  // a signal unmounts this mount, never what mnt carries later
  // -o preload: the store's RAM cache, which the image's reads come from, as in a classic mount.
  std::unique_ptr<Prefetcher> preloader;
  if (!fuse.preload_path.empty()) {
    preloader = std::make_unique<Prefetcher>(&fs->store(), cache, fs->inode_space(),
                                             Prefetcher::Options{}, nullptr);
    fs->SetPrefetcher(preloader.get());  // its progress in the stats
    StartPreload(*fs, fuse.preload_path, preloader.get());
  }
  struct ForgetPreloader {
    Filesystem* fs;
    ~ForgetPreloader() { fs->SetPrefetcher(nullptr); }
  } forget_preloader{fs};
  // Sheds the RAM cache the image's reads come from under memory pressure (fs/memory_guard.h).
  MemoryGuard memory_guard(cache, ProcessMemoryLimit(), serve.resident_limit_bytes);
  if (on_mounted) on_mounted();

  ServiceMonitor::Options mo = MonitorOptions(mnt, fuse);
  mo.fs_magic = kErofsMagic;
  if (metrics) mo.on_interval = [m = metrics.get()] { m->Write(); };
  ServiceMonitor monitor(mo, [&km] { return km->StatusLine(); });
  Status ms = monitor.Start();
  if (!ms.ok()) Log()->warn("service monitor: {}", ms.message());

  // Serve until the image is let go of (or the private mount is gone), or a signal.
  const bool signalled = km->ServeUntil(sig_pipe[0]);
  monitor.Stopping();
  if (signalled) {
    Log()->info("signalled: unmounting {}", mnt);
    if (own.Unmount(0)) {
    } else if (errno == EBUSY) {
      Log()->warn("{} is busy: detached; served until its last file closes", mnt);
      own.Unmount(MNT_DETACH);
    } else if (errno == 0) {
      // Detached before (dsfs umount --lazy) and still read: what is there now is not ours.
      Log()->info("{} no longer carries this daemon's mount: left alone", mnt);
    }
  }
  km->Finish();
  monitor.Stop();
  return Status::OK();
}

}  // namespace dsfs
