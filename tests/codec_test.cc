#include "store/codec.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

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

TEST(CodecTest, RawRecordHelper) {
  std::string rec = RawPayloadRecord("dictionary bytes");
  PayloadView p;
  ASSERT_TRUE(ParsePayload(rec, &p).ok());
  EXPECT_EQ(p.codec, Codec::kRaw);
  EXPECT_EQ(p.stored, "dictionary bytes");
}

}  // namespace
}  // namespace dsfs
