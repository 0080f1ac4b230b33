#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "common/units.h"

namespace dsfs {
namespace {

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::OK().ok());
  EXPECT_EQ(Status::OK().ToErrno(), 0);
  Status s = Status::Corruption("bad bytes");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToErrno(), EIO);
  EXPECT_EQ(s.ToString(), "bad bytes");
  EXPECT_EQ(s.WithContext("file x").message(), "file x: bad bytes");
}

TEST(StatusTest, ErrnoRoundTrip) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "p").ToErrno(), ENOENT);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "p").code(), Status::Code::kNoSpace);
  EXPECT_EQ(Status::FromErrno(EROFS, "p").ToErrno(), EROFS);
  EXPECT_EQ(Status::FromErrno(EACCES, "p").ToErrno(), EIO);
  EXPECT_NE(Status::FromErrno(ENOENT, "the/path").message().find("the/path: "), std::string::npos);
  EXPECT_EQ(Status::NotSupported("v").ToErrno(), ENOTSUP);
  EXPECT_EQ(Status::ReadOnly("w").ToErrno(), EROFS);
}

TEST(UnitsTest, ParseSize) {
  uint64_t v;
  ASSERT_TRUE(ParseSize("1234", &v).ok());
  EXPECT_EQ(v, 1234u);
  ASSERT_TRUE(ParseSize("110K", &v).ok());
  EXPECT_EQ(v, 110u << 10);
  ASSERT_TRUE(ParseSize("8G", &v).ok());
  EXPECT_EQ(v, 8ull << 30);
  ASSERT_TRUE(ParseSize("256KiB", &v).ok());
  EXPECT_EQ(v, 256u << 10);
  ASSERT_TRUE(ParseSize("2MB", &v).ok());
  EXPECT_EQ(v, 2u << 20);
  EXPECT_FALSE(ParseSize("", &v).ok());
  EXPECT_FALSE(ParseSize("K", &v).ok());
  EXPECT_FALSE(ParseSize("12X", &v).ok());
  EXPECT_FALSE(ParseSize("1BB", &v).ok());
  EXPECT_FALSE(ParseSize("99999999999999999999", &v).ok());
  EXPECT_FALSE(ParseSize("99999999999T", &v).ok());
}

TEST(UnitsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(1500), "1.5 kB");
  EXPECT_EQ(FormatBytes(2500000), "2.5 MB");
}

}  // namespace
}  // namespace dsfs
