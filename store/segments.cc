#include "store/segments.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "common/coding.h"

namespace dsfs {
namespace {

constexpr size_t kIndexHeaderBytes = 4 + 4 + 8 + 8;
constexpr size_t kEntryBytes = 4 + 4 + 8;
// Stored segments above this size are announced to the backend before they are read (one
// request from a cold disk instead of a page fault at a time).
constexpr size_t kWillNeedBytes = 16 << 10;

struct DCtx {
  DCtx() : ctx(ZSTD_createDCtx()) {}
  ~DCtx() { ZSTD_freeDCtx(ctx); }
  ZSTD_DCtx* ctx;
};

// A thread's most recently used segments of one kind of table, replaced in turn (FIFO): a
// slot lives through `N` insertions.
template <int N>
struct ThreadRing {
  struct Slot {
    uint64_t serial = 0;  // 0: empty (store serials start at 1)
    uint64_t segment = 0;
    SegmentedTable::Segment value;
  };
  Slot slots[N];
  int next = 0;

  const SegmentedTable::Segment* Find(uint64_t serial, uint64_t segment) const {
    for (const Slot& s : slots) {
      if (s.serial == serial && s.segment == segment && s.value) return &s.value;
    }
    return nullptr;
  }
  const std::string* Insert(uint64_t serial, uint64_t segment, SegmentedTable::Segment v) {
    Slot& s = slots[next];
    next = (next + 1) % N;
    s.serial = serial;
    s.segment = segment;
    s.value = std::move(v);
    return s.value.get();
  }
};

thread_local ThreadRing<SegmentedTable::kNameRingSlots> t_name_ring;
thread_local ThreadRing<SegmentedTable::kInodeRingSlots> t_inode_ring;

}  // namespace

std::string SegmentIndex::Serialize() const {
  std::string out;
  PutFixed32(&out, inodes_per_segment);
  PutFixed32(&out, flags);
  PutFixed64(&out, inodes.size());
  PutFixed64(&out, names.size());
  for (const auto* list : {&inodes, &names}) {
    for (const SegmentEntry& e : *list) {
      PutFixed32(&out, e.raw_bytes);
      PutFixed32(&out, e.stored_bytes);
      PutFixed64(&out, e.sum);
    }
  }
  PutFixed64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Status SegmentIndex::Parse(std::string_view bytes, SegmentIndex* index) {
  if (bytes.size() < kIndexHeaderBytes + 8) return Status::Corruption("segment index too short");
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) !=
      DecodeFixed64(bytes.data() + bytes.size() - 8)) {
    return Status::Corruption("segment index checksum mismatch");
  }
  SegmentIndex ix;
  ix.inodes_per_segment = DecodeFixed32(bytes.data());
  ix.flags = DecodeFixed32(bytes.data() + 4);
  if ((ix.flags & ~kSegmentFlags) != 0 || !(ix.flags & kSegmentTransposed)) {
    return Status::Corruption("segment index: unknown flags");
  }
  const uint64_t ni = DecodeFixed64(bytes.data() + 8), nn = DecodeFixed64(bytes.data() + 16);
  const uint64_t room = (bytes.size() - kIndexHeaderBytes - 8) / kEntryBytes;
  if (ni > room || nn > room - ni ||
      bytes.size() != kIndexHeaderBytes + 8 + kEntryBytes * (ni + nn)) {
    return Status::Corruption("segment index has the wrong size");
  }
  const char* p = bytes.data() + kIndexHeaderBytes;
  for (uint64_t i = 0; i < ni + nn; ++i, p += kEntryBytes) {
    SegmentEntry e{DecodeFixed32(p), DecodeFixed32(p + 4), DecodeFixed64(p + 8)};
    if (e.raw_bytes == 0 || e.raw_bytes > kMaxSegmentRawBytes || e.stored_bytes == 0 ||
        e.stored_bytes > ZSTD_compressBound(e.raw_bytes)) {
      return Status::Corruption("segment index: impossible segment size");
    }
    (i < ni ? ix.inodes : ix.names).push_back(e);
  }
  *index = std::move(ix);
  return Status::OK();
}

