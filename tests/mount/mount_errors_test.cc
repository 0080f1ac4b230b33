// Real mounts that fail or end badly: `dsfs mount` errors (one clear line, nothing left mounted,
// no daemon left running), a daemon killed with SIGKILL, `dsfs umount` of what it must refuse,
// busy and bind mounts, and the `dsfs pack` errors that need root (another user, a full disk).

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// `dsfs mount` errors: each one a non-zero exit with one clear stderr line, nothing left
// mounted and no daemon left running.

class MountErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_CAN_MOUNT();
    BecomeSubreaper();
    src_ = dir_ / "src";
    MakeDir(src_);
    PutFile(src_ + "/hello.txt", "hello\n");
    big_ = RandomBytes(3 << 20, 7);
    PutFile(src_ + "/big.bin", big_);
    store_ = dir_ / "good.dsfs";
    // LMDB: TruncatedStore cuts the store file (a RocksDB store is a directory).
    CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src_, store_});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    mp_ = dir_ / "mnt";
    MakeDir(mp_);
  }

  // After a failed mount: nothing mounted at `mp`, and no daemon of it left behind.
  void ExpectNothingLeft(const std::string& mp) {
    EXPECT_FALSE(IsMounted(mp)) << mp << " is mounted after a failed mount";
    std::vector<pid_t> left = DaemonChildren(mp);
    EXPECT_TRUE(left.empty()) << left.size() << " daemon(s) left running for " << mp;
    for (pid_t pid : left) {
      ::kill(pid, SIGKILL);
      WaitChild(pid, milliseconds(5000));
    }
  }

  TempDir dir_;
  std::string src_, store_, mp_, big_;
};

TEST_F(MountErrorsTest, MissingStore) {
  MountGuard guard(mp_);
  std::string missing = dir_ / "missing.dsfs";
  CommandResult r = guard.MountBackground(missing);
  EXPECT_TRUE(IsOneLineError(r, {"missing.dsfs"}));
  EXPECT_TRUE(IsOneLineError(r, {"no such file", "does not exist", "not found"}));
  ExpectNothingLeft(mp_);
}

TEST_F(MountErrorsTest, FileThatIsNotAStore) {
  std::string text = dir_ / "notes.txt";
  PutFile(text, TextBytes(100000, 3));
  std::string empty = dir_ / "empty.dsfs";
  PutFile(empty, "");
  for (const std::string& store : {text, empty}) {
    SCOPED_TRACE(store);
    MountGuard guard(mp_);
    CommandResult r = guard.MountBackground(store);
    EXPECT_TRUE(IsOneLineError(r, {"not a dsfs store"}));
    EXPECT_TRUE(IsOneLineError(r, {store}));
    ExpectNothingLeft(mp_);
  }
}

TEST_F(MountErrorsTest, TruncatedStore) {
  std::string bytes = ReadFile(store_);
  // Half, as an interrupted copy leaves it; also inside the header pages and one byte short.
  for (size_t size : {bytes.size() / 2, size_t{100}, size_t{8192}, bytes.size() - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(size) + " of " + std::to_string(bytes.size()));
    std::string cut = dir_ / "cut.dsfs";
    PutFile(cut, std::string_view(bytes).substr(0, size));
    MountGuard guard(mp_);
    CommandResult r = guard.MountBackground(cut);
    EXPECT_TRUE(IsOneLineError(r, {"truncated", "corrupt"}));
    EXPECT_TRUE(IsOneLineError(r, {"cut.dsfs"}));
    ExpectNothingLeft(mp_);
  }
}

