// ErofsReadahead: the kernel path's answer to a first touch (kernel/kernel_mount.h), as the push is
// the classic mount's (fs/prefetcher.h). When EROFS reads a block of a directory's entries, or a
// block of one of its files or their inodes, the metadata blocks of all the directory's
// children's inodes (with the tiny files inlined there: erofs::Image::ChildrenMeta) and their
// data (side by side in the image: erofs::Image::ChildrenData) are read from the image by a
// background worker and stored
// in the image file's page cache with `store` (fuse_lowlevel_notify_store), where EROFS, which
// reads the image through that page cache, finds it: the rest of the directory is served
// without a request. Once per directory, within a byte budget (-o push, as in a classic mount).
// A child larger than kMaxChildBytes is left out (counted in skipped_files): one huge file,
// such as a sparse one of zeros, would spend the budget and the page cache on itself alone;
// when it is read, the kernel's own readahead in the image brings it in.
//
// Thread safety: Touched and stats from any thread; the worker calls `store`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "common/worker_group.h"
#include "erofs/image.h"

namespace dsfs {

class ErofsReadahead {
 public:
  // Stores image bytes [offset, offset + data.size()) in the kernel's page cache of the image
  // file: 0 or -errno.
  using StoreFn = std::function<int(uint64_t offset, std::string_view data)>;

  // The largest child (file or directory's entry blocks) stored for its directory.
  static constexpr uint64_t kMaxChildBytes = 64ull << 20;

  // REQUIRES: `image` outlives this. budget_bytes == 0: Touched does nothing.
  ErofsReadahead(const erofs::Image* image, uint64_t budget_bytes, StoreFn store);
  ~ErofsReadahead();  // drops what is queued, finishes the piece being stored
  ErofsReadahead(const ErofsReadahead&) = delete;
  ErofsReadahead& operator=(const ErofsReadahead&) = delete;

  // A read of image bytes at `offset` was served (cheap: two binary searches and a set lookup).
  void Touched(uint64_t offset);

  struct Stats {
    uint64_t dirs = 0, bytes = 0, failures = 0, budget_bytes = 0;
    uint64_t skipped_files = 0;  // children left out, larger than kMaxChildBytes
  };
  Stats stats() const;
  // Waits until nothing is queued or being stored (tests).
  void WaitIdle();

 private:
  void StoreDir(uint32_t dir);

  const erofs::Image* image_;
  const uint64_t budget_;
  const StoreFn store_;
  std::mutex mu_;                      // guards seen_
  std::unordered_set<uint32_t> seen_;  // directories queued once
  std::atomic<uint64_t> reserved_{0}, dirs_{0}, bytes_{0}, failures_{0}, skipped_{0};
  // Last: destroyed first, so no job runs on what the members above held. Null: no budget.
  std::unique_ptr<WorkerGroup> worker_;
};

}  // namespace dsfs
