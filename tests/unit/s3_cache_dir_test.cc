// backend/s3/s3_cache_dir.h on synthetic cache directories: what `dsfs cache ls` lists and what
// `dsfs cache gc` removes; never a cache whose lock is held, nothing through a symlink, nothing
// that is not dsfs's.
#include "backend/s3/s3_cache_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "backend/s3/s3_kv_cache.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

constexpr const char* kA = "s3-00000000000000aa";
constexpr const char* kB = "s3-00000000000000bb";
constexpr const char* kIdA = "1111111111111111";
constexpr const char* kIdOld = "2222222222222222";

void Age(const std::string& path, int days) {
  const time_t t = ::time(nullptr) - static_cast<time_t>(days) * 86400;
  struct timespec ts[2] = {{t, 0}, {t, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// A cache as a mount leaves it: meta, lock, index, the store's blocks, `days` old.
void MakeCache(const std::string& dir, const std::string& id, int days) {
  WriteFile(dir + "/meta",
            "url=s3://bucket/" + id + "\nendpoint=http://127.0.0.1:1\nid=" + id + "\n");
  WriteFile(dir + "/lock", "");
  WriteFile(dir + "/index", "index bytes");
  WriteFile(dir + "/" + id + "/000000", std::string(8192, 'x'));
  WriteFile(dir + "/" + id + "/000001", std::string(4096, 'y'));
  Age(dir + "/meta", days);
}

class S3CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = dir_ / "cache";
    MakeDir(cache_, 0700);
  }
  std::string Cache(const char* name) const { return cache_ + "/" + name; }

  TempDir dir_;
  std::string cache_;
};

TEST_F(S3CacheDirTest, ListsCachesWithWhatTheirMetaSays) {
  MakeCache(Cache(kA), kIdA, 3);
  WriteFile(Cache(kA) + "/" + kIdOld + "/000000", "old");
  WriteFile(cache_ + "/notes.txt", "not dsfs's");
  MakeDir(cache_ + "/s3-not-a-hash");
  std::vector<S3CacheEntry> list;
  ASSERT_TRUE(ListS3Caches(cache_, &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, kA);
  EXPECT_EQ(list[0].meta.url, std::string("s3://bucket/") + kIdA);
  EXPECT_EQ(list[0].meta.endpoint, "http://127.0.0.1:1");
  EXPECT_EQ(list[0].meta.id, kIdA);
  EXPECT_GE(list[0].bytes, 12288u);
  EXPECT_FALSE(list[0].mounted);
  EXPECT_EQ(list[0].stale, std::vector<std::string>{kIdOld});
  EXPECT_LT(list[0].last_use, ::time(nullptr) - 2 * 86400);
  EXPECT_TRUE(ListS3Caches(dir_ / "missing", &list).IsNotFound());
}

TEST_F(S3CacheDirTest, GcRemovesOldCachesAndStaleStoresOnly) {
  MakeCache(Cache(kA), kIdA, 40);
  MakeCache(Cache(kB), kIdA, 1);
  WriteFile(Cache(kB) + "/" + kIdOld + "/000000", "old");
  WriteFile(Cache(kB) + "/" + kIdOld + "/README", "not dsfs's");
  WriteFile(cache_ + "/notes.txt", "not dsfs's");
  std::vector<S3CacheGcResult> results;
  S3CacheGcOptions dry;
  dry.dry_run = true;
  ASSERT_TRUE(GcS3Caches(cache_, dry, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].action, "would remove");
  EXPECT_EQ(results[1].action, "would remove stale stores");
  EXPECT_TRUE(std::filesystem::exists(Cache(kA) + "/meta"));
  EXPECT_TRUE(std::filesystem::exists(Cache(kB) + "/" + kIdOld + "/000000"));

  ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].action, "removed") << results[0].why;
  EXPECT_GE(results[0].freed_bytes, 12288u);
  EXPECT_FALSE(std::filesystem::exists(Cache(kA)));
  EXPECT_EQ(results[1].action, "removed stale stores") << results[1].why;
  // The stale store's blocks are gone; a file that is not dsfs's keeps its directory.
  EXPECT_FALSE(std::filesystem::exists(Cache(kB) + "/" + kIdOld + "/000000"));
  EXPECT_TRUE(std::filesystem::exists(Cache(kB) + "/" + kIdOld + "/README"));
  EXPECT_TRUE(std::filesystem::exists(Cache(kB) + "/" + kIdA + "/000000"));
  EXPECT_TRUE(std::filesystem::exists(cache_ + "/notes.txt"));
  // --keep-days 0 takes the other one too.
  Age(Cache(kB) + "/meta", 1);
  S3CacheGcOptions none;
  none.keep_days = 0;
  ASSERT_TRUE(GcS3Caches(cache_, none, &results).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].action, "left") << "a file that is not dsfs's stays, and its directory";
  EXPECT_TRUE(std::filesystem::exists(Cache(kB) + "/" + kIdOld + "/README"));
  EXPECT_FALSE(std::filesystem::exists(Cache(kB) + "/meta"));
  EXPECT_FALSE(std::filesystem::exists(Cache(kB) + "/" + kIdA));
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// A file with another hard link frees nothing when gc unlinks it: "freed" counts only the
// blocks that really went, in a dry run as in a real one.
TEST_F(S3CacheDirTest, GcCountsNoBlocksOfAHardLinkedFile) {
  MakeCache(Cache(kA), kIdA, 40);
  MakeCache(Cache(kB), kIdA, 1);
  WriteFile(Cache(kB) + "/" + kIdOld + "/000000", std::string(16384, 'o'));
  const std::string linked = Cache(kA) + "/" + kIdA + "/000000";
  ASSERT_EQ(::link(linked.c_str(), (dir_ / "kept").c_str()), 0);
  ASSERT_EQ(::link((Cache(kB) + "/" + kIdOld + "/000000").c_str(), (dir_ / "kept2").c_str()), 0);
  ASSERT_GT(AllocatedBytes(linked), 0u);
  uint64_t expected = 0;
  for (const char* f : {"meta", "lock", "index"}) expected += AllocatedBytes(Cache(kA) + "/" + f);
  expected += AllocatedBytes(Cache(kA) + "/" + kIdA + "/000001");

  std::vector<S3CacheGcResult> results;
  S3CacheGcOptions dry;
  dry.dry_run = true;
  ASSERT_TRUE(GcS3Caches(cache_, dry, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].freed_bytes, expected);
  EXPECT_EQ(results[1].action, "would remove stale stores");
  EXPECT_EQ(results[1].freed_bytes, 0u);
  ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].action, "removed") << results[0].why;
  EXPECT_EQ(results[0].freed_bytes, expected);
  EXPECT_FALSE(std::filesystem::exists(Cache(kA)));
  EXPECT_EQ(results[1].action, "removed stale stores") << results[1].why;
  EXPECT_EQ(results[1].freed_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(Cache(kB) + "/" + kIdOld));
  // The other links keep the blocks.
  EXPECT_EQ(ReadFile(dir_ / "kept"), std::string(8192, 'x'));
  EXPECT_EQ(ReadFile(dir_ / "kept2"), std::string(16384, 'o'));
}

