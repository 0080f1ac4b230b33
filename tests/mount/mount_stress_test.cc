// Load: many readers in several processes against one mount, across the original tree and the
// views; the daemon's memory within its cache budget.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kernel/kernel_mount.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// Load: many readers in several processes against one mount, across the original tree and the
// views, with no error; the daemon's memory within its cache budget; unmounting under load.
// DSFS_STRESS_SECONDS sets the duration (short in the normal suite, minutes in CI's sanitizer
// stage, where the daemon is the sanitizer build and reports abort it).

int StressSeconds() {
  const char* v = std::getenv("DSFS_STRESS_SECONDS");
  int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : 3;
}

struct StressData {
  std::vector<std::pair<std::string, std::string>> files;  // path below the mount, contents
  std::vector<std::string> images;                         // image paths below the mount
  std::vector<std::string> dirs;                           // directories in every view
};

struct StressCounts {
  uint64_t requests = 0, errors = 0;
  std::string first_error;
};

// One reader: random operations until `stop`, each checked. Safe after fork (no locks held).
// Failures once `unmounting` is set are the unmount's, not counted.
void StressReader(const std::string& mp, const StressData& d, uint32_t seed,
                  const std::atomic<bool>& stop, const std::atomic<bool>& unmounting,
                  StressCounts* c) {
  std::mt19937 rng(seed);
  std::string buf(256 << 10, '\0');
  auto fail = [&](const std::string& what) {
    if (unmounting.load()) return;
    ++c->errors;
    if (c->first_error.empty()) c->first_error = what + ": " + ErrnoName(errno);
  };
  // Half the reads bypass the kernel's page cache (O_DIRECT), so they reach the daemon. A
  // -o kernel mount (EROFS) refuses O_DIRECT at odd offsets and shows no .dsfs views: its
  // readers read, stat and list the original tree only, through the page cache.
  const bool kernel = KernelMountUnderTest();
  const int direct = kernel ? 0 : O_DIRECT;
  auto pread_at = [&](const std::string& path, uint64_t off, size_t n, ssize_t* got) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (rng() % 2 ? direct : 0));
    if (fd < 0) return false;
    *got = ::pread(fd, buf.data(), std::min(n, buf.size()), static_cast<off_t>(off));
    ::close(fd);
    return *got >= 0;
  };
  static const char* kViews[] = {
      "", "/.dsfs/bmp", "/.dsfs/npy", "/.dsfs/tensor", "/.dsfs/bmp-16", "/.dsfs/jpeg-16"};
  const uint32_t views = kernel ? 1 : 6;
  while (!stop.load(std::memory_order_relaxed)) {
    ++c->requests;
    ssize_t got = 0;
    uint32_t op = rng() % 8;
    if (kernel && op >= 5) op = static_cast<uint32_t>(rng() % 3);  // no views: original bytes
    switch (op) {
      case 0:
      case 1:
      case 2: {  // original bytes at a random place
        const auto& [rel, data] = d.files[rng() % d.files.size()];
        uint64_t off = rng() % data.size();
        size_t n = 1 + rng() % (200 << 10);
        if (!pread_at(mp + rel, off, n, &got)) {
          fail("read " + rel);
        } else if (std::string_view(buf.data(), static_cast<size_t>(got)) !=
                   std::string_view(data).substr(off, n)) {
          fail("wrong bytes in " + rel);
        }
        break;
      }
      case 3: {  // stat in some view
        struct stat st;
        const std::string& rel = d.images[rng() % d.images.size()];
        std::string path = mp + kViews[rng() % views] + rel;
        if (path.find("/npy/") != std::string::npos) path += ".npy";
        if (::stat(path.c_str(), &st) != 0) fail("stat " + path);
        break;
      }
      case 4: {  // a listing in some view
        std::string path = mp + kViews[rng() % views] + d.dirs[rng() % d.dirs.size()];
        DIR* dir = ::opendir(path.c_str());
        if (!dir) {
          fail("opendir " + path);
          break;
        }
        int n = 0;
        while (::readdir(dir)) ++n;
        ::closedir(dir);
        if (n < 3) fail("short listing of " + path);
        break;
      }
      case 5: {  // a BMP (the 8x8 images are at or below 16: a BMP in the resized views too)
        static const char* kBmps[] = {"/.dsfs/bmp", "/.dsfs/bmp-16", "/.dsfs/jpeg-16"};
        std::string path = mp + kBmps[rng() % 3] + d.images[rng() % d.images.size()];
        if (!pread_at(path, 0, 4096, &got) || got < 54 || buf.compare(0, 2, "BM") != 0) {
          fail("bmp " + path);
        }
        break;
      }
      case 6: {  // an npy
        std::string path = mp + "/.dsfs/npy" + d.images[rng() % d.images.size()] + ".npy";
        if (!pread_at(path, 0, 4096, &got) || got < 64 || buf.compare(0, 6, "\x93NUMPY") != 0) {
          fail("npy " + path);
        }
        break;
      }
      default: {  // a slice of the tensor view's batch file
        std::string path = mp + "/.dsfs/tensor/train/images.npy";
        if (!pread_at(path, rng() % 40000, 8192, &got) || got == 0) fail("tensor " + path);
        break;
      }
    }
  }
}

