#include "cache/byte_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace dsfs {
namespace {

ByteCache::Value Bytes(size_t n, char c) { return std::make_shared<const std::string>(n, c); }

// One namespace is enough for the tests of the cache itself.
constexpr ByteCache::Id kId = 1;

TEST(ByteCacheTest, NamespacesKeepEqualKeysApart) {
  ByteCache cache(1 << 20, 4);
  const ByteCache::Id a = cache.NewId(), b = cache.NewId();
  EXPECT_NE(a, b);
  cache.Insert(a, 7, Bytes(10, 'a'));
  EXPECT_EQ(cache.Get(b, 7), nullptr);
  EXPECT_FALSE(cache.Contains(b, 7));
  cache.Insert(b, 7, Bytes(10, 'b'));
  EXPECT_EQ(*cache.Get(a, 7), std::string(10, 'a'));
  EXPECT_EQ(*cache.Get(b, 7), std::string(10, 'b'));
  ByteCache::Value v;
  ASSERT_TRUE(cache
                  .GetOrLoad(
                      cache.NewId(), 7,
                      [](ByteCache::Value* out) {
                        *out = Bytes(10, 'c');
                        return Status::OK();
                      },
                      &v)
                  .ok());
  EXPECT_EQ(*v, std::string(10, 'c'));
  EXPECT_EQ(cache.stats().entries, 3u);
}

TEST(ByteCacheTest, HitsMissesAndStats) {
  ByteCache cache(1 << 20, 4);
  EXPECT_EQ(cache.Get(kId, 1), nullptr);
  cache.Insert(kId, 1, Bytes(100, 'a'));
  auto v = cache.Get(kId, 1);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, std::string(100, 'a'));
  cache.Insert(kId, 1, Bytes(100, 'b'));  // present: kept as is
  EXPECT_EQ(*cache.Get(kId, 1), std::string(100, 'a'));
  EXPECT_TRUE(cache.Contains(kId, 1));
  EXPECT_FALSE(cache.Contains(kId, 2));
  auto st = cache.stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.inserts, 1u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, 100 + ByteCache::kEntryOverhead);
}

TEST(ByteCacheTest, BudgetHoldsUnderAScanTenTimesItsSize) {
  const uint64_t budget = 1 << 20;
  ByteCache cache(budget, 8);
  for (uint64_t k = 0; k < 10 * budget / 1000; ++k) {
    cache.Insert(kId, k, Bytes(1000, 'x'));
    ASSERT_LE(cache.stats().bytes, budget);
  }
  auto st = cache.stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.bytes, budget / 2);  // the budget is used, not just respected
}

TEST(ByteCacheTest, ReferencedEntriesSurviveAScan) {
  ByteCache cache(64 * (1000 + ByteCache::kEntryOverhead), 1);
  for (uint64_t k = 0; k < 32; ++k) cache.Insert(kId, k, Bytes(1000, 'h'));
  // A hot working set, touched between every inserted block of a one-pass scan.
  for (uint64_t k = 1000; k < 1200; ++k) {
    for (uint64_t h = 0; h < 8; ++h)
      ASSERT_NE(cache.Get(kId, h), nullptr) << "hot key " << h << " lost at " << k;
    cache.Insert(kId, k, Bytes(1000, 's'));
  }
}

TEST(ByteCacheTest, ValuesOutliveEviction) {
  ByteCache cache(2 * (1000 + ByteCache::kEntryOverhead), 1);
  cache.Insert(kId, 1, Bytes(1000, 'a'));
  auto held = cache.Get(kId, 1);
  for (uint64_t k = 2; k < 10; ++k) cache.Insert(kId, k, Bytes(1000, 'b'));
  EXPECT_EQ(*held, std::string(1000, 'a'));
}

TEST(ByteCacheTest, ZeroCapacityAndOversizedValuesAreNotCached) {
  ByteCache off(0);
  off.Insert(kId, 1, Bytes(10, 'a'));
  EXPECT_EQ(off.Get(kId, 1), nullptr);
  ByteCache small(4096, 1);
  small.Insert(kId, 1, Bytes(8192, 'a'));
  EXPECT_EQ(small.Get(kId, 1), nullptr);
  EXPECT_EQ(small.stats().bytes, 0u);
}

TEST(ByteCacheTest, SetCapacityEvictsDownToItAndRaisesBackNoHigherThanMade) {
  ByteCache cache(1 << 20, 4);
  for (uint64_t k = 0; k < 64; ++k) cache.Insert(kId, k, Bytes(10000, 'x'));
  ByteCache::Value held = cache.Get(kId, 63);
  ASSERT_GT(cache.stats().bytes, 600000u);
  cache.SetCapacity(100000);
  EXPECT_EQ(cache.capacity_bytes(), 100000u);
  EXPECT_LE(cache.stats().bytes, 100000u);
  EXPECT_EQ(cache.stats().capacity_bytes, 100000u);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(*held, std::string(10000, 'x'));  // a value held survives its eviction
  for (uint64_t k = 100; k < 200; ++k) cache.Insert(kId, k, Bytes(10000, 'y'));
  EXPECT_LE(cache.stats().bytes, 100000u);
  cache.SetCapacity(0);  // empties it; nothing is kept meanwhile
  EXPECT_EQ(cache.stats().bytes, 0u);
  cache.Insert(kId, 1, Bytes(10, 'z'));
  EXPECT_EQ(cache.Get(kId, 1), nullptr);
  cache.SetCapacity(64ull << 20);  // never above what it was made with
  EXPECT_EQ(cache.capacity_bytes(), 1u << 20);
  cache.Insert(kId, 1, Bytes(10, 'z'));
  EXPECT_EQ(*cache.Get(kId, 1), std::string(10, 'z'));
  ByteCache disabled(0);
  disabled.SetCapacity(1 << 20);
  EXPECT_EQ(disabled.capacity_bytes(), 0u);
}

TEST(ByteCacheTest, ConcurrentUseKeepsBudgetAndValues) {
  const uint64_t budget = 256 << 10;
  ByteCache cache(budget, 16);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 20000; ++i) {
        uint64_t k = (i * 7919 + t) % 3000;
        auto v = cache.Get(kId, k);
        if (v && (*v)[0] != static_cast<char>('a' + k % 26)) ++wrong;
        if (!v) cache.Insert(kId, k, Bytes(500 + k % 700, static_cast<char>('a' + k % 26)));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.stats().bytes, budget);
}

}  // namespace
}  // namespace dsfs
