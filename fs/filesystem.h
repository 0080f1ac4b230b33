// Filesystem: the FUSE-free core of the mounted tree. Callbacks in fs/fuse_ops.cc unpack their
// arguments, call one method here and reply once; everything here is unit-tested without
// /dev/fuse.
//
// Inode numbers are the store's (root = 1). The tree is immutable, so nothing here takes a lock:
// every method is safe to call from any number of threads.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "cache/prefetcher.h"
#include "common/status.h"
#include "store/store.h"

namespace dsfs {

struct FsOptions {
  uid_t uid = ::getuid();  // owner shown for every file: the mounting user by default
  gid_t gid = ::getgid();
};

// Request counters, by operation. Relaxed atomics: they are statistics.
struct RequestCounters {
  std::atomic<uint64_t> lookup{0}, getattr{0}, readdir{0}, open{0}, read{0}, readlink{0}, statfs{0},
      bytes_read{0}, errors{0};
};

class Filesystem {
 public:
  // Size of the stats file: its JSON is padded with spaces to this size, so its attributes
  // never change while its contents do.
  static constexpr uint64_t kStatsBytes = 16384;

  Filesystem(std::unique_ptr<Store> store, const FsOptions& options);

  const Store& store() const { return *store_; }
  // Reads are reported to `prefetcher` (readahead) while it is set; null detaches it.
  // REQUIRES: no request is being served while it changes.
  void SetPrefetcher(Prefetcher* prefetcher) { prefetcher_ = prefetcher; }

  Status Lookup(uint64_t parent, std::string_view name, struct stat* st) const;
  Status GetAttr(uint64_t ino, struct stat* st) const;
  // Lists directory `ino` from position `offset` (0 = ".", 1 = "..", 2 + i = entry i). `fill`
  // gets each name, its attributes and the offset of the entry after it, and returns false to
  // stop (reply buffer full).
  using DirFiller =
      std::function<bool(std::string_view name, const struct stat& st, uint64_t next_offset)>;
  Status ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fill) const;
  // ReadOnly for any write access, InvalidArgument ("is a directory") for directories.
  Status Open(uint64_t ino, int flags) const;
  // Reads up to `size` bytes at `offset`; see Store::Read for where *out points.
  Status Read(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
              std::string_view* out) const;
  Status ReadLink(uint64_t ino, std::string_view* target) const;
  Status StatFs(struct statvfs* st) const;

  // True for inodes that are not in the store (the hidden /.dsfs directory and its files):
  // their attributes must not be cached by the kernel.
  bool IsVirtual(uint64_t ino) const { return ino > store_->inode_count(); }
  RequestCounters& counters() const { return counters_; }
  // The stats file's contents (unpadded JSON).
  std::string StatsJson() const;
  // The same counters as one short line for systemd's STATUS= ("serving: 1234 requests,
  // 5.6 MB read, 0 errors; cache 12.0 MB of 1.0 GB, 85% hits").
  std::string StatusLine() const;

 private:
  // Virtual inodes: the hidden directory at the root and what is in it.
  uint64_t DotDsfsIno() const { return store_->inode_count() + 1; }
  uint64_t StatsIno() const { return store_->inode_count() + 2; }
  Status VirtualAttr(uint64_t ino, struct stat* st) const;

  void FillStat(uint64_t ino, const InodeRecord& rec, struct stat* st) const;

  std::unique_ptr<Store> store_;
  FsOptions options_;
  Prefetcher* prefetcher_ = nullptr;
  mutable RequestCounters counters_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace dsfs
