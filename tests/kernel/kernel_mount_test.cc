// Real-mount tests of `dsfs mount -o kernel`: the tree served by EROFS over the image file of
// a private dsfs FUSE mount (kernel/kernel_mount.h), read by the kernel directly (file-backed, the
// default) or through a loop device (-o kernel=loop): ctest runs this suite once per backing
// (kernel_mount_util.h). The dsfs binary runs as a subprocess, as a user runs it; the tests
// compare what the kernel serves with the source (and the views with the classic mount's
// views) and check permissions as another user. Teardown and crashes are in
// kernel_mount_teardown_test.cc, the readahead and damaged records in
// kernel_mount_readahead_test.cc, the fallback to FUSE in kernel_mount_fallback_test.cc.

#include "kernel/kernel_mount.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cgroup_util.h"
#include "tests/support/kernel_mount_util.h"
#include "tests/support/prometheus_parser.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

TEST_F(KernelMountTest, TreeEqualsTheSourceAndUmountTearsDownEveryLayer) {
  BuildTree(src_);
  Pack();
  KernelMount km(mp_);
  const std::string prom = store_ + ".prom";  // -o metrics_file: checked below
  CommandResult r = km.Mount(store_, "metrics_file=" + prom + ",status_interval=0.1");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(FsType(mp_), "erofs");
  ASSERT_GT(km.pid(), 0) << "no private image mount in " << kKernelRunDir;
  EXPECT_TRUE(HasTheBackingUnderTest(mp_, km.private_dir()));
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
  // Through a symbolic link to the mountpoint, as any other command takes it.
  const std::string link = mp_ + ".link";
  ASSERT_EQ(::symlink(mp_.c_str(), link.c_str()), 0);
  r = Dsfs({"stats", link});
  ::unlink(link.c_str());
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("kernel.image_reads"), std::string::npos) << r.out;
  // The metrics (mount/metrics.h): the kernel path's image reads and their latency beside the
  // tree's counters, in the exposition format, from `dsfs stats` and from the metrics file.
  r = Dsfs({"stats", "--prometheus", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  PromExposition e;
  std::string error;
  ASSERT_TRUE(ParseExposition(r.out, &e, &error)) << error << "\n" << r.out;
  double v = 0;
  EXPECT_TRUE(e.Find("dsfs_kernel_image_reads_total",
                     {{"mountpoint", std::filesystem::canonical(mp_).string()}}, &v))
      << r.out;
  EXPECT_GT(v, 0);
  EXPECT_TRUE(e.Find("dsfs_kernel_image_read_duration_seconds_count", {}, &v)) << r.out;
  EXPECT_GT(v, 0);
  EXPECT_TRUE(e.Find("dsfs_memory_limit_bytes", {}, &v)) << r.out;
  std::string text;
  EXPECT_TRUE(WaitUntil(
      [&] {
        text.clear();
        return ReadAll(prom, &text, &error) && ParseExposition(text, &e, &error) &&
               e.Find("dsfs_kernel_image_reads_total", {}, &v) && v > 0;
      },
      milliseconds(30000)))
      << error << "\n"
      << text;

  r = Dsfs({"umount", mp_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  km.WaitDaemon();
  EXPECT_TRUE(LayersGone(mp_, km.prefix()));
  EXPECT_FALSE(std::filesystem::exists(prom)) << "the metrics file outlived its mount";
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
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
  {
    // Files shown as nobody's, still without allow_other: the root directory stays the
    // mounting user's, so nobody is kept out as a classic mount keeps it out.
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_, "uid=65534,gid=65534");
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    struct stat st;
    ASSERT_EQ(::stat((mp_ + "/public.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    r = as_nobody({"cat", mp_ + "/public.txt"});
    EXPECT_NE(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  }
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
  MountGuard classic_guard(classic);
  CommandResult r = classic_guard.MountBackground(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(std::filesystem::is_directory(classic + "/.dsfs/bmp")) << FsType(classic);
  for (const char* view : {"bmp", "npy", "tensor"}) {
    SCOPED_TRACE(view);
    KernelMount km(mp_);
    r = km.Mount(store_, std::string("allow_other,view=") + view);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    // Directory mtimes aside: nothing else differs, not even the tensor view's generated files.
    ExpectSameTree(Walk(classic + "/.dsfs/" + view, false), Walk(mp_, false));
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
}

// The image's reads (every read EROFS misses) are served over io_uring where the kernel allows
// it, as a classic mount's requests are; transport=classic and a kernel that says no get the
// /dev/fuse loop. The bytes are the same either way.
TEST_F(KernelMountTest, TheImageIsServedOverIoUringWhereTheKernelAllows) {
  BuildTree(src_);
  Pack();
  const auto want = Expected(src_, 0, 0, 0);
  struct Case {
    bool enable;
    std::string option, serving;
  };
  for (const Case& c : {Case{true, "", "uring ("}, Case{true, "transport=classic", "classic ("},
                        Case{false, "", "classic ("}}) {
    SCOPED_TRACE(std::string("enable_uring=") + (c.enable ? "Y " : "N ") + c.option);
    ScopedEnableUring enable(c.enable);
    if (c.enable && !enable.exists()) {
      GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring (no " << kEnableUringPath
                   << ")";
    }
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_, c.option);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ExpectSameTree(want, Walk(mp_));
    r = Dsfs({"stats", "--json", mp_});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.out.find("\"transport\": \"" + c.serving), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"image_read_errors\": 0"), r.out.find("\"image_read_errors\"")) << r.out;
    r = Dsfs({"umount", mp_});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    km.WaitDaemon();
    EXPECT_TRUE(LayersGone(mp_, km.prefix()));
  }
}

// Tiny files are inline after their inodes, several to a 4 KiB block (the image, and the page
// cache it fills, is a fraction of one block per file), and read back exactly, beside a file
// whose tail is not inlined and an empty one; a second pass, from the kernel's cache, too.
// (Where the image does not fit twice in the memory limit, directio, it is plain: not here.)
TEST_F(KernelMountTest, TinyFilesAreInlineAfterTheirInodes) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 400; ++i) {
    files["cls/f" + std::to_string(1000 + i)] = TextBytes(600 + i, i);
  }
  files["cls/big"] = RandomBytes(3 * 4096 + 100, 7);
  files["cls/empty"] = "";
  for (const auto& [name, data] : files) Put(src_ + "/" + name, data);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [name, data] : files) {
      EXPECT_TRUE(ReadFile(mp_ + "/" + name) == data) << "pass " << pass << ": " << name;
    }
  }
  // Plain, the 400 would take a block each (1.6 MB); inline, 4 to 6 to a block. Over a loop
  // device (whose page cache holds the metadata beside the files' own pages), plain.
  if (LoopBackingUnderTest()) {
    EXPECT_GT(KernelStat(mp_, "kernel.image_bytes"), 400u * 4096);
  } else {
    EXPECT_LT(KernelStat(mp_, "kernel.image_bytes"), 150u * 4096) << Describe(Dsfs({"stats", mp_}));
  }
  EXPECT_EQ(KernelStat(mp_, "kernel.image_read_errors"), 0u);
}

// A format 5 store (packed without a dictionary) gets the compressed image: its small files are
// fragments of the packed inode whose pclusters are the store's own groups, which the kernel
// decodes; the tree (odd names, empty and large files, 3,000 entries) reads as its source,
// twice, and every view still reads as the classic mount's. A kernel without what it takes
// ($DSFS_EROFS_FEATURES fakes the probe) gets the uncompressed image.
TEST_F(KernelMountTest, FormatFiveStoreGetsTheCompressedImage) {
  BuildTree(src_);
  for (int i = 0; i < 300; ++i) {
    Put(src_ + "/crops/c" + std::to_string(1000 + i) + ".jpg", Jpeg(32, 32, i));
  }
  Pack({"--dict-size", "0"});
  const auto want = Expected(src_, 0, 0, 0);
  {
    KernelMount km(mp_);
    CommandResult r = km.Mount(store_);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(KernelStat(mp_, "kernel.compressed"), 1u) << Describe(r);
    for (int pass = 0; pass < 2; ++pass) ExpectSameTree(want, Walk(mp_));
    EXPECT_EQ(KernelStat(mp_, "kernel.image_read_errors"), 0u);
    // (Over a loop device the loop reads with direct I/O and EROFS does not.)
    EXPECT_EQ(KernelStat(mp_, "kernel.directio"), LoopBackingUnderTest() ? 0u : 1u)
        << "a compressed image: always directio";
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
    km.WaitDaemon();
  }
  ::setenv("DSFS_EROFS_FEATURES", "fragments", 1);  // no zstd
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ::unsetenv("DSFS_EROFS_FEATURES");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(KernelStat(mp_, "kernel.compressed"), 0u);
  ExpectSameTree(want, Walk(mp_));
  EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  km.WaitDaemon();
}

// Where the small files' decoded bytes, the image and the kernel's inodes do not fit in the
// memory limit, a format 5 store gets the uncompressed image: there every read of a small file
// would decode its whole group again (docs/kernel.md). 72 MB of small files in a 64 MiB cgroup.
TEST_F(KernelMountTest, FormatFiveStoreBeyondTheMemoryLimitGetsTheUncompressedImage) {
  const std::string v1 = V1MemoryMount();
  if (v1.empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller";
  for (int i = 0; i < 1200; ++i) {
    Put(src_ + "/d" + std::to_string(i % 3) + "/t" + std::to_string(i), TextBytes(60000, i));
  }
  Pack({"--dict-size", "0"});
  TestCgroup cg(v1, "kimage-fit");
  ASSERT_TRUE(cg.made()) << cg.error();
  ASSERT_TRUE(cg.SetLimit(64 << 20));
  KernelMount km(mp_);
  // The daemon starts in the cgroup (this process only while it mounts).
  std::ofstream(cg.path() + "/cgroup.procs") << ::getpid() << std::endl;
  CommandResult r = km.Mount(store_);
  std::ofstream(v1 + "/cgroup.procs") << ::getpid() << std::endl;
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(KernelStat(mp_, "kernel.compressed"), 0u) << Describe(r);
  for (int i = 0; i < 1200; i += 7) {
    ASSERT_EQ(ReadFile(mp_ + "/d" + std::to_string(i % 3) + "/t" + std::to_string(i)),
              TextBytes(60000, i));
  }
  EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  km.WaitDaemon();
  // $DSFS_KERNEL_FIT=always replaces the rule (benchmarks that look for the bound).
  ::setenv("DSFS_KERNEL_FIT", "always", 1);
  KernelMount forced(mp_);
  std::ofstream(cg.path() + "/cgroup.procs") << ::getpid() << std::endl;
  r = forced.Mount(store_);
  std::ofstream(v1 + "/cgroup.procs") << ::getpid() << std::endl;
  ::unsetenv("DSFS_KERNEL_FIT");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(KernelStat(mp_, "kernel.compressed"), 1u) << Describe(r);
  EXPECT_EQ(ReadFile(mp_ + "/d1/t7"), TextBytes(60000, 7));
  EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  forced.WaitDaemon();
}

// Views of a format 5 store are their own trees, as of any store (pixels made by dsfs).
TEST_F(KernelMountTest, ViewsOfAFormatFiveStoreAreTheClassicViews) {
  for (int i = 0; i < 30; ++i) Put(src_ + "/cls/img" + std::to_string(i) + ".jpg", Jpeg(32, 32, i));
  Pack({"--dict-size", "0"});
  std::string classic = dir_ / "classic";
  std::filesystem::create_directories(classic);
  MountGuard classic_guard(classic);
  CommandResult r = classic_guard.MountBackground(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* view : {"bmp", "npy"}) {
    SCOPED_TRACE(view);
    KernelMount km(mp_);
    r = km.Mount(store_, std::string("allow_other,view=") + view);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(KernelStat(mp_, "kernel.compressed"), 0u);
    ExpectSameTree(Walk(classic + "/.dsfs/" + view, false), Walk(mp_, false));
    EXPECT_EQ(Dsfs({"umount", mp_}).exit_code, 0);
  }
}

TEST_F(KernelMountTest, BogusKernelValueIsRefusedWithOneLine) {
  Put(src_ + "/a", "a\n");
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.MountWith(store_, "kernel=bogus", "");
  EXPECT_TRUE(IsOneLineError(r, {"kernel=bogus"}, 2)) << Describe(r);
  EXPECT_EQ(FsType(mp_), "");
  EXPECT_TRUE(PrivateDirs(km.prefix()).empty());
}

TEST(KernelMountOptionTest, KernelIsAMountOption) {
  MountConfig config;
  ASSERT_TRUE(ParseMountOptions("kernel,view=bmp", &config).ok());
  EXPECT_TRUE(config.kernel);
  EXPECT_FALSE(config.kernel_loop);
  MountConfig loop;
  ASSERT_TRUE(ParseMountOptions("kernel=loop", &loop).ok());
  EXPECT_TRUE(loop.kernel);
  EXPECT_TRUE(loop.kernel_loop);
  MountConfig bad;
  EXPECT_FALSE(ParseMountOptions("kernel=1", &bad).ok());
  EXPECT_FALSE(ParseMountOptions("kernel=bogus", &bad).ok());
  MountHelperArgs helper;
  ASSERT_TRUE(ParseMountHelperArgs({"s.dsfs", "/mnt", "-o", "ro,kernel,nofail"}, &helper).ok());
  EXPECT_TRUE(helper.config.kernel);
}

}  // namespace
}  // namespace dsfs::testing
