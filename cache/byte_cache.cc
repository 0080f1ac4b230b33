#include "cache/byte_cache.h"

#include <algorithm>
#include <bit>
#include <exception>

namespace dsfs {

ByteCache::ByteCache(uint64_t capacity_bytes, int shards)
    : initial_capacity_(capacity_bytes), capacity_(capacity_bytes) {
  // A power of two, so the shard is a few bits of the key's hash.
  size_t n = std::bit_ceil(static_cast<size_t>(std::max(1, shards)));
  shards_ = std::vector<Shard>(n);
  mask_ = n - 1;
  for (auto& s : shards_) s.capacity = capacity_bytes / n;
}

ByteCache::Value ByteCache::Get(Id id, uint64_t k) {
  const Key key{id, k};
  if (capacity_bytes() == 0) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  auto it = s.index.find(key);
  if (it == s.index.end()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Entry& e = s.slots[it->second];
  e.referenced = true;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return e.value;
}

bool ByteCache::Contains(Id id, uint64_t k) {
  const Key key{id, k};
  if (capacity_bytes() == 0) return false;
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  return s.index.count(key) > 0;
}

void ByteCache::Insert(Id id, uint64_t k, Value value) {
  const Key key{id, k};
  if (!value) return;
  uint64_t charge = Charge(value);
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  if (charge > s.capacity || s.index.count(key)) return;
  EvictLocked(s, charge);
  size_t slot;
  if (!s.free_slots.empty()) {
    slot = s.free_slots.back();
    s.free_slots.pop_back();
  } else {
    slot = s.slots.size();
    s.slots.push_back({});
  }
  // New entries start unreferenced: a block read once (a scan) is the first to go.
  s.slots[slot] = Entry{key, std::move(value), false};
  s.index.emplace(key, slot);
  s.bytes += charge;
  inserts_.fetch_add(1, std::memory_order_relaxed);
}

void ByteCache::EvictLocked(Shard& s, uint64_t charge) {
  // CLOCK: sweep from the hand, clearing reference bits, evicting the first entry without one.
  while (s.bytes + charge > s.capacity && s.bytes > 0) {
    if (s.hand >= s.slots.size()) s.hand = 0;
    Entry& e = s.slots[s.hand];
    if (e.value) {
      if (e.referenced) {
        e.referenced = false;
      } else {
        s.bytes -= Charge(e.value);
        s.index.erase(e.key);
        e.value.reset();
        s.free_slots.push_back(s.hand);
        evictions_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    ++s.hand;
  }
}

void ByteCache::SetCapacity(uint64_t capacity_bytes) {
  if (initial_capacity_ == 0) return;
  capacity_bytes = std::min(capacity_bytes, initial_capacity_);
  capacity_.store(capacity_bytes, std::memory_order_relaxed);
  const uint64_t per_shard = capacity_bytes / shards_.size();
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    s.capacity = per_shard;
    EvictLocked(s, 0);
  }
}

uint64_t ByteCache::max_value_bytes() const {
  uint64_t shard = capacity_bytes() / shards_.size();
  return shard > kEntryOverhead ? shard - kEntryOverhead : 0;
}

ByteCache::Value ByteCache::Peek(const Key& key) {
  if (capacity_bytes() == 0) return nullptr;
  Shard& s = ShardFor(key);
  std::lock_guard lock(s.mu);
  auto it = s.index.find(key);
  return it == s.index.end() ? nullptr : s.slots[it->second].value;
}

Status ByteCache::GetOrLoad(Id id, uint64_t k, const std::function<Status(Value*)>& load,
                            Value* out) {
  if ((*out = Get(id, k))) return Status::OK();
  const Key key{id, k};
  std::shared_ptr<Flight> flight;
  {
    std::unique_lock lock(flights_mu_);
    auto it = flights_.find(key);
    if (it != flights_.end()) {
      // Someone is loading it: share that load's result.
      flight = it->second;
      flight_done_.wait(lock, [&] { return flight->done; });
      *out = flight->value;
      return flight->status;
    }
    // A load that finished between Get and here has cached its value already.
    if ((*out = Peek(key))) return Status::OK();
    flight = std::make_shared<Flight>();
    flights_.emplace(key, flight);
  }
  Value value;
  Status s;
  try {
    s = load(&value);
  } catch (const std::exception& e) {
    // Waiters must be woken whatever happens (bad_alloc decoding a huge image).
    s = Status::IOError(std::string("loading a cache entry: ") + e.what());
  }
  if (s.ok()) Insert(id, k, value);
  {
    std::lock_guard lock(flights_mu_);
    flight->status = s;
    flight->value = value;
    flight->done = true;
    flights_.erase(key);
  }
  flight_done_.notify_all();
  *out = std::move(value);
  return s;
}

ByteCache::Stats ByteCache::stats() const {
  Stats st;
  st.hits = hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.inserts = inserts_.load(std::memory_order_relaxed);
  st.evictions = evictions_.load(std::memory_order_relaxed);
  st.capacity_bytes = capacity_bytes();
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    st.bytes += s.bytes;
    st.entries += s.index.size();
  }
  return st;
}

}  // namespace dsfs
