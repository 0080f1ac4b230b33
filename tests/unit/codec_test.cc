#include "store/codec.h"

#include <gtest/gtest.h>

#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::RandomBytes;
using testing::TextBytes;

std::shared_ptr<Dictionary> TrainedDict(std::string* dict_bytes) {
  std::vector<std::string> samples;
  for (uint32_t i = 0; i < 200; ++i) samples.push_back("HEADER-v1|" + TextBytes(600, i));
  EXPECT_TRUE(TrainDictionary(samples, 16384, dict_bytes).ok());
  std::shared_ptr<Dictionary> d;
  EXPECT_TRUE(Dictionary::Create(*dict_bytes, 3, &d).ok());
  return d;
}

std::string Decode(const std::string& record, const Dictionary* dict) {
  PayloadView p;
  EXPECT_TRUE(ParsePayload(record, &p).ok());
  std::string out(p.raw_bytes, '\0');
  PayloadDecoder dec;
  EXPECT_TRUE(dec.Decode(p, dict, out.data()).ok());
  return out;
}

TEST(CodecTest, RoundTripsCompressibleIncompressibleAndEmpty) {
  PayloadEncoder enc(3, nullptr);
  for (const std::string& raw : {TextBytes(100000, 1), RandomBytes(5000, 2), std::string()}) {
    std::string rec;
    ASSERT_TRUE(enc.Encode(raw, true, &rec).ok());
    EXPECT_EQ(Decode(rec, nullptr), raw);
  }
  std::string rec;
  ASSERT_TRUE(enc.Encode(TextBytes(100000, 1), false, &rec).ok());
  EXPECT_LT(rec.size(), 50000u);
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  EXPECT_EQ(p.codec, Codec::kZstd);
  rec.clear();
  ASSERT_TRUE(enc.Encode(RandomBytes(5000, 2), false, &rec).ok());
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  EXPECT_EQ(p.codec, Codec::kRaw);
  EXPECT_EQ(rec.size(), sizeof(PayloadHeader) + 5000);
}

TEST(CodecTest, DictionaryShrinksSmallFiles) {
  std::string dict_bytes;
  auto dict = TrainedDict(&dict_bytes);
  ASSERT_FALSE(dict_bytes.empty());
  PayloadEncoder with(3, dict), without(3, nullptr);
  std::string raw = "HEADER-v1|" + TextBytes(600, 999);
  std::string a, b;
  ASSERT_TRUE(with.Encode(raw, true, &a).ok());
  ASSERT_TRUE(without.Encode(raw, true, &b).ok());
  EXPECT_LT(a.size(), b.size());
  EXPECT_EQ(Decode(a, dict.get()), raw);
  // A record that needs the dictionary fails cleanly without it.
  PayloadView p;
  ASSERT_TRUE(ParsePayload(a, &p).ok());
  ASSERT_EQ(p.codec, Codec::kZstdDict);
  std::string out(p.raw_bytes, '\0');
  PayloadDecoder dec;
  EXPECT_TRUE(dec.Decode(p, nullptr, out.data()).IsCorruption());
}

TEST(CodecTest, TrainingOnTooLittleDataGivesNoDictionary) {
  std::string dict;
  ASSERT_TRUE(TrainDictionary({"a", "b"}, 16384, &dict).ok());
  EXPECT_TRUE(dict.empty());
  std::shared_ptr<Dictionary> d;
  ASSERT_TRUE(Dictionary::Create("", 3, &d).ok());
  EXPECT_TRUE(d->empty());
}

TEST(CodecTest, EveryFlippedBitIsDetected) {
  PayloadEncoder enc(3, nullptr);
  for (const std::string& raw : {TextBytes(3000, 5), RandomBytes(300, 6)}) {
    std::string rec;
    ASSERT_TRUE(enc.Encode(raw, true, &rec).ok());
    for (size_t i = 0; i < rec.size(); ++i) {
      for (int bit = 0; bit < 8; bit += 3) {
        std::string bad = rec;
        bad[i] ^= static_cast<char>(1 << bit);
        PayloadView p;
        EXPECT_TRUE(ParsePayload(bad, &p).IsCorruption()) << "byte " << i << " bit " << bit;
      }
    }
    PayloadView p;
    EXPECT_TRUE(ParsePayload(rec.substr(0, rec.size() - 1), &p).IsCorruption());
    EXPECT_TRUE(ParsePayload(rec.substr(0, 3), &p).IsCorruption());
  }
}

TEST(CodecTest, WrongRecordedSizeIsCorruption) {
  // A record whose checksum matches but whose data decompresses to another size: the decoder
  // must refuse it rather than return short or overlong data.
  PayloadEncoder enc(3, nullptr);
  std::string rec;
  ASSERT_TRUE(enc.Encode(TextBytes(5000, 3), true, &rec).ok());
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  p.raw_bytes -= 1;
  std::string out(p.raw_bytes + 1, '\0');
  PayloadDecoder dec;
  EXPECT_TRUE(dec.Decode(p, nullptr, out.data()).IsCorruption());
}

