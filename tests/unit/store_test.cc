#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader: the kernel frames' window
#include "store/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "cache/byte_cache.h"
#include "fs/filesystem.h"
#include "pack/packer.h"
#include "store/codec.h"
#include "tests/support/fakes/faulty_store.h"
#include "tests/support/fakes/mem_store.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::PackToMemory;
using testing::RandomBytes;
using testing::TempDir;
using testing::TextBytes;
using testing::WriteFile;

// Every store test runs on each backend: the in-memory one (faults are injected over it and
// over the others through NewFaultyReader) and stores packed to LMDB and RocksDB.
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/b.txt", "bee");
    WriteFile(dir_ / "src/a.txt", "alpha");
    WriteFile(dir_ / "src/empty", "");
    WriteFile(dir_ / "src/sub/deep/x.bin", RandomBytes(50000, 1));
    WriteFile(dir_ / "src/sub/text.txt", TextBytes(20000, 2));
    ::mkdir((dir_ / "src/void").c_str(), 0700);
    ASSERT_EQ(::symlink("sub/text.txt", (dir_ / "src/link").c_str()), 0);
    for (int i = 0; i < 300; ++i) {
      WriteFile(dir_ / ("src/many/f" + std::to_string(i)), "file number " + std::to_string(i));
    }
    options_.chunk_bytes = 4096;  // many chunks, so reads cross chunk boundaries
    options_.group_bytes = 4096;  // many solid groups, so damage to one spares the others
    options_.dict_bytes = 4096;
    ASSERT_TRUE(PackToMemory(dir_ / "src", options_, &table_, &store_).ok());
    if (GetParam() != "memory") {
      ASSERT_TRUE(
          testing::PackToBackend(dir_ / "src", options_, GetParam(), dir_ / "s.db", &store_).ok());
      EXPECT_EQ(store_->backend_name(), GetParam());
    }
  }

  // A fresh reader of this test's store (packing is deterministic: the memory table holds the
  // same records as the store files, so tests find keys there).
  std::unique_ptr<KvReader> Reader() {
    if (GetParam() == "memory") return NewMemReader(table_);
    std::unique_ptr<KvReader> r;
    EXPECT_TRUE(OpenKvReader(dir_ / "s.db", KvReaderOptions{}, &r).ok());
    return r;
  }

  std::string ReadAll(const std::string& path) {
    uint32_t ino;
    InodeRecord rec;
    EXPECT_TRUE(store_->LookupPath(path, &ino, &rec).ok()) << path;
    ReadBuffer buf;
    std::string_view out;
    EXPECT_TRUE(store_->Read(rec, 0, rec.size + 10, &buf, &out).ok());
    return std::string(out);
  }

  TempDir dir_;
  PackOptions options_;
  std::shared_ptr<MemTable> table_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, HeaderCounts) {
  const StoreHeader& h = store_->header();
  EXPECT_EQ(h.file_count, 305u);
  EXPECT_EQ(h.dir_count, 5u);  // root, sub, sub/deep, void, many
  EXPECT_EQ(h.symlink_count, 1u);
  EXPECT_EQ(h.inode_count, 311u);
}

TEST_P(StoreTest, ListingIsSortedAndComplete) {
  InodeRecord root;
  ASSERT_TRUE(store_->GetInode(Store::kRootIno, &root).ok());
  uint32_t first, count;
  ASSERT_TRUE(store_->DirEntries(Store::kRootIno, root, &first, &count).ok());
  std::vector<std::string> names;
  for (uint32_t i = 0; i < count; ++i) {
    InodeRecord r;
    std::string_view n;
    ASSERT_TRUE(store_->GetInode(first + i, &r).ok());
    ASSERT_TRUE(store_->GetName(r, &n).ok());
    EXPECT_EQ(r.parent, Store::kRootIno);
    names.emplace_back(n);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"a.txt", "b.txt", "empty", "link", "many", "sub", "void"}));
}

TEST_P(StoreTest, LookupEveryFileInLargeDirectory) {
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(ReadAll("many/f" + std::to_string(i)), "file number " + std::to_string(i));
  }
  uint32_t ino;
  InodeRecord rec;
  EXPECT_TRUE(store_->LookupPath("many/f300", &ino, &rec).IsNotFound());
  EXPECT_TRUE(store_->LookupPath("many/f", &ino, &rec).IsNotFound());
  EXPECT_TRUE(store_->LookupPath("a.txt/x", &ino, &rec).code() == Status::Code::kInvalidArgument);
}

TEST_P(StoreTest, ContentsAndRanges) {
  EXPECT_EQ(ReadAll("/a.txt"), "alpha");
  EXPECT_EQ(ReadAll("empty"), "");
  std::string big = RandomBytes(50000, 1);
  EXPECT_EQ(ReadAll("sub/deep/x.bin"), big);
  EXPECT_EQ(ReadAll("sub/text.txt"), TextBytes(20000, 2));
  uint32_t ino;
  InodeRecord rec;
  ASSERT_TRUE(store_->LookupPath("sub/deep/x.bin", &ino, &rec).ok());
  ReadBuffer buf;
  std::string_view out;
  for (uint64_t off : {0ull, 1ull, 4095ull, 4096ull, 12000ull, 49999ull, 50000ull, 60000ull}) {
    for (uint64_t len : {1ull, 100ull, 4096ull, 10000ull}) {
      ASSERT_TRUE(store_->Read(rec, off, len, &buf, &out).ok());
      EXPECT_EQ(std::string(out), off < big.size() ? big.substr(off, len) : "")
          << off << "+" << len;
    }
  }
}

