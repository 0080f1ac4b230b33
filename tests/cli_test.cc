// The dsfs command run in-process (DsfsMain) and, where a crash must be told apart from an
// error, as a subprocess.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/log.h"
#include "store/format.h"
#include "tests/test_util.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

using testing::CommandResult;
using testing::RandomBytes;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;
using testing::TextBytes;
using testing::WriteFile;

struct CliRun {
  int code;
  std::string out, err;
};

CliRun Dsfs(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = DsfsMain(args, out, err);
  return {code, out.str(), err.str()};
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/cat/a.txt", "alpha\n");
    WriteFile(dir_ / "src/cat/b.bin", RandomBytes(70000, 3));
    WriteFile(dir_ / "src/dog/c.txt", TextBytes(300000, 4));
    for (int i = 0; i < 100; ++i) {
      WriteFile(dir_ / ("src/dog/d" + std::to_string(i)), TextBytes(700 + i, i));
    }
    ASSERT_EQ(::symlink("cat/a.txt", (dir_ / "src/ln").c_str()), 0);
    CliRun r = Dsfs({"pack", "-q", dir_ / "src", store_});
    ASSERT_EQ(r.code, 0) << r.err;
  }
  TempDir dir_;
  std::string store_ = dir_ / "s.db";
};

TEST_F(CliTest, PackPrintsOneSummaryLine) {
  CliRun r = Dsfs({"pack", "-q", "--force", "--level", "3", "--dict-size", "8K", "--chunk-size",
                   "64K", "-j", "1", dir_ / "src", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Lines(r.out), 1);
  EXPECT_NE(r.out.find("packed 103 files, 3 directories, 1 symlinks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ratio"), std::string::npos);
  EXPECT_NE(r.out.find("files/s"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(CliTest, PackRefusesToOverwriteAndBadOptions) {
  CliRun r = Dsfs({"pack", "-q", dir_ / "src", store_});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(Lines(r.err), 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos);
  r = Dsfs({"pack", "-q", "--force", "--level", "0", dir_ / "src", store_});
  EXPECT_NE(r.code, 0);
  r = Dsfs({"pack", "-q", "--force", "--dict-size", "lots", dir_ / "src", store_});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1);
  r = Dsfs({"pack", "-q", dir_ / "missing", dir_ / "t.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("missing"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "t.db"));
  r = Dsfs({"pack", "-q", dir_ / "src", dir_ / "no/such/dir/t.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(Lines(r.err), 1);
  r = Dsfs({"bogus"});
  EXPECT_EQ(r.code, 2);
  r = Dsfs({});
  EXPECT_EQ(r.code, 2);
  r = Dsfs({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("pack"), std::string::npos);
}

TEST_F(CliTest, LsCatInfoVerify) {
  CliRun r = Dsfs({"ls", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "cat\ndog\nln\n");
  r = Dsfs({"ls", "-l", store_, "/"});
  EXPECT_NE(r.out.find("ln -> cat/a.txt"), std::string::npos) << r.out;
  r = Dsfs({"ls", "-R", store_});
  EXPECT_EQ(Lines(r.out), 106);
  EXPECT_NE(r.out.find("/dog/d99\n"), std::string::npos);
  r = Dsfs({"cat", store_, "cat/a.txt"});
  EXPECT_EQ(r.out, "alpha\n");
  r = Dsfs({"cat", store_, "/dog/c.txt"});
  EXPECT_EQ(r.out, TextBytes(300000, 4));
  r = Dsfs({"cat", store_, "cat/b.bin"});
  EXPECT_EQ(r.out, RandomBytes(70000, 3));
  r = Dsfs({"cat", store_, "cat/zzz"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(Lines(r.err), 1);
  r = Dsfs({"cat", store_, "cat"});
  EXPECT_EQ(r.code, 1);
  r = Dsfs({"info", store_});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("107 (103 files, 3 directories, 1 symlinks)"), std::string::npos) << r.out;
  r = Dsfs({"info", "--json", store_});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"files\": 103"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"format_version\": 2"), std::string::npos);
  r = Dsfs({"verify", store_});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verified 103 files"), std::string::npos);
}

TEST_F(CliTest, BadStoresGetOneClearLine) {
  struct Case {
    std::string path, expect;
  };
  WriteFile(dir_ / "text.db", "hello, I am not a store");
  std::filesystem::copy_file(store_, dir_ / "trunc.db");
  ASSERT_EQ(::truncate((dir_ / "trunc.db").c_str(), 8192), 0);
  // A store from the future: same layout, version 99 in the header.
  std::string bytes = ReadFile(store_);
  size_t at = bytes.find(std::string(kStoreMagic, 8));
  ASSERT_NE(at, std::string::npos);
  uint32_t v99 = 99;
  std::memcpy(&bytes[at + 8], &v99, 4);
  WriteFile(dir_ / "future.db", bytes);
  for (const Case& c :
       {Case{dir_ / "missing.db", "No such file"}, Case{dir_ / "text.db", "not a dsfs store"},
        Case{dir_.path(), "not a dsfs store"}, Case{dir_ / "trunc.db", "truncated"},
        Case{dir_ / "future.db", "version 99 is not supported"}}) {
    for (const char* cmd : {"info", "ls", "verify"}) {
      CliRun r = Dsfs({cmd, c.path});
      EXPECT_EQ(r.code, 1) << cmd << " " << c.path;
      EXPECT_EQ(Lines(r.err), 1) << r.err;
      EXPECT_NE(r.err.find(c.expect), std::string::npos) << cmd << ": " << r.err;
    }
  }
}

TEST_F(CliTest, VerifyNamesDamagedFiles) {
  // Damage the payload of dog/c.txt (compressible text: its bytes appear nowhere else).
  std::string bytes = ReadFile(store_);
  CliRun r = Dsfs({"cat", store_, "dog/c.txt"});
  ASSERT_EQ(r.code, 0);
  // Find a stored (compressed) region by flipping bytes until verify names c.txt.
  bool named = false;
  for (size_t pos = bytes.size() / 2; pos < bytes.size() && !named; pos += 997) {
    std::string damaged = bytes;
    damaged[pos] ^= 0x55;
    WriteFile(dir_ / "bad.db", damaged);
    CliRun v = Dsfs({"verify", dir_ / "bad.db"});
    if (v.code != 0 && v.out.find("BAD /dog/c.txt") != std::string::npos) {
      named = true;
      EXPECT_EQ(Lines(v.err), 1);
      EXPECT_NE(v.err.find("damaged"), std::string::npos);
      // The other files still read correctly.
      CliRun c = Dsfs({"cat", dir_ / "bad.db", "cat/a.txt"});
      EXPECT_EQ(c.out, "alpha\n");
      CliRun bad = Dsfs({"cat", dir_ / "bad.db", "dog/c.txt"});
      EXPECT_EQ(bad.code, 1);
      EXPECT_TRUE(bad.out.empty() || bad.out != TextBytes(300000, 4));
    }
  }
  EXPECT_TRUE(named);
}

// Flip bytes all over a real store: every run must end in a clean exit (0 with correct data,
// or 1 with one error line), never a crash or wrong bytes.
TEST_F(CliTest, BitFlipsAnywhereNeverCrash) {
  std::string bytes = ReadFile(store_);
  std::string expected = TextBytes(300000, 4);
  int trials = 0;
  for (size_t pos = 0; pos < bytes.size(); pos += bytes.size() / 97 + 1) {
    std::string damaged = bytes;
    damaged[pos] ^= 0x20;
    std::string path = dir_ / "flip.db";
    WriteFile(path, damaged);
    CommandResult v = RunCommand({testing::DsfsBinary(), "verify", path}, 60);
    ASSERT_NE(v.exit_code, -1) << "verify crashed with a flip at " << pos << ": " << v.err;
    EXPECT_TRUE(v.exit_code == 0 || v.exit_code == 1) << pos;
    CommandResult c = RunCommand({testing::DsfsBinary(), "cat", path, "dog/c.txt"}, 60);
    ASSERT_NE(c.exit_code, -1) << "cat crashed with a flip at " << pos << ": " << c.err;
    if (c.exit_code == 0) {
      EXPECT_EQ(c.out, expected) << "wrong bytes with a flip at " << pos;
    }
    ++trials;
  }
  EXPECT_GT(trials, 90);
}

TEST(MountOptionsTest, ParsesEveryOption) {
  MountConfig c;
  ASSERT_TRUE(ParseMountOptions("threads=4,allow_other,uid=7,gid=8,ro,cache_size=64M,push=1G,"
                                "timeout=5,zero_open=0,preload=/train,os_readahead=1",
                                &c)
                  .ok());
  EXPECT_EQ(c.cache_bytes, 64u << 20);
  EXPECT_EQ(c.push_bytes, 1u << 30);
  EXPECT_EQ(c.fuse.timeout_s, 5.0);
  EXPECT_FALSE(c.fuse.zero_message_open);
  EXPECT_EQ(c.fuse.preload_path, "/train");
  EXPECT_FALSE(c.store.random_access);
  MountConfig p;
  ASSERT_TRUE(ParseMountOptions("preload", &p).ok());
  EXPECT_EQ(p.fuse.preload_path, "/");
  EXPECT_EQ(p.cache_bytes, MountConfig::kDefaultCache);
  EXPECT_TRUE(p.fuse.zero_message_open);
  EXPECT_TRUE(p.store.random_access);
  EXPECT_EQ(c.fuse.threads, 4);
  EXPECT_TRUE(c.fuse.allow_other);
  EXPECT_EQ(c.fs.uid, 7u);
  EXPECT_EQ(c.fs.gid, 8u);
  MountConfig d;
  ASSERT_TRUE(ParseMountOptions("", &d).ok());
  EXPECT_EQ(d.fuse.threads, 2);
  EXPECT_EQ(d.fs.uid, ::getuid());
  ASSERT_TRUE(ParseMountOptions("debug", &d).ok());
  EXPECT_TRUE(d.fuse.debug);
  SetLogLevel("warn");
  for (const char* bad :
       {"threads=0", "threads=x", "threads=", "uid=-1", "rw", "nonsense", "allow_other=1",
        "gid=99999999999", "cache_size=lots", "push=", "zero_open=2", "timeout=-1"}) {
    MountConfig e;
    Status s = ParseMountOptions(bad, &e);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
  }
}

TEST(StatsCommandTest, NotAMount) {
  TempDir dir;
  CliRun r = Dsfs({"stats", dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is not a dsfs mount"), std::string::npos);
}

TEST(MountOptionsTest, CliRejectsBadOptionsBeforeMounting) {
  TempDir dir;
  CliRun r = Dsfs({"mount", "-o", "nonsense", dir / "s.db", dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown mount option 'nonsense'"), std::string::npos);
}

}  // namespace
}  // namespace dsfs
