// FileWatch (common/file_watch.h): a mapped file truncated under its mapping reads zeros where
// it lost its pages (instead of killing the process with SIGBUS), the watch thread reports
// the change, and a fault outside a guarded mapping still kills the process.
#include "common/file_watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>

#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

constexpr size_t kPage = 4096;

// A file of `pages` pages of 0xab, open and mapped read-only (shared), as LMDB maps a store.
struct MappedFile {
  explicit MappedFile(const std::string& path, size_t pages) : path(path), bytes(pages * kPage) {
    PutFile(path, std::string(bytes, '\xab'));
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    map = static_cast<const char*>(::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0));
  }
  ~MappedFile() {
    if (map != MAP_FAILED) ::munmap(const_cast<char*>(map), bytes);
    if (fd >= 0) ::close(fd);
  }
  bool ok() const { return fd >= 0 && map != MAP_FAILED; }
  // Reads byte `i` through the mapping (volatile: the load happens here).
  char At(size_t i) const { return static_cast<const volatile char*>(map)[i]; }

  std::string path;
  size_t bytes;
  int fd = -1;
  const char* map = static_cast<const char*>(MAP_FAILED);
};

TEST(FileWatchTest, TruncatedMappingReadsZerosAndTheChangeIsReported) {
  TempDir dir;
  MappedFile f(dir / "store", 16);
  ASSERT_TRUE(f.ok());
  std::atomic<int> modified{0}, faulted{0};
  auto watch = FileWatch::Start(f.fd, f.map, f.bytes, [&](FileWatch::Event e) {
    (e == FileWatch::Event::kModified ? modified : faulted).fetch_add(1);
  });
  EXPECT_EQ(f.At(10 * kPage), '\xab');
  ASSERT_EQ(::truncate(f.path.c_str(), 4 * kPage), 0);
  // Past the new end: zeros, not SIGBUS; before it, the bytes are still there.
  EXPECT_EQ(f.At(10 * kPage), '\0');
  EXPECT_EQ(f.At(15 * kPage + 7), '\0');
  EXPECT_EQ(f.At(5 * kPage), '\0');
  EXPECT_EQ(f.At(3 * kPage), '\xab');
  // One fault took the whole rest of the mapping: the later reads past the end did not fault.
  EXPECT_EQ(watch->faults(), 1u);
  EXPECT_TRUE(WaitUntil([&] { return modified.load() > 0 && faulted.load() > 0; },
                        std::chrono::milliseconds(30000)))
      << "modified " << modified.load() << ", faulted " << faulted.load();
  watch.reset();
}

TEST(FileWatchTest, RenameOverThePathIsNoChange) {
  TempDir dir;
  MappedFile f(dir / "store", 4);
  ASSERT_TRUE(f.ok());
  std::atomic<int> calls{0};
  auto watch = FileWatch::Start(f.fd, f.map, f.bytes, [&](FileWatch::Event) { ++calls; });
  PutFile(dir / "next", std::string(kPage, 'x'));
  std::filesystem::rename(dir / "next", f.path);
  // A change of another watched file is seen after it: then this one's would have been too
  // (the watch thread handles events in order).
  MappedFile other(dir / "other", 2);
  ASSERT_TRUE(other.ok());
  std::atomic<int> other_calls{0};
  auto other_watch =
      FileWatch::Start(other.fd, nullptr, 0, [&](FileWatch::Event) { ++other_calls; });
  ASSERT_EQ(::truncate(other.path.c_str(), 0), 0);
  EXPECT_TRUE(WaitUntil([&] { return other_calls.load() > 0; }, std::chrono::milliseconds(30000)));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(f.At(3 * kPage), '\xab') << "the old inode, as it was";
  EXPECT_EQ(watch->faults(), 0u);
}

TEST(FileWatchTest, WatchesOfOneFileAreIndependent) {
  TempDir dir;
  MappedFile a(dir / "store", 8);
  ASSERT_TRUE(a.ok());
  std::atomic<int> first{0}, second{0};
  auto w1 = FileWatch::Start(a.fd, a.map, a.bytes, [&](FileWatch::Event) { ++first; });
  auto w2 = FileWatch::Start(a.fd, nullptr, 0, [&](FileWatch::Event) { ++second; });
  w1.reset();  // the inode's inotify watch stays for the second one
  ASSERT_EQ(::truncate(a.path.c_str(), kPage), 0);
  EXPECT_TRUE(WaitUntil([&] { return second.load() > 0; }, std::chrono::milliseconds(30000)));
  EXPECT_EQ(first.load(), 0);
}

TEST(FileWatchDeathTest, FaultOutsideAGuardedMappingStillKills) {
  // A sanitizer installs its own SIGBUS handler (it reports, and the CI counts the report as a
  // finding): what is checked here is the default action, in normal builds.
  if (kSanitized) GTEST_SKIP() << "SKIPPED: the sanitizer takes SIGBUS itself in this build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  EXPECT_EXIT(
      {
        MappedFile guarded(dir / "guarded", 4);
        auto watch = FileWatch::Start(guarded.fd, guarded.map, guarded.bytes, nullptr);
        MappedFile unguarded(dir / "unguarded", 4);
        if (::truncate(unguarded.path.c_str(), 0) != 0) _exit(3);
        (void)unguarded.At(2 * kPage);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace dsfs::testing