TEST(StressTest, ReadersInManyThreadsAndProcessesSeeNoErrorAndUnmountIsPrompt) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  const std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  StressData d;
  // 400 8x8 images in 10 classes (the tensor view exists), text files, two chunked files.
  const std::string corpus = std::string(DSFS_FUZZ_DIR) + "/corpus/image/";
  const char* kImages[] = {"rgb8.jpg", "gray8.jpg", "rgb8.png", "pal8.png", "rgba8.png"};
  MakeDir(src);
  MakeDir(src + "/train");
  MakeDir(src + "/text");
  d.dirs = {"", "/train", "/text"};
  for (int c = 0; c < 10; ++c) {
    std::string cls = "/train/c" + std::to_string(c);
    MakeDir(src + cls);
    d.dirs.push_back(cls);
    for (int i = 0; i < 40; ++i) {
      const char* name = kImages[(c + i) % 5];
      std::string rel = cls + "/i" + std::to_string(i) + std::strrchr(name, '.');
      std::string data = ReadFile(corpus + name);
      PutFile(src + rel, data);
      d.images.push_back(rel);
      d.files.emplace_back(rel, data);
    }
  }
  for (int i = 0; i < 100; ++i) {
    std::string rel = "/text/t" + std::to_string(i);
    std::string data = TextBytes(100 + i * 200, i);
    PutFile(src + rel, data);
    d.files.emplace_back(rel, data);
  }
  for (int i = 0; i < 2; ++i) {
    std::string rel = "/text/big" + std::to_string(i);
    std::string data = TextBytes(3 << 20, 100 + i);
    PutFile(src + rel, data);
    d.files.emplace_back(rel, data);
  }
  MakeDir(mp);
  CommandResult r = Dsfs({"pack", "-q", "--chunk-size", "64K", "-l", "3", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  MountGuard guard(mp);
  // timeout=0: every lookup and stat reaches the daemon too.
  r = guard.MountBackground(store, {"-o", "cache_size=16M,threads=4,timeout=0"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  const pid_t daemon = guard.daemons()[0];

  const int seconds = StressSeconds();
  constexpr int kProcesses = 8, kThreadsPerProcess = 4, kThreads = 64;
  // The processes first, while this one has no threads of its own.
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < kProcesses; ++p) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      std::atomic<bool> stop{false}, never{false};
      std::vector<StressCounts> counts(kThreadsPerProcess);
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreadsPerProcess; ++t) {
        ts.emplace_back(StressReader, std::cref(mp), std::cref(d), 1000 + p * 100 + t,
                        std::cref(stop), std::cref(never), &counts[t]);
      }
      std::this_thread::sleep_for(std::chrono::seconds(seconds));
      stop = true;
      for (auto& t : ts) t.join();
      std::string report;
      uint64_t req = 0, err = 0;
      for (auto& c : counts) {
        req += c.requests;
        err += c.errors;
        if (report.empty()) report = c.first_error;
      }
      report = std::to_string(req) + " " + std::to_string(err) + " " + report;
      (void)!::write(fds[1], report.data(), report.size());
      _exit(0);
    }
    ASSERT_GT(pid, 0);
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  std::atomic<bool> stop{false}, unmounting{false};
  std::vector<StressCounts> counts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(StressReader, std::cref(mp), std::cref(d), t + 1, std::cref(stop),
                         std::cref(unmounting), &counts[t]);
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  uint64_t requests = 0, errors = 0;
  std::string first_error;
  for (auto& [pid, fd] : children) {
    std::string report;
    char b[512];
    for (ssize_t n; (n = ::read(fd, b, sizeof(b))) > 0;) report.append(b, static_cast<size_t>(n));
    ::close(fd);
    int st = 0;
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "reader process " << pid;
    std::istringstream in(report);
    uint64_t req = 0, err = 0;
    in >> req >> err;
    std::string msg;
    std::getline(in, msg);
    requests += req;
    errors += err;
    if (first_error.empty() && err) first_error = msg;
  }
  // What the daemon itself served (the kernel answers many reads from its page cache).
  // (Of a -o kernel mount: the image reads of its private mount's stats file, as `dsfs stats`.)
  const bool kernel = KernelMountUnderTest();
  std::string stats, stats_error, stats_path = mp + "/.dsfs/stats";
  if (kernel) {
    EXPECT_TRUE(KernelStatsPath(mp, &stats_path)) << mp;
  }
  ASSERT_TRUE(ReadAll(stats_path, &stats, &stats_error)) << stats_error;
  auto counter = [&](const std::string& key) {
    size_t at = stats.find("\"" + key + "\": ");
    return at == std::string::npos ? -1LL : std::atoll(stats.c_str() + at + key.size() + 4);
  };
  const long long daemon_reads = counter(kernel ? "image_reads" : "read"),
                  daemon_lookups = counter("lookup"),
                  daemon_errors = counter(kernel ? "image_read_errors" : "read_errors");
  // Unmount while the 64 threads still read: errors from here on are the unmount's.
  const uint64_t peak_kb = ProcStatusKb(daemon, "VmHWM");
  unmounting = true;
  auto t0 = std::chrono::steady_clock::now();
  r = Dsfs({"umount", mp, "--lazy"}, 30);
  double umount_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (auto& t : threads) t.join();
  for (auto& c : counts) {
    requests += c.requests;
    errors += c.errors;
    if (first_error.empty()) first_error = c.first_error;
  }
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  // A hang, not a speed: under a sanitizer on 2 busy vCPUs it is usually under 1 s, but one CI
  // run measured 8.2 s (the rerun 0.47 s).
  EXPECT_LT(umount_s, 20.0) << "unmount under load took " << umount_s << " s";
  int wstatus = 0;
  bool exited = WaitChild(daemon, milliseconds(10000), &wstatus);
  EXPECT_TRUE(exited) << "daemon still runs 10 s after a lazy unmount";
  if (exited) {
    guard.Forget(daemon);
    // A sanitizer report (in a sanitizer build) makes the daemon exit non-zero.
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "daemon status " << wstatus;
  }
  std::printf(
      "[ stress ] %d s, %d threads + %d processes x %d threads: %llu requests, %llu errors;"
      " daemon peak RSS %.1f MiB (cache budget 16 MiB); lazy unmount under load %.3f s\n",
      seconds, kThreads, kProcesses, kThreadsPerProcess, static_cast<unsigned long long>(requests),
      static_cast<unsigned long long>(errors), peak_kb / 1024.0, umount_s);
  std::printf("[ stress ] the daemon served %lld reads and %lld lookups with %lld read errors\n",
              daemon_reads, daemon_lookups, daemon_errors);
  EXPECT_EQ(errors, 0u) << first_error;
  EXPECT_EQ(daemon_errors, 0);
  // EROFS asks for the image in large requests (and its readahead stores whole directories):
  // fewer, larger reads than the classic mount's, whose O_DIRECT reads each reach the daemon.
  EXPECT_GT(daemon_reads, kernel ? 0 : 100);
  EXPECT_GT(requests, 1000u);
  RecordProperty("requests", static_cast<int>(std::min<uint64_t>(requests, INT32_MAX)));
  RecordProperty("peak_rss_kb", static_cast<int>(peak_kb));
}

