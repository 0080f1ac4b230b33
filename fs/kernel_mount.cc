#include "fs/kernel_mount.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/memory_limit.h"
#include "erofs/image.h"
#include "erofs/store_tree.h"
#include "fs/image_server.h"
#include "fs/loop_device.h"
#include "fs/memory_guard.h"
#include "fs/own_mount.h"
#include "fs/service.h"
#include "fs/stats.h"
#include "fs/view_tree.h"

namespace dsfs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------------------------
// Paths and the mount table

// Absolute path without resolving the last component (which may be a dead mount).
std::string AbsPath(const std::string& path) {
  // An empty path has no absolute form (std::filesystem::absolute throws): it names no mount.
  if (path.empty()) return path;
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  std::string name = p.filename().string();
  if (name.empty()) p = p.parent_path();
  char buf[PATH_MAX];
  if (::realpath(p.parent_path().c_str(), buf) == nullptr) return p.string();
  std::string r = buf;
  if (r != "/") r += "/";
  return p.filename().empty() ? std::string(buf) : r + p.filename().string();
}

struct MountEntry {
  std::string mountpoint, fstype, source;
};

std::vector<MountEntry> Mounts() {
  std::vector<MountEntry> out;
  ForEachMount([&](const std::string& mp, const MountInfo& m) {
    out.push_back({mp, m.fstype, m.source});
  });
  return out;
}

// The top mount at `path` (the last listed), if any.
std::optional<MountEntry> TopMountAt(const std::string& path) {
  std::optional<MountEntry> top;
  for (auto& e : Mounts()) {
    if (e.mountpoint == path) top = e;
  }
  return top;
}

bool IsMountedAt(const std::string& path) { return TopMountAt(path).has_value(); }

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The private mountpoint's name for mountpoint directory `st` and daemon `pid`.
std::string PrivatePrefix(const struct stat& st) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llx-%llu-", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return std::string(kKernelRunDir) + "/" + buf;
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie has exited: only its parent's wait is missing.
  std::string stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return !(paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

pid_t PidOfPrivateDir(const std::string& dir) {
  size_t dash = dir.rfind('-');
  if (dash == std::string::npos) return -1;
  return static_cast<pid_t>(std::atol(dir.c_str() + dash + 1));
}

bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

// If `backing` is the image of a dsfs image mount, its directory.
std::optional<std::string> PrivateDirOfImage(const std::string& backing) {
  const std::string prefix = std::string(kKernelRunDir) + "/";
  const std::string suffix = std::string("/") + ImageServer::kImageName;
  if (backing.rfind(prefix, 0) != 0) return std::nullopt;
  if (backing.size() <= prefix.size() + suffix.size() ||
      backing.compare(backing.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  std::string dir = backing.substr(0, backing.size() - suffix.size());
  if (dir.find('/', prefix.size()) != std::string::npos) return std::nullopt;
  return dir;
}

// The private directory of the -o kernel mount at `abs`, if that is what is mounted there.
// *erofs is set for any EROFS mount at `abs`; *loop to its loop device name when EROFS reads
// a loop device ("" when it reads the image file itself).
std::optional<std::string> KernelLayers(const std::string& abs, bool* erofs, std::string* loop) {
  *erofs = false;
  loop->clear();
  std::optional<MountEntry> top = TopMountAt(abs);
  if (!top || top->fstype != "erofs") return std::nullopt;
  *erofs = true;
  *loop = LoopDeviceName(top->source);
  return PrivateDirOfImage(loop->empty() ? top->source : LoopBackingFile(*loop));
}

// ---------------------------------------------------------------------------------------------
// The image's tree

// Without allow_other a classic mount lets only the mounting user in; in EROFS the kernel
// applies the modes, so the root directory is the mounting user's, with its group and other
// bits cleared (with uid= another user, that user would otherwise be let in).
class PrivateRootTree : public erofs::ImageTree {
 public:
  explicit PrivateRootTree(std::unique_ptr<erofs::ImageTree> base) : base_(std::move(base)) {}
  uint32_t inode_count() const override { return base_->inode_count(); }
  Status GetInode(uint32_t ino, erofs::ImageInode* inode) const override {
    DSFS_RETURN_IF_ERROR(base_->GetInode(ino, inode));
    if (ino == 0) {
      inode->mode &= ~uint32_t{077};
      inode->uid = ::geteuid();
      inode->gid = ::getegid();
    }
    return Status::OK();
  }
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override {
    return base_->GetName(ino, scratch, name);
  }
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override {
    return base_->ReadData(ino, offset, len, dst);
  }

 private:
  std::unique_ptr<erofs::ImageTree> base_;
};

// Removes what dead -o kernel mounts of the directory `st` left in /run/dsfs.
void ClearStalePrivateDirs(const struct stat& st, bool* found) {
  const std::string prefix = PrivatePrefix(st);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kKernelRunDir, ec)) {
    const std::string dir = entry.path().string();
    if (dir.rfind(prefix, 0) != 0 || ProcessAlive(PidOfPrivateDir(dir))) continue;
    if (found) *found = true;
    if (IsMountedAt(dir)) ::umount2(dir.c_str(), MNT_DETACH);
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      Log()->warn("cannot remove {}: {}", dir, std::strerror(errno));
    }
  }
}

