#include "mount/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/log.h"
#include "common/memory_limit.h"
#include "common/mount_table.h"
#include "common/system.h"
#include "common/units.h"
#include "kernel/kernel_mount.h"
#include "mount/metrics.h"

namespace dsfs {
namespace {

// `path` made absolute with every symbolic link in it followed, also the last component, as
// umount(8) does; but the last component is never stat'ed through (a dead FUSE mount there
// answers nothing): its links are read with lstat and readlink.
std::string FollowLinks(const std::string& path) {
  std::string p = AbsolutePath(path);
  for (int hops = 0; hops < 40; ++hops) {  // as the kernel's MAXSYMLINKS
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    char buf[PATH_MAX];
    ssize_t n = ::readlink(p.c_str(), buf, sizeof(buf));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return p;
    std::filesystem::path target(std::string(buf, static_cast<size_t>(n)));
    if (target.is_relative()) target = std::filesystem::path(p).parent_path() / target;
    p = AbsolutePath(target.string());
  }
  return p;
}

// True if what `path` (relative to `dirfd`; "" with AT_EMPTY_PATH: dirfd itself) names, its
// symlinks followed, is the root of a mount. The mount table's paths are not enough: a
// mountpoint named through a symlink is listed under the directory it names.
bool IsMountRoot(int dirfd, const char* path, int flags) {
  struct statx sx;
  if (::statx(dirfd, path, flags | AT_STATX_DONT_SYNC, 0, &sx) != 0) return false;
  return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
         (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

// An exclusive lock keyed by the mountpoint directory, held from CheckMountpoint to the mount:
// two `dsfs mount`s of one directory started together would otherwise both pass the check and
// stack their mounts. flock(2) on the directory itself: it needs no writable place (a user's
// mount), and it ends with the process. -1 if the directory cannot be opened (the mount then
// goes on unlocked and reports its own error).
Status LockMountpoint(const std::string& mountpoint, int* fd_out) {
  *fd_out = -1;
  int fd = ::open(mountpoint.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::OK();
  // Another mount of it may be laying out a large store: wait for it (bounded), then the
  // check below sees its mount.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      ::close(fd);
      return Status::OK();  // a filesystem without flock: unlocked, as before
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return Status::Busy("mountpoint " + mountpoint +
                          " is being mounted by another dsfs mount, which has not finished");
    }
    ::usleep(20000);
  }
  *fd_out = fd;
  return Status::OK();
}

// Closes the descriptors the mount inherited from whoever started it: every one above stderr
// without FD_CLOEXEC (only such survive an exec; dsfs opens its own with O_CLOEXEC). A daemon
// that kept them would hold what they are open on for as long as it serves: a file open on a
// lazily unmounted -o kernel mount (a shell's `exec 7<MNT/file` before the next dsfs mount)
// kept that EROFS mount, and so its daemon and private mount, alive after its last close.
void CloseInheritedFds(int keep = -1) {
  std::vector<int> fds;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(d);
    while (struct dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long fd = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || fd <= STDERR_FILENO || fd == own || fd == keep) {
        continue;
      }
      fds.push_back(static_cast<int>(fd));
    }
    ::closedir(d);
  }
  for (int fd : fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) ::close(fd);
  }
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// One line for each explicit size the memory limit does not allow (still honoured): written
// before the daemon forks, so that it reaches the terminal of whoever mounts.
void WarnAboutExplicitSizes(const MountConfig& config) {
  const MemoryLimit& limit = ProcessMemoryLimit();
  std::string w;
  if (config.cache_bytes != MountConfig::kDefaultCache) {
    w = ExplicitSizeWarning("cache_size", config.cache_bytes, true, limit);
    if (!w.empty()) Log()->warn("{}", w);
  }
  if (config.push_bytes != MountConfig::kDefaultCache) {
    w = ExplicitSizeWarning("push", config.push_bytes, false, limit);
    if (!w.empty()) Log()->warn("{}", w);
  }
}

// The daemon is the one process every reader of the mount depends on: killed for memory,
// every read after fails (ENOTCONN) until the mount is cleared, while a reader killed in its
// place frees its own memory and leaves the daemon serving the others (a job's other workers,
// the next run). So it lowers its OOM score, by half: the kernel's badness of a process is its
// RSS plus oom_score_adj thousandths of the limit (oom_badness), so -500 takes half the limit off
// the daemon's, and a daemon within its budgets (half the limit at most) is never chosen before
// a reader, while one grown past them still is. Never -1000 (never killed): a cgroup whose
// daemon alone is over its limit would then have nothing to kill. A lower value already set
// (systemd's OOMScoreAdjust=, the caller's) is kept; without CAP_SYS_RESOURCE the kernel refuses
// it, and the daemon keeps the caller's (one debug line).
constexpr int kDaemonOomScoreAdj = -500;

void LowerOomScore() {
  std::string text;
  int current = 0;
  if (ReadSmallFile("/proc/self/oom_score_adj", &text)) current = std::atoi(text.c_str());
  if (current <= kDaemonOomScoreAdj) return;
  const std::string value = std::to_string(kDaemonOomScoreAdj) + "\n";
  const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    Log()->debug("cannot lower the daemon's OOM score to {}: {}", kDaemonOomScoreAdj,
                 std::strerror(errno));
  }
  if (fd >= 0) ::close(fd);
}

