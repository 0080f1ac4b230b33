// The dsfs command run in-process (DsfsMain) and, where a crash must be told apart from an
// error, as a subprocess.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/kv_open.h"
#include "common/log.h"
#include "common/version.h"
#include "pack/packer.h"
#include "store/format.h"
#include "tests/support/test_util.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {
namespace {

using testing::CommandResult;
using testing::LineCount;
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

std::string Joined(std::vector<std::string> words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

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

TEST_F(CliTest, AddConvertAndBackendErrorsAreOneLine) {
  WriteFile(dir_ / "more/cat/a.txt", "clash");
  WriteFile(dir_ / "text.db", "not a store");
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {{"add", "-q", store_, dir_ / "more"}, "already exists in the store (use --replace)"},
           {{"add", "-q", dir_ / "missing.db", dir_ / "more"}, "No such file"},
           {{"add", "-q", dir_ / "text.db", dir_ / "more"}, "not a dsfs store"},
           {{"add", "-q", store_, dir_ / "no_source"}, "No such file"},
           {{"add", "-q", store_, dir_ / "text.db"}, "not a directory"},
           {{"pack", "-q", "--backend", "leveldb", dir_ / "src", dir_ / "x.db"}, "lmdb, rocksdb"},
           {{"convert", store_, dir_ / "y.db", "--backend", "nope"}, "unknown backend"},
           {{"convert", dir_ / "text.db", dir_ / "y.db", "--backend", "rocksdb"},
            "not a dsfs store"},
           {{"convert", store_, store_, "--backend", "lmdb"}, "already exists"}}) {
    CliRun r = Dsfs(c.args);
    EXPECT_EQ(r.code, 1) << c.args[0] << " " << c.args.back();
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("dsfs: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.db"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "y.db"));
  // The store is unchanged and still adds (and converts) fine.
  CliRun r = Dsfs({"add", "--replace", store_, dir_ / "more"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("added 1 files"), std::string::npos) << r.out;
  r = Dsfs({"convert", store_, dir_ / "r.db", "--backend", "rocksdb"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ostringstream out;
  ASSERT_TRUE(RunCat(dir_ / "r.db", "cat/a.txt", out).ok());
  EXPECT_EQ(out.str(), "clash");
}

TEST_F(CliTest, PackPrintsOneSummaryLine) {
  CliRun r = Dsfs({"pack", "--force", "--level", "3", "--dict-size", "8K", "--chunk-size", "64K",
                   "-j", "1", dir_ / "src", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(LineCount(r.out), 1);
  EXPECT_NE(r.out.find("packed 103 files, 3 directories, 1 symlinks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ratio"), std::string::npos);
  EXPECT_NE(r.out.find("files/s"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// -q, the subcommand's or dsfs's own, before or after the subcommand: nothing on success.
TEST_F(CliTest, QuietPrintsNothingOnSuccess) {
  WriteFile(dir_ / "more/x.txt", "x");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"pack", "-q", "-f", dir_ / "src", store_},
           {"-q", "pack", "-f", dir_ / "src", store_},
           {"pack", "-f", dir_ / "src", store_, "--quiet"},
           {"add", "-q", store_, dir_ / "more"},
           {"convert", "-q", store_, dir_ / "r.db", "--backend", "rocksdb"},
           {"verify", "-q", store_},
           {"-q", "verify", store_},
           {"verify", store_, "-q"}}) {
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 0) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_EQ(r.out, "") << args[0] << " " << args[1];
    EXPECT_EQ(r.err, "") << args[0] << " " << args[1];
  }
  // Without -q the same commands say what they did.
  CliRun r = Dsfs({"verify", store_});
  EXPECT_NE(r.out.find("verified 104 files"), std::string::npos) << r.out;
  // A failure under -q is still its one error line.
  r = Dsfs({"pack", "-q", dir_ / "missing", dir_ / "m.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
}

// --log-level, -v and -q are taken after the subcommand as before it; what neither knows is
// one usage error line.
TEST_F(CliTest, GlobalOptionsAreTakenAfterTheSubcommand) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ls", store_, "--log-level", "debug"},
                                             {"ls", store_, "/cat", "--log-level=info"},
                                             {"--log-level", "error", "ls", store_},
                                             {"ls", "-v", store_},
                                             {"info", store_, "--verbose"}}) {
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 0) << args[0] << " " << args[1] << " " << args.back() << ": " << r.err;
    EXPECT_FALSE(r.out.empty());
  }
  CliRun r = Dsfs({"ls", store_, "--log-level", "loud"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "dsfs: error: unknown log level 'loud' (one of trace, debug, info, warn, error, "
            "off)\n");
  r = Dsfs({"ls", store_, "--loud"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--loud"), std::string::npos) << r.err;
  // DsfsMain leaves the log level as it found it (the tests run it in-process).
  ASSERT_TRUE(SetLogLevel("warn"));
  EXPECT_EQ(Dsfs({"ls", store_, "--log-level", "trace"}).code, 0);
  EXPECT_EQ(Log()->level(), spdlog::level::warn);
}

// One version (CMake's project(VERSION)) from --version, -V and the mount helper; dsfs info
// names the dsfs that read the store.
TEST_F(CliTest, EveryEntryPointShowsTheOneVersion) {
  const std::string version = DsfsVersion();
  EXPECT_FALSE(version.empty());
  for (const char* flag : {"--version", "-V"}) {
    CliRun r = Dsfs({flag});
    EXPECT_EQ(r.code, 0) << flag;
    EXPECT_EQ(r.out, "dsfs " + version + "\n") << flag;
    std::ostringstream out, err;
    EXPECT_EQ(MountHelperMain("/sbin/mount.fuse.dsfs", {flag}, out, err), 0) << err.str();
    EXPECT_EQ(out.str(), "mount.fuse.dsfs (dsfs " + version + ")\n") << flag;
  }
  CliRun r = Dsfs({"info", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dsfs " + version), std::string::npos) << r.out;
  r = Dsfs({"info", "--json", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["dsfs_version"], version) << r.out;
}

TEST_F(CliTest, UndecodableImagesAreLoggedUpToALimit) {
  // A tree of many files that look like JPEGs but are not: the first kImageWarnings are named
  // in the log, the rest only counted (a 10-million-file tree must not log 10 million lines).
  for (int i = 0; i < 30; ++i) {
    WriteFile(dir_ / ("fake/c/" + std::to_string(i) + ".jpg"), std::string("\xff\xd8\xff") + "x");
  }
  std::string log = dir_ / "pack.log";
  ASSERT_TRUE(LogToFile(log).ok());
  CliRun r = Dsfs({"pack", dir_ / "fake", dir_ / "fake.db"});
  LogToStderr();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("30 served as they are (the first 20 logged)"), std::string::npos) << r.out;
  std::string text = ReadFile(log);
  size_t named = 0, pos = 0;
  while ((pos = text.find("the views serve it as it is", pos)) != std::string::npos) ++named, ++pos;
  EXPECT_EQ(named, kImageWarnings) << text;
  EXPECT_NE(text.find("not logged one by one"), std::string::npos) << text;
  EXPECT_EQ(LineCount(text), static_cast<int>(kImageWarnings) + 1) << text;
}

TEST_F(CliTest, PackRefusesToOverwriteAndBadOptions) {
  CliRun r = Dsfs({"pack", "-q", dir_ / "src", store_});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(LineCount(r.err), 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos);
  r = Dsfs({"pack", "-q", "--force", "--level", "0", dir_ / "src", store_});
  EXPECT_NE(r.code, 0);
  r = Dsfs({"pack", "-q", "--force", "--dict-size", "lots", dir_ / "src", store_});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1);
  r = Dsfs({"pack", "-q", dir_ / "missing", dir_ / "t.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("missing"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "t.db"));
  r = Dsfs({"pack", "-q", dir_ / "src", dir_ / "no/such/dir/t.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(LineCount(r.err), 1);
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
  EXPECT_EQ(LineCount(r.out), 106);
  EXPECT_NE(r.out.find("/dog/d99\n"), std::string::npos);
  r = Dsfs({"cat", store_, "cat/a.txt"});
  EXPECT_EQ(r.out, "alpha\n");
  r = Dsfs({"cat", store_, "/dog/c.txt"});
  EXPECT_EQ(r.out, TextBytes(300000, 4));
  r = Dsfs({"cat", store_, "cat/b.bin"});
  EXPECT_EQ(r.out, RandomBytes(70000, 3));
  r = Dsfs({"cat", store_, "cat/zzz"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(LineCount(r.err), 1);
  r = Dsfs({"cat", store_, "cat"});
  EXPECT_EQ(r.code, 1);
  r = Dsfs({"info", store_});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("107 (103 files, 3 directories, 1 symlinks)"), std::string::npos) << r.out;
  r = Dsfs({"info", "--json", store_});
  ASSERT_EQ(r.code, 0);
  nlohmann::json info = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(info.is_object()) << r.out;
  EXPECT_EQ(info["files"], 103) << r.out;
  EXPECT_EQ(info["format_version"], kFormatVersion);
  EXPECT_GT(info["metadata_segments"], 0) << r.out;
  EXPECT_LT(info["metadata_bytes"], info["metadata_raw_bytes"]) << r.out;
  EXPECT_EQ(info["tensor"]["path"], "/");
  // A store path that is not UTF-8 still gives a valid document (the bytes become U+FFFD).
  const std::string odd = dir_ / "s\xff.db";
  std::filesystem::copy_file(store_, odd);
  r = Dsfs({"info", "--json", odd});
  ASSERT_EQ(r.code, 0) << r.err;
  info = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(info.is_object()) << r.out;
  EXPECT_EQ(info["store"], dir_ / "s\xef\xbf\xbd.db");
  // A bad path: one error line and no half-written report.
  for (bool json : {false, true}) {
    r = json ? Dsfs({"info", "--json", store_, "/nope"}) : Dsfs({"info", store_, "/nope"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
  }
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
      EXPECT_EQ(LineCount(r.err), 1) << r.err;
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
      EXPECT_EQ(LineCount(v.err), 1);
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

TEST(MountOptionParseTest, ParsesEveryOption) {
  MountConfig c;
  ASSERT_TRUE(ParseMountOptions("threads=4,allow_other,uid=7,gid=8,ro,cache_size=64M,push=1G,"
                                "timeout=5,zero_open=0,preload=/train,os_readahead=1,umask=027",
                                &c)
                  .ok());
  EXPECT_EQ(c.cache_bytes, 64u << 20);
  EXPECT_EQ(c.push_bytes, 1u << 30);
  EXPECT_EQ(c.fuse.timeout_s, 5.0);
  EXPECT_FALSE(c.fuse.zero_message_open);
  EXPECT_EQ(c.fuse.preload_path, "/train");
  EXPECT_FALSE(c.store.kv.random_access);
  MountConfig s3;
  ASSERT_TRUE(ParseMountOptions("s3_attempts=12,s3_timeout=30", &s3).ok());
  EXPECT_EQ(s3.store.kv.remote_attempts, 12);
  EXPECT_EQ(s3.store.kv.remote_timeout_s, 30);
  EXPECT_EQ(c.store.kv.remote_attempts, 0);  // not given: the environment's or the default
  EXPECT_FALSE(ParseMountOptions("s3_attempts=0", &s3).ok());
  EXPECT_FALSE(ParseMountOptions("s3_timeout=x", &s3).ok());
  MountConfig p;
  ASSERT_TRUE(ParseMountOptions("preload", &p).ok());
  EXPECT_EQ(p.fuse.preload_path, "/");
  EXPECT_EQ(p.cache_bytes, MountConfig::kDefaultCache);
  EXPECT_TRUE(p.fuse.zero_message_open);
  EXPECT_TRUE(p.store.kv.random_access);
  EXPECT_EQ(c.fuse.session.threads, 4);
  EXPECT_TRUE(c.fuse.allow_other);
  EXPECT_EQ(c.fs.uid, 7u);
  EXPECT_EQ(c.fs.gid, 8u);
  EXPECT_EQ(c.fs.umask, 027u);
  MountConfig d;
  ASSERT_TRUE(ParseMountOptions("", &d).ok());
  EXPECT_EQ(d.fuse.session.threads, 2);
  EXPECT_EQ(d.fs.uid, ::getuid());
  EXPECT_EQ(d.fs.umask, 0u);
  ASSERT_TRUE(ParseMountOptions("debug", &d).ok());
  EXPECT_TRUE(d.fuse.session.debug);
  EXPECT_EQ(d.fuse.session.transport, TransportMode::kAuto);
  ASSERT_TRUE(ParseMountOptions("transport=uring", &d).ok());
  EXPECT_EQ(d.fuse.session.transport, TransportMode::kUring);
  ASSERT_TRUE(ParseMountOptions("transport=classic", &d).ok());
  EXPECT_EQ(d.fuse.session.transport, TransportMode::kClassic);
  ASSERT_TRUE(ParseMountOptions("transport=auto", &d).ok());
  EXPECT_EQ(d.fuse.session.transport, TransportMode::kAuto);
  SetLogLevel("warn");
  for (const char* bad :
       {"threads=0", "threads=x", "threads=", "uid=-1", "rw", "nonsense", "allow_other=1",
        "gid=99999999999", "cache_size=lots", "push=", "zero_open=2", "timeout=-1", "umask=8",
        "umask=01000", "umask=", "umask=-1", "transport=", "transport=io_uring"}) {
    MountConfig e;
    Status s = ParseMountOptions(bad, &e);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
  }
}

// A fresh machine has no cache_dir yet: dsfs cache ls lists nothing, gc frees nothing, both
// exit 0. A DIR given that is not there is still an error.
TEST(CacheCommandTest, NoCacheDirYetListsNothing) {
  TempDir dir;
  testing::ScopedEnv env;
  env.Set("XDG_CACHE_HOME", (dir / "fresh").c_str());
  CliRun r = Dsfs({"cache", "ls"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "0 cache(s), 0 B in " + (dir / "fresh/dsfs") + "\n");
  r = Dsfs({"cache", "gc"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "0 B freed in " + (dir / "fresh/dsfs") + "\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "fresh"));
  for (const char* cmd : {"ls", "gc"}) {
    r = Dsfs({"cache", cmd, dir / "typo"});
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.err.find("no such cache directory"), std::string::npos) << r.err;
  }
}

// A URL of a scheme dsfs does not read is named as such, not "No such file or directory".
TEST(CliUsageTest, UnsupportedUrlSchemesAreNamed) {
  TempDir dir;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"mount", "https://example.com/s.db", dir.path()},
                                             {"ls", "https://example.com/s.db"},
                                             {"info", "gs://bucket/s"},
                                             {"verify", "file:///data/s.db"},
                                             {"add", "http://x/s.db", dir.path()}}) {
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 1) << Joined(args);
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("' is not supported: a store is a local path or s3://BUCKET/PREFIX"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("No such file"), std::string::npos) << r.err;
  }
  std::ostringstream out, err;
  EXPECT_EQ(MountHelperMain("mount.fuse.dsfs", {"https://x/s.db", dir.path()}, out, err), 32);
  EXPECT_NE(err.str().find("URL scheme 'https' is not supported"), std::string::npos) << err.str();
  // Not a scheme, or a local path that is there after all: opened as ever.
  EXPECT_TRUE(CheckUrlScheme("s3://bucket/prefix", kStoreSources).ok());
  EXPECT_TRUE(CheckUrlScheme(dir / "a://b", kStoreSources).ok());
  EXPECT_TRUE(CheckUrlScheme("relative/a://b", kStoreSources).ok());
  EXPECT_TRUE(CheckUrlScheme("://x", kStoreSources).ok());
  ASSERT_TRUE(std::filesystem::create_directories(dir / "x:"));
  WriteFile(dir / "x:/s.db", "x");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  EXPECT_TRUE(CheckUrlScheme("x://s.db", kStoreSources).ok());
  EXPECT_FALSE(CheckUrlScheme("x://t.db", kStoreSources).ok());
  std::filesystem::current_path(cwd);
}

TEST(StatsCommandTest, NotAMount) {
  TempDir dir;
  CliRun r = Dsfs({"stats", dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is not a dsfs mount"), std::string::npos);
}

// The default cache_dir follows the XDG base directory rules: a relative $XDG_CACHE_HOME
// (or $HOME) is ignored, never a directory relative to wherever the command runs.
TEST(CacheCommandTest, DefaultCacheDirIsAbsolute) {
  testing::ScopedEnv env;
  env.Set("XDG_CACHE_HOME", "/var/cache/x");
  EXPECT_EQ(DefaultCacheDir(), "/var/cache/x/dsfs");
  env.Set("XDG_CACHE_HOME", "rel");
  env.Set("HOME", "/home/u");
  EXPECT_EQ(DefaultCacheDir(), "/home/u/.cache/dsfs");
  env.Set("XDG_CACHE_HOME", nullptr);
  env.Set("HOME", "relhome");
  EXPECT_EQ(DefaultCacheDir(), "/root/.cache/dsfs");
}

// A directory that merely holds .dsfs/stats is no mount: a FIFO there (which would block a
// reader), a link to /dev/zero (endless) or a file of made-up figures; stats and warmup say so.
TEST(StatsCommandTest, AFakeStatsFileIsNoMount) {
  TempDir dir;
  const std::string fifo = dir / "fifo", zero = dir / "zero", made_up = dir / "made_up";
  for (const std::string& d : {fifo, zero, made_up}) {
    ASSERT_TRUE(std::filesystem::create_directories(d + "/.dsfs"));
  }
  ASSERT_EQ(::mkfifo((fifo + "/.dsfs/stats").c_str(), 0644), 0);
  ASSERT_EQ(::symlink("/dev/zero", (zero + "/.dsfs/stats").c_str()), 0);
  WriteFile(made_up + "/.dsfs/stats", R"({"uptime_s": 1, "requests": {"read": 7}})");
  for (const std::string& d : {fifo, zero, made_up}) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"stats", d}, {"stats", "--prometheus", d}, {"warmup", d}}) {
      CliRun r = Dsfs(args);
      EXPECT_EQ(r.code, 1) << args[0] << " " << d << ": " << r.err;
      EXPECT_NE(r.err.find("is not a dsfs mount"), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "") << args[0] << " " << d;
    }
  }
}

// An empty MOUNTPOINT (a script's unset variable) is one line and exit 1, never an uncaught
// filesystem_error ("cannot make absolute path") and an abort.
TEST(StatsCommandTest, EmptyMountpointIsOneLine) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"umount", ""}, {"umount", "--lazy", ""}, {"stats", ""}}) {
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
  }
}

// dsfs info's reason for an absent tensor view names a file as dsfs ls does: a name that holds
// an escape sequence or bytes that are not UTF-8 never reaches the terminal raw.
TEST(StatsCommandTest, InfoEscapesNamesInTheTensorReason) {
  TempDir dir;
  WriteFile(dir / "src/c/t.txt", "x");
  ASSERT_EQ(::symlink("t.txt", (dir / "src/c/\033[2J\377").c_str()), 0);
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "src", dir / "s.db"}).code, 0);
  CliRun r = Dsfs({"info", dir / "s.db"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("absent: c/\\033[2J\\377 is a symbolic link"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos);
  EXPECT_EQ(r.out.find('\377'), std::string::npos);
}

TEST(MountOptionParseTest, CliRejectsBadOptionsBeforeMounting) {
  TempDir dir;
  CliRun r = Dsfs({"mount", "-o", "nonsense", dir / "s.db", dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown mount option 'nonsense'"), std::string::npos);
}

// A repeated option is refused with one line naming it (the last one won silently:
// view=bmp,view=npy mounted npy), also across -o lists and in fstab's list; "ro" may repeat
// (dsfs@.service passes "-o ro,${OPTIONS}").
TEST(MountOptionParseTest, RepeatedOptionsAreRefused) {
  for (const char* twice :
       {"view=bmp,view=npy", "view=bmp,view=bmp", "kernel,kernel", "kernel,kernel=loop",
        "cache_size=1G,threads=2,cache_size=2G", "allow_other,allow_other", "preload,preload=/a"}) {
    SCOPED_TRACE(twice);
    MountConfig c;
    Status s = ParseMountOptions(twice, &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    std::string key = std::string(twice).substr(0, std::string(twice).find_first_of("=,"));
    EXPECT_NE(s.message().find("mount option " + key + " given twice"), std::string::npos)
        << s.message();
    MountConfig f;
    EXPECT_EQ(ParseFstabMountOptions(std::string("defaults,") + twice, false, &f, nullptr).code(),
              Status::Code::kInvalidArgument);
  }
  MountConfig c;
  EXPECT_TRUE(ParseMountOptions("ro,view=bmp,ro", &c).ok());
  MountConfig f;
  std::vector<std::string> ignored;
  EXPECT_TRUE(
      ParseFstabMountOptions("ro,noatime,noatime,kernel,ro,nofail", false, &f, &ignored).ok());
  EXPECT_TRUE(f.kernel);
  // Sloppy: unknown options repeated are still skipped.
  MountConfig g;
  EXPECT_TRUE(ParseFstabMountOptions("bogus,bogus,threads=3", true, &g, nullptr).ok());

  TempDir dir;
  for (const std::vector<std::string>& opts : std::vector<std::vector<std::string>>{
           {"-o", "view=bmp,view=npy"}, {"-o", "view=bmp", "-o", "view=npy"}}) {
    std::vector<std::string> args = {"mount", dir / "s.db", dir.path()};
    args.insert(args.end(), opts.begin(), opts.end());
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("dsfs: error: mount option view given twice (view=bmp and view=npy)"),
              std::string::npos)
        << r.err;
  }
}

TEST(MountOptionParseTest, LoggingAndStatusOptions) {
  MountConfig c;
  ASSERT_TRUE(
      ParseMountOptions("log_level=info,log_file=rel/dsfs.log,status_interval=0.5", &c).ok());
  EXPECT_EQ(c.log_level, "info");
  // The daemon changes to "/": a relative log file is made absolute from here.
  EXPECT_EQ(c.log_file, (std::filesystem::current_path() / "rel/dsfs.log").string());
  EXPECT_EQ(c.fuse.status_interval_s, 0.5);
  MountConfig d;
  ASSERT_TRUE(ParseMountOptions("", &d).ok());
  EXPECT_EQ(d.log_level, "");
  EXPECT_EQ(d.log_file, "");
  EXPECT_EQ(d.fuse.status_interval_s, 5.0);
  for (const char* bad : {"log_level=loud", "log_level=", "log_file=", "status_interval=0",
                          "status_interval=x", "status_interval=1e9", "status_interval=-1"}) {
    MountConfig e;
    Status s = ParseMountOptions(bad, &e);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
  }
}

TEST(MountOptionParseTest, BadLogLevelsAreOneLineUsageErrors) {
  TempDir dir;
  CliRun r = Dsfs({"mount", "-o", "log_level=loud", dir / "s.db", dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("dsfs: error: mount option log_level=loud: not one of trace"),
            std::string::npos)
      << r.err;
  r = Dsfs({"--log-level", "loud", "info", dir / "s.db"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "dsfs: error: unknown log level 'loud' (one of trace, debug, info, warn, error, "
            "off)\n");
}

TEST(CliUsageTest, CatReportsWriteErrorsAndPackBoundsThreads) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", std::string(100000, 'a'));
  CliRun r = Dsfs({"pack", "-q", dir / "src", dir / "s.db"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto sh = testing::RunCommand(
      {"sh", "-c", testing::DsfsBinary() + " cat " + (dir / "s.db") + " a.txt > /dev/full"});
  EXPECT_EQ(sh.exit_code, 1);
  EXPECT_NE(sh.err.find("dsfs: error: writing a.txt"), std::string::npos) << sh.err;
  for (const char* j : {"-1", "40000"}) {
    r = Dsfs({"pack", "-q", "-j", j, dir / "src", dir / "t.db"});
    EXPECT_EQ(r.code, 1) << j;
    EXPECT_NE(r.err.find("threads must be"), std::string::npos) << r.err;
  }
  // SRC may be a symlink to the tree.
  ASSERT_EQ(::symlink((dir / "src").c_str(), (dir / "link").c_str()), 0);
  r = Dsfs({"pack", "-q", dir / "link", dir / "l.db"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// ls -l shows setuid, setgid and sticky bits as ls(1) (and the mount) does.
TEST(CliUsageTest, LsLongShowsTheSpecialModeBits) {
  TempDir dir;
  WriteFile(dir / "src/d/suid", "x");
  WriteFile(dir / "src/d/sgid", "y");
  ASSERT_EQ(::chmod((dir / "src/d/suid").c_str(), 04755), 0);
  ASSERT_EQ(::chmod((dir / "src/d/sgid").c_str(), 02700), 0);
  ASSERT_EQ(::chmod((dir / "src/d").c_str(), 01777), 0);
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "src", dir / "s.db"}).code, 0);
  auto r = Dsfs({"ls", "-l", "-R", dir / "s.db", "/"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("drwxrwxrwt "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-rwsr-xr-x "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-rwx--S--- "), std::string::npos) << r.out;
}

// A destination without a file name is refused before anything is packed (it used to pack,
// then fail to rename the store to "").
TEST(CliUsageTest, PackToAPathWithoutAFileNameIsRefused) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  for (const std::string& dst : {std::string(), dir / "out/", dir / ".", dir / ".."}) {
    SCOPED_TRACE("'" + dst + "'");
    std::filesystem::create_directories(dir / "out");
    auto r = Dsfs({"pack", "-q", dir / "src", dst});
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("a store needs a file name"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

// What a killed pack left (a store, or a RocksDB writer's staging area, whose process is gone)
// is removed by the next pack to that path. A live process's temporary, one a writer holds
// locked (of another PID namespace or machine, where its PID means nothing), and whatever of
// that name is not dsfs's stay.
TEST(CliUsageTest, PackRemovesTemporariesOfDeadPacks) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string tmp = ".tmp-" + std::to_string(dead);
  // Half stores, as a killed pack leaves them: an LMDB file, a RocksDB directory.
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "src", dir / "lmdb"}).code, 0);
  ASSERT_EQ(Dsfs({"pack", "-q", "--backend", "rocksdb", dir / "src", dir / "rocks"}).code, 0);
  auto age = [](const std::string& path, int seconds) {
    struct timespec t[2] = {{::time(nullptr) - seconds, 0}, {::time(nullptr) - seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, AT_SYMLINK_NOFOLLOW), 0) << path;
  };
  auto store_copy = [&](const std::string& from, const std::string& to, int seconds) {
    std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
    age(to, seconds);
  };
  const std::string stale_file = dir / ("s.db" + tmp);
  const std::string stale_dir = dir / ("r.db" + tmp);
  const std::string live = dir / ("s.db.tmp-" + std::to_string(::getppid()));  // alive
  const std::string staging = dir / ("q.db" + tmp);
  const std::string locked = dir / ("t.db" + tmp);
  const std::string not_a_store = dir / ("u.db" + tmp);
  const std::string user_dir = dir / ("v.db" + tmp);
  store_copy(dir / "lmdb", stale_file, 7200);
  store_copy(dir / "rocks", stale_dir, 7200);
  store_copy(dir / "lmdb", live, 7200);
  store_copy(dir / "lmdb", locked, 7200);
  int lock = ::open(locked.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);  // as a live writer elsewhere holds its temporary
  WriteFile(staging + "/dsfs-staging-" + std::to_string(dead) + "/000001.sst", "half a store");
  const std::string empty = dir / ("e.db" + tmp);  // killed before LMDB wrote its first page
  WriteFile(empty, "");
  WriteFile(not_a_store, "a user's file");
  age(not_a_store, 7200);
  WriteFile(user_dir + "/sub/important", "a user's backup");
  age(user_dir, 7200);
  EXPECT_EQ(Dsfs({"pack", "-q", dir / "src", dir / "s.db"}).code, 0);
  EXPECT_EQ(Dsfs({"pack", "-q", "--backend", "rocksdb", dir / "src", dir / "r.db"}).code, 0);
  for (const char* name : {"e.db", "q.db", "t.db", "u.db", "v.db"}) {
    EXPECT_EQ(Dsfs({"pack", "-q", dir / "src", dir / name}).code, 0) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(stale_file));
  EXPECT_FALSE(std::filesystem::exists(stale_dir));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_FALSE(std::filesystem::exists(staging));
  EXPECT_FALSE(std::filesystem::exists(empty));
  EXPECT_TRUE(std::filesystem::exists(locked)) << "a writer's locked temporary was removed";
  ::close(lock);
  EXPECT_EQ(ReadFile(not_a_store), "a user's file");
  EXPECT_EQ(ReadFile(user_dir + "/sub/important"), "a user's backup");
}

// A pack holds its temporary locked while it writes (what tells a writer of another PID
// namespace or machine alive to RemoveDeadTemporaries).
TEST(CliUsageTest, RunningPackHoldsItsTemporaryLocked) {
  TempDir dir;
  WriteFile(dir / "src/big", testing::RandomBytes(40 << 20, 5));
  for (const char* backend : {"lmdb", "rocksdb"}) {
    std::string dst = dir / (std::string(backend) + ".db");
    auto sh = testing::RunCommand({"sh", "-c",
                                   testing::DsfsBinary() + " pack -q -j 1 --level 19 --backend " +
                                       backend + " " + (dir / "src") + " " + dst +
                                       " & P=$!; sleep 1; flock -n " + dst +
                                       ".tmp-$P true; echo lock=$?; kill -INT $P; wait $P"});
    EXPECT_NE(sh.out.find("lock=1"), std::string::npos) << backend << sh.out << sh.err;
  }
}

// Ctrl-C during a pack: an "interrupted" line, exit 1, and no store or temporary left.
TEST(CliUsageTest, InterruptedPackLeavesNothing) {
  TempDir dir;
  WriteFile(dir / "src/big", testing::RandomBytes(40 << 20, 5));
  for (const char* backend : {"lmdb", "rocksdb"}) {
    std::string dst = dir / (std::string(backend) + ".db");
    auto sh = testing::RunCommand({"sh", "-c",
                                   testing::DsfsBinary() + " pack -q -j 1 --level 19 --backend " +
                                       backend + " " + (dir / "src") + " " + dst +
                                       " & P=$!; sleep 1; kill -INT $P; wait $P; echo rc=$?"});
    EXPECT_NE(sh.out.find("rc=1"), std::string::npos) << backend << sh.out << sh.err;
    EXPECT_NE(sh.err.find("dsfs: error: interrupted"), std::string::npos) << sh.err;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename().string().find(backend), std::string::npos) << e.path();
    }
  }
}

// --force replaces a dsfs store (of either backend; a damaged one too) or an empty directory.
// Anything else at DST (a directory of files, DST's own parent, the source, a plain file, a
// symlink) is refused with one line naming it, and left exactly as it was.
TEST(CliUsageTest, ForceReplacesOnlyAStoreOrAnEmptyDirectory) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  WriteFile(dir / "victim/sub/data.txt", "precious");
  WriteFile(dir / "par/other.txt", "other");
  WriteFile(dir / "par/data/x", "x");
  WriteFile(dir / "plain.txt", "plain");
  ASSERT_EQ(::symlink("victim", (dir / "dirlink").c_str()), 0);
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "src", dir / "good.db"}).code, 0);
  ASSERT_EQ(::symlink("good.db", (dir / "storelink").c_str()), 0);
  ASSERT_EQ(RunCommand({"tar", "cf", dir / "src.tar", "-C", dir / "src", "."}).exit_code, 0);
  const auto before = testing::TreeListing(dir.path());
  for (const char* backend : {"lmdb", "rocksdb"}) {
    const std::vector<std::string> pack = {"pack", "-q", "-f", "--backend", backend};
    auto with = [&](std::vector<std::string> tail) {
      std::vector<std::string> args = pack;
      args.insert(args.end(), tail.begin(), tail.end());
      return args;
    };
    for (const auto& args :
         {with({dir / "src", dir / "victim"}), with({dir / "par/data", dir / "par"}),
          with({dir / "src", dir / "src"}), with({dir / "src.tar", dir / "src.tar"}),
          with({dir / "src", dir / "plain.txt"}), with({dir / "src", dir / "dirlink"}),
          with({dir / "src", dir / "storelink"}),
          std::vector<std::string>{"convert", dir / "good.db", dir / "victim", "--backend", backend,
                                   "--force"}}) {
      CliRun r = Dsfs(args);
      EXPECT_EQ(r.code, 1) << backend << " " << args[args.size() - 1] << ": " << r.err;
      EXPECT_EQ(LineCount(r.err), 1) << r.err;
      EXPECT_TRUE(r.err.find("--force replaces only a dsfs store") != std::string::npos ||
                  r.err.find("is the source itself") != std::string::npos)
          << r.err;
    }
  }
  EXPECT_EQ(testing::TreeListing(dir.path()), before);
  // What may be replaced: a store of either backend by either, a damaged store, an empty
  // directory.
  ::mkdir((dir / "empty").c_str(), 0755);
  for (const char* backend : {"rocksdb", "lmdb", "rocksdb"}) {
    CliRun r = Dsfs({"pack", "-q", "-f", "--backend", backend, dir / "src", dir / "good.db"});
    EXPECT_EQ(r.code, 0) << backend << r.err;
  }
  EXPECT_EQ(Dsfs({"pack", "-q", "-f", dir / "src", dir / "empty"}).code, 0);
  std::string bytes = ReadFile(dir / "empty");
  bytes[bytes.size() - 1] ^= 0x5a;
  WriteFile(dir / "empty", bytes);
  CliRun r = Dsfs({"pack", "-q", "-f", dir / "src", dir / "empty"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Dsfs({"verify", dir / "empty"}).code, 0);
  // A RocksDB store that no longer opens (a table file lost), but still has dsfs's header.
  ASSERT_EQ(Dsfs({"pack", "-q", "-f", "--backend", "rocksdb", dir / "src", dir / "good.db"}).code,
            0);
  for (const auto& e : std::filesystem::directory_iterator(dir / "good.db")) {
    if (e.path().extension() == ".sst" &&
        ReadFile(e.path().string()).find("DSFSTORE") == std::string::npos) {
      std::filesystem::remove(e.path());
      break;
    }
  }
  ASSERT_NE(Dsfs({"ls", dir / "good.db"}).code, 0);
  r = Dsfs({"pack", "-q", "-f", dir / "src", dir / "good.db"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// --force onto an empty directory that gets files while the store is written (a long pack,
// a user saving into it meanwhile): those files are never removed; the commit refuses.
TEST(CliUsageTest, ForceLeavesFilesPutInTheEmptyDirectoryMeanwhile) {
  TempDir dir;
  for (const char* backend : {"lmdb", "rocksdb"}) {
    const std::string dst = dir / (std::string("out-") + backend);
    ASSERT_EQ(::mkdir(dst.c_str(), 0755), 0);
    KvWriterOptions wo;
    wo.overwrite = true;
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(dst, backend, wo, &w).ok());
    ASSERT_TRUE(w->Put("k", "v").ok());
    WriteFile(dst + "/saved-meanwhile.txt", "precious");
    Status s = w->Commit();
    EXPECT_FALSE(s.ok()) << backend;
    EXPECT_NE(s.ToString().find("left as it is"), std::string::npos) << s.ToString();
    w.reset();
    EXPECT_EQ(ReadFile(dst + "/saved-meanwhile.txt"), "precious") << backend;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
    // Still empty at commit: replaced, by a file or a directory.
    std::filesystem::remove(dst + "/saved-meanwhile.txt");
    ASSERT_TRUE(NewKvWriter(dst, backend, wo, &w).ok());
    ASSERT_TRUE(w->Put("k", "v").ok());
    EXPECT_TRUE(w->Commit().ok()) << backend;
    w.reset();
    std::unique_ptr<KvReader> r;
    ASSERT_TRUE(OpenKvReader(dst, KvReaderOptions{}, &r).ok()) << backend;
  }
}

// A store's directory the user cannot write: one line naming the directory and the store,
// not the temporary file pack would have made there.
TEST(CliUsageTest, UnwritableStoreDirectoryIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (runs dsfs as nobody)";
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  ASSERT_EQ(::mkdir((dir / "ro").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir / "src").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir / "src/a.txt").c_str(), 0644), 0);
  for (const char* backend : {"lmdb", "rocksdb"}) {
    auto r = RunCommand({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         testing::DsfsBinary(), "pack", "-q", "--backend", backend, dir / "src",
                         dir / "ro/s.db"});
    EXPECT_EQ(r.exit_code, 1) << backend;
    EXPECT_EQ(r.err, "dsfs: error: " + (dir / "ro") + ": cannot create the store " +
                         (dir / "ro/s.db") + " there: Permission denied\n")
        << backend;
  }
}

// A dropped SSH session (SIGHUP) during a pack: as for Ctrl-C, nothing is left behind.
TEST(CliUsageTest, HangupDuringPackLeavesNothing) {
  TempDir dir;
  WriteFile(dir / "src/big", testing::RandomBytes(40 << 20, 5));
  // The pack must see SIGHUP as a session would send it, even when this test runs under nohup
  // (an ignored SIGHUP is inherited, and then the pack rightly runs on).
  struct sigaction dfl {
  }, old{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ASSERT_EQ(::sigaction(SIGHUP, &dfl, &old), 0);
  auto sh = testing::RunCommand({"sh", "-c",
                                 testing::DsfsBinary() + " pack -q -j 1 --level 19 " +
                                     (dir / "src") + " " + (dir / "s.db") +
                                     " & P=$!; sleep 1; kill -HUP $P; wait $P; echo rc=$?"});
  ::sigaction(SIGHUP, &old, nullptr);
  EXPECT_NE(sh.out.find("rc=1"), std::string::npos) << sh.out << sh.err;
  EXPECT_NE(sh.err.find("dsfs: error: interrupted"), std::string::npos) << sh.err;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find("s.db"), std::string::npos) << e.path();
  }
}

// DST inside SRC: the store does not hold its own temporary file (nor, with --force, the
// store it replaces).
TEST(CliUsageTest, PackLeavesOutTheStoreInsideItsSource) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  for (const char* backend : {"lmdb", "rocksdb"}) {
    const std::string dst = dir / (std::string("src/inner-") + backend + ".db");
    ASSERT_EQ(Dsfs({"pack", "-q", "--backend", backend, dir / "src", dst}).code, 0);
    ASSERT_EQ(Dsfs({"pack", "-q", "-f", "--backend", backend, dir / "src", dst}).code, 0);
    CliRun r = Dsfs({"ls", dst, "/"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find(std::string("inner-") + backend), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("a.txt"), std::string::npos) << r.out;
  }
}

// --dict-size is range-checked: a dictionary beyond 16M (here 1T) is one line, not a pack that
// holds sample files without bound.
TEST(CliUsageTest, PackBoundsTheDictionarySize) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  for (const char* size : {"1T", "16385K", "100"}) {
    CliRun r = Dsfs({"pack", "-q", "--dict-size", size, dir / "src", dir / "s.db"});
    EXPECT_EQ(r.code, 1) << size;
    EXPECT_NE(r.err.find("dictionary size must be"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "s.db"));
  }
  EXPECT_EQ(Dsfs({"pack", "-q", "--dict-size", "16M", dir / "src", dir / "s.db"}).code, 0);
}

// A RocksDB store that lost a table file: the error names the store and the real file
// (RocksDB itself names its legacy .ldb name, the last one it tried).
TEST(CliUsageTest, MissingTableFileOfARocksdbStoreIsNamed) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a");
  ASSERT_EQ(Dsfs({"pack", "-q", "--backend", "rocksdb", dir / "src", dir / "r.db"}).code, 0);
  std::string sst;
  for (const auto& e : std::filesystem::directory_iterator(dir / "r.db")) {
    if (e.path().extension() == ".sst") sst = e.path().filename().string();
  }
  ASSERT_FALSE(sst.empty());
  std::filesystem::remove(dir / ("r.db/" + sst));
  CliRun r = Dsfs({"ls", dir / "r.db", "/"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(sst), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir / "r.db"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".ldb"), std::string::npos) << r.err;
}

TEST(CliUsageTest, UnknownCommandsAndMissingStoreDirectoriesAreNamed) {
  TempDir dir;
  CliRun r = Dsfs({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "dsfs: error: unknown command 'frobnicate' (see dsfs --help)\n");
  WriteFile(dir / "src/a.txt", "a");
  r = Dsfs({"pack", dir / "src", dir / "missing/s.db"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "dsfs: error: " + (dir / "missing") +
                       ": No such file or directory (the store's directory)\n");
  // A tree with its own top-level .dsfs packs, with a line saying where it went.
  WriteFile(dir / "src/.dsfs/notes.txt", "n");
  std::string log = dir / "pack.log";
  ASSERT_TRUE(LogToFile(log).ok());
  r = Dsfs({"pack", "-q", dir / "src", dir / "s.db"});
  LogToStderr();
  EXPECT_EQ(r.code, 0) << r.err;
  std::string text = ReadFile(log);
  EXPECT_EQ(LineCount(text), 1) << text;
  EXPECT_NE(text.find("top-level .dsfs is hidden in mounts"), std::string::npos) << text;
  // Only an entry of the stored root counts: one deeper, or added under a prefix, says nothing;
  // an add whose tree puts one at the root says it once.
  int logs = 0;
  auto logged = [&](const std::vector<std::string>& args) {
    std::string file = dir / ("cmd" + std::to_string(logs++) + ".log");
    EXPECT_TRUE(LogToFile(file).ok());
    CliRun run = Dsfs(args);
    LogToStderr();
    EXPECT_EQ(run.code, 0) << run.err;
    return ReadFile(file);
  };
  WriteFile(dir / "deep/sub/.dsfs/x", "x");
  EXPECT_EQ(logged({"pack", "-q", dir / "deep", dir / "d.db"}), "");
  EXPECT_EQ(logged({"add", "-q", dir / "d.db", dir / "src", "--prefix", "under"}), "");
  text = logged({"add", "-q", dir / "d.db", dir / "src"});
  EXPECT_EQ(LineCount(text), 1) << text;
  EXPECT_NE(text.find("top-level .dsfs is hidden in mounts"), std::string::npos) << text;
}

// fstab and `mount -o` hand every filesystem the same generic options: the helper skips them.
TEST(FstabOptionsTest, GenericOptionsAreSkippedAndRwIsRefused) {
  MountConfig c;
  std::vector<std::string> ignored;
  ASSERT_TRUE(ParseFstabMountOptions(
                  "defaults,ro,noatime,cache_size=64M,nofail,_netdev,x-systemd.automount,"
                  "x-systemd.device-timeout=10,noauto,auto,user,users,nouser,nosuid,nodev,noexec,"
                  "exec,suid,dev,relatime,allow_other,comment=x,async",
                  false, &c, &ignored)
                  .ok());
  EXPECT_EQ(c.cache_bytes, 64u << 20);
  EXPECT_TRUE(c.fuse.allow_other);
  EXPECT_EQ(ignored.size(), 20u);
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "x-systemd.device-timeout=10"),
            ignored.end());
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "cache_size=64M"), ignored.end());

  for (const char* bad : {"remount", "bind", "bogus", "cache_size=lots", "rw=1"}) {
    MountConfig e;
    Status s = ParseFstabMountOptions(bad, false, &e, nullptr);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
  }
  // "rw" (fstab's defaults): passed over, the mount read-only all the same (the helper warns).
  for (const char* rw : {"rw", "ro,rw", "defaults,rw", "rw,cache_size=8M"}) {
    MountConfig e;
    ignored.clear();
    ASSERT_TRUE(ParseFstabMountOptions(rw, false, &e, &ignored).ok()) << rw;
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), "rw"), ignored.end()) << rw;
  }
  // mount -s (sloppy): unknown options are skipped, malformed known ones still fail.
  MountConfig s;
  ignored.clear();
  ASSERT_TRUE(ParseFstabMountOptions("bogus,threads=3,other=1", true, &s, &ignored).ok());
  EXPECT_EQ(s.fuse.session.threads, 3);
  EXPECT_EQ(ignored, (std::vector<std::string>{"bogus", "other=1"}));
  EXPECT_FALSE(ParseFstabMountOptions("threads=x", true, &s, nullptr).ok());
}