TEST_F(S3CacheDirTest, GcNeverTouchesACacheWhoseLockIsHeld) {
  MakeCache(Cache(kA), kIdA, 400);
  int fd = ::open((Cache(kA) + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_SH), 0);
  std::vector<S3CacheEntry> list;
  ASSERT_TRUE(ListS3Caches(cache_, &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].mounted);
  std::vector<S3CacheGcResult> results;
  S3CacheGcOptions none;
  none.keep_days = 0;
  ASSERT_TRUE(GcS3Caches(cache_, none, &results).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].action, "in use");
  EXPECT_TRUE(std::filesystem::exists(Cache(kA) + "/" + kIdA + "/000000"));
  ::close(fd);
  ASSERT_TRUE(GcS3Caches(cache_, none, &results).ok());
  EXPECT_EQ(results[0].action, "removed");
  EXPECT_FALSE(std::filesystem::exists(Cache(kA)));
}

TEST_F(S3CacheDirTest, SymlinksAreNeverFollowed) {
  // Elsewhere: what symlinks in the cache point to, all of it old enough to go.
  const std::string elsewhere = dir_ / "elsewhere";
  MakeCache(elsewhere, kIdA, 400);
  ASSERT_EQ(::symlink(elsewhere.c_str(), Cache(kA).c_str()), 0);  // a cache that is a symlink
  MakeDir(Cache(kB), 0700);
  WriteFile(Cache(kB) + "/lock", "");
  ASSERT_EQ(::symlink((elsewhere + "/meta").c_str(), (Cache(kB) + "/meta").c_str()), 0);
  ASSERT_EQ(::symlink((elsewhere + "/" + kIdA).c_str(), (Cache(kB) + "/" + kIdOld).c_str()), 0);
  ASSERT_EQ(::symlink((elsewhere + "/index").c_str(), (Cache(kB) + "/index").c_str()), 0);
  Age(Cache(kB), 400);
  std::vector<S3CacheEntry> list;
  ASSERT_TRUE(ListS3Caches(cache_, &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, kB);
  EXPECT_EQ(list[0].meta.url, "") << "a symlinked meta is not read";
  std::vector<S3CacheGcResult> results;
  ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].action, "left") << results[0].why;
  // Everything the links point to is still there, and the links themselves.
  EXPECT_TRUE(std::filesystem::exists(elsewhere + "/meta"));
  EXPECT_TRUE(std::filesystem::exists(elsewhere + "/index"));
  EXPECT_TRUE(std::filesystem::exists(elsewhere + "/" + kIdA + "/000000"));
  EXPECT_TRUE(std::filesystem::is_symlink(Cache(kA)));
  EXPECT_TRUE(std::filesystem::is_symlink(Cache(kB) + "/meta"));
}

