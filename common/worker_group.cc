#include "common/worker_group.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace dsfs {

WorkerGroup::WorkerGroup(std::string name, int threads, int nice, OnStop on_stop)
    : name_(std::move(name)), on_stop_(on_stop) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, nice] {
      ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
      if (nice != kKeepNice) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
      Run();
    });
  }
}

WorkerGroup::~WorkerGroup() { Stop(); }

bool WorkerGroup::Add(std::function<void()> job, std::function<void()> abandon, bool front) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return false;
    Job j{std::move(job), std::move(abandon)};
    if (front) {
      jobs_.push_front(std::move(j));
    } else {
      jobs_.push_back(std::move(j));
    }
  }
  cv_.notify_one();
  return true;
}

void WorkerGroup::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing owed
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (stop_ && job.abandon) job.run = std::move(job.abandon);
      ++running_;
    }
    job.run();
    {
      std::lock_guard lock(mu_);
      --running_;
      if (running_ == 0 && jobs_.empty()) idle_cv_.notify_all();
    }
  }
}

void WorkerGroup::WaitIdle() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return running_ == 0 && jobs_.empty(); });
}

size_t WorkerGroup::pending() const {
  std::lock_guard lock(mu_);
  return jobs_.size() + running_;
}

void WorkerGroup::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
    stopping_.store(true, std::memory_order_relaxed);
    if (on_stop_ == OnStop::kDrop) jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  std::lock_guard lock(mu_);
  threads_.clear();
  idle_cv_.notify_all();
}

}  // namespace dsfs