Status Serve(const MountConfig& config, const std::function<void()>& on_mounted) {
  LowerOomScore();
  // Decompressed chunks (up to 256 KiB) come and go with the cache. With glibc's default
  // dynamic mmap threshold, the first freed one raises the threshold and later ones land in the
  // heap, whose freed holes are never returned: RSS grew ~55% past the cache budget. A fixed
  // threshold keeps large buffers in mmap (returned on free); fewer arenas limit the rest.
  ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  ::mallopt(M_ARENA_MAX, 4);
  StoreOptions store_options = config.store;
  // Defaults from the memory this process is given, not the host's (common/memory_limit.h):
  // the RAM cache (readahead and a hot set) and the pushes into the page cache.
  const MemoryBudgets& budgets = DefaultBudgets();
  const bool default_cache = config.cache_bytes == MountConfig::kDefaultCache;
  // A default cache is made at its most and lowered once the store says how much page cache
  // its files need (CacheBytesFor); its capacity never rises above what it was made with.
  uint64_t cache_bytes =
      default_cache ? std::max(budgets.cache_bytes, budgets.tight_cache_bytes) : config.cache_bytes;
  FuseOptions fo = config.fuse;
  fo.push_bytes =
      config.push_bytes == MountConfig::kDefaultCache ? budgets.push_bytes : config.push_bytes;
  // The mount's one RAM cache: the store keeps decompressed chunks in it, the views what they
  // render, each client in a namespace of its own; readahead and preload fill it.
  if (!store_options.cache && cache_bytes > 0) {
    store_options.cache = std::make_shared<ByteCache>(cache_bytes);
  }
  std::shared_ptr<ByteCache> cache = store_options.cache;
  std::unique_ptr<Store> store;
  DSFS_RETURN_IF_ERROR(Store::Open(config.store_path, store_options, &store));
  if (cache && default_cache) cache->SetCapacity(DefaultMountCacheBytes(*store));
  Log()->debug("memory limit {}: files {} as page cache, cache {}, push {}",
               ProcessMemoryLimit().ToString(), FormatBytes(store->PageCacheFootprintBytes()),
               FormatBytes(cache ? cache->capacity_bytes() : 0), FormatBytes(fo.push_bytes));
  FsOptions fs_options = config.fs;
  // The views decode an image once and serve it from the cache: what cannot fit an entry of
  // the cache is served as its original bytes (fs/views.h, ViewRenders).
  fs_options.max_render_bytes = cache ? cache->max_value_bytes() : 0;
  Filesystem fs(std::move(store), fs_options, cache);
  if (fo.session.fsname.empty()) fo.session.fsname = config.store_path;
  // A preload of nothing is a mistake the mount reports, not a log line after it succeeded.
  if (!fo.preload_path.empty()) DSFS_RETURN_IF_ERROR(CheckPreloadPath(fs, fo.preload_path));
  ServeOptions serve;
  serve.metrics_file = config.metrics_file;
  serve.resident_limit_bytes = default_cache ? budgets.resident_bytes : 0;
  if (config.kernel) {
    KernelOptions ko;
    ko.loop = config.kernel_loop;
    ko.allow_other = fo.allow_other;
    ko.metadata_readahead_bytes = budgets.metadata_readahead_bytes;
    ErofsServerOptions& so = ko.server;
    so.session = fo.session;
    so.session.fsname = "dsfs-image:" + fo.session.fsname;
    ko.readahead_bytes = fo.push_bytes;
    // A store in object storage: the image's reads wait on fetch threads, as a classic
    // mount's (mount/serve.cc), never on the session threads the stats file needs.
    so.fetch_threads = fs.store().remote() ? kRemoteFetchThreads : 0;
    return ServeKernel(&fs, cache.get(), config.mountpoint, fo, ko, on_mounted, serve);
  }
  return ServeFuse(&fs, cache.get(), config.mountpoint, fo, on_mounted, serve);
}

