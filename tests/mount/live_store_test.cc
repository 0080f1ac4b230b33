// A store changed under a live mount (docs/hardening.md): truncated, rewritten in place with
// another store's bytes (what `cp new.db mounted.db` does to the inode the daemon has open),
// or replaced by a rename (`mv new.db mounted.db`). The daemon used to die of SIGBUS on its
// memory map at the first read of a page the change took away (a classic mount then answered
// ENOTCONN to everything, a -o kernel mount EIO to every file not in the page cache, and
// nothing was logged). Now every read returns the exact original bytes or EIO, the daemon
// lives (its stats answer, what it cached is served), it logs one line about the change, and
// it unmounts cleanly. A rename over the store changes nothing for the mount.
//
// Every backend ($DSFS_TEST_BACKEND: the LMDB file itself, or the RocksDB table file that holds
// the payloads) and, in ctest's kernel.* run, -o kernel.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

constexpr char kChangeLine[] = "the store changed under the mount";

class LiveStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_CAN_MOUNT();
    BecomeSubreaper();
    // Incompressible files of a few pages each, in several directories (many solid groups,
    // spread over the whole store), and small text files, which share groups.
    for (int d = 0; d < 4; ++d) {
      for (int f = 0; f < 24; ++f) {
        const std::string rel = "d" + std::to_string(d) + "/r" + std::to_string(f) + ".bin";
        files_[rel] = RandomBytes(20000 + 997 * f + 131 * d, 100 * d + f);
      }
      for (int f = 0; f < 10; ++f) {
        files_["d" + std::to_string(d) + "/t" + std::to_string(f) + ".txt"] =
            TextBytes(500 + 300 * f, 1000 + 10 * d + f);
      }
    }
    store_ = Pack("src", files_, "store.db");
    // Another store of the same shape and other bytes: what an admin copies over the mounted one.
    std::map<std::string, std::string> others;
    for (const auto& [rel, data] : files_) {
      others[rel] = rel.ends_with(".txt") ? TextBytes(data.size(), 7) : RandomBytes(data.size(), 7);
    }
    other_ = Pack("other", others, "other.db");
    mp_ = dir_ / "mnt";
    MakeDir(mp_);
    log_ = dir_ / "daemon.log";
  }

  std::string Pack(const std::string& name, const std::map<std::string, std::string>& files,
                   const std::string& store) {
    const std::string src = dir_ / name;
    for (const auto& [rel, data] : files) WriteFile(src + "/" + rel, data);
    const std::string path = dir_ / store;
    // Groups of 16 KiB: many of them, so that a truncation leaves some whole.
    CommandResult r = Dsfs({"pack", "-q", "--group-size", "16K", src, path});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return path;
  }

  // Mounts the store and reads the first files of each directory (`warm_`), so that the RAM
  // cache and the kernel's page cache hold them.
  void MountAndWarm(MountGuard* guard) {
    CommandResult r = guard->MountBackground(store_, {"-o", "log_file=" + log_});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    for (const auto& [rel, data] : files_) {
      if (rel.find("/r0.") == std::string::npos && rel.find("/t0.") == std::string::npos) continue;
      std::string got, error;
      ASSERT_TRUE(ReadAll(mp_ + "/" + rel, &got, &error)) << error;
      ASSERT_TRUE(got == data) << rel;
      warm_.push_back(rel);
    }
  }

  // Reads every file: each read gives the exact original bytes or fails with EIO. Returns how
  // many failed.
  int ReadEveryFile() {
    int failed = 0, other_errors = 0;
    std::string first_other;
    for (const auto& [rel, data] : files_) {
      std::string got, error;
      if (ReadAll(mp_ + "/" + rel, &got, &error)) {
        EXPECT_TRUE(got == data) << rel << ": wrong bytes served from a changed store";
      } else {
        ++failed;
        if (error.find(ErrnoName(EIO)) == std::string::npos && other_errors++ == 0) {
          first_other = error;
        }
      }
    }
    EXPECT_EQ(other_errors, 0) << "reads that failed with another error than EIO, the first: "
                               << first_other;
    return failed;
  }

  // The daemon lives: its stats answer, and what it read before is served again. The text
  // files from its RAM cache (the kernel is told to drop its pages of them first); the
  // incompressible ones are stored raw, which an LMDB store serves straight from its map
  // without a copy in the RAM cache (the page cache is their cache), so they are read from
  // the kernel's pages.
  void ExpectAlive() {
    CommandResult r = Dsfs({"stats", mp_});
    EXPECT_EQ(r.exit_code, 0) << "the daemon does not answer: " << Describe(r);
    for (const std::string& rel : warm_) {
      const std::string path = mp_ + "/" + rel;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0 && rel.ends_with(".txt")) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      if (fd >= 0) ::close(fd);
      std::string got, error;
      EXPECT_TRUE(ReadAll(path, &got, &error)) << "a cached file: " << error;
      EXPECT_TRUE(got == files_.at(rel)) << rel;
    }
  }

  // Unmounts (`dsfs umount`: exit 0, the daemon exits) and returns the daemon's log.
  std::string UnmountAndLog(MountGuard* guard) {
    CommandResult r = Dsfs({"umount", mp_});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    for (pid_t pid : guard->daemons()) ExpectDaemonExits(pid);
    for (pid_t pid : std::vector<pid_t>(guard->daemons())) guard->Forget(pid);
    EXPECT_FALSE(IsMounted(mp_));
    return ReadFile(log_);
  }

  // Waits for the daemon's line about the change (written by its watch thread as soon as the
  // kernel reports the change; 30 s is a bound for a loaded machine, not a measurement).
  bool WaitForChangeLine() {
    return WaitUntil(
        [&] {
          std::error_code ec;
          return std::filesystem::exists(log_, ec) &&
                 !LinesWith(ReadFile(log_), kChangeLine).empty();
        },
        milliseconds(30000));
  }

  TempDir dir_;
  std::map<std::string, std::string> files_;
  std::vector<std::string> warm_;
  std::string store_, other_, mp_, log_;
};