// Only this user's: another user's cache directory is neither listed nor touched, and another
// user's file in this user's cache stays (and so does its directory).
TEST_F(S3CacheDirTest, OtherUsersFilesAreLeftAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root (to make another user's files)";
  constexpr uid_t kNobody = 65534;
  MakeCache(Cache(kA), kIdA, 400);
  ASSERT_EQ(::chown(Cache(kA).c_str(), kNobody, kNobody), 0);
  MakeCache(Cache(kB), kIdA, 400);
  ASSERT_EQ(::chown((Cache(kB) + "/" + kIdA + "/000001").c_str(), kNobody, kNobody), 0);
  std::vector<S3CacheEntry> list;
  ASSERT_TRUE(ListS3Caches(cache_, &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, kB);
  std::vector<S3CacheGcResult> results;
  ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].action, "left") << results[0].why;
  EXPECT_TRUE(std::filesystem::exists(Cache(kA) + "/" + kIdA + "/000000"));
  EXPECT_TRUE(std::filesystem::exists(Cache(kB) + "/" + kIdA + "/000001"));
  EXPECT_FALSE(std::filesystem::exists(Cache(kB) + "/" + kIdA + "/000000"));
}

TEST_F(S3CacheDirTest, AMountHoldsItsCacheAndMakesItAgainAfterAGc) {
  {
    S3CacheRoot root;
    ASSERT_TRUE(root.Open(cache_, kA).ok());
    WriteS3CacheMeta(root.fd(), S3CacheMeta{"s3://b/p", "http://127.0.0.1:1", kIdA});
    Age(Cache(kA) + "/meta", 400);
    std::vector<S3CacheGcResult> results;
    ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].action, "in use");
    std::vector<S3CacheEntry> list;
    ASSERT_TRUE(ListS3Caches(cache_, &list).ok());
    EXPECT_EQ(list[0].meta.url, "s3://b/p");
    EXPECT_TRUE(list[0].mounted);
  }
  std::vector<S3CacheGcResult> results;
  ASSERT_TRUE(GcS3Caches(cache_, S3CacheGcOptions{}, &results).ok());
  EXPECT_EQ(results[0].action, "removed");
  EXPECT_FALSE(std::filesystem::exists(Cache(kA)));
  S3CacheRoot root;
  ASSERT_TRUE(root.Open(cache_, kA).ok());
  EXPECT_TRUE(std::filesystem::exists(Cache(kA) + "/lock"));
  // A lock on a directory a gc removed meanwhile: Busy, so the mount makes it again.
  const std::string gone = dir_ / "gone";
  MakeDir(gone, 0700);
  int dir_fd = ::open(gone.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  ASSERT_EQ(::rmdir(gone.c_str()), 0);
  int lock_fd = -1;
  Status s = LockS3CacheForMount(dir_fd, gone, &lock_fd);
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
  EXPECT_EQ(lock_fd, -1);
  ::close(dir_fd);
}

}  // namespace
}  // namespace dsfs::testing