// The FUSE connection /dev/fuse descriptor `fd` serves, from /proc/self/fdinfo: 0 if it has
// none (it is not /dev/fuse, or nothing was mounted with it yet).
unsigned FuseConnectionOfFd(int fd) {
  std::string text;
  if (!ReadSmallFile("/proc/self/fdinfo/" + std::to_string(fd), &text)) return 0;
  constexpr std::string_view kKey = "fuse_connection:";
  size_t at = text.find(kKey);
  if (at == std::string::npos) return 0;
  return static_cast<unsigned>(std::strtoul(text.c_str() + at + kKey.size(), nullptr, 10));
}

// The directory FUSE connection `connection` is mounted at in this mount namespace ("" if
// none is: the parent mounted it in another one).
std::string MountOfConnection(unsigned connection) {
  std::string found;
  ForEachMount([&](const std::string& mp, const MountInfo& m) {
    if (found.empty() && m.dev_minor == connection && m.fstype.rfind("fuse", 0) == 0) found = mp;
  });
  return found;
}

// `path` is "/dev/fd/N" (IsFuseFdPath): OK if N is an open /dev/fuse descriptor that a parent
// mounted. *connection is its FUSE connection.
Status CheckFuseFd(const std::string& path, int fd, unsigned* connection) {
  const std::string how =
      " (dsfs mount STORE /dev/fd/N serves a /dev/fuse descriptor that a privileged parent "
      "opened, mounted and passed on; docs/containers.md)";
  if (fd < 0)
    return Status::InvalidArgument("mountpoint " + path + ": not a descriptor number" + how);
  if (fd <= STDERR_FILENO) {
    // The daemon's standard streams become /dev/null once it serves.
    return Status::InvalidArgument("mountpoint " + path +
                                   ": a standard stream; pass the /dev/fuse descriptor as 3 or "
                                   "above" +
                                   how);
  }
  if (::fcntl(fd, F_GETFD) < 0) {
    return Status::InvalidArgument("mountpoint " + path + ": descriptor " + std::to_string(fd) +
                                   " is not open" + how);
  }
  struct stat st;
  constexpr unsigned kFuseMajor = 10, kFuseMinor = 229;
  if (::fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != kFuseMajor ||
      minor(st.st_rdev) != kFuseMinor) {
    return Status::InvalidArgument("mountpoint " + path + ": descriptor " + std::to_string(fd) +
                                   " is not /dev/fuse" + how);
  }
  *connection = FuseConnectionOfFd(fd);
  if (*connection == 0) {
    return Status::InvalidArgument("mountpoint " + path + ": /dev/fuse descriptor " +
                                   std::to_string(fd) +
                                   " is not mounted (the parent mounts it first: mount(2) of "
                                   "type fuse.dsfs with fd=" +
                                   std::to_string(fd) + ")");
  }
  return Status::OK();
}