namespace {

// Byte c of record r of `in` (records of `rb` bytes) to c * records + r of `out`; and back.
void Transpose(std::string_view in, uint32_t rb, char* out) {
  const size_t m = in.size() / rb;
  for (size_t r = 0; r < m; ++r) {
    for (uint32_t c = 0; c < rb; ++c) out[c * m + r] = in[r * rb + c];
  }
}
void Untranspose(std::string_view in, uint32_t rb, char* out) {
  const size_t m = in.size() / rb;
  for (uint32_t c = 0; c < rb; ++c) {
    const char* col = in.data() + c * m;
    for (size_t r = 0; r < m; ++r) out[r * rb + c] = col[r];
  }
}

// Compresses raw[ends[i-1], ends[i]) into segment i (records of `layout`, if given:
// delta-coded and transposed first), on up to `threads` threads.
Status CompressSegments(std::string_view raw, const std::vector<uint64_t>& ends,
                        const InodeLayout* layout, int level, int threads, char space,
                        std::vector<SegmentEntry>* entries,
                        std::vector<std::pair<std::string, std::string>>* records) {
  const size_t n = ends.size();
  std::vector<std::string> stored(n);
  std::vector<SegmentEntry> es(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    if (!cctx) {
      failed = true;
      return;
    }
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      const uint64_t begin = i == 0 ? 0 : ends[i - 1];
      std::string_view seg = raw.substr(begin, ends[i] - begin);
      std::string transposed;
      if (layout) {
        std::string deltas(seg);
        layout->DeltaEncode(deltas.data(), deltas.size() / layout->record_bytes());
        transposed.resize(seg.size());
        Transpose(deltas, layout->record_bytes(), transposed.data());
        seg = transposed;
      }
      std::string z(ZSTD_compressBound(seg.size()), '\0');
      size_t zn = ZSTD_compress2(cctx, z.data(), z.size(), seg.data(), seg.size());
      if (ZSTD_isError(zn)) {
        failed = true;
        break;
      }
      if (zn < seg.size()) {
        z.resize(zn);
      } else {
        z.assign(seg);  // stored as it is
      }
      es[i].raw_bytes = static_cast<uint32_t>(seg.size());
      es[i].stored_bytes = static_cast<uint32_t>(z.size());
      es[i].sum = XXH3_64bits(z.data(), z.size());
      stored[i] = std::move(z);
    }
    ZSTD_freeCCtx(cctx);
  };
  const int t =
      static_cast<int>(std::clamp<size_t>(n, 1, static_cast<size_t>(std::max(1, threads))));
  std::vector<std::thread> pool;
  for (int i = 1; i < t; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (failed) return Status::IOError("metadata segments: zstd failed");
  for (size_t i = 0; i < n; ++i) records->emplace_back(SegmentKey(space, i), std::move(stored[i]));
  *entries = std::move(es);
  return Status::OK();
}

}  // namespace

