// DecodeWorkers: the threads that serve reads which decode images (fs/fuse_ops.cc hands them
// over), so that a reader of large images never holds the request threads.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsfs {

// Reads that decode images, served on threads of their own so that a reader of large images
// never holds the request threads every other request needs; as many as the request threads
// (at most one per core), so decoding runs as parallel as before and its memory stays bounded.
// Jobs still queued when it is destroyed are run first: each owes its request a reply.
class DecodeWorkers {
 public:
  explicit DecodeWorkers(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
  }
  ~DecodeWorkers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  DecodeWorkers(const DecodeWorkers&) = delete;
  DecodeWorkers& operator=(const DecodeWorkers&) = delete;
  void Submit(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop_ and nothing owed
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;  // guards jobs_ and stop_
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dsfs
