// The readahead of `dsfs mount -o kernel` (kernel/erofs_readahead.h): a file-backed EROFS mount
// reads the image through its page cache, where the daemon stores a touched directory's
// children; over a loop device (direct I/O) there is none. Checked through `dsfs stats`
// (kernel.readahead.*), and that what it stores is never a wrong byte, also around a damaged
// record: EIO for that file only, correct bytes for its neighbours in the same directory.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/kernel_mount_util.h"

namespace dsfs::testing {
namespace {

// The kernel mount fixture (tests/support/kernel_mount_util.h), a suite of its own per file.
class KernelReadaheadTest : public KernelMountTest {};

using std::chrono::milliseconds;

constexpr uint64_t kAbsent = UINT64_MAX;

// `n` files in `dir` of sizes around page and block boundaries; their contents by name.
std::map<std::string, std::string> PutFiles(const std::string& dir, int n, uint32_t seed) {
  std::map<std::string, std::string> files;
  const size_t sizes[] = {1, 700, 4095, 4096, 4097, 12000, 65537};
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "f%04d.bin", i);
    std::string data = RandomBytes(sizes[i % 7] + static_cast<size_t>(i), seed + i);
    Put(dir + "/" + name, data);
    files[name] = std::move(data);
  }
  return files;
}

// Once the readahead has stored `dirs` directories and `bytes` bytes. (A touched directory's
// children include its subdirectories' entry blocks: reading cls/x stores the root's children,
// cls's entry blocks, then cls's children, the files.)
bool ReadaheadStored(const std::string& mp, uint64_t dirs, uint64_t bytes = 0) {
  std::map<std::string, std::string> stats = StatsOf(mp);
  auto value = [&](const std::string& key) {
    auto it = stats.find(key);
    return it == stats.end() ? kAbsent : std::strtoull(it->second.c_str(), nullptr, 10);
  };
  const uint64_t d = value("kernel.readahead.dirs"), b = value("kernel.readahead.bytes");
  return d != kAbsent && d >= dirs && b != kAbsent && b >= bytes;
}

uint64_t TotalBytes(const std::map<std::string, std::string>& files) {
  uint64_t n = 0;
  for (const auto& [name, data] : files) n += data.size();
  return n;
}

TEST_F(KernelReadaheadTest, ReadingOneFileStoresItsDirectoryInThePageCache) {
  auto files = PutFiles(src_ + "/cls", 200, 1);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  // f0005.bin has data blocks (the smaller files are inline, in the metadata blocks).
  EXPECT_EQ(ReadFile(mp_ + "/cls/f0005.bin"), files.at("f0005.bin"));
  if (LoopBackingUnderTest()) {
    // A loop device with direct I/O never reads the image's page cache: no readahead.
    EXPECT_EQ(KernelStat(mp_, "kernel.readahead.dirs"), kAbsent);
    return;
  }
  // The root's children (cls's entries) and cls's: its 200 files, whole.
  ASSERT_TRUE(
      WaitUntil([&] { return ReadaheadStored(mp_, 2, TotalBytes(files)); }, milliseconds(20000)))
      << Describe(Dsfs({"stats", mp_}));
  EXPECT_GE(KernelStat(mp_, "kernel.readahead.dirs"), 1u);
  EXPECT_EQ(KernelStat(mp_, "kernel.readahead.failures"), 0u);
  EXPECT_GT(KernelStat(mp_, "kernel.readahead.budget_bytes"), 0u);
}