Status EncodeMetadata(const std::vector<InodeRecord>& inodes, std::string_view inode_bytes,
                      const InodeLayout& layout, std::string_view names, uint32_t segment_bytes,
                      int level, int threads, MetadataRecords* out) {
  const uint32_t record_bytes = layout.record_bytes();
  if (record_bytes == 0 || segment_bytes == 0 || inode_bytes.size() % record_bytes != 0) {
    return Status::InvalidArgument("metadata segments: bad table or segment size");
  }
  *out = MetadataRecords{};
  // Inode segments: a fixed number of whole records each.
  const uint64_t per = std::max<uint64_t>(1, segment_bytes / record_bytes);
  out->index.inodes_per_segment = static_cast<uint32_t>(std::min<uint64_t>(per, UINT32_MAX));
  std::vector<uint64_t> inode_ends;
  for (uint64_t end = 0; end < inode_bytes.size();) {
    end = std::min<uint64_t>(end + per * record_bytes, inode_bytes.size());
    inode_ends.push_back(end);
  }
  // Name segments: cut only where no name or target crosses, once a segment holds
  // kNameSegmentFactor * segment_bytes (a single longer item makes a longer segment).
  const uint64_t name_segment_bytes =
      std::min<uint64_t>(uint64_t{kNameSegmentFactor} * segment_bytes, kMaxSegmentRawBytes);
  std::vector<std::pair<uint64_t, uint64_t>> items;  // [begin, end)
  items.reserve(inodes.size());
  for (const InodeRecord& r : inodes) {
    if (r.name_len > 0) items.emplace_back(r.name_off, r.name_off + r.name_len);
    if ((r.mode & 0170000) == 0120000 && r.size > 0) items.emplace_back(r.data, r.data + r.size);
  }
  if (!std::is_sorted(items.begin(), items.end())) std::sort(items.begin(), items.end());
  std::vector<uint64_t> name_ends;
  uint64_t seg_start = 0, covered = 0;  // covered: the end of every item seen so far
  for (const auto& [begin, end] : items) {
    if (begin >= covered && begin > seg_start && end - seg_start > name_segment_bytes) {
      name_ends.push_back(begin);
      seg_start = begin;
    }
    covered = std::max(covered, end);
  }
  if (names.size() > seg_start) name_ends.push_back(names.size());
  for (size_t i = 0; i < name_ends.size(); ++i) {
    if (name_ends[i] - (i ? name_ends[i - 1] : 0) > kMaxSegmentRawBytes) {
      return Status::InvalidArgument("a symbolic link target of over 16 MiB");
    }
  }
  DSFS_RETURN_IF_ERROR(CompressSegments(inode_bytes, inode_ends, &layout, level, threads,
                                        kInodeSegmentSpace, &out->index.inodes, &out->records));
  DSFS_RETURN_IF_ERROR(CompressSegments(names, name_ends, nullptr, level, threads,
                                        kNameSegmentSpace, &out->index.names, &out->records));
  out->records.emplace_back(std::string(kSegmentIndexKey), out->index.Serialize());
  return Status::OK();
}

Status DecodeSegment(std::string_view what, const SegmentEntry& e, std::string_view stored,
                     std::string* raw, InodeCoding inodes) {
  const uint32_t record_bytes = inodes.layout ? inodes.layout->record_bytes() : 0;
  if (stored.size() != e.stored_bytes) {
    return Status::Corruption(std::string(what) + " has the wrong size");
  }
  if (XXH3_64bits(stored.data(), stored.size()) != e.sum) {
    return Status::Corruption(std::string(what) + ": checksum mismatch");
  }
  if (record_bytes > 0 && e.raw_bytes % record_bytes != 0) {
    return Status::Corruption(std::string(what) + " is not whole records");
  }
  thread_local DCtx dctx;
  thread_local std::string scratch;  // the transposed bytes of an inode segment
  std::string* dst = record_bytes > 0 ? &scratch : raw;
  if (e.stored_bytes == e.raw_bytes) {
    dst->assign(stored);
  } else {
    dst->resize(e.raw_bytes);
    size_t n =
        ZSTD_decompressDCtx(dctx.ctx, dst->data(), dst->size(), stored.data(), stored.size());
    if (ZSTD_isError(n) || n != e.raw_bytes) {
      return Status::Corruption(std::string(what) + " does not decompress");
    }
  }
  if (record_bytes > 0) {
    raw->resize(e.raw_bytes);
    Untranspose(scratch, record_bytes, raw->data());
    if (scratch.capacity() > (1u << 20)) std::string().swap(scratch);
    if (inodes.deltas) inodes.layout->DeltaDecode(raw->data(), raw->size() / record_bytes);
  }
  return Status::OK();
}

Status SegmentedTable::Init(std::string name, char space, std::vector<SegmentEntry> entries,
                            KvReader* kv, ByteCache* cache, uint64_t serial, InodeCoding inodes) {
  name_ = std::move(name);
  inodes_ = inodes;
  space_ = space;
  entries_ = std::move(entries);
  kv_ = kv;
  cache_ = cache;
  id_ = cache ? cache->NewId() : 0;
  serial_ = serial;
  starts_.clear();
  starts_.reserve(entries_.size() + 1);
  uint64_t off = 0;
  stored_bytes_ = 0;
  for (const SegmentEntry& e : entries_) {
    starts_.push_back(off);
    off += e.raw_bytes;
    stored_bytes_ += e.stored_bytes;
  }
  starts_.push_back(off);
  return Status::OK();
}

uint64_t SegmentedTable::SegmentOf(uint64_t off) const {
  // starts_ has the table's end last: the first start after `off`, less one.
  auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, off);
  return static_cast<uint64_t>(it - starts_.begin()) - 1;
}

