// The dsfs store format, version 1: what the records in the key-value store mean.
//
// Keys (all in one key-value namespace):
//   "H"           StoreHeader
//   "I", "I.sum"  inode table: InodeRecord[inode_count]; xxh3-64 per segment_bytes of it
//   "N", "N.sum"  name pool: names and symlink targets, concatenated; same checksums
//   "Z"           zstd dictionary, as a payload record (absent if dict_bytes == 0)
//   "P"+be64(id)  payload records: file contents, one record per chunk of chunk_bytes
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
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

static_assert(std::endian::native == std::endian::little, "dsfs stores are little-endian");

namespace dsfs {

inline constexpr char kStoreMagic[8] = {'D', 'S', 'F', 'S', 'T', 'O', 'R', 'E'};
inline constexpr uint32_t kFormatVersion = 1;

inline constexpr std::string_view kHeaderKey = "H";
inline constexpr std::string_view kInodeKey = "I";
inline constexpr std::string_view kInodeSumKey = "I.sum";
inline constexpr std::string_view kNameKey = "N";
inline constexpr std::string_view kNameSumKey = "N.sum";
inline constexpr std::string_view kDictKey = "Z";

// Key of payload record `id`: 'P' followed by the id big-endian, so keys sort by id.
std::string PayloadKey(uint64_t id);

struct StoreHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;    // sizeof(StoreHeader) when written
  uint64_t created_unix_s;
  int32_t zstd_level;
  uint32_t chunk_bytes;     // files larger than this are split into chunks of this size
  uint32_t segment_bytes;   // checksum granularity of the metadata tables
  uint32_t dict_bytes;      // size of the dictionary; 0 = none
  uint64_t inode_count;
  uint64_t file_count;
  uint64_t dir_count;
  uint64_t symlink_count;
  uint64_t file_bytes;      // sum of regular file sizes
  uint64_t payload_count;   // payload records
  uint64_t payload_bytes;   // bytes of payload records as stored
  uint64_t names_bytes;
  uint64_t reserved[10];  // zero; room for later fields
  uint64_t checksum;        // xxh3-64 of all bytes above
};
static_assert(sizeof(StoreHeader) == 192);

struct InodeRecord {
  uint64_t size;        // regular: bytes; symlink: target length; directory: entry count
  uint64_t data;        // regular: first payload id; symlink: target offset in the name pool;
                        // directory: inode number of the first entry
  uint64_t name_off;    // name in the pool (root: empty)
  int64_t mtime_s;
  uint32_t mtime_ns;
  uint32_t mode;        // st_mode: type and permission bits
  uint32_t name_len;
  uint32_t parent;      // inode number of the parent (root: itself)
};
static_assert(sizeof(InodeRecord) == 48);

// Payload record: this header, then `stored` bytes.
enum class Codec : uint8_t { kRaw = 0, kZstd = 1, kZstdDict = 2 };
struct PayloadHeader {
  uint64_t checksum;  // xxh3-64 of the record from byte 8 on (codec, size and data)
  uint8_t codec;
  uint8_t pad[3];
  uint32_t raw_bytes;
};
static_assert(sizeof(PayloadHeader) == 16);

// Fills a header's magic, version, header_bytes and checksum (call last).
void SealHeader(StoreHeader* h);
// Checks magic, version and checksum of the serialized header.
Status ParseHeader(std::string_view bytes, StoreHeader* h);

// A table read in place from the store, with per-segment checksums verified lazily on first
// access (so mounting a 10-million-file store reads nothing but the header). Check() is
// thread-safe; a segment may be verified twice by racing threads, which is harmless.
class CheckedTable {
 public:
  Status Init(std::string_view name, std::string_view data, std::string_view sums,
              uint32_t segment_bytes);
  // OK if [off, off + len) lies in the table and every segment it touches matches its checksum.
  Status Check(uint64_t off, uint64_t len) const;
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
};

// Computes the per-segment checksums of `data` (what "I.sum" and "N.sum" hold).
std::string SegmentSums(std::string_view data, uint32_t segment_bytes);

}  // namespace dsfs
