// The key-value contract, run against every on-disk backend (LMDB, RocksDB).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

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

class KvBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  Status Write(const std::string& path, const std::map<std::string, std::string>& kv,
               bool overwrite = false) {
    return testing::WriteRecords(
        [&](const KvWriterOptions& o, std::unique_ptr<KvWriter>* w) {
          return NewKvWriter(path, GetParam(), o, w);
        },
        kv, overwrite);
  }
  std::map<std::string, std::string> ReadAll(KvReader* r) {
    std::map<std::string, std::string> all;
    EXPECT_TRUE(ForEachRecord(r, "", [&](std::string_view k, std::string_view v) {
                  all[std::string(k)] = std::string(v);
                  return Status::OK();
                }).ok());
    return all;
  }
  TempDir dir_;
};

TEST_P(KvBackendTest, RoundTripGetSeekAndDetection) {
  // Keys in the order the packer writes them: payload and pixel groups interleaved, then the
  // metadata keys out of order.
  std::map<std::string, std::string> kv;
  std::vector<std::pair<std::string, std::string>> order = {{"P1", RandomBytes(70000, 1)},
                                                            {"Q1", "pix"},
                                                            {"P2", ""},
                                                            {"Q2", std::string(5000, 'q')},
                                                            {"L", "layout"},
                                                            {"I", "inodes"},
                                                            {"I.sum", "s"},
                                                            {"N", "names"},
                                                            {"Z", "dict"},
                                                            {"H", "header"}};
  std::unique_ptr<KvWriter> w;
  ASSERT_TRUE(NewKvWriter(dir_ / "s.db", GetParam(), KvWriterOptions{}, &w).ok());
  for (const auto& [k, v] : order) {
    ASSERT_TRUE(w->Put(k, v).ok());
    kv[k] = v;
  }
  ASSERT_TRUE(w->Commit().ok());
  w.reset();
  EXPECT_EQ(DirNames(dir_.path()), std::vector<std::string>{"s.db"});  // nothing left over
  std::string backend;
  ASSERT_TRUE(DetectBackend(dir_ / "s.db", &backend).ok());
  EXPECT_EQ(backend, GetParam());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
  EXPECT_EQ(r->Name(), GetParam());
  for (const auto& [k, v] : kv) {
    PinnedValue pv;
    ASSERT_TRUE(r->Get(k, &pv).ok()) << k;
    EXPECT_EQ(pv.data(), v) << k;
  }
  PinnedValue pv;
  EXPECT_TRUE(r->Get("P3", &pv).IsNotFound());
  std::string key;
  ASSERT_TRUE(r->Seek("P15", &key, &pv).ok());
  EXPECT_EQ(key, "P2");
  // A value found by Seek stays valid while later seeks of the same thread move on.
  PinnedValue first;
  ASSERT_TRUE(r->Seek("P0", &key, &first).ok());
  ASSERT_TRUE(r->Seek("Q", &key, &pv).ok());
  EXPECT_EQ(key, "Q1");
  EXPECT_EQ(first.data(), kv["P1"]);
  EXPECT_TRUE(r->Seek("ZZ", &key, &pv).IsNotFound());
  EXPECT_EQ(ReadAll(r.get()), kv);
}

TEST_P(KvBackendTest, LargeValuesAndReleasingMappedPages) {
  // A metadata-sized value (most of its table file: RocksDB reads the file ahead first) next
  // to payload keys; reading it maps its pages into this process, and ReleaseCachedMemory
  // gives them back (RSS) while the value stays readable.
  std::map<std::string, std::string> kv = {{"H", "header"},
                                           {"I", RandomBytes(8 << 20, 5)},
                                           {"N", RandomBytes(3 << 20, 6)},
                                           {"P1", RandomBytes(70000, 7)}};
  ASSERT_TRUE(Write(dir_ / "s.db", kv).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
  auto rss_file_kb = [] {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
    }
    return -1L;
  };
  PinnedValue inodes, names;
  ASSERT_TRUE(r->Get("I", &inodes).ok());
  ASSERT_TRUE(r->Get("N", &names).ok());
  ASSERT_EQ(inodes.data(), kv["I"]);
  ASSERT_EQ(names.data(), kv["N"]);
  long before = rss_file_kb();
  r->ReleaseCachedMemory();
  long after = rss_file_kb();
  // RocksDB reads its blocks with pread (a store rewritten under a mount must not SIGBUS it:
  // docs/hardening.md), so its values are not mapped pages of the file.
  if (GetParam() != "rocksdb") {
    EXPECT_LT(after, before - 8000) << "11 MB of mapped values should leave RSS";
  }
  EXPECT_EQ(inodes.data(), kv["I"]);  // faults back in
  EXPECT_EQ(names.data(), kv["N"]);
  EXPECT_EQ(ReadAll(r.get()), kv);
}

