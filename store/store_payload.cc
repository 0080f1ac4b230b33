// The store's payloads: a file's chunks and stored pixels, read through the RAM cache (solid
// groups decompressed once, their records kept) or past it, verified, timed for the stats.
// The store's metadata (inodes, names, directories) and its opening: store/store.cc.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "common/coding.h"
#include "common/log.h"
#include "common/memory_limit.h"
#include "store/store.h"

namespace dsfs {
namespace {

// Decompression contexts are per thread: FUSE serves from several threads at once.
PayloadDecoder& ThreadDecoder() {
  thread_local PayloadDecoder decoder;
  return decoder;
}

// The solid group a thread decompressed last, for reads without the RAM cache (dsfs verify
// and the tools read a group's files one after another; the views read pixels): one group per
// thread at most.
struct GroupMemo {
  uint64_t serial = 0;  // Store::serial_ (never reused, unlike a Store's address)
  char space = 0;
  uint64_t last_id = 0;
  ByteCache::Value content;
};
thread_local GroupMemo t_group_memo;

// The solid groups a thread missed last in the RAM cache, to tell a scan (a directory's files
// one after another: the next miss falls in the same group or the next) from random reads
// (where it falls anywhere). Several, so that a few readers scanning at once through the same
// FUSE threads are still seen as scans.
struct RecentMisses {
  static constexpr int kGroups = 8;
  uint64_t serial = 0;
  char space = 0;
  uint64_t last_id[kGroups] = {};
  int next = 0;
  // True if a recent miss was in the group [first, last] or within one group's worth of
  // records of it, on either side. Then remembers this group.
  bool NearAndNote(uint64_t store_serial, char s, uint64_t first, uint64_t last) {
    if (serial != store_serial || space != s) {
      *this = {};
      serial = store_serial;
      space = s;
      for (uint64_t& id : last_id) id = UINT64_MAX;
    }
    const uint64_t span = last - first + 1;
    bool near = false;
    for (uint64_t id : last_id) {
      if (id != UINT64_MAX && id + 2 * span >= last && id <= last + span) near = true;
    }
    last_id[next] = last;
    next = (next + 1) % kGroups;
    return near;
  }
};
thread_local RecentMisses t_recent_misses;

// Where a thread decompresses a group for the RAM cache (ReadSolid), which then copies out the
// records it keeps.
thread_local std::string t_group_scratch;

}  // namespace

namespace {

// Whether a stored value lies on more than one page: those are announced to the backend before
// they are read (WillNeed). LMDB's map is read without readahead (MDB_NORDAHEAD), so each page
// of the value would otherwise be a fault of its own from a cold disk, one after the other: a
// 32 KiB group (12 KB stored) of photo crops cost 2 major faults a miss under pressure, where a
// 128 KiB one (45 KB, announced) cost none (docs/kernel.md).
bool OnSeveralPages(std::string_view v) {
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(v.data());
  return !v.empty() && begin / kPage != (begin + v.size() - 1) / kPage;
}
}  // namespace

Status Store::ReadChunk(const InodeRecord& rec, uint64_t index, bool use_cache,
                        ByteCache::Value* pin, std::string* scratch, std::string_view* out) const {
  uint64_t chunk = header_.chunk_bytes;
  uint64_t expected = std::min<uint64_t>(chunk, rec.size - index * chunk);
  Status s = ReadRecord(kPayloadSpace, rec.data + index, expected,
                        use_cache ? cache_.get() : nullptr, pin, scratch, out);
  if (!s.ok()) {
    return s.WithContext("payload " + std::to_string(rec.data + index) + " (chunk " +
                         std::to_string(index) + ")");
  }
  return s;
}

Status Store::ReadPixels(const InodeRecord& rec, std::string* rgb) const {
  if (!IsDecodableImage(rec) || rec.pixels == 0) {
    return Status::InvalidArgument("no stored pixels");
  }
  uint64_t total = uint64_t{rec.width} * rec.height * 3;
  uint64_t chunk = header_.chunk_bytes;
  rgb->clear();
  std::string scratch;
  for (uint64_t i = 0; i * chunk < total; ++i) {
    ByteCache::Value pin;
    std::string_view data;
    Status s = ReadRecord(kPixelSpace, rec.pixels - 1 + i, std::min(chunk, total - i * chunk),
                          nullptr, &pin, &scratch, &data);
    if (!s.ok()) return s.WithContext("pixel record " + std::to_string(rec.pixels - 1 + i));
    // Reserved only once a record matched its expected size: a claimed size alone (bounded by
    // IsDecodableImage anyway) allocates nothing.
    if (i == 0) rgb->reserve(total);
    rgb->append(data);
  }
  return Status::OK();
}

uint64_t DefaultMountCacheBytes(const Store& store) {
  return CacheBytesFor(DefaultBudgets(), ProcessMemoryLimit().bytes,
                       store.PageCacheFootprintBytes(), store.CacheBytesToHoldAll());
}

uint64_t Store::PageCacheFootprintBytes() const {
  constexpr uint64_t kPage = 4096;
  return std::max(header_.file_bytes, header_.file_count * kPage);
}

Status Store::ReadSolid(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                        ByteCache::Value* pin, std::string_view* out) const {
  if (cache) {
    if (ByteCache::Value v = cache->Get(cache_id_, id)) {
      if (v->size() != expected) return Status::Corruption("payload has the wrong size");
      *out = *v;
      *pin = std::move(v);
      return Status::OK();
    }
  }
  std::string key;
  uint64_t last_id = 0;
  Status s = kv_->SeekKey(PayloadKey(id, space), &key);
  if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, &last_id, space))) {
    return Status::Corruption("payload record missing");
  }
  DSFS_RETURN_IF_ERROR(s);
  GroupMemo& memo = t_group_memo;
  ByteCache::Value group;
  std::string_view content;
  PinnedValue v;
  bool neighbours = false;       // whether the whole group is out, for the RAM cache
  bool scratch_content = false;  // `content` is in t_group_scratch
  if (!cache && memo.serial == serial_ && memo.space == space && memo.last_id == last_id) {
    group = memo.content;
    content = *group;
  } else {
    s = kv_->Get(key, &v);
    if (s.IsNotFound()) return Status::Corruption("payload record missing");
    DSFS_RETURN_IF_ERROR(s);
    NoteBackendRead(v.size());
    if (OnSeveralPages(v.data())) kv_->WillNeed(v.data());
    PayloadView p;
    DSFS_RETURN_IF_ERROR(ParsePayload(v.data(), &p));
    if (p.raw_bytes > max_group_bytes_) return Status::Corruption("payload group too large");
    if (p.codec == Codec::kRaw && v.stable()) {
      // Zero copy: the value lives as long as the store (and the page cache is its cache).
      content = p.stored;
    } else if (cache) {
      // A miss of the RAM cache. Its neighbours are worth decompressing and caching when they
      // will be read: in a scan (this thread missed this group or the one beside it just
      // before) and where the cache holds enough groups to keep them until then (below).
      // Random reads get the group decompressed up to the wanted record and no further: the
      // index first, then the records up to this one's end (about half the group on average,
      // in whole zstd blocks). ParsePayload verified the compressed bytes, so the prefix is.
      // A cache that holds all the files (with a quarter to spare for its own bookkeeping)
      // keeps every neighbour until it is read, in any order.
      constexpr uint64_t kNeighbourGroups = 64;
      const uint64_t capacity = cache->capacity_bytes();
      const bool room = capacity >= kNeighbourGroups * p.raw_bytes;
      const bool holds_all = space == kPayloadSpace && capacity >= CacheBytesToHoldAll();
      bool whole = false, decided = false;
      auto need = [&](std::string_view pre) -> uint64_t {
        if (whole) return p.raw_bytes;
        if (pre.size() < 4) return 4;
        const uint32_t count = DecodeFixed32(pre.data());
        // A damaged index stops here: FindInGroup reports it.
        if (count == 0 || id > last_id || last_id - id >= count) return pre.size();
        const uint32_t i = count - 1 - static_cast<uint32_t>(last_id - id);
        const uint64_t index_to_mine = 4 + 4ull * (i + 1);
        if (pre.size() < index_to_mine) return index_to_mine;
        if (!decided) {
          decided = true;
          const bool near =
              t_recent_misses.NearAndNote(serial_, space, last_id - count + 1, last_id);
          whole = room && (holds_all || near);
          if (whole) return p.raw_bytes;
        }
        const uint32_t end = DecodeFixed32(pre.data() + 4 + 4ull * i);
        return 4 + 4ull * count + end;
      };
      // Into the thread's scratch buffer: the records wanted are copied out below.
      std::string& buf = t_group_scratch;
      if (buf.size() < p.raw_bytes) buf.resize(p.raw_bytes);
      uint64_t decoded = 0;
      DSFS_RETURN_IF_ERROR(TimedDecodePrefix(p, buf.data(), need, &decoded));
      content = std::string_view(buf).substr(0, decoded);
      scratch_content = true;
      neighbours = whole || (room && decoded == p.raw_bytes);
    } else {
      auto fresh = std::make_shared<std::string>(p.raw_bytes, '\0');
      DSFS_RETURN_IF_ERROR(TimedDecode(p, fresh->data()));
      group = std::move(fresh);
      content = *group;
    }
    DSFS_RETURN_IF_ERROR(CheckGroupStart(space, content, last_id));
    if (!cache && group) memo = {serial_, space, last_id, group};
  }
  std::string_view record;
  DSFS_RETURN_IF_ERROR(FindInGroup(content, last_id, id, &record));
  if (record.size() != expected) return Status::Corruption("payload has the wrong size");
  if (cache && (group || scratch_content)) {
    // Where the whole group is out (above), every record of it goes to the cache, each on its
    // own (as records of older versions are): its neighbours are a directory's next files,
    // read next, and a cache too small to hold a whole group still holds records. Not into a
    // cache of fewer than kNeighbourGroups groups, nor on random reads: they would evict a
    // group's worth of records on every miss (measured: 3.7k files/s instead of 15k through a
    // 2 MiB cache).
    const uint32_t count = DecodeFixed32(content.data());  // FindInGroup checked the index
    for (uint64_t other = last_id - count + 1; neighbours && other <= last_id; ++other) {
      std::string_view r;
      if (other == id || !FindInGroup(content, last_id, other, &r).ok()) continue;
      if (!cache->Contains(cache_id_, other)) {
        cache->Insert(cache_id_, other, std::make_shared<std::string>(r));
      }
    }
    auto mine = std::make_shared<std::string>(record);
    *out = *mine;
    cache->Insert(cache_id_, id, mine);
    *pin = std::move(mine);
    // A thread keeps a scratch buffer of one default-sized group, not one of the largest.
    constexpr size_t kKeepScratchBytes = 1 << 20;
    if (scratch_content && t_group_scratch.size() > kKeepScratchBytes) {
      std::string().swap(t_group_scratch);
    }
    return Status::OK();
  }
  *out = record;
  *pin = std::move(group);
  return Status::OK();
}