// mount(8) runs `mount.fuse.dsfs SOURCE MOUNTPOINT [-s] [-f] [-n] [-v] [-o OPTIONS]`.
TEST(MountHelperOptionsTest, ParsesTheArgvOfMount) {
  MountHelperArgs h;
  ASSERT_TRUE(ParseMountHelperArgs({"/data/s.db", "/mnt/ds", "-n", "-v", "-o",
                                    "ro,cache_size=8G,nofail", "-s", "-o", "threads=3"},
                                   &h)
                  .ok());
  EXPECT_EQ(h.config.store_path, "/data/s.db");
  EXPECT_EQ(h.config.mountpoint, "/mnt/ds");
  EXPECT_FALSE(h.config.foreground) << "the helper returns once the daemon serves";
  EXPECT_EQ(h.config.cache_bytes, 8ull << 30);
  EXPECT_EQ(h.config.fuse.session.threads, 3);
  EXPECT_TRUE(h.verbose);
  EXPECT_FALSE(h.fake);
  EXPECT_EQ(h.ignored, std::vector<std::string>{"nofail"});

  MountHelperArgs g;
  ASSERT_TRUE(
      ParseMountHelperArgs({"-nvf", "-t", "fuse.dsfs", "-oro,push=0", "s.db", "mnt"}, &g).ok());
  EXPECT_TRUE(g.fake);
  EXPECT_TRUE(g.verbose);
  EXPECT_EQ(g.config.push_bytes, 0u);
  EXPECT_EQ(g.config.store_path, "s.db");

  for (std::vector<std::string> bad :
       std::vector<std::vector<std::string>>{{"s.db"},
                                             {"s.db", "mnt", "extra"},
                                             {"s.db", "mnt", "-o"},
                                             {"s.db", "mnt", "-t", "ext4"},
                                             {"s.db", "mnt", "-N", "/proc/1/ns/mnt"},
                                             {"s.db", "mnt", "-x"},
                                             {"s.db", "mnt", "-o", "log_level=loud"}}) {
    MountHelperArgs e;
    EXPECT_FALSE(ParseMountHelperArgs(bad, &e).ok()) << ::testing::PrintToString(bad);
  }
}

