// `dsfs pack` errors and `dsfs ls` output through the dsfs binary as a subprocess, as a user
// runs it: no FUSE and no root needed (the pack errors that need root, as another user or on a
// full tmpfs, are in mount_errors_test.cc). Once per backend.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

// The dsfs binary, `pack` writing to the backend of the test's parameter unless the arguments
// name one.
class BackendCliTest : public ::testing::TestWithParam<std::string> {
 protected:
  CommandResult Dsfs(std::vector<std::string> args, int timeout_s = 120) {
    if (!args.empty() && args[0] == "pack" &&
        std::find(args.begin(), args.end(), "--backend") == args.end()) {
      args.insert(args.begin() + 1, {"--backend", GetParam()});
    }
    return dsfs::testing::Dsfs(std::move(args), timeout_s);
  }
};

class LsTest : public BackendCliTest {};
class PackErrorsTest : public BackendCliTest {};

// `dsfs ls` prints every name on one line and sends the terminal nothing but text: control
// bytes as \ooo; a time no calendar date fits (an archive's 2^62) as its number of seconds.
TEST_P(LsTest, NamesAreEscapedAndHugeTimesPrintedAsNumbers) {
  TempDir dir;
  std::string tar = dir / "t.tar", store = dir / "s.dsfs";
  // tarfile writes a GNU base-256 mtime for 2^62.
  CommandResult r =
      RunCommand({"python3", "-c",
                  "import io, sys, tarfile\n"
                  "with tarfile.open(sys.argv[1], 'w', format=tarfile.GNU_FORMAT) as t:\n"
                  "  for name, mt in [('far.txt', 2**62), ('ctl\\x1b[31mred\\nnl\\\\.txt', 0)]:\n"
                  "    i = tarfile.TarInfo(name); i.size = 1; i.mtime = mt\n"
                  "    t.addfile(i, io.BytesIO(b'x'))\n",
                  tar});
  if (r.exit_code != 0)
    GTEST_SKIP() << "SKIPPED: python3 cannot write the archive: " << Describe(r);
  r = Dsfs({"pack", "-q", tar, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"ls", "-l", store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << Describe(r);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << Describe(r);
  EXPECT_NE(r.out.find(" 1970-01-01 00:00 ctl\\033[31mred\\012nl\\\\.txt\n"), std::string::npos)
      << Describe(r);
  EXPECT_NE(r.out.find(" 4611686018427387904 far.txt\n"), std::string::npos) << Describe(r);
}

TEST_P(PackErrorsTest, SourceMissing) {
  TempDir dir;
  std::string out = dir / "out";
  MakeDir(out);
  CommandResult r = Dsfs({"pack", dir / "no_such_source", out + "/s.dsfs"});
  EXPECT_TRUE(IsOneLineError(r, {"no_such_source"}));
  EXPECT_TRUE(IsOneLineError(r, {"no such file", "does not exist", "not found"}));
  EXPECT_TRUE(DirNames(out).empty());
}

TEST_P(PackErrorsTest, DestinationExistsNeedsForce) {
  TempDir dir;
  std::string src = dir / "src", out = dir / "out", dst = out + "/s.dsfs";
  MakeDir(src);
  PutFile(src + "/a.txt", "new contents\n");
  MakeDir(out);
  PutFile(dst, "precious old file\n");
  CommandResult r = Dsfs({"pack", "-q", src, dst});
  EXPECT_TRUE(IsOneLineError(r, {"already exists"}));
  EXPECT_TRUE(IsOneLineError(r, {"--force"})) << "the message should say how to overwrite";
  EXPECT_EQ(ReadFile(dst), "precious old file\n") << "the existing file must be left alone";
  EXPECT_EQ(DirNames(out), std::vector<std::string>{"s.dsfs"});
  // --force replaces a dsfs store, not this file.
  r = Dsfs({"pack", "-q", "--force", src, dst});
  EXPECT_TRUE(IsOneLineError(r, {"not a dsfs store"}));
  EXPECT_EQ(ReadFile(dst), "precious old file\n");
  ASSERT_EQ(::unlink(dst.c_str()), 0);
  MakeDir(dir / "old");
  PutFile(dir / "old/a.txt", "old contents\n");
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "old", dst}).exit_code, 0);

  r = Dsfs({"pack", "-q", "--force", src, dst});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(DirNames(out), std::vector<std::string>{"s.dsfs"});
  r = Dsfs({"cat", dst, "/a.txt"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "new contents\n");
}

std::string BackendName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Backends, LsTest, ::testing::Values("lmdb", "rocksdb"), BackendName);
INSTANTIATE_TEST_SUITE_P(Backends, PackErrorsTest, ::testing::Values("lmdb", "rocksdb"),
                         BackendName);

}  // namespace
}  // namespace dsfs::testing