// The store path checked and made absolute (the daemon changes to "/").
Status ResolveStorePath(MountConfig* config) {
  // A store in object storage (s3://...) is no path: the backend checks it when it opens.
  if (IsRemoteStore(config->store_path)) return Status::OK();
  struct stat st;
  if (::stat(config->store_path.c_str(), &st) != 0) {
    return Status::FromErrno(errno, config->store_path);
  }
  config->store_path = AbsolutePath(config->store_path);
  return Status::OK();
}

void WarnAboutMemory(const MountConfig& config) {
  WarnAboutExplicitSizes(config);
  // Below the smallest limit a mount lives in: one line, and the mount goes on.
  const std::string floor =
      MinimumLimitWarning(IsRemoteStore(config.store_path), ProcessMemoryLimit());
  if (!floor.empty()) Log()->warn("{}", floor);
}

Status ServeInDaemon(const MountConfig& config, int* lock_fd, const std::function<void()>& unlock,
                     int keep_fd);

// MountStore of a mountpoint "/dev/fd/N": the mount is the parent's. Nothing is checked, locked,
// mounted or unmounted by path; the session serves descriptor N (FuseOptions::parent_mounted)
// and ends when the parent unmounts (or a signal: the descriptor is closed, the mount left).
Status MountOnFd(MountConfig config, int fd) {
  if (config.kernel) {
    return Status::InvalidArgument("mount option kernel: not with a descriptor (" +
                                   config.mountpoint +
                                   "): -o kernel mounts EROFS itself; give a directory");
  }
  unsigned connection = 0;
  DSFS_RETURN_IF_ERROR(CheckFuseFd(config.mountpoint, fd, &connection));
  // Where the parent mounted it, if in this namespace: the name of the mount in the status,
  // the metrics and systemd's readiness probe.
  std::string at = MountOfConnection(connection);
  if (!config.metrics_file.empty()) {
    DSFS_RETURN_IF_ERROR(MetricsFile::Check(config.metrics_file, at.empty() ? "/" : at));
  }
  DSFS_RETURN_IF_ERROR(ResolveStorePath(&config));
  WarnAboutMemory(config);
  config.fuse.mount_target = config.mountpoint;
  config.fuse.parent_mounted = true;
  if (!at.empty()) config.mountpoint = at;
  int no_lock = -1;
  return ServeInDaemon(
      config, &no_lock, [] {}, fd);
}

}  // namespace

Status CheckMountpoint(const std::string& mountpoint) {
  struct stat st;
  struct statfs sfs;
  // statfs is never answered from a cache, so it sees a dead FUSE daemon even where stat
  // would not.
  int rc = ::statfs(mountpoint.c_str(), &sfs) != 0 ? -1 : ::stat(mountpoint.c_str(), &st);
  if (rc != 0) {
    int err = errno;
    // ECONNABORTED: the same, seen over io_uring while the kernel tears the rings down.
    if (err == ENOTCONN || err == ECONNABORTED) {
      return Status::Busy("mountpoint " + mountpoint +
                          " is a dead mount (its daemon is gone); clear it with: dsfs umount " +
                          mountpoint);
    }
    if (err == ENOENT) return Status::NotFound("mountpoint " + mountpoint + " does not exist");
    return Status::FromErrno(err, "mountpoint " + mountpoint);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("mountpoint " + mountpoint + " is not a directory");
  }
  constexpr long kProcMagic = 0x9fa0, kSysfsMagic = 0x62656572;
  if (sfs.f_type == kProcMagic || sfs.f_type == kSysfsMagic) {
    // /proc/self is the mounting command's own directory, gone when it exits.
    return Status::InvalidArgument("mountpoint " + mountpoint +
                                   " is in /proc or /sys: mount on a directory of your own");
  }
  if (IsMountpoint(mountpoint) || IsMountRoot(AT_FDCWD, mountpoint.c_str(), 0)) {
    // EROFS answers statfs itself: a -o kernel mount shows its dead daemon by its image mount.
    std::string stats;
    if (KernelStatsPath(mountpoint, &stats) && ::access(stats.c_str(), R_OK) != 0) {
      return Status::Busy("mountpoint " + mountpoint +
                          " is a dead -o kernel mount (its daemon is gone); clear it with: "
                          "dsfs umount " +
                          mountpoint);
    }
    return Status::Busy("mountpoint " + mountpoint + " is already mounted");
  }
  return Status::OK();
}

