#include "fs/prefetcher.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "fs/filesystem.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::PackToMemory;
using testing::TempDir;
using testing::TextBytes;
using testing::WriteFile;

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 50; ++i) {
      WriteFile(dir_ / ("src/a/f" + std::to_string(100 + i)), TextBytes(1000 + i, i));
    }
    WriteFile(dir_ / "src/b/big", TextBytes(100000, 7));
    WriteFile(dir_ / "src/b/empty", "");
    PackOptions o;
    o.chunk_bytes = 8192;
    o.group_bytes = 8192;  // groups a small cache holds
    std::unique_ptr<Store> plain;
    ASSERT_TRUE(PackToMemory(dir_ / "src", o, &table_, &plain).ok());
    cache_ = std::make_shared<ByteCache>(1 << 20, 4);
    std::unique_ptr<Store> store;
    ASSERT_TRUE(Store::Open(NewMemReader(table_), &store, cache_).ok());
    fs_ = std::make_unique<Filesystem>(std::move(store), FsOptions{}, cache_);
    store_ = &fs_->store();
  }

  std::shared_ptr<MemTable> table_;

  uint32_t Ino(const std::string& path, InodeRecord* rec = nullptr) {
    uint32_t ino;
    InodeRecord r;
    EXPECT_TRUE(store_->LookupPath(path, &ino, &r).ok());
    if (rec) *rec = r;
    return ino;
  }

  // Records what would be stored in the kernel.
  struct Kernel {
    std::mutex mu;
    std::map<uint64_t, std::string> files;
    int unknown_left = 0;  // answer -ENOENT this many times first
    Prefetcher::PushFn Fn() {
      return [this](uint64_t ino, uint64_t off, std::string_view data) {
        std::lock_guard lock(mu);
        if (unknown_left > 0) {
          --unknown_left;
          return -ENOENT;
        }
        std::string& f = files[ino];
        if (f.size() < off + data.size()) f.resize(off + data.size());
        f.replace(off, data.size(), data);
        return 0;
      };
    }
  };

  TempDir dir_;
  std::shared_ptr<ByteCache> cache_;
  std::unique_ptr<Filesystem> fs_;  // the push source; owns the store
  const Store* store_ = nullptr;
};

TEST_F(PrefetcherTest, PushesEveryFileOfAListedDirectoryOnce) {
  Kernel k;
  Prefetcher::Options o;
  o.push_budget_bytes = 1 << 30;
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), o, k.Fn(), fs_.get());
  p.DirectoryListed(Ino("a"));
  p.DirectoryListed(Ino("a"));
  p.DirectoryListed(Ino("b"));
  p.WaitIdle();
  EXPECT_EQ(k.files.size(), 51u);  // 50 + big (an empty file has nothing to push)
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k.files[Ino("a/f" + std::to_string(100 + i))], TextBytes(1000 + i, i));
  }
  EXPECT_EQ(k.files[Ino("b/big")], TextBytes(100000, 7));  // pushed chunk by chunk
  Prefetcher::Stats st = p.stats();
  EXPECT_EQ(st.pushed_files, 51u);
  EXPECT_EQ(st.push_failures, 0u);
}

TEST_F(PrefetcherTest, PushBudgetHolds) {
  Kernel k;
  Prefetcher::Options o;
  o.push_budget_bytes = 10 * 1000;
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), o, k.Fn(), fs_.get());
  p.DirectoryListed(Ino("a"));
  p.WaitIdle();
  uint64_t bytes = 0;
  for (auto& [ino, f] : k.files) bytes += f.size();
  EXPECT_LE(bytes, 10u * 1000);
  EXPECT_GE(k.files.size(), 9u);
  Prefetcher off(store_, cache_.get(), fs_->inode_space(), Prefetcher::Options{}, k.Fn(),
                 fs_.get());  // budget 0: never pushes
  off.DirectoryListed(Ino("b"));
  off.WaitIdle();
  EXPECT_EQ(off.stats().pushed_files, 0u);
}

TEST_F(PrefetcherTest, RetriesInodesTheKernelDoesNotKnowYetThenGivesUp) {
  Kernel k;
  k.unknown_left = 2;
  Prefetcher::Options o;
  o.push_budget_bytes = 1 << 30;
  {
    Prefetcher p(store_, cache_.get(), fs_->inode_space(), o, k.Fn(), fs_.get());
    p.DirectoryListed(Ino("a"));
    p.WaitIdle();
    EXPECT_EQ(p.stats().pushed_files, 50u);
    EXPECT_EQ(p.stats().push_retries, 2u);
  }
  Kernel never;
  never.unknown_left = 1000000;
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), o, never.Fn(), fs_.get());
  p.DirectoryListed(Ino("a"));
  p.WaitIdle();
  EXPECT_EQ(p.stats().pushed_files, 0u);
  EXPECT_EQ(p.stats().push_failures, 1u);  // gave up on the directory after one file
}