// A damaged LMDB B-tree (node offsets, a page header): LMDB would follow it wherever it leads
// and the daemon die of SIGSEGV on its first read. The daemon checks the tree when it opens the
// store, in a child process, and the mount fails with one line; the pristine store mounts.
TEST_F(MountErrorsTest, DamagedLmdbTreeIsRefused) {
  const std::string bytes = ReadFile(store_);
  std::vector<LmdbPage> pages = LmdbTreePages(bytes);
  ASSERT_FALSE(pages.empty());
  std::vector<std::pair<size_t, size_t>> damage;  // offset, length
  for (const LmdbPage& page : pages) {
    ASSERT_GT(page.lower, 16u);
    damage.emplace_back(page.offset() + 16, std::min<size_t>(16, page.lower - 16u));
    damage.emplace_back(page.offset() + 12, 4);  // where its offsets end and its nodes begin
  }
  for (const auto& [offset, n] : damage) {
    SCOPED_TRACE(std::to_string(n) + " bytes at " + std::to_string(offset));
    std::string damaged = dir_ / "damaged.dsfs";
    PutFile(damaged, XorBytes(bytes, offset, n));
    MountGuard guard(mp_);
    CommandResult r = guard.MountBackground(damaged);
    EXPECT_TRUE(IsOneLineError(r, {"damaged store", "corrupt"}));
    EXPECT_TRUE(IsOneLineError(r, {"damaged.dsfs"}));
    ExpectNothingLeft(mp_);
  }
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/hello.txt"), "hello\n");
}

TEST_F(MountErrorsTest, MountpointMissing) {
  std::string nowhere = dir_ / "no_such_dir";
  MountGuard guard(nowhere);
  CommandResult r = guard.MountBackground(store_);
  EXPECT_TRUE(IsOneLineError(r, {"does not exist", "no such file"}));
  EXPECT_TRUE(IsOneLineError(r, {"no_such_dir"}));
  ExpectNothingLeft(nowhere);
}

TEST_F(MountErrorsTest, MountpointIsAFile) {
  std::string file = dir_ / "a_file";
  PutFile(file, "x");
  MountGuard guard(file);
  CommandResult r = guard.MountBackground(store_);
  EXPECT_TRUE(IsOneLineError(r, {"not a directory"}));
  EXPECT_TRUE(IsOneLineError(r, {"a_file"}));
  ExpectNothingLeft(file);
}

// /proc/self is the mounting command's own directory: a mount there vanished with it, and the
// command said it had mounted.
TEST_F(MountErrorsTest, MountpointInProcOrSysIsRefused) {
  for (const char* dir : {"/proc/self", "/sys/kernel"}) {
    CommandResult r = Dsfs({"mount", store_, dir});
    EXPECT_TRUE(IsOneLineError(r, {"is in /proc or /sys"})) << dir << ": " << Describe(r);
    EXPECT_TRUE(MountsAt(dir).empty()) << dir;
  }
}

TEST_F(MountErrorsTest, ReadWriteOptionIsAUsageError) {
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_, {"-o", "rw"});
  EXPECT_TRUE(IsOneLineError(r, {"read-only"}, 2));
  r = guard.MountBackground(store_, {"-o", "threads=0"});
  EXPECT_TRUE(IsOneLineError(r, {"threads"}, 2));
  // A number out of range says the range.
  r = guard.MountBackground(store_, {"-o", "threads=100000"});
  EXPECT_TRUE(IsOneLineError(r, {"threads=100000: not a whole number from 1 to 256"}, 2));
  r = guard.MountBackground(store_, {"-o", "zero_open=2"});
  EXPECT_TRUE(IsOneLineError(r, {"zero_open=2: not a whole number from 0 to 1"}, 2));
  ExpectNothingLeft(mp_);
}

TEST_F(MountErrorsTest, BadTransportIsAUsageError) {
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_, {"-o", "transport=ring"});
  EXPECT_TRUE(IsOneLineError(r, {"transport must be auto, uring or classic, not 'ring'"}, 2));
  r = guard.MountBackground(store_, {"-o", "transport"});
  EXPECT_TRUE(IsOneLineError(r, {"mount option transport"}, 2));
  ExpectNothingLeft(mp_);
}