TEST_P(StoreTest, SymlinksAndDirectories) {
  uint32_t ino;
  InodeRecord rec;
  ASSERT_TRUE(store_->LookupPath("link", &ino, &rec).ok());
  EXPECT_TRUE(IsLink(rec));
  std::string_view target;
  ASSERT_TRUE(store_->ReadLink(rec, &target).ok());
  EXPECT_EQ(target, "sub/text.txt");
  ASSERT_TRUE(store_->LookupPath("void", &ino, &rec).ok());
  EXPECT_TRUE(IsDir(rec));
  EXPECT_EQ(rec.mode & 07777, 0700u);
  EXPECT_EQ(rec.size, 0u);
  ASSERT_TRUE(store_->LookupPath("sub/deep/..", &ino, &rec).ok());
  std::string_view name;
  ASSERT_TRUE(store_->GetName(rec, &name).ok());
  EXPECT_EQ(name, "sub");
  EXPECT_TRUE(store_->ReadLink(rec, &target).code() == Status::Code::kInvalidArgument);
}

TEST_P(StoreTest, MtimesSurvive) {
  struct stat st;
  ASSERT_EQ(::lstat((dir_ / "src/sub/text.txt").c_str(), &st), 0);
  uint32_t ino;
  InodeRecord rec;
  ASSERT_TRUE(store_->LookupPath("sub/text.txt", &ino, &rec).ok());
  EXPECT_EQ(rec.mtime_s, st.st_mtim.tv_sec);
  EXPECT_EQ(rec.mtime_ns, static_cast<uint32_t>(st.st_mtim.tv_nsec));
  EXPECT_EQ(rec.mode, st.st_mode);
  EXPECT_EQ(rec.size, 20000u);
}

TEST_P(StoreTest, ConcurrentReadersSeeTheSameBytes) {
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 300; i += 4) {
        uint32_t ino;
        InodeRecord rec;
        ReadBuffer buf;
        std::string_view out;
        std::string path = "many/f" + std::to_string(i);
        if (!store_->LookupPath(path, &ino, &rec).ok() ||
            !store_->Read(rec, 0, rec.size, &buf, &out).ok() ||
            out != "file number " + std::to_string(i)) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
}

// Reads every file of the tree through `store`; returns the paths that failed and checks that
// the others have their right contents.
std::vector<std::string> ReadEverything(const Store& store) {
  std::vector<std::string> failed;
  auto check = [&](const std::string& path, const std::string& expected) {
    uint32_t ino;
    InodeRecord r;
    ReadBuffer buf;
    std::string_view out;
    Status s = store.LookupPath(path, &ino, &r);
    if (s.ok()) s = store.Read(r, 0, r.size, &buf, &out);
    if (!s.ok()) {
      EXPECT_EQ(s.ToErrno(), EIO) << path << ": " << s.message();
      failed.push_back(path);
    } else {
      EXPECT_EQ(out, expected) << path;
    }
  };
  check("a.txt", "alpha");
  check("b.txt", "bee");
  check("sub/deep/x.bin", RandomBytes(50000, 1));
  check("sub/text.txt", TextBytes(20000, 2));
  for (int i = 0; i < 300; ++i) {
    check("many/f" + std::to_string(i), "file number " + std::to_string(i));
  }
  return failed;
}

// The files stored (in part) in the solid group holding ids [first, last].
std::vector<std::string> FilesInGroup(const Store& store, uint64_t first, uint64_t last) {
  std::vector<std::string> paths = {"a.txt", "b.txt", "sub/deep/x.bin", "sub/text.txt"};
  for (int i = 0; i < 300; ++i) paths.push_back("many/f" + std::to_string(i));
  std::vector<std::string> in;
  for (const std::string& path : paths) {
    uint32_t ino;
    InodeRecord r;
    EXPECT_TRUE(store.LookupPath(path, &ino, &r).ok()) << path;
    const uint64_t chunks = store.ChunkCount(r);
    if (chunks > 0 && r.data <= last && r.data + chunks - 1 >= first) in.push_back(path);
  }
  return in;
}

// One flipped byte inside one solid group fails exactly the files stored in it (squashfs's
// fragments fail the same way), with EIO and never wrong bytes; every other file reads.
TEST_P(StoreTest, FlippedPayloadByteFailsOnlyTheFilesOfItsGroup) {
  // A group of small files (the 300 tiny ones share one or two), and a chunk of random bytes
  // (a group of its own).
  for (auto [path, chunk] : {std::pair<const char*, uint64_t>{"many/f123", 0},
                             std::pair<const char*, uint64_t>{"sub/deep/x.bin", 3}}) {
    uint32_t ino;
    InodeRecord victim;
    ASSERT_TRUE(store_->LookupPath(path, &ino, &victim).ok());
    std::shared_ptr<MemTable> damaged;
    uint64_t first, last;
    ASSERT_TRUE(testing::DamagePayload(*table_, victim.data + chunk, &damaged, &first, &last).ok());
    std::unique_ptr<Store> store;
    ASSERT_TRUE(Store::Open(NewMemReader(damaged), &store).ok());
    const std::vector<std::string> expected = FilesInGroup(*store, first, last);
    ASSERT_NE(std::find(expected.begin(), expected.end(), path), expected.end());
    if (chunk > 0) EXPECT_EQ(expected, std::vector<std::string>{path});
    EXPECT_EQ(ReadEverything(*store), expected) << path;
  }
}

