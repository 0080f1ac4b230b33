// ByteCache: a RAM cache of immutable byte buffers (decompressed payloads, later decoded
// images) under one byte budget.
//
// Sharded by key, each shard guarded by its own mutex, so concurrent readers rarely contend.
// Eviction is CLOCK (second chance) per shard: a hit only sets a bit, no list is relinked, and a
// one-pass scan of a store larger than the budget cycles through instead of thrashing the hot
// set it has not touched.
//
// Key namespaces (LevelDB's Cache::NewId()): each client takes an id with NewId() and keys its
// entries by (id, key), so clients sharing one cache (the store's payloads, the views' rendered
// images) never collide and none carves bits out of another's keys.
//
// Thread safety: every method may be called from any number of threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace dsfs {

class ByteCache {
 public:
  using Value = std::shared_ptr<const std::string>;
  // A client's namespace: what NewId() returned.
  using Id = uint64_t;

  // Per-entry bookkeeping charged to the budget on top of the value's bytes.
  static constexpr uint64_t kEntryOverhead = 96;

  // `capacity_bytes` is the budget for all shards together; 0 disables the cache.
  explicit ByteCache(uint64_t capacity_bytes, int shards = 16);
  ByteCache(const ByteCache&) = delete;
  ByteCache& operator=(const ByteCache&) = delete;

  // A namespace no other client of this cache has: ids are never reused (the first is 1).
  Id NewId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // The value cached under (`id`, `key`), or nullptr. Callers hold the returned pointer as long
  // as they use the bytes; eviction only drops the cache's reference.
  Value Get(Id id, uint64_t key);
  // True if (`id`, `key`) is cached (no hit/miss counted, no reference bit set).
  bool Contains(Id id, uint64_t key);
  // Caches `value` under (`id`, `key`) (replacing nothing: a key already present is kept),
  // evicting as needed. A value larger than max_value_bytes() is not cached.
  void Insert(Id id, uint64_t key, Value value);
  // The largest value Insert keeps (a shard's budget less the overhead); 0 when disabled.
  uint64_t max_value_bytes() const;
  // The budget of all shards together (what SetCapacity last set).
  uint64_t capacity_bytes() const { return capacity_.load(std::memory_order_relaxed); }
  // Lowers (or raises back) the budget to `capacity_bytes`, evicting down to it at once (CLOCK
  // order, as inserts do): the memory guard's lever under pressure (fs/memory_guard.h). Never
  // above the capacity the cache was made with, and a disabled cache (made with 0) stays
  // disabled; lowering it to 0 empties it and keeps nothing until it is raised again. Values
  // that readers still hold are freed when they let go.
  void SetCapacity(uint64_t capacity_bytes);
  // The value under (`id`, `key`), made by `load` if it is not cached: one load per key at a
  // time, whose result (value or error) every caller waiting for the same key shares; cached if
  // it fits. REQUIRES: `load` does not call GetOrLoad for the same key.
  [[nodiscard]] Status GetOrLoad(Id id, uint64_t key, const std::function<Status(Value*)>& load,
                                 Value* out);

  struct Stats {
    uint64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
    uint64_t bytes = 0;  // charged bytes, values plus overhead
    uint64_t entries = 0;
    uint64_t capacity_bytes = 0;
  };
  Stats stats() const;

 private:
  struct Key {
    Id id;
    uint64_t key;
    bool operator==(const Key& o) const { return id == o.id && key == o.key; }
  };
  // The first namespace (the store's, in a mount) hashes and shards as plain keys always did.
  static uint64_t Hash(const Key& k) {
    return (k.key ^ ((k.id - 1) * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B97F4A7C15ull;
  }
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(Hash(k) >> 8); }
  };
  struct Entry {
    Key key;
    Value value;
    bool referenced;
  };
  struct Shard {
    mutable std::mutex mu;     // guards everything below
    std::vector<Entry> slots;  // CLOCK ring; empty slots have no value
    std::vector<size_t> free_slots;
    std::unordered_map<Key, size_t, KeyHash> index;  // key -> slot
    size_t hand = 0;
    uint64_t bytes = 0;
    uint64_t capacity = 0;
  };
  // A load in progress (GetOrLoad); guarded by flights_mu_.
  struct Flight {
    bool done = false;
    Status status;
    Value value;
  };
  Value Peek(const Key& key);  // Get without counting a hit or miss or setting the reference bit
  Shard& ShardFor(const Key& key) { return shards_[Hash(key) >> 56 & mask_]; }
  static uint64_t Charge(const Value& v) { return v->size() + kEntryOverhead; }

  // Evicts from `s` (its mu held) until its bytes and `charge` more fit its capacity.
  void EvictLocked(Shard& s, uint64_t charge);

  std::vector<Shard> shards_;
  uint64_t mask_;
  const uint64_t initial_capacity_;
  std::atomic<uint64_t> capacity_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, evictions_{0};
  std::atomic<Id> next_id_{1};
  // Lock order: flights_mu_ before a shard's mu.
  std::mutex flights_mu_;
  std::condition_variable flight_done_;
  std::unordered_map<Key, std::shared_ptr<Flight>, KeyHash> flights_;
};

}  // namespace dsfs
