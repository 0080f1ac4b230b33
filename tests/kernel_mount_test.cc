// Real-mount tests of `dsfs mount -o kernel`: the tree served by EROFS over a loop device over
// the image file of a private dsfs FUSE mount (fs/kernel_mount.h). The dsfs binary runs as a
// subprocess, as a user runs it; the tests compare what the kernel serves with the source (and
// the views with the classic mount's views), check permissions as another user, damage, crash
// and teardown: after every test no loop device, private mount or directory of its mountpoint
// is left.
//
// They need root, /dev/fuse, loop devices and EROFS, and say so plainly when skipped. This
// process is a child subreaper, so the daemon `dsfs mount` forks is its child: the tests reap
// it and signal nothing else.

#include "fs/kernel_mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

using std::chrono::milliseconds;

std::string CannotKernelMountReason() {
  if (::geteuid() != 0) return "not running as root (-o kernel needs root)";
  for (const char* dev : {"/dev/fuse", "/dev/loop-control"}) {
    int fd = ::open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0) return std::string(dev) + " is not usable: " + std::strerror(errno);
    ::close(fd);
  }
  auto has_erofs = [] {
    return ReadFile("/proc/filesystems").find("\terofs\n") != std::string::npos;
  };
  if (!has_erofs()) RunCommand({"modprobe", "erofs"}, 30);
  if (!has_erofs()) return "the kernel has no EROFS (not in /proc/filesystems)";
  return "";
}

#define SKIP_UNLESS_KERNEL_MOUNT()                                                 \
  do {                                                                             \
    std::string why_not = CannotKernelMountReason();                               \
    if (!why_not.empty()) {                                                        \
      GTEST_SKIP() << "SKIPPED: -o kernel mount test not run because " << why_not; \
    }                                                                              \
  } while (0)

std::string FsType(const std::string& mp) {
  CommandResult r = RunCommand({"findmnt", "-n", "-o", "FSTYPE", "--mountpoint", mp}, 30);
  std::string t = r.out;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
}

// Everything that identifies one mountpoint's layers: its private directories' prefix.
std::string PrivatePrefixOf(const std::string& mp) {
  struct stat st;
  EXPECT_EQ(::stat(mp.c_str(), &st), 0);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llx-%llu-", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return std::string(kKernelRunDir) + "/" + buf;
}

std::vector<std::string> PrivateDirs(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kKernelRunDir, ec)) {
    if (e.path().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> LoopsBackedUnder(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("loop", 0) != 0) continue;
    std::ifstream f(e.path() / "loop" / "backing_file");
    std::string b;
    if (std::getline(f, b) && b.rfind(prefix, 0) == 0) out.push_back(name + " -> " + b);
  }
  return out;
}

bool MountedUnder(const std::string& prefix) {
  return ReadFile("/proc/self/mountinfo").find(" " + prefix) != std::string::npos;
}

// Nothing of the -o kernel mount of `prefix`'s mountpoint is left.
::testing::AssertionResult LayersGone(const std::string& mp, const std::string& prefix) {
  if (!FsType(mp).empty()) return ::testing::AssertionFailure() << mp << " still mounted";
  auto loops = LoopsBackedUnder(prefix);
  if (!loops.empty()) return ::testing::AssertionFailure() << "loop device left: " << loops[0];
  if (MountedUnder(prefix)) return ::testing::AssertionFailure() << "private mount left";
  auto dirs = PrivateDirs(prefix);
  if (!dirs.empty()) return ::testing::AssertionFailure() << "private dir left: " << dirs[0];
  return ::testing::AssertionSuccess();
}

