// PerThread<T>: one T per thread for one reader (an LMDB read transaction, a RocksDB iterator:
// neither may be shared between threads), made on a thread's first use and owned by the
// reader, which destroys them all when it goes (Clear). A thread finds its own T in a short
// thread-local list keyed by the reader's id; ids are never reused, so the entry of a reader
// that is gone is never matched again. Internal to backend/.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace dsfs {

inline std::atomic<uint64_t> g_next_per_thread_id{1};

template <typename T>
class PerThread {
 public:
  PerThread() : id_(g_next_per_thread_id.fetch_add(1, std::memory_order_relaxed)) {}
  PerThread(const PerThread&) = delete;
  PerThread& operator=(const PerThread&) = delete;

  // This thread's T in *out, made by `make` (Status(std::unique_ptr<T>*)) on its first use.
  template <typename Make>
  Status Get(const Make& make, T** out) {
    auto& mine = ThreadList();
    for (const auto& [id, t] : mine) {
      if (id == id_) {
        *out = t;
        return Status::OK();
      }
    }
    std::unique_ptr<T> made;
    DSFS_RETURN_IF_ERROR(make(&made));
    T* raw = made.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      all_.push_back(std::move(made));
    }
    // Keeps the list short for threads that outlive many readers (tests).
    if (mine.size() >= 64) mine.erase(mine.begin());
    mine.emplace_back(id_, raw);
    *out = raw;
    return Status::OK();
  }

  // Destroys this thread's T `t`: its next Get makes another.
  void Retire(T* t) {
    auto& mine = ThreadList();
    mine.erase(std::remove_if(mine.begin(), mine.end(),
                              [&](const auto& e) { return e.first == id_ && e.second == t; }),
               mine.end());
    std::lock_guard<std::mutex> lock(mu_);
    all_.erase(std::remove_if(all_.begin(), all_.end(),
                              [&](const auto& owned) { return owned.get() == t; }),
               all_.end());
  }

  // Destroys every thread's T. REQUIRES: no thread uses one (the reader is going).
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    all_.clear();
  }

 private:
  static std::vector<std::pair<uint64_t, T*>>& ThreadList() {
    thread_local std::vector<std::pair<uint64_t, T*>> list;
    return list;
  }

  const uint64_t id_;
  std::mutex mu_;  // guards all_
  std::vector<std::unique_ptr<T>> all_;
};

}  // namespace dsfs