// Empty items of an option list are nothing, as in fstab: "-o ,,," mounts with the defaults.
TEST_F(MountErrorsTest, EmptyOptionListMountsWithTheDefaults) {
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_, {"-o", ",,,"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/hello.txt"), "hello\n");
}

TEST_F(MountErrorsTest, SecondMountOnTheSameMountpoint) {
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t first = guard.daemons()[0];

  // Also with another spelling of the same directory.
  for (const std::string& mp : {mp_, mp_ + "/", dir_ / "src/../mnt"}) {
    SCOPED_TRACE(mp);
    r = Dsfs({"mount", store_, mp});
    EXPECT_TRUE(IsOneLineError(r, {"already mounted"}));
    EXPECT_EQ(MountsAt(mp_).size(), 1u) << "the second mount must not stack on the first";
    std::vector<pid_t> daemons = DaemonChildren(mp_);
    EXPECT_EQ(daemons, std::vector<pid_t>{first}) << "a second daemon was left running";
  }

  // The first mount still serves.
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp_ + "/big.bin", &data, &error)) << error;
  EXPECT_TRUE(data == big_);
  ASSERT_TRUE(ReadAll(mp_ + "/hello.txt", &data, &error)) << error;
  EXPECT_EQ(data, "hello\n");
  EXPECT_EQ(::kill(first, 0), 0) << "the first daemon died";
}

// Mounts of one directory started at the same instant: the check and the mount are one step
// under a lock of the directory, so exactly one mounts and every other says it is mounted
// (both used to pass the check and stack their mounts).
TEST_F(MountErrorsTest, SimultaneousMountsOfOneMountpointMountOnce) {
  MountGuard guard(mp_);
  constexpr int kMounts = 4;
  std::vector<CommandResult> results(kMounts);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kMounts; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kMounts) {
      }
      results[i] = Dsfs({"mount", store_, mp_}, 60);
    });
  }
  for (auto& t : threads) t.join();
  guard.Adopt();
  int mounted = 0;
  for (const CommandResult& r : results) {
    if (r.exit_code == 0) {
      ++mounted;
    } else {
      EXPECT_TRUE(IsOneLineError(r, {"already mounted"}));
    }
  }
  EXPECT_EQ(mounted, 1);
  EXPECT_EQ(MountsAt(mp_).size(), 1u) << "mounts stacked on one mountpoint";
  EXPECT_EQ(guard.daemons().size(), 1u) << "a daemon per mount that failed was left running";
  EXPECT_EQ(ReadFile(mp_ + "/hello.txt"), "hello\n");
}