TEST_F(PrefetcherTest, ReadaheadFollowsDirectoryOrderOnly) {
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), Prefetcher::Options{}, nullptr);
  uint32_t first = Ino("a/f100");
  // Random order: nothing is prefetched.
  for (uint32_t i : {7u, 3u, 40u, 12u}) {
    InodeRecord r;
    ASSERT_TRUE(store_->GetInode(first + i, &r).ok());
    p.ReadServed(first + i, r, 0, r.size);
  }
  p.WaitIdle();
  EXPECT_EQ(p.stats().readahead_files, 0u);
  // In directory order: the files ahead land in the cache.
  for (uint32_t i = 0; i < 4; ++i) {
    InodeRecord r;
    ASSERT_TRUE(store_->GetInode(first + i, &r).ok());
    p.ReadServed(first + i, r, 0, r.size);
  }
  p.WaitIdle();
  EXPECT_GT(p.stats().readahead_files, 10u);
  InodeRecord r;
  ASSERT_TRUE(store_->GetInode(first + 10, &r).ok());
  EXPECT_TRUE(store_->ChunkCached(r, 0));
}

TEST_F(PrefetcherTest, ReadaheadFollowsALargeFileFrontToBack) {
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), Prefetcher::Options{}, nullptr);
  InodeRecord big;
  uint32_t ino = Ino("b/big", &big);
  for (uint64_t off = 0; off < 3 * 8192; off += 4096) p.ReadServed(ino, big, off, 4096);
  p.WaitIdle();
  EXPECT_GT(p.stats().readahead_chunks, 0u);
  EXPECT_TRUE(store_->ChunkCached(big, 5));
}

TEST_F(PrefetcherTest, PreloadFillsTheCacheWithinBudget) {
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), Prefetcher::Options{}, nullptr);
  p.Preload(Store::kRootIno);
  p.WaitIdle();
  Prefetcher::Stats st = p.stats();
  EXPECT_TRUE(st.preload_done);
  EXPECT_STREQ(st.preload_state, "done");
  EXPECT_EQ(st.preload_total_files, 52u);
  EXPECT_EQ(st.preload_files, 52u);  // 150 KB fits the 1 MiB cache
  EXPECT_GT(st.preload_total_bytes, 0u);
  EXPECT_EQ(st.preload_bytes, st.preload_total_bytes);
  EXPECT_GE(st.preload_seconds, 0.0);
  EXPECT_LE(cache_->stats().bytes, 1u << 20);
  InodeRecord r;
  Ino("a/f120", &r);
  EXPECT_TRUE(store_->ChunkCached(r, 0));
}

// Preload's progress as `dsfs stats` shows it (Filesystem::StatsObject): off until asked for;
// then its state, how far of the totals, for how long; a cache too small for the tree stops
// it, and the stats say so.
TEST_F(PrefetcherTest, PreloadProgressIsInTheStats) {
  Prefetcher::Options o;
  {
    Prefetcher idle(store_, cache_.get(), fs_->inode_space(), o, nullptr);
    fs_->SetPrefetcher(&idle);
    nlohmann::json j = nlohmann::json::parse(fs_->StatsJson());
    EXPECT_EQ(j["preload"]["state"], "off") << j.dump();
    fs_->SetPrefetcher(nullptr);
  }
  Prefetcher p(store_, cache_.get(), fs_->inode_space(), o, nullptr);
  fs_->SetPrefetcher(&p);
  p.Preload(Store::kRootIno);
  p.WaitIdle();
  nlohmann::json j = nlohmann::json::parse(fs_->StatsJson());
  fs_->SetPrefetcher(nullptr);
  const nlohmann::json& pl = j["preload"];
  EXPECT_EQ(pl["state"], "done") << j.dump();
  EXPECT_EQ(pl["files"], 52) << j.dump();
  EXPECT_EQ(pl["total_files"], 52) << j.dump();
  EXPECT_EQ(pl["bytes"], pl["total_bytes"]) << j.dump();
  EXPECT_EQ(pl["percent"], 100.0) << j.dump();
  EXPECT_EQ(pl["seconds_left"], 0.0) << j.dump();
  EXPECT_TRUE(pl.contains("seconds") && pl.contains("bytes_per_s")) << j.dump();
  EXPECT_EQ(pl["done"], 1) << j.dump();

  // A cache of 64 KiB for 150 KB of files: preload stops when it is nearly full.
  auto small = std::make_shared<ByteCache>(64 << 10, 1);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(table_), &store, small).ok());
  Prefetcher q(store.get(), small.get(), fs_->inode_space(), o, nullptr);
  q.Preload(Store::kRootIno);
  q.WaitIdle();
  Prefetcher::Stats st = q.stats();
  EXPECT_STREQ(st.preload_state, "stopped: cache full");
  EXPECT_LT(st.preload_files, st.preload_total_files);
}

}  // namespace
}  // namespace dsfs
