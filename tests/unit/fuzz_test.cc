// The fuzz targets (tests/fuzz/fuzz_targets.h) in the normal build: every seed of the checked-in
// corpus and every input a fuzzer found a crash with (tests/fuzz/regressions/<target>/, kept
// once fixed) is replayed through the same target body the libFuzzer harness runs. A crash,
// an abort or a sanitizer report fails the test binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fs/filesystem.h"
#include "store/segments.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

namespace stdfs = std::filesystem;
using Target = int (*)(const uint8_t*, size_t);

struct TargetInfo {
  const char* name;
  Target run;
};
constexpr TargetInfo kTargets[] = {{"store", fuzz::FuzzStore},
                                   {"image", fuzz::FuzzImage},
                                   {"record", fuzz::FuzzRecord},
                                   {"s3index", fuzz::FuzzS3Index}};

std::vector<stdfs::path> Inputs(const std::string& kind, const std::string& target) {
  std::vector<stdfs::path> out;
  stdfs::path dir = stdfs::path(DSFS_FUZZ_DIR) / kind / target;
  if (!stdfs::exists(dir)) return out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t Replay(const std::string& kind) {
  size_t n = 0;
  for (const TargetInfo& t : kTargets) {
    for (const stdfs::path& p : Inputs(kind, t.name)) {
      SCOPED_TRACE(p.string());
      std::string data = ReadFile(p.string());
      EXPECT_EQ(t.run(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0);
      ++n;
    }
  }
  return n;
}

TEST(FuzzTest, SeedCorpusReplaysCleanly) {
  for (const TargetInfo& t : kTargets) {
    EXPECT_FALSE(Inputs("corpus", t.name).empty()) << "no seeds for " << t.name;
  }
  EXPECT_GE(Replay("corpus"), 15u);
}

TEST(FuzzTest, CrashRegressionsReplayCleanly) {
  // Each file here once crashed (or hung, or exhausted memory in) its target.
  Replay("regressions");
}

// The store seeds must stay valid stores, or the fuzzer would start from inputs refused at the
// header: open each one and read an image through the bmp view (the decoders behind it).
TEST(FuzzTest, StoreSeedsAreValidStoresWithViews) {
  auto seeds = Inputs("corpus", "store");
  ASSERT_FALSE(seeds.empty());
  for (const stdfs::path& p : seeds) {
    SCOPED_TRACE(p.string());
    auto table = std::make_shared<MemTable>();
    fuzz::ParseTable(ReadFile(p.string()), table.get());
    std::unique_ptr<Store> store;
    ASSERT_TRUE(Store::Open(NewMemReader(table), &store).ok());
    ASSERT_TRUE(store->VerifyMetadata().ok());
    Filesystem fs(std::move(store), FsOptions{});
    struct stat st;
    uint64_t ino = 1;
    for (const char* name : {".dsfs", "bmp", "train", "c0", "a.jpg"}) {
      ASSERT_TRUE(fs.Lookup(ino, name, &st).ok()) << name;
      ino = st.st_ino;
    }
    ReadBuffer buf;
    std::string_view out;
    ASSERT_TRUE(fs.Read(ino, 0, 2, &buf, &out).ok());
    EXPECT_EQ(out, "BM");
  }
}

// Repairing checksums is what lets the fuzzer past them: a repaired damaged table must fail on
// the damage itself, not on a checksum, and an intact one must stay byte-identical.
TEST(FuzzTest, RepairChecksumsKeepsIntactTablesAndFixesDamagedOnes) {
  std::string seed = ReadFile(std::string(DSFS_FUZZ_DIR) + "/corpus/store/plain-checked");
  auto table = std::make_shared<MemTable>();
  fuzz::ParseTable(seed, table.get());
  auto copy = std::make_shared<MemTable>();
  copy->data = table->data;
  fuzz::RepairChecksums(copy.get());
  EXPECT_EQ(copy->data, table->data);
  // One byte of the name pool changed (its first segment stored raw, with one letter in
  // another case): refused by its checksum, accepted once repaired.
  SegmentIndex ix;
  ASSERT_TRUE(SegmentIndex::Parse(copy->data.at(std::string(kSegmentIndexKey)), &ix).ok());
  ASSERT_FALSE(ix.names.empty());
  std::string& stored = copy->data.at(SegmentKey(kNameSegmentSpace, 0));
  std::string names;
  ASSERT_TRUE(DecodeSegment("name segment 0", ix.names[0], stored, &names).ok());
  names[0] ^= 0x20;
  stored = names;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(copy), &store).ok());
  EXPECT_FALSE(store->VerifyMetadata().ok());
  fuzz::RepairChecksums(copy.get());
  ASSERT_TRUE(Store::Open(NewMemReader(copy), &store).ok());
  EXPECT_TRUE(store->VerifyMetadata().ok());
}

}  // namespace
}  // namespace dsfs::testing