TEST(MountHelperOptionsTest, ErrorsAreOneLineWithMountExitCodes) {
  TempDir dir;
  std::ostringstream out, err;
  EXPECT_EQ(MountHelperMain("mount.fuse.dsfs", {dir / "s.db", dir.path(), "-o", "rw=2"}, out, err),
            1);
  EXPECT_EQ(LineCount(err.str()), 1) << err.str();
  EXPECT_NE(err.str().find("dsfs: error: "), std::string::npos) << err.str();
  // A store that is not there: the mount itself fails (mount(8)'s code 32).
  std::ostringstream out2, err2;
  EXPECT_EQ(
      MountHelperMain("mount.fuse.dsfs", {dir / "missing.db", dir.path(), "-o", "ro"}, out2, err2),
      32);
  EXPECT_EQ(LineCount(err2.str()), 1) << err2.str();
  EXPECT_NE(err2.str().find("missing.db"), std::string::npos) << err2.str();
  // -f (fake): the arguments are checked, nothing is mounted.
  std::ostringstream out3, err3;
  EXPECT_EQ(
      MountHelperMain("mount.fuse.dsfs", {"-f", dir / "s.db", dir.path(), "-o", "ro"}, out3, err3),
      0);
  EXPECT_EQ(err3.str(), "");
  std::ostringstream out4, err4;
  EXPECT_EQ(MountHelperMain("mount.fuse.dsfs", {"--help"}, out4, err4), 0);
  EXPECT_NE(out4.str().find("usage: mount.fuse.dsfs STORE MOUNTPOINT"), std::string::npos);
  SetLogLevel("warn");
}

