// The S3 backend against a hostile server (tests/support/hostile_s3.h): what a slow, endless, lying
// or broken endpoint, and a planted or damaged disk cache, may cost a reader: an error line, an
// EIO, a bounded wait; never a hang, a crash, unbounded memory or a file that is not dsfs's
// touched.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "backend/s3/s3_kv.h"
#include "backend/s3/s3_kv_index.h"
#include "s3/client.h"
#include "s3/credentials.h"
#include "tests/support/hostile_s3.h"
#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

// A packed tree of small files in a few directories and one larger file, pushed to a fresh
// bucket of a fresh hostile server.
class HostileS3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.ok()) GTEST_SKIP() << "SKIPPED: " << server_.error();
    src_ = dir_ / "src";
    for (int i = 0; i < 40; ++i) {
      WriteFile(src_ + "/d" + std::to_string(i % 4) + "/f" + std::to_string(i),
                RandomBytes(1000 + (i * 7919) % 30000, 7 + i));
    }
    WriteFile(src_ + "/big.bin", RandomBytes(3 << 20, 3));
    store_ = dir_ / "store.db";
    ASSERT_NO_FATAL_FAILURE(server_.PackAndPush(src_, store_, &url_));
  }

  HostileS3 server_;
  TempDir dir_;
  std::string src_, store_, url_;
};

