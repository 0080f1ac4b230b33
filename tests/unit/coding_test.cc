// common/coding.h: the integers of every index dsfs writes, little-endian on any host.
#include "common/coding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace dsfs {
namespace {

TEST(CodingTest, FixedWidthIsLittleEndian) {
  std::string s;
  PutFixed32(&s, 0x04030201u);
  PutFixed64(&s, 0x0c0b0a0908070605ull);
  ASSERT_EQ(s.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(static_cast<uint8_t>(s[i]), i + 1) << i;
  EXPECT_EQ(DecodeFixed32(s.data()), 0x04030201u);
  EXPECT_EQ(DecodeFixed64(s.data() + 4), 0x0c0b0a0908070605ull);
}

TEST(CodingTest, FixedWidthRoundTripsTheExtremes) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x80}, uint64_t{UINT32_MAX},
                     uint64_t{UINT32_MAX} + 1, UINT64_MAX}) {
    std::string s;
    PutFixed64(&s, v);
    EXPECT_EQ(DecodeFixed64(s.data()), v);
    s.clear();
    PutFixed32(&s, static_cast<uint32_t>(v));
    EXPECT_EQ(DecodeFixed32(s.data()), static_cast<uint32_t>(v));
  }
}

TEST(CodingTest, VarintsRoundTripAndTakeTheirBytes) {
  std::string s;
  const uint64_t values[] = {0, 1, 127, 128, 16383, 16384, uint64_t{1} << 35, UINT64_MAX};
  for (uint64_t v : values) PutVarint64(&s, v);
  EXPECT_EQ(s.size(), 1u + 1 + 1 + 2 + 2 + 3 + 6 + 10);
  std::string_view in(s);
  for (uint64_t v : values) {
    uint64_t got = 0;
    ASSERT_TRUE(GetVarint64(&in, &got));
    EXPECT_EQ(got, v);
  }
  EXPECT_TRUE(in.empty());
}

TEST(CodingTest, TruncatedOrOverlongVarintsAreRefused) {
  uint64_t v = 0;
  std::string_view empty;
  EXPECT_FALSE(GetVarint64(&empty, &v));
  std::string cut;
  PutVarint64(&cut, UINT64_MAX);
  cut.pop_back();  // the last byte, which ends it
  std::string_view in(cut);
  EXPECT_FALSE(GetVarint64(&in, &v));
  const std::string overlong(11, '\x80');  // never ends within a 64-bit value
  in = overlong;
  EXPECT_FALSE(GetVarint64(&in, &v));
}

}  // namespace
}  // namespace dsfs
