// What a cache_dir holds, for `dsfs cache ls` and `dsfs cache gc`, and the two small files that
// make that safe: each S3 mount's cache directory (CACHE_DIR/s3-HASH, see s3_kv_cache.h)
// holds
//   `meta`  what is cached there: the store's URL, the endpoint and the store's identity (the
//           ID of its data directory), one "key=value" line each; rewritten (aside, then
//           renamed) at each mount and when it ends, so its mtime is the cache's last use;
//   `lock`  an empty file on which every mount holds a shared flock for its whole life. gc
//           takes it exclusively without waiting (LOCK_NB) before it removes anything, so a
//           cache a live mount uses is never touched; a mount that finds the lock file
//           unlinked after taking it (a gc removed the cache meanwhile) makes the directory again.
//
// gc removes only dsfs's own names (s3-HASH directories, their ID directories and NNNNNN
// files, index, meta, lock and their temporaries), follows no symlink (everything is opened
// relative to its directory's descriptor with O_NOFOLLOW) and removes only what this user owns.
//
// Thread safety: the functions are independent; none keeps state.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "common/status.h"

namespace dsfs {

inline constexpr const char* kS3CacheMetaName = "meta";
inline constexpr const char* kS3CacheLockName = "lock";

// What a mount records in its cache directory (the `meta` file).
struct S3CacheMeta {
  std::string url;       // s3://BUCKET/PREFIX
  std::string endpoint;  // the endpoint it was fetched from
  std::string id;        // the store's identity (16 hex digits)
};

// Takes a shared flock on `lock` in the cache directory open at `dir_fd` (creating it, 0600,
// never through a symlink) and returns its descriptor in *lock_fd, held until closed.
// Busy if a gc removed the directory while this waited (the caller makes it again);
// IOError if the lock cannot be taken.
[[nodiscard]] Status LockS3CacheForMount(int dir_fd, const std::string& dir_path, int* lock_fd);

// The names in the directory open at `dir_fd` (which stays open), sorted, "." and ".." left
// out; none if it cannot be read.
std::vector<std::string> CacheDirEntries(int dir_fd);

// Writes `meta` into the cache directory open at `dir_fd` (aside, then renamed over it);
// failures cost only what `dsfs cache ls` can say.
void WriteS3CacheMeta(int dir_fd, const S3CacheMeta& meta);

// One cache of a cache_dir, as `dsfs cache ls` shows it.
struct S3CacheEntry {
  std::string name;                // s3-HASH
  S3CacheMeta meta;                // empty fields if the cache has no (readable) meta file
  uint64_t bytes = 0;              // disk space its files take (allocated blocks)
  uint64_t freeable_bytes = 0;     // what removing them frees: not a hard-linked file's blocks
  time_t last_use = 0;             // mtime of meta (else of the directory)
  bool mounted = false;            // a live mount holds its lock
  std::vector<std::string> stale;  // ID directories of stores pushed over it since (not meta.id)
};

// Lists the caches in `cache_dir` (directories named s3-HASH owned by this user; anything
// else there is not dsfs's and is ignored), sorted by name. NotFound if `cache_dir` does not
// exist; IOError if it cannot be read.
[[nodiscard]] Status ListS3Caches(const std::string& cache_dir, std::vector<S3CacheEntry>* out);

struct S3CacheGcOptions {
  int keep_days = 30;    // caches not mounted and not used for longer than this are removed
  bool dry_run = false;  // say what would be removed, remove nothing
};

// What gc did with one cache.
struct S3CacheGcResult {
  std::string name;
  std::string action;        // "removed", "removed stale stores", "kept", "in use", "left"
  std::string why;           // one phrase: "unused for 41 days", "mounted now", ...
  uint64_t freed_bytes = 0;  // blocks really freed (would be, with dry_run): a file with
                             // another hard link frees none
};

// Removes from `cache_dir` the caches no mount holds that were not used within keep_days (the
// whole s3-HASH directory), and in the others no mount holds, the ID directories of stores
// pushed over the URL since (not meta's id). A cache a live mount holds is never touched: its
// lock is taken exclusively (LOCK_NB) before anything is removed, and held while removing.
[[nodiscard]] Status GcS3Caches(const std::string& cache_dir, const S3CacheGcOptions& options,
                                std::vector<S3CacheGcResult>* out);

}  // namespace dsfs