std::string KernelStatsJson(const Filesystem* fs, const erofs::Image& image,
                            const ImageServer* server, const std::string& loop, bool directio,
                            double layout_s) {
  nlohmann::ordered_json kernel = {{"image_bytes", image.size_bytes()},
                                   {"inodes", image.inode_count()},
                                   {"layout_bytes", image.memory_bytes()},
                                   {"layout_ms", static_cast<uint64_t>(layout_s * 1000)},
                                   // "file": EROFS reads the image file itself; or "loopN"
                                   {"backing", loop.empty() ? std::string("file") : loop},
                                   // 1: EROFS reads the image file with direct I/O (no copy
                                   // of it in the image's page cache)
                                   {"directio", directio ? 1 : 0}};
  if (server) {
    const ImageServer::Counters& c = server->counters();
    kernel["transport"] = server->transport();
    kernel["image_reads"] = c.reads.load(std::memory_order_relaxed);
    kernel["image_bytes_read"] = c.bytes_read.load(std::memory_order_relaxed);
    kernel["image_read_errors"] = c.errors.load(std::memory_order_relaxed);
    if (const ImageReadahead* ra = server->readahead()) {
      const ImageReadahead::Stats st = ra->stats();
      kernel["readahead"] = {{"dirs", st.dirs},
                             {"bytes", st.bytes},
                             {"failures", st.failures},
                             {"skipped_files", st.skipped_files},
                             {"budget_bytes", st.budget_bytes}};
    }
  }
  nlohmann::ordered_json j = {{"kernel", std::move(kernel)}};
  // Then the filesystem's own counters (the store's cache, view reads): its members follow.
  const nlohmann::ordered_json rest = fs->StatsObject();
  for (const auto& [key, value] : rest.items()) j[key] = value;
  return OneLineJson(j);
}

// The write end of the running ServeKernel's signal pipe (-1: none).
std::atomic<int> g_signal_fd{-1};

void OnStopSignal(int) {
  int fd = g_signal_fd.load();
  if (fd >= 0) (void)!::write(fd, "s", 1);
}

}  // namespace

Status CheckKernelMountAllowed() {
  if (::geteuid() == 0) return Status::OK();
  return Status::FromErrno(EPERM,
                           "mount option kernel needs root (it attaches a loop device and mounts "
                           "EROFS); mount without -o kernel, or as root");
}