Status Store::ReadRecord(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                         ByteCache::Value* pin, std::string* scratch, std::string_view* out) const {
  if (id >= (space == kPixelSpace ? solid_pixel_from_ : solid_payload_from_)) {
    return ReadSolid(space, id, expected, cache, pin, out);
  }
  // Older versions: each record compressed alone, cached alone.
  if (cache) {
    if (ByteCache::Value v = cache->Get(cache_id_, id)) {
      *out = *v;
      *pin = std::move(v);
      return Status::OK();
    }
  }
  PinnedValue v;
  std::string key;
  std::string_view record;
  uint64_t last_id = 0;
  Status s = kv_->Seek(PayloadKey(id, space), &key, &v);
  if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, &last_id, space))) {
    s = Status::Corruption("payload record missing");
  }
  if (s.ok()) s = FindInGroup(v.data(), last_id, id, &record);
  if (s.ok()) s = CheckGroupStart(space, v.data(), last_id);
  if (s.ok()) {
    NoteBackendRead(record.size());
    if (OnSeveralPages(record)) kv_->WillNeed(record);
  }
  PayloadView p;
  if (s.ok()) s = ParsePayload(record, &p);
  if (s.ok() && p.raw_bytes != expected) s = Status::Corruption("payload has the wrong size");
  if (s.ok() && p.codec == Codec::kRaw && v.stable()) {
    // Zero copy: the value lives as long as the store (and the page cache is its cache).
    *out = p.stored;
    return Status::OK();
  }
  if (s.ok()) {
    if (cache) {
      auto fresh = std::make_shared<std::string>(p.raw_bytes, '\0');
      s = TimedDecode(p, fresh->data());
      if (s.ok()) {
        *out = *fresh;
        cache->Insert(cache_id_, id, fresh);
        *pin = std::move(fresh);
      }
    } else {
      scratch->resize(p.raw_bytes);
      s = TimedDecode(p, scratch->data());
      if (s.ok()) *out = *scratch;
    }
  }
  return s;
}

