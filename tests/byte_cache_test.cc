#include "cache/byte_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace dsfs {
namespace {

ByteCache::Value Bytes(size_t n, char c) { return std::make_shared<const std::string>(n, c); }

TEST(ByteCacheTest, HitsMissesAndStats) {
  ByteCache cache(1 << 20, 4);
  EXPECT_EQ(cache.Get(1), nullptr);
  cache.Insert(1, Bytes(100, 'a'));
  auto v = cache.Get(1);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(*v, std::string(100, 'a'));
  cache.Insert(1, Bytes(100, 'b'));  // present: kept as is
  EXPECT_EQ(*cache.Get(1), std::string(100, 'a'));
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_FALSE(cache.Contains(2));
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
    cache.Insert(k, Bytes(1000, 'x'));
    ASSERT_LE(cache.stats().bytes, budget);
  }
  auto st = cache.stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.bytes, budget / 2);  // the budget is used, not just respected
}

TEST(ByteCacheTest, ReferencedEntriesSurviveAScan) {
  ByteCache cache(64 * (1000 + ByteCache::kEntryOverhead), 1);
  for (uint64_t k = 0; k < 32; ++k) cache.Insert(k, Bytes(1000, 'h'));
  // A hot working set, touched between every inserted block of a one-pass scan.
  for (uint64_t k = 1000; k < 1200; ++k) {
    for (uint64_t h = 0; h < 8; ++h)
      ASSERT_NE(cache.Get(h), nullptr) << "hot key " << h << " lost at " << k;
    cache.Insert(k, Bytes(1000, 's'));
  }
}

TEST(ByteCacheTest, ValuesOutliveEviction) {
  ByteCache cache(2 * (1000 + ByteCache::kEntryOverhead), 1);
  cache.Insert(1, Bytes(1000, 'a'));
  auto held = cache.Get(1);
  for (uint64_t k = 2; k < 10; ++k) cache.Insert(k, Bytes(1000, 'b'));
  EXPECT_EQ(*held, std::string(1000, 'a'));
}

TEST(ByteCacheTest, ZeroCapacityAndOversizedValuesAreNotCached) {
  ByteCache off(0);
  off.Insert(1, Bytes(10, 'a'));
  EXPECT_EQ(off.Get(1), nullptr);
  ByteCache small(4096, 1);
  small.Insert(1, Bytes(8192, 'a'));
  EXPECT_EQ(small.Get(1), nullptr);
  EXPECT_EQ(small.stats().bytes, 0u);
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
        auto v = cache.Get(k);
        if (v && (*v)[0] != static_cast<char>('a' + k % 26)) ++wrong;
        if (!v) cache.Insert(k, Bytes(500 + k % 700, static_cast<char>('a' + k % 26)));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.stats().bytes, budget);
}

}  // namespace
}  // namespace dsfs