// Solid groups: every record in exactly one group, in order; a group holds what fits in the
// group size (at least one record) and, on pages, as many more as still fit in its last page,
// never over twice the group size; each group decodes to its records.
TEST(CodecTest, SolidGroupsHoldEveryRecordOnceAndFillTheirLastPage) {
  std::vector<std::string> raws;
  for (uint32_t i = 0; i < 3000; ++i) {
    raws.push_back(i % 500 == 7 ? RandomBytes(40000, i) : TextBytes(300 + i % 900, i));
  }
  std::vector<std::string_view> views(raws.begin(), raws.end());
  for (const bool pages : {false, true}) {
    GroupSizing sizing;
    sizing.group_bytes = 16 << 10;
    if (pages) sizing.values = ValueSizing{4096, 16};
    PayloadEncoder enc(3, nullptr);
    EncodedGroups out;
    ASSERT_TRUE(EncodeSolidGroups(views, sizing, &enc, &out).ok());
    ASSERT_EQ(out.ends.size(), out.counts.size());
    size_t next = 0, begin = 0, wasted = 0;
    PayloadDecoder dec;
    for (size_t g = 0; g < out.ends.size(); ++g) {
      std::string_view value = std::string_view(out.values).substr(begin, out.ends[g] - begin);
      begin = out.ends[g];
      PayloadView p;
      ASSERT_TRUE(ParsePayload(value, &p).ok());
      std::string content(p.raw_bytes, '\0');
      ASSERT_TRUE(dec.Decode(p, nullptr, content.data()).ok());
      const uint64_t last = next + out.counts[g] - 1;
      uint64_t raw = 0;
      for (uint64_t id = next; id <= last; ++id) {
        std::string_view rec;
        ASSERT_TRUE(FindInGroup(content, last, id, &rec).ok());
        ASSERT_EQ(rec, raws[id]) << id;
        raw += rec.size();
      }
      EXPECT_TRUE(out.counts[g] == 1 || raw <= 2 * sizing.group_bytes) << g;
      if (!pages) EXPECT_TRUE(out.counts[g] == 1 || raw <= sizing.group_bytes) << g;
      if (g + 1 < out.ends.size()) wasted += sizing.values.Footprint(value.size()) - value.size();
      next = last + 1;
    }
    EXPECT_EQ(next, raws.size());
    if (pages) {
      // Text records of ~250 bytes compressed: the last page is mostly filled.
      EXPECT_LT(wasted / (out.ends.size() - 1), 1024u + 16u) << "bytes wasted per group";
    }
  }
}

TEST(CodecTest, RawRecordHelper) {
  std::string rec = RawPayloadRecord("dictionary bytes");
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  EXPECT_EQ(p.codec, Codec::kRaw);
  EXPECT_EQ(p.stored, "dictionary bytes");
}

// DecodePrefix (a miss of the RAM cache decodes a group up to the record it wants) gives
// exactly the bytes Decode gives, up to at least what was asked, for frames of one block and
// of many, with and without the dictionary.
TEST(CodecTest, PrefixDecodeGivesExactBytesAndStopsEarly) {
  std::string dict_bytes;
  std::shared_ptr<Dictionary> dict = TrainedDict(&dict_bytes);
  const std::string raw = TextBytes(300000, 7);
  for (const uint32_t block : {0u, 1024u, 8192u}) {
    for (const bool use_dict : {false, true}) {
      PayloadEncoder enc(3, dict);
      enc.SetMaxBlockBytes(block);
      std::string rec;
      ASSERT_TRUE(enc.Encode(raw, use_dict, &rec).ok());
      PayloadView p;
      ASSERT_TRUE(ParsePayload(rec, &p).ok());
      ASSERT_NE(p.codec, Codec::kRaw);
      PayloadDecoder dec;
      for (const uint64_t want : {uint64_t{1}, uint64_t{4}, uint64_t{5000}, uint64_t{150001},
                                  uint64_t{299999}, uint64_t{300000}, uint64_t{1} << 40}) {
        std::string out(p.raw_bytes, '\0');
        uint64_t decoded = 0;
        int asked = 0;
        ASSERT_TRUE(dec.DecodePrefix(
                           p, dict.get(), out.data(),
                           [&](std::string_view pre) {
                             ++asked;
                             EXPECT_EQ(pre, std::string_view(raw).substr(0, pre.size()));
                             return want;
                           },
                           &decoded)
                        .ok())
            << block << " " << want;
        EXPECT_GE(decoded, std::min<uint64_t>(want, raw.size()));
        EXPECT_LE(decoded, raw.size());
        EXPECT_EQ(out.substr(0, decoded), raw.substr(0, decoded));
        EXPECT_GT(asked, 0);
        // Small blocks stop near the bytes asked for, not at the end of the frame.
        if (block == 1024 && want == 5000) {
          EXPECT_LT(decoded, 64u << 10);
        }
      }
    }
  }
}

