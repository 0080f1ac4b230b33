// Mount options and ways of mounting: relative paths, spaces and UTF-8 in paths, allow_other with
// uid=, gid= and umask= as another user sees them (the views included), `dsfs add` while
// mounted, and `dsfs mount -f` ended by a signal.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kernel/kernel_mount.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// `dsfs add` while the store is mounted: the mount keeps serving the version it mounted (a
// snapshot, every byte of it readable), a new mount sees the added files.
TEST(AddWhileMountedTest, MountKeepsItsVersionAndANewMountSeesTheAdditions) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", more = dir / "more", store = dir / "s.dsfs";
  std::string mp1 = dir / "mnt1", mp2 = dir / "mnt2";
  MakeDir(src);
  MakeDir(more);
  MakeDir(mp1);
  MakeDir(mp2);
  std::map<std::string, std::string> old_files, new_files;
  for (int i = 0; i < 40; ++i) {
    std::string name = "c" + std::to_string(i % 4) + "/f" + std::to_string(i) + ".bin";
    old_files[name] = RandomBytes(30000 + i, 500 + i);
    new_files["n" + std::to_string(i % 3) + "/g" + std::to_string(i) + ".bin"] =
        RandomBytes(20000 + i, 900 + i);
  }
  for (const auto& [name, data] : old_files) {
    MakeDir(src + "/" + name.substr(0, name.find('/')));
    PutFile(src + "/" + name, data);
  }
  for (const auto& [name, data] : new_files) {
    MakeDir(more + "/" + name.substr(0, name.find('/')));
    PutFile(more + "/" + name, data);
  }
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  MountGuard first(mp1);
  r = first.MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  // Read half the files before the add, so the mount has state of the old version.
  int i = 0;
  for (const auto& [name, data] : old_files) {
    if (i++ % 2 == 0) {
      ASSERT_EQ(ReadFile(mp1 + "/" + name), data) << name;
    }
  }
  // Readers run during the add.
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    while (!stop) {
      for (const auto& [name, data] : old_files) {
        if (ReadFile(mp1 + "/" + name) != data) ++bad;
        ++reads;
      }
    }
  });
  r = Dsfs({"add", "-q", store, more});
  stop = true;
  reader.join();
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads during the add";
  // The first mount still serves exactly the old tree.
  for (const auto& [name, data] : old_files) EXPECT_EQ(ReadFile(mp1 + "/" + name), data) << name;
  struct stat st;
  EXPECT_NE(::stat((mp1 + "/n0").c_str(), &st), 0) << "the old mount shows an added directory";
  // A new mount sees old and new.
  MountGuard second(mp2);
  r = second.MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const auto& [name, data] : old_files) EXPECT_EQ(ReadFile(mp2 + "/" + name), data) << name;
  for (const auto& [name, data] : new_files) EXPECT_EQ(ReadFile(mp2 + "/" + name), data) << name;
  r = Dsfs({"verify", store});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

TEST(MountOptionsTest, RelativePathsFromAnotherDirectory) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  MountGuard guard(s.mp);
  // The daemon changes to "/": relative paths must be resolved from the caller's directory.
  CommandResult r = RunCommand(
      {"sh", "-c", "cd \"$1\" && exec \"$2\" mount s.dsfs mnt", "sh", s.dir.path(), DsfsBinary()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::vector<MountEntry> entries = MountsAt(s.mp);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].source, s.store) << "the store should be shown by its absolute path";
  std::string data, error;
  ASSERT_TRUE(ReadAll(s.mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "small store\n");
  r = RunCommand(
      {"sh", "-c", "cd \"$1\" && exec \"$2\" umount mnt", "sh", s.dir.path(), DsfsBinary()});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(s.mp));
}