// -o preload of a path that is no directory of the store fails the mount with one line
// (it only logged a warning, and the mount succeeded).
TEST_F(MountErrorsTest, PreloadOfNoDirectoryFailsTheMount) {
  for (std::string path : {"/nonexist", "/hello.txt", "/nonexist/deeper"}) {
    SCOPED_TRACE(path);
    MountGuard guard(mp_);
    CommandResult r = guard.MountBackground(store_, {"-o", "preload=" + path});
    EXPECT_TRUE(IsOneLineError(r, {"preload=" + path}));
    EXPECT_TRUE(IsOneLineError(r, {"directory"}));
    ExpectNothingLeft(mp_);
  }
  MountGuard guard(mp_);
  CommandResult r = guard.MountBackground(store_, {"-o", "preload=/"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/hello.txt"), "hello\n");
}

// ---------------------------------------------------------------------------------------------
// A daemon killed with SIGKILL leaves a dead mount behind; the CLI must name it and clear it.

// KilledDaemonTest in the kernel.* run: EROFS stays mounted over the dead daemon's image. What
// the kernel has cached of the image is still served, anything else fails with EIO (the
// image's FUSE connection is gone), and statfs is answered by EROFS itself; so the checks of a
// dead FUSE mount (ENOTCONN) do not apply, but what dsfs says about it does.
void ExpectADeadKernelMountIsReportedAndCleared(const std::string& store, const std::string& mp,
                                                MountGuard* guard) {
  EXPECT_TRUE(IsMounted(mp)) << "EROFS stays mounted until dsfs umount";
  std::string data, error;
  if (ReadAll(mp + "/a.txt", &data, &error)) {
    EXPECT_EQ(data, "alive\n") << "served from the page cache, so the right bytes";
  } else {
    EXPECT_NE(error.find("errno 5)"), std::string::npos) << error;
  }
  CommandResult r = Dsfs({"mount", store, mp});
  EXPECT_TRUE(IsOneLineError(r, {"dead", "daemon is gone"}));
  EXPECT_TRUE(IsOneLineError(r, {"dsfs umount"})) << "the message should say how to clear it";
  r = Dsfs({"stats", mp});
  EXPECT_TRUE(IsOneLineError(r, {"daemon is gone"}));
  EXPECT_TRUE(IsOneLineError(r, {"dsfs umount " + mp})) << "the message should say how to clear it";
  r = Dsfs({"umount", mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(mp));
  r = guard->MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(ReadAll(mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "alive\n");
}

TEST(KilledDaemonTest, DeadMountIsReportedClearedAndMountableAgain) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src);
  PutFile(src + "/a.txt", "alive\n");
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);

  MountGuard guard(mp);
  r = guard.MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u) << "cannot find the daemon serving " << mp;
  pid_t pid = guard.daemons()[0];
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_TRUE(WaitChild(pid, milliseconds(5000), &wstatus));
  guard.Forget(pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);

  if (KernelMountUnderTest()) {
    ExpectADeadKernelMountIsReportedAndCleared(store, mp, &guard);
    return;
  }
  // Whatever reaches the daemon now fails with ENOTCONN... Over io_uring only once the kernel
  // has torn the dead daemon's rings down: until then (a few ms) it answers ECONNABORTED, the
  // error of a stopped ring queue, as dsfs's dead-mount checks know.
  EXPECT_TRUE(IsMounted(mp)) << "the kernel keeps a dead FUSE mount until it is unmounted";
  DIR* d = nullptr;
  auto t0 = Clock::now();
  WaitUntil(
      [&] {
        errno = 0;
        d = ::opendir(mp.c_str());
        if (d) return true;
        return errno != ECONNABORTED;
      },
      milliseconds(2000));
  ::testing::Test::RecordProperty(
      "econnaborted_ms",
      static_cast<int>(std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count()));
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(errno, ENOTCONN) << "opendir: " << ErrnoName(errno);
  if (d) ::closedir(d);
  errno = 0;
  EXPECT_EQ(::open((mp + "/a.txt").c_str(), O_RDONLY | O_CLOEXEC), -1);
  EXPECT_EQ(errno, ENOTCONN) << "open: " << ErrnoName(errno);
  // ...and so does statfs of the mountpoint, which the kernel never answers from a cache: it
  // is how `dsfs mount` tells a dead mount. (stat may still be answered from the attribute
  // cache, which dsfs fills with long timeouts for speed.)
  struct statfs sfs;
  errno = 0;
  EXPECT_EQ(::statfs(mp.c_str(), &sfs), -1) << "statfs of a dead mountpoint succeeded";
  EXPECT_EQ(errno, ENOTCONN) << ErrnoName(errno);

  r = Dsfs({"mount", store, mp});
  EXPECT_TRUE(IsOneLineError(r, {"dead mount"}));
  EXPECT_TRUE(IsOneLineError(r, {"dsfs umount"})) << "the message should say how to clear it";
  r = Dsfs({"stats", mp});
  EXPECT_TRUE(IsOneLineError(r, {"is a dead dsfs mount"}));
  EXPECT_TRUE(IsOneLineError(r, {"dsfs umount " + mp})) << "the message should say how to clear it";

  r = Dsfs({"umount", mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(mp));
  struct stat st;
  ASSERT_EQ(::stat(mp.c_str(), &st), 0) << ErrnoName(errno);
  EXPECT_TRUE(S_ISDIR(st.st_mode));

  r = guard.MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "alive\n");
}

TEST(UmountTest, UmountOfSomethingNotMountedFails) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  CommandResult r = Dsfs({"umount", dir.path()});
  EXPECT_TRUE(IsOneLineError(r, {"not mounted"}));
}