Status SegmentedTable::Load(uint64_t s, std::string* raw) const {
  const std::string what = name_ + " segment " + std::to_string(s);
  if (s >= entries_.size()) return Status::Corruption(what + " out of range");
  PinnedValue v;
  Status st = kv_->Get(SegmentKey(space_, s), &v);
  if (st.IsNotFound()) return Status::Corruption("store is missing " + what);
  DSFS_RETURN_IF_ERROR(st);
  if (v.size() > kWillNeedBytes) kv_->WillNeed(v.data());
  return DecodeSegment(what, entries_[s], v.data(), raw, inodes_);
}

Status SegmentedTable::Get(uint64_t s, Segment* out) const {
  const Segment* hit =
      space_ == kNameSegmentSpace ? t_name_ring.Find(serial_, s) : t_inode_ring.Find(serial_, s);
  if (hit) {
    *out = *hit;
    return Status::OK();
  }
  auto load = [&](Segment* v) -> Status {
    auto raw = std::make_shared<std::string>();
    DSFS_RETURN_IF_ERROR(Load(s, raw.get()));
    *v = std::move(raw);
    return Status::OK();
  };
  if (!cache_) return load(out);
  return cache_->GetOrLoad(id_, s, load, out);
}

Status SegmentedTable::Pinned(uint64_t s, const std::string** out) const {
  const bool names = space_ == kNameSegmentSpace;
  const Segment* hit = names ? t_name_ring.Find(serial_, s) : t_inode_ring.Find(serial_, s);
  if (hit) {
    *out = hit->get();
    return Status::OK();
  }
  Segment v;
  DSFS_RETURN_IF_ERROR(Get(s, &v));
  *out = names ? t_name_ring.Insert(serial_, s, std::move(v))
               : t_inode_ring.Insert(serial_, s, std::move(v));
  return Status::OK();
}

Status SegmentedTable::View(uint64_t off, uint64_t len, bool ring, Segment* pin,
                            std::string_view* out) const {
  if (off > size() || len > size() - off) {
    return Status::Corruption(name_ + " table: reference out of range");
  }
  if (len == 0) {
    *out = {};
    return Status::OK();
  }
  const uint64_t s = SegmentOf(off);
  if (off + len > starts_[s + 1]) {
    return Status::Corruption(name_ + " table: a name crosses segments");
  }
  const std::string* seg;
  if (ring) {
    DSFS_RETURN_IF_ERROR(Pinned(s, &seg));
  } else {
    DSFS_RETURN_IF_ERROR(Get(s, pin));
    seg = pin->get();
  }
  *out = std::string_view(*seg).substr(off - starts_[s], len);
  return Status::OK();
}

Status ReadMetadataTables(KvReader* kv, std::string* inode_bytes, std::string* names) {
  PinnedValue lv;
  DSFS_RETURN_IF_ERROR(kv->Get(kLayoutKey, &lv));
  InodeLayout layout;
  DSFS_RETURN_IF_ERROR(InodeLayout::Parse(lv.data(), kSegmentedFormatVersion, &layout));
  PinnedValue v;
  DSFS_RETURN_IF_ERROR(kv->Get(kSegmentIndexKey, &v));
  SegmentIndex ix;
  DSFS_RETURN_IF_ERROR(SegmentIndex::Parse(v.data(), &ix));
  SegmentedTable inodes, name_table;
  DSFS_RETURN_IF_ERROR(inodes.Init("inode", kInodeSegmentSpace, ix.inodes, kv, nullptr, 0,
                                   {&layout, (ix.flags & kSegmentDeltas) != 0}));
  DSFS_RETURN_IF_ERROR(name_table.Init("name", kNameSegmentSpace, ix.names, kv, nullptr, 0));
  inode_bytes->clear();
  names->clear();
  std::string raw;
  for (uint64_t s = 0; s < inodes.segments(); ++s) {
    DSFS_RETURN_IF_ERROR(inodes.Load(s, &raw));
    inode_bytes->append(raw);
  }
  for (uint64_t s = 0; s < name_table.segments(); ++s) {
    DSFS_RETURN_IF_ERROR(name_table.Load(s, &raw));
    names->append(raw);
  }
  return Status::OK();
}

}  // namespace dsfs
