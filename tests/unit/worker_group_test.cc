// common/worker_group.h: the one worker pool (request workers, prefetcher, image read-ahead,
// pack's compressor).
#include "common/worker_group.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsfs::testing {
namespace {

using std::chrono::milliseconds;

TEST(WorkerGroupTest, RunsEveryJobOnItsThreadsAndWaitsIdle) {
  WorkerGroup g("dsfs-wg-test", 3);
  EXPECT_EQ(g.threads(), 3);
  std::atomic<int> done{0};
  std::mutex mu;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(g.Add([&] {
      char name[16] = {};
      ::pthread_getname_np(::pthread_self(), name, sizeof(name));
      {
        std::lock_guard lock(mu);
        names.push_back(name);
      }
      done.fetch_add(1);
    }));
  }
  g.WaitIdle();
  EXPECT_EQ(done.load(), 100);
  EXPECT_EQ(g.pending(), 0u);
  for (const std::string& n : names) EXPECT_EQ(n, "dsfs-wg-test");
}

TEST(WorkerGroupTest, AtLeastOneThreadAndTheNiceValueAsked) {
  WorkerGroup g("dsfs-wg-nice", 0, 19);
  EXPECT_EQ(g.threads(), 1);
  std::atomic<int> nice{-100};
  g.Add([&] { nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())); });
  g.WaitIdle();
  EXPECT_EQ(nice.load(), 19);
}

TEST(WorkerGroupTest, FrontJobsRunBeforeThoseQueued) {
  WorkerGroup g("dsfs-wg-order", 1);
  std::atomic<bool> release{false};
  std::vector<int> order;
  g.Add([&] {
    while (!release.load()) std::this_thread::sleep_for(milliseconds(1));
  });
  // The one thread is busy: these queue up.
  g.Add([&] { order.push_back(1); });
  g.Add([&] { order.push_back(2); });
  g.Add([&] { order.push_back(0); }, nullptr, /*front=*/true);
  release = true;
  g.WaitIdle();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

// OnStop::kDrop: what is queued is never run; the running job finishes; later Adds refused.
TEST(WorkerGroupTest, StopDropsWhatIsQueuedAndFinishesWhatRuns) {
  auto g = std::make_unique<WorkerGroup>("dsfs-wg-drop", 1);
  std::atomic<bool> started{false}, finished{false}, stopping_seen{false};
  std::atomic<int> queued_ran{0};
  g->Add([&] {
    started = true;
    while (!g->stopping()) std::this_thread::sleep_for(milliseconds(1));
    stopping_seen = true;
    finished = true;
  });
  for (int i = 0; i < 10; ++i) g->Add([&] { queued_ran.fetch_add(1); });
  while (!started.load()) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(g->pending(), 11u);
  g->Stop();
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(stopping_seen.load());
  EXPECT_EQ(queued_ran.load(), 0);
  EXPECT_FALSE(g->Add([&] { queued_ran.fetch_add(1); }));
  g->Stop();  // twice: nothing
  g.reset();
  EXPECT_EQ(queued_ran.load(), 0);
}

// OnStop::kAbandon: every job queued gets its abandon run instead (a FUSE request its EIO), or
// runs itself without one: nothing that owes an answer is lost.
TEST(WorkerGroupTest, AbandonedJobsRunTheirAbandonOrThemselves) {
  std::atomic<bool> release{false};
  std::atomic<int> ran{0}, abandoned{0};
  {
    WorkerGroup g("dsfs-wg-aband", 1, WorkerGroup::kKeepNice, WorkerGroup::OnStop::kAbandon);
    g.Add([&] {
      while (!release.load()) std::this_thread::sleep_for(milliseconds(1));
    });
    for (int i = 0; i < 5; ++i) g.Add([&] { ran.fetch_add(1); }, [&] { abandoned.fetch_add(1); });
    for (int i = 0; i < 3; ++i) g.Add([&] { ran.fetch_add(1); });
    std::thread stopper([&] { g.Stop(); });
    while (!g.stopping()) std::this_thread::sleep_for(milliseconds(1));
    release = true;
    stopper.join();
  }
  EXPECT_EQ(abandoned.load(), 5);
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace dsfs::testing
