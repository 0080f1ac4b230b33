// A mount of a store in object storage whose endpoint stalls (tests/support/hostile_s3.h): the
// requests that fetch wait on fetch workers (common/worker_group.h), while the request threads keep
// answering what is in memory, the stats file and files in the RAM cache, over the classic
// /dev/fuse loop and over io_uring. Hang guards only (std::async with generous waits), no
// timed assertion. Under -o kernel the image server's reads wait on its own fetch threads
// (fuse/erofs_server.h), so its stats file answers while they stall. A stalled lookup holds no
// other lookup (the kernel's parallel dirops).
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernel/kernel_mount.h"
#include "tests/support/hostile_s3.h"
#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

constexpr int kCachedFiles = 4;
constexpr int kColdFiles = 6;  // more than the mount's 2 request threads
constexpr uint64_t kColdBytes = 2 << 20;
constexpr off_t kColdOffset = 1 << 20;  // each read in a 1 MiB block of its own
constexpr size_t kReadBytes = 4096;
// A stalled GET ends after the client's deadline (s3_timeout=): longer than the hang guard,
// so a request thread held by one answers nothing within it.
constexpr int kStallTimeoutS = 45;
constexpr auto kHangGuard = std::chrono::seconds(30);

// What one read(2) of `size` bytes at `offset` returned: the bytes, or the errno.
struct ReadResult {
  std::string bytes;
  int error = 0;
};

// O_DIRECT: every read is a READ request to the daemon, never the kernel's page cache.
ReadResult DirectRead(const std::string& path, off_t offset, size_t size) {
  ReadResult r;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    r.error = errno;
    return r;
  }
  void* mem = nullptr;
  if (::posix_memalign(&mem, 4096, size) != 0) {
    ::close(fd);
    r.error = ENOMEM;
    return r;
  }
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(mem), &std::free);
  ssize_t n = ::pread(fd, buf.get(), size, offset);
  if (n < 0) {
    r.error = errno;
  } else {
    r.bytes.assign(buf.get(), static_cast<size_t>(n));
  }
  ::close(fd);
  return r;
}

// A buffered read(2) (EROFS serves it from the page cache or asks the image server).
ReadResult BufferedRead(const std::string& path, off_t offset, size_t size) {
  ReadResult r;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.error = errno;
    return r;
  }
  r.bytes.resize(size);
  ssize_t n = ::pread(fd, r.bytes.data(), size, offset);
  if (n < 0) {
    r.error = errno;
    r.bytes.clear();
  } else {
    r.bytes.resize(static_cast<size_t>(n));
  }
  ::close(fd);
  return r;
}

// The stats file, read whole (it is never cached: each read is a request).
ReadResult ReadStatsFile(const std::string& mp) {
  ReadResult r;
  std::string error;
  if (!ReadAll(mp + "/.dsfs/stats", &r.bytes, &error)) r.error = EIO;
  return r;
}

