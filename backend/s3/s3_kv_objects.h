// What the S3 store's writer and reader share: the names of its objects under the prefix and
// RunPieces (a parallel loop over the pieces of an upload or
// a fetch). The layout itself: backend/s3/s3_kv.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "s3/client.h"

namespace dsfs::s3kv {

// Values of at least this size (the metadata tables: names and inode records are stored raw in
// the format) are stored zstd-compressed when that saves a tenth: less to fetch at mount.
inline constexpr size_t kCompressFromBytes = 1 << 20;

// 16 hex digits.
std::string Hex64(uint64_t v);
// PREFIX/NAME, or NAME at the bucket's root.
std::string Join(const std::string& prefix, const std::string& name);
// PREFIX/data/ID/NNNNNN: the store's data object number `object`.
std::string DataKey(const std::string& prefix, uint64_t id, uint64_t object);

// Runs piece(0) .. piece(pieces - 1) on up to `threads` threads; the first failure (an error,
// or an exception such as bad_alloc, which would otherwise end the process from a thread) stops
// the pieces not yet started and is returned.
Status RunPieces(uint64_t pieces, uint64_t threads, const std::function<Status(uint64_t)>& piece);

}  // namespace dsfs::s3kv
