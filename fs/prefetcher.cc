#include "fs/prefetcher.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"

namespace dsfs {
namespace {

// A pushed file whose inode the kernel has not instantiated yet (the listing's reply is
// processed in the lister's context, after our reply is written) is retried a few times.
constexpr int kPushAttempts = 4;
constexpr auto kPushRetryDelay = std::chrono::milliseconds(20);
// Reads in a row that make an access pattern "sequential".
constexpr uint32_t kSequentialStreak = 2;

}  // namespace

Prefetcher::Prefetcher(const Store* store, ByteCache* cache, InodeSpace space,
                       const Options& options, PushFn push, const PushSource* source)
    : store_(store),
      cache_(cache),
      space_(space),
      options_(options),
      push_(std::move(push)),
      source_(source) {
  // Background work: on a 2-core machine it must never delay the threads answering requests
  // (a directory scan, a first read), only use the time they leave (nice 19).
  workers_ = std::make_unique<WorkerGroup>("dsfs-prefetch", options_.threads, 19);
}

// Jobs still queued are dropped; the running ones finish.
Prefetcher::~Prefetcher() { workers_->Stop(); }

void Prefetcher::Enqueue(Job job, bool front) {
  workers_->Add([this, job] { Run(job); }, nullptr, front);
}

void Prefetcher::Run(const Job& job) {
  switch (job.kind) {
    case Kind::kPushDir:
      PushDir(job.ino);
      break;
    case Kind::kPrefetchFiles:
      PrefetchFiles(static_cast<uint32_t>(job.ino), job.count);
      break;
    case Kind::kPrefetchChunks:
      PrefetchChunks(static_cast<uint32_t>(job.ino), job.first, job.count);
      break;
    case Kind::kPreload:
      PreloadTree(static_cast<uint32_t>(job.ino));
      preload_done_ = true;
      break;
  }
}

void Prefetcher::WaitIdle() { workers_->WaitIdle(); }

void Prefetcher::DirectoryListed(uint64_t dir) {
  if (options_.push_budget_bytes == 0 || !push_ || !source_) return;
  if (push_reserved_.load(std::memory_order_relaxed) >= options_.push_budget_bytes) return;
  {
    std::lock_guard lock(mu_);
    if (!pushed_dirs_.insert(dir).second) return;
  }
  Enqueue({Kind::kPushDir, dir});
}

void Prefetcher::PushDir(uint64_t dir) {
  Status listed = source_->ForEachFile(dir, [&](uint64_t ino, uint64_t size) {
    if (size == 0) return true;
    // Reserve the budget before the work, so parallel pushes cannot overshoot it.
    if (push_reserved_.fetch_add(size) + size > options_.push_budget_bytes) {
      push_reserved_.fetch_sub(size);
      return false;
    }
    int rc = PushFile(ino, size);
    for (int attempt = 1; rc == -ENOENT && attempt < kPushAttempts; ++attempt) {
      ++push_retries_;
      std::this_thread::sleep_for(kPushRetryDelay);
      rc = PushFile(ino, size);
    }
    if (rc == -ENOENT) {
      // The kernel does not know these inodes (a plain readdir, or they were forgotten):
      // pushing the rest of the directory would fail the same way.
      ++push_failures_;
      return false;
    }
    if (rc != 0) {
      ++push_failures_;
      return true;
    }
    ++pushed_files_;
    pushed_bytes_ += size;
    return true;
  });
  // Best effort: a directory that cannot be listed is read on demand instead.
  if (!listed.ok()) Log()->debug("push of directory {}: {}", dir, listed.message());
}

int Prefetcher::PushFile(uint64_t ino, uint64_t size) {
  ReadBuffer buf;
  uint64_t chunk = store_->header().chunk_bytes;
  for (uint64_t off = 0; off < size; off += chunk) {
    std::string_view data;
    // A damaged file is not pushed: its reader gets EIO from a READ instead.
    if (!source_->ReadFile(ino, off, chunk, &buf, &data).ok() || data.empty()) return -EIO;
    int rc = push_(ino, off, data);
    if (rc != 0) return rc;
  }
  return 0;
}

void Prefetcher::ReadServed(uint64_t fuse_ino, const InodeRecord& rec, uint64_t offset,
                            uint64_t size) {
  uint32_t ino;
  if (!cache_ || !space_.ToStore(fuse_ino, &ino)) return;
  Job job{Kind::kPrefetchFiles, 0};
  bool enqueue = false;
  {
    std::lock_guard lock(mu_);
    bool next_file = ino == last_ino_ + 1 && offset == 0;
    bool same_file_on = ino == last_ino_ && offset == last_end_;
    streak_ = (next_file || same_file_on) ? streak_ + 1 : 0;
    last_ino_ = ino;
    last_end_ = offset + size;
    if (streak_ >= kSequentialStreak) {
      uint64_t chunk = store_->header().chunk_bytes;
      uint64_t this_chunk = (offset + size) / chunk;
      if (rec.size > chunk && this_chunk + 1 < store_->ChunkCount(rec)) {
        // Front to back through a large file: keep readahead_chunks ahead.
        uint64_t from = std::max(
            this_chunk + 1, ino == prefetched_until_ino_ ? prefetched_until_chunk_ : uint64_t{0});
        uint64_t to = std::min(this_chunk + 1 + options_.readahead_chunks, store_->ChunkCount(rec));
        if (from < to) {
          job = {Kind::kPrefetchChunks, ino, static_cast<uint32_t>(to - from), from};
          prefetched_until_ino_ = ino;
          prefetched_until_chunk_ = to;
          enqueue = true;
        }
      } else if (ino + 1 > prefetched_until_ino_ ||
                 prefetched_until_ino_ - ino < options_.readahead_files / 2) {
        // Directory order: keep readahead_files ahead, topping up in halves.
        uint32_t from = std::max(ino + 1, prefetched_until_ino_);
        uint32_t to = ino + 1 + options_.readahead_files;
        job = {Kind::kPrefetchFiles, from, to - from};
        prefetched_until_ino_ = to;
        prefetched_until_chunk_ = 0;
        enqueue = to > from;
      }
    }
  }
  if (enqueue) Enqueue(job, /*front=*/true);
}

void Prefetcher::PrefetchFiles(uint32_t first, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    InodeRecord r;
    if (!store_->GetInode(first + i, &r).ok()) return;  // past the last inode
    if (!IsReg(r) || r.size == 0) continue;
    if (store_->Prefetch(r, 0).ok()) ++readahead_files_;
  }
}