// A payload group that cannot be read (I/O error, short read, damage) fails the files stored
// in it with EIO, and no other file.
TEST_P(StoreTest, UnreadablePayloadGroupFailsOnlyItsFiles) {
  uint32_t ino;
  InodeRecord victim;
  ASSERT_TRUE(store_->LookupPath("sub/deep/x.bin", &ino, &victim).ok());
  // The group as the backend under test stores it (RocksDB keeps one record per group).
  std::unique_ptr<KvReader> groups = Reader();
  auto group_of = [&](uint64_t id) {
    std::string key;
    PinnedValue v;
    EXPECT_TRUE(groups->Seek(PayloadKey(id), &key, &v).ok());
    return key;
  };
  std::string group_key = group_of(victim.data + 3);
  for (Fault fault : {Fault::kError, Fault::kTruncate, Fault::kFlipBit}) {
    std::unique_ptr<Store> faulty;
    ASSERT_TRUE(Store::Open(NewFaultyReader(Reader(),
                                            [&](std::string_view key) {
                                              return key == group_key ? fault : Fault::kNone;
                                            }),
                            &faulty)
                    .ok());
    std::vector<std::string> failed = ReadEverything(*faulty);
    // x.bin (50 KB in 4 KiB chunks) spans the group, so it must fail; what else fails must be
    // stored in the same group.
    EXPECT_NE(std::find(failed.begin(), failed.end(), "sub/deep/x.bin"), failed.end());
    for (const std::string& path : failed) {
      InodeRecord r;
      ASSERT_TRUE(faulty->LookupPath(path, &ino, &r).ok());
      uint64_t chunks = (r.size + 4095) / 4096;
      bool in_group = false;
      for (uint64_t c = 0; c < chunks; ++c) {
        in_group |= group_of(r.data + c) == group_key;
      }
      EXPECT_TRUE(in_group) << path << " failed but is not stored in the damaged group";
    }
  }
}

TEST_P(StoreTest, DamagedMetadataIsRefusedAtOpenOrAccess) {
  for (std::string key :
       {std::string("H"), std::string("L"), std::string("M"), SegmentKey(kInodeSegmentSpace, 0),
        SegmentKey(kNameSegmentSpace, 0), std::string("Z")}) {
    for (Fault fault : {Fault::kFlipBit, Fault::kTruncate, Fault::kError}) {
      std::unique_ptr<Store> faulty;
      Status s = Store::Open(
          NewFaultyReader(Reader(),
                          [&](std::string_view k) { return k == key ? fault : Fault::kNone; }),
          &faulty);
      if (!s.ok()) continue;  // refused cleanly at open
      // Otherwise the damage must surface as an error on access, never as wrong data.
      Status v = faulty->VerifyMetadata();
      bool all_ok = v.ok();
      for (int i = 0; all_ok && i < 300; ++i) {
        uint32_t ino;
        InodeRecord r;
        ReadBuffer buf;
        std::string_view out;
        Status ls = faulty->LookupPath("many/f" + std::to_string(i), &ino, &r);
        if (ls.ok()) ls = faulty->Read(r, 0, r.size, &buf, &out);
        if (!ls.ok())
          all_ok = false;
        else
          EXPECT_EQ(out, "file number " + std::to_string(i));
      }
      EXPECT_FALSE(all_ok && key != "Z" && fault != Fault::kError)
          << "damage to " << key << " went unnoticed";
    }
  }
}

TEST_P(StoreTest, CacheServesSameBytesWithinBudget) {
  // A cache of 16 KiB for 370 KB of files evicts, and stays within its budget; one of 1 MiB
  // (over 64 groups of 4 KiB) takes every record of a group read, so the group's other files
  // hit.
  for (const uint64_t budget : {uint64_t{16} << 10, uint64_t{1} << 20}) {
    auto cache = std::make_shared<ByteCache>(budget, 1);
    std::unique_ptr<Store> cached;
    ASSERT_TRUE(Store::Open(Reader(), &cached, cache).ok());
    for (int pass = 0; pass < 3; ++pass) {
      EXPECT_TRUE(ReadEverything(*cached).empty());
      EXPECT_LE(cache->stats().bytes, budget);
    }
    ByteCache::Stats st = cache->stats();
    if (budget < (1u << 20)) {
      EXPECT_GT(st.evictions, 0u);
    } else {
      EXPECT_GT(st.hits, 0u);
    }
  }
}

TEST_P(StoreTest, PrefetchFillsTheCacheAndDamageIsNeverCached) {
  auto cache = std::make_shared<ByteCache>(1 << 20, 4);
  uint32_t ino;
  InodeRecord text;
  ASSERT_TRUE(store_->LookupPath("sub/text.txt", &ino, &text).ok());
  std::string group_key = table_->data.lower_bound(PayloadKey(text.data + 2))->first;
  std::unique_ptr<Store> faulty;
  ASSERT_TRUE(Store::Open(NewFaultyReader(Reader(),
                                          [&](std::string_view key) {
                                            return key == group_key ? Fault::kFlipBit
                                                                    : Fault::kNone;
                                          }),
                          &faulty, cache)
                  .ok());
  EXPECT_EQ(faulty->ChunkCount(text), 5u);  // 20000 bytes in 4 KiB chunks
  ASSERT_TRUE(faulty->Prefetch(text, 0).ok());
  EXPECT_TRUE(faulty->ChunkCached(text, 0));
  EXPECT_TRUE(faulty->Prefetch(text, 99).ok());  // past the end: nothing to do
  // Chunks in the damaged group fail and stay out of the cache.
  for (uint64_t c = 0; c < 5; ++c) {
    bool in_damaged = table_->data.lower_bound(PayloadKey(text.data + c))->first == group_key;
    Status s = faulty->Prefetch(text, c);
    if (!s.ok()) {
      EXPECT_TRUE(in_damaged);
      EXPECT_FALSE(faulty->ChunkCached(text, c));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("memory", "lmdb", "rocksdb"),
                         [](const auto& info) { return info.param; });

TEST(StoreOpenTest, MissingHeaderIsNotAStore) {
  auto table = std::make_shared<MemTable>();
  std::unique_ptr<Store> store;
  Status s = Store::Open(NewMemReader(table), &store);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a dsfs store"), std::string::npos);
}

TEST(StorePackTest, EmptyTreeAndNoDictionary) {
  TempDir dir;
  ::mkdir((dir / "empty").c_str(), 0755);
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "empty", PackOptions{}, &table, &store).ok());
  EXPECT_EQ(store->header().inode_count, 1u);
  EXPECT_EQ(store->header().dict_bytes, 0u);
  InodeRecord root;
  ASSERT_TRUE(store->GetInode(1, &root).ok());
  EXPECT_TRUE(IsDir(root));
}