// A -o kernel mount at `mp`, torn down (and checked to be gone) on destruction.
class KernelMount {
 public:
  explicit KernelMount(std::string mp) : mp_(std::move(mp)) {
    BecomeSubreaper();
    prefix_ = PrivatePrefixOf(mp_);
  }
  ~KernelMount() {
    if (!FsType(mp_).empty() || !PrivateDirs(prefix_).empty()) {
      CommandResult r = Dsfs({"umount", mp_});
      EXPECT_EQ(r.exit_code, 0) << Describe(r);
    }
    WaitDaemon();
    EXPECT_TRUE(LayersGone(mp_, prefix_));
    if (!FsType(mp_).empty()) RunCommand({"umount", "-l", mp_});
  }
  CommandResult Mount(const std::string& store, const std::string& options = "") {
    std::vector<std::string> args = {"mount", store, mp_, "-o",
                                     "kernel" + (options.empty() ? "" : "," + options)};
    CommandResult r = Dsfs(args);
    auto dirs = PrivateDirs(prefix_);
    if (dirs.size() == 1) pid_ = static_cast<pid_t>(std::atol(dirs[0].c_str() + prefix_.size()));
    return r;
  }
  void WaitDaemon() {
    if (pid_ <= 0) return;
    ExpectDaemonExits(pid_);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string mp_, prefix_;
  pid_t pid_ = -1;
};

void Put(const std::string& path, std::string_view data, mode_t mode = 0644) {
  WriteFile(path, data, mode);
  ::chmod(path.c_str(), mode);
}

// A tree with what a real-mount suite checks: sizes around block boundaries, a large file,
// an empty file and directory, symlinks, odd names, modes, distinct mtimes, a directory of
// 3,000 entries (several directory blocks).
void BuildTree(const std::string& src) {
  std::filesystem::create_directories(src + "/empty");
  size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, 8191, 65536, 300000, 2500000};
  int i = 0;
  for (size_t n : sizes) Put(src + "/sizes/f" + std::to_string(n), RandomBytes(n, ++i));
  Put(src + "/text.txt", TextBytes(50000, 3));
  Put(src + "/modes/private", "secret\n", 0600);
  Put(src + "/modes/exec", "#!/bin/sh\n", 0755);
  Put(src + "/modes/readonly", "ro\n", 0444);
  Put(src + "/odd names/with space and \xc3\xa9", "utf8\n");
  Put(src + "/odd names/new\nline", "nl\n");
  for (int k = 0; k < 3000; ++k) {
    Put(src + "/many/e" + std::to_string(k * 7919 % 3000), TextBytes(k % 300, k));
  }
  std::string deep = src + "/deep";
  for (int d = 0; d < 20; ++d) deep += "/d" + std::to_string(d);
  Put(deep + "/leaf", "deep\n");
  ::symlink("text.txt", (src + "/link").c_str());
  ::symlink("../sizes/f4096", (src + "/modes/rel-link").c_str());
  ::symlink("/nonexistent/target", (src + "/dangling").c_str());
  ::chmod((src + "/modes").c_str(), 0750);
  // Distinct mtimes with nanoseconds.
  int64_t t = 1600000000;
  for (auto it = std::filesystem::recursive_directory_iterator(src);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    struct timespec ts[2] = {{t, 0}, {t, (t * 7) % 1000000000}};
    ::utimensat(AT_FDCWD, it->path().c_str(), ts, AT_SYMLINK_NOFOLLOW);
    t += 13;
  }
}

struct Entry {
  mode_t mode;
  uid_t uid;
  gid_t gid;
  off_t size;
  int64_t mtime_s;
  long mtime_ns;
  std::string content;  // file bytes or symlink target
  bool operator==(const Entry& o) const {
    return mode == o.mode && uid == o.uid && gid == o.gid && size == o.size &&
           mtime_s == o.mtime_s && mtime_ns == o.mtime_ns && content == o.content;
  }
};

std::string Show(const Entry& e) {
  std::ostringstream s;
  s << std::oct << e.mode << std::dec << " " << e.uid << ":" << e.gid << " size " << e.size
    << " mtime " << e.mtime_s << "." << e.mtime_ns << " content " << e.content.size() << " bytes";
  return s.str();
}

