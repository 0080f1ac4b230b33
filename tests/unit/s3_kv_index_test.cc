// The S3 index (backend/s3/s3_kv_index.h) and the S3 disk cache's files (backend/s3/s3_kv_cache.h),
// without a server: a crafted or damaged index is one line, never an abort or a huge
// allocation; the cache never follows a link, never writes or removes what is not its own.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>

#include "backend/s3/s3_kv_cache.h"
#include "backend/s3/s3_kv_index.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

void PutU64At(std::string* s, size_t at, uint64_t v) { std::memcpy(s->data() + at, &v, 8); }
void Repair(std::string* index) { PutU64At(index, 48, S3IndexChecksum(*index)); }

TEST(S3IndexTest, RoundTripsAndTheWholeHeaderIsChecked) {
  std::string bytes = fuzz::SampleS3Index(12, 77);
  S3Index index;
  ASSERT_TRUE(ParseS3Index("x", bytes, &index).ok());
  EXPECT_EQ(index.id, 77u);
  ASSERT_EQ(index.entries.size(), 12u);
  EXPECT_EQ(index.Key(index.entries[3]), "k0003");
  uint64_t id;
  ASSERT_TRUE(S3IndexId(bytes, &id));
  EXPECT_EQ(id, 77u);
  // Every header field (id, counts, sizes) is under the checksum: one flipped bit is damage.
  for (size_t at : {16, 24, 32, 40}) {
    std::string damaged = bytes;
    damaged[at] ^= 1;
    Status s = ParseS3Index("x", damaged, &index);
    EXPECT_TRUE(s.IsCorruption()) << at << ": " << s.ToString();
    EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
  }
}

// Counts and sizes far beyond the index, with the checksum made to match (a crafted index) or
// in the old version, whose header is outside its checksum (a damaged one): one Corruption
// line each, nothing allocated from the claim.
TEST(S3IndexTest, CraftedCountsAndSizesAreOneLineWithoutAllocating) {
  const std::string good = fuzz::SampleS3Index(12, 5);
  struct Case {
    size_t at;
    uint64_t value;
    const char* why;
  } cases[] = {{24, uint64_t{1} << 40, "object count"},
               {32, uint64_t{1} << 60, "entry count"},
               {32, 13, "entry"},
               {40, uint64_t{1} << 40, "entry list size"},
               {40, 5ull << 30, "entry list size"},
               {40, 200, "entry list"}};
  for (uint32_t version : {3u, 2u}) {
    for (const Case& c : cases) {
      std::string bytes = good;
      std::memcpy(bytes.data() + 8, &version, 4);
      PutU64At(&bytes, c.at, c.value);
      Repair(&bytes);
      S3Index index;
      Status s = ParseS3Index("s3://b/p", bytes, &index);
      ASSERT_TRUE(s.IsCorruption()) << version << " " << c.at << ": " << s.ToString();
      EXPECT_NE(s.message().find(c.why), std::string::npos) << s.ToString();
      EXPECT_EQ(LineCount(s.ToString()), 0) << s.ToString();
    }
  }
}

TEST(S3IndexTest, EntriesBeyondTheLimitsOrTheirObjectAreRefused) {
  struct Case {
    uint64_t object_size, offset, length, raw;
    const char* why;
  } cases[] = {{uint64_t{64} << 30, 0, uint64_t{64} << 30, 0, "value size"},
               {uint64_t{1} << 53, uint64_t{1} << 52, 10, 0, "object size"},
               {1000, 0, 100, uint64_t{3} << 30, "value size"},
               {1000, 990, 100, 0, "entry out of its object"},
               {1000, 2000, 0, 0, "entry out of its object"}};
  for (const Case& c : cases) {
    S3IndexBuilder b;
    b.Add("a", 0, c.offset, c.length, c.raw, 1);
    std::string bytes;
    ASSERT_TRUE(b.Finish(1, {c.object_size}, &bytes).ok());
    S3Index index;
    Status s = ParseS3Index("x", bytes, &index);
    ASSERT_TRUE(s.IsCorruption()) << c.why << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s.ToString();
  }
  // And an entry pointing at an object that is not there.
  S3IndexBuilder b;
  b.Add("a", 1, 0, 1, 0, 1);
  std::string bytes;
  ASSERT_TRUE(b.Finish(1, {10}, &bytes).ok());
  S3Index index;
  EXPECT_TRUE(ParseS3Index("x", bytes, &index).IsCorruption());
}

// A list of zeros claims gigabytes from a few kilobytes: refused before it is decompressed.
TEST(S3IndexTest, ADecompressionBombIsRefusedBeforeItIsDecompressed) {
  std::string bytes = fuzz::SampleS3Index(1, 5);
  const std::string zeros(64 << 20, '\0');
  std::string z(ZSTD_compressBound(zeros.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), zeros.data(), zeros.size(), 19));
  ASSERT_LT(z.size(), 64u << 10);
  bytes.resize(56 + 8);  // the header and the one object's size
  bytes += z;
  PutU64At(&bytes, 32, zeros.size() / 13);
  PutU64At(&bytes, 40, zeros.size());
  Repair(&bytes);
  S3Index index;
  Status s = ParseS3Index("x", bytes, &index);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("entry list size"), std::string::npos) << s.ToString();
}

