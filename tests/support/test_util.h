// Helpers shared by the dsfs tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "pack/packer.h"
#include "store/store.h"
#include "tests/support/fakes/mem_store.h"

namespace dsfs::testing {

// True in sanitizer builds (GCC's __SANITIZE_*__ or clang's __has_feature), where memory and
// timing figures are not the program's own.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Trials of a damage sweep: all of them in a normal build; an eighth (at least 1) under a
// sanitizer, whose job there is to find a bad access on each path, not to cover more positions
// (the fuzzers do that), and where each trial costs 5-20x (CI time, scripts/ci_hardening.sh).
inline constexpr int SweepTrials(int trials) {
  return kSanitized ? std::max(1, trials / 8) : trials;
}

// Sets environment variables for one scope and puts the old values back.
class ScopedEnv {
 public:
  void Set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// Writes `data` to `path`, creating parent directories; sets `mode`.
void WriteFile(const std::string& path, std::string_view data, mode_t mode = 0644);
std::string ReadFile(const std::string& path);
// Deterministic pseudo-random bytes (incompressible).
std::string RandomBytes(size_t n, uint32_t seed);
// Deterministic compressible text-like bytes.
std::string TextBytes(size_t n, uint32_t seed);

struct CommandResult {
  int exit_code = -1;  // -1 if it did not exit normally (signal, timeout)
  std::string out, err;
};
// Runs argv[0] with arguments (PATH lookup), capturing stdout and stderr; kills it after
// `timeout_s` seconds.
CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s = 120);

// "Permission denied (errno 13)".
std::string ErrnoName(int err);
// `s` with every byte outside printable ASCII escaped: file names in the tests hold newlines
// and invalid UTF-8 on purpose, and failure messages must stay readable.
std::string Printable(std::string_view s);

// Polls `done` every 20 ms until it holds or `timeout` passes; returns its last value.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// Runs the dsfs binary as a subprocess. `pack` writes to the backend under test
// ($DSFS_TEST_BACKEND, see TestBackend) unless the arguments name one; `mount` uses the
// transport under test ($DSFS_TEST_TRANSPORT, see TestTransport) unless they name one, and
// `-o kernel` in the kernel.* run (AddTestMount).
CommandResult Dsfs(std::vector<std::string> args, int timeout_s = 120);
// Adds `-o transport=$DSFS_TEST_TRANSPORT` to the arguments of `dsfs mount` (ctest's uring.*
// run), unless they name a transport themselves.
void AddTestTransport(std::vector<std::string>* mount_args);
// Adds `-o kernel` to the arguments of `dsfs mount` in ctest's kernel.* run of the real-mount
// suite ($DSFS_TEST_MOUNT=kernel, see KernelMountUnderTest), unless they name kernel themselves.
void AddTestMount(std::vector<std::string>* mount_args);
// A command's exit code, stdout and stderr, for failure messages.
std::string Describe(const CommandResult& r);
// The CLI's error contract: a non-zero exit (exactly `exit_code`) and exactly one line on
// stderr, "dsfs: error: ...", that contains at least one of `needles` (case-insensitive).
::testing::AssertionResult IsOneLineError(const CommandResult& r,
                                          const std::vector<std::string>& needles,
                                          int exit_code = 1);

// The number of lines of `text` (its newlines).
int LineCount(std::string_view text);
// The lines of `text` that contain `needle`.
std::vector<std::string> LinesWith(const std::string& text, const std::string& needle);

// Creates (or replaces) a file with `data` and `mode` without the umask in the way (its
// directory must exist; WriteFile creates them).
void PutFile(const std::string& path, std::string_view data, mode_t mode = 0644);
// mkdir with `mode` (not less the umask); an existing directory is fine.
void MakeDir(const std::string& path, mode_t mode = 0755);
// Names of the entries of `dir` (without "." and ".."), read with readdir(3), sorted; throws
// std::runtime_error if `dir` cannot be listed.
std::vector<std::string> DirNames(const std::string& dir);

// w x h 8-bit RGB pixels, row by row, each set by pixel(x, y, its three bytes).
std::string RgbPixels(uint32_t w, uint32_t h,
                      const std::function<void(uint32_t x, uint32_t y, char* rgb)>& pixel);
// A PNG of `pixels` (w x h of libpng's simplified-API `format`, e.g. PNG_FORMAT_RGB; padded or
// cut to that size); "" if libpng fails.
std::string EncodePng(uint32_t w, uint32_t h, uint32_t format, std::string pixels);
// A JPEG of w x h pixels of a pattern that depends on `seed` (quality 90, 4:2:0).
std::string Jpeg(int w, int h, int seed);

// A page of an LMDB store file, as its page header says (4 KiB pages).
struct LmdbPage {
  size_t pgno = 0;
  uint16_t flags = 0;             // 0x01 branch, 0x02 leaf
  uint16_t lower = 0, upper = 0;  // the end of its node-offset array, the start of its nodes
  size_t offset() const { return pgno * 4096; }
};
// The branch and leaf pages (the B-tree) of the LMDB store file `bytes`: the page headers are
// read to skip meta pages and runs of overflow pages (a test's own view; dsfs never parses
// LMDB's pages).
std::vector<LmdbPage> LmdbTreePages(const std::string& bytes);
// `bytes` with the `n` bytes at `offset` XOR `mask`: 16 bytes XOR 0x5a made the store of a
// crash report (a damaged node-offset array).
std::string XorBytes(std::string bytes, size_t offset, size_t n, uint8_t mask = 0x5a);

// Flips a bit in the middle of `data`, the contents of a file that the LMDB store file `store`
// holds as they are (incompressible, 100,000 bytes or so): reading that file then fails its
// checksum. Fails if the bytes are not in the store verbatim.
::testing::AssertionResult DamageStoredFile(const std::string& store, const std::string& data);

// Orphans of the processes this test starts become its children: the daemon forked by
// `dsfs mount` is then found, waited for and reaped here instead of by init.
void BecomeSubreaper();
// Waits up to `timeout` for child `pid` to exit and reaps it; false if it still runs. (Every
// daemon is a child here, see BecomeSubreaper; ECHILD only means someone reaped it already.)
bool WaitChild(pid_t pid, std::chrono::milliseconds timeout, int* wstatus = nullptr);
// For a daemon whose mount is gone, which exits by itself: waits 5 s for it; if it still runs,
// fails the test, kills it and reaps it.
void ExpectDaemonExits(pid_t pid);

// Why real mounts cannot run here (not root, no usable /dev/fuse), or "" if they can.
std::string CannotMountReason();

// Path of the built dsfs executable.
std::string DsfsBinary();

// A copy of `table` with the last byte of the solid group holding payload record `id` flipped
// (its checksum then fails: every record of the group is lost); Corruption if the record is
// not there. *first and *last (if given) receive the ids the group holds.
Status DamagePayload(const MemTable& table, uint64_t id, std::shared_ptr<MemTable>* damaged,
                     uint64_t* first = nullptr, uint64_t* last = nullptr);

// Rewrites the solid payload and pixel groups of the version 4 store in `table` as the groups
// of older versions (each record a payload record of its own, stored raw), so that the store,
// given an older version in its header, is one as older dsfs wrote it.
Status UnsolidGroups(MemTable* table);

// Packs `src` into a new in-memory store and opens it.
Status PackToMemory(const std::string& src, const PackOptions& options,
                    std::shared_ptr<MemTable>* table, std::unique_ptr<Store>* store);

// Packs `src` into a new store of `backend` ("lmdb", "rocksdb") at `path` and opens it.
Status PackToBackend(const std::string& src, const PackOptions& options, const std::string& backend,
                     const std::string& path, std::unique_ptr<Store>* store);

// Writes `kv` with a writer that `open` makes (its options: `overwrite` as given), and commits.
Status WriteRecords(
    const std::function<Status(const KvWriterOptions&, std::unique_ptr<KvWriter>*)>& open,
    const std::map<std::string, std::string>& kv, bool overwrite = false);

// The backend the CLI and mount tests pack to: $DSFS_TEST_BACKEND, default "lmdb" (ctest runs
// those suites once per backend).
std::string TestBackend();
// The FUSE transport the mount tests ask for: $DSFS_TEST_TRANSPORT ("auto", "uring",
// "classic"), "" (dsfs's default) when unset; ctest's uring.* run sets "uring".
std::string TestTransport();

// True in ctest's kernel.* run of the real-mount suite ($DSFS_TEST_MOUNT=kernel): the tests'
// mounts are `-o kernel` mounts (EROFS over the image of a private dsfs mount), and checks of
// what only a FUSE mount has (the .dsfs directory, fuse.dsfs, request counters) check the
// EROFS mount's equivalent instead.
bool KernelMountUnderTest();

// The fuse module parameter that lets new mounts use FUSE over io_uring.
inline constexpr char kEnableUringPath[] = "/sys/module/fuse/parameters/enable_uring";
// Sets enable_uring (Y or N) for the scope and restores what was there; does nothing on a
// kernel without it (exists() false). Needs root.
class ScopedEnableUring {
 public:
  explicit ScopedEnableUring(bool on);
  ~ScopedEnableUring();
  ScopedEnableUring(const ScopedEnableUring&) = delete;
  ScopedEnableUring& operator=(const ScopedEnableUring&) = delete;
  bool exists() const { return exists_; }