// The installed binary explains the service setup and every mount option.
TEST(HelpTest, HelpTellsHowToRunItAsAService) {
  CliRun r = Dsfs({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* needle : {"fuse.dsfs", "mount.fuse.dsfs", "dsfs@.service", "/etc/dsfs/",
                             "systemd-escape", "--log-level"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " not in:\n" << r.out;
  }
  r = Dsfs({"mount", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* needle :
       {"cache_size=", "push=",         "preload",          "threads=",    "timeout=",
        "zero_open=",  "os_readahead=", "allow_other",      "uid=N,gid=N", "umask=",
        "log_level=",  "log_file=",     "status_interval=", "debug",       "NOTIFY_SOCKET",
        "READY=1",     "STOPPING=1",    "SIGHUP",           "SIGTERM",     "fuse.dsfs"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " not in:\n" << r.out;
  }
}

// The commands of `dsfs --help` ("pack", ..., "cache ls", "cache gc"): each with its --help.
std::vector<std::vector<std::string>> EveryCommand() {
  std::vector<std::vector<std::string>> cmds;
  auto names = [](const std::string& help) {
    std::vector<std::string> found;
    std::istringstream in(help.substr(help.find("Subcommands:\n") + 13));
    std::string line;
    while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
      found.push_back(line.substr(2, line.find(' ', 2) - 2));
    }
    return found;
  };
  for (const std::string& cmd : names(Dsfs({"--help"}).out)) {
    cmds.push_back({cmd});
    if (cmd == "cache") {
      for (const std::string& sub : names(Dsfs({"cache", "--help"}).out))
        cmds.push_back({cmd, sub});
    }
  }
  return cmds;
}

// The nine lines on running dsfs as a service are dsfs's own help and mount's, not every
// command's.
TEST(HelpTest, OnlyDsfsAndMountHelpTellHowToRunItAsAService) {
  const auto cmds = EveryCommand();
  ASSERT_GE(cmds.size(), 14u);
  EXPECT_NE(Dsfs({"--help"}).out.find("Running as a service"), std::string::npos);
  for (auto cmd : cmds) {
    cmd.push_back("--help");
    CliRun r = Dsfs(cmd);
    EXPECT_EQ(r.code, 0) << Joined(cmd);
    EXPECT_EQ(r.out.find("Running as a service") != std::string::npos, cmd[0] == "mount")
        << Joined(cmd);
  }
}

// Every positional argument of every command says what it is (ls's STORE said only "TEXT").
TEST(HelpTest, EveryPositionalIsDescribed) {
  int seen = 0;
  for (auto cmd : EveryCommand()) {
    cmd.push_back("--help");
    const std::string help = Dsfs(cmd).out;
    const size_t at = help.find("Positionals:\n");
    if (at == std::string::npos) continue;
    std::istringstream in(help.substr(at + 13));
    std::string line;
    while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
      ++seen;
      // "  STORE TEXT REQUIRED  a store: ...": past the name and CLI11's upper-case type words,
      // a description in lower case.
      std::istringstream words(line);
      std::string name, word, rest;
      words >> name;
      bool described = false;
      while (words >> word) {
        if (std::any_of(word.begin(), word.end(), [](char c) { return std::islower(c); })) {
          described = true;
        }
      }
      EXPECT_TRUE(described) << Joined(cmd) << ": " << line;
    }
  }
  EXPECT_GE(seen, 20);
}

// dsfs help [COMMAND [SUBCOMMAND]] prints what --help does; a name that is no command is one
// line naming it.
TEST(HelpTest, HelpCommandPrintsTheCommandsHelp) {
  CliRun r = Dsfs({"help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, Dsfs({"--help"}).out);
  EXPECT_NE(r.out.find("dsfs help COMMAND"), std::string::npos) << r.out;
  for (auto cmd : EveryCommand()) {
    std::vector<std::string> help = {"help"};
    help.insert(help.end(), cmd.begin(), cmd.end());
    r = Dsfs(help);
    cmd.push_back("--help");
    EXPECT_EQ(r.code, 0) << Joined(help) << ": " << r.err;
    EXPECT_EQ(r.out, Dsfs(cmd).out) << Joined(help);
    EXPECT_NE(r.out.find("Usage: dsfs " + cmd[0]), std::string::npos) << r.out;
  }
  for (const auto& [args, line] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"help", "bogus"}, "dsfs: error: unknown command 'bogus' (see dsfs --help)\n"},
           {{"help", "cache", "bogus"},
            "dsfs: error: unknown command 'cache bogus' (see dsfs cache --help)\n"},
           {{"help", "ls", "x"}, "dsfs: error: unknown command 'ls x' (see dsfs ls --help)\n"},
           // Never an escape sequence to the terminal.
           {{"help", "\033[2J"}, "dsfs: error: unknown command '\\033[2J' (see dsfs --help)\n"},
           {{"\033[2J"}, "dsfs: error: unknown command '\\033[2J' (see dsfs --help)\n"}}) {
    r = Dsfs(args);
    EXPECT_EQ(r.code, 2) << Joined(args);
    EXPECT_EQ(r.err, line);
    EXPECT_EQ(r.out, "");
  }
}

// A name, option or argument with control characters, in any command's error: printed
// escaped, one line, no escape sequence or forged line reaches the terminal.
TEST(HelpTest, WhatTheUserTypedIsPrintedEscapedInErrors) {
  TempDir dir;
  WriteFile(dir / "src/a.txt", "alpha\n");
  const std::string store = dir / "b.dsfs";
  ASSERT_EQ(Dsfs({"pack", "-q", dir / "src", store}).code, 0);
  const std::string e = "x\033[31mR\nforged\a";
  const std::string mp = dir / "mnt";
  ::mkdir(mp.c_str(), 0755);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ls", e},
                                             {"ls", store, e},
                                             {"cat", store, e},
                                             {"info", store, e},
                                             {"mount", "-o", e + "=1", store, mp},
                                             {"mount", "-o", "cache_size=" + e, store, mp},
                                             {"mount", "-o", "view=" + e, store, mp},
                                             {"--log-level", e, "ls", store},
                                             {"mount", store, e},
                                             {"mount", "s3://" + e + "/x", mp},
                                             {"cache", "ls", e},
                                             {"pack", e, dir / "y.dsfs"},
                                             {"umount", e},
                                             {"stats", e}}) {
    CliRun r = Dsfs(args);
    EXPECT_NE(r.code, 0) << Joined(args);
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_EQ(r.err.find_first_of("\033\a\r"), std::string::npos) << Joined(args) << ": " << r.err;
    EXPECT_NE(r.err.find("x\\033[31mR\\012forged\\007"), std::string::npos)
        << Joined(args) << ": " << r.err;
  }
}

