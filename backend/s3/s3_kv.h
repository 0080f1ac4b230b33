// A store in S3 object storage: written once by `dsfs push` (an S3KvWriter), read by mounts
// over ranged GETs with a persistent local disk cache.
//
// Objects under s3://BUCKET/PREFIX:
//   PREFIX/dsfs-index            the index: written LAST, so a push that did not finish leaves
//                                nothing mountable (a previous push's index stays valid, its
//                                data objects are only removed after the new index is in place)
//   PREFIX/data/ID/NNNNNN        data objects of ~object_bytes holding the values in key order
//                                (a directory's files are adjacent: one GET fetches many)
// ID is the store's identity (16 hex digits, from the hash of its header record): a push of
// the same store again finds its data objects already there and skips them (a resumed push);
// a changed store gets new objects, and caches keyed by ID never serve stale bytes.
//
// The index's format: backend/s3/s3_kv_index.h. The disk cache (KvReaderOptions::cache_dir), what
// it trusts and how it evicts: backend/s3/s3_kv_cache.h. Values are fetched in whole blocks of
// kS3BlockBytes (adjacent values coalesced into one GET).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/kv_open.h"
#include "backend/s3/s3_kv_cache.h"
#include "s3/client.h"

namespace dsfs {

inline constexpr std::string_view kS3IndexName = "dsfs-index";

// Opens the store at `url` read-only (see the file comment for the cache).
[[nodiscard]] Status OpenS3Reader(const std::string& url, const KvReaderOptions& options,
                                  std::unique_ptr<KvReader>* reader);

// Counters of an S3 reader (tests, stats): GETs made and bytes fetched, values served from
// the disk cache. False if `reader` is not an S3 reader.
struct S3ReaderStats {
  uint64_t gets = 0, get_bytes = 0, disk_hits = 0, disk_misses = 0, evicted_blocks = 0;
};
bool GetS3ReaderStats(KvReader* reader, S3ReaderStats* stats);

}  // namespace dsfs