TEST(MountOptionsTest, PathsWithSpacesAndUtf8) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  // mountinfo escapes spaces: finding the mount again must undo that.
  std::string store = s.dir / "my store ü.dsfs", mp = s.dir / "mount point ü";
  ASSERT_EQ(::rename(s.store.c_str(), store.c_str()), 0);
  MakeDir(mp);
  MountGuard guard(mp);
  CommandResult r = guard.MountBackground(store);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::vector<MountEntry> entries = MountsAt(mp);
  ASSERT_EQ(entries.size(), 1u);
  std::string private_stats;
  if (KernelMountUnderTest() && KernelStatsPath(mp, &private_stats)) {
    // EROFS's source is the image; the store's name is the private image mount's source.
    std::string dir = private_stats.substr(0, private_stats.rfind('/'));
    std::vector<MountEntry> image = MountsAt(dir);
    ASSERT_EQ(image.size(), 1u) << dir;
    EXPECT_EQ(image[0].source, "dsfs-image:" + store);
  } else {
    EXPECT_EQ(entries[0].source, store);
  }
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "small store\n");
  r = Dsfs({"mount", store, mp});
  EXPECT_TRUE(IsOneLineError(r, {"already mounted"}));
  r = Dsfs({"umount", mp});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(IsMounted(mp));
}