// A small tree (cached/: a few small files, read first; cold/: large files, each read later at
// an offset of its own) pushed to a fresh bucket of a fresh hostile server, and mounted from
// there by each test.
class HostileS3Tree : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_CAN_MOUNT();
    if (!server_.ok()) GTEST_SKIP() << "SKIPPED: " << server_.error();
    src_ = dir_ / "src";
    for (int i = 0; i < kCachedFiles; ++i) {
      WriteFile(src_ + "/cached/c" + std::to_string(i), RandomBytes(3000 + 1000 * i, 11 + i));
    }
    for (int i = 0; i < kColdFiles; ++i) {
      WriteFile(src_ + "/cold/k" + std::to_string(i), RandomBytes(kColdBytes, 101 + i));
    }
    store_ = dir_ / "store.db";
    ASSERT_NO_FATAL_FAILURE(server_.PackAndPush(src_, store_, &url_));
  }

  std::string Cached(int i) const { return "/cached/c" + std::to_string(i); }
  std::string Cold(int i) const { return "/cold/k" + std::to_string(i); }

  using ReadFn = ReadResult (*)(const std::string& path, off_t offset, size_t size);

  // Puts in memory what the stall must not hold: the cached files, read whole with `read`, and
  // the cold files' metadata (looked up one by one: a listing would push their bytes into the
  // page cache).
  void ReadWhatStaysInMemory(const std::string& mp, ReadFn read) {
    for (int i = 0; i < kCachedFiles; ++i) {
      ReadResult c = read(mp + Cached(i), 0, 1 << 16);
      ASSERT_EQ(c.error, 0) << Cached(i) << ": " << std::strerror(c.error);
      ASSERT_EQ(c.bytes, ReadFile(src_ + Cached(i))) << Cached(i);
    }
    for (int i = 0; i < kColdFiles; ++i) {
      struct stat st;
      ASSERT_EQ(::stat((mp + Cold(i)).c_str(), &st), 0) << Cold(i) << ": " << std::strerror(errno);
      ASSERT_EQ(static_cast<uint64_t>(st.st_size), kColdBytes);
    }
  }

  // Stalls every GET of a data object and starts a read of each cold file with `read`; returns
  // once they reach the server beyond what two threads could hold (a bounded wait).
  std::vector<std::future<ReadResult>> StartStalledReads(const std::string& mp, ReadFn read) {
    server_.SetMode("stall /data/");
    const int stalled_before = server_.HostileRequests();
    std::vector<std::future<ReadResult>> cold;
    for (int i = 0; i < kColdFiles; ++i) {
      cold.push_back(std::async(std::launch::async, [this, &mp, read, i] {
        return read(mp + Cold(i), kColdOffset, kReadBytes);
      }));
    }
    const auto wait_until = Clock::now() + kHangGuard;
    while (server_.HostileRequests() < stalled_before + 3 && Clock::now() < wait_until) {
      std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_GE(server_.HostileRequests(), stalled_before + 3)
        << "the cold reads did not reach the server at the same time";
    return cold;
  }

  // Serves again; the stalled reads end within `wait` (EIO once the client's deadline passes),
  // or were served (a block fetched before the stall): never wrong bytes.
  void ExpectStalledReadsEnd(std::vector<std::future<ReadResult>>* cold,
                             std::chrono::seconds wait) {
    server_.SetMode("normal");
    for (int i = 0; i < kColdFiles; ++i) {
      ASSERT_EQ((*cold)[i].wait_for(wait), std::future_status::ready)
          << Cold(i) << ": the stalled read never ended";
      ReadResult cr = (*cold)[i].get();
      if (cr.error != 0) {
        EXPECT_EQ(cr.error, EIO) << Cold(i) << ": " << std::strerror(cr.error);
      } else {
        EXPECT_EQ(cr.bytes, ReadFile(src_ + Cold(i)).substr(kColdOffset, kReadBytes)) << Cold(i);
      }
    }
  }

  HostileS3 server_;
  TempDir dir_;
  std::string src_, store_, url_;
};

class HostileS3ThreadsTest : public HostileS3Tree,
                             public ::testing::WithParamInterface<const char*> {};