// A file past the per-file bound (ErofsReadahead::kMaxChildBytes, 64 MiB) is left out of its
// directory's readahead: a huge sparse file's zeros spent the budget (within -o push) on one
// file. Its neighbours are stored as before, and the file itself reads right through requests.
TEST_F(KernelReadaheadTest, ReadaheadLeavesOutFilesPastThePerFileBound) {
  auto files = PutFiles(src_ + "/cls", 50, 4);
  const uint64_t kHuge = 80ull << 20;  // sparse: zeros
  {
    const std::string huge = src_ + "/cls/huge.bin";
    int fd = ::open(huge.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kHuge)), 0);
    ASSERT_EQ(::pwrite(fd, "end", 3, static_cast<off_t>(kHuge - 3)), 3);
    ::close(fd);
  }
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_, "push=1G");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(DirNames(mp_ + "/cls").size(), files.size() + 1);
  EXPECT_EQ(ReadFile(mp_ + "/cls/f0005.bin"), files.at("f0005.bin"));  // not inline
  if (LoopBackingUnderTest()) return;  // no readahead over a loop device
  ASSERT_TRUE(
      WaitUntil([&] { return ReadaheadStored(mp_, 2, TotalBytes(files)); }, milliseconds(20000)))
      << Describe(Dsfs({"stats", mp_}));
  // Let the worker finish whatever it does with the directory, then look.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_LT(KernelStat(mp_, "kernel.readahead.bytes"), kHuge) << Describe(Dsfs({"stats", mp_}));
  EXPECT_EQ(KernelStat(mp_, "kernel.readahead.skipped_files"), 1u);
  EXPECT_EQ(KernelStat(mp_, "kernel.readahead.failures"), 0u);
  std::string data, error;
  ASSERT_TRUE(ReadAll(mp_ + "/cls/huge.bin", &data, &error)) << error;
  ASSERT_EQ(data.size(), kHuge);
  EXPECT_EQ(data.substr(kHuge - 3), "end");
  EXPECT_EQ(data.find_first_not_of('\0'), kHuge - 3);
}

TEST_F(KernelReadaheadTest, PushZeroTurnsTheReadaheadOff) {
  auto files = PutFiles(src_ + "/cls", 200, 2);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_, "push=0");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const auto& [name, data] : files) EXPECT_EQ(ReadFile(mp_ + "/cls/" + name), data) << name;
  const uint64_t dirs = KernelStat(mp_, "kernel.readahead.dirs");
  EXPECT_TRUE(dirs == kAbsent || dirs == 0) << Describe(Dsfs({"stats", mp_}));
  const uint64_t bytes = KernelStat(mp_, "kernel.readahead.bytes");
  EXPECT_TRUE(bytes == kAbsent || bytes == 0) << bytes;
  EXPECT_GT(KernelStat(mp_, "kernel.image_reads"), 0u) << "every file came through requests";
}

TEST_F(KernelReadaheadTest, WhatTheReadaheadStoresIsNeverAWrongByte) {
  std::map<std::string, std::string> want;
  const int kDirs = 5;
  for (int d = 0; d < kDirs; ++d) {
    const std::string dir = "d" + std::to_string(d);
    for (auto& [name, data] : PutFiles(src_ + "/" + dir, 60 + 30 * d, 100 * d)) {
      want[dir + "/" + name] = std::move(data);
    }
  }
  Put(src_ + "/d2/text.txt", TextBytes(300000, 4));  // compressed in the store
  want["d2/text.txt"] = TextBytes(300000, 4);
  Pack();
  KernelMount km(mp_);
  CommandResult r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  // One file of each directory (with data blocks: not inline), then (file-backed) until the
  // readahead has stored them all.
  for (int d = 0; d < kDirs; ++d) {
    const std::string f = "d" + std::to_string(d) + "/f0005.bin";
    EXPECT_EQ(ReadFile(mp_ + "/" + f), want.at(f));
  }
  if (!LoopBackingUnderTest()) {
    // The root's children (the five directories' entries), then each directory's files.
    EXPECT_TRUE(WaitUntil([&] { return ReadaheadStored(mp_, kDirs + 1, TotalBytes(want)); },
                          milliseconds(30000)))
        << Describe(Dsfs({"stats", mp_}));
  }
  size_t wrong = 0;
  for (const auto& [path, data] : want) {
    std::string got, error;
    if (!ReadAll(mp_ + "/" + path, &got, &error)) {
      ADD_FAILURE() << error;
    } else if (got != data && wrong++ < 10) {
      ADD_FAILURE() << path << ": " << got.size() << " bytes differ from the source's "
                    << data.size();
    }
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(KernelStat(mp_, "kernel.image_read_errors"), 0u);
}

// A damaged record (LMDB stores the incompressible file as it is): reading it fails with EIO,
// after the readahead of its directory has run (file-backed: the readahead's piece under the
// damage fails, the pieces around it are stored), and every neighbour in the same directory,
// before and after it in the image, reads correctly.
// Without the readahead the kernel's own reads of the image span neighbouring files: a read
// that meets the damaged one must not make the files after it fail too (a short reply there
// once told the kernel the image ended at the damaged block: every later file read EIO).
TEST_F(KernelReadaheadTest, DamagedRecordAmongSequentialReadsFailsOnlyItself) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 30; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "f%02d", i);
    files[name] = RandomBytes(70000, 100 + i);  // incompressible: each its own record
    Put(src_ + "/cls/" + name, files[name]);
  }
  CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src_, store_});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(DamageStoredFile(store_, files.at("f15")));
  KernelMount km(mp_);
  r = km.Mount(store_, "push=0");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [name, data] : files) {
      std::string got, error;
      bool ok = ReadAll(mp_ + "/cls/" + name, &got, &error);
      if (name == "f15") {
        EXPECT_FALSE(ok) << "pass " << pass << ": the damaged file read";
        EXPECT_NE(error.find("errno 5"), std::string::npos) << error;
        continue;
      }
      EXPECT_TRUE(ok) << "pass " << pass << ": " << name << ": " << error;
      EXPECT_TRUE(got == data) << "pass " << pass << ": " << name << ": " << got.size()
                               << " bytes, want " << data.size();
    }
  }
}