Status MountStore(const MountConfig& config_in) {
  MountConfig config = config_in;
  if (int fd = -1; IsFuseFdPath(config.mountpoint, &fd)) return MountOnFd(config, fd);
  if (config.kernel) DSFS_RETURN_IF_ERROR(CheckKernelMountAllowed());
  DSFS_RETURN_IF_ERROR(CheckMountpoint(config.mountpoint));
  if (!config.metrics_file.empty()) {
    DSFS_RETURN_IF_ERROR(MetricsFile::Check(config.metrics_file, config.mountpoint));
  }
  int lock_fd = -1;
  DSFS_RETURN_IF_ERROR(LockMountpoint(config.mountpoint, &lock_fd));
  struct Unlock {
    int* fd;
    void operator()() {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    ~Unlock() { (*this)(); }
  } unlock{&lock_fd};
  // Again under the lock: a mount of the same directory that held it has mounted by now. And
  // the directory locked (which is the one mounted on) must be no mount's root either: its
  // path may name another directory by now.
  DSFS_RETURN_IF_ERROR(CheckMountpoint(config.mountpoint));
  if (lock_fd >= 0 && IsMountRoot(lock_fd, "", AT_EMPTY_PATH)) {
    return Status::Busy("mountpoint " + config.mountpoint + " is already mounted");
  }
  // The daemon changes to "/": make both paths absolute first.
  DSFS_RETURN_IF_ERROR(ResolveStorePath(&config));
  config.mountpoint = AbsolutePath(config.mountpoint);
  WarnAboutMemory(config);
  if (lock_fd >= 0 && ::geteuid() == 0) {
    // The directory checked and locked is the one mounted on, whatever its path names by
    // then (FuseOptions::mount_target). A descriptor of its own: the lock's goes with the
    // lock. Kept while the process serves (inherited by the daemon, which never execs).
    // Its real path (no symlink) names the mount from then on: the daemon tells its own mount
    // by it (mount/own_mount.h), not by what the given path may name by the time it looks.
    int target = ::open(("/proc/self/fd/" + std::to_string(lock_fd)).c_str(),
                        O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (target >= 0) {
      config.fuse.mount_target = "/proc/self/fd/" + std::to_string(target);
      char real[PATH_MAX];
      ssize_t n = ::readlink(config.fuse.mount_target.c_str(), real, sizeof(real) - 1);
      if (n > 0 && real[0] == '/') config.mountpoint.assign(real, static_cast<size_t>(n));
    }
  }
  return ServeInDaemon(
      config, &lock_fd, [&] { unlock(); }, -1);
}

namespace {

// Serves `config` in the foreground, or in a daemon forked here that MountStore waits for.
// `unlock` lets go of the mountpoint's lock `*lock_fd` once mounted; `keep_fd` (-1: none) is
// the one inherited descriptor the server keeps (MountOnFd's /dev/fuse).
Status ServeInDaemon(const MountConfig& config, int* lock_fd, const std::function<void()>& unlock,
                     int keep_fd) {
  if (config.foreground) {
    // The process that serves is the one systemd started (Type=notify): it reports readiness.
    MountConfig fg = config;
    fg.fuse.notify_systemd = true;
    CloseInheritedFds(keep_fd);
    return Serve(fg, unlock);
  }

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    ::close(fds[0]);
    // The lock is the parent's to hold until the mount exists (flock: shared across fork).
    if (*lock_fd >= 0) ::close(*lock_fd);
    *lock_fd = -1;
    CloseInheritedFds(keep_fd);
    // Its own process group, so that the shell's job control never signals it, but not its own
    // session: a new session is a new scheduler autogroup, and a reader in another task group
    // than the daemon is woken on the other, idle CPU after every round trip. That tripled
    // the cost of one (Python's isatty() on every open: 17 us instead of 5.5 us over
    // io_uring, docs/kernel.md). A hangup of the terminal only makes the daemon reopen its
    // log (SIGHUP, ServiceMonitor); it never reads the terminal (stdin is /dev/null).
    ::setpgid(0, 0);
    ::signal(SIGTTOU, SIG_IGN);  // a write to the terminal (with `stty tostop`) must not stop it
    ::signal(SIGTTIN, SIG_IGN);
    if (::chdir("/") != 0) _exit(1);
    bool reported = false;
    Status s = Serve(config, [&] {
      // The kernel mount exists; the parent's first request is answered once the loop runs.
      WriteAll(fds[1], "OK\n");
      ::close(fds[1]);
      reported = true;
      int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        if (null > 2) ::close(null);
      }
      // A daemon's stderr goes nowhere: log to syslog (the journal) instead, unless the log
      // goes to a file (-o log_file).
      LogToSyslogUnlessFile();
    });
    if (!reported) {
      WriteAll(fds[1], "ERR " + s.message() + "\n");
      _exit(1);
    }
    _exit(s.ok() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string reply;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  unlock();  // mounted (or failed): the next mount of this directory may check it
  if (reply.rfind("OK", 0) != 0) {
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    if (reply.rfind("ERR ", 0) == 0) {
      std::string msg = reply.substr(4);
      while (!msg.empty() && msg.back() == '\n') msg.pop_back();
      return Status::IOError(msg);
    }
    return Status::IOError("the mount daemon exited before mounting");
  }
  // Returns once the daemon answers: this stat is a request to it. Not for a parent's mount
  // (its path may be in another namespace): its daemon serves once it said OK.
  struct stat st;
  if (!config.fuse.parent_mounted && ::stat(config.mountpoint.c_str(), &st) != 0) {
    return Status::FromErrno(errno, "mounted, but " + config.mountpoint + " does not answer");
  }
  return Status::OK();
}

}  // namespace

namespace {

// pidfds of the processes serving FUSE connection `connection` (the daemon), found by the
// connection number their /dev/fuse descriptors show in /proc/PID/fdinfo. A pidfd stays bound
// to its process: a reused pid is never waited for. Processes this user may not inspect are
// skipped (the daemon of an unprivileged user's own mount is theirs).
std::vector<int> DaemonPidfds(unsigned connection) {
  std::vector<int> pidfds;
  const std::string wanted = "fuse_connection:\t" + std::to_string(connection) + "\n";
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      char target[16];
      ssize_t n = ::readlink(fd.path().c_str(), target, sizeof(target));
      if (n != 9 || std::string_view(target, 9) != "/dev/fuse") continue;
      std::ifstream info(proc.path() / "fdinfo" / fd.path().filename());
      std::stringstream text;
      text << info.rdbuf();
      if (text.str().find(wanted) == std::string::npos) continue;
      int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, std::stoi(pid), 0));
      if (pidfd >= 0) pidfds.push_back(pidfd);
      break;
    }
  }
  return pidfds;
}

