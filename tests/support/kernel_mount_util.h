// Helpers of the `dsfs mount -o kernel` tests (kernel_mount_*_test.cc): finding a kernel
// mount's layers (EROFS at MNT, the private image mount under /run/dsfs, a loop device when
// there is one), a mount owned by the test, and the source trees the tests compare with.
//
// The backing under test: ctest runs the suite twice, over a file-backed EROFS mount (the
// default `-o kernel`) and, with DSFS_TEST_KERNEL_BACKING=loop, over a loop device
// (`-o kernel=loop`); KernelMount::Mount asks for the backing under test.
//
// They need root, /dev/fuse, loop devices and EROFS, and say so plainly when skipped. The test
// process is a child subreaper, so the daemon `dsfs mount` forks is its child: the tests reap
// it and signal nothing else.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {

// Why -o kernel mounts cannot be made here, or "".
std::string CannotKernelMountReason();

// True when this run tests `-o kernel=loop` ($DSFS_TEST_KERNEL_BACKING=loop).
bool LoopBackingUnderTest();
// The mount option of the backing under test: "kernel" or "kernel=loop".
std::string KernelOption();

// findmnt's FSTYPE and SOURCE of the mount at `mp` ("" when nothing is mounted there).
std::string FsType(const std::string& mp);
std::string MountSource(const std::string& mp);

// The prefix of every private directory of `mp`'s -o kernel mounts (/run/dsfs/<dev>-<ino>-).
std::string PrivatePrefixOf(const std::string& mp);
// The private directories under `prefix`.
std::vector<std::string> PrivateDirs(const std::string& prefix);
// Loop devices whose backing file is under `prefix`, as "loopN -> backing file".
std::vector<std::string> LoopsBackedUnder(const std::string& prefix);
// EROFS mounts (anywhere) whose source is under `prefix`: file-backed mounts of its image.
std::vector<std::string> ErofsMountsOver(const std::string& prefix);
// Some mount's mountpoint is under `prefix` (the private image mount).
bool MountedUnder(const std::string& prefix);

// Nothing of the -o kernel mount of `prefix`'s mountpoint is left: not EROFS at `mp`, no loop
// device backed under the prefix, no EROFS mount whose source is under it, no private mount,
// no private directory.
::testing::AssertionResult LayersGone(const std::string& mp, const std::string& prefix);

// The layers of a mounted -o kernel mount at `mp` are the backing under test: for a
// file-backed mount, EROFS's source is `private_dir`/image and no loop device reads it; for a
// loop device, one read-only one with direct I/O is EROFS's source. Either way read-only
// EROFS, and `dsfs stats` names the backing.
::testing::AssertionResult HasTheBackingUnderTest(const std::string& mp,
                                                  const std::string& private_dir);

// A -o kernel mount at `mp`, torn down (and checked to be gone) on destruction.
class KernelMount {
 public:
  explicit KernelMount(std::string mp);
  ~KernelMount();
  KernelMount(const KernelMount&) = delete;
  KernelMount& operator=(const KernelMount&) = delete;

  // `dsfs mount STORE MP -o <the backing under test>[,options]`; remembers the daemon.
  CommandResult Mount(const std::string& store, const std::string& options = "");
  // The same with exactly `kernel_option` ("kernel", "kernel=loop", ...) first.
  CommandResult MountWith(const std::string& store, const std::string& kernel_option,
                          const std::string& options);
  // Waits for the daemon to exit (5 s, else fails the test and kills it), reaps it.
  void WaitDaemon();
  pid_t pid() const { return pid_; }
  const std::string& prefix() const { return prefix_; }
  // The daemon's private directory (prefix + pid).
  std::string private_dir() const { return prefix_ + std::to_string(pid_); }

 private:
  std::string mp_, prefix_;
  pid_t pid_ = -1;
};

// `dsfs stats MP` as numbers: the value of `key` ("kernel.readahead.dirs"), or UINT64_MAX if
// absent or not a number.
uint64_t KernelStat(const std::string& mp, const std::string& key);

// WriteFile, then chmod (no umask in the way).
void Put(const std::string& path, std::string_view data, mode_t mode = 0644);

// A tree with what a real-mount suite checks: sizes around block boundaries, a large file,
// an empty file and directory, symlinks, odd names, modes, distinct mtimes, a directory of
// 3,000 entries (several directory blocks).
void BuildTree(const std::string& src);

struct Entry {
  mode_t mode;
  uid_t uid;
  gid_t gid;
  off_t size;
  int64_t mtime_s;
  long mtime_ns;
  std::string content;  // file bytes or symlink target
  bool operator==(const Entry& o) const {
    return mode == o.mode && uid == o.uid && gid == o.gid && size == o.size &&
           mtime_s == o.mtime_s && mtime_ns == o.mtime_ns && content == o.content;
  }
};
std::string Show(const Entry& e);

// Every entry below `root` (relative path -> attributes, contents), by lstat/readdir only.
std::map<std::string, Entry> Walk(const std::string& root, bool with_dir_mtimes = true);
void ExpectSameTree(const std::map<std::string, Entry>& want,
                    const std::map<std::string, Entry>& got);
// The source as a dsfs mount shows it: owner uid/gid, modes less `umask`.
std::map<std::string, Entry> Expected(const std::string& src, uid_t uid, gid_t gid, mode_t umask);

// A source dir_/src, a store dir_/store.dsfs and a mountpoint dir_/mnt; skips the test where
// -o kernel mounts cannot be made.
class KernelMountTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // dsfs pack -q [extra...] src_ store_ (the backend under test).
  void Pack(const std::vector<std::string>& extra = {});
  TempDir dir_;
  std::string src_, store_, mp_;
};

}  // namespace dsfs::testing