TEST_F(LiveStoreTest, TruncatedStoreFailsOnlyWhatIsGoneAndTheDaemonLives) {
  MountGuard guard(mp_);
  ASSERT_NO_FATAL_FAILURE(MountAndWarm(&guard));
  const std::string data_file = PayloadFile(store_);
  const uintmax_t size = std::filesystem::file_size(data_file);
  std::filesystem::resize_file(data_file, size / 4);
  const int failed = ReadEveryFile();
  EXPECT_GT(failed, 0) << "a quarter of the store left, and every file read";
  ExpectAlive();
  EXPECT_TRUE(WaitForChangeLine()) << "no line about the change:\n" << ReadFile(log_);
  const std::string log = UnmountAndLog(&guard);
  const std::vector<std::string> lines = LinesWith(log, kChangeLine);
  EXPECT_TRUE(lines.size() == 1 && lines[0].find("truncated") != std::string::npos) << log;
  std::printf("[ live store ] %s truncated to a quarter: %d of %zu files failed (EIO)\n",
              TestBackend().c_str(), failed, files_.size());
}

TEST_F(LiveStoreTest, StoreOverwrittenInPlaceFailsWithEioAndTheDaemonLives) {
  MountGuard guard(mp_);
  ASSERT_NO_FATAL_FAILURE(MountAndWarm(&guard));
  // As an admin would: cp over the mounted file (it truncates and rewrites the same inode).
  const std::string data_file = PayloadFile(store_);
  CommandResult r = RunCommand({"cp", PayloadFile(other_), data_file});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const int failed = ReadEveryFile();
  // Under -o kernel the image read-ahead may have put every file in the kernel's page cache
  // before the copy: then nothing needs the store, and nothing fails (no wrong bytes either).
  if (!KernelMountUnderTest()) EXPECT_GT(failed, 0);
  ExpectAlive();
  EXPECT_TRUE(WaitForChangeLine()) << "no line about the change:\n" << ReadFile(log_);
  // Once the change is seen, nothing but the cache is served: every file not read before fails.
  int served = 0;
  for (const auto& [rel, data] : files_) {
    if (std::find(warm_.begin(), warm_.end(), rel) != warm_.end()) continue;
    std::string got, error;
    const std::string path = mp_ + "/" + rel;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    if (ReadAll(path, &got, &error)) {
      EXPECT_TRUE(got == data) << rel << ": wrong bytes served from a rewritten store";
      ++served;
    }
  }
  const std::string log = UnmountAndLog(&guard);
  const std::vector<std::string> lines = LinesWith(log, kChangeLine);
  EXPECT_TRUE(lines.size() == 1 && lines[0].find("rewritten") != std::string::npos) << log;
  std::printf(
      "[ live store ] %s overwritten in place: %d of %zu files failed (EIO), %d served "
      "from the cache afterwards\n",
      TestBackend().c_str(), failed, files_.size(), served);
}

TEST_F(LiveStoreTest, StoreReplacedByRenameKeepsServingTheOldOne) {
  MountGuard guard(mp_);
  ASSERT_NO_FATAL_FAILURE(MountAndWarm(&guard));
  // `mv new.db mounted.db`: the daemon keeps the inode it opened, which nothing changes.
  const std::string data_file = PayloadFile(store_);
  const std::string next = data_file + ".new";
  std::filesystem::copy_file(PayloadFile(other_), next);
  std::filesystem::rename(next, data_file);
  EXPECT_EQ(ReadEveryFile(), 0);
  ExpectAlive();
  const std::string log = UnmountAndLog(&guard);
  EXPECT_TRUE(LinesWith(log, kChangeLine).empty()) << log;
}

}  // namespace
}  // namespace dsfs::testing
