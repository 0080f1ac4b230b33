// Prefetcher: background workers that read ahead of the reader.
//
//  - Push: after a directory listing has told the kernel about a directory's files (readdirplus),
//    their contents are decompressed and handed to `push` (the FUSE layer stores them in the
//    kernel's page cache with fuse_lowlevel_notify_store), so the first read of each file is
//    served without a request. Bounded by push_budget_bytes in total.
//  - Readahead: files or chunks the reader is about to reach (a scan in directory order, a
//    large file read front to back) are decompressed into the RAM cache.
//  - Preload: a whole subtree is decompressed into the RAM cache, up to its budget.
//
// Inode numbers: every `ino` and `dir` in this API is a FUSE inode number of the mount
// (fs/inode_space.h), the one kind the kernel, the FUSE callbacks and PushSource know. Readahead
// and preload work on the original tree only; they translate to store inodes inside.
//
// It lives in fs/, not cache/: it calls down into the Store, up into the Filesystem (PushSource)
// and, through `push`, into the kernel.
//
// Thread safety: every public method may be called from any thread. Jobs run on the
// Prefetcher's own threads; `push` is called from them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "cache/byte_cache.h"
#include "common/worker_group.h"
#include "fs/inode_space.h"
#include "store/store.h"

namespace dsfs {

// Where pushed bytes come from: the regular files of a listed directory, under the FUSE inode
// numbers the kernel knows them by (the original tree's, or a view's), and their contents
// (fs/filesystem.h implements it).
class PushSource {
 public:
  virtual ~PushSource() = default;
  // Calls `file(ino, size)` for each regular file of directory `dir` until it returns false.
  virtual Status ForEachFile(
      uint64_t dir, const std::function<bool(uint64_t ino, uint64_t size)>& file) const = 0;
  // Bytes of file `ino`, as a READ would get them (without counting a request).
  virtual Status ReadFile(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                          std::string_view* out) const = 0;
};

class Prefetcher {
 public:
  // Stores `data` as bytes [offset, offset + size) of inode `ino` in the kernel. Returns 0,
  // -ENOENT if the kernel does not know the inode (yet), or another -errno.
  using PushFn = std::function<int(uint64_t ino, uint64_t offset, std::string_view data)>;

  struct Options {
    int threads = 1;
    uint64_t push_budget_bytes = 0;  // 0 disables pushing
    uint32_t readahead_files = 64;   // files prefetched ahead of a directory-order scan
    uint32_t readahead_chunks = 8;   // chunks prefetched ahead of a sequential file read
  };

  // `cache` is the RAM cache `store` decompresses into (null: no readahead, no preload);
  // `space` the mount's inode numbers. Pushing needs both `push` and `source` (either may be
  // null: then nothing is pushed). REQUIRES: store, cache and source outlive the Prefetcher.
  Prefetcher(const Store* store, ByteCache* cache, InodeSpace space, const Options& options,
             PushFn push, const PushSource* source = nullptr);
  ~Prefetcher();  // stops the workers; queued jobs are dropped
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The kernel now knows the entries of directory `dir` (of the original tree or of a view):
  // push its regular files (once per directory, while the budget lasts).
  void DirectoryListed(uint64_t dir);
  // A read of `size` bytes at `offset` of file `ino`, whose store record is `rec` (the one the
  // read decoded: not decoded again), was served: detect sequential access and prefetch ahead
  // of it. Only reads of the original tree count; others are ignored.
  void ReadServed(uint64_t ino, const InodeRecord& rec, uint64_t offset, uint64_t size);
  // Decompresses every file below directory `dir` of the original tree into the RAM cache
  // until the cache is nearly full.
  void Preload(uint64_t dir);

  struct Stats {
    uint64_t pushed_files = 0, pushed_bytes = 0, push_retries = 0, push_failures = 0;
    uint64_t push_budget_bytes = 0;
    uint64_t readahead_files = 0, readahead_chunks = 0;
    // Preload's progress: files and bytes loaded of the totals below its directory (counted
    // before loading), seconds since it started (until it ended), and its state: "off" (not
    // asked for), "queued", "counting", "loading", "done", "stopped: cache full" (the cache
    // holds what fits) or "stopped" (unmounted first).
    uint64_t preload_files = 0, preload_bytes = 0, preload_total_files = 0;
    uint64_t preload_total_bytes = 0;
    double preload_seconds = 0;
    const char* preload_state = "off";
    bool preload_done = false;
    uint64_t queued_jobs = 0;
  };
  Stats stats() const;
  // Waits until no job is queued or running (tests, benchmarks).
  void WaitIdle();

 private:
  enum class Kind { kPushDir, kPrefetchFiles, kPrefetchChunks, kPreload };
  struct Job {
    Kind kind;
    uint64_t ino;        // kPushDir: a FUSE directory; else a store inode
    uint32_t count = 0;  // files (kPrefetchFiles) or chunks (kPrefetchChunks)
    uint64_t first = 0;  // first chunk (kPrefetchChunks)
  };
  void Enqueue(Job job, bool front = false);
  void Run(const Job& job);
  void PushDir(uint64_t dir);
  // Pushes file `ino` of `size` bytes, a chunk at a time; 0 or the first failure's -errno.
  int PushFile(uint64_t ino, uint64_t size);
  void PrefetchFiles(uint32_t first, uint32_t count);
  void PrefetchChunks(uint32_t ino, uint64_t first, uint32_t count);
  void PreloadTree(uint32_t dir);
  bool CacheNearlyFull() const;

  const Store* store_;
  ByteCache* const cache_;
  const InodeSpace space_;
  const Options options_;
  const PushFn push_;
  const PushSource* const source_;

  mutable std::mutex mu_;  // guards the fields below it
  std::unordered_set<uint64_t> pushed_dirs_;
  // Sequential-access detector (store inode numbers): the last read, and how many in a row
  // followed the one before.
  uint32_t last_ino_ = 0;
  uint64_t last_end_ = 0;
  uint32_t streak_ = 0;
  uint32_t prefetched_until_ino_ = 0;
  uint64_t prefetched_until_chunk_ = 0;

  std::atomic<uint64_t> pushed_files_{0}, pushed_bytes_{0}, push_retries_{0}, push_failures_{0};
  std::atomic<uint64_t> push_reserved_{0};
  std::atomic<uint64_t> readahead_files_{0}, readahead_chunks_{0};
  enum class PreloadState { kOff, kQueued, kCounting, kLoading, kDone, kCacheFull, kStopped };
  std::atomic<uint64_t> preload_files_{0}, preload_bytes_{0}, preload_total_{0};
  std::atomic<uint64_t> preload_total_bytes_{0};
  std::atomic<PreloadState> preload_state_{PreloadState::kOff};
  std::atomic<int64_t> preload_start_ns_{0}, preload_end_ns_{0};  // steady clock; 0: not yet
  std::atomic<bool> preload_done_{false};
  // Last: destroyed first, so no job runs on what the members above held.
  std::unique_ptr<WorkerGroup> workers_;
};

}  // namespace dsfs
