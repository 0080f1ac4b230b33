// RequestWorkers: threads that serve FUSE requests the request threads hand over (fuse/fuse_ops.cc,
// ServeOrHandOver), so that a request that takes long never holds the threads every other
// request needs. A mount has two pools (mount/serve.cc): decoders, for requests that render an
// image not in the cache (CPU bound: as many as the request threads, at most one per core),
// and, on a remote store, fetchers, for requests that may wait on the object store (I/O bound:
// more threads than cores, bounded), so that slow fetches starve neither decodes nor the
// requests answered from memory.
//
// Thread safety: Submit may be called from any number of threads at once; the destructor from
// one thread, once no more Submit calls can come.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dsfs {

class RequestWorkers {
 public:
  // `threads` threads (at least 1), named `name` (at most 15 characters: top -H shows it).
  RequestWorkers(std::string name, int threads) : name_(std::move(name)) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      workers_.emplace_back([this] {
        ::pthread_setname_np(::pthread_self(), name_.c_str());
        Run();
      });
    }
  }
  // Every job still queued owes its request a reply: its `abandon` is called (it answers the
  // request, EIO) or, without one, the job is run. Then waits for the jobs running (a fetch
  // ends within the backend's own deadline).
  ~RequestWorkers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  // Queues `job` (it replies to its request); `abandon` replaces it if the pool is destroyed
  // before a thread took it (null: the job runs then).
  void Submit(std::function<void()> job, std::function<void()> abandon = nullptr) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back({std::move(job), std::move(abandon)});
    }
    cv_.notify_one();
  }

 private:
  struct Job {
    std::function<void()> run, abandon;
  };
  void Run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop_ and nothing owed
        job = std::move(jobs_.front());
        jobs_.pop_front();
        if (stop_ && job.abandon) job.run = std::move(job.abandon);
      }
      job.run();
    }
  }

  const std::string name_;
  std::mutex mu_;  // guards jobs_ and stop_
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dsfs
