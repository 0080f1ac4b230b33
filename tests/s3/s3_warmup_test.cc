// `dsfs warmup` and `dsfs cache ls/gc` against live mounts of a store in the hostile fake S3
// server (tests/support/hostile_s3.h): a warm-up fetches each block once at most, an epoch after
// it (on the same mount, and on a new mount of the same cache_dir) makes no GET, classic and
// -o kernel; an interrupted warm-up run again finishes the job; gc never touches the cache of a
// live mount and removes it once unmounted and unused. No timed assertion: hang guards only.
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/hostile_s3.h"
#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

extern char** environ;

namespace dsfs::testing {
namespace {

constexpr int kDirs = 3;
constexpr int kFilesPerDir = 40;

// The cache subdirectories (s3-HASH) of `cache_dir`.
std::vector<std::string> CacheNames(const std::string& cache_dir) {
  std::vector<std::string> names;
  for (const auto& n : DirNames(cache_dir)) {
    if (n.rfind("s3-", 0) == 0) names.push_back(n);
  }
  return names;
}

class S3WarmupTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_CAN_MOUNT();
    if (!server_.ok()) GTEST_SKIP() << "SKIPPED: " << server_.error();
    src_ = dir_ / "src";
    // Small files in several directories (a block holds many: threads meet in blocks) and a
    // few that span blocks.
    for (int d = 0; d < kDirs; ++d) {
      for (int i = 0; i < kFilesPerDir; ++i) {
        WriteFile(src_ + "/d" + std::to_string(d) + "/f" + std::to_string(i),
                  RandomBytes(20000 + 977 * i, 1000 * d + i));
      }
    }
    for (int i = 0; i < 3; ++i) {
      WriteFile(src_ + "/big/b" + std::to_string(i), RandomBytes((3 << 20) + 12345 * i, 77 + i));
    }
    // A link of the store's to a directory outside the mount: no warm-up reads through it.
    WriteFile(dir_ / "outside/secret", "not the mount's");
    ASSERT_EQ(::symlink((dir_ / "outside").c_str(), (src_ + "/d0/out").c_str()), 0);
    store_ = dir_ / "store.db";
    ASSERT_NO_FATAL_FAILURE(server_.PackAndPush(src_, store_, &url_));
    cache_ = dir_ / "cache";
    ASSERT_EQ(::mkdir((dir_ / "mp").c_str(), 0755), 0) << std::strerror(errno);
  }

  bool Kernel() const { return std::string(GetParam()) == "kernel"; }

  // Mounts the store with the test's cache_dir; false (and the reason in *skip) if -o kernel
  // fell back to FUSE here.
  void Mount(MountGuard* guard, std::string* skip) {
    // push=0: no readahead of whole directories at lookup (the warm-up is what is tested).
    std::string opts = "cache_dir=" + cache_ + ",push=0";
    if (Kernel()) opts = "kernel," + opts;
    CommandResult r = guard->MountBackground(url_, {"-o", opts});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    struct statfs sf;
    ASSERT_EQ(::statfs(guard->mountpoint().c_str(), &sf), 0) << std::strerror(errno);
    if (Kernel() && sf.f_type != EROFS_SUPER_MAGIC_V1) {
      *skip = "-o kernel fell back to FUSE here (no EROFS?): " + Describe(r);
    }
  }

  // Reads every file of the mount and checks it against the source.
  void ExpectEpochMatches(const std::string& mp) { EXPECT_EQ(TreeListing(mp), TreeListing(src_)); }

  uint64_t StoreBytes() const { return std::filesystem::file_size(store_); }

  HostileS3 server_;
  TempDir dir_;
  std::string src_, store_, url_, cache_;
};