// Every entry below `root` (relative path -> attributes, contents), by lstat/readdir only.
std::map<std::string, Entry> Walk(const std::string& root, bool with_dir_mtimes = true) {
  std::map<std::string, Entry> out;
  std::vector<std::string> todo = {""};
  while (!todo.empty()) {
    std::string rel = todo.back();
    todo.pop_back();
    std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
      ADD_FAILURE() << "opendir " << dir << ": " << std::strerror(errno);
      continue;
    }
    while (struct dirent* de = ::readdir(d)) {
      std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      std::string r = rel.empty() ? name : rel + "/" + name;
      std::string p = root + "/" + r;
      struct stat st;
      if (::lstat(p.c_str(), &st) != 0) {
        ADD_FAILURE() << "lstat " << p << ": " << std::strerror(errno);
        continue;
      }
      Entry e{
          st.st_mode,        st.st_uid,          st.st_gid, S_ISDIR(st.st_mode) ? 0 : st.st_size,
          st.st_mtim.tv_sec, st.st_mtim.tv_nsec, ""};
      if (S_ISDIR(st.st_mode)) {
        todo.push_back(r);
        if (!with_dir_mtimes) e.mtime_s = e.mtime_ns = 0;
      } else if (S_ISLNK(st.st_mode)) {
        e.content = std::filesystem::read_symlink(p).string();
      } else {
        e.content = ReadFile(p);
      }
      out[r] = e;
    }
    ::closedir(d);
  }
  return out;
}

void ExpectSameTree(const std::map<std::string, Entry>& want,
                    const std::map<std::string, Entry>& got) {
  EXPECT_EQ(want.size(), got.size());
  int shown = 0;
  for (const auto& [path, e] : want) {
    auto it = got.find(path);
    if (it == got.end()) {
      if (shown++ < 10) ADD_FAILURE() << "missing: " << path;
      continue;
    }
    if (!(it->second == e) && shown++ < 10) {
      ADD_FAILURE() << path << ": want " << Show(e) << ", got " << Show(it->second);
    }
  }
  for (const auto& [path, e] : got) {
    if (!want.count(path) && shown++ < 10) ADD_FAILURE() << "extra: " << path;
  }
}

// The source as a dsfs mount shows it: owner uid/gid, modes less `umask`.
std::map<std::string, Entry> Expected(const std::string& src, uid_t uid, gid_t gid, mode_t umask) {
  auto tree = Walk(src);
  for (auto& [path, e] : tree) {
    e.uid = uid;
    e.gid = gid;
    if (!S_ISLNK(e.mode)) e.mode &= ~umask;
  }
  return tree;
}

class KernelMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = CannotKernelMountReason();
    if (!why.empty()) GTEST_SKIP() << "SKIPPED: -o kernel mount test not run because " << why;
    ::chmod(dir_.path().c_str(), 0755);
    src_ = dir_ / "src";
    store_ = dir_ / "store.dsfs";
    mp_ = dir_ / "mnt";
    std::filesystem::create_directories(mp_);
  }
  void Pack() {
    CommandResult r = Dsfs({"pack", "-q", src_, store_});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  TempDir dir_;
  std::string src_, store_, mp_;
};