TEST_P(HostileS3ThreadsTest, AStalledFetchHoldsNoRequestThread) {
  const std::string transport = GetParam();
  std::unique_ptr<ScopedEnableUring> uring;
  if (transport == "uring") {
    if (::access(kEnableUringPath, F_OK) != 0) {
      GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring (no " << kEnableUringPath
                   << ")";
    }
    uring = std::make_unique<ScopedEnableUring>(true);
  }
  ASSERT_EQ(::mkdir((dir_ / "mp").c_str(), 0755), 0) << std::strerror(errno);
  MountGuard guard(dir_ / "mp");
  CommandResult r = guard.MountBackground(
      url_, {"-o", "cache_dir=" + (dir_ / "cache") + ",threads=2,transport=" + transport +
                       ",s3_attempts=1,s3_timeout=" + std::to_string(kStallTimeoutS)});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string mp = guard.mountpoint();

  // In memory: the cached files (their group in the RAM cache), the cold files' metadata, the
  // stats file.
  ASSERT_NO_FATAL_FAILURE(ReadWhatStaysInMemory(mp, DirectRead));
  ReadResult stats = ReadStatsFile(mp);
  ASSERT_EQ(stats.error, 0);
  if (transport == "uring") {
    if (stats.bytes.find("uring (") == std::string::npos) {
      GTEST_SKIP() << "SKIPPED: the mount is not served over io_uring: " << stats.bytes;
    }
  }

  // Every GET of a data object stalls from here: the cold reads block, more of them than the
  // request threads.
  std::vector<std::future<ReadResult>> cold = StartStalledReads(mp, DirectRead);

  // Meanwhile what is in memory is answered, by the request threads.
  for (int round = 0; round < 3; ++round) {
    auto s = std::async(std::launch::async, [&] { return ReadStatsFile(mp); });
    if (s.wait_for(kHangGuard) != std::future_status::ready) {
      server_.SetMode("normal");  // what is queued behind the stalled reads may then end
      FAIL() << "the stats file did not answer while fetches were stalled";
    }
    ReadResult sr = s.get();
    EXPECT_EQ(sr.error, 0);
    EXPECT_NE(sr.bytes.find("\"remote_gets\""), std::string::npos) << sr.bytes;
    for (int i = 0; i < kCachedFiles; ++i) {
      auto c =
          std::async(std::launch::async, [&, i] { return DirectRead(mp + Cached(i), 0, 1 << 16); });
      if (c.wait_for(kHangGuard) != std::future_status::ready) {
        server_.SetMode("normal");
        FAIL() << Cached(i) << " (in the RAM cache) did not answer while fetches were stalled";
      }
      ReadResult cr = c.get();
      ASSERT_EQ(cr.error, 0) << Cached(i) << ": " << std::strerror(cr.error);
      EXPECT_EQ(cr.bytes, ReadFile(src_ + Cached(i))) << Cached(i);
    }
    struct stat st;
    EXPECT_EQ(::stat((mp + Cold(round)).c_str(), &st), 0);  // metadata loaded: no fetch
  }

  ASSERT_NO_FATAL_FAILURE(ExpectStalledReadsEnd(&cold, std::chrono::seconds(4 * kStallTimeoutS)));
  for (int i = 0; i < kColdFiles; ++i) {
    ReadResult cr = DirectRead(mp + Cold(i), kColdOffset, kReadBytes);
    ASSERT_EQ(cr.error, 0) << Cold(i) << ": " << std::strerror(cr.error);
    EXPECT_EQ(cr.bytes, ReadFile(src_ + Cold(i)).substr(kColdOffset, kReadBytes)) << Cold(i);
  }
  guard.Release();
  EXPECT_FALSE(IsMounted(mp));
}

// A lookup that fetches (a cold directory's metadata, no disk cache) stalls: the kernel must not
// hold other lookups behind it. Without FUSE_PARALLEL_DIROPS in the INIT reply (libfuse 3.14
// never sends it: TransportOptions::parallel_dirops) it takes the directory's lock around each
// lookup, and the stats file's path (/.dsfs in the root) waited for the stalled lookup of
// /cold to end. The proof is the order: the stats file answers while that lookup still waits.
TEST_P(HostileS3ThreadsTest, AStalledLookupHoldsNoOtherLookup) {
  const std::string transport = GetParam();
  std::unique_ptr<ScopedEnableUring> uring;
  if (transport == "uring") {
    if (::access(kEnableUringPath, F_OK) != 0) {
      GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring (no " << kEnableUringPath
                   << ")";
    }
    uring = std::make_unique<ScopedEnableUring>(true);
  }
  constexpr int kLookupStallTimeoutS = 10;
  ASSERT_EQ(::mkdir((dir_ / "mp").c_str(), 0755), 0) << std::strerror(errno);
  MountGuard guard(dir_ / "mp");
  CommandResult r = guard.MountBackground(
      url_, {"-o", "cache_disk=0,threads=2,transport=" + transport +
                       ",s3_attempts=1,s3_timeout=" + std::to_string(kLookupStallTimeoutS)});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string mp = guard.mountpoint();

  server_.SetMode("stall /data/");
  const int stalled_before = server_.HostileRequests();
  auto lookup = std::async(std::launch::async, [&] {
    struct stat st;
    return ::stat((mp + Cold(0)).c_str(), &st) == 0 ? 0 : errno;
  });
  const auto wait_until = Clock::now() + kHangGuard;
  while (server_.HostileRequests() == stalled_before && Clock::now() < wait_until) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_GT(server_.HostileRequests(), stalled_before) << "the lookup fetched nothing";

  auto s = std::async(std::launch::async, [&] { return ReadStatsFile(mp); });
  if (s.wait_for(kHangGuard) != std::future_status::ready) {
    server_.SetMode("normal");
    FAIL() << "the stats file did not answer while a lookup was stalled";
  }
  const bool lookup_ended = lookup.wait_for(milliseconds(0)) == std::future_status::ready;
  ReadResult sr = s.get();
  EXPECT_EQ(sr.error, 0);
  EXPECT_NE(sr.bytes.find("\"remote_gets\""), std::string::npos) << sr.bytes;
  EXPECT_FALSE(lookup_ended) << "the stats file answered only once the stalled lookup ended";

  // Then the lookup ends (EIO at the client's deadline, or served) and the tree reads right.
  server_.SetMode("normal");
  ASSERT_EQ(lookup.wait_for(std::chrono::seconds(6 * kLookupStallTimeoutS)),
            std::future_status::ready)
      << "the stalled lookup never ended";
  const int err = lookup.get();
  EXPECT_TRUE(err == 0 || err == EIO) << std::strerror(err);
  for (int i = 0; i < kColdFiles; ++i) {
    EXPECT_EQ(ReadFile(mp + Cold(i)), ReadFile(src_ + Cold(i))) << Cold(i);
  }
  guard.Release();
  EXPECT_FALSE(IsMounted(mp));
}

// -o kernel: EROFS over the image served by the daemon's image server (2 session threads).
// While the endpoint stalls, the image reads that fetch wait on its fetch threads, and its
// stats file (a request to the image server every time) keeps answering; what EROFS holds is
// served by the kernel. The stall timeout is short: the proof is the order, the stats file
// answered while every stalled read is still waiting (with two session threads held, the
// stats read is queued behind the cold reads and answers only after some have failed).
TEST_F(HostileS3Tree, UnderKernelAStalledFetchHoldsNoSessionThread) {
  SKIP_UNLESS_ROOT();
  constexpr int kKernelStallTimeoutS = 10;
  ASSERT_EQ(::mkdir((dir_ / "mp").c_str(), 0755), 0) << std::strerror(errno);
  MountGuard guard(dir_ / "mp");
  // push=0: no readahead of whole directories (it would fetch the cold files at their first
  // lookup, before the stall).
  CommandResult r =
      guard.MountBackground(url_, {"-o", "kernel,cache_dir=" + (dir_ / "cache") +
                                             ",threads=2,push=0,s3_attempts=1,s3_timeout=" +
                                             std::to_string(kKernelStallTimeoutS)});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string mp = guard.mountpoint();
  struct statfs sf;
  ASSERT_EQ(::statfs(mp.c_str(), &sf), 0) << std::strerror(errno);
  if (sf.f_type != EROFS_SUPER_MAGIC_V1) {
    GTEST_SKIP() << "SKIPPED: -o kernel fell back to FUSE here (no EROFS?): " << Describe(r);
  }
  std::string stats_path;
  ASSERT_TRUE(KernelStatsPath(mp, &stats_path)) << mp;
  auto read_stats = [&] {
    ReadResult sr;
    std::string error;
    if (!ReadAll(stats_path, &sr.bytes, &error)) sr.error = EIO;
    return sr;
  };

  // The cached files (in EROFS's page cache now), the cold files' metadata.
  ASSERT_NO_FATAL_FAILURE(ReadWhatStaysInMemory(mp, BufferedRead));
  ASSERT_EQ(read_stats().error, 0);

  std::vector<std::future<ReadResult>> cold = StartStalledReads(mp, BufferedRead);

  for (int round = 0; round < 3; ++round) {
    auto s = std::async(std::launch::async, read_stats);
    if (s.wait_for(kHangGuard) != std::future_status::ready) {
      server_.SetMode("normal");
      FAIL() << "the stats file did not answer while fetches were stalled";
    }
    int ended = 0;
    for (auto& f : cold) ended += f.wait_for(milliseconds(0)) == std::future_status::ready;
    ReadResult sr = s.get();
    EXPECT_EQ(sr.error, 0);
    EXPECT_NE(sr.bytes.find("\"remote_gets\""), std::string::npos) << sr.bytes;
    if (round == 0) {
      EXPECT_EQ(ended, 0) << "the stats file answered only once " << ended
                          << " stalled reads had ended: they held the session threads";
    }
    for (int i = 0; i < kCachedFiles; ++i) {
      auto c = std::async(std::launch::async,
                          [&, i] { return BufferedRead(mp + Cached(i), 0, 1 << 16); });
      if (c.wait_for(kHangGuard) != std::future_status::ready) {
        server_.SetMode("normal");
        FAIL() << Cached(i) << " (read before) did not answer while fetches were stalled";
      }
      ReadResult cr = c.get();
      ASSERT_EQ(cr.error, 0) << Cached(i) << ": " << std::strerror(cr.error);
      EXPECT_EQ(cr.bytes, ReadFile(src_ + Cached(i))) << Cached(i);
    }
  }

  // Then every file reads right.
  ASSERT_NO_FATAL_FAILURE(
      ExpectStalledReadsEnd(&cold, std::chrono::seconds(6 * kKernelStallTimeoutS)));
  for (int i = 0; i < kColdFiles; ++i) {
    EXPECT_EQ(ReadFile(mp + Cold(i)), ReadFile(src_ + Cold(i))) << Cold(i);
  }
  for (int i = 0; i < kCachedFiles; ++i) {
    EXPECT_EQ(ReadFile(mp + Cached(i)), ReadFile(src_ + Cached(i))) << Cached(i);
  }
  guard.Release();
  EXPECT_FALSE(IsMounted(mp));
}

INSTANTIATE_TEST_SUITE_P(Transports, HostileS3ThreadsTest, ::testing::Values("classic", "uring"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace dsfs::testing
