// Metadata segments (store format versions 3 and 4): the inode table and the name pool cut into
// segments, each zstd-compressed and stored as a record of its own, read lazily.
//
// Keys:
//   "M"              SegmentIndex: per segment of each table its raw size, stored size and
//                    the xxh3-64 of its stored bytes; checksummed itself
//   "I" + be64(s)    inode segment s: records [s * K, (s + 1) * K) of the inode table (K =
//                    inodes_per_segment; the last one may hold fewer)
//   "N" + be64(s)    name segment s: a run of the name pool, cut only between names (and
//                    symlink targets), so every name lies whole in one segment
// A segment is stored zstd-compressed (a standard frame), or as it is where that is not
// smaller (then stored_bytes == raw_bytes). An inode segment is byte-transposed first (byte c
// of record r at c * records + r): the bit-packed records compress 1.1x as they are, about 2x
// transposed, since most fields barely change from one record to the next. Format 4 first
// replaces the fields that grow (ids, offsets, mtimes, parents) by their differences from the
// record before (kSegmentDeltas): 110 KB -> 70 KB for 20,000 PNGs whose mtimes, nanoseconds
// and all, grow through each directory. Inode segments of about segment_bytes (the header's)
// raw, name segments of kNameSegmentFactor times that: one lookup fetches and decompresses a few
// tens of KiB, never a whole table, and a mount of a store in object storage fetches only the
// segments its first requests touch.
//
// Readers check a segment's checksum when they fetch it and its size when they decompress it;
// decompressed segments are kept in a bounded cache (SegmentedTable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/kv_open.h"
#include "cache/byte_cache.h"
#include "common/status.h"
#include "store/format.h"

namespace dsfs {

inline constexpr std::string_view kSegmentIndexKey = "M";
inline constexpr char kInodeSegmentSpace = 'I';
inline constexpr char kNameSegmentSpace = 'N';
// The zstd level metadata segments are compressed at, at least: 14, the first whose match
// finder (btlazy2) finds what names have in common. Measured on fmnist (70,000 files, 2.1 MB
// of metadata raw), stored and the time of the segments on 2 cores: level 9 more by a fifth
// (its names 40% larger), 0.05 s; level 14, 0.14 s; level 19 a further 1%, 0.7 s. The
// tables are ~1% of a store and each segment is read once.
inline constexpr int kMinMetadataLevel = 14;
// A name segment holds this many times segment_bytes raw: names compress about 8:1, inode
// records about 3:1, so the stored segments are of similar sizes (on LMDB, which stores each on
// whole pages, fewer segments waste fewer half-filled pages). Not more: zstd picks its
// parameters by input size, and those for inputs over 256 KiB compress names a third worse.
inline constexpr uint32_t kNameSegmentFactor = 2;
// The largest raw segment a store may declare: what a reader allocates for one at most,
// whatever a damaged or crafted index claims. (A name segment is larger than segment_bytes
// only to hold one long symlink target whole.)
inline constexpr uint32_t kMaxSegmentRawBytes = 16u << 20;

// Key of segment `index` of the table in `space` (kInodeSegmentSpace, kNameSegmentSpace).
inline std::string SegmentKey(char space, uint64_t index) { return PayloadKey(index, space); }

struct SegmentEntry {
  uint32_t raw_bytes = 0;
  uint32_t stored_bytes = 0;
  uint64_t sum = 0;  // xxh3-64 of the stored bytes
};

// The "M" record: u32 inodes_per_segment, u32 flags, u64 inode segments, u64 name segments, then
// per segment (inode segments first) u32 raw_bytes, u32 stored_bytes, u64 sum; u64 xxh3-64 of
// all bytes before it.
// Bit 0: inode segments are byte-transposed (always, in what this dsfs writes and reads).
// Bit 1 (format 4): inode records hold their growing fields as differences from the record
// before (InodeLayout::DeltaEncode), undone when a segment is decompressed.
inline constexpr uint32_t kSegmentTransposed = 1;
inline constexpr uint32_t kSegmentDeltas = 2;
inline constexpr uint32_t kSegmentFlags = kSegmentTransposed | kSegmentDeltas;

struct SegmentIndex {
  uint32_t inodes_per_segment = 0;
  uint32_t flags = kSegmentFlags;
  std::vector<SegmentEntry> inodes, names;