// A usage error points to the help of the command it is about.
TEST(HelpTest, UsageErrorsPointToTheCommandsHelp) {
  for (const auto& [args, line] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"mount"}, "dsfs: error: STORE is required (see dsfs mount --help)\n"},
           {{"ls"}, "dsfs: error: STORE is required (see dsfs ls --help)\n"},
           {{"cache", "gc", "--keep-days", "-1"}, "(see dsfs cache gc --help)\n"},
           {{"pack", "a", "b", "--bogus"}, "(see dsfs pack --help)\n"},
           {{"frobnicate"}, "dsfs: error: unknown command 'frobnicate' (see dsfs --help)\n"}}) {
    CliRun r = Dsfs(args);
    EXPECT_EQ(r.code, 2) << Joined(args);
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_TRUE(r.err.size() >= line.size() &&
                r.err.compare(r.err.size() - line.size(), line.size(), line) == 0)
        << r.err;
  }
}

// The mount options (as dsfs mount --help lists them), one per line "  name=...".
std::vector<std::string> HelpMountOptions() {
  const std::string help = Dsfs({"mount", "--help"}).out;
  std::istringstream in(help.substr(help.find("Mount options")));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
    if (line.size() < 3 || !std::islower(static_cast<unsigned char>(line[2]))) continue;
    std::string term = line.substr(2, line.find(' ', 2) - 2);  // uid=N,gid=N
    for (size_t pos = 0; pos <= term.size();) {
      size_t comma = std::min(term.find(',', pos), term.size());
      std::string item = term.substr(pos, comma - pos);
      names.push_back(item.substr(0, item.find_first_of("=[")));
      pos = comma + 1;
    }
  }
  return names;
}