TEST(StorePackTest, SourceErrorsNameThePath) {
  TempDir dir;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  Status s = PackToMemory(dir / "missing", PackOptions{}, &table, &store);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_NE(s.message().find("missing"), std::string::npos);
  WriteFile(dir / "file", "x");
  s = PackToMemory(dir / "file", PackOptions{}, &table, &store);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  PackOptions bad;
  bad.zstd_level = 99;
  EXPECT_EQ(PackToMemory(dir.path(), bad, &table, &store).code(), Status::Code::kInvalidArgument);
}

TEST(StorePackTest, SpecialFilesAreSkipped) {
  TempDir dir;
  WriteFile(dir / "src/keep", "k");
  ASSERT_EQ(::mkfifo((dir / "src/fifo").c_str(), 0644), 0);
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "src", PackOptions{}, &table, &store).ok());
  EXPECT_EQ(store->header().inode_count, 2u);
}

// PackOptions::cancel: a pack whose token is set fails with "interrupted" and commits
// nothing, whether the token was set before it started (checked while scanning) or while it
// runs (checked between batches while compressing); the writer then leaves no store and no
// temporary behind.
TEST(StorePackTest, CancelTokenStopsThePackAndLeavesNothing) {
  TempDir dir;
  for (int i = 0; i < 20; ++i)
    WriteFile(dir / ("src/f" + std::to_string(i)), RandomBytes(70000, i));
  for (bool before : {true, false}) {
    for (const char* backend : {"lmdb", "rocksdb"}) {
      SCOPED_TRACE(std::string(backend) + (before ? ", set before" : ", set while packing"));
      std::atomic<bool> cancel{before};
      PackOptions options;
      options.threads = 1;
      options.cancel = &cancel;
      const std::string dst = dir / "out/s.db";
      ASSERT_EQ(::mkdir((dir / "out").c_str(), 0755), 0);
      {
        std::unique_ptr<KvWriter> writer;
        ASSERT_TRUE(NewKvWriter(dst, backend, KvWriterOptions{}, &writer).ok());
        // Set once the scan is done (the progress callback runs on the calling thread).
        auto progress = [&](const PackProgress& p) {
          if (std::string_view(p.phase) == "training") cancel = true;
        };
        PackStats stats;
        Status s = PackDirectory(dir / "src", options, writer.get(), progress, &stats);
        EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
        EXPECT_EQ(s.message(), "interrupted");
      }
      EXPECT_TRUE(std::filesystem::is_empty(dir / "out"));
      std::filesystem::remove_all(dir / "out");
    }
  }
}

// Records the ranges a store announces before reading them.
class WillNeedRecorder : public KvReader {
 public:
  explicit WillNeedRecorder(std::unique_ptr<KvReader> base) : base_(std::move(base)) {}
  Status Get(std::string_view key, PinnedValue* value) override { return base_->Get(key, value); }
  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    return base_->Seek(key, found_key, value);
  }
  std::string_view Name() const override { return "recorder"; }
  void WillNeed(std::string_view range) override {
    std::lock_guard lock(mu_);
    ranges_.push_back(range);
  }
  std::vector<std::string_view> Take() {
    std::lock_guard lock(mu_);
    return std::exchange(ranges_, {});
  }

 private:
  std::unique_ptr<KvReader> base_;
  std::mutex mu_;
  std::vector<std::string_view> ranges_;
};

bool Covers(const std::vector<std::string_view>& ranges, const char* p, size_t n) {
  return std::any_of(ranges.begin(), ranges.end(), [&](std::string_view r) {
    return p >= r.data() && p + n <= r.data() + r.size();
  });
}

TEST(StoreMetadataTest, WillNeedMetadataAnnouncesEveryStoredSegment) {
  TempDir dir;
  for (int i = 0; i < 2000; ++i) {
    WriteFile(dir / ("src/d" + std::to_string(i % 7) + "/file-" + std::to_string(i)), "x");
  }
  auto table = std::make_shared<MemTable>();
  PackOptions options;
  options.segment_bytes = 4096;
  ASSERT_TRUE(
      PackDirectory(dir / "src", options, NewMemWriter(table).get(), nullptr, nullptr).ok());
  auto recorder = std::make_unique<WillNeedRecorder>(NewMemReader(table));
  WillNeedRecorder* rec = recorder.get();
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(std::move(recorder), &store).ok());
  EXPECT_EQ(store->WillNeedMetadata(1000), 0u);  // over the limit: nothing
  rec->Take();
  const uint64_t stored = store->metadata_size().stored_bytes;
  EXPECT_EQ(store->WillNeedMetadata(1 << 30), stored);
  std::vector<std::string_view> ranges = rec->Take();
  uint64_t segments = 0, bytes = 0;
  for (const auto& [k, v] : table->data) {
    if (k.size() != 9 || (k[0] != 'I' && k[0] != 'N')) continue;
    ++segments;
    bytes += v.size();
    EXPECT_TRUE(Covers(ranges, v.data(), v.size())) << "segment " << k[0];
  }
  EXPECT_EQ(bytes, stored);
  EXPECT_EQ(segments, store->metadata_size().segments);
}