 private:
  bool exists_ = false;
  std::string saved_;
};

// The file of the store at `path` that holds its payloads, for tests that damage them: the
// store itself (an LMDB file), or its largest table file (a RocksDB directory).
std::string PayloadFile(const std::string& path);

// Every path of the store (relative, sorted) with what it holds: file contents, "->target"
// for a symlink, "<dir>" for a directory. Fails the test on any read error.
std::map<std::string, std::string> StoreListing(const Store& store);
// The same for a directory tree.
std::map<std::string, std::string> TreeListing(const std::string& dir);
// The one walk of a tree on disk, for the listings of every test binary (TreeListing here,
// kernel_mount_util's Walk, erofs_test_util's ListDisk): calls visit(rel, st, path) for
// `root` itself (rel "") and for everything below it, by lstat (links are not followed),
// a directory before its entries. A path that cannot be listed is a test failure.
using TreeVisitor =
    std::function<void(const std::string& rel, const struct stat& st, const std::string& path)>;
void WalkTree(const std::string& root, const TreeVisitor& visit);

}  // namespace dsfs::testing

// Skips a real-mount test, saying why, where CannotMountReason() is not empty.
#define SKIP_UNLESS_CAN_MOUNT()                                               \
  do {                                                                        \
    std::string why_not = ::dsfs::testing::CannotMountReason();               \
    if (!why_not.empty()) {                                                   \
      GTEST_SKIP() << "SKIPPED: real-mount test not run because " << why_not; \
    }                                                                         \
  } while (0)