TEST(S3IndexTest, TruncationsAndOtherBytesAreOneLine) {
  const std::string good = fuzz::SampleS3Index(12, 5);
  for (size_t n = 0; n < good.size(); n += 7) {
    S3Index index;
    Status s = ParseS3Index("x", good.substr(0, n), &index);
    EXPECT_FALSE(s.ok()) << n;
  }
  S3Index index;
  EXPECT_TRUE(
      ParseS3Index("x", "not an index at all, just text .....................", &index).code() ==
      Status::Code::kInvalidArgument);
  std::string v9 = good;
  v9[8] = 9;
  EXPECT_EQ(ParseS3Index("x", v9, &index).code(), Status::Code::kNotSupported);
}

// ---- The disk cache's files ----------------------------------------------------------------

struct CacheDirs {
  CacheDirs() {
    cache = tmp / "cache";
    victim = tmp / "victim";
    WriteFile(victim + "/keep/precious", "precious");
    WriteFile(victim + "/file", "victim's bytes");
  }
  void ExpectVictimIntact() const {
    EXPECT_EQ(ReadFile(victim + "/keep/precious"), "precious");
    EXPECT_EQ(ReadFile(victim + "/file"), "victim's bytes");
  }
  TempDir tmp;
  std::string cache, victim;
};

TEST(S3DiskCacheTest, ALinkInPlaceOfTheStoreDirectoryIsRefusedAndNotFollowed) {
  CacheDirs d;
  MakeDir(d.cache);
  ASSERT_EQ(::symlink(d.victim.c_str(), (d.cache + "/s3-0123").c_str()), 0);
  S3CacheRoot root;
  Status s = root.Open(d.cache, "s3-0123");
  EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("symlink"), std::string::npos) << s.ToString();
  d.ExpectVictimIntact();
  // A file there is refused alike.
  WriteFile(d.cache + "/s3-file", "x");
  EXPECT_FALSE(S3CacheRoot().Open(d.cache, "s3-file").ok());
}