TEST_P(KvBackendTest, ConcurrentThreadsSeeTheSameValues) {
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 500; ++i) kv["P" + std::to_string(10000 + i)] = RandomBytes(3000, i);
  ASSERT_TRUE(Write(dir_ / "s.db", kv).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      std::string key;
      for (const auto& [k, v] : kv) {
        PinnedValue a, b;
        if (!r->Get(k, &a).ok() || a.data() != v) ++bad;
        if (!r->Seek(k, &key, &b).ok() || key != k || b.data() != v) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(KvBackendTest, OverwriteNeedsForceAndAbandonedWriterLeavesNothing) {
  ASSERT_TRUE(Write(dir_ / "s.db", {{"k", "old"}}).ok());
  Status s = Write(dir_ / "s.db", {{"k", "new"}});
  EXPECT_EQ(s.code(), Status::Code::kExists) << s.message();
  EXPECT_NE(s.message().find("--force"), std::string::npos);
  ASSERT_TRUE(Write(dir_ / "s.db", {{"k", "new"}}, true).ok());
  std::unique_ptr<KvReader> r;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
  PinnedValue pv;
  ASSERT_TRUE(r->Get("k", &pv).ok());
  EXPECT_EQ(pv.data(), "new");
  r.reset();
  {
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(dir_ / "t.db", GetParam(), KvWriterOptions{}, &w).ok());
    ASSERT_TRUE(w->Put("k", "v").ok());
  }
  EXPECT_EQ(DirNames(dir_.path()), std::vector<std::string>{"s.db"});
}

TEST_P(KvBackendTest, UpdateIsAtomicAndOpenReadersKeepTheirVersion) {
  ASSERT_TRUE(Write(dir_ / "s.db", {{"H", "v1"}, {"P1", "a"}, {"P2", "b"}}).ok());
  std::unique_ptr<KvReader> before;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &before).ok());
  auto old_all = ReadAll(before.get());
  {
    std::unique_ptr<KvWriter> u;
    ASSERT_TRUE(NewKvUpdater(dir_ / "s.db", &u).ok());
    // One updater at a time.
    std::unique_ptr<KvWriter> second;
    Status s = NewKvUpdater(dir_ / "s.db", &second);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("another process"), std::string::npos) << s.message();
    ASSERT_TRUE(u->Put("P3", "c").ok());
    ASSERT_TRUE(u->Put("H", "v2").ok());
    // Nothing is visible before Commit.
    std::unique_ptr<KvReader> during;
    ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &during).ok());
    EXPECT_EQ(ReadAll(during.get()), old_all);
    ASSERT_TRUE(u->Commit().ok());
  }
  // The reader opened before still sees the old version, with its values intact.
  EXPECT_EQ(ReadAll(before.get()), old_all);
  std::unique_ptr<KvReader> after;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &after).ok());
  std::map<std::string, std::string> want = {{"H", "v2"}, {"P1", "a"}, {"P2", "b"}, {"P3", "c"}};
  EXPECT_EQ(ReadAll(after.get()), want);
  // An abandoned update changes nothing and leaves nothing next to the store.
  {
    std::unique_ptr<KvWriter> u;
    ASSERT_TRUE(NewKvUpdater(dir_ / "s.db", &u).ok());
    ASSERT_TRUE(u->Put("P4", "d").ok());
  }
  std::unique_ptr<KvReader> again;
  ASSERT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &again).ok());
  EXPECT_EQ(ReadAll(again.get()), want);
  EXPECT_EQ(DirNames(dir_.path()), std::vector<std::string>{"s.db"});
}

TEST_P(KvBackendTest, ReadOnlyMediaNeedsNoWriteAccess) {
  ASSERT_TRUE(Write(dir_ / "s.db", {{"k", "v"}}).ok());
  ASSERT_EQ(::system(("chmod -R a-w " + dir_.path()).c_str()), 0);
  if (::geteuid() == 0) {
    // root ignores permission bits: make the directory really read-only with a bind mount.
    std::string ro = dir_ / "ro";
    ASSERT_EQ(::system(("chmod u+w " + dir_.path() + " && mkdir " + ro).c_str()), 0);
    if (::mount(dir_.path().c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      ::umount(ro.c_str());
      GTEST_SKIP() << "cannot make a read-only bind mount here";
    }
    std::unique_ptr<KvReader> r;
    Status s = OpenKvReader(ro + "/s.db", KvReaderOptions{}, &r);
    EXPECT_TRUE(s.ok()) << s.message();
    PinnedValue pv;
    if (r) {
      EXPECT_TRUE(r->Get("k", &pv).ok());
    }
    r.reset();
    ::umount(ro.c_str());
  } else {
    std::unique_ptr<KvReader> r;
    EXPECT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
  }
  ASSERT_EQ(::system(("chmod -R u+w " + dir_.path()).c_str()), 0);
}

TEST_P(KvBackendTest, NoSpaceIsACleanErrorAndLeavesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  std::string small = dir_ / "small";
  ::mkdir(small.c_str(), 0755);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount tmpfs here";
  }
  std::map<std::string, std::string> kv;
  for (int i = 0; i < 40; ++i) kv["P" + std::to_string(100 + i)] = RandomBytes(100000, i);
  Status s = Write(small + "/s.db", kv);
  EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.message();
  EXPECT_NE(s.message().find("no space"), std::string::npos) << s.message();
  EXPECT_TRUE(DirNames(small).empty());
  ::umount(small.c_str());
}

