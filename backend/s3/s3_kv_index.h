// The index of a store in S3 (see s3_kv.h for the objects): where each key's value lies in
// the data objects, with its checksum. Written by the S3 writer (S3IndexBuilder), parsed by the
// reader at mount and from the disk cache's copy (ParseS3Index), which is where a crafted or
// damaged index arrives: every field is checked against the index's own sizes and sane limits
// before anything is allocated from it.
//
// Layout (integers little-endian): "DSFSS3IX", u32 version (3), u32 0, u64 id, u64 objects,
// u64 entries, u64 raw bytes of the entry list, u64 xxh3-64 (version 3: of the 48 bytes before
// it and everything after it; version 2, still read: of everything after it), then u64 size of
// each object, then the entry list zstd-compressed: per key (in ascending order) varint key
// length, key, varint object, varint offset, varint length, varint raw length (0: the value is
// stored as is; else zstd-compressed from this many bytes), u64 xxh3-64 of the stored bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace dsfs {

// Limits that no store dsfs writes comes near and that bound what a reader allocates: a value
// (stored or decompressed), a data object, the index object and its entry list.
inline constexpr uint64_t kS3MaxValueBytes = uint64_t{1} << 30;
inline constexpr uint64_t kS3MaxObjectBytes = uint64_t{1} << 40;
inline constexpr uint64_t kS3MaxIndexBytes = uint64_t{256} << 20;
inline constexpr uint64_t kS3MaxIndexListBytes = uint64_t{4} << 30;

struct S3IndexEntry {
  uint64_t key_off;
  uint32_t key_len;
  uint32_t object;
  uint64_t offset;
  uint64_t length;
  uint64_t raw_length;  // 0: stored as is; else zstd-compressed from this many bytes
  uint64_t sum;         // xxh3-64 of the stored bytes
};

struct S3Index {
  uint64_t id = 0;
  std::vector<uint64_t> object_sizes;
  std::string keys;  // every key, back to back
  std::vector<S3IndexEntry> entries;
  std::string_view Key(const S3IndexEntry& e) const {
    return std::string_view(keys).substr(e.key_off, e.key_len);
  }
};

// The entry list of an index being written. Not thread-safe.
class S3IndexBuilder {
 public:
  // REQUIRES: keys in strictly ascending order; length and raw_length within kS3MaxValueBytes.
  void Add(std::string_view key, uint64_t object, uint64_t offset, uint64_t length,
           uint64_t raw_length, uint64_t sum);
  uint64_t entries() const { return entries_; }
  // The index object of a store `id` whose data objects have `object_sizes`.
  [[nodiscard]] Status Finish(uint64_t id, const std::vector<uint64_t>& object_sizes,
                              std::string* index) const;

 private:
  std::string list_;
  uint64_t entries_ = 0;
};

// Parses an index object read from `name` (for messages). InvalidArgument if it is not one,
// NotSupported for an unknown version, Corruption (one line naming what is wrong) for anything
// damaged or beyond the limits. Never allocates more than a small multiple of the index's
// real size.
[[nodiscard]] Status ParseS3Index(const std::string& name, std::string_view bytes, S3Index* index);

// What the checksum field of the index object `bytes` must hold (by its version); 0 if the bytes
// are too short to be one. The parser's check, and the fuzzer's repair.
uint64_t S3IndexChecksum(std::string_view bytes);

// The store id of an index object (the writer's check of what a push replaces); false if the
// bytes are not an index.
bool S3IndexId(std::string_view bytes, uint64_t* id);

}  // namespace dsfs
