// --json of dsfs ls, verify and cache ls (the schemas of docs/usage.md, "JSON output"): each
// document parses, has exactly the documented keys in order, and says what the text output
// says (the same entries, the same damaged files, the same caches).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/support/test_util.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

struct Output {
  int code;
  std::string out, err;
};

Output Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = DsfsMain(args, out, err);
  return {code, out.str(), err.str()};
}

std::vector<std::string> Keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

nlohmann::ordered_json Parse(const std::string& line) {
  auto j = nlohmann::ordered_json::parse(line, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << line;
  return j;
}

class JsonOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    WriteFile(src_ + "/d/a.txt", TextBytes(5000, 1), 0640);
    for (int i = 0; i < 20; ++i) WriteFile(src_ + "/d/f" + std::to_string(i), RandomBytes(3000, i));
    MakeDir(src_ + "/empty");
    ASSERT_EQ(::symlink("d/a.txt", (src_ + "/link").c_str()), 0);
    store_ = dir_ / "s.db";
    ASSERT_EQ(Cli({"pack", "-q", src_, store_, "--group-size", "4K"}).code, 0);
  }
  TempDir dir_;
  std::string src_, store_;
};

TEST_F(JsonOutputTest, LsOneObjectPerEntry) {
  Output r = Cli({"ls", "--json", "-R", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> paths;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = Parse(line);
    const std::vector<std::string> keys = {"path", "type",         "mode",
                                           "size", "mtime_unix_s", "mtime_ns"};
    std::vector<std::string> want = keys;
    if (j["type"] == "symlink") want.push_back("target");
    EXPECT_EQ(Keys(j), want) << line;
    paths.insert(j["path"].get<std::string>());
    if (j["path"] == "/d/a.txt") {
      EXPECT_EQ(j["type"], "file");
      EXPECT_EQ(j["mode"], "0640");
      EXPECT_EQ(j["size"], 5000);
      struct stat st;
      ASSERT_EQ(::stat((src_ + "/d/a.txt").c_str(), &st), 0);
      EXPECT_EQ(j["mtime_unix_s"], st.st_mtim.tv_sec);
      EXPECT_EQ(j["mtime_ns"], st.st_mtim.tv_nsec);
    }
    if (j["path"] == "/link") EXPECT_EQ(j["target"], "d/a.txt");
    if (j["path"] == "/empty") EXPECT_EQ(j["type"], "directory");
  }
  EXPECT_EQ(paths.size(), 24u);  // d, 21 files, empty, link
  // One path: that entry alone.
  r = Cli({"ls", "--json", store_, "d/a.txt"});
  ASSERT_EQ(LineCount(r.out), 1) << r.out;
  EXPECT_EQ(Parse(r.out)["path"], "/d/a.txt");
}

TEST_F(JsonOutputTest, VerifyCountsAndNamesTheDamagedFiles) {
  Output r = Cli({"verify", "--json", store_});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(LineCount(r.out), 1) << r.out;
  auto j = Parse(r.out);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"store", "ok", "metadata_ok", "files", "bytes",
                                               "damaged", "damaged_files"}));
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["files"], 21);
  EXPECT_EQ(j["damaged"], 0);
  // Damaged: the same files the text output calls BAD.
  const std::string target = PayloadFile(store_);
  std::string bytes = ReadFile(target);
  bool checked = false;
  for (int t = 0; t < 16 && !checked; ++t) {
    std::string damaged = bytes;
    damaged[damaged.size() * t / 16 + 11] ^= 0x10;
    WriteFile(target, damaged);
    Output text = Cli({"verify", store_});
    if (text.out.find("BAD /") == std::string::npos ||
        text.out.find("BAD metadata") != std::string::npos) {
      continue;
    }
    Output js = Cli({"verify", "--json", store_});
    EXPECT_EQ(js.code, 1);
    auto d = Parse(js.out);
    EXPECT_EQ(d["ok"], false);
    std::set<std::string> named, listed;
    for (const std::string& line : LinesWith(text.out, "BAD /")) {
      named.insert(line.substr(4, line.find(": ") - 4));
    }
    for (const auto& f : d["damaged_files"]) {
      EXPECT_EQ(Keys(f), (std::vector<std::string>{"path", "error"}));
      listed.insert(f["path"].get<std::string>());
    }
    EXPECT_EQ(listed, named);
    EXPECT_EQ(d["damaged"], named.size());
    checked = true;
  }
  WriteFile(target, bytes);
  EXPECT_TRUE(checked) << "no trial damaged a file";
}

TEST_F(JsonOutputTest, CacheLsListsTheCaches) {
  const std::string cache = dir_ / "cache", c = cache + "/s3-00000000000000aa";
  MakeDir(cache, 0700);
  Output r = Cli({"cache", "ls", "--json", cache});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = Parse(r.out);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"dir", "caches", "total_bytes"}));
  EXPECT_TRUE(j["caches"].empty());
  WriteFile(c + "/meta", "url=s3://bucket/x\nendpoint=http://127.0.0.1:1\nid=1111111111111111\n");
  WriteFile(c + "/lock", "");
  WriteFile(c + "/index", "index bytes");
  WriteFile(c + "/1111111111111111/000000", std::string(8192, 'x'));
  r = Cli({"cache", "ls", "--json", cache});
  ASSERT_EQ(r.code, 0) << r.err;
  j = Parse(r.out);
  ASSERT_EQ(j["caches"].size(), 1u) << r.out;
  const auto& e = j["caches"][0];
  EXPECT_EQ(Keys(e), (std::vector<std::string>{"name", "url", "endpoint", "identity", "bytes",
                                               "last_use_unix_s", "mounted", "stale_stores"}));
  EXPECT_EQ(e["url"], "s3://bucket/x");
  EXPECT_EQ(e["identity"], "1111111111111111");
  EXPECT_EQ(e["mounted"], false);
  EXPECT_GE(e["bytes"].get<uint64_t>(), 8192u);
  EXPECT_EQ(j["total_bytes"], e["bytes"]);
}

}  // namespace
}  // namespace dsfs::testing