TEST_F(HostileS3Test, NormalServerServesTheStore) {
  CommandResult r = Dsfs({"cat", url_, "/d1/f1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, ReadFile(src_ + "/d1/f1"));
}

// The largest resident set of any child this process waited for so far, in MB.
uint64_t ChildrenPeakRssMb() {
  struct rusage ru;
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) / 1024;
}

TEST_F(HostileS3Test, DotSegmentsInTheUrlAreRefused) {
  const std::string bucket = url_.substr(5, url_.find('/', 5) - 5);
  for (const std::string& bad : {"s3://" + bucket + "/x/../s", "s3://" + bucket + "/./s",
                                 "s3://" + bucket + "/s/.", "s3://" + bucket + "/.."}) {
    EXPECT_TRUE(IsOneLineError(Dsfs({"ls", bad}), {"'..' in the prefix", "'.' in the prefix"}))
        << bad;
    EXPECT_TRUE(IsOneLineError(Dsfs({"push", "-q", "--force", store_, bad}),
                               {"'..' in the prefix", "'.' in the prefix"}))
        << bad;
  }
  CommandResult r = Dsfs({"cat", url_, "/d1/f1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, ReadFile(src_ + "/d1/f1"));
}

// 2 bytes/s: below the low-speed limit (1 KiB/s for s3_timeout, 2 s here), every try ends.
TEST_F(HostileS3Test, DripBelowTheLowSpeedLimitEndsEachTry) {
  server_.SetMode("drip 2 /data/");
  CommandResult r = Dsfs({"cat", url_, "/d1/f1"}, 120);
  EXPECT_TRUE(IsOneLineError(r, {"gave up after 2 tries"})) << Describe(r);
  EXPECT_GE(server_.HostileRequests(), 2);
}

// 4 KB/s: above the low-speed limit, but a 1 MiB block at that rate takes minutes: the
// deadline (connect + low-speed time + the size at 128 KiB/s) ends each try.
TEST_F(HostileS3Test, DripAboveTheLowSpeedLimitMeetsTheDeadline) {
  server_.SetMode("drip 4000 /data/");
  CommandResult r = Dsfs({"cat", url_, "/d1/f1"}, 120);
  EXPECT_TRUE(IsOneLineError(r, {"deadline"})) << Describe(r);
}

// A Content-Length of 10^15 announced, then a trickle: an announced size buys no time.
TEST_F(HostileS3Test, AnAnnouncedHugeLengthBuysNoTime) {
  server_.SetMode("bigclaim 4000 /data/");
  EXPECT_TRUE(IsOneLineError(Dsfs({"cat", url_, "/d1/f1"}, 120), {"deadline"}));
  // The index (2 KB here) ends before any deadline: the claim is found out as a short body.
  server_.SetMode("bigclaim 4000 dsfs-index");
  EXPECT_TRUE(IsOneLineError(Dsfs({"ls", url_}, 120), {"deadline", "partial file"}));
}

// A multipart completion answered 200 with an error inside: its code escaped, one line.
TEST_F(HostileS3Test, AFailedMultipartCompletionIsEscapedOnOneLine) {
  const std::string src = dir_ / "src20";
  WriteFile(src + "/large.bin", RandomBytes(20 << 20, 12));
  const std::string store = dir_ / "s20.db";
  ASSERT_EQ(Dsfs({"pack", "-q", "--backend", "lmdb", src, store}).exit_code, 0);
  server_.SetMode("errcomplete \\x1b[31mEVIL\\nSECOND\\x07");
  CommandResult r = Dsfs({"push", "-q", store, url_ + "20"}, 120);
  EXPECT_TRUE(IsOneLineError(r, {"multipart complete"})) << Describe(r);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << Printable(r.err);
  EXPECT_EQ(r.err.find('\x07'), std::string::npos) << Printable(r.err);
}

TEST_F(HostileS3Test, EndlessAndOversizedBodiesAreCutAndMemoryStaysBounded) {
  for (const char* mode : {"endless /data/", "oversize /data/"}) {
    server_.SetMode(mode);
    CommandResult r = Dsfs({"cat", url_, "/big.bin"}, 120);
    EXPECT_TRUE(IsOneLineError(r, {"longer than asked"})) << mode << ": " << Describe(r);
  }
  // The endless answers brought gigabytes; what a reader keeps is what it asked for.
  if (!kSanitized) EXPECT_LT(ChildrenPeakRssMb(), 200u);
  // An endless index is cut at the largest index there may be.
  server_.SetMode("endless dsfs-index");
  EXPECT_TRUE(IsOneLineError(Dsfs({"ls", url_}, 120), {"longer than asked"}));
  server_.SetMode("normal");
  EXPECT_EQ(Dsfs({"cat", url_, "/d1/f1"}).out, ReadFile(src_ + "/d1/f1"));
}

// An error document's <Code> with a newline and a terminal escape: printed escaped, one line.
TEST_F(HostileS3Test, ServerErrorTextIsEscapedOnOneLine) {
  for (const char* status : {"403", "500", "418"}) {
    server_.SetMode(std::string("error ") + status + " Bad\\nLine\\x1b[31mRed");
    CommandResult r = Dsfs({"ls", url_}, 120);
    EXPECT_TRUE(IsOneLineError(r, {"HTTP " + std::string(status)})) << Describe(r);
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << Printable(r.err);
    EXPECT_NE(r.err.find("Bad\\012Line\\033[31mRed"), std::string::npos) << Printable(r.err);
  }
}

TEST_F(HostileS3Test, StalledAndResetConnectionsEndWithinTheRetryBudget) {
  for (const char* mode : {"stall /data/", "reset /data/"}) {
    server_.SetMode(mode);
    CommandResult r = Dsfs({"cat", url_, "/d1/f1"}, 120);
    EXPECT_TRUE(IsOneLineError(r, {"gave up after 2 tries"})) << mode << ": " << Describe(r);
  }
}

// A crafted index: counts beyond its body, a value of 64 GiB. One line, no abort.
TEST_F(HostileS3Test, CraftedIndexIsOneLine) {
  AwsSettings settings;
  ASSERT_TRUE(LoadAwsSettings(&settings).ok());
  S3Client client(settings, S3Client::RetryPolicy{});
  S3Url url;
  ASSERT_TRUE(ParseS3Url(url_, &url).ok());
  const std::string key = url.prefix + "/dsfs-index";
  std::string good;
  ASSERT_TRUE(client.Get(url.bucket, key, &good).ok());
  // entries = 2^60 in the header, checksum made to match.
  std::string crafted = good;
  uint64_t huge = uint64_t{1} << 60;
  std::memcpy(crafted.data() + 32, &huge, 8);
  uint64_t sum = S3IndexChecksum(crafted);
  std::memcpy(crafted.data() + 48, &sum, 8);
  ASSERT_TRUE(client.Put(url.bucket, key, crafted).ok());
  EXPECT_TRUE(IsOneLineError(Dsfs({"ls", url_}), {"damaged S3 index (entry count)"}));
  // Every value claiming 64 GiB in objects of 64 GiB.
  S3Index index;
  ASSERT_TRUE(ParseS3Index("x", good, &index).ok());
  S3IndexBuilder b;
  for (const auto& e : index.entries) {
    b.Add(index.Key(e), e.object, e.offset, uint64_t{64} << 30, e.raw_length, e.sum);
  }
  std::vector<uint64_t> sizes(index.object_sizes.size(), uint64_t{64} << 30);
  ASSERT_TRUE(b.Finish(index.id, sizes, &crafted).ok());
  ASSERT_TRUE(client.Put(url.bucket, key, crafted).ok());
  EXPECT_TRUE(IsOneLineError(Dsfs({"cat", url_, "/d1/f1"}), {"damaged S3 index (value size)"}));
}

// A fetch whose leading thread throws (here: std::system_error, no thread can be started for
// the pieces of a 16 MiB value, the daemon's pids cgroup being full) completes its flight with
// an error: the readers sharing it get EIO, none waits for good, and reads work again once
// threads can be made.
TEST_F(HostileS3Test, AFetchThatThrowsFailsEveryReaderSharingIt) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string pids_root = "/sys/fs/cgroup/pids";
  if (::access((pids_root + "/cgroup.procs").c_str(), W_OK) != 0) {
    GTEST_SKIP() << "SKIPPED: no writable cgroup v1 pids controller at " << pids_root;
  }
  const std::string src = dir_ / "src16";
  WriteFile(src + "/large.bin", RandomBytes(20 << 20, 11));
  const std::string store = dir_ / "s16.db", url = url_ + "16";
  ASSERT_EQ(
      Dsfs({"pack", "-q", "--backend", "lmdb", "--chunk-size", "16777216", src, store}).exit_code,
      0);
  ASSERT_EQ(Dsfs({"push", "-q", store, url}).exit_code, 0);
  const std::string mp = dir_ / "mnt16";
  MakeDir(mp);
  MountGuard g(mp);
  const std::string log = dir_ / "log16";
  CommandResult r = g.MountBackground(url, {"-o", "cache_disk=0,log_level=debug,log_file=" + log});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_FALSE(g.daemons().empty());
  const pid_t daemon = g.daemons().front();
  const std::string group = pids_root + "/dsfs-test-" + std::to_string(::getpid());
  MakeDir(group);
  struct Restore {
    std::string root, group;
    pid_t pid;
    ~Restore() {
      WriteFile(root + "/cgroup.procs", std::to_string(pid));
      ::rmdir(group.c_str());
    }
  } restore{pids_root, group, daemon};
  WriteFile(group + "/cgroup.procs", std::to_string(daemon));
  WriteFile(group + "/pids.max", ReadFile(group + "/pids.current"));
  // Two readers of the same chunk at once: one leads the fetch, the other waits on it.
  auto read = [&] { return RunCommand({"cat", mp + "/large.bin"}, 120); };
  auto a = std::async(std::launch::async, read);
  auto b = std::async(std::launch::async, read);
  CommandResult ra = a.get(), rb = b.get();
  EXPECT_NE(ra.exit_code, 0) << Describe(ra);
  EXPECT_NE(rb.exit_code, 0) << Describe(rb);
  EXPECT_NE(ra.err.find("Input/output error"), std::string::npos) << Describe(ra);
  // What failed was the leader's thread creation, not the request.
  EXPECT_NE(ReadFile(log).find("fetch failed"), std::string::npos) << ReadFile(log);
  WriteFile(group + "/pids.max", "max");
  EXPECT_EQ(ReadFile(mp + "/large.bin"), ReadFile(src + "/large.bin"));
}

// Every way of serving a mount under a stalled endpoint: the classic /dev/fuse loop, FUSE over
// io_uring, -o kernel (EROFS over the image of a private mount). A read that must fetch fails
// with EIO within the retry budget, the mount lives on, and reads succeed once the endpoint
// answers again; the unmount is clean.
class HostileMountTest : public HostileS3Test, public ::testing::WithParamInterface<std::string> {};

TEST_P(HostileMountTest, AStalledEndpointCostsEioThenReadsRecover) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string how = GetParam();
  std::vector<std::string> args = {"-o", "cache_disk=0"};
  std::optional<ScopedEnableUring> uring;
  if (how == "uring") {
    uring.emplace(true);
    if (!uring->exists()) GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring";
    args = {"-o", "cache_disk=0,transport=uring"};
  } else if (how == "kernel") {
    args = {"-o", "cache_disk=0,kernel"};
  }
  const std::string mp = dir_ / "mnt";
  MakeDir(mp);
  MountGuard g(mp);
  CommandResult r = g.MountBackground(url_, args);
  if (how == "kernel" && r.exit_code != 0 && r.err.find("kernel") != std::string::npos) {
    GTEST_SKIP() << "SKIPPED: -o kernel is not available here: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  server_.SetMode("stall /data/");
  CommandResult stalled = RunCommand({"cat", mp + "/big.bin"}, 120);
  EXPECT_NE(stalled.exit_code, 0) << Describe(stalled);
  EXPECT_NE(stalled.err.find("Input/output error"), std::string::npos) << Describe(stalled);
  EXPECT_GE(server_.HostileRequests(), 1);
  server_.SetMode("normal");
  EXPECT_EQ(ReadFile(mp + "/big.bin"), ReadFile(src_ + "/big.bin"));
  EXPECT_EQ(TreeListing(mp), TreeListing(src_));
  CommandResult u = Dsfs({"umount", mp});
  EXPECT_EQ(u.exit_code, 0) << Describe(u);
}

INSTANTIATE_TEST_SUITE_P(Ways, HostileMountTest, ::testing::Values("classic", "uring", "kernel"));

// The disk cache's directory of a store has a predictable name (a hash of endpoint and URL):
// another user of a shared cache directory can plant a link there before the mount.
class HostileCacheTest : public HostileS3Test {
 protected:
  void SetUp() override {
    HostileS3Test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    mp_ = dir_ / "mnt";
    cache_ = dir_ / "cache";
    victim_ = dir_ / "victim";
    MakeDir(mp_);
    WriteFile(victim_ + "/sub/precious", "precious");
    WriteFile(victim_ + "/000000", "victim's bytes");
  }
  // Mounts with the disk cache, reads every file, unmounts; the exit of the mount.
  CommandResult MountAndRead(bool* same) {
    MountGuard g(mp_);
    CommandResult r = g.MountBackground(url_, {"-o", "cache_dir=" + cache_ + ",cache_disk=64M"});
    if (r.exit_code == 0) *same = TreeListing(mp_) == TreeListing(src_);
    return r;
  }
  // The store's directory in the cache (after a first mount).
  std::string StoreCacheDir() {
    for (const auto& e : std::filesystem::directory_iterator(cache_)) {
      if (e.path().filename().string().rfind("s3-", 0) == 0) return e.path().string();
    }
    return "";
  }
  void ExpectVictimIntact() {
    EXPECT_EQ(ReadFile(victim_ + "/sub/precious"), "precious");
    EXPECT_EQ(ReadFile(victim_ + "/000000"), "victim's bytes");
  }
  std::string mp_, cache_, victim_;
};

TEST_F(HostileCacheTest, APlantedLinkInTheCacheDeletesAndOverwritesNothing) {
  SKIP_UNLESS_CAN_MOUNT();
  bool same = false;
  ASSERT_EQ(MountAndRead(&same).exit_code, 0);
  ASSERT_TRUE(same);
  const std::string store_dir = StoreCacheDir();
  ASSERT_FALSE(store_dir.empty());
  // A data file replaced by a link to someone's file: never written through.
  std::string id_dir;
  for (const auto& e : std::filesystem::directory_iterator(store_dir)) {
    if (e.is_directory()) id_dir = e.path().string();
  }
  ASSERT_FALSE(id_dir.empty());
  std::filesystem::remove(id_dir + "/000000");
  ASSERT_EQ(::symlink((victim_ + "/000000").c_str(), (id_dir + "/000000").c_str()), 0);
  same = false;
  ASSERT_EQ(MountAndRead(&same).exit_code, 0);
  EXPECT_TRUE(same);
  ExpectVictimIntact();
  // An old store's directory replaced by a link to someone's directory: not emptied.
  ASSERT_EQ(::symlink(victim_.c_str(), (store_dir + "/00000000000000aa").c_str()), 0);
  ASSERT_EQ(MountAndRead(&same).exit_code, 0);
  ExpectVictimIntact();
  // The store's directory itself replaced by a link (a sticky, world-writable cache directory,
  // as a shared one would be): the mount refuses it in one line and touches nothing.
  std::filesystem::remove_all(store_dir);
  ASSERT_EQ(::chmod(cache_.c_str(), 01777), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), store_dir.c_str()), 0);
  CommandResult r = MountAndRead(&same);
  EXPECT_TRUE(IsOneLineError(r, {"symlink"})) << Describe(r);
  EXPECT_FALSE(IsMounted(mp_));
  ExpectVictimIntact();
}

TEST_F(HostileCacheTest, ADamagedCachedIndexDuringAnOutageIsOneLine) {
  SKIP_UNLESS_CAN_MOUNT();
  bool same = false;
  ASSERT_EQ(MountAndRead(&same).exit_code, 0);
  const std::string index = StoreCacheDir() + "/index";
  std::string bytes = ReadFile(index);
  ASSERT_GT(bytes.size(), 56u);
  // The entry count, once outside the checksum.
  bytes[37] ^= 0x40;
  WriteFile(index, bytes, 0600);
  server_.SetMode("reset");
  CommandResult r = MountAndRead(&same);
  EXPECT_TRUE(IsOneLineError(r, {"damaged S3 index"})) << Describe(r);
  EXPECT_FALSE(IsMounted(mp_));
}

}  // namespace
}  // namespace dsfs::testing