// Waits up to `timeout_ms` in all for every process of `pidfds` to exit; closes them. False if
// one still runs.
bool WaitForExit(const std::vector<int>& pidfds, int timeout_ms) {
  bool all = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int pidfd : pidfds) {
    struct pollfd p = {pidfd, POLLIN, 0};
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      break;
    }
    struct pollfd now = {pidfd, POLLIN, 0};
    if (::poll(&now, 1, 0) != 1) all = false;
    ::close(pidfd);
  }
  return all;
}

// True if FUSE connection `connection` is still mounted somewhere in this namespace (a bind
// mount of the one just unmounted): its daemon goes on serving it.
bool ConnectionMounted(unsigned connection) {
  bool mounted = false;
  ForEachMount([&](const std::string&, const MountInfo& m) {
    if (m.fstype == kDsfsFsType && m.dev_minor == connection) mounted = true;
  });
  return mounted;
}

Status UnmountNow(const std::string& abs, const std::string& mountpoint, bool lazy) {
  if (::umount2(abs.c_str(), (lazy ? MNT_DETACH : 0) | UMOUNT_NOFOLLOW) == 0) return Status::OK();
  int err = errno;
  if (err == EPERM) {
    // Not root: the setuid helper may unmount FUSE mounts of this user.
    pid_t pid = ::fork();
    if (pid == 0) {
      // Its own complaint would make a second line: the error below says it.
      int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (null >= 0) ::dup2(null, STDERR_FILENO);
      if (lazy) {
        ::execlp("fusermount3", "fusermount3", "-u", "-z", abs.c_str(), nullptr);
      } else {
        ::execlp("fusermount3", "fusermount3", "-u", abs.c_str(), nullptr);
      }
      _exit(127);
    }
    int wstatus = 0;
    if (pid > 0 && ::waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
        WEXITSTATUS(wstatus) == 0) {
      return Status::OK();
    }
    return Status::FromErrno(EPERM, "cannot unmount " + mountpoint);
  }
  if (err == EBUSY) {
    return Status::Busy(mountpoint + " is busy (files open on it); use dsfs umount --lazy");
  }
  return Status::FromErrno(err, "cannot unmount " + mountpoint);
}

}  // namespace