Status Store::CheckGroupStart(char space, std::string_view group, uint64_t last_id) const {
  // Records carry no id: a group found under a damaged key (one that grew, still below the
  // next group's) would hand out its neighbours' records, checksums and all. The group before
  // must end exactly where this one starts.
  if (group.size() < 4) return Status::Corruption("payload group too short");
  const uint32_t count = DecodeFixed32(group.data());
  if (count > last_id + 1) return Status::Corruption("payload group key damaged");
  const uint64_t first = last_id - count + 1;
  if (first == 0) return Status::OK();
  std::string key;
  uint64_t prev_id = 0;
  Status s = kv_->SeekKey(PayloadKey(first - 1, space), &key);
  if (!s.ok() && !s.IsNotFound()) return s;
  if (!s.ok() || !ParsePayloadKey(key, &prev_id, space) || prev_id != first - 1) {
    return Status::Corruption("payload group key damaged");
  }
  return Status::OK();
}

void Store::NoteBackendRead(uint64_t bytes) const {
  // Scanning a store larger than RAM through a memory map would otherwise grow the daemon's
  // RSS to the size of the store: every so often the backend lets go of mapped pages.
  constexpr uint64_t kReleaseEveryBytes = 16ull << 20;
  uint64_t total = read_since_release_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (total >= kReleaseEveryBytes &&
      read_since_release_.compare_exchange_strong(total, 0, std::memory_order_relaxed)) {
    kv_->ReleaseCachedMemory();
  }
}