TEST_F(KernelReadaheadTest, DamagedRecordFailsThatFileWithEioAndNothingElse) {
  std::string bad = RandomBytes(100000, 9);  // incompressible: stored as is
  std::map<std::string, std::string> neighbours;
  auto put = [&](const std::string& name, std::string data) {
    Put(src_ + "/cls/" + name, data);
    neighbours[name] = std::move(data);
  };
  put("a_first.bin", RandomBytes(70000, 10));
  for (int i = 0; i < 50; ++i) put("b_small" + std::to_string(i), TextBytes(500, i));
  // Over a MiB (the readahead's piece) on each side of the damaged file.
  for (int i = 0; i < 4; ++i) put("c_before" + std::to_string(i), RandomBytes(400000, 20 + i));
  Put(src_ + "/cls/d_bad.bin", bad);
  for (int i = 0; i < 4; ++i) put("e_after" + std::to_string(i), RandomBytes(400000, 30 + i));
  put("f_last.bin", RandomBytes(70000, 11));
  CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src_, store_});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(DamageStoredFile(store_, bad));

  KernelMount km(mp_);
  r = km.Mount(store_);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string cls = mp_ + "/cls/";
  EXPECT_EQ(ReadFile(cls + "a_first.bin"), neighbours.at("a_first.bin"));
  if (!LoopBackingUnderTest()) {
    // The root's children, then cls's (less the damaged piece).
    ASSERT_TRUE(WaitUntil([&] { return ReadaheadStored(mp_, 2); }, milliseconds(20000)))
        << Describe(Dsfs({"stats", mp_}));
    EXPECT_GE(KernelStat(mp_, "kernel.readahead.failures"), 1u) << "the damaged piece";
    EXPECT_GT(KernelStat(mp_, "kernel.readahead.bytes"), 0u) << "the pieces around it";
  }
  int fd = ::open((cls + "d_bad.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string buf(bad.size(), '\0');
  errno = 0;
  ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  int err = errno;
  ::close(fd);
  // The damaged chunk fails; bytes before it may come first (a short read), never wrong ones.
  if (n >= 0) {
    EXPECT_LT(static_cast<size_t>(n), bad.size()) << "the damaged file read in full";
    EXPECT_EQ(buf.substr(0, n), bad.substr(0, n));
    fd = ::open((cls + "d_bad.bin").c_str(), O_RDONLY);
    n = ::pread(fd, buf.data(), buf.size() - n, n);
    err = errno;
    ::close(fd);
  }
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, EIO) << std::strerror(err);
  struct stat st;
  EXPECT_EQ(::stat((cls + "d_bad.bin").c_str(), &st), 0) << "its metadata stays readable";
  EXPECT_EQ(static_cast<size_t>(st.st_size), bad.size());
  for (const auto& [name, data] : neighbours) {
    std::string got, error;
    EXPECT_TRUE(ReadAll(cls + name, &got, &error)) << error;
    EXPECT_TRUE(got == data) << name << ": " << got.size() << " bytes, want " << data.size();
  }
  // A second read of the damaged file fails again (no page of it was cached as good).
  std::string again, error;
  EXPECT_FALSE(ReadAll(cls + "d_bad.bin", &again, &error));
  EXPECT_NE(error.find("errno 5"), std::string::npos) << error;
  EXPECT_GT(KernelStat(mp_, "kernel.image_read_errors"), 0u);
}

}  // namespace
}  // namespace dsfs::testing