// A symbolic link to a mountpoint names that mount, as for umount(8): it said "not mounted".
// Also a relative link, a chain of links, and a link to a dead mount's mountpoint.
TEST(UmountTest, UmountOfASymbolicLinkToTheMountpoint) {
  SKIP_UNLESS_CAN_MOUNT();
  BecomeSubreaper();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  const std::string abs_link = s.dir / "abs", rel_link = s.dir / "rel", chain = s.dir / "chain";
  ASSERT_EQ(::symlink(s.mp.c_str(), abs_link.c_str()), 0);
  ASSERT_EQ(::symlink("mnt", rel_link.c_str()), 0);
  ASSERT_EQ(::symlink("rel", chain.c_str()), 0);
  for (const std::string& link : {abs_link, rel_link, chain}) {
    SCOPED_TRACE(link);
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ASSERT_EQ(guard.daemons().size(), 1u);
    pid_t pid = guard.daemons()[0];
    r = Dsfs({"umount", link});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_FALSE(IsMounted(s.mp));
    EXPECT_TRUE(WaitChild(pid, milliseconds(10000)));
    guard.Forget(pid);
    struct stat st;
    EXPECT_EQ(::lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself is left alone";
  }
  // The daemon killed: the link still names the dead mount, which umount clears.
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(WaitChild(pid, milliseconds(10000)));
  guard.Forget(pid);
  r = Dsfs({"umount", rel_link});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(s.mp));
  // A link to a directory that nothing is mounted on is still "not mounted".
  r = Dsfs({"umount", abs_link});
  EXPECT_TRUE(IsOneLineError(r, {"not mounted"}));
}

// `dsfs umount` unmounts dsfs mounts only: a typo must not unmount a disk.
TEST(UmountTest, UmountRefusesAnythingButADsfsMount) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  std::string tm = dir / "tm";
  MakeDir(tm);
  TmpfsGuard tmpfs(tm, "1M");
  ASSERT_TRUE(tmpfs.mounted()) << tmpfs.error();
  PutFile(tm + "/keep.txt", "still here\n");
  for (bool lazy : {false, true}) {
    std::vector<std::string> args = {"umount"};
    if (lazy) args.push_back("--lazy");
    args.push_back(tm);
    CommandResult r = Dsfs(args);
    EXPECT_TRUE(IsOneLineError(r, {"not a dsfs mount"})) << (lazy ? "--lazy" : "");
    ASSERT_TRUE(IsMounted(tm)) << "dsfs umount" << (lazy ? " --lazy" : "") << " unmounted a tmpfs";
    EXPECT_EQ(ReadFile(tm + "/keep.txt"), "still here\n");
  }
}