void Store::CountDecodeSince(std::chrono::steady_clock::time_point t0) const {
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  decoded_chunks_.fetch_add(1, std::memory_order_relaxed);
  decode_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

Status Store::TimedDecode(const PayloadView& p, char* dst) const {
  auto t0 = std::chrono::steady_clock::now();
  Status s = ThreadDecoder().Decode(p, dict_.get(), dst);
  CountDecodeSince(t0);
  return s;
}

Status Store::TimedDecodePrefix(const PayloadView& p, char* dst,
                                const std::function<uint64_t(std::string_view)>& need,
                                uint64_t* decoded) const {
  auto t0 = std::chrono::steady_clock::now();
  Status s = ThreadDecoder().DecodePrefix(p, dict_.get(), dst, need, decoded);
  CountDecodeSince(t0);
  return s;
}

Status Store::Read(const InodeRecord& rec, uint64_t offset, uint64_t size, ReadBuffer* buf,
                   std::string_view* out) const {
  if (!IsReg(rec)) return Status::InvalidArgument("not a regular file");
  buf->pin.reset();
  if (offset >= rec.size || size == 0) {
    *out = {};
    return Status::OK();
  }
  size = std::min(size, rec.size - offset);
  uint64_t chunk = header_.chunk_bytes;
  uint64_t first = offset / chunk;
  uint64_t last = (offset + size - 1) / chunk;
  if (first == last) {
    std::string_view data;
    DSFS_RETURN_IF_ERROR(ReadChunk(rec, first, true, &buf->pin, &buf->bytes, &data));
    *out = data.substr(offset - first * chunk, size);
    return Status::OK();
  }
  // Spans chunks: assemble into buf->bytes.
  std::string result;
  result.reserve(size);
  std::string scratch;
  for (uint64_t i = first; i <= last; ++i) {
    std::string_view data;
    ByteCache::Value pin;
    DSFS_RETURN_IF_ERROR(ReadChunk(rec, i, true, &pin, &scratch, &data));
    uint64_t begin = (i == first) ? offset - first * chunk : 0;
    uint64_t end = (i == last) ? offset + size - last * chunk : data.size();
    result.append(data.substr(begin, end - begin));
  }
  buf->bytes = std::move(result);
  *out = buf->bytes;
  return Status::OK();
}

Status Store::Prefetch(const InodeRecord& rec, uint64_t index) const {
  if (!cache_ || !IsReg(rec) || index >= ChunkCount(rec)) return Status::OK();
  if (ChunkCached(rec, index)) return Status::OK();
  ByteCache::Value pin;
  std::string scratch;
  std::string_view data;
  return ReadChunk(rec, index, true, &pin, &scratch, &data);
}

bool Store::ReadMayFetch(const InodeRecord& rec, uint64_t offset, uint64_t size) const {
  if (!kv_->remote() || !IsReg(rec) || offset >= rec.size || size == 0) return false;
  if (!cache_) return true;
  const uint64_t chunk = header_.chunk_bytes;
  const uint64_t end = std::min(rec.size, offset + size);
  for (uint64_t i = offset / chunk; i <= (end - 1) / chunk; ++i) {
    if (!ChunkCached(rec, i)) return true;
  }
  return false;
}

bool Store::PixelsMayFetch(const InodeRecord& rec) const {
  if (!kv_->remote()) return false;
  // Stored pixels are read past the RAM cache (the views keep what they make of them).
  if (rec.pixels != 0) return true;
  return ReadMayFetch(rec, 0, rec.size);
}

}  // namespace dsfs

