// Reads of the mounted tree (mount_tree.h): every file byte for byte, in odd-sized pieces,
// through mmap, pread at odd offsets with and without O_DIRECT, concurrent readers; every
// modification refused with EROFS; statfs.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/mount_tree.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {

void MountedTreeTest::CheckEveryFileReadsByteForByte() {
  size_t files = 0;
  uint64_t bytes = 0;
  for (const auto& [rel, node] : source()) {
    if (!S_ISREG(node.st.st_mode)) continue;
    std::string want, got, error;
    ASSERT_TRUE(ReadAll(Join(src(), rel), &want, &error)) << error;
    ASSERT_TRUE(ReadAll(Join(mnt(), rel), &got, &error)) << error;
    ASSERT_EQ(got.size(), want.size()) << "/" << Printable(rel);
    if (got != want) {
      size_t at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
      FAIL() << "/" << Printable(rel) << " differs from the source at byte " << at;
    }
    ++files;
    bytes += got.size();
  }
  EXPECT_GT(files, kManyFiles);
  EXPECT_GT(bytes, kBigRandomBytes + kBigTextBytes);
}

void MountedTreeTest::CheckLargeFilesReadInOddSizedPieces() {
  // Read with buffers that never line up with pages or chunks.
  for (const std::string& rel : {std::string("big_random.bin"), std::string("big_text.txt")}) {
    std::string want, got, error;
    ASSERT_TRUE(ReadAll(Join(src(), rel), &want, &error)) << error;
    for (size_t piece : {size_t{12289}, size_t{65537}, size_t{1000003}}) {
      int fd = ::open(Join(mnt(), rel).c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
      ASSERT_TRUE(ReadAll(Join(mnt(), rel), &got, &error, piece)) << error;
      EXPECT_TRUE(got == want) << rel << " read in pieces of " << piece << " bytes differs";
    }
  }
}

void MountedTreeTest::CheckMmapSeesTheSameBytes() {
  for (const std::string& rel : FilesOfAtLeast(1 << 20)) {
    std::string want, error;
    ASSERT_TRUE(ReadAll(Join(src(), rel), &want, &error)) << error;
    int fd = ::open(Join(mnt(), rel).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << ErrnoName(errno);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    void* p = ::mmap(nullptr, want.size(), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED) << rel << ": " << ErrnoName(errno);
    // Touch pages backwards so faults do not simply follow readahead.
    bool same = true;
    const char* bytes = static_cast<const char*>(p);
    for (size_t page = (want.size() - 1) / 4096 + 1; page-- > 0 && same;) {
      size_t off = page * 4096;
      size_t len = std::min<size_t>(4096, want.size() - off);
      same = std::memcmp(bytes + off, want.data() + off, len) == 0;
    }
    ::munmap(p, want.size());
    EXPECT_TRUE(same) << rel << " differs when read through mmap";
  }
}

namespace {

// Reads at offsets and sizes that straddle chunk boundaries (of 64K and 256K), plus reads at and
// past the end, compared with the source.
std::vector<std::pair<uint64_t, size_t>> OddReads(uint64_t size, uint32_t seed) {
  std::vector<std::pair<uint64_t, size_t>> reads;
  for (uint64_t b = 64 << 10; b < size; b += 64 << 10) {
    reads.emplace_back(b - 1, 2);
    reads.emplace_back(b - 3, (64 << 10) + 7);
    if (b % (256 << 10) == 0) reads.emplace_back(b - 100'001, 300'007);
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 100; ++i) {
    reads.emplace_back(rng() % size, 1 + rng() % 400'000);
  }
  reads.emplace_back(0, 1);
  reads.emplace_back(1, 3 * (256 << 10));
  reads.emplace_back(size - 3, 100);
  reads.emplace_back(size - 1, 1);
  reads.emplace_back(size, 10);
  reads.emplace_back(size + 12'345, 10);
  reads.emplace_back(0, size + 1000);
  return reads;
}
}  // namespace

namespace {
// O_DIRECT at any offset and size: a FUSE mount passes them to the daemon as they are. EROFS
// over the image file refuses an O_DIRECT open (EINVAL), and over a block device takes
// block-aligned direct I/O only: on a -o kernel mount these reads go through the page cache.
bool DirectIoOnTheMount() { return !KernelMountUnderTest(); }
}  // namespace

void MountedTreeTest::CheckPreadAtOddOffsetsCrossesChunkBoundaries() {
  for (const std::string& rel : FilesOfAtLeast(1 << 20)) {
    std::string want, error;
    ASSERT_TRUE(ReadAll(Join(src(), rel), &want, &error)) << error;
    // Through the page cache (dropped before each read, so the daemon serves it again) and with
    // O_DIRECT, where the daemon sees the odd offsets and sizes themselves.
    for (int flags : {O_RDONLY, O_RDONLY | O_DIRECT}) {
      if ((flags & O_DIRECT) && !DirectIoOnTheMount()) continue;
      int fd = ::open(Join(mnt(), rel).c_str(), flags | O_CLOEXEC);
      ASSERT_GE(fd, 0) << rel << ": " << ErrnoName(errno);
      std::string buf;
      for (const auto& [off, len] : OddReads(want.size(), static_cast<uint32_t>(want.size()))) {
        if (!(flags & O_DIRECT)) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        buf.assign(len, '\xAA');
        ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
        size_t expect = off >= want.size() ? 0 : std::min<size_t>(len, want.size() - off);
        ASSERT_EQ(n, static_cast<ssize_t>(expect))
            << rel << (flags & O_DIRECT ? " (O_DIRECT)" : "") << ": pread(" << len << " @ " << off
            << "): " << (n < 0 ? ErrnoName(errno) : "short read");
        ASSERT_TRUE(std::memcmp(buf.data(), want.data() + std::min<uint64_t>(off, want.size()),
                                expect) == 0)
            << rel << (flags & O_DIRECT ? " (O_DIRECT)" : "") << ": pread(" << len << " @ " << off
            << ") returned different bytes";
      }
      ::close(fd);
    }
  }
}

void MountedTreeTest::CheckConcurrentReadersSeeTheSameBytes() {
  std::vector<std::string> rels = FilesOfAtLeast(1 << 20);
  std::vector<std::string> wants;
  for (const auto& rel : rels) {
    std::string want, error;
    ASSERT_TRUE(ReadAll(Join(src(), rel), &want, &error)) << error;
    wants.push_back(std::move(want));
  }
  std::atomic<int> failures{0};
  std::string first_failure;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<int> fds;
      const int direct = DirectIoOnTheMount() ? O_DIRECT : 0;
      for (const auto& rel : rels) {
        fds.push_back(::open(Join(mnt(), rel).c_str(), O_RDONLY | direct | O_CLOEXEC));
      }
      std::string buf;
      for (int i = 0; i < 150; ++i) {
        size_t f = rng() % rels.size();
        const std::string& want = wants[f];
        uint64_t off = rng() % want.size();
        size_t len = 1 + rng() % 300'000;
        size_t expect = std::min<size_t>(len, want.size() - off);
        buf.resize(len);
        ssize_t n = ::pread(fds[f], buf.data(), len, static_cast<off_t>(off));
        if (n != static_cast<ssize_t>(expect) ||
            std::memcmp(buf.data(), want.data() + off, expect) != 0) {
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) {
            first_failure = rels[f] + ": pread(" + std::to_string(len) + " @ " +
                            std::to_string(off) + ") -> " + std::to_string(n);
          }
        }
      }
      for (int fd : fds) ::close(fd);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << "first: " << first_failure;
}

void MountedTreeTest::CheckEveryModificationFailsWithErofs() {
  const std::string m = mnt();
  const std::string file = m + "/big_text.txt";
  auto open_errno = [](const std::string& p, int flags) {
    int fd = ::open(p.c_str(), flags | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return 0;
    }
    return errno;
  };
  auto rc_errno = [](int rc) { return rc == 0 ? 0 : errno; };
  const std::vector<std::pair<std::string, std::function<int()>>> attempts = {
      {"create a new file",
       [&] { return open_errno(m + "/new.txt", O_WRONLY | O_CREAT | O_EXCL); }},
      {"create in a subdirectory",
       [&] { return open_errno(m + "/empty_dir/new.txt", O_RDWR | O_CREAT); }},
      {"open for writing", [&] { return open_errno(file, O_WRONLY); }},
      {"open for reading and writing", [&] { return open_errno(file, O_RDWR); }},
      {"open for appending", [&] { return open_errno(file, O_WRONLY | O_APPEND); }},
      {"open with O_TRUNC", [&] { return open_errno(file, O_RDONLY | O_TRUNC); }},
      {"open existing with O_CREAT", [&] { return open_errno(file, O_WRONLY | O_CREAT); }},
      {"mkdir", [&] { return rc_errno(::mkdir((m + "/newdir").c_str(), 0755)); }},
      {"mkdir in a subdirectory",
       [&] { return rc_errno(::mkdir((m + "/deep/d00/newdir").c_str(), 0755)); }},
      {"rmdir", [&] { return rc_errno(::rmdir((m + "/empty_dir").c_str())); }},
      {"unlink a file", [&] { return rc_errno(::unlink(file.c_str())); }},
      {"unlink a symlink", [&] { return rc_errno(::unlink((m + "/links/dangling").c_str())); }},
      {"rename", [&] { return rc_errno(::rename(file.c_str(), (m + "/renamed.txt").c_str())); }},
      {"rename a directory",
       [&] { return rc_errno(::rename((m + "/deep").c_str(), (m + "/shallow").c_str())); }},
      {"link", [&] { return rc_errno(::link(file.c_str(), (m + "/hardlink").c_str())); }},
      {"symlink", [&] { return rc_errno(::symlink("big_text.txt", (m + "/newlink").c_str())); }},
      {"mkfifo", [&] { return rc_errno(::mkfifo((m + "/fifo").c_str(), 0644)); }},
      {"chmod a file", [&] { return rc_errno(::chmod(file.c_str(), 0777)); }},
      {"chmod a directory", [&] { return rc_errno(::chmod(m.c_str(), 0777)); }},
      {"chown", [&] { return rc_errno(::lchown(file.c_str(), 1, 1)); }},
      {"truncate to zero", [&] { return rc_errno(::truncate(file.c_str(), 0)); }},
      {"truncate to grow", [&] { return rc_errno(::truncate(file.c_str(), 1 << 30)); }},
      {"utimensat", [&] { return rc_errno(::utimensat(AT_FDCWD, file.c_str(), nullptr, 0)); }},
      {"setxattr", [&] { return rc_errno(::setxattr(file.c_str(), "user.k", "v", 1, 0)); }},
      {"setxattr on a directory",
       [&] { return rc_errno(::setxattr(m.c_str(), "user.k", "v", 1, 0)); }},
      {"removexattr", [&] { return rc_errno(::removexattr(file.c_str(), "user.k")); }},
  };
  for (const auto& [what, attempt] : attempts) {
    errno = 0;
    int err = attempt();
    EXPECT_EQ(err, EROFS) << what << ": expected EROFS, got "
                          << (err == 0 ? std::string("success") : ErrnoName(err));
  }
  // Nothing changed.
  std::string want, got, error;
  ASSERT_TRUE(ReadAll(src() + "/big_text.txt", &want, &error)) << error;
  ASSERT_TRUE(ReadAll(file, &got, &error)) << error;
  EXPECT_TRUE(got == want);
  EXPECT_EQ(DirNames(m), DirNames(src()));
  EXPECT_TRUE(DirNames(m + "/empty_dir").empty());
}

void MountedTreeTest::CheckStatfsDescribesTheStore() {
  struct statvfs sv;
  ASSERT_EQ(::statvfs(mnt().c_str(), &sv), 0) << ErrnoName(errno);
  EXPECT_TRUE(sv.f_flag & ST_RDONLY);
  EXPECT_GT(sv.f_bsize, 0u);
  EXPECT_GT(sv.f_frsize, 0u);
  EXPECT_GE(sv.f_namemax, 255u);
  if (KernelMountUnderTest()) {
    // EROFS reports f_files = ULLONG_MAX and f_ffree = ULLONG_MAX - its inode count.
    EXPECT_EQ(sv.f_files - sv.f_ffree, source().size()) << "one inode per entry, the root too";
  } else {
    EXPECT_EQ(sv.f_files, source().size()) << "one inode per entry, the root included";
  }
  uint64_t file_bytes = 0;
  for (const auto& [rel, node] : source()) {
    if (S_ISREG(node.st.st_mode)) file_bytes += static_cast<uint64_t>(node.st.st_size);
  }
  EXPECT_GE(static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize, file_bytes);
  EXPECT_EQ(sv.f_bfree, 0u);
  struct statfs sf;
  ASSERT_EQ(::statfs((mnt() + "/deep/d00").c_str(), &sf), 0) << ErrnoName(errno);
  // A -o kernel mount is EROFS's (EROFS_SUPER_MAGIC_V1), a classic one FUSE's.
  EXPECT_EQ(static_cast<long>(sf.f_type),
            KernelMountUnderTest() ? kErofsSuperMagic : kFuseSuperMagic);
}

namespace {

TEST_P(MountedTreeTest, FilesReadLikeTheSource) {
  {
    SCOPED_TRACE("whole files");
    CheckEveryFileReadsByteForByte();
  }
  {
    SCOPED_TRACE("odd-sized read(2) calls");
    CheckLargeFilesReadInOddSizedPieces();
  }
  {
    SCOPED_TRACE("mmap");
    CheckMmapSeesTheSameBytes();
  }
  {
    SCOPED_TRACE("pread at odd offsets");
    CheckPreadAtOddOffsetsCrossesChunkBoundaries();
  }
  {
    SCOPED_TRACE("concurrent readers");
    CheckConcurrentReadersSeeTheSameBytes();
  }
}

TEST_P(MountedTreeTest, ReadOnlyWithStatfs) {
  {
    SCOPED_TRACE("modifications");
    CheckEveryModificationFailsWithErofs();
  }
  {
    SCOPED_TRACE("statfs");
    CheckStatfsDescribesTheStore();
  }
}

}  // namespace
}  // namespace dsfs::testing
