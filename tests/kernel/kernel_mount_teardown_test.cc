// Teardown and crashes of `dsfs mount -o kernel` (kernel/kernel_mount.h), over the backing under
// test (kernel_mount_util.h): dsfs umount, umount(8), a killed daemon, a busy mount and
// --lazy, the mount helper, a foreground daemon's signal, and what dsfs umount must refuse.
// After every test no EROFS mount, loop device, private mount or directory of its
// mountpoint is left (KernelMount checks it on destruction).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kernel/kernel_mount.h"
#include "tests/support/kernel_mount_util.h"

namespace dsfs::testing {
namespace {

// The kernel mount fixture (tests/support/kernel_mount_util.h), a suite of its own per file.
class KernelTeardownTest : public KernelMountTest {};

using std::chrono::milliseconds;

TEST_F(KernelTeardownTest, KilledDaemonThenUmountCleansUpAndMountsAgain) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_GT(km.pid(), 0);
  EXPECT_TRUE(HasTheBackingUnderTest(mp_, km.private_dir()));
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

// A killed daemon with a file open on the mount and its data cached: dsfs umount (EBUSY) asks
// for --lazy, which clears every layer although the file stays open.
TEST_F(KernelTeardownTest, KilledDaemonWithAnOpenFileThenLazyUmountCleansUp) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int fd = ::open((mp_ + "/a").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char buf[8];
  EXPECT_EQ(::pread(fd, buf, sizeof(buf), 0), 2);
  ASSERT_EQ(::kill(km.pid(), SIGKILL), 0);
  km.WaitDaemon();
  r = Dsfs({"umount", mp_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--lazy"), std::string::npos) << Describe(r);
  r = Dsfs({"umount", "--lazy", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  ::close(fd);
  EXPECT_TRUE(WaitUntil([&] { return static_cast<bool>(LayersGone(mp_, km.prefix())); },
                        milliseconds(5000)));
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

// A bind mount of a -o kernel mount is a second EROFS mount of the same superblock: unmounting
// it must leave the first one served, with its private image mount and its `dsfs stats`.
TEST_F(KernelTeardownTest, UmountOfABindMountLeavesTheMountServed) {
  Put(src_ + "/a", "a\n");
  Put(src_ + "/b", "b\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string bind = dir_ / "bind";
  std::filesystem::create_directories(bind);
  r = RunCommand({"mount", "--bind", mp_, bind}, 30);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"umount", bind});
  if (!FsType(bind).empty()) RunCommand({"umount", "-l", bind}, 30);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.err.find("daemon still runs"), std::string::npos) << Describe(r);
  EXPECT_EQ(FsType(bind), "");
  EXPECT_EQ(FsType(mp_), "erofs");
  EXPECT_TRUE(MountedUnder(km.private_dir())) << "the private image mount was taken away";
  EXPECT_FALSE(WaitChild(km.pid(), milliseconds(0))) << "the daemon still serves " << mp_;
  r = Dsfs({"stats", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/b"), "b\n");
}

TEST_F(KernelTeardownTest, PlainUmountEndsTheDaemonWhichClearsItsLayers) {
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

TEST_F(KernelTeardownTest, KilledDaemonAfterPlainUmountLeavesWhatUmountClears) {
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

// What docs/kernel.md says a killed daemon leaves after umount(8): its dead private mount and
// directory, which block no mount of the mountpoint, and which the next -o kernel mount of it
// clears.
TEST_F(KernelTeardownTest, KilledDaemonAfterPlainUmountIsClearedByTheNextKernelMount) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string old_dir = km.private_dir();
  ASSERT_EQ(::kill(km.pid(), SIGKILL), 0);
  km.WaitDaemon();
  r = RunCommand({"umount", mp_}, 30);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "");
  EXPECT_EQ(PrivateDirs(km.prefix()), std::vector<std::string>{old_dir});
  std::vector<MountEntry> left = MountsAt(old_dir);
  ASSERT_EQ(left.size(), 1u) << "the dead private mount";
  EXPECT_EQ(left[0].fstype, "fuse.dsfs-image");
  // A classic mount of the mountpoint is not in the way of it, nor it in the classic's way.
  {
    MountGuard classic(mp_);
    r = classic.MountBackground(store_);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(FsType(mp_), "fuse.dsfs");
    EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
    r = Dsfs({"umount", mp_});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(MountsAt(old_dir).empty());
  auto dirs = PrivateDirs(km.prefix());
  EXPECT_TRUE(std::find(dirs.begin(), dirs.end(), old_dir) == dirs.end()) << "not cleared";
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
}

// fstab and `mount -t fuse.dsfs` run the helper with the options as mount(8) passes them.
TEST_F(KernelTeardownTest, MountHelperPassesKernelThroughAndUmount8EndsIt) {
  Put(src_ + "/a", "a\n");
  Pack();
  const std::string helper = dir_ / "mount.fuse.dsfs";
  ASSERT_EQ(::symlink(DsfsBinary().c_str(), helper.c_str()), 0);
  KernelMount km(mp_);
  CommandResult r =
      RunCommand({helper, store_, mp_, "-o", "ro," + KernelOption() + ",nofail,x-systemd.a=b"}, 60);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  auto dirs = PrivateDirs(km.prefix());
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_TRUE(HasTheBackingUnderTest(mp_, dirs[0]));
  const pid_t pid = static_cast<pid_t>(std::atol(dirs[0].c_str() + km.prefix().size()));
  r = RunCommand({"umount", mp_}, 30);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(WaitChild(pid, milliseconds(5000)));
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

// Busy: refused without --lazy; with it, the open file is still served (also the bytes no
// read has brought into the page cache yet) until it is closed, then the daemon clears every
// layer.
TEST_F(KernelTeardownTest, BusyMountNeedsLazyWhichServesOpenFilesUntilClosed) {
  const std::string data = RandomBytes(3 << 20, 5);
  Put(src_ + "/big", data);
  Pack();
  KernelMount km(mp_);
  // push=0: nothing of the file is in the image's page cache before the lazy unmount.
  CommandResult r = km.Mount(store_, "push=0");
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
  EXPECT_FALSE(WaitChild(km.pid(), milliseconds(0))) << "the daemon serves until the close";
  EXPECT_FALSE(PrivateDirs(km.prefix()).empty());
  ::close(fd);
  EXPECT_TRUE(WaitChild(km.pid(), milliseconds(5000)));
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

// A file open on a lazily unmounted mount, then a new mount of the same mountpoint, then the
// close: the old daemon sees its EROFS mount go and clears its layers. The file is opened
// without O_CLOEXEC, as a shell's `exec 7<MNT/a` is, so the next dsfs mount inherits it: its
// daemon kept the old EROFS mount (and so the old daemon and its private mount) alive until
// the next dsfs umount.
TEST_F(KernelTeardownTest, LazyUmountThenNewMountThenCloseEndsTheOldDaemon) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string old_dir = km.private_dir();
  int fd = ::open((mp_ + "/a").c_str(), O_RDONLY);  // inherited by the commands below
  ASSERT_GE(fd, 0);
  r = Dsfs({"umount", "--lazy", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"mount", store_, mp_, "-o", KernelOption()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string new_dir;
  for (const std::string& d : PrivateDirs(km.prefix())) {
    if (d != old_dir) new_dir = d;
  }
  ASSERT_FALSE(new_dir.empty());
  const pid_t new_pid = static_cast<pid_t>(std::atol(new_dir.c_str() + km.prefix().size()));
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  char buf[8];
  EXPECT_EQ(::pread(fd, buf, sizeof(buf), 0), 2) << "the open file is still served";
  ::close(fd);
  km.WaitDaemon();  // the old daemon exits after the close (5 s, else the test fails)
  EXPECT_EQ(PrivateDirs(km.prefix()), std::vector<std::string>{new_dir});
  EXPECT_TRUE(MountsAt(old_dir).empty()) << "the old private mount is left";
  EXPECT_EQ(FsType(mp_), "erofs") << "the new mount serves on";
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  r = Dsfs({"umount", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(WaitChild(new_pid, milliseconds(5000)));
}

// The daemon of a detached mount still read, signalled (kill, systemctl stop, shutdown), once
// something else is mounted on its old mountpoint: it leaves that alone (it used to unmount
// the path, taking down whatever was there), and ends once its last file is closed.
TEST_F(KernelTeardownTest, SignalledDaemonOfADetachedMountLeavesWhatIsMountedThereNow) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  int fd = ::open((mp_ + "/a").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  r = Dsfs({"umount", "--lazy", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  {
    TmpfsGuard tmpfs(mp_, "1M");
    ASSERT_TRUE(tmpfs.mounted()) << tmpfs.error();
    PutFile(mp_ + "/mine", "not dsfs's\n");
    ASSERT_EQ(::kill(km.pid(), SIGTERM), 0);
    std::this_thread::sleep_for(milliseconds(1000));
    EXPECT_EQ(FsType(mp_), "tmpfs") << "the signalled daemon unmounted what it had not mounted";
    EXPECT_EQ(ReadFile(mp_ + "/mine"), "not dsfs's\n");
    ::close(fd);
    km.WaitDaemon();
    EXPECT_EQ(FsType(mp_), "tmpfs");
  }
  EXPECT_TRUE(PrivateDirs(km.prefix()).empty());
}

TEST_F(KernelTeardownTest, ForegroundDaemonUnmountsOnSigterm) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  // As dsfs@.service runs it (Type=notify): READY=1 once EROFS answers, STOPPING=1 on SIGTERM.
  NotifySocket sock(dir_ / "notify.sock");
  ASSERT_TRUE(sock.ok()) << sock.path();
  const std::string bin = DsfsBinary(), option = KernelOption();
  const std::string notify = "NOTIFY_SOCKET=" + sock.path();
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::putenv(const_cast<char*>(notify.c_str()));
    ::execl(bin.c_str(), bin.c_str(), "mount", "-f", store_.c_str(), mp_.c_str(), "-o",
            option.c_str(), nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  std::string msg;
  bool ready = false;
  for (auto until = Clock::now() + std::chrono::seconds(15); !ready && Clock::now() < until;) {
    ready = sock.Receive(&msg, milliseconds(100)) && msg.find("READY=1") != std::string::npos;
  }
  EXPECT_TRUE(ready) << "no READY=1 within 15 s; last message: " << msg;
  ASSERT_EQ(FsType(mp_), "erofs");
  EXPECT_EQ(ReadFile(mp_ + "/a"), "a\n");
  EXPECT_TRUE(HasTheBackingUnderTest(mp_, km.prefix() + std::to_string(pid)));
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  bool stopping = false;
  for (auto until = Clock::now() + std::chrono::seconds(5); !stopping && Clock::now() < until;) {
    stopping = sock.Receive(&msg, milliseconds(100)) && msg.find("STOPPING=1") != std::string::npos;
  }
  EXPECT_TRUE(stopping) << "no STOPPING=1 within 5 s of SIGTERM";
  int st = 0;
  ASSERT_TRUE(WaitUntil([&] { return ::waitpid(pid, &st, WNOHANG) == pid; }, milliseconds(10000)));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
}

TEST_F(KernelTeardownTest, NonRootIsRefusedWithAClearMessage) {
  Put(src_ + "/a", "a\n");
  Pack();
  ::chown(mp_.c_str(), 65534, 65534);
  CommandResult r = RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                DsfsBinary(), "mount", store_, mp_, "-o", KernelOption()},
                               30);
  EXPECT_TRUE(IsOneLineError(r, {"needs root"})) << Describe(r);
  EXPECT_EQ(FsType(mp_), "");
}

TEST_F(KernelTeardownTest, OtherErofsMountsAreRefused) {
  // An EROFS image of our own, mounted with plain tools: dsfs umount must leave it alone.
  Put(src_ + "/a", "a\n");
  std::string img = dir_ / "plain.erofs";
  CommandResult r = RunCommand({"mkfs.erofs", "--quiet", img, src_}, 60);
  if (r.exit_code != 0) GTEST_SKIP() << "SKIPPED: mkfs.erofs not usable: " << Describe(r);
  // Over a loop device, or the file itself (what -o kernel does by default).
  const std::string how = LoopBackingUnderTest() ? "loop,ro" : "ro";
  r = RunCommand({"mount", "-t", "erofs", "-o", how, img, mp_}, 30);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"umount", mp_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("did not make"), std::string::npos) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  RunCommand({"umount", mp_}, 30);
}

}  // namespace
}  // namespace dsfs::testing
