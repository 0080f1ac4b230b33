// Helpers shared by the dsfs tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tests/fakes/mem_store.h"
#include "common/status.h"
#include "pack/packer.h"
#include "store/store.h"

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

// Why real mounts cannot run here (not root, no usable /dev/fuse), or "" if they can.
std::string CannotMountReason();

// Path of the built dsfs executable.
std::string DsfsBinary();

// A copy of `table` with the last byte of payload record `id` flipped (its checksum then
// fails); Corruption if the record is not there.
Status DamagePayload(const MemTable& table, uint64_t id, std::shared_ptr<MemTable>* damaged);

// Packs `src` into a new in-memory store and opens it.
Status PackToMemory(const std::string& src, const PackOptions& options,
                    std::shared_ptr<MemTable>* table, std::unique_ptr<Store>* store);

// Packs `src` into a new store of `backend` ("lmdb", "rocksdb") at `path` and opens it.
Status PackToBackend(const std::string& src, const PackOptions& options, const std::string& backend,
                     const std::string& path, std::unique_ptr<Store>* store);

// The backend the CLI and mount tests pack to: $DSFS_TEST_BACKEND, default "lmdb" (ctest runs
// those suites once per backend).
std::string TestBackend();
// The FUSE transport the mount tests ask for: $DSFS_TEST_TRANSPORT ("auto", "uring",
// "classic"), "" (dsfs's default) when unset; ctest's uring.* run sets "uring".
std::string TestTransport();

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

// Every path of the store (relative, sorted) with what it holds: file contents, "->target"
// for a symlink, "<dir>" for a directory. Fails the test on any read error.
std::map<std::string, std::string> StoreListing(const Store& store);
// The same for a directory tree.
std::map<std::string, std::string> TreeListing(const std::string& dir);

}  // namespace dsfs::testing

// Skips a real-mount test, saying why, where CannotMountReason() is not empty.
#define SKIP_UNLESS_CAN_MOUNT()                                               \
  do {                                                                        \
    std::string why_not = ::dsfs::testing::CannotMountReason();               \
    if (!why_not.empty()) {                                                   \
      GTEST_SKIP() << "SKIPPED: real-mount test not run because " << why_not; \
    }                                                                         \
  } while (0)
