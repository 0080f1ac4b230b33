#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "backend/kv_open.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::DirNames;
using testing::RandomBytes;
using testing::TempDir;
using testing::WriteFile;

Status WriteStore(const std::string& path, const std::map<std::string, std::string>& kv,
                  bool overwrite = false) {
  return testing::WriteRecords(
      [&](const KvWriterOptions& o, std::unique_ptr<KvWriter>* w) {
        return NewKvWriter(path, "lmdb", o, w);
      },
      kv, overwrite);
}

TEST(LmdbTest, RoundTripGetAndSeek) {
  TempDir dir;
  std::map<std::string, std::string> kv = {
      {"a", "1"}, {"b", std::string(100000, 'x')}, {"d", RandomBytes(3000, 1)}, {"e", ""}};
  ASSERT_TRUE(WriteStore(dir / "s.db", kv).ok());
  EXPECT_EQ(DirNames(dir.path()), std::vector<std::string>{"s.db"});  // one file, no lock file
  std::string backend;
  ASSERT_TRUE(DetectBackend(dir / "s.db", &backend).ok());
  ASSERT_EQ(backend, "lmdb");
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir / "s.db", KvReaderOptions{}, &r).ok());
  EXPECT_EQ(r->Name(), "lmdb");
  for (const auto& [k, v] : kv) {
    PinnedValue pv;
    ASSERT_TRUE(r->Get(k, &pv).ok());
    EXPECT_EQ(pv.data(), v);
    EXPECT_TRUE(pv.stable());
  }
  PinnedValue pv;
  EXPECT_TRUE(r->Get("c", &pv).IsNotFound());
  std::string key;
  ASSERT_TRUE(r->Seek("c", &key, &pv).ok());
  EXPECT_EQ(key, "d");
  ASSERT_TRUE(r->Seek("a", &key, &pv).ok());
  EXPECT_EQ(key, "a");
  EXPECT_TRUE(r->Seek("f", &key, &pv).IsNotFound());
  EXPECT_EQ(DirNames(dir.path()), std::vector<std::string>{"s.db"});  // serving adds no lock file
}

TEST(LmdbTest, ReleasingMappedPagesKeepsValuesValid) {
  TempDir dir;
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 64; ++i) kv["k" + std::to_string(100 + i)] = RandomBytes(100000, i);
  ASSERT_TRUE(WriteStore(dir / "s.db", kv).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir / "s.db", KvReaderOptions{}, &r).ok());
  std::vector<PinnedValue> held(kv.size());
  size_t i = 0;
  for (const auto& [k, v] : kv) ASSERT_TRUE(r->Get(k, &held[i++]).ok());
  auto rss_kb = [] {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
    }
    return -1L;
  };
  size_t touched = 0;  // fault the values in
  for (const auto& v : held) touched += std::count(v.data().begin(), v.data().end(), 'x');
  long before = rss_kb();
  r->ReleaseCachedMemory();
  long after = rss_kb();
  EXPECT_LT(after, before - 4000) << "6.4 MB of mapped values should leave RSS";
  i = 0;
  for (const auto& [k, v] : kv) EXPECT_EQ(held[i++].data(), v);  // faults back in
  EXPECT_GT(touched, 0u);
}

TEST(LmdbTest, ReadOnlyMediaNeedsNoWriteAccess) {
  TempDir dir;
  ASSERT_TRUE(WriteStore(dir / "s.db", {{"k", "v"}}).ok());
  ASSERT_EQ(::chmod((dir / "s.db").c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  std::unique_ptr<KvReader> r;
  EXPECT_TRUE(OpenKvReader(dir / "s.db", KvReaderOptions{}, &r).ok());
  ::chmod(dir.path().c_str(), 0755);
}

TEST(LmdbTest, ConcurrentThreadsEachGetTheirOwnTransaction) {
  TempDir dir;
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 1000; ++i) kv["k" + std::to_string(10000 + i)] = std::to_string(i);
  ASSERT_TRUE(WriteStore(dir / "s.db", kv).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir / "s.db", KvReaderOptions{}, &r).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (const auto& [k, v] : kv) {
        PinnedValue pv;
        if (!r->Get(k, &pv).ok() || pv.data() != v) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(LmdbTest, RefusesToOverwriteWithoutForce) {
  TempDir dir;
  ASSERT_TRUE(WriteStore(dir / "s.db", {{"k", "old"}}).ok());
  Status s = WriteStore(dir / "s.db", {{"k", "new"}});
  EXPECT_EQ(s.code(), Status::Code::kExists);
  EXPECT_NE(s.message().find("--force"), std::string::npos);
  ASSERT_TRUE(WriteStore(dir / "s.db", {{"k", "new"}}, true).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir / "s.db", KvReaderOptions{}, &r).ok());
  PinnedValue pv;
  ASSERT_TRUE(r->Get("k", &pv).ok());
  EXPECT_EQ(pv.data(), "new");
}

TEST(LmdbTest, AbandonedWriterLeavesNothing) {
  TempDir dir;
  {
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(dir / "s.db", "lmdb", KvWriterOptions{}, &w).ok());
    ASSERT_TRUE(w->Put("k", "v").ok());
  }
  EXPECT_TRUE(DirNames(dir.path()).empty());
}

TEST(LmdbTest, MissingNotAStoreAndTruncated) {
  TempDir dir;
  std::unique_ptr<KvReader> r;
  EXPECT_TRUE(OpenKvReader(dir / "nope.db", KvReaderOptions{}, &r).IsNotFound());
  WriteFile(dir / "text.db", "just some text, not a store at all");
  Status s = OpenKvReader(dir / "text.db", KvReaderOptions{}, &r);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a dsfs store"), std::string::npos);
  WriteFile(dir / "empty.db", "");
  EXPECT_EQ(OpenKvReader(dir / "empty.db", KvReaderOptions{}, &r).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(OpenKvReader(dir.path(), KvReaderOptions{}, &r).code(), Status::Code::kInvalidArgument);

  std::map<std::string, std::string> kv;
  for (int i = 0; i < 50; ++i) kv["k" + std::to_string(i)] = RandomBytes(10000, i);
  ASSERT_TRUE(WriteStore(dir / "s.db", kv).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir / "s.db").c_str(), &st), 0);
  ASSERT_EQ(::truncate((dir / "s.db").c_str(), st.st_size / 2), 0);
  s = OpenKvReader(dir / "s.db", KvReaderOptions{}, &r);
  EXPECT_TRUE(s.IsCorruption()) << s.message();
  EXPECT_NE(s.message().find("truncated"), std::string::npos);
}

TEST(LmdbTest, NoSpaceIsACleanErrorAndLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  TempDir dir;
  std::string small = dir / "small";
  ::mkdir(small.c_str(), 0755);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount tmpfs here";
  }
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 40; ++i) kv["k" + std::to_string(i)] = RandomBytes(100000, i);
  Status s = WriteStore(small + "/s.db", kv);
  EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.message();
  EXPECT_NE(s.message().find("no space"), std::string::npos);
  EXPECT_TRUE(DirNames(small).empty());
  ::umount(small.c_str());
}

}  // namespace
}  // namespace dsfs