TEST(StoreMetadataTest, LookupFetchesAFewSegmentsOnceThenNothing) {
  // A cold lookup in a large directory fetches the few segments its binary search touches,
  // never the directory's (or the table's) others; once cached, nothing more is fetched.
  TempDir dir;
  for (int i = 0; i < 3000; ++i) {
    WriteFile(dir / ("src/big/file-with-a-long-name-" + std::to_string(i)), "x");
  }
  auto table = std::make_shared<MemTable>();
  PackOptions options;
  options.segment_bytes = 4096;  // many segments per table
  ASSERT_TRUE(
      PackDirectory(dir / "src", options, NewMemWriter(table).get(), nullptr, nullptr).ok());
  size_t segments = 0;
  for (const auto& [k, v] : table->data) segments += k.size() == 9 && (k[0] == 'I' || k[0] == 'N');
  auto mu = std::make_shared<std::mutex>();
  auto gets = std::make_shared<std::vector<std::string>>();
  FaultPolicy record = [mu, gets](std::string_view key) {
    if (key.size() == 9 && (key[0] == 'I' || key[0] == 'N')) {
      std::lock_guard<std::mutex> lock(*mu);
      gets->emplace_back(key);
    }
    return Fault::kNone;
  };
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewFaultyReader(NewMemReader(table), record), &store).ok());
  uint32_t big, ino;
  InodeRecord r;
  ASSERT_TRUE(store->LookupPath("big", &big, &r).ok());
  ASSERT_EQ(r.size, 3000u);
  gets->clear();
  ASSERT_TRUE(store->Lookup(big, "file-with-a-long-name-1234", &ino, &r).ok());
  EXPECT_GT(segments, 12u);
  EXPECT_LE(gets->size(), 12u) << "of " << segments << " segments";
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(store->Lookup(big, "file-with-a-long-name-" + std::to_string(i), &ino, &r).ok());
  }
  gets->clear();
  ASSERT_TRUE(store->Lookup(big, "file-with-a-long-name-1234", &ino, &r).ok());
  EXPECT_TRUE(gets->empty());
}

// Reads fail, time out or come back short at random, from many threads at once: the requests a
// fault hit answer EIO (or still the right bytes, when the fault missed the record they
// needed), every other request the right bytes, and once the faults stop everything reads
// right again (nothing damaged was cached).
TEST_P(StoreTest, RandomFaultsFailOnlyTheRequestsTheyHit) {
  std::atomic<bool> faults_on{true};
  FaultPolicy random = RandomFaults(
      0.05, 42, "PQ", {Fault::kError, Fault::kTimeout, Fault::kTruncate, Fault::kFlipBit});
  std::unique_ptr<Store> faulty;
  auto cache = std::make_shared<ByteCache>(16 << 10, 1);  // small: reads keep missing it
  ASSERT_TRUE(Store::Open(NewFaultyReader(Reader(),
                                          [&](std::string_view key) {
                                            return faults_on ? random(key) : Fault::kNone;
                                          }),
                          &faulty, cache)
                  .ok());
  Filesystem fs(std::move(faulty), FsOptions{});
  struct File {
    uint64_t ino;
    std::string data;
  };
  std::vector<File> files;
  auto add = [&](const std::string& path, std::string data) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store_->LookupPath(path, &ino, &r).ok()) << path;
    files.push_back({ino, std::move(data)});
  };
  add("sub/deep/x.bin", RandomBytes(50000, 1));
  add("sub/text.txt", TextBytes(20000, 2));
  for (int i = 0; i < 300; i += 7)
    add("many/f" + std::to_string(i), "file number " + std::to_string(i));
  std::atomic<uint64_t> requests{0}, hit{0}, failed{0}, wrong{0}, failed_unhit{0};
  auto reader = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    ReadBuffer buf;
    for (int i = 0; i < 3000; ++i) {
      const File& f = files[rng() % files.size()];
      uint64_t off = rng() % f.data.size(), size = 1 + rng() % 9000;
      uint64_t before = InjectedFaults();
      std::string_view out;
      Status s = fs.Read(f.ino, off, size, &buf, &out);
      bool was_hit = InjectedFaults() != before;
      ++requests;
      hit += was_hit;
      if (!s.ok()) {
        ++failed;
        failed_unhit += !was_hit;
        EXPECT_EQ(s.ToErrno(), EIO) << s.ToString();
      } else if (out != std::string_view(f.data).substr(off, size)) {
        ++wrong;
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 8; ++t) threads.emplace_back(reader, t + 1);
  for (auto& t : threads) t.join();
  std::printf("[ faults ] %llu requests, %llu hit by a fault, %llu answered EIO\n",
              static_cast<unsigned long long>(requests.load()),
              static_cast<unsigned long long>(hit.load()),
              static_cast<unsigned long long>(failed.load()));
  EXPECT_EQ(wrong.load(), 0u) << "wrong bytes served";
  EXPECT_EQ(failed_unhit.load(), 0u) << "requests failed that no fault hit";
  EXPECT_GT(failed.load(), 50u) << "too few faults to prove anything";
  EXPECT_LE(failed.load(), hit.load());
  // The daemon keeps serving: without faults, every file reads right.
  faults_on = false;
  ReadBuffer buf;
  for (const File& f : files) {
    std::string_view out;
    ASSERT_TRUE(fs.Read(f.ino, 0, f.data.size(), &buf, &out).ok());
    EXPECT_TRUE(out == f.data);
  }
}