TEST(KvRocksdbLayoutTest, EveryLayoutIsAValidStoreReadLikeAnyOther) {
  // bench/rocksdb_options_bench.py writes stores of other table layouts
  // (bench/tools/tuned_pack.cc): each reads back, through the one reader dsfs has, exactly as it
  // was written.
  std::vector<KvWriterOptions::RocksdbLayout> layouts(4);
  layouts[1].block_bytes = 16384;
  layouts[2].zstd_blocks = true;
#if !defined(__SANITIZE_THREAD__)
  // The system's librocksdb is not built with ThreadSanitizer, which then reports its bloom
  // filter code as racing with dsfs's (instrumented) copies of the keys.
  layouts[3].bloom_bits = 10;
#endif
  std::map<std::string, std::string> kv = {{"H", "header"},
                                           {"P1", RandomBytes(70000, 1)},
                                           {"P2", std::string(9000, 'p')},
                                           {"Q1", RandomBytes(300, 2)}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    TempDir dir;
    KvWriterOptions o;
    o.rocksdb = layouts[i];
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(dir / "s.rdb", "rocksdb", o, &w).ok());
    for (const auto& [k, v] : kv) ASSERT_TRUE(w->Put(k, v).ok());
    ASSERT_TRUE(w->Commit().ok()) << i;
    w.reset();
    std::unique_ptr<KvReader> r;
    ASSERT_TRUE(OpenKvReader(dir / "s.rdb", KvReaderOptions{}, &r).ok()) << i;
    std::map<std::string, std::string> all;
    ASSERT_TRUE(ForEachRecord(r.get(), "", [&](std::string_view k, std::string_view v) {
                  all[std::string(k)] = std::string(v);
                  return Status::OK();
                }).ok());
    EXPECT_EQ(all, kv) << "layout " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KvBackendTest, ::testing::Values("lmdb", "rocksdb"),
                         [](const auto& info) { return info.param; });

// The value layout each writer reports (KvWriter::value_sizing): LMDB (and its updater)
// stores large values on whole 4 KiB pages with a 16-byte header; RocksDB packs them. Store
// layouts depend on it (solid groups fill their last page): it must not change unnoticed.
TEST(KvValueSizingTest, LmdbStoresValuesOnPagesRocksdbPacksThem) {
  TempDir dir;
  std::unique_ptr<KvWriter> w;
  ASSERT_TRUE(NewKvWriter(dir / "l.db", "lmdb", KvWriterOptions{}, &w).ok());
  const ValueSizing lmdb = w->value_sizing();
  EXPECT_EQ(lmdb.page_bytes, 4096u);
  EXPECT_EQ(lmdb.page_header_bytes, 16u);
  EXPECT_EQ(BackendValueSizing("lmdb").page_bytes, lmdb.page_bytes);  // what mem_store mimics
  ASSERT_TRUE(w->Commit().ok());
  ASSERT_TRUE(NewKvUpdater(dir / "l.db", &w).ok());
  EXPECT_EQ(w->value_sizing().page_bytes, lmdb.page_bytes);
  w.reset();
  EXPECT_EQ(lmdb.Footprint(4096 - 16), 4096u);
  EXPECT_EQ(lmdb.Footprint(4096 - 15), 8192u);
  EXPECT_EQ(lmdb.Footprint(1), 4096u);
  ASSERT_TRUE(NewKvWriter(dir / "r.db", "rocksdb", KvWriterOptions{}, &w).ok());
  EXPECT_EQ(w->value_sizing().page_bytes, 0u);
  EXPECT_EQ(w->value_sizing().Footprint(12345), 12345u);
}

TEST(KvFactoryTest, UnknownBackendAndNotAStore) {
  TempDir dir;
  std::unique_ptr<KvWriter> w;
  Status s = NewKvWriter(dir / "s.db", "leveldb", KvWriterOptions{}, &w);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("lmdb, rocksdb"), std::string::npos);
  std::string backend;
  EXPECT_TRUE(DetectBackend(dir / "missing", &backend).IsNotFound());
  EXPECT_EQ(DetectBackend(dir.path(), &backend).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NewKvUpdater(dir.path(), &w).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace dsfs