TEST_P(S3WarmupTest, WarmupThenAnEpochMakesNoGet) {
  MountGuard guard(dir_ / "mp");
  std::string skip;
  ASSERT_NO_FATAL_FAILURE(Mount(&guard, &skip));
  if (!skip.empty()) GTEST_SKIP() << "SKIPPED: " << skip;
  const std::string mp = guard.mountpoint();
  // Bad paths: one line each, nothing read.
  EXPECT_TRUE(IsOneLineError(Dsfs({"warmup", mp, "d0/../../x"}), {"may not hold '..'"}));
  EXPECT_TRUE(IsOneLineError(Dsfs({"warmup", mp, dir_.path()}), {"not inside the mount"}));
  EXPECT_TRUE(IsOneLineError(Dsfs({"warmup", mp, "nosuch"}), {"no such file"}));
  for (const std::string& through_link :
       {std::string("d0/out/"), std::string("d0/out/secret"), mp + "/d0/out/secret"}) {
    EXPECT_TRUE(IsOneLineError(Dsfs({"warmup", mp, through_link}), {"not inside the mount"}))
        << through_link;
  }
  // The link itself, named: not followed, like the links below a named directory.
  CommandResult link = Dsfs({"warmup", mp, "d0/out"});
  EXPECT_EQ(link.exit_code, 0) << Describe(link);
  EXPECT_NE(link.out.find("0 B cached, 0 failed (0/0 files"), std::string::npos) << link.out;
  // Files that cannot be read: named, counted, exit status 1 (and nothing cached).
  server_.SetMode("error 500 InternalError /data/");
  CommandResult bad = Dsfs({"warmup", mp, "d2/f0", "big/b0"});
  server_.SetMode("normal");
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_NE(bad.out.find(" cached, 2 failed"), std::string::npos) << Describe(bad);
  EXPECT_NE(bad.err.find("d2/f0"), std::string::npos) << Describe(bad);
  EXPECT_NE(bad.err.find("dsfs: error: 2 files could not be read"), std::string::npos)
      << Describe(bad);
  const uint64_t bytes_before = StatsField(mp, "remote_get_bytes");
  ASSERT_NE(bytes_before, UINT64_MAX);

  // Many threads over few blocks: each block fetched once (the bytes fetched stay within the
  // store's size; a block fetched twice by threads meeting in it would show).
  CommandResult w = Dsfs({"warmup", mp, "-j", "16"});
  ASSERT_EQ(w.exit_code, 0) << Describe(w);
  EXPECT_NE(w.out.find(" cached, 0 failed"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find(" S3 GETs"), std::string::npos) << w.out;
  const uint64_t fetched = StatsField(mp, "remote_get_bytes") - bytes_before;
  EXPECT_LE(fetched, StoreBytes()) << "a block fetched more than once";

  // An epoch on the same mount, then on a new mount of the same cache (RAM cache gone): no GET
  // but the index's at mount.
  const uint64_t gets = StatsField(mp, "remote_gets");
  ExpectEpochMatches(mp);
  EXPECT_EQ(StatsField(mp, "remote_gets"), gets);
  // A second warm-up finds everything cached.
  w = Dsfs({"warmup", mp, "d1", mp + "/big"});
  ASSERT_EQ(w.exit_code, 0) << Describe(w);
  EXPECT_NE(w.out.find(", 0 S3 GETs"), std::string::npos) << w.out;
  // The same summary as one JSON object (docs/usage.md, "JSON output").
  w = Dsfs({"warmup", "--json", mp, "d1"});
  ASSERT_EQ(w.exit_code, 0) << Describe(w);
  ASSERT_EQ(LineCount(w.out), 1) << w.out;
  const auto j = nlohmann::ordered_json::parse(w.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << w.out;
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"bytes_cached", "files_read", "files", "failed",
                                            "seconds", "bytes_per_s", "s3_gets", "interrupted"}));
  EXPECT_GT(j["files"].get<uint64_t>(), 0u) << w.out;
  EXPECT_EQ(j["files_read"], j["files"]) << w.out;
  EXPECT_EQ(j["failed"], 0) << w.out;
  EXPECT_EQ(j["s3_gets"], 0) << w.out;
  EXPECT_EQ(j["interrupted"], false) << w.out;
  guard.Release();

  MountGuard again(dir_ / "mp");
  ASSERT_NO_FATAL_FAILURE(Mount(&again, &skip));
  const uint64_t gets_at_mount = StatsField(mp, "remote_gets");
  ExpectEpochMatches(mp);
  EXPECT_EQ(StatsField(mp, "remote_gets"), gets_at_mount) << "an epoch after a warm-up fetched";
}