// A timeout fault blocks for the reader's timeout, then fails with EIO.
TEST_P(StoreTest, TimeoutFaultBlocksThenFails) {
  std::unique_ptr<Store> faulty;
  ASSERT_TRUE(Store::Open(NewFaultyReader(
                              Reader(),
                              [](std::string_view key) {
                                return key[0] == 'P' ? Fault::kTimeout : Fault::kNone;
                              },
                              std::chrono::milliseconds(50)),
                          &faulty)
                  .ok());
  uint32_t ino;
  InodeRecord r;
  ASSERT_TRUE(faulty->LookupPath("a.txt", &ino, &r).ok());
  ReadBuffer buf;
  std::string_view out;
  auto t0 = std::chrono::steady_clock::now();
  Status s = faulty->Read(r, 0, 5, &buf, &out);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(s.ToErrno(), EIO) << s.ToString();
}

// Symlinks pointing out of the source tree (to a file, to a directory, absolute or through
// "..") are stored as symlinks with their targets: pack never reads what they point at.
TEST(PackSymlinkTest, SymlinksOutOfTheTreeAreStoredNotFollowed) {
  TempDir dir;
  const std::string secret = "outside the tree: must not be packed\n";
  WriteFile(dir / "outside/secret.txt", secret);
  WriteFile(dir / "outside/sub/more.txt", secret);
  WriteFile(dir / "src/in.txt", "inside");
  ASSERT_EQ(::symlink((dir / "outside/secret.txt").c_str(), (dir / "src/abs").c_str()), 0);
  ASSERT_EQ(::symlink("../outside/secret.txt", (dir / "src/rel").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "outside").c_str(), (dir / "src/dirlink").c_str()), 0);
  PackOptions o;
  o.dict_bytes = 0;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &store).ok());
  EXPECT_EQ(store->header().file_count, 1u);
  EXPECT_EQ(store->header().symlink_count, 3u);
  for (auto [name, target] :
       {std::pair<std::string, std::string>{"abs", dir / "outside/secret.txt"},
        {"rel", "../outside/secret.txt"},
        {"dirlink", dir / "outside"}}) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath(name, &ino, &r).ok()) << name;
    EXPECT_TRUE(IsLink(r)) << name;
    std::string_view t;
    ASSERT_TRUE(store->ReadLink(r, &t).ok());
    EXPECT_EQ(t, target);
  }
  uint32_t ino;
  InodeRecord r;
  EXPECT_FALSE(store->LookupPath("dirlink/secret.txt", &ino, &r).ok());
  // Nothing of the outside file's bytes is in the store.
  for (const auto& [k, v] : table->data) {
    EXPECT_EQ(v.find("must not be packed"), std::string::npos) << "found in record " << k;
  }
}

// Records carry no id of their own: a group key damaged into a larger id (still below the next
// group's) must not make the group serve its records under the wrong ids.
TEST(StoreGroupTest, GroupUnderADamagedKeyIsNotServedForOtherIds) {
  // 400 incompressible files of 1000 bytes: groups of ~64 records each.
  TempDir dir;
  for (int i = 0; i < 400; ++i) {
    WriteFile(dir / ("src/f" + std::to_string(1000 + i)), RandomBytes(1000, i));
  }
  PackOptions o;
  o.dict_bytes = 0;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &store).ok());
  // Move the second group's key up by two (still below the third's).
  auto damaged = std::make_shared<MemTable>();
  damaged->data = table->data;
  auto it = std::next(damaged->data.lower_bound(PayloadKey(0)));
  uint64_t last_id = 0, next_id = 0;
  ASSERT_TRUE(ParsePayloadKey(it->first, &last_id));
  ASSERT_TRUE(ParsePayloadKey(std::next(it)->first, &next_id));
  ASSERT_GT(next_id, last_id + 2);
  std::string group = it->second;
  damaged->data.erase(it);
  damaged->data[PayloadKey(last_id + 2)] = group;
  ASSERT_TRUE(Store::Open(NewMemReader(damaged), &store).ok());
  // Every file reads right or fails with EIO: none gets a neighbour's bytes.
  int failed = 0;
  for (int i = 0; i < 400; ++i) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath("f" + std::to_string(1000 + i), &ino, &r).ok());
    ReadBuffer buf;
    std::string_view out;
    Status s = store->Read(r, 0, r.size, &buf, &out);
    if (!s.ok()) {
      EXPECT_EQ(s.ToErrno(), EIO);
      ++failed;
    } else {
      EXPECT_TRUE(out == RandomBytes(1000, i)) << "f" << 1000 + i << ": a neighbour's bytes";
    }
  }
  EXPECT_GT(failed, 0);
}

// A solid group on several pages of the store's map is announced before it is read, however
// small: the map has no readahead, so its pages would otherwise fault in one at a time (2 major
// faults a miss with 32 KiB groups of photo crops under pressure, docs/kernel.md).
TEST(StoreSolidTest, GroupsOnSeveralPagesAreAnnouncedBeforeTheyAreRead) {
  TempDir dir;
  for (int i = 0; i < 60; ++i) {
    WriteFile(dir / ("src/f" + std::to_string(1000 + i)), RandomBytes(1000, i));
  }
  PackOptions o;
  o.group_bytes = 12 << 10;  // ~12 KB stored each (incompressible): several pages, under 16 KiB
  o.dict_bytes = 0;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> plain;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &plain).ok());
  for (const uint64_t budget : {uint64_t{0}, uint64_t{64} << 20}) {
    auto recorder = std::make_unique<WillNeedRecorder>(NewMemReader(table));
    WillNeedRecorder* rec = recorder.get();
    auto cache = budget ? std::make_shared<ByteCache>(budget, 1) : nullptr;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(Store::Open(std::move(recorder), &store, cache).ok());
    rec->Take();
    for (int i = 0; i < 60; ++i) {
      uint32_t ino;
      InodeRecord r;
      ASSERT_TRUE(store->LookupPath("f" + std::to_string(1000 + i), &ino, &r).ok());
      ReadBuffer buf;
      std::string_view out;
      ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &out).ok());
      ASSERT_TRUE(out == RandomBytes(1000, i));
    }
    const std::vector<std::string_view> ranges = rec->Take();
    int groups = 0;
    uint64_t last_id = 0;
    for (auto it = table->data.lower_bound(PayloadKey(0));
         it != table->data.end() && ParsePayloadKey(it->first, &last_id); ++it) {
      ++groups;
      ASSERT_GT(it->second.size(), 8192u);
      ASSERT_LT(it->second.size(), 16384u);
      EXPECT_TRUE(Covers(ranges, it->second.data(), it->second.size()))
          << "group " << last_id << " (budget " << budget << ")";
    }
    EXPECT_GE(groups, 4);
  }
}