// An unknown or malformed value says what is accepted: the mount options' names, how a size
// is written, the log levels.
TEST(HelpTest, ErrorsListWhatIsAccepted) {
  TempDir dir;
  const auto options = HelpMountOptions();
  ASSERT_GE(options.size(), 25u);
  CliRun r = Dsfs({"mount", "-o", "bogus=1", dir / "s.db", dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(LineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown mount option 'bogus=1'"), std::string::npos) << r.err;
  for (const std::string& name : options) {
    EXPECT_NE(r.err.find(" " + name + (name == "ro" ? ";" : ",")), std::string::npos)
        << name << " not in: " << r.err;
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"mount", "-o", "cache_size=lots", dir / "s.db", dir.path()},
           {"mount", "-o", "cache_disk=8Q", dir / "s.db", dir.path()},
           {"pack", "--dict-size", "lots", dir.path(), dir / "s.db"}}) {
    r = Dsfs(args);
    EXPECT_EQ(r.code, 2) << Joined(args);
    EXPECT_EQ(LineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("not a size"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("4096, 64K, 256KiB, 1M, 8G"), std::string::npos) << r.err;
  }
  r = Dsfs({"--log-level", "loud", "ls", dir / "s.db"});
  EXPECT_EQ(r.code, 2);
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"}) {
    EXPECT_NE(r.err.find(level), std::string::npos) << r.err;
  }
  SetLogLevel("warn");
}

// pack's (and the others') help says what -f and -q do: -f replaces only a store or an empty
// directory (ForceReplacesOnlyAStoreOrAnEmptyDirectory), -q prints nothing on success
// (QuietPrintsNothingOnSuccess).
TEST(HelpTest, ForceAndQuietSayWhatTheyDo) {
  auto option_line = [](const std::string& help, const std::string& flag) {
    size_t at = help.find("\n  " + flag);
    if (at == std::string::npos) return std::string();
    size_t end = help.find("\n  -", at + 1);
    return help.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  for (const char* cmd : {"pack", "convert"}) {
    const std::string force = option_line(Dsfs({cmd, "--help"}).out, "-f,--force");
    EXPECT_NE(force.find("a dsfs store or an empty directory"), std::string::npos) << force;
    EXPECT_EQ(force.find("overwrite"), std::string::npos) << force;
  }
  for (const char* cmd : {"pack", "add", "convert", "push", "verify", "warmup"}) {
    const std::string quiet = option_line(Dsfs({cmd, "--help"}).out, "-q,--quiet");
    EXPECT_NE(quiet.find("print nothing on success"), std::string::npos) << cmd << ": " << quiet;
  }
}

// The progress line (tools/progress.h) at made-up times: the rate from the bytes done since
// the rate started being measured, the time left from the bytes still to do.
TEST(ProgressTest, LineShowsRateAndTimeLeft) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "--");
  PackProgress p;
  p.phase = "compressing";
  p.files_total = 1000;
  p.bytes_total = 100000000;
  p.files_done = 300;
  p.bytes_done = 30000000;
  // 10 s after the rate started at 100 files and 10 MB: 20 files/s, 2 MB/s, 35 s left.
  std::string line = FormatProgress(p, 10.0, 100, 10000000);
  EXPECT_EQ(line,
            "compressing 300/1000 files  30.0 MB/100.0 MB  30.0%  20 files/s  2.0 MB/s  35s left")
      << line;
  // Nothing measured yet: no rate, the time left unknown.
  EXPECT_EQ(FormatProgress(p, 0.0, 300, 30000000),
            "compressing 300/1000 files  30.0 MB/100.0 MB  30.0%  -- left");
  // Done: nothing left, whatever the rate.
  p.phase = "finishing";
  p.files_done = 1000;
  p.bytes_done = p.bytes_total;
  EXPECT_NE(FormatProgress(p, 0.0, 1000, p.bytes_total).find("100.0%  0s left"), std::string::npos);
  // Without a byte total (convert of an unknown size): from the files.
  PackProgress q;
  q.phase = "copying";
  q.files_done = 50;
  q.files_total = 100;
  q.bytes_done = 5000;
  EXPECT_NE(FormatProgress(q, 5.0, 0, 0).find("10 files/s  1.0 kB/s  5s left"), std::string::npos)
      << FormatProgress(q, 5.0, 0, 0);
}

// Not on a terminal (the tests' streams): no progress line, the summary says how fast.
TEST_F(CliTest, AddAndConvertSummariesGiveTheRate) {
  // The fixture's store_ is packed from src/ already.
  WriteFile(dir_ / "extra/new.txt", "new");
  CliRun r = Dsfs({"add", store_, dir_ / "extra"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(LineCount(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("added 1 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" files/s"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
  r = Dsfs({"convert", store_, dir_ / "c.db", "--backend", "rocksdb"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(LineCount(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(" records, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" s, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("B/s"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

}  // namespace
}  // namespace dsfs
