// WorkerGroup: a queue of jobs and the threads that run them, named and at a nice value of
// their own (as DwarFS's worker_group). The one worker pool of dsfs: the request workers of a
// mount (fuse/fuse_ops.h: decoders and fetchers), the prefetcher (fs/prefetcher.h), the image
// read-ahead (kernel/erofs_readahead.h) and pack's compressor (pack/compressor.h).
//
// Thread safety: Add, WaitIdle and pending from any number of threads; Stop (and the
// destructor) from one, once no more Add calls that matter can come (later ones return false).
#pragma once

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsfs {

class WorkerGroup {
 public:
  // The threads' nice value: kKeepNice keeps the creating thread's (threads inherit it);
  // background work (read-ahead, preload) asks for 19 so that it only ever uses the time the
  // threads answering requests leave. Raising priority needs root or CAP_SYS_NICE; without
  // them the threads keep the creating thread's.
  static constexpr int kKeepNice = INT_MIN;
  // What Stop does with the jobs still queued.
  enum class OnStop {
    kDrop,     // discarded, never run (work that only saves time later)
    kAbandon,  // each one's `abandon` runs in its place, or the job itself without one: a job
               // that owes someone an answer (a FUSE request) still gives one
  };

  // `threads` threads (at least 1), named `name` (at most 15 characters: top -H shows it).
  WorkerGroup(std::string name, int threads, int nice = kKeepNice, OnStop on_stop = OnStop::kDrop);
  ~WorkerGroup();  // Stop()
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Queues `job`, at the back or (`front`) ahead of everything queued; false, and nothing
  // queued, once Stop has begun.
  bool Add(std::function<void()> job, std::function<void()> abandon = nullptr, bool front = false);
  // Waits until no job is queued or running (tests, benchmarks).
  void WaitIdle();
  // Jobs queued or running.
  size_t pending() const;
  int threads() const { return static_cast<int>(threads_.size()); }
  // True once Stop has begun: a long job (a preload) checks it to end early.
  bool stopping() const { return stopping_.load(std::memory_order_relaxed); }

  // Takes no more jobs, disposes of the queued ones as OnStop says, and waits for the running
  // ones. Safe to call twice.
  void Stop();

 private:
  struct Job {
    std::function<void()> run, abandon;
  };
  void Run();

  const std::string name_;
  const OnStop on_stop_;
  mutable std::mutex mu_;  // guards the fields below it
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> jobs_;
  size_t running_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace dsfs