Status ServeKernel(Filesystem* fs, ByteCache* cache, const MountConfig& config,
                   const FuseOptions& fuse, const std::function<void()>& on_mounted) {
  DSFS_RETURN_IF_ERROR(CheckKernelMountAllowed());
  const std::string& mnt = config.mountpoint;
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
  if (config.fs.view.kind == View::kJpeg) {
    // An image lays out every file's size at mount, and a jpeg-N file's is known only once
    // it is encoded: the whole tree would be encoded before the mount answers.
    Log()->warn("-o kernel: a {} file's size is known only once it is encoded; mounting with FUSE",
                ViewName(config.fs.view));
    return ServeFuse(fs, cache, mnt, fuse, on_mounted);
  }
  struct stat mnt_st;
  if (::stat(mnt.c_str(), &mnt_st) != 0) return Status::FromErrno(errno, mnt);
  // SIGINT/SIGTERM end the serving loop below through a self-pipe. A handler, not a blocked
  // mask: threads started before this one (a RocksDB store's) would otherwise take the signal
  // with its default action. Until the service monitor takes SIGHUP, it is ignored.
  int sig_pipe[2];
  if (::pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno(errno, "pipe");
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
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
  const int sfd = sig_pipe[0];

  // The tree and its image layout.
  auto t0 = Clock::now();
  // The layout reads every inode record: have the store's tables read from disk in large
  // requests first (as a classic mount warms them in the background), not a fault at a time.
  fs->store().WillNeedMetadata(DefaultBudgets().metadata_readahead_bytes);
  std::unique_ptr<erofs::ImageTree> tree;
  if (config.fs.view == View::kOriginal) {
    erofs::StoreTreeOptions so;
    so.uid = config.fs.uid;
    so.gid = config.fs.gid;
    so.umask = config.fs.umask;
    tree = std::make_unique<erofs::StoreTree>(&fs->store(), so);
  } else {
    std::unique_ptr<ViewTree> vt;
    DSFS_RETURN_IF_ERROR(ViewTree::Build(fs, config.fs.view, &vt));
    tree = std::move(vt);
  }
  if (!fuse.allow_other) tree = std::make_unique<PrivateRootTree>(std::move(tree));
  erofs::ImageOptions io;
  // No tail packing: the image exists only virtually, so its size costs nothing, while a
  // metadata block that held inlined file data would make a stat (or find) decompress those
  // files, and one damaged file would fail its neighbours' inodes too.
  io.inline_data = false;
  io.volume_name = "dsfs";
  std::unique_ptr<erofs::Image> image;
  DSFS_RETURN_IF_ERROR(erofs::Image::Build(tree.get(), io, &image));
  const double layout_s = std::chrono::duration<double>(Clock::now() - t0).count();
  Log()->info("EROFS image of {} inodes, {} bytes, laid out in {:.3f} s ({} bytes of layout)",
              image->inode_count(), image->size_bytes(), layout_s, image->memory_bytes());

  // Layer 1: the private FUSE mount.
  if (::mkdir(kKernelRunDir, 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, std::string("mkdir ") + kKernelRunDir);
  }
  ::chmod(kKernelRunDir, 0700);
  ClearStalePrivateDirs(mnt_st, nullptr);
  const std::string dir = PrivatePrefix(mnt_st) + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + dir);
  int events[2];
  if (::pipe2(events, O_CLOEXEC | O_NONBLOCK) != 0) {
    int err = errno;
    ::rmdir(dir.c_str());
    return Status::FromErrno(err, "pipe");
  }
  CloseFd close_ev0{events[0]}, close_ev1{events[1]};
  std::atomic<bool> serving{false};
  std::string loop;
  std::atomic<bool> directio{false};  // set once EROFS is mounted with it (the stats read it)
  ImageServerOptions so;
  so.transport = fuse.transport;
  so.threads = fuse.threads;
  so.nice = fuse.nice;
  so.debug = fuse.debug;
  so.fsname = "dsfs-image:" + (fuse.fsname.empty() ? config.store_path : fuse.fsname);
  so.readahead_bytes = fuse.push_bytes;
  // A store in object storage: the image's reads wait on fetch threads, as a classic mount's
  // (fs/serve.cc), never on the session threads the stats file needs.
  constexpr int kFetchThreads = 16;
  so.fetch_threads = fs->store().remote() ? kFetchThreads : 0;
  ImageServer* server_ptr = nullptr;
  ImageServer server(
      image.get(), so,
      [&] { return KernelStatsJson(fs, *image, server_ptr, loop, directio.load(), layout_s); },
      [&] {
        // The loop device let go of the image: EROFS is gone.
        if (serving.load()) (void)!::write(events[1], "c", 1);
      });
  server_ptr = &server;
  server.OnEnded([&] { (void)!::write(events[1], "e", 1); });
  auto undo_dir = [&] {
    server.Stop();
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      Log()->warn("cannot remove {}: {}", dir, std::strerror(errno));
    }
  };
  Status s = server.Start(dir);
  if (!s.ok()) {
    ::rmdir(dir.c_str());
    return s;
  }

  // Layer 2: EROFS at MNT, reading the image file itself (a file-backed mount, Linux 6.12+):
  // its reads go through the image's page cache, so the kernel reads ahead in the image and a
  // first touch of a directory brings its neighbours in large requests. Kernels without
  // file-backed mounts (ENOTBLK), and -o kernel=loop, put a loop device between the two.
  const std::string image_path = dir + "/" + ImageServer::kImageName;
  const unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV;
  int err = 0;
  // directio (Linux 6.13+): EROFS reads the image file with direct I/O, so each block is cached
  // once, in EROFS's own page cache, not also in the image's, both charged to the reader's
  // memory limit (issue 29). It costs the first touch: every block EROFS misses is then one
  // request (2.4x slower over a tree of 8 KB files, bench/kernel_cache_bench.sh), where through
  // the image's page cache the readahead has stored whole directories. So directio only where
  // the image does not fit twice beside the RAM cache in the memory limit; older kernels refuse
  // the option (EINVAL): mounted without it.
  const MemoryLimit& limit = ProcessMemoryLimit();
  const uint64_t cache_bytes = cache ? cache->capacity_bytes() : 0;
  const bool want_directio = 2 * image->size_bytes() + cache_bytes > limit.bytes;
  if (!config.kernel_loop) {
    server.SetPageCacheReader(true);  // EROFS reads the superblock already during mount(2)
    err = -1;
    if (want_directio) {
      err =
          ::mount(image_path.c_str(), target.c_str(), "erofs", flags, "directio") == 0 ? 0 : errno;
      directio.store(err == 0);
      if (err == 0) {
        Log()->info(
            "-o kernel: the image ({} bytes) does not fit twice in the memory limit of "
            "{}: EROFS reads it with direct I/O",
            image->size_bytes(), limit.ToString());
      }
    }
    if (err == EINVAL) {
      Log()->info("-o kernel: EROFS here has no directio option: the image is cached twice");
    }
    if (err != 0 && err != ENOTBLK) {
      err = ::mount(image_path.c_str(), target.c_str(), "erofs", flags, nullptr) == 0 ? 0 : errno;
    }
    if (err == ENOTBLK) Log()->info("-o kernel: EROFS here reads block devices only: a loop device");
  }
  if (config.kernel_loop || err == ENOTBLK) {
    server.SetPageCacheReader(false);
    int loop_fd = -1;
    s = AttachLoopDevice(image_path, &loop, &loop_fd);
    if (s.code() == Status::Code::kNotSupported) {
      undo_dir();
      Log()->warn("-o kernel: {}; mounting with FUSE", s.message());
      return ServeFuse(fs, cache, mnt, fuse, on_mounted);
    }
    if (!s.ok()) {
      undo_dir();
      return s;
    }
    if (!LoopDirectIo(loop)) {
      Log()->warn("/dev/{}: direct I/O refused, the image is cached twice", loop);
    }
    const std::string dev = "/dev/" + loop;
    err = ::mount(dev.c_str(), target.c_str(), "erofs", flags, nullptr) == 0 ? 0 : errno;
    ::close(loop_fd);  // AUTOCLEAR: EROFS holds the device now, or it detaches
  }
  if (err != 0) {
    WaitFor([&] { return server.open_images() == 0; }, milliseconds(2000));
    undo_dir();
    if (err == ENODEV) {
      Log()->warn("-o kernel: this kernel has no EROFS (mount: {}); mounting with FUSE",
                  std::strerror(err));
      return ServeFuse(fs, cache, mnt, fuse, on_mounted);
    }
    return Status::FromErrno(err, "mount erofs " + (loop.empty() ? image_path : "/dev/" + loop) +
                                      " at " + mnt);
  }
  serving.store(true);
  const OwnMount own(mnt);  // a signal unmounts this mount, never what mnt carries later
  // Into the image's page cache, which neither EROFS with directio nor a loop device with
  // direct I/O ever reads: there the pushed pages would only be charged to the limit.
  if (loop.empty() && !directio.load()) server.EnableReadahead();
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
  Log()->info("{}: EROFS on {}", mnt,
              loop.empty() ? image_path : "/dev/" + loop + " over " + image_path);
  // Sheds the RAM cache the image's reads come from under memory pressure (fs/memory_guard.h).
  MemoryGuard memory_guard(cache, limit);
  if (on_mounted) on_mounted();

  ServiceMonitor::Options mo = MonitorOptions(mnt, fuse);
  mo.fs_magic = 0xE0F5E1E2;  // EROFS_SUPER_MAGIC_V1
  ServiceMonitor monitor(mo, [&] {
    const ImageServer::Counters& c = server.counters();
    return "serving EROFS: " + std::to_string(c.reads.load()) + " image reads, " +
           std::to_string(c.bytes_read.load() >> 20) + " MiB read, " +
           std::to_string(c.errors.load()) + " errors";
  });
  Status ms = monitor.Start();
  if (!ms.ok()) Log()->warn("service monitor: {}", ms.message());

  // Serve until the image is let go of (or the private mount is gone), or a signal.
  bool signalled = false;
  while (!server.ended()) {
    if (serving.load() && server.open_images() == 0) break;
    struct pollfd pfd[2] = {{events[0], POLLIN, 0}, {sfd, POLLIN, 0}};
    int n = ::poll(pfd, 2, 1000);
    if (n < 0 && errno != EINTR) break;
    char c[16];
    if (pfd[0].revents & POLLIN) (void)!::read(events[0], c, sizeof(c));
    if (pfd[1].revents & POLLIN) {
      (void)!::read(sfd, c, sizeof(c));
      signalled = true;
      break;
    }
  }
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
  if (server.ended() && server.open_images() > 0) {
    // The private mount went away under the loop device (not by us): EROFS reads fail from
    // here on, and `dsfs umount` clears the rest.
    Log()->warn("{}: the image mount {} is gone; clear the mount with: dsfs umount {}", mnt, dir,
                mnt);
  }
  if (!server.ended()) {
    // After a signal: the loop device clears once EROFS lets go (at once unless busy).
    if (!WaitFor([&] { return server.open_images() == 0 || server.ended(); }, milliseconds(2000)) &&
        !loop.empty()) {
      ClearLoopDevice(loop);
    }
  }
  undo_dir();
  monitor.Stop();
  Log()->info("{}: unmounted ({} image reads, {} errors)", mnt, server.counters().reads.load(),
              server.counters().errors.load());
  return Status::OK();
}