Status Unmount(const std::string& mountpoint, bool lazy) {
  if (mountpoint.empty()) return Status::InvalidArgument("MOUNTPOINT is empty");
  if (int fd; IsFuseFdPath(mountpoint, &fd)) {
    return Status::InvalidArgument(mountpoint +
                                   " is a descriptor, not a mountpoint: a mount served through "
                                   "/dev/fd/N is its parent's; unmount the directory it mounted");
  }
  // A symbolic link to a mountpoint names that mount, as for umount(8).
  std::string abs = FollowLinks(mountpoint);
  // -o kernel: EROFS over a loop device over a private dsfs mount, torn down in that order.
  bool kernel = false;
  Status ks = UnmountKernel(abs, lazy, &kernel);
  if (kernel) return ks;
  MountInfo m;
  if (!FindMount(abs, &m)) return Status::InvalidArgument(mountpoint + " is not mounted");
  // The type, not the source or a probe of the daemon: a dead dsfs mount keeps its type, and
  // nothing else (a disk, a tmpfs, another FUSE filesystem) is ever unmounted by dsfs.
  if (m.fstype != kDsfsFsType) {
    return Status::InvalidArgument(mountpoint + " is not a dsfs mount (it is " + m.fstype +
                                   "); dsfs umount unmounts only " + std::string(kDsfsFsType));
  }
  // Found before unmounting, while the connection exists. A lazily detached mount lives on
  // until its files are closed: then there is nothing to wait for now.
  std::vector<int> daemons = lazy ? std::vector<int>() : DaemonPidfds(m.dev_minor);
  Status s = UnmountNow(abs, mountpoint, lazy);
  // The daemon exits once the kernel ends its connection; until then it holds the store open
  // and unmounting the filesystem that holds the store would fail "busy". A connection still
  // mounted elsewhere (a bind mount) keeps it serving: nothing to wait for.
  int wait_ms = s.ok() && !ConnectionMounted(m.dev_minor) ? kDaemonExitWaitMs : 0;
  if (!WaitForExit(daemons, wait_ms) && s.ok()) {
    Log()->warn(
        "{}: unmounted, but its daemon still runs (the same mount is still mounted "
        "elsewhere, in another mount namespace, or the daemon is stopped): the store "
        "stays open until it exits",
        mountpoint);
  }
  return s;
}

}  // namespace dsfs