void Prefetcher::PrefetchChunks(uint32_t ino, uint64_t first, uint32_t count) {
  InodeRecord r;
  if (!store_->GetInode(ino, &r).ok()) return;
  for (uint64_t c = first; c < first + count; ++c) {
    if (store_->Prefetch(r, c).ok()) ++readahead_chunks_;
  }
}

bool Prefetcher::CacheNearlyFull() const {
  if (!cache_) return true;
  ByteCache::Stats st = cache_->stats();
  // Stop short of the budget: evicting preloaded data to preload more gains nothing.
  return st.bytes >= st.capacity_bytes / 10 * 9;
}

namespace {
int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Prefetcher::Preload(uint64_t dir) {
  uint32_t ino;
  if (!space_.ToStore(dir, &ino)) return;
  preload_state_ = PreloadState::kQueued;
  Enqueue({Kind::kPreload, ino});
}

void Prefetcher::PreloadTree(uint32_t dir) {
  // Breadth-first order is inode order: directories' files are contiguous, so one pass over
  // the inode range below `dir` visits them. Count first, for progress.
  preload_start_ns_ = SteadyNs();
  preload_state_ = PreloadState::kCounting;
  auto end = [&](PreloadState state) {
    preload_end_ns_ = SteadyNs();
    preload_state_ = state;
  };
  std::vector<uint32_t> dirs{dir};
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // (first, count) of each directory
  uint64_t files = 0, bytes = 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    InodeRecord d;
    uint32_t first, count;
    if (!store_->GetInode(dirs[i], &d).ok() ||
        !store_->DirEntries(dirs[i], d, &first, &count).ok()) {
      continue;
    }
    ranges.emplace_back(first, count);
    for (uint32_t k = 0; k < count; ++k) {
      InodeRecord r;
      if (!store_->GetInode(first + k, &r).ok()) continue;
      if (IsDir(r)) dirs.push_back(first + k);
      if (IsReg(r)) {
        ++files;
        bytes += r.size;
      }
    }
  }
  preload_total_ = files;
  preload_total_bytes_ = bytes;
  preload_state_ = PreloadState::kLoading;
  for (auto [first, count] : ranges) {
    for (uint32_t k = 0; k < count; ++k) {
      if (workers_->stopping()) return end(PreloadState::kStopped);
      InodeRecord r;
      if (!store_->GetInode(first + k, &r).ok() || !IsReg(r)) continue;
      if (CacheNearlyFull()) return end(PreloadState::kCacheFull);
      for (uint64_t c = 0; c < store_->ChunkCount(r); ++c) {
        if (!store_->Prefetch(r, c).ok()) break;
      }
      ++preload_files_;
      preload_bytes_ += r.size;
    }
  }
  end(PreloadState::kDone);
}

Prefetcher::Stats Prefetcher::stats() const {
  Stats st;
  st.pushed_files = pushed_files_;
  st.pushed_bytes = pushed_bytes_;
  st.push_retries = push_retries_;
  st.push_failures = push_failures_;
  st.push_budget_bytes = options_.push_budget_bytes;
  st.readahead_files = readahead_files_;
  st.readahead_chunks = readahead_chunks_;
  st.preload_files = preload_files_;
  st.preload_bytes = preload_bytes_;
  st.preload_total_files = preload_total_;
  st.preload_total_bytes = preload_total_bytes_;
  st.preload_done = preload_done_;
  static constexpr const char* kStates[] = {
      "off", "queued", "counting", "loading", "done", "stopped: cache full", "stopped"};
  st.preload_state = kStates[static_cast<int>(preload_state_.load())];
  if (int64_t start = preload_start_ns_; start != 0) {
    int64_t end = preload_end_ns_;
    st.preload_seconds = static_cast<double>((end != 0 ? end : SteadyNs()) - start) / 1e9;
  }
  st.queued_jobs = workers_->pending();
  return st;
}

}  // namespace dsfs