  std::string Serialize() const;
  // Checks the record's own checksum and structure (the sizes against the header are the
  // store's to check).
  static Status Parse(std::string_view bytes, SegmentIndex* index);
};

// The metadata records of a version 3 store: "M" and every segment, keys and values.
struct MetadataRecords {
  SegmentIndex index;
  std::vector<std::pair<std::string, std::string>> records;  // "M" last
};

// Cuts and compresses the inode table `inode_bytes` (records of `record_bytes`) and the name
// pool `names` (holding the names and symlink targets of `inodes`, which the cuts of the name
// pool fall between) into segments of about `segment_bytes` raw, at zstd `level`, on up to
// `threads` threads.
// The inode table's records are of `layout` (kSegmentFlags: transposed, delta-coded).
Status EncodeMetadata(const std::vector<InodeRecord>& inodes, std::string_view inode_bytes,
                      const InodeLayout& layout, std::string_view names, uint32_t segment_bytes,
                      int level, int threads, MetadataRecords* out);

// How an inode table's segments are stored: records of `layout`, transposed, and with
// `deltas` delta-coded (an index's flags & kSegmentDeltas).
struct InodeCoding {
  const InodeLayout* layout = nullptr;
  bool deltas = false;
};

// Decompresses stored segment `stored` described by `e` into *raw, and for an inode segment
// (`inodes`: a layout) undoes its transposition and delta coding. Corruption if it fails its
// checksum or does not decompress to exactly e.raw_bytes. `what` names it.
Status DecodeSegment(std::string_view what, const SegmentEntry& e, std::string_view stored,
                     std::string* raw, InodeCoding inodes = {});

// One segmented table of a store, read lazily: a segment is fetched from the key-value store,
// checked and decompressed on first use and kept in `cache` (bounded; may evict it, then it is
// fetched again). Thread-safe after Init.
class SegmentedTable {
 public:
  using Segment = ByteCache::Value;
  // Each thread keeps the segments it used last in a ring per kind of table (a name table's
  // holds kNameRingSlots, an inode table's kInodeRingSlots), shared by all stores: a scan
  // finds its segment there without a cache lookup, and a name a Pinned() view points into
  // stays valid through that many Pinned() calls of the thread for tables of its kind.
  static constexpr int kNameRingSlots = 16;
  static constexpr int kInodeRingSlots = 4;

  // `cache` must outlive the table (and may be shared with other tables: each takes its own
  // namespace). `serial` identifies the store among all stores ever opened in the process.
  // `inodes`: how an inode table's segments are coded (its layout must outlive the table);
  // none for a name table.
  Status Init(std::string name, char space, std::vector<SegmentEntry> entries, KvReader* kv,
              ByteCache* cache, uint64_t serial, InodeCoding inodes = {});

  uint64_t size() const { return starts_.empty() ? 0 : starts_.back(); }
  uint64_t segments() const { return entries_.size(); }
  const SegmentEntry& entry(uint64_t s) const { return entries_[s]; }
  uint64_t start(uint64_t s) const { return starts_[s]; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  // The segment holding byte `off` (REQUIRES: off < size()).
  uint64_t SegmentOf(uint64_t off) const;

  // True if segment `s` is in the cache (no hit or miss counted): Get finds it there.
  bool Cached(uint64_t s) const { return cache_ && cache_->Contains(id_, s); }
  // Segment `s`, decompressed, through the cache.
  Status Get(uint64_t s, Segment* out) const;
  // Same, kept alive by the calling thread's ring for this kind of table: *out stays valid
  // through the thread's next (slots - 1) Pinned() calls on tables of this kind.
  Status Pinned(uint64_t s, const std::string** out) const;
  // Segment `s` fetched and decompressed straight from the store (dsfs verify), not cached.
  Status Load(uint64_t s, std::string* raw) const;
  // Bytes [off, off + len) of the table: a view into a segment pinned by *pin (ring: by the
  // calling thread's names ring, pin unused). Corruption if out of the table or across
  // segments (names never are).
  Status View(uint64_t off, uint64_t len, bool ring, Segment* pin, std::string_view* out) const;

 private:
  std::string name_;
  char space_ = 0;
  std::vector<SegmentEntry> entries_;
  std::vector<uint64_t> starts_;  // raw offset of each segment, and the table's size last
  uint64_t stored_bytes_ = 0;
  KvReader* kv_ = nullptr;
  ByteCache* cache_ = nullptr;
  ByteCache::Id id_ = 0;
  uint64_t serial_ = 0;
  InodeCoding inodes_;
};

// The raw tables of a version 3 store read back whole (tests, tools): the inode table and the
// name pool.
Status ReadMetadataTables(KvReader* kv, std::string* inode_bytes, std::string* names);

}  // namespace dsfs
