#include "store/format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/support/test_util.h"

namespace dsfs {
namespace {

TEST(FormatTest, PayloadKeysSortById) {
  EXPECT_LT(PayloadKey(1), PayloadKey(2));
  EXPECT_LT(PayloadKey(255), PayloadKey(256));
  EXPECT_LT(PayloadKey(0xffffffff), PayloadKey(0x100000000ull));
  uint64_t id;
  ASSERT_TRUE(ParsePayloadKey(PayloadKey(0x0123456789abcdefull), &id));
  EXPECT_EQ(id, 0x0123456789abcdefull);
  EXPECT_FALSE(ParsePayloadKey("H", &id));
  EXPECT_FALSE(ParsePayloadKey("Q12345678", &id));
}

StoreHeader SampleHeader() {
  StoreHeader h{};
  h.inode_count = 3;
  h.chunk_bytes = 4096;
  h.segment_bytes = 4096;
  SealHeader(&h);
  return h;
}

std::string Bytes(const StoreHeader& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

TEST(FormatTest, HeaderRoundTrip) {
  StoreHeader h = SampleHeader(), parsed;
  ASSERT_TRUE(ParseHeader(Bytes(h), &parsed).ok());
  EXPECT_EQ(parsed.inode_count, 3u);
  EXPECT_EQ(parsed.version, kFormatVersion);
}

// A header that says format 5 (a pack without a dictionary) keeps it; any other version a
// writer leaves is the default's.
TEST(FormatTest, SealKeepsTheKernelFormatAndReadsIt) {
  StoreHeader h = SampleHeader();
  h.version = kKernelFormatVersion;
  SealHeader(&h);
  StoreHeader parsed;
  ASSERT_TRUE(ParseHeader(Bytes(h), &parsed).ok());
  EXPECT_EQ(parsed.version, kKernelFormatVersion);
  h.version = 3;
  SealHeader(&h);
  ASSERT_TRUE(ParseHeader(Bytes(h), &parsed).ok());
  EXPECT_EQ(parsed.version, kFormatVersion);
}

TEST(FormatTest, HeaderRejectsBadMagicVersionAndChecksum) {
  StoreHeader parsed;
  std::string b = Bytes(SampleHeader());
  std::string bad_magic = b;
  bad_magic[0] = 'X';
  EXPECT_EQ(ParseHeader(bad_magic, &parsed).code(), Status::Code::kInvalidArgument);

  for (uint32_t version : {0u, kNewestFormatVersion + 1}) {
    StoreHeader future = SampleHeader();
    future.version = version;
    Status s = ParseHeader(Bytes(future), &parsed);
    EXPECT_EQ(s.code(), Status::Code::kNotSupported);
    EXPECT_NE(s.message().find("version " + std::to_string(version)), std::string::npos);
  }

  std::string flipped = b;
  flipped[40] ^= 1;
  EXPECT_TRUE(ParseHeader(flipped, &parsed).IsCorruption());
  EXPECT_TRUE(ParseHeader(b.substr(0, 100), &parsed).IsCorruption());
  EXPECT_FALSE(ParseHeader("", &parsed).ok());
}

// Records with every field at its extremes.
std::vector<InodeRecord> ExtremeRecords() {
  std::vector<InodeRecord> recs;
  recs.push_back({0, 0, 0, 100, 0, 040755, 0, 1, 0, 0, 0, 0});
  recs.push_back({1ull << 40, 123456789, 77, -5, 999999999, 0100644, 255, 1, 1, 32, 32, 0});
  recs.push_back({5, 0xffffffffffffull, 1ull << 33, 1700000000, 1, 0120777, 17, 2, 2, 65535, 7, 1});
  recs.push_back(
      {~0ull, ~0ull, ~0ull, INT64_MAX / 2, 0, 0100600, 4096, 0xfffffffe, 3, 0, 0, ~0ull});
  return recs;
}

TEST(FormatTest, InodeLayoutRoundTripsExtremes) {
  const std::vector<InodeRecord> recs = ExtremeRecords();
  InodeLayout layout = InodeLayout::For(recs);
  std::string bytes = layout.Serialize();
  InodeLayout parsed;
  ASSERT_TRUE(InodeLayout::Parse(bytes, kFormatVersion, &parsed).ok());
  std::string buf(parsed.record_bytes(), '\0');
  for (const auto& r : recs) {
    layout.Encode(r, buf.data());
    InodeRecord d;
    ASSERT_TRUE(parsed.Decode(buf.data(), &d).ok());
    EXPECT_EQ(d.size, r.size);
    EXPECT_EQ(d.data, r.data);
    EXPECT_EQ(d.name_off, r.name_off);
    EXPECT_EQ(d.name_len, r.name_len);
    EXPECT_EQ(d.mtime_s, r.mtime_s);
    EXPECT_EQ(d.mtime_ns, r.mtime_ns);
    EXPECT_EQ(d.mode, r.mode);
    EXPECT_EQ(d.parent, r.parent);
    EXPECT_EQ(d.image, r.image);
    EXPECT_EQ(d.width, r.width);
    EXPECT_EQ(d.height, r.height);
    EXPECT_EQ(d.pixels, r.pixels);
  }
}

// The delta coding of inode segments (format 4) is exact for any bytes: records that grow and
// that shrink (the differences wrap around the field's width), extremes, and random bytes that
// are no valid records at all.
TEST(FormatTest, InodeDeltasRoundTripAnyBytes) {
  std::vector<InodeRecord> recs = ExtremeRecords();
  recs.push_back({7, 3, 2, 100, 5, 0100644, 3, 2, 0, 1, 1, 2});
  for (uint32_t i = 0; i < 200; ++i) {
    recs.push_back({i * 37u % 1000, 1000u + i, 5000u + 15u * i, 1700000000 + i / 50,
                    (i * 7919u) % 1000000000u, 0100644, 15, 3, 1, 28, 28, 0});
  }
  const InodeLayout layout = InodeLayout::For(recs);
  const uint32_t rb = layout.record_bytes();
  std::string records(recs.size() * rb, '\0');
  for (size_t i = 0; i < recs.size(); ++i) layout.Encode(recs[i], records.data() + i * rb);
  std::string random = testing::RandomBytes(records.size(), 5);
  for (const std::string& original : {records, random}) {
    std::string coded = original;
    layout.DeltaEncode(coded.data(), coded.size() / rb);
    EXPECT_NE(coded, original);
    layout.DeltaDecode(coded.data(), coded.size() / rb);
    EXPECT_EQ(coded, original);
  }
  // Fewer than two records: nothing to code.
  std::string one = records.substr(0, rb);
  layout.DeltaEncode(one.data(), 1);
  EXPECT_EQ(one, records.substr(0, rb));
}

// mtimes more than INT64_MAX apart (an archive may carry any): the offset from the smallest
// needs all 64 bits, and every record still decodes (a tar with -2^62 and 2^62 made a store
// whose root could not be listed: "inode record out of range").
TEST(FormatTest, InodeLayoutRoundTripsMtimesFarApart) {
  std::vector<InodeRecord> recs;
  recs.push_back({0, 0, 0, 1, 0, 040755, 0, 1, 0, 0, 0, 0});
  recs.push_back({0, 0, 0, INT64_MIN, 0, 0100644, 0, 1, 0, 0, 0, 0});
  recs.push_back({0, 0, 0, INT64_MAX, 999999999, 0100644, 0, 1, 0, 0, 0, 0});
  recs.push_back({0, 0, 0, -(1ll << 62), 0, 0100644, 0, 1, 0, 0, 0, 0});
  recs.push_back({0, 0, 0, 1ll << 62, 0, 0100644, 0, 1, 0, 0, 0, 0});
  InodeLayout layout = InodeLayout::For(recs);
  InodeLayout parsed;
  ASSERT_TRUE(InodeLayout::Parse(layout.Serialize(), kFormatVersion, &parsed).ok());
  std::string buf(parsed.record_bytes(), '\0');
  for (const auto& r : recs) {
    layout.Encode(r, buf.data());
    InodeRecord d;
    ASSERT_TRUE(parsed.Decode(buf.data(), &d).ok()) << r.mtime_s;
    EXPECT_EQ(d.mtime_s, r.mtime_s);
    EXPECT_EQ(d.mtime_ns, r.mtime_ns);
  }
}

TEST(FormatTest, InodeLayoutIsNarrowForSmallTrees) {
  std::vector<InodeRecord> recs;
  for (uint32_t i = 0; i < 1000; ++i) {
    recs.push_back({i * 10u % 4000, i, i * 15ull, 1700000000 + i % 60, 0, 0100644, 15, i / 100 + 1,
                    0, 0, 0, 0});
  }
  EXPECT_LE(InodeLayout::For(recs).record_bytes(), 12u);
}

TEST(FormatTest, InodeLayoutRejectsDamage) {
  std::vector<InodeRecord> recs = {{1, 2, 3, 4, 5, 0100644, 6, 1, 0, 0, 0, 0}};
  std::string bytes = InodeLayout::For(recs).Serialize();
  InodeLayout parsed;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x40;
    EXPECT_FALSE(InodeLayout::Parse(bad, kFormatVersion, &parsed).ok()) << "flip at " << i;
  }
  EXPECT_FALSE(InodeLayout::Parse(bytes.substr(0, 10), kFormatVersion, &parsed).ok());
}

TEST(FormatTest, InodeDecodeRejectsModeIndexOutOfRange) {
  std::vector<InodeRecord> recs = {{0, 0, 0, 0, 0, 0100644, 0, 1, 0, 0, 0, 0},
                                   {0, 0, 0, 0, 0, 040755, 0, 1, 0, 0, 0, 0},
                                   {0, 0, 0, 0, 0, 0120777, 0, 1, 0, 0, 0, 0}};
  InodeLayout layout = InodeLayout::For(recs);  // 3 modes: index field is 2 bits wide
  std::string buf(layout.record_bytes(), '\xff');
  InodeRecord d;
  EXPECT_TRUE(layout.Decode(buf.data(), &d).IsCorruption());
}

TEST(FormatTest, GroupFindsEveryRecordAndRejectsOthers) {
  GroupBuilder g;
  g.Add("alpha");
  g.Add("");
  g.Add("gamma!");
  ASSERT_EQ(g.count(), 3u);
  std::string group = g.Finish();
  std::string_view rec;
  ASSERT_TRUE(FindInGroup(group, 12, 10, &rec).ok());
  EXPECT_EQ(rec, "alpha");
  ASSERT_TRUE(FindInGroup(group, 12, 11, &rec).ok());
  EXPECT_EQ(rec, "");
  ASSERT_TRUE(FindInGroup(group, 12, 12, &rec).ok());
  EXPECT_EQ(rec, "gamma!");
  EXPECT_TRUE(FindInGroup(group, 12, 9, &rec).IsCorruption());
  EXPECT_TRUE(FindInGroup(group, 12, 13, &rec).IsCorruption());
  EXPECT_TRUE(FindInGroup(group.substr(0, 6), 12, 12, &rec).IsCorruption());
  std::string bad = group;
  bad[4 + 8] = 100;  // end offset of the last record past the end
  EXPECT_TRUE(FindInGroup(bad, 12, 12, &rec).IsCorruption());
  EXPECT_TRUE(FindInGroup("", 12, 12, &rec).IsCorruption());
}

TEST(FormatTest, CheckedTableVerifiesLazilyAndBoundsChecks) {
  std::string data(10000, 'a');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::string sums = SegmentSums(data, 4096);
  EXPECT_EQ(sums.size(), 3 * sizeof(uint64_t));
  CheckedTable t;
  ASSERT_TRUE(t.Init("test", data, sums, 4096).ok());
  EXPECT_TRUE(t.Check(0, 10).ok());
  EXPECT_TRUE(t.Check(4090, 20).ok());
  EXPECT_TRUE(t.Check(9999, 1).ok());
  EXPECT_TRUE(t.Check(9999, 2).IsCorruption());
  EXPECT_TRUE(t.Check(20000, 1).IsCorruption());
  EXPECT_TRUE(t.Check(UINT64_MAX, 2).IsCorruption());
  EXPECT_TRUE(t.CheckAll().ok());

  std::string damaged = data;
  damaged[5000] ^= 1;  // segment 1
  CheckedTable d;
  ASSERT_TRUE(d.Init("test", damaged, sums, 4096).ok());
  EXPECT_TRUE(d.Check(0, 4096).ok());
  EXPECT_TRUE(d.Check(8192, 100).ok());
  EXPECT_TRUE(d.Check(4096, 1).IsCorruption());
  EXPECT_TRUE(d.Check(4000, 200).IsCorruption());
  EXPECT_TRUE(d.CheckAll().IsCorruption());

  CheckedTable wrong;
  EXPECT_TRUE(wrong.Init("test", data, sums.substr(8), 4096).IsCorruption());
  EXPECT_TRUE(wrong.Init("test", data, sums, 0).IsCorruption());
}

}  // namespace
}  // namespace dsfs