// A miss of a small RAM cache decodes a solid group only up to the record it wants
// (ReadSolid): every record of groups of every shape (first, middle, last record, groups of one
// record, chunked files, groups larger than a zstd block) reads exactly, in random and in
// directory order, through caches that take neighbours and caches that do not.
TEST(StoreSolidTest, PartialDecodeServesExactBytesForEveryRecord) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < 600; ++i) {
    const size_t n = i % 50 == 0 ? 30000 + i : i % 7 == 0 ? 1 : 200 + (i * 37) % 3000;
    files.emplace_back("d" + std::to_string(i % 3) + "/f" + std::to_string(1000 + i),
                       TextBytes(n, i));
    WriteFile(dir / ("src/" + files.back().first), files.back().second);
  }
  for (const uint32_t group : {1u << 10, 4u << 10, 64u << 10, 128u << 10}) {
    PackOptions o;
    o.chunk_bytes = 8192;  // the large files have several chunks
    o.group_bytes = group;
    o.dict_bytes = 4096;
    std::shared_ptr<MemTable> table;
    std::unique_ptr<Store> plain;
    ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &plain).ok());
    for (const uint64_t budget : {uint64_t{32} << 10, uint64_t{64} << 20}) {
      auto cache = std::make_shared<ByteCache>(budget, 1);
      std::unique_ptr<Store> store;
      ASSERT_TRUE(Store::Open(NewMemReader(table), &store, cache).ok());
      std::vector<size_t> order(files.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) std::shuffle(order.begin(), order.end(), std::mt19937(group));
        for (size_t i : order) {
          uint32_t ino;
          InodeRecord r;
          ASSERT_TRUE(store->LookupPath(files[i].first, &ino, &r).ok());
          ReadBuffer buf;
          std::string_view out;
          ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &out).ok()) << files[i].first;
          ASSERT_EQ(out, files[i].second) << files[i].first << " group " << group;
          if (r.size > 5000) {  // a range in a later chunk
            ASSERT_TRUE(store->Read(r, r.size - 3000, 2000, &buf, &out).ok());
            ASSERT_EQ(out, std::string_view(files[i].second).substr(r.size - 3000, 2000));
          }
        }
      }
      EXPECT_LE(cache->stats().bytes, budget);
    }
  }
}

// Format 5 (a pack without a dictionary): every group one standard zstd frame of its records,
// with no dictionary and a window of at most 1 MiB, its index outside the frame, so all the
// groups' records, in order, are every file's bytes. Files read back through the store as
// ever; each frame decodes alone to its records; KernelRecordOffset finds each file in them;
// no group but the last holds less than kMinKernelGroupBytes; a damaged group fails its frame.
class StoreKernelFormatTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StoreKernelFormatTest, GroupsAreKernelFramesOfTheRecordsInIdOrder) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < 500; ++i) {
    const size_t n = i % 60 == 0 ? 100000 + i : i % 9 == 0 ? 1 : 300 + (i * 53) % 4000;
    std::string data = i % 3 ? TextBytes(n, i) : RandomBytes(n, i);
    files.emplace_back("d" + std::to_string(i % 4) + "/f" + std::to_string(1000 + i), data);
    WriteFile(dir / ("src/" + files.back().first), data);
  }
  WriteFile(dir / "src/empty", "");
  PackOptions o;
  o.chunk_bytes = 64 << 10;  // the large files have several chunks
  o.group_bytes = 16 << 10;
  o.dict_bytes = 0;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &store).ok());
  if (GetParam() != "memory") {
    ASSERT_TRUE(testing::PackToBackend(dir / "src", o, GetParam(), dir / "s.db", &store).ok());
  }
  EXPECT_EQ(store->header().version, kKernelFormatVersion);
  EXPECT_EQ(store->header().dict_bytes, 0u);
  std::string all;  // every record, in id order, decoded from the frames alone
  std::vector<Store::KernelGroup> groups;
  Status s = store->ForEachKernelGroup([&](const Store::KernelGroup& g) {
    groups.push_back(g);
    std::string frame(g.frame_bytes, '\0');
    DSFS_RETURN_IF_ERROR(store->ReadKernelFrame(g, 0, frame.size(), frame.data()));
    EXPECT_EQ(ZSTD_getDictID_fromFrame(frame.data(), frame.size()), 0u);
    ZSTD_frameHeader fh;
    EXPECT_EQ(ZSTD_getFrameHeader(&fh, frame.data(), frame.size()), 0u);
    EXPECT_LE(fh.windowSize, 1u << 20);
    std::string raw(g.records_bytes, '\0');
    EXPECT_EQ(ZSTD_decompress(raw.data(), raw.size(), frame.data(), frame.size()), raw.size());
    all += raw;
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_GT(groups.size(), 10u);
  for (size_t i = 0; i + 1 < groups.size(); ++i) {
    EXPECT_GE(groups[i].records_bytes, kMinKernelGroupBytes) << "group " << i;
  }
  uint64_t total = 0;
  for (const auto& [path, data] : files) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath(path, &ino, &r).ok());
    ReadBuffer buf;
    std::string_view out;
    ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &out).ok()) << path;
    ASSERT_EQ(out, data) << path;
    uint64_t last_id = 0, offset = 0;
    ASSERT_TRUE(store->KernelRecordOffset(r.data, &last_id, &offset).ok());
    uint64_t start = 0;  // the group's first byte among all records
    for (const Store::KernelGroup& g : groups) {
      if (g.last_id == last_id) break;
      start += g.records_bytes;
    }
    ASSERT_EQ(all.substr(start + offset, data.size()), data) << path;
    total += data.size();
  }
  EXPECT_EQ(all.size(), total);
  // A flipped byte in a group's frame: ReadKernelFrame refuses it (Corruption), not bytes.
  if (GetParam() == "memory") {
    std::shared_ptr<MemTable> damaged;
    ASSERT_TRUE(testing::DamagePayload(*table, groups[3].last_id, &damaged).ok());
    std::unique_ptr<Store> bad;
    ASSERT_TRUE(Store::Open(NewMemReader(damaged), &bad).ok());
    std::string frame(groups[3].frame_bytes, '\0');
    EXPECT_TRUE(bad->ReadKernelFrame(groups[3], 0, frame.size(), frame.data()).IsCorruption());
    EXPECT_TRUE(bad->ReadKernelFrame(groups[4], 0, 10, frame.data()).ok());
  }
}