// `dsfs umount` returns once the daemon is gone, so the filesystem holding the store can be
// unmounted right after it. The daemon is kept busy past the unmount: listing the bmp view
// makes it render large images into the page cache (push), which it finishes before exiting.
TEST(UmountTest, UmountReturnsOnceTheDaemonHasExited) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string disk = dir / "disk", mp = dir / "mnt";
  MakeDir(disk);
  MakeDir(mp);
  TmpfsGuard tmpfs(disk, "64M");
  ASSERT_TRUE(tmpfs.mounted()) << tmpfs.error();
  MakeDir(disk + "/src");
  MakeDir(disk + "/src/c");
  for (int i = 0; i < 6; ++i) {
    PutFile(disk + "/src/c/big" + std::to_string(i) + ".png", GradientPng(2500, 2500, i));
  }
  CommandResult r = Dsfs({"pack", "-q", disk + "/src", disk + "/s.dsfs"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  {
    MountGuard guard(mp);
    // A -o kernel mount shows a view as its own tree: listing it, a read of its entries, has
    // the readahead render the images into the image's page cache.
    const bool kernel = KernelMountUnderTest();
    r = guard.MountBackground(disk + "/s.dsfs", {"-o", kernel ? "view=bmp,cache_size=2G,push=1G"
                                                              : "cache_size=2G,push=1G"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ASSERT_EQ(guard.daemons().size(), 1u);
    pid_t pid = guard.daemons()[0];
    EXPECT_EQ(DirNames(mp + (kernel ? "/c" : "/.dsfs/bmp/c")).size(), 6u);
    r = Dsfs({"umount", mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    // Exited (a zombie of this subreaper) before `dsfs umount` returned.
    pid_t ppid;
    char state = '?';
    EXPECT_FALSE(ProcStat(pid, &ppid, &state) && state != 'Z')
        << "the daemon still runs after dsfs umount returned";
    EXPECT_TRUE(WaitChild(pid, milliseconds(10000)));
    guard.Forget(pid);
  }
  r = RunCommand({"umount", disk});
  EXPECT_EQ(r.exit_code, 0) << "the store's filesystem is still busy: " << Describe(r);
}

// A bind mount of a dsfs mount shares its connection: unmounting one leaves the daemon serving
// the other, so `dsfs umount` does not wait for it (it waited 10 s) and says the store stays open.
TEST(UmountTest, UmountOfABindMountSaysTheDaemonStillServes) {
  SKIP_UNLESS_ROOT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string bind = s.dir / "bind";
  MakeDir(bind);
  r = RunCommand({"mount", "--bind", s.mp, bind});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  auto t0 = std::chrono::steady_clock::now();
  r = Dsfs({"umount", bind});
  auto waited = std::chrono::steady_clock::now() - t0;
  if (IsMounted(bind)) RunCommand({"umount", "-l", bind});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.err.find("daemon still runs"), std::string::npos) << Describe(r);
  EXPECT_LT(waited, std::chrono::seconds(8)) << "waited for a daemon that serves another mount";
  EXPECT_EQ(ReadFile(s.mp + "/a.txt"), ReadFile(s.src + "/a.txt"));
}

// Another user may not unmount root's mount: one line (fusermount3's own complaint made two).
TEST(UmountTest, OtherUsersUmountOfRootsMountIsOneLine) {
  SKIP_UNLESS_ROOT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  ASSERT_EQ(::chmod(s.dir.path().c_str(), 0755), 0);
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DsfsBinary(),
                  "umount", s.mp});
  EXPECT_TRUE(IsOneLineError(r, {"cannot unmount"}));
  EXPECT_TRUE(IsMounted(s.mp));
}

TEST(UmountTest, BusyMountNeedsLazy) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];

  int fd = ::open((s.mp + "/a.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << ErrnoName(errno);
  r = Dsfs({"umount", s.mp});
  EXPECT_TRUE(IsOneLineError(r, {"busy"}));
  EXPECT_TRUE(IsOneLineError(r, {"--lazy"})) << "the message should say what to do";
  EXPECT_TRUE(IsMounted(s.mp));

  // Detached, the open file still reads; the daemon ends once it is closed.
  r = Dsfs({"umount", "--lazy", s.mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(s.mp));
  char buf[64];
  ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "small store\n");
  ::close(fd);
  EXPECT_TRUE(WaitChild(pid, milliseconds(5000))) << "the daemon outlived its lazy unmount";
  guard.Forget(pid);
}

// The same daemon signalled (kill, systemctl stop, shutdown) while its file is still open and
// something else is mounted on its old mountpoint: it leaves that alone (libfuse's unmount by
// path took it down) and ends (-o kernel: once the file is closed; EROFS still reads it).
TEST(UmountTest, SignalledDaemonOfADetachedMountLeavesWhatIsMountedThereNow) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  MountGuard guard(s.mp);
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];
  int fd = ::open((s.mp + "/a.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << ErrnoName(errno);
  r = Dsfs({"umount", "--lazy", s.mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  {
    TmpfsGuard tmpfs(s.mp, "1M");
    ASSERT_TRUE(tmpfs.mounted()) << tmpfs.error();
    PutFile(s.mp + "/mine", "not dsfs's\n");
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    std::this_thread::sleep_for(milliseconds(1000));
    EXPECT_TRUE(IsMounted(s.mp)) << "the signalled daemon unmounted what it had not mounted";
    EXPECT_EQ(ReadFile(s.mp + "/mine"), "not dsfs's\n");
    ::close(fd);
    EXPECT_TRUE(WaitChild(pid, milliseconds(5000))) << "the signalled daemon did not end";
    guard.Forget(pid);
    EXPECT_TRUE(IsMounted(s.mp));
  }
}

// Mounted through a symlink that names another directory by the time the daemon is signalled:
// the daemon unmounts its own mount, where it is, and leaves what the link names now alone.
TEST(UmountTest, SignalledDaemonUnmountsItsMountNotWhatItsPathNamesNow) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  const std::string a = s.dir / "a", b = s.dir / "b", link = s.dir / "link";
  MakeDir(a);
  MakeDir(b);
  ASSERT_EQ(::symlink(a.c_str(), link.c_str()), 0);
  MountGuard guard(link);  // its daemon is found by the command line, which names the link
  CommandResult r = guard.MountBackground(s.store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];
  ASSERT_TRUE(IsMounted(a)) << "the mount is not on the directory the link named";
  TmpfsGuard tmpfs(b, "1M");
  ASSERT_TRUE(tmpfs.mounted()) << tmpfs.error();
  PutFile(b + "/mine", "not dsfs's\n");
  ASSERT_EQ(::unlink(link.c_str()), 0);
  ASSERT_EQ(::symlink(b.c_str(), link.c_str()), 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_TRUE(WaitChild(pid, milliseconds(5000))) << "the signalled daemon did not end";
  guard.Forget(pid);
  EXPECT_FALSE(IsMounted(a)) << "the daemon left its own mount";
  EXPECT_TRUE(IsMounted(b)) << "the daemon unmounted what its path names now";
  EXPECT_EQ(ReadFile(b + "/mine"), "not dsfs's\n");
  if (IsMounted(a)) ::umount2(a.c_str(), MNT_DETACH);
}

// ---------------------------------------------------------------------------------------------
// `dsfs pack` errors that need root (the others are in pack_errors_test.cc, in the unit tests):
// a clear line, and no store nor temporary file left behind.

TEST(PackErrorsRealFsTest, UnreadableSourceFileAsUnprivilegedUser) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  // Everything is world-readable except the one root-owned 0600 file.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  struct Case {
    const char* name;
    size_t secret_bytes;
    std::vector<std::string> flags;
  };
  // A small file is read first to train the dictionary, a large one only when compressed.
  const Case cases[] = {
      {"small", 2000, {}},
      {"small_no_dict", 2000, {"--dict-size", "0"}},
      {"large", 3 << 20, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string src = dir / (std::string("src_") + c.name);
    std::string out = dir / (std::string("out_") + c.name);
    MakeDir(src, 0755);
    MakeDir(src + "/class_a", 0755);
    for (int i = 0; i < 20; ++i) {
      PutFile(src + "/class_a/img" + std::to_string(i) + ".bin",
              RandomBytes(1000 + i, static_cast<uint32_t>(i)), 0644);
    }
    MakeDir(out, 0755);
    ASSERT_EQ(::chown(out.c_str(), kNobody, kNobody), 0) << ErrnoName(errno);
    std::vector<std::string> as_nobody = {
        "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DsfsBinary(), "pack", "-q"};
    as_nobody.insert(as_nobody.end(), c.flags.begin(), c.flags.end());

    // First without the secret: the unprivileged user can pack this tree into `out`.
    std::vector<std::string> args = as_nobody;
    args.push_back(src);
    args.push_back(out + "/ok.dsfs");
    CommandResult r = RunCommand(args);
    ASSERT_EQ(r.exit_code, 0) << "the test setup is wrong: " << Describe(r);
    ASSERT_EQ(::unlink((out + "/ok.dsfs").c_str()), 0);

    std::string secret = src + "/class_a/secret.bin";
    PutFile(secret, RandomBytes(c.secret_bytes, 99), 0600);
    args = as_nobody;
    args.push_back(src);
    args.push_back(out + "/s.dsfs");
    r = RunCommand(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(IsOneLineError(r, {secret})) << "the message must name the unreadable file";
    EXPECT_TRUE(IsOneLineError(r, {"permission denied"}));
    std::vector<std::string> left = DirNames(out);
    EXPECT_TRUE(left.empty()) << "left behind in the destination: " << left.front();
  }
}

TEST(PackErrorsRealFsTest, NoSpaceLeftLeavesNothingBehind) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  std::string src = dir / "src", small = dir / "small";
  MakeDir(src);
  for (int i = 0; i < 3; ++i) {
    PutFile(src + "/part" + std::to_string(i) + ".bin",
            RandomBytes(2 << 20, static_cast<uint32_t>(40 + i)));
  }
  MakeDir(small);
  TmpfsGuard tmpfs(small, "2m");
  ASSERT_TRUE(tmpfs.mounted()) << "cannot mount a tmpfs: " << tmpfs.error();
  CommandResult r = Dsfs({"pack", "-q", src, small + "/s.dsfs"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(IsOneLineError(r, {"no space"}));
  std::vector<std::string> left = DirNames(small);
  EXPECT_TRUE(left.empty()) << "left behind on the full filesystem: " << left.front();
}

}  // namespace
}  // namespace dsfs::testing