// Reading a store ten times larger than the cache budget (after decompression) keeps the
// daemon's resident memory within the budget plus a fixed overhead.
TEST(StressTest, CacheBudgetHoldsReadingAStoreTenTimesLarger) {
  SKIP_UNLESS_CAN_MOUNT();
  TempDir dir;
  const std::string src = dir / "src", store = dir / "s.dsfs", mp = dir / "mnt";
  constexpr uint64_t kBudgetMiB = 16, kOverheadMiB = 48;
  MakeDir(src);
  MakeDir(mp);
  std::vector<std::string> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back("/f" + std::to_string(i));
    PutFile(src + files.back(), TextBytes(8 << 20, 500 + i));  // 160 MiB in all
  }
  CommandResult r = Dsfs({"pack", "-q", "-l", "1", "--dict-size", "0", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  MountGuard guard(mp);
  r = guard.MountBackground(store, {"-o", "cache_size=16M,push=0,threads=4"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_EQ(guard.daemons().size(), 1u);
  const pid_t daemon = guard.daemons()[0];
  const uint64_t start_kb = ProcStatusKb(daemon, "VmRSS");
  // Twice through, with O_DIRECT-free plain reads: the kernel's page cache is dropped for
  // the mount between passes so every byte is requested from the daemon again.
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& f : files) {
      std::string data, error;
      ASSERT_TRUE(ReadAll(mp + f, &data, &error)) << error;
      ASSERT_EQ(data.size(), 8u << 20);
      int fd = ::open((mp + f).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
    }
  }
  const uint64_t peak_kb = ProcStatusKb(daemon, "VmHWM");
  std::printf(
      "[ budget ] read 2 x 160 MiB through a 16 MiB cache: daemon RSS at mount %.1f MiB,"
      " peak %.1f MiB (budget %llu + overhead %llu MiB%s)\n",
      start_kb / 1024.0, peak_kb / 1024.0, static_cast<unsigned long long>(kBudgetMiB),
      static_cast<unsigned long long>(kOverheadMiB),
      kSanitized ? "; not checked: sanitizer build" : "");
  RecordProperty("peak_rss_kb", static_cast<int>(peak_kb));
  if (!kSanitized) {
    EXPECT_LE(peak_kb, (kBudgetMiB + kOverheadMiB) * 1024);
  }
}

}  // namespace
}  // namespace dsfs::testing