TEST(MountOptionsTest, AllowOtherAndOwnerOptionsUseTheStoredModes) {
  SKIP_UNLESS_CAN_MOUNT();
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  // The unprivileged user must be able to reach the mountpoint.
  ASSERT_EQ(::chmod(s.dir.path().c_str(), 0755), 0);
  auto as_nobody = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
    return RunCommand(argv, 30);
  };
  {
    // Owned by root as shown: another user reads what the modes allow, and nothing else.
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store, {"-o", "allow_other,threads=1"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    r = as_nobody({"cat", s.mp + "/a.txt"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(r.out, "small store\n");
    r = as_nobody({"cat", s.mp + "/private.txt"});
    EXPECT_NE(r.exit_code, 0) << "a 0600 root file was readable by another user";
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << Describe(r);
    r = as_nobody({"ls", s.mp + "/closed"});
    EXPECT_NE(r.exit_code, 0) << "a 0700 root directory was listable by another user";
  }
  {
    // uid=/gid= make every entry that user's: now the 0600 file is theirs to read.
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store, {"-o", "allow_other,uid=65534,gid=65534"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    struct stat st;
    ASSERT_EQ(::stat((s.mp + "/private.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kNobody);
    EXPECT_EQ(st.st_gid, kNobody);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    r = as_nobody({"cat", s.mp + "/private.txt"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(r.out, "root only\n");
  }
  {
    // umask= clears permission bits from every stored mode: 077 leaves the owner alone.
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store, {"-o", "allow_other,umask=077"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    struct stat st;
    ASSERT_EQ(::stat((s.mp + "/a.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    r = as_nobody({"cat", s.mp + "/a.txt"});
    EXPECT_NE(r.exit_code, 0) << "umask=077 left a file readable by another user";
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << Describe(r);
    r = RunCommand({"cat", s.mp + "/a.txt"}, 30);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    // uid= with umask=: files shown as nobody's, read-only for them (0600 & ~0277 = 0400).
    MountGuard guard(s.mp);
    CommandResult r =
        guard.MountBackground(s.store, {"-o", "allow_other,uid=65534,gid=65534,umask=0277"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    struct stat st;
    ASSERT_EQ(::stat((s.mp + "/private.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    r = as_nobody({"cat", s.mp + "/private.txt"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    // Without allow_other, no other user gets in at all.
    MountGuard guard(s.mp);
    CommandResult r = guard.MountBackground(s.store);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    r = as_nobody({"cat", s.mp + "/a.txt"});
    EXPECT_NE(r.exit_code, 0) << "another user read a mount made without allow_other";
  }
}

// With allow_other, an aggregate view file reveals nothing its reader could not read file by
// file: a private class (0700 directory of 0600 images) keeps the tensor view's images.npy,
// labels.npy, files.txt and classes.txt from other users; the per-image views keep the modes.
TEST(MountOptionsTest, AllowOtherViewsRevealNoMoreThanTheFilesThemselves) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src, 0755);
  MakeDir(src + "/pubcls", 0755);
  MakeDir(src + "/privcls", 0755);
  for (int i = 0; i < 2; ++i) {
    PutFile(src + "/pubcls/img" + std::to_string(i) + ".png", GradientPng(8, 8, i), 0644);
    PutFile(src + "/privcls/img" + std::to_string(i) + ".png", GradientPng(8, 8, 5 + i), 0600);
  }
  ::chmod((src + "/privcls").c_str(), 0700);
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  auto as_nobody = [](const std::string& path) {
    return RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", path},
                      30);
  };
  // By view ("": the original tree), what another user may not read and what they may.
  struct ViewChecks {
    std::string view;
    std::vector<std::string> denied, allowed;
  };
  const std::vector<ViewChecks> checks = {
      {"", {"/privcls/img0.png"}, {"/pubcls/img0.png"}},
      {"bmp", {"/privcls/img0.png"}, {"/pubcls/img0.png"}},
      {"npy", {"/privcls/img0.png.npy"}, {"/pubcls/img0.png.npy"}},
      {"tensor",
       {"/images.npy", "/labels.npy", "/files.txt", "/classes.txt"},
       {"/pubcls/images.npy"}}};
  // A classic mount shows every view under MOUNT/.dsfs; with -o kernel each view is a tree of
  // its own, mounted with view=NAME, where the kernel applies the same modes.
  const bool kernel = KernelMountUnderTest();
  MountGuard guard(mp);
  if (!kernel) {
    r = guard.MountBackground(store, {"-o", "allow_other"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  for (const ViewChecks& c : checks) {
    SCOPED_TRACE(c.view.empty() ? "original" : c.view);
    std::string root = mp;
    if (kernel) {
      r = guard.MountBackground(
          store, {"-o", c.view.empty() ? "allow_other" : "allow_other,view=" + c.view});
      ASSERT_EQ(r.exit_code, 0) << Describe(r);
    } else if (!c.view.empty()) {
      root = mp + "/.dsfs/" + c.view;
    }
    for (const std::string& path : c.denied) {
      r = as_nobody(root + path);
      EXPECT_NE(r.exit_code, 0) << path << " was readable by another user";
      EXPECT_EQ(r.out, "") << path;
      EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << path << ": " << Describe(r);
    }
    // The public class's own files (and its own aggregate) are everyone's.
    for (const std::string& path : c.allowed) {
      r = as_nobody(root + path);
      EXPECT_EQ(r.exit_code, 0) << path << ": " << Describe(r);
    }
    if (c.view == "tensor") {
      // The owner reads them all.
      std::string data, error;
      EXPECT_TRUE(ReadAll(root + "/images.npy", &data, &error)) << error;
      EXPECT_EQ(ReadFile(root + "/files.txt"),
                "privcls/img0.png\nprivcls/img1.png\npubcls/img0.png\npubcls/img1.png\n");
    }
    if (kernel) guard.Release();
  }
}

// ---------------------------------------------------------------------------------------------
// `dsfs mount -f` serves in the foreground until SIGTERM or SIGINT, then unmounts and exits 0.

class ForegroundTest : public ::testing::TestWithParam<int> {};

TEST_P(ForegroundTest, SignalUnmountsAndExitsZero) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  MakeDir(src);
  PutFile(src + "/a.txt", "foreground\n");
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);

  MountGuard guard(mp);
  ASSERT_TRUE(guard.MountForeground(store, dir / "log.txt"));
  ASSERT_EQ(guard.daemons().size(), 1u);
  pid_t pid = guard.daemons()[0];
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp + "/a.txt", &data, &error)) << error;
  EXPECT_EQ(data, "foreground\n");

  ASSERT_EQ(::kill(pid, GetParam()), 0);
  int wstatus = 0;
  bool exited = WaitChild(pid, milliseconds(5000), &wstatus);
  ASSERT_TRUE(exited) << "dsfs mount -f still runs 5 s after " << strsignal(GetParam());
  guard.Forget(pid);
  EXPECT_TRUE(WIFEXITED(wstatus)) << "killed by signal " << WTERMSIG(wstatus);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << ReadFile(dir / "log.txt");
  EXPECT_FALSE(IsMounted(mp)) << mp << " is still in /proc/self/mountinfo";
  struct stat st;
  EXPECT_EQ(::stat((mp + "/a.txt").c_str(), &st), -1) << "the mountpoint still shows the store";
}

INSTANTIATE_TEST_SUITE_P(Signals, ForegroundTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == SIGTERM ? "Sigterm" : "Sigint");
                         });

}  // namespace
}  // namespace dsfs::testing
