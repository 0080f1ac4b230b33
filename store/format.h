// The dsfs store format, version 4: what the records in the key-value store mean.
//
// Keys (all in one key-value namespace):
//   "H"           StoreHeader
//   "L"           InodeLayout: the bit widths of the packed inode records
//   "M"           the metadata segment index (store/segments.h)
//   "I"+be64(s)   inode table segment s: the table is inode_count packed records, cut into
//                 segments of a fixed number of records, each zstd-compressed (segments.h)
//   "N"+be64(s)   name pool segment s: the pool is the names and symlink targets,
//                 concatenated, cut between names into segments, each zstd-compressed
//   "Z"           zstd dictionary, as a payload record (absent if dict_bytes == 0)
//   "P"+be64(id)  payload group ending with payload `id` (see below)
//   "Q"+be64(id)  pixel group ending with pixel record `id`: decoded images (pack --predecode),
//                 grouped and encoded like payloads, numbered on their own
//
// Version 5 stores each solid group as its index, stored as it is, and one dictionary-free
// standard zstd frame of its records (Codec::kZstdFrame): every file's bytes are one range of
// the concatenated records, and the kernel can decode a group itself (docs/kernel.md). A pack
// without a dictionary writes it; a version 5 store has no dictionary.
// Version 4 made payload groups solid (above). Version 3 stores the metadata tables in compressed
// segments, read lazily (version 2 and 1 stores kept them raw, as "I" and "N" with per-segment
// checksums in "I.sum" and "N.sum"; they are still read, see CheckedTable). Version 2 added the
// image fields of inode records (kind, size in pixels, pixel records); version 1 stores are read as
// stores without image information.
//
// File contents are payload records, one per chunk of chunk_bytes, numbered by payload id.
// Consecutive records are stored together in groups, keyed by the id of their last record.
// A group's index is
//   u32 count, u32 end[count] (end offset of each record, from the first record), records
// (GroupBuilder). Version 4 stores keep their groups solid: the records are raw chunks, and
// the whole group (index and records) is compressed as one payload record (PayloadHeader,
// below), as squashfs compresses small files together in fragment blocks. A group holds the
// records that fit in group_bytes raw (the header's; at least one record), and on a backend
// that stores values on whole pages (LMDB, ValueSizing) it takes as many more as still fit in
// its last page. Reading one small file decompresses its group, which the RAM cache then
// keeps whole for its neighbours. Records before solid_payload_from (and pixel records before
// solid_pixel_from) are in the groups of older versions (a store of version 3 or older that
// `dsfs add` extended): there each record is compressed and checksummed alone, a payload
// record of its own, and the group is the index with those records, stored as it is.
//
// Tree layout: inode number i (FUSE's, root = 1) is record i-1. Inodes are numbered
// breadth-first with each directory's entries sorted by name (bytewise), so the entries of a
// directory are the contiguous records [first, first + count): lookup is a binary search and a
// listing is a scan, both straight from the memory-mapped table, with no per-file heap object.
// Regular files' chunks have consecutive payload ids in inode order, so a directory scan reads
// payloads in key order.
//
// All integers are little-endian; records are plain structs, copied out with memcpy (small
// LMDB values carry no alignment guarantee).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

static_assert(std::endian::native == std::endian::little, "dsfs stores are little-endian");

namespace dsfs {

inline constexpr char kStoreMagic[8] = {'D', 'S', 'F', 'S', 'T', 'O', 'R', 'E'};
inline constexpr uint32_t kFormatVersion = 4;  // what pack writes with a dictionary
// The first version whose payload groups the kernel can decode (Codec::kZstdFrame), written by
// a pack without a dictionary (--dict-size 0); the newest version this dsfs reads.
inline constexpr uint32_t kKernelFormatVersion = 5;
inline constexpr uint32_t kNewestFormatVersion = 5;
// The first version whose metadata tables are in compressed segments.
inline constexpr uint32_t kSegmentedFormatVersion = 3;
// The first version whose payload groups are solid.
inline constexpr uint32_t kSolidFormatVersion = 4;
inline constexpr uint32_t kOldestFormatVersion = 1;

inline constexpr std::string_view kHeaderKey = "H";
inline constexpr std::string_view kLayoutKey = "L";
inline constexpr std::string_view kInodeKey = "I";
inline constexpr std::string_view kInodeSumKey = "I.sum";
inline constexpr std::string_view kNameKey = "N";
inline constexpr std::string_view kNameSumKey = "N.sum";
inline constexpr std::string_view kDictKey = "Z";

// Record spaces: file contents and decoded pixels.
inline constexpr char kPayloadSpace = 'P';
inline constexpr char kPixelSpace = 'Q';
// Key of the group of `space` ending with record `id`: the space letter and the id big-endian,
// so keys sort by id.
std::string PayloadKey(uint64_t id, char space = kPayloadSpace);
// Parses a group key of `space`; false if `key` is not one.
bool ParsePayloadKey(std::string_view key, uint64_t* id, char space = kPayloadSpace);

// Builds a payload group from consecutive records.
class GroupBuilder {
 public:
  void Add(std::string_view record);
  uint32_t count() const { return static_cast<uint32_t>(ends_.size()); }
  size_t bytes() const { return records_.size() + 4 * ends_.size() + 4; }
  // The serialized group; resets the builder.
  std::string Finish();

