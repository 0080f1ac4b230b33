// Helpers of the real-mount tests (dsfs_mount_tests, and the -o kernel and transport tests):
// the dsfs binary packs source trees and mounts them with FUSE as a subprocess, exactly as a
// user runs it.
//
// They need root and a usable /dev/fuse and say so plainly when skipped. Every mount is owned by
// a MountGuard, which unmounts it and ends its daemon even when a test fails. The test process
// makes itself a child subreaper, so the daemon that `dsfs mount` forks is re-parented to it: the
// tests know exactly which processes they started, reap them, and never signal anything else.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace dsfs::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr uid_t kNobody = 65534;
// statfs(2) f_type of every FUSE mount.
inline constexpr long kFuseSuperMagic = 0x65735546;
// And of every EROFS mount (a -o kernel mount).
inline constexpr long kErofsSuperMagic = 0xE0F5E1E2;

// Reads the whole file through read(2) calls of `chunk_bytes`; false (and `error`) on failure.
bool ReadAll(const std::string& path, std::string* data, std::string* error,
             size_t chunk_bytes = 1 << 20);

// An 8-bit RGB PNG of a smooth gradient: a few KB for any size, decoded by the views.
std::string GradientPng(uint32_t w, uint32_t h, int seed);

// ---------------------------------------------------------------------------------------------
// Mounts and processes

// One line of /proc/self/mountinfo. (mount/mount.h's FindMount gives the topmost mount of a path
// only, without its options: the tests also count the mounts stacked on one path.)
struct MountEntry {
  std::string mountpoint, mount_options, fstype, source;
};
// Every entry of /proc/self/mountinfo, unescaped.
std::vector<MountEntry> AllMounts();
// Entries of /proc/self/mountinfo whose mountpoint is `path` (absolute, not resolved further).
std::vector<MountEntry> MountsAt(const std::string& path);
bool IsMounted(const std::string& path);

// Parent pid of `pid` and its state letter; false if it is gone.
bool ProcStat(pid_t pid, pid_t* ppid, char* state);
// Live children of this process that are a `dsfs mount ... MOUNTPOINT` daemon (or one that
// the mount helper started).
std::vector<pid_t> DaemonChildren(const std::string& mountpoint);
// Peak and current resident memory of `pid` (kB), from /proc ("VmHWM", "VmRSS").
uint64_t ProcStatusKb(pid_t pid, const std::string& key);

// A mountpoint this test mounts on. The destructor unmounts it (`dsfs umount`, then
// `umount -l`) and ends the daemons it started, whatever happened in between.
class MountGuard {
 public:
  explicit MountGuard(std::string mountpoint);
  ~MountGuard() { Release(); }
  MountGuard(const MountGuard&) = delete;
  MountGuard& operator=(const MountGuard&) = delete;

  const std::string& mountpoint() const { return mp_; }
  const std::vector<pid_t>& daemons() const { return pids_; }

  // `dsfs mount STORE MP EXTRA...`: the background daemon. Remembers the daemon it leaves.
  CommandResult MountBackground(const std::string& store,
                                const std::vector<std::string>& extra = {});
  // In ctest's uring.* run (enable_uring=Y), a mount that was not told otherwise is served
  // over the ring: the run tests what it says it tests.
  void ExpectTheTransportUnderTest();
  // `dsfs mount -f STORE MP` as a direct child writing to `log_path`; succeeds once the mount
  // answers a stat.
  ::testing::AssertionResult MountForeground(const std::string& store, const std::string& log_path);
  // A daemon the test started itself, ended by Release like the others.
  void Own(pid_t pid) { pids_.push_back(pid); }
  // Remembers the daemons of this mountpoint that are children of this process.
  void Adopt();
  // For a daemon the test has reaped itself: its pid may be reused and must not be signalled.
  void Forget(pid_t pid);
  void Release();

 private:
  std::string mp_;
  std::vector<pid_t> pids_;
};

// A tmpfs of a fixed size, unmounted on destruction.
class TmpfsGuard {
 public:
  TmpfsGuard(const std::string& dir, const std::string& size);
  ~TmpfsGuard();
  TmpfsGuard(const TmpfsGuard&) = delete;
  TmpfsGuard& operator=(const TmpfsGuard&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// A small tree packed into a store (a.txt, a 0600 private.txt, a 0700 directory closed/), and
// an empty mountpoint.
struct SmallStore {
  SmallStore();
  TempDir dir;
  std::string src, store, mp;
  CommandResult pack;
};

// A datagram socket bound at `path` that stands in for systemd's $NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    ok_ = fd_ >= 0 && path_.size() < sizeof(addr.sun_path) &&
          ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }
  // The next datagram, or false after `timeout`.
  bool Receive(std::string* msg, std::chrono::milliseconds timeout) {
    struct pollfd pfd = {fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout.count())) != 1) return false;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0) return false;
    msg->assign(buf, static_cast<size_t>(n));
    return true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

// `dsfs stats MP` as "key" -> "value".
std::map<std::string, std::string> StatsOf(const std::string& mp);
// A counter of MP/.dsfs/stats (JSON; of a -o kernel mount, its private mount's stats file, as
// `dsfs stats` reads it); UINT64_MAX if it is not there.
uint64_t StatsField(const std::string& mp, const std::string& key);

}  // namespace dsfs::testing

// Skips a test that needs root (setpriv to another user, mounting a tmpfs).
#define SKIP_UNLESS_ROOT()                                                               \
  do {                                                                                   \
    if (::geteuid() != 0) {                                                              \
      GTEST_SKIP() << "SKIPPED: needs root (setpriv to another user, mounting a tmpfs)"; \
    }                                                                                    \
  } while (0)