namespace dsfs {
namespace {

// The kZstdFrame group record in `v`, verified once per thread for a run of calls on it.
struct VerifiedGroup {
  uint64_t serial = 0, last_id = UINT64_MAX;
  const char* data = nullptr;
};
thread_local VerifiedGroup t_verified;

}  // namespace

Status Store::ForEachKernelGroup(const std::function<Status(const KernelGroup&)>& fn) const {
  if (header_.version < kKernelFormatVersion || solid_payload_from_ != 0) {
    return Status::NotSupported("store format " + std::to_string(header_.version) +
                                " keeps no kernel-readable groups (format " +
                                std::to_string(kKernelFormatVersion) + " does)");
  }
  if (kv_->remote()) return Status::NotSupported("a store in object storage");
  uint64_t id = 0;
  while (id < header_.payload_count) {
    std::string key;
    PinnedValue v;
    uint64_t last_id = 0;
    Status s = kv_->Seek(PayloadKey(id), &key, &v);
    if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, &last_id))) {
      return Status::Corruption("payload group missing after id " + std::to_string(id));
    }
    DSFS_RETURN_IF_ERROR(s);
    const std::string_view rec = v.data();
    PayloadHeader h;
    if (rec.size() < sizeof(h) + 4) return Status::Corruption("payload group too short");
    std::memcpy(&h, rec.data(), sizeof(h));
    KernelGroup g;
    g.last_id = last_id;
    g.count = DecodeFixed32(rec.data() + sizeof(h));
    const uint64_t raw = h.codec_and_size & kMaxPayloadBytes;
    const uint64_t index = 4 + 4ull * g.count;
    if (static_cast<Codec>(h.codec_and_size >> 30) != Codec::kZstdFrame || g.count == 0 ||
        last_id - id + 1 != g.count || index > raw || sizeof(h) + index > rec.size()) {
      return Status::Corruption("payload group " + std::to_string(last_id) +
                                " is no kernel frame of the records after " + std::to_string(id));
    }
    g.records_bytes = raw - index;
    g.frame_bytes = static_cast<uint32_t>(rec.size() - sizeof(h) - index);
    DSFS_RETURN_IF_ERROR(fn(g));
    id = last_id + 1;
  }
  return Status::OK();
}

