// The disk cache of a store in S3 (KvReaderOptions::cache_dir): what a reader fetched, kept on
// local disk across mounts.
//
// Layout: CACHE_DIR/s3-HASH/ (HASH of the endpoint and the URL; created 0700) holds `index`, the
// last index read (what a mount serves from in an outage), and ID/NNNNNN, sparse files
// mirroring data object NNNNNN of store ID: what was fetched is written at its offset; `meta`
// and `lock` say what is cached and that a mount uses it (backend/s3/s3_cache_dir.h, for `dsfs
// cache ls/gc`). A value
// read back is checked with its xxh3 from the index (a hole reads as zeros and fails it), so
// nothing is trusted that was not verified. Eviction punches least recently used blocks of
// kS3BlockBytes once the files hold more than the budget.
//
// The cache directory may be shared with other users (e.g. world-writable and sticky, like
// /tmp), so nothing in it is trusted that this user does not own: CACHE_DIR must belong to this
// user (or be sticky where others may write), s3-HASH must be a directory of this user's that
// no one else may write (a symlink or another user's directory there is refused, never
// followed), and every file below is opened relative to its directory's descriptor with
// O_NOFOLLOW. A store pushed again over the URL leaves its old ID directory behind: only what
// has dsfs's names (ID directories, NNNNNN regular files) is removed, nothing else.
//
// Thread safety: Read and Write may be called from any number of threads at once.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/s3/s3_kv_index.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace dsfs {

inline constexpr uint64_t kS3BlockBytes = 1 << 20;

// CACHE_DIR/s3-HASH of a store, checked and opened (see the file comment). Not thread-safe.
class S3CacheRoot {
 public:
  S3CacheRoot() = default;
  S3CacheRoot(const S3CacheRoot&) = delete;
  S3CacheRoot& operator=(const S3CacheRoot&) = delete;

  // Creates `cache_dir` if it is missing and `name` in it. InvalidArgument (one line saying what
  // to fix) for a cache directory of another user, one others may write without the sticky bit,
  // or a `name` that is a symlink, not a directory, another user's, or writable by others.
  [[nodiscard]] Status Open(const std::string& cache_dir, const std::string& name);
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }
  // While open, a shared flock on its `lock` file (backend/s3/s3_cache_dir.h).

  // The index kept by an earlier reader; false if there is none (or it is not a regular file).
  bool ReadIndex(std::string* bytes) const;
  // Keeps `bytes` as the index (written aside, then renamed over it); failures only cost the
  // outage fallback.
  void WriteIndex(std::string_view bytes) const;
  // Removes the ID directories of other stores (what a push over the URL replaced) and their
  // NNNNNN files; anything else stays.
  void RemoveOtherStores(const std::string& keep_id) const;

 private:
  Status OpenAndLock(int dir, const std::string& name, uid_t me, const std::string& fix);

  std::string path_;
  UniqueFd fd_;
  UniqueFd lock_fd_;
};

// The cached blocks of one store: CACHE_DIR/s3-HASH/ID.
class S3DiskCache {
 public:
  S3DiskCache() = default;
  ~S3DiskCache();
  S3DiskCache(const S3DiskCache&) = delete;
  S3DiskCache& operator=(const S3DiskCache&) = delete;

  // Opens (creates) directory `id` of `root` for a store whose objects have `object_sizes`, and
  // finds what earlier readers left: every allocated block joins the LRU. REQUIRES: object sizes
  // within kS3MaxObjectBytes (ParseS3Index checks them).
  [[nodiscard]] Status Open(const S3CacheRoot& root, const std::string& id,
                            const std::vector<uint64_t>& object_sizes, uint64_t budget_bytes);
  // The value at [offset, offset + length) of `object` if the file holds it, verified by `sum`.
  bool Read(uint32_t object, uint64_t offset, uint64_t length, uint64_t sum, std::string* out);
  // Whether block `block` of `object` is kept (it may be evicted right after: what is read
  // from it must be verified).
  bool Has(uint32_t object, uint64_t block);
  // The bytes at [offset, offset + length) of `object`'s file into `dst`, unverified (the
  // caller checks the value they are part of); false if they cannot be read.
  bool ReadRaw(uint32_t object, uint64_t offset, uint64_t length, char* dst);
  // Keeps `bytes`, fetched from `offset` of `object` (whole blocks, the last maybe short).
  void Write(uint32_t object, uint64_t offset, std::string_view bytes);
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  // A block of an object: the object below 2^32, the block below 2^20 (kS3MaxObjectBytes).
  struct BlockId {
    uint32_t object;
    uint32_t block;
    bool operator==(const BlockId& o) const { return object == o.object && block == o.block; }
  };
  struct BlockHash {
    size_t operator()(const BlockId& b) const {
      return std::hash<uint64_t>()(uint64_t{b.object} << 32 | b.block);
    }
  };
  // The cache file of `object`, opened (created) on first use; -1 if it cannot be (the value is
  // then fetched, not cached: a full or read-only cache disk is no read error).
  int Fd(uint64_t object);
  void Touch(BlockId blk);  // REQUIRES: mu_ held (or Open)

  std::string dir_;
  UniqueFd dir_fd_;
  uint64_t budget_ = 0;
  std::vector<uint64_t> object_sizes_;
  std::unique_ptr<std::atomic<int>[]> fds_;
  std::once_flag warned_;
  std::mutex mu_;           // guards lru_ and where_
  std::list<BlockId> lru_;  // blocks, least recently used first
  std::unordered_map<BlockId, std::list<BlockId>::iterator, BlockHash> where_;
  std::atomic<uint64_t> evicted_{0};
};

}  // namespace dsfs