TEST_F(KernelMountTest, TreeEqualsTheSourceAndUmountTearsDownEveryLayer) {
  BuildTree(src_);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  ASSERT_GT(km.pid(), 0) << "no private image mount in " << kKernelRunDir;
  auto loops = LoopsBackedUnder(km.prefix());
  ASSERT_EQ(loops.size(), 1u);
  const std::string loop = loops[0].substr(0, loops[0].find(' '));
  EXPECT_EQ(ReadFile("/sys/block/" + loop + "/loop/dio"), "1\n") << "direct I/O";
  EXPECT_EQ(ReadFile("/sys/block/" + loop + "/ro"), "1\n") << "read-only";
  EXPECT_FALSE(std::filesystem::exists(mp_ + "/.dsfs")) << "EROFS shows the tree only";
  struct statfs sfs;
  ASSERT_EQ(::statfs(mp_.c_str(), &sfs), 0);
  EXPECT_EQ(static_cast<uint32_t>(sfs.f_type), 0xE0F5E1E2u) << "EROFS_SUPER_MAGIC_V1";
  EXPECT_TRUE(sfs.f_flags & ST_RDONLY);
  // Read-only: every modification fails with EROFS.
  errno = 0;
  EXPECT_LT(::open((mp_ + "/text.txt").c_str(), O_WRONLY), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::mkdir((mp_ + "/newdir").c_str(), 0755), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::unlink((mp_ + "/text.txt").c_str()), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_NE(::chmod((mp_ + "/text.txt").c_str(), 0777), 0);
  EXPECT_EQ(errno, EROFS);
  // Root's root directory keeps only owner bits without allow_other; the rest is the source.
  auto want = Expected(src_, 0, 0, 0);
  ExpectSameTree(want, Walk(mp_));
  struct stat st;
  ASSERT_EQ(::stat(mp_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "without allow_other only the owner may enter";

  r = Dsfs({"stats", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("kernel.image_reads"), std::string::npos) << r.out;
  r = Dsfs({"stats", "--json", mp_});
  EXPECT_NE(r.out.find("\"image_bytes\""), std::string::npos) << r.out;

  r = Dsfs({"umount", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  km.WaitDaemon();
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

TEST_F(KernelMountTest, ParallelReadersSeeNoWrongByte) {
  BuildTree(src_);
  Pack();
  auto want = Walk(src_);
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::vector<std::string> files;
  for (const auto& [path, e] : want) {
    if (S_ISREG(e.mode)) files.push_back(path);
  }
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      std::vector<std::string> order = files;
      std::shuffle(order.begin(), order.end(), std::mt19937(t));
      for (const auto& f : order) {
        std::ifstream in(mp_ + "/" + f, std::ios::binary);
        if (!in) {
          failed++;
          continue;
        }
        std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (got != want.at(f).content) wrong++;
      }
    });
  }
  for (auto& th : readers) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
}

TEST_F(KernelMountTest, OwnerUmaskAndAllowOtherAsAnotherUser) {
  Put(src_ + "/public.txt", "public\n", 0644);
  Put(src_ + "/private.txt", "private\n", 0600);
  Put(src_ + "/sub/x", "x\n", 0644);
  Pack();
  auto as_nobody = [](std::vector<std::string> cmd) {
    std::vector<std::string> argv = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return RunCommand(argv, 30);
  };
  {
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_, "allow_other,uid=1234,gid=2345,umask=027");
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ExpectSameTree(Expected(src_, 1234, 2345, 027), Walk(mp_));
    // Others have no bits left under umask 027.
    EXPECT_NE(as_nobody({"cat", mp_ + "/sub/x"}).exit_code, 0);
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
  {
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_, "allow_other,umask=022");
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    r = as_nobody({"cat", mp_ + "/public.txt", mp_ + "/sub/x"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(r.out, "public\nx\n");
    r = as_nobody({"cat", mp_ + "/private.txt"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
  {
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    // Without allow_other only the mounting user (root) gets in, as with a classic mount.
    r = as_nobody({"cat", mp_ + "/public.txt"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
    EXPECT_EQ(ReadFile(mp_ + "/public.txt"), "public\n");
  }
}

TEST_F(KernelMountTest, DamagedRecordFailsThatFileWithEioAndNothingElse) {
  std::string bad = RandomBytes(100000, 9);  // incompressible: stored as is
  Put(src_ + "/bad.bin", bad);
  for (int i = 0; i < 50; ++i) Put(src_ + "/small" + std::to_string(i), TextBytes(500, i));
  Put(src_ + "/good.bin", RandomBytes(70000, 10));
  CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src_, store_});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(DamageStoredFile(store_, bad));

  KernelMount km(mp_);
  r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int fd = ::open((mp_ + "/bad.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string buf(bad.size(), '\0');
  errno = 0;
  ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  int err = errno;
  ::close(fd);
  // The damaged chunk fails; bytes before it may come first (a short read), never wrong ones.
  if (n >= 0) {
    EXPECT_LT(static_cast<size_t>(n), bad.size()) << "the damaged file read in full";
    EXPECT_EQ(buf.substr(0, n), bad.substr(0, n));
    fd = ::open((mp_ + "/bad.bin").c_str(), O_RDONLY);
    n = ::pread(fd, buf.data(), buf.size() - n, n);
    err = errno;
    ::close(fd);
  }
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, EIO) << std::strerror(err);
  struct stat st;
  EXPECT_EQ(::stat((mp_ + "/bad.bin").c_str(), &st), 0) << "its metadata stays readable";
  EXPECT_EQ(static_cast<size_t>(st.st_size), bad.size());
  EXPECT_EQ(ReadFile(mp_ + "/good.bin"), RandomBytes(70000, 10));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(ReadFile(mp_ + "/small" + std::to_string(i)), TextBytes(500, i));
  }
  r = Dsfs({"stats", "--json", mp_});
  EXPECT_EQ(r.out.find("\"image_read_errors\": 0"), std::string::npos) << r.out;
}

TEST_F(KernelMountTest, KilledDaemonThenUmountCleansUpAndMountsAgain) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_GT(km.pid(), 0);
  ASSERT_EQ(::kill(km.pid(), SIGKILL), 0);
  km.WaitDaemon();
  EXPECT_EQ(FsType(mp_), "erofs") << "EROFS stays until dsfs umount";
  r = Dsfs({"stats", mp_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("daemon is gone"), std::string::npos) << Describe(r);
  EXPECT_NE(r.err.find("dsfs umount"), std::string::npos) << Describe(r);
  r = Dsfs({"umount", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
  r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
}

TEST_F(KernelMountTest, PlainUmountEndsTheDaemonWhichClearsItsLayers) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = RunCommand({"umount", mp_}, 30);  // umount(8), as systemd or a user would
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  km.WaitDaemon();
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

TEST_F(KernelMountTest, KilledDaemonAfterPlainUmountLeavesWhatUmountClears) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(::kill(km.pid(), SIGKILL), 0);
  km.WaitDaemon();
  RunCommand({"umount", mp_}, 30);
  EXPECT_FALSE(PrivateDirs(km.prefix()).empty());
  r = Dsfs({"umount", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

// fstab and `mount -t fuse.dsfs` run the helper with the options as mount(8) passes them.
TEST_F(KernelMountTest, MountHelperPassesKernelThroughAndUmount8EndsIt) {
  Put(src_ + "/a", "a\n");
  Pack();
  const std::string helper = dir_ / "mount.fuse.dsfs";
  ASSERT_EQ(::symlink(DsfsBinary().c_str(), helper.c_str()), 0);
  KernelMount km(mp_);
  CommandResult r = RunCommand({helper, store_, mp_, "-o", "ro,kernel,nofail,x-systemd.a=b"}, 60);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  auto dirs = PrivateDirs(km.prefix());
  ASSERT_EQ(dirs.size(), 1u);
  const pid_t pid = static_cast<pid_t>(std::atol(dirs[0].c_str() + km.prefix().size()));
  r = RunCommand({"umount", mp_}, 30);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(WaitChild(pid, milliseconds(5000)));
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

// Busy: refused without --lazy; with it, the open file is still served until it is closed,
// then the daemon clears every layer.
TEST_F(KernelMountTest, BusyMountNeedsLazyWhichServesOpenFilesUntilClosed) {
  const std::string data = RandomBytes(3 << 20, 5);
  Put(src_ + "/big", data);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int fd = ::open((mp_ + "/big").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  r = Dsfs({"umount", mp_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--lazy"), std::string::npos) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  r = Dsfs({"umount", "--lazy", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "");
  std::string got(data.size(), '\0');
  EXPECT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_TRUE(got == data) << "the open file is still served";
  EXPECT_FALSE(WaitChild(km.pid(), milliseconds(0)));
  ::close(fd);
  EXPECT_TRUE(WaitChild(km.pid(), milliseconds(5000)));
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

TEST_F(KernelMountTest, ForegroundDaemonUnmountsOnSigterm) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::string bin = DsfsBinary();
    ::execl(bin.c_str(), bin.c_str(), "mount", "-f", store_.c_str(), mp_.c_str(), "-o", "kernel",
            nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitUntil([&] { return FsType(mp_) == "erofs"; }, milliseconds(15000)));
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int st = 0;
  ASSERT_TRUE(WaitUntil([&] { return ::waitpid(pid, &st, WNOHANG) == pid; }, milliseconds(10000)));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

TEST_F(KernelMountTest, NonRootIsRefusedWithAClearMessage) {
  Put(src_ + "/a", "a\n");
  Pack();
  ::chown(mp_.c_str(), 65534, 65534);
  CommandResult r = RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                DsfsBinary(), "mount", store_, mp_, "-o", "kernel"},
                               30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs root"), std::string::npos) << Describe(r);
  EXPECT_EQ(FsType(mp_), "");
}

TEST_F(KernelMountTest, OtherErofsMountsAreRefused) {
  // An EROFS image of our own, mounted with plain tools: dsfs umount must leave it alone.
  Put(src_ + "/a", "a\n");
  std::string img = dir_ / "plain.erofs";
  CommandResult r = RunCommand({"mkfs.erofs", "--quiet", img, src_}, 60);
  if (r.exit_code != 0) GTEST_SKIP() << "SKIPPED: mkfs.erofs not usable: " << Describe(r);
  r = RunCommand({"mount", "-t", "erofs", "-o", "loop,ro", img, mp_}, 30);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"umount", mp_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("did not make"), std::string::npos) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  RunCommand({"umount", mp_}, 30);
}

// Each view is its own tree: its bytes equal the classic mount's MOUNT/.dsfs/NAME.
TEST_F(KernelMountTest, ViewsAreTheirOwnTreesWithTheClassicViewsBytes) {
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 20; ++i) {
      Put(src_ + "/class" + std::to_string(c) + "/img" + std::to_string(i) + ".jpg",
          Jpeg(32, 32, c * 100 + i));
    }
  }
  Put(src_ + "/class1/notes.txt", "not an image\n");
  ::symlink("class0", (src_ + "/alias").c_str());
  Pack();
  std::string classic = dir_ / "classic";
  std::filesystem::create_directories(classic);
  CommandResult r = Dsfs({"mount", store_, classic});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(std::filesystem::is_directory(classic + "/.dsfs/bmp"))
      << FsType(classic) << " " << Describe(r)
      << RunCommand({"grep", "dsfs-test", "/proc/self/mountinfo"}).out;
  for (const char* view : {"bmp", "npy", "tensor"}) {
    SCOPED_TRACE(view);
    KernelMount km(mp_);
    r = km.Mount(store_, std::string("allow_other,view=") + view);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    // Directory mtimes aside: nothing else differs, not even the tensor view's generated files.
    ExpectSameTree(Walk(classic + "/.dsfs/" + view, false), Walk(mp_, false));
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
  EXPECT_EQ(Dsfs({"umount", classic}).exit_code, 0);
  WaitUntil([] { return ::waitpid(-1, nullptr, WNOHANG) <= 0; }, milliseconds(5000));
}

TEST(KernelMountOptionTest, KernelIsAMountOption) {
  MountConfig config;
  ASSERT_TRUE(ParseMountOptions("kernel,view=bmp", &config).ok());
  EXPECT_TRUE(config.kernel);
  EXPECT_FALSE(ParseMountOptions("kernel=1", &config).ok());
  MountHelperArgs helper;
  ASSERT_TRUE(ParseMountHelperArgs({"s.dsfs", "/mnt", "-o", "ro,kernel,nofail"}, &helper).ok());
  EXPECT_TRUE(helper.config.kernel);
}

}  // namespace
}  // namespace dsfs::testing