namespace {

// The verified kZstdFrame record of the group keyed `last_id` in *v (PayloadView in *p).
Status GetKernelGroup(KvReader* kv, uint64_t serial, uint64_t last_id, PinnedValue* v,
                      PayloadView* p) {
  Status s = kv->Get(PayloadKey(last_id), v);
  if (s.IsNotFound()) return Status::Corruption("payload group missing");
  DSFS_RETURN_IF_ERROR(s);
  VerifiedGroup& memo = t_verified;
  const std::string_view rec = v->data();
  if (v->stable() && memo.serial == serial && memo.last_id == last_id && memo.data == rec.data()) {
    // Verified by this thread before, and its bytes have not moved (the store's map).
    PayloadHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    p->codec = static_cast<Codec>(h.codec_and_size >> 30);
    p->raw_bytes = h.codec_and_size & kMaxPayloadBytes;
    p->stored = rec.substr(sizeof(h));
    p->index_bytes = 4 + 4 * DecodeFixed32(p->stored.data());
    return Status::OK();
  }
  DSFS_RETURN_IF_ERROR(ParsePayload(rec, p));
  if (p->codec != Codec::kZstdFrame) return Status::Corruption("payload group is no kernel frame");
  memo = {serial, last_id, rec.data()};
  return Status::OK();
}

}  // namespace

Status Store::KernelGroupOf(uint64_t last_id, ByteCache::Value* pin, PinnedValue* v,
                            PayloadView* p) const {
  if (cache_) {
    if (ByteCache::Value c = cache_->Get(frame_cache_id_, last_id)) {
      p->codec = Codec::kZstdFrame;
      p->raw_bytes = DecodeFixed32(c->data());
      p->stored = std::string_view(*c).substr(4);
      p->index_bytes = 4 + 4 * DecodeFixed32(p->stored.data());
      *pin = std::move(c);
      return Status::OK();
    }
  }
  DSFS_RETURN_IF_ERROR(GetKernelGroup(kv_.get(), serial_, last_id, v, p)
                           .WithContext("payload group " + std::to_string(last_id)));
  NoteBackendRead(v->size());
  if (cache_) {
    auto c = std::make_shared<std::string>();
    c->reserve(4 + p->stored.size());
    PutFixed32(c.get(), p->raw_bytes);
    c->append(p->stored);
    cache_->Insert(frame_cache_id_, last_id, std::move(c));
  }
  return Status::OK();
}

Status Store::ReadKernelFrame(const KernelGroup& g, uint64_t offset, size_t len, char* dst) const {
  ByteCache::Value pin;
  PinnedValue v;
  PayloadView p;
  DSFS_RETURN_IF_ERROR(KernelGroupOf(g.last_id, &pin, &v, &p));
  const std::string_view frame = p.stored.substr(p.index_bytes);
  if (frame.size() != g.frame_bytes || p.raw_bytes - p.index_bytes != g.records_bytes ||
      p.index_bytes != 4 + 4ull * g.count) {
    return Status::Corruption("payload group " + std::to_string(g.last_id) +
                              " changed since the image was laid out");
  }
  if (offset > frame.size() || len > frame.size() - offset) {
    return Status::InvalidArgument("read past a group's frame");
  }
  std::memcpy(dst, frame.data() + offset, len);
  return Status::OK();
}

Status Store::KernelRecordOffset(uint64_t id, uint64_t* last_id, uint64_t* offset) const {
  std::string key;
  Status s = kv_->SeekKey(PayloadKey(id), &key);
  if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, last_id))) {
    return Status::Corruption("payload record missing");
  }
  DSFS_RETURN_IF_ERROR(s);
  ByteCache::Value pin;
  PinnedValue v;
  PayloadView p;
  DSFS_RETURN_IF_ERROR(KernelGroupOf(*last_id, &pin, &v, &p));
  const uint32_t count = DecodeFixed32(p.stored.data());
  if (*last_id - id >= count) return Status::Corruption("payload group does not hold its record");
  const uint32_t i = count - 1 - static_cast<uint32_t>(*last_id - id);
  *offset = i == 0 ? 0 : DecodeFixed32(p.stored.data() + 4 + 4ull * (i - 1));
  return Status::OK();
}

}  // namespace dsfs