Status UnmountKernel(const std::string& mountpoint, bool lazy, bool* handled) {
  *handled = false;
  const std::string abs = AbsPath(mountpoint);
  bool erofs = false;
  std::string loop;
  std::optional<std::string> dir = KernelLayers(abs, &erofs, &loop);
  if (!erofs) {
    // EROFS already gone (umount(8), or a crash in between): what is left in /run/dsfs.
    if (IsMountedAt(abs)) return Status::OK();
    struct stat st;
    if (::stat(abs.c_str(), &st) != 0) return Status::OK();
    ClearStalePrivateDirs(st, handled);
    return Status::OK();
  }
  *handled = true;
  if (!dir) {
    return Status::InvalidArgument(mountpoint +
                                   " is an EROFS mount that dsfs did not make; use umount(8)");
  }
  const pid_t pid = PidOfPrivateDir(*dir);
  const std::string image = *dir + "/" + ImageServer::kImageName;
  // 1. EROFS.
  if (::umount2(abs.c_str(), lazy ? MNT_DETACH : 0) != 0) {
    int err = errno;
    if (err == EBUSY) {
      return Status::Busy(mountpoint + " is busy (files open on it); use dsfs umount --lazy");
    }
    return Status::FromErrno(err, "cannot unmount " + mountpoint);
  }
  // A bind mount of the same EROFS (or the mount this one was bound from) still holds it:
  // nothing below is this mountpoint's to take down.
  for (const MountEntry& e : Mounts()) {
    if (e.fstype == "erofs" &&
        (e.source == image || (!loop.empty() && LoopDeviceName(e.source) == loop))) {
      Log()->warn("{}: unmounted, but its daemon still runs: the same EROFS is still mounted "
                  "at {}",
                  mountpoint, e.mountpoint);
      return Status::OK();
    }
  }
  const bool alive = ProcessAlive(pid);
  // 2. EROFS lets go of the image (a loop device clears itself then: AUTOCLEAR). After a lazy
  // unmount with files open, a live daemon keeps serving them and cleans up after the last.
  if (loop.empty()) {
    if (lazy && alive) return Status::OK();
  } else {
    if (lazy && alive && LoopBackingFile(loop) == image) return Status::OK();
    if (!WaitFor([&] { return LoopBackingFile(loop) != image; },
                 milliseconds(alive ? 5000 : 500))) {
      ClearLoopDevice(loop);
    }
  }
  // 3. The private mount: its daemon unmounts it and exits; a dead one's is cleared here.
  if (alive) WaitFor([&] { return !ProcessAlive(pid); }, milliseconds(5000));
  if (IsMountedAt(*dir)) ::umount2(dir->c_str(), MNT_DETACH);
  if (::rmdir(dir->c_str()) != 0 && errno != ENOENT) {
    Log()->warn("cannot remove {}: {}", *dir, std::strerror(errno));
  }
  if (ProcessAlive(pid)) {
    Log()->warn("the daemon {} of {} has not exited yet", pid, mountpoint);
  }
  return Status::OK();
}

bool KernelStatsPath(const std::string& mountpoint, std::string* stats_path) {
  bool erofs = false;
  std::string loop;
  std::optional<std::string> dir = KernelLayers(AbsPath(mountpoint), &erofs, &loop);
  if (!dir) return false;
  *stats_path = *dir + "/" + ImageServer::kStatsName;
  return true;
}

}  // namespace dsfs