// With a RAM cache, a group's verified frame and index come from the cache after its first read
// (the kernel asks for both again whenever it dropped the pages made from them): the same bytes,
// read from the cache, no group verified twice.
TEST(StoreKernelFormatTest, KernelGroupsComeFromTheRamCacheAfterTheirFirstRead) {
  TempDir dir;
  for (int i = 0; i < 200; ++i) {
    WriteFile(dir / ("src/f" + std::to_string(1000 + i)), TextBytes(700 + i * 37 % 3000, i));
  }
  PackOptions o;
  o.group_bytes = 16 << 10;
  o.dict_bytes = 0;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> plain;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &plain).ok());
  auto cache = std::make_shared<ByteCache>(64 << 20, 1);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(table), &store, cache).ok());
  std::vector<Store::KernelGroup> groups;
  ASSERT_TRUE(store
                  ->ForEachKernelGroup([&](const Store::KernelGroup& g) {
                    groups.push_back(g);
                    return Status::OK();
                  })
                  .ok());
  ASSERT_GT(groups.size(), 3u);
  uint32_t ino;
  InodeRecord r;
  ASSERT_TRUE(store->LookupPath("f1100", &ino, &r).ok());
  uint64_t first_last = 0, first_offset = 0;
  ASSERT_TRUE(plain->KernelRecordOffset(r.data, &first_last, &first_offset).ok());
  for (const Store::KernelGroup& g : groups) {
    std::string want(g.frame_bytes, '\0');
    ASSERT_TRUE(plain->ReadKernelFrame(g, 0, want.size(), want.data()).ok());
    for (int round = 0; round < 3; ++round) {
      std::string got(g.frame_bytes - 5, '\0');
      ASSERT_TRUE(store->ReadKernelFrame(g, 5, got.size(), got.data()).ok());
      EXPECT_EQ(got, want.substr(5)) << "group " << g.last_id << " round " << round;
    }
  }
  EXPECT_EQ(cache->stats().misses, groups.size());
  EXPECT_EQ(cache->stats().hits, 2 * groups.size());
  uint64_t last_id = 0, offset = 0;
  ASSERT_TRUE(store->KernelRecordOffset(r.data, &last_id, &offset).ok());
  EXPECT_EQ(last_id, first_last);
  EXPECT_EQ(offset, first_offset);
  EXPECT_EQ(cache->stats().hits, 2 * groups.size() + 1);
  // A read past the frame is refused from the cache as from the store.
  std::string one(1, '\0');
  EXPECT_FALSE(store->ReadKernelFrame(groups[0], groups[0].frame_bytes, 1, one.data()).ok());
}

// A store with a dictionary stays format 4: no kernel frames.
TEST(StoreKernelFormatTest, WithADictionaryTheStoreIsFormat4) {
  TempDir dir;
  for (int i = 0; i < 200; ++i) WriteFile(dir / ("src/f" + std::to_string(i)), TextBytes(500, i));
  PackOptions o;
  o.dict_bytes = 4096;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir / "src", o, &table, &store).ok());
  EXPECT_EQ(store->header().version, kFormatVersion);
  Status s = store->ForEachKernelGroup([](const Store::KernelGroup&) { return Status::OK(); });
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreKernelFormatTest,
                         ::testing::Values("memory", "lmdb", "rocksdb"),
                         [](const auto& info) { return info.param; });

// Damage to a group is found on the partial path too: the files of the damaged group fail with
// EIO through a small cache, whatever order they are read in, and the others read.
TEST_P(StoreTest, FlippedPayloadByteFailsThroughASmallCache) {
  uint32_t ino;
  InodeRecord victim;
  ASSERT_TRUE(store_->LookupPath("many/f123", &ino, &victim).ok());
  std::shared_ptr<MemTable> damaged;
  uint64_t first, last;
  ASSERT_TRUE(testing::DamagePayload(*table_, victim.data, &damaged, &first, &last).ok());
  auto cache = std::make_shared<ByteCache>(16 << 10, 1);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(damaged), &store, cache).ok());
  const std::vector<std::string> expected = FilesInGroup(*store, first, last);
  ASSERT_FALSE(expected.empty());
  for (int pass = 0; pass < 2; ++pass) EXPECT_EQ(ReadEverything(*store), expected);
}

}  // namespace
}  // namespace dsfs