 private:
  std::vector<uint32_t> ends_;
  std::string records_;
};

// Finds record `id` in `group`, the group keyed by `last_id`. Corruption if the group does not
// hold it or its index is damaged.
Status FindInGroup(std::string_view group, uint64_t last_id, uint64_t id, std::string_view* record);

struct StoreHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(StoreHeader) when written
  uint64_t created_unix_s;
  int32_t zstd_level;
  uint32_t chunk_bytes;    // files larger than this are split into chunks of this size
  uint32_t segment_bytes;  // metadata segment size (v3); checksum granularity (v1, v2)
  uint32_t dict_bytes;     // size of the dictionary; 0 = none
  uint64_t inode_count;
  uint64_t file_count;
  uint64_t dir_count;
  uint64_t symlink_count;
  uint64_t file_bytes;     // sum of regular file sizes
  uint64_t payload_count;  // payload records
  uint64_t payload_bytes;  // bytes of payload records as stored
  uint64_t names_bytes;
  uint64_t image_count;  // files the views decode (version 2)
  uint64_t pixel_count;  // pixel records ("Q"; pack --predecode)
  uint64_t pixel_bytes;  // bytes of pixel records as stored
  // Version 4: the raw size a solid group fills (see above), and the first payload and pixel
  // ids in solid groups (0 unless `dsfs add` extended an older store).
  uint32_t group_bytes;
  uint32_t reserved32;  // zero
  uint64_t solid_payload_from;
  uint64_t solid_pixel_from;
  uint64_t reserved[4];  // zero; room for later fields
  uint64_t checksum;     // xxh3-64 of all bytes above
};
static_assert(sizeof(StoreHeader) == 192);

// One inode, decoded. In the store it is packed by InodeLayout.
struct InodeRecord {
  uint64_t size;      // regular: bytes; symlink: target length; directory: entry count
  uint64_t data;      // regular: first payload id; symlink: target offset in the name pool;
                      // directory: inode number of the first entry
  uint64_t name_off;  // name in the pool (root: empty)
  int64_t mtime_s;
  uint32_t mtime_ns;
  uint32_t mode;  // st_mode: type and permission bits
  uint32_t name_len;
  uint32_t parent;  // inode number of the parent (root: itself)
  // Regular files: ImageKind (image/image.h) and, for decodable images, the size in pixels and
  // the first of their pixel records + 1 (0: not predecoded). All zero in version 1 stores.
  uint8_t image;
  uint32_t width, height;
  uint64_t pixels;
};

// Inode records are stored bit-packed, each field as wide as its largest value in this store
// (as DwarFS does), so a 32x32-image dataset spends ~15 bytes per inode instead of 48 and a
// record is still read in place: record i is bytes [i * record_bytes, (i+1) * record_bytes).
// mtime is stored as the offset from the smallest mtime, mode as an index into a table of the
// distinct modes.
class InodeLayout {
 public:
  // The narrowest layout that holds every record of `records`.
  static InodeLayout For(const std::vector<InodeRecord>& records);
  // Serialized form (the "L" record), checksummed.
  std::string Serialize() const;
  // `version`: the store's format version (version 1 layouts have no image fields).
  static Status Parse(std::string_view bytes, uint32_t version, InodeLayout* layout);

  uint32_t record_bytes() const { return record_bytes_; }
  // REQUIRES: `rec` is one of the records the layout was made For; dst has record_bytes().
  void Encode(const InodeRecord& rec, char* dst) const;
  // Corruption if a field is out of range (e.g. a mode index past the table).
  Status Decode(const char* src, InodeRecord* rec) const;

  // Replaces, in the `n` records at `records`, each field that mostly grows by a little from
  // one record to the next (payload id or first entry, name offset, mtime, parent, pixel id)
  // by its difference from the record before, modulo the field's width: what the inode
  // segments of format 4 store (the transposed differences compress to a third less).
  // DeltaDecode undoes it; both are exact for any bytes.
  void DeltaEncode(char* records, size_t n) const;
  void DeltaDecode(char* records, size_t n) const;

