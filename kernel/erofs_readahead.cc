#include "kernel/erofs_readahead.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/log.h"

namespace dsfs {
namespace {
// Bytes read from the image and stored per call: a few store chunks' worth.
constexpr uint64_t kPiece = 1 << 20;
}  // namespace

ErofsReadahead::ErofsReadahead(const erofs::Image* image, uint64_t budget_bytes, StoreFn store)
    : image_(image), budget_(budget_bytes), store_(std::move(store)) {
  if (budget_ == 0) return;
  // Background work: it must never delay the threads that answer the reader's own requests.
  worker_ = std::make_unique<WorkerGroup>("dsfs-image-ra", 1, 19);
}

// What is queued is dropped; the directory being stored is finished.
ErofsReadahead::~ErofsReadahead() {
  if (worker_) worker_->Stop();
}

void ErofsReadahead::Touched(uint64_t offset) {
  if (budget_ == 0 || reserved_.load(std::memory_order_relaxed) >= budget_) return;
  uint32_t dir;
  if (!image_->DirOfByte(offset, &dir)) return;
  {
    std::lock_guard lock(mu_);
    if (!seen_.insert(dir).second) return;
  }
  worker_->Add([this, dir] { StoreDir(dir); });
}

void ErofsReadahead::StoreDir(uint32_t dir) {
  // The children's data as ranges of neighbours, leaving out every child larger than
  // kMaxChildBytes: one huge file (a sparse 5 GiB one reads as zeros) would spend the budget,
  // and the page cache, on bytes nobody may read; the kernel reads it ahead itself when read.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t len = 0, skipped = 0;
  // First the metadata blocks of the children's inodes, which hold all of a tiny file (inline
  // data): EROFS reads them a page at a time, with no readahead of its own.
  uint64_t meta_offset, meta_len;
  image_->ChildrenMeta(dir, &meta_offset, &meta_len);
  if (meta_len > 0) {
    ranges.emplace_back(meta_offset, meta_len);
    len += meta_len;
  }
  image_->ForEachChildData(dir, [&](uint64_t offset, uint64_t n) {
    if (n > kMaxChildBytes) {
      ++skipped;
      return;
    }
    if (!ranges.empty() && ranges.back().first + ranges.back().second == offset) {
      ranges.back().second += n;
    } else {
      ranges.emplace_back(offset, n);
    }
    len += n;
  });
  if (skipped > 0) skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (len == 0) return;
  // Reserve the budget before the work; a directory past what is left is not stored at all.
  if (reserved_.fetch_add(len) + len > budget_) {
    reserved_.fetch_sub(len);
    return;
  }
  std::vector<char> buf(std::min(len, kPiece));
  for (const auto& [offset, range_len] : ranges) {
    for (uint64_t done = 0; done < range_len;) {
      if (worker_->stopping()) return;  // the piece being stored is finished, no more
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, range_len - done));
      Status s = image_->Read(offset + done, n, buf.data());
      if (!s.ok()) {
        // A damaged record under this piece: the reader's own reads of it fail with EIO (or,
        // for its neighbours in the piece, succeed) through requests; the pieces after it are
        // stored.
        failures_.fetch_add(1, std::memory_order_relaxed);
        Log()->debug("readahead of the image at {} (+{}): {}", offset + done, n, s.message());
        done += n;
        continue;
      }
      int rc = store_(offset + done, std::string_view(buf.data(), n));
      if (rc != 0) {
        failures_.fetch_add(1, std::memory_order_relaxed);
        Log()->debug("storing the image at {} (+{}) in the page cache: {}", offset + done, n, -rc);
        return;
      }
      bytes_.fetch_add(n, std::memory_order_relaxed);
      done += n;
    }
  }
  dirs_.fetch_add(1, std::memory_order_relaxed);
}

ErofsReadahead::Stats ErofsReadahead::stats() const {
  Stats st;
  st.dirs = dirs_.load(std::memory_order_relaxed);
  st.bytes = bytes_.load(std::memory_order_relaxed);
  st.failures = failures_.load(std::memory_order_relaxed);
  st.skipped_files = skipped_.load(std::memory_order_relaxed);
  st.budget_bytes = budget_;
  return st;
}

void ErofsReadahead::WaitIdle() {
  if (worker_) worker_->WaitIdle();
}

}  // namespace dsfs