TEST(S3DiskCacheTest, DirectoriesOfOthersOrWritableByOthersAreRefused) {
  CacheDirs d;
  MakeDir(d.cache);
  if (::geteuid() == 0) {
    // The store directory owned by another user (planted before the first mount).
    MakeDir(d.cache + "/s3-other");
    ASSERT_EQ(::chown((d.cache + "/s3-other").c_str(), 65534, 65534), 0);
    Status s = S3CacheRoot().Open(d.cache, "s3-other");
    EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("uid 65534"), std::string::npos) << s.ToString();
    // The cache directory itself of another user.
    const std::string theirs = d.tmp / "theirs";
    MakeDir(theirs);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_TRUE(S3CacheRoot().Open(theirs, "s3-x").code() == Status::Code::kInvalidArgument);
  }
  // World-writable without the sticky bit: anyone could swap what is in it.
  ASSERT_EQ(::chmod(d.cache.c_str(), 0777), 0);
  Status s = S3CacheRoot().Open(d.cache, "s3-a");
  EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not sticky"), std::string::npos) << s.ToString();
  // Sticky (like /tmp): others cannot replace what is ours; used.
  ASSERT_EQ(::chmod(d.cache.c_str(), 01777), 0);
  S3CacheRoot root;
  ASSERT_TRUE(root.Open(d.cache, "s3-a").ok());
  struct stat st;
  ASSERT_EQ(::stat((d.cache + "/s3-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A store directory others may write is refused.
  ASSERT_EQ(::chmod((d.cache + "/s3-a").c_str(), 0777), 0);
  EXPECT_TRUE(S3CacheRoot().Open(d.cache, "s3-a").code() == Status::Code::kInvalidArgument);
}

// The path to the cache directory: a link another user made, or a directory of theirs on the
// way, could send root's cache anywhere. Refused.
TEST(S3DiskCacheTest, APathThroughAnotherUsersDirectoryOrLinkIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root (chown)";
  CacheDirs d;
  const std::string evil = d.tmp / "evil";
  MakeDir(evil);
  ASSERT_EQ(::chown(evil.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::symlink(d.victim.c_str(), (evil + "/cache").c_str()), 0);
  ASSERT_EQ(::lchown((evil + "/cache").c_str(), 65534, 65534), 0);
  Status s = S3CacheRoot().Open(evil + "/cache", "s3-a");
  EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("another user"), std::string::npos) << s.ToString();
  MakeDir(evil + "/real");
  s = S3CacheRoot().Open(evil + "/real", "s3-a");
  EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
  s = S3CacheRoot().Open(evil + "/missing/cache", "s3-a");
  EXPECT_TRUE(s.code() == Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(d.victim + "/s3-a"));
  d.ExpectVictimIntact();
  // Another user's link in this user's directory (made before it was locked down).
  ASSERT_EQ(::symlink(d.victim.c_str(), (d.tmp / "theirs").c_str()), 0);
  ASSERT_EQ(::lchown((d.tmp / "theirs").c_str(), 65534, 65534), 0);
  s = S3CacheRoot().Open(d.tmp / "theirs", "s3-a");
  EXPECT_NE(s.message().find("symlink"), std::string::npos) << s.ToString();
  // A link of this user's in a directory of this user's is the user's choice: followed.
  const std::string mine = d.tmp / "mine";
  MakeDir(mine);
  ASSERT_EQ(::symlink((d.tmp / "target").c_str(), (mine + "/cache").c_str()), 0);
  MakeDir(d.tmp / "target");
  EXPECT_TRUE(S3CacheRoot().Open(mine + "/cache", "s3-a").ok());
}

TEST(S3DiskCacheTest, LinksInPlaceOfDataFilesOrTheIndexAreNotFollowed) {
  CacheDirs d;
  S3CacheRoot root;
  ASSERT_TRUE(root.Open(d.cache, "s3-a").ok());
  MakeDir(root.path() + "/00000000000000aa");
  ASSERT_EQ(
      ::symlink((d.victim + "/file").c_str(), (root.path() + "/00000000000000aa/000000").c_str()),
      0);
  ASSERT_EQ(::symlink((d.victim + "/file").c_str(), (root.path() + "/index").c_str()), 0);
  std::string index;
  EXPECT_FALSE(root.ReadIndex(&index));
  S3DiskCache cache;
  ASSERT_TRUE(cache.Open(root, "00000000000000aa", {4 << 20}, 64 << 20).ok());
  const std::string bytes = RandomBytes(kS3BlockBytes, 1);
  cache.Write(0, 0, bytes);
  std::string out;
  EXPECT_FALSE(cache.Read(0, 0, 100, XXH3_64bits(bytes.data(), 100), &out));
  // The index is written aside and renamed over the link: the link's target is untouched.
  root.WriteIndex("new index");
  EXPECT_TRUE(root.ReadIndex(&index));
  EXPECT_EQ(index, "new index");
  d.ExpectVictimIntact();
}

TEST(S3DiskCacheTest, OnlyDsfsFilesOfOtherStoresAreRemoved) {
  CacheDirs d;
  S3CacheRoot root;
  ASSERT_TRUE(root.Open(d.cache, "s3-a").ok());
  const std::string old_store = root.path() + "/00000000000000aa";
  WriteFile(old_store + "/000000", "cached");
  WriteFile(old_store + "/000001", "cached");
  WriteFile(root.path() + "/00000000000000bb/000000", "cached");
  WriteFile(old_store + "/notes.txt", "someone's");
  ASSERT_EQ(::symlink(d.victim.c_str(), (root.path() + "/00000000000000cc").c_str()), 0);
  ASSERT_EQ(
      ::symlink((d.victim + "/file").c_str(), (root.path() + "/00000000000000bb/000001").c_str()),
      0);
  WriteFile(root.path() + "/mine/000000", "someone's");
  root.RemoveOtherStores("00000000000000dd");
  EXPECT_FALSE(std::filesystem::exists(old_store + "/000000"));
  EXPECT_FALSE(std::filesystem::exists(old_store + "/000001"));
  EXPECT_EQ(ReadFile(old_store + "/notes.txt"), "someone's");
  // A link of a data file's name is not a data file: left, with its directory.
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/00000000000000bb/000000"));
  EXPECT_TRUE(std::filesystem::is_symlink(root.path() + "/00000000000000bb/000001"));
  EXPECT_TRUE(std::filesystem::is_symlink(root.path() + "/00000000000000cc"));
  EXPECT_EQ(ReadFile(root.path() + "/mine/000000"), "someone's");
  d.ExpectVictimIntact();
}

TEST(S3DiskCacheTest, OffsetsBeyondAnObjectAreMissesNeverOutOfBounds) {
  CacheDirs d;
  S3CacheRoot root;
  ASSERT_TRUE(root.Open(d.cache, "s3-a").ok());
  S3DiskCache cache;
  ASSERT_TRUE(cache.Open(root, "00000000000000aa", {2 << 20, 1 << 20}, 64 << 20).ok());
  std::string out;
  const std::string bytes(1000, 'x');
  cache.Write(0, uint64_t{1} << 52, bytes);  // beyond the object: nothing written
  cache.Write(7, 0, bytes);                  // no such object
  EXPECT_FALSE(cache.Read(0, uint64_t{1} << 52, 1000, 0, &out));
  EXPECT_FALSE(cache.Read(7, 0, 10, 0, &out));
  EXPECT_FALSE(cache.Read(1, (1 << 20) - 5, 10, 0, &out));
  cache.Write(1, 0, bytes);
  EXPECT_TRUE(cache.Read(1, 0, 1000, XXH3_64bits(bytes.data(), 1000), &out));
  EXPECT_EQ(out, bytes);
}

}  // namespace
}  // namespace dsfs::testing