 private:
  enum Field {
    kSize,
    kData,
    kNameOff,
    kNameLen,
    kMtime,
    kMtimeNs,
    kMode,
    kParent,
    kFieldsV1,
    kImage = kFieldsV1,
    kWidth,
    kHeight,
    kPixels,
    kFields
  };
  void Finish();
  uint8_t bits_[kFields] = {};
  uint32_t offset_[kFields] = {};
  uint32_t record_bytes_ = 0;
  int64_t min_mtime_s_ = 0;
  std::vector<uint32_t> modes_;
};

// Payload record: an 8-byte header, then the stored bytes. zstd frames are stored without
// magic number, dictionary id or content size (the header has the size): 10 bytes less per file.
// kZstdFrame (format 5 solid groups): the group's index (u32 count, u32 end[count]) stored as
// it is, then the records as one standard zstd frame (magic number, no dictionary, a window of
// at most 1 MiB): what EROFS decodes as one pcluster of the packed inode (docs/kernel.md).
enum class Codec : uint8_t { kRaw = 0, kZstd = 1, kZstdDict = 2, kZstdFrame = 3 };
// The zstd window of a kZstdFrame frame (the kernel's EROFS takes at most 1 MiB).
inline constexpr int kKernelFrameWindowLog = 20;
inline constexpr uint32_t kMaxPayloadBytes = (1u << 30) - 1;
// Largest chunk a store may declare (dsfs pack --chunk-size allows no more): a reader never
// allocates more than this for one record, whatever a damaged or crafted store claims.
inline constexpr uint32_t kMaxChunkBytes = 64u << 20;
// The largest group_bytes a store may declare (dsfs pack --group-size allows no more), and the
// most records a solid group holds: a group's index and records, raw, never exceed
// SolidGroupMaxBytes, which is what a reader allocates for one at most.
inline constexpr uint32_t kMaxGroupBytes = 4u << 20;
inline constexpr uint32_t kMaxGroupRecords = 1u << 16;
inline constexpr uint64_t SolidGroupMaxBytes(uint32_t group_bytes, uint32_t chunk_bytes) {
  // Records up to group_bytes, as many more as fill the last page (at most group_bytes more),
  // or one chunk alone; and the index.
  return 2ull * group_bytes + chunk_bytes + 4 + 4ull * kMaxGroupRecords;
}
// The longest entry name a store may hold: the kernel's NAME_MAX (a longer name in a
// directory makes the whole directory unlistable through a mount).
inline constexpr size_t kMaxNameBytes = 255;
// Directories a store may nest below its root: `dsfs verify` and `ls -R` refuse deeper trees
// as damaged (their walks recurse once per level), so pack and add refuse to make them.
inline constexpr uint32_t kMaxTreeDepth = 4095;
struct PayloadHeader {
  uint32_t checksum;        // low 32 bits of xxh3-64 of the record from byte 4 on
  uint32_t codec_and_size;  // codec << 30 | raw size
};
static_assert(sizeof(PayloadHeader) == 8);

// Fills a header's magic, version (kKernelFormatVersion where it says so already, else
// kFormatVersion), header_bytes and checksum (call last).
void SealHeader(StoreHeader* h);
// Checks magic, version and checksum of the serialized header.
Status ParseHeader(std::string_view bytes, StoreHeader* h);

// A table read in place from the store, with per-segment checksums verified lazily on first
// access (so mounting a 10-million-file store reads nothing but the header). Check() is
// thread-safe; a segment may be verified twice by racing threads, which is harmless.
class CheckedTable {
 public:
  // `will_need`, when set, is told about byte ranges of `data` about to be read (the backend
  // starts reading them from disk in one request instead of a page fault at a time).
  Status Init(std::string_view name, std::string_view data, std::string_view sums,
              uint32_t segment_bytes, std::function<void(std::string_view)> will_need = nullptr);
  // OK if [off, off + len) lies in the table and every segment it touches matches its checksum.
  Status Check(uint64_t off, uint64_t len) const;
  // Announces that [off, off + len) will be checked soon: the not yet verified segments it
  // touches are passed to `will_need` in one range. Verifies nothing; ranges out of the table
  // are ignored (Check reports them).
  void WillNeed(uint64_t off, uint64_t len) const;
  // Verifies every segment (dsfs verify).
  Status CheckAll() const { return data_.empty() ? Status::OK() : Check(0, data_.size()); }
  const char* data() const { return data_.data(); }
  uint64_t size() const { return data_.size(); }

 private:
  std::string name_;
  std::string_view data_;
  const char* sums_ = nullptr;
  uint64_t segments_ = 0;
  uint32_t segment_bytes_ = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> verified_;
  std::function<void(std::string_view)> will_need_;
};

// Computes the per-segment checksums of `data` (what "I.sum" and "N.sum" hold).
std::string SegmentSums(std::string_view data, uint32_t segment_bytes);

}  // namespace dsfs