// A need() that grows as the prefix does (a group's index, then a record) is asked again.
// A prefix decode stops mid-frame. The next decode on that decoder (the thread's, in a store
// with another dictionary or none) must use its own dictionary: zstd refuses a new one until
// the session is reset, and the old one may be freed by then (found by fuzz_store under ASan).
TEST(CodecTest, ADecodeAfterAPrefixStoppedMidFrameUsesItsOwnDictionary) {
  std::string bytes_a, bytes_b;
  std::shared_ptr<Dictionary> a = TrainedDict(&bytes_a);
  std::vector<std::string> samples;
  for (uint32_t i = 0; i < 200; ++i) samples.push_back("OTHER-v2|" + TextBytes(600, 1000 + i));
  ASSERT_TRUE(TrainDictionary(samples, 16384, &bytes_b).ok());
  std::shared_ptr<Dictionary> b;
  ASSERT_TRUE(Dictionary::Create(bytes_b, 3, &b).ok());
  const std::string raw = TextBytes(300000, 9);
  auto encode = [&](const std::shared_ptr<Dictionary>& d, bool use_dict) {
    PayloadEncoder enc(3, d);
    enc.SetMaxBlockBytes(1024);
    std::string rec;
    EXPECT_TRUE(enc.Encode(raw, use_dict, &rec).ok());
    return rec;
  };
  const std::string with_a = encode(a, true), with_b = encode(b, true), plain = encode(b, false);
  PayloadDecoder dec;
  for (const std::string* next : {&with_b, &plain}) {
    PayloadView pa, pn;
    ASSERT_TRUE(ParsePayload(with_a, &pa).ok());
    ASSERT_TRUE(ParsePayload(*next, &pn).ok());
    std::string out(pa.raw_bytes, '\0');
    uint64_t decoded = 0;
    ASSERT_TRUE(dec.DecodePrefix(
                       pa, a.get(), out.data(), [](std::string_view) { return 5000; }, &decoded)
                    .ok());
    ASSERT_LT(decoded, raw.size());  // stopped mid-frame
    std::string got(pn.raw_bytes, '\0');
    Status s = dec.Decode(pn, b.get(), got.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(got == raw);
  }
}

TEST(CodecTest, PrefixDecodeFollowsAGrowingNeed) {
  const std::string raw = TextBytes(200000, 3);
  PayloadEncoder enc(3, nullptr);
  enc.SetMaxBlockBytes(2048);
  std::string rec;
  ASSERT_TRUE(enc.Encode(raw, false, &rec).ok());
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  std::string out(p.raw_bytes, '\0');
  uint64_t decoded = 0;
  PayloadDecoder dec;
  ASSERT_TRUE(dec.DecodePrefix(
                     p, nullptr, out.data(),
                     [](std::string_view pre) -> uint64_t {
                       return pre.size() < 4 ? 4 : pre.size() < 90000 ? 90000 : 0;
                     },
                     &decoded)
                  .ok());
  EXPECT_GE(decoded, 90000u);
  EXPECT_LT(decoded, 120000u);
  EXPECT_EQ(out.substr(0, decoded), raw.substr(0, decoded));
}

// A record whose header claims more or fewer raw bytes than its frame holds (checksum resealed
// to match, as a damaged packer would write) is Corruption when all of it is asked for.
TEST(CodecTest, PrefixDecodeOfAWrongSizeIsCorruption) {
  const std::string raw = TextBytes(50000, 5);
  PayloadEncoder enc(3, nullptr);
  enc.SetMaxBlockBytes(4096);
  std::string rec;
  ASSERT_TRUE(enc.Encode(raw, false, &rec).ok());
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  PayloadDecoder dec;
  for (const int64_t delta : {-1, 1, 1000}) {
    PayloadView q = p;
    q.raw_bytes = static_cast<uint32_t>(raw.size() + delta);
    std::string out(q.raw_bytes, '\0');
    uint64_t decoded = 0;
    Status s = dec.DecodePrefix(
        q, nullptr, out.data(), [](std::string_view) { return uint64_t{1} << 40; }, &decoded);
    EXPECT_TRUE(s.IsCorruption()) << delta;
  }
  // A frame cut short does not decompress.
  PayloadView cut = p;
  cut.stored = p.stored.substr(0, p.stored.size() / 2);
  std::string out(cut.raw_bytes, '\0');
  uint64_t decoded = 0;
  EXPECT_TRUE(
      dec.DecodePrefix(
             cut, nullptr, out.data(), [](std::string_view) { return uint64_t{1} << 40; }, &decoded)
          .IsCorruption());
}

}  // namespace
}  // namespace dsfs