TEST_P(S3WarmupTest, AnInterruptedWarmupRunAgainFinishes) {
  MountGuard guard(dir_ / "mp");
  std::string skip;
  ASSERT_NO_FATAL_FAILURE(Mount(&guard, &skip));
  if (!skip.empty()) GTEST_SKIP() << "SKIPPED: " << skip;
  const std::string mp = guard.mountpoint();
  const uint64_t gets_before = StatsField(mp, "remote_gets");
  // Data slow enough that the warm-up is still running when interrupted (whenever the signal
  // lands, the outcome below holds: interrupted or finished, then finished).
  server_.SetMode("drip 2000000 /data/");
  const std::string bin = DsfsBinary();
  std::vector<std::string> args = {bin, "warmup", mp, "-j", "2", "-q"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(::posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  // Once it fetches (or after the guard), Ctrl-C.
  WaitUntil([&] { return StatsField(mp, "remote_gets") > gets_before; }, std::chrono::seconds(60));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_TRUE(WaitChild(pid, std::chrono::seconds(120), &status)) << "warmup did not stop";
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_TRUE(WEXITSTATUS(status) == 1 || WEXITSTATUS(status) == 0) << WEXITSTATUS(status);
  server_.SetMode("normal");

  CommandResult w = Dsfs({"warmup", mp});
  ASSERT_EQ(w.exit_code, 0) << Describe(w);
  EXPECT_NE(w.out.find(" cached, 0 failed"), std::string::npos) << w.out;
  const uint64_t gets = StatsField(mp, "remote_gets");
  ExpectEpochMatches(mp);
  EXPECT_EQ(StatsField(mp, "remote_gets"), gets);
}

// The cache of a live mount is listed as mounted and never removed; unmounted and unused past
// --keep-days it is; a store pushed over the URL since leaves its blocks to gc.
TEST_P(S3WarmupTest, CacheLsAndGcWithALiveMount) {
  std::string skip;
  {
    MountGuard guard(dir_ / "mp");
    ASSERT_NO_FATAL_FAILURE(Mount(&guard, &skip));
    if (!skip.empty()) GTEST_SKIP() << "SKIPPED: " << skip;
    ASSERT_EQ(Dsfs({"warmup", guard.mountpoint(), "d0", "-q"}).exit_code, 0);
    CommandResult ls = Dsfs({"cache", "ls", cache_});
    ASSERT_EQ(ls.exit_code, 0) << Describe(ls);
    EXPECT_NE(ls.out.find(url_), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find("mounted now"), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find("1 cache(s)"), std::string::npos) << ls.out;
    std::vector<std::string> names = CacheNames(cache_);
    ASSERT_EQ(names.size(), 1u);
    // Made old, and a stale store beside it: still in use, nothing removed.
    const std::string cache = cache_ + "/" + names[0];
    struct timespec old[2] = {{::time(nullptr) - 90 * 86400, 0}, {::time(nullptr) - 90 * 86400, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (cache + "/meta").c_str(), old, 0), 0) << std::strerror(errno);
    WriteFile(cache + "/0123456789abcdef/000000", "old blocks");
    CommandResult gc = Dsfs({"cache", "gc", cache_, "--keep-days", "0"});
    ASSERT_EQ(gc.exit_code, 0) << Describe(gc);
    EXPECT_NE(gc.out.find("in use (mounted now)"), std::string::npos) << gc.out;
    EXPECT_TRUE(std::filesystem::exists(cache + "/0123456789abcdef/000000"));
    EXPECT_TRUE(std::filesystem::exists(cache + "/meta"));
    // The mount still reads (from its cache).
    ExpectEpochMatches(guard.mountpoint());
  }
  std::vector<std::string> names = CacheNames(cache_);
  ASSERT_EQ(names.size(), 1u);
  const std::string cache = cache_ + "/" + names[0];
  // Unmounted, used just now: only the stale store goes.
  CommandResult gc = Dsfs({"cache", "gc", cache_});
  ASSERT_EQ(gc.exit_code, 0) << Describe(gc);
  EXPECT_NE(gc.out.find("removed stale stores"), std::string::npos) << gc.out;
  EXPECT_FALSE(std::filesystem::exists(cache + "/0123456789abcdef"));
  EXPECT_TRUE(std::filesystem::exists(cache + "/meta"));
  CommandResult ls = Dsfs({"cache", "ls", cache_});
  EXPECT_NE(ls.out.find("not mounted"), std::string::npos) << ls.out;
  // Unused for 90 days: dry run first, then removed.
  struct timespec old[2] = {{::time(nullptr) - 90 * 86400, 0}, {::time(nullptr) - 90 * 86400, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (cache + "/meta").c_str(), old, 0), 0) << std::strerror(errno);
  gc = Dsfs({"cache", "gc", cache_, "--keep-days", "30", "-n"});
  ASSERT_EQ(gc.exit_code, 0) << Describe(gc);
  EXPECT_NE(gc.out.find("would remove (unused for 90 days)"), std::string::npos) << gc.out;
  EXPECT_TRUE(std::filesystem::exists(cache));
  gc = Dsfs({"cache", "gc", cache_, "--keep-days", "30"});
  ASSERT_EQ(gc.exit_code, 0) << Describe(gc);
  EXPECT_NE(gc.out.find("removed (unused for 90 days)"), std::string::npos) << gc.out;
  EXPECT_FALSE(std::filesystem::exists(cache));
  // A mount after gc makes it again.
  MountGuard guard(dir_ / "mp");
  ASSERT_NO_FATAL_FAILURE(Mount(&guard, &skip));
  ExpectEpochMatches(guard.mountpoint());
  EXPECT_EQ(CacheNames(cache_).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Mounts, S3WarmupTest, ::testing::Values("classic", "kernel"));

// The errors of warmup: one line, a non-zero exit.
TEST(WarmupErrors, NotAMountAndAPathOutside) {
  TempDir dir;
  CommandResult r = Dsfs({"warmup", dir.path()});
  EXPECT_TRUE(IsOneLineError(r, {"not a dsfs mount"})) << Describe(r);
  r = Dsfs({"warmup", dir.path() + "/missing"});
  EXPECT_TRUE(IsOneLineError(r, {"no such file"})) << Describe(r);
  r = Dsfs({"warmup", dir.path(), "-j", "0"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
}

}  // namespace
}  // namespace dsfs::testing
