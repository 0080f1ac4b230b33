// `dsfs mount -o kernel`: the tree (or one view) served by the kernel's EROFS driver, with no
// per-file FUSE round trip (README, "The kernel path"). Two layers, bottom to top:
//
//   1. a private FUSE mount (fuse/erofs_server.h) at /run/dsfs/<dev>-<ino>-<pid> (mode 0700; dev
//      and ino identify MNT's directory, pid is the daemon's) holding one file, `image`: an
//      EROFS image synthesized on demand from the store (erofs/image.h), and `stats`;
//   2. EROFS mounted read-only (nosuid, nodev) at MNT on that file: a file-backed mount
//      (Linux 6.12+), whose reads go through the image file's page cache, so the kernel reads
//      ahead in the image (a directory's files lie side by side) and a block it has read once
//      is never asked for again.
// Kernels without file-backed EROFS mounts, and -o kernel=loop, put a read-only loop device with
// direct I/O (LOOP_CONFIGURE, AUTOCLEAR: it detaches itself when the EROFS mount above it goes)
// between the two: every block EROFS misses is then one request.
//
// Finding the layers from MNT: mountinfo names MNT's source, the image file (or /dev/loopN, whose
// /sys/block/loopN/loop/backing_file is the image file). When the EROFS mount ends (dsfs umount,
// umount(8), a lazy unmount once its last file closes), EROFS (or the loop device) lets go of the
// image and the daemon sees the image's last RELEASE: it unmounts its private mount, removes the
// directory and exits.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/byte_cache.h"
#include "common/status.h"
#include "erofs/image.h"
#include "erofs/store_tree.h"
#include "fs/filesystem.h"
#include "fuse/erofs_server.h"
#include "kernel/erofs_readahead.h"

namespace dsfs {

// Where the private image mounts live.
inline constexpr const char* kKernelRunDir = "/run/dsfs";

// What statfs of a -o kernel mount reports (EROFS_SUPER_MAGIC_V1).
inline constexpr uint64_t kErofsMagic = 0xE0F5E1E2;

// OK for root; otherwise the error `dsfs mount -o kernel` reports (no fallback: the user asked).
Status CheckKernelMountAllowed();

// What this kernel's EROFS lacks to read a compressed image (fragments, the zstd decompressor):
// "" when nothing. From /sys/fs/erofs/features and the kernel's release (zstd since 6.10);
// $DSFS_EROFS_FEATURES, a comma-separated list ("fragments,zstd"), replaces the probe (tests).
std::string KernelCompressedImageMissing();
// Which image `-o kernel` makes of the tree of `store` on this machine: true for the compressed
// one (the store's own zstd groups as the packed inode's pclusters); *why says in a few words
// why not, or what it is.
bool KernelImageCompressed(const Store& store, std::string* why);

struct KernelOptions {
  bool loop = false;  // -o kernel=loop: EROFS over a loop device, never over the file
  // The private mount's session (its fsname is "dsfs-image:" + the store path; on_read is the
  // kernel path's own).
  ErofsServerOptions server;
  // Budget of the readahead into the image's page cache (kernel/erofs_readahead.h); 0: none.
  uint64_t readahead_bytes = 0;
  // Let other users in: without it the image's root directory is the mounting user's alone.
  bool allow_other = false;
  // Bytes of the store's tables read ahead before the image is laid out.
  uint64_t metadata_readahead_bytes = 0;
  // The private mount's stats file: what this returns (one line of JSON; the mount's assembly,
  // mount/stats.h, which asks StatsObject for the kernel block). Unset: the kernel block alone.
  // Called from the image server's threads: it must be thread-safe.
  std::function<std::string()> stats_json;
};

// The two layers of one -o kernel mount, from EROFS mounted at the mountpoint to their
// teardown. What runs beside them (signals, the service monitor, the memory guard, preload) is
// the mount's (mount/serve.h).
class KernelMount {
 public:
  // Lays out the image of `fs` (the tree or the view it shows), starts the private mount and
  // mounts EROFS read-only at `target` (the mountpoint `mountpoint`, or the descriptor path
  // dsfs mount locked it by). NotSupported, with the reason, where this machine cannot (no
  // EROFS, no loop devices, a view whose sizes are known only once encoded): the caller mounts
  // with FUSE instead. Any other error fails the mount. REQUIRES: `fs` and `cache` outlive
  // the result; root (CheckKernelMountAllowed).
  static Status Mount(Filesystem* fs, ByteCache* cache, const std::string& mountpoint,
                      const std::string& target, const KernelOptions& options,
                      std::unique_ptr<KernelMount>* out);
  ~KernelMount();  // Finish()
  KernelMount(const KernelMount&) = delete;
  KernelMount& operator=(const KernelMount&) = delete;

  // Serves until EROFS lets go of the image (it was unmounted) or the private mount is gone
  // (false), or `stop_fd` becomes readable (true: a signal; the caller unmounts EROFS).
  bool ServeUntil(int stop_fd);
  // Waits (bounded) for EROFS to let go of the image, clears the loop device if it did not
  // clear itself, stops the private mount and removes its directory. Safe to call twice.
  void Finish();

  // What a STATUS= line of the service says.
  std::string StatusLine() const;
  // The kernel block of the stats ("kernel": the image, its server's reads and their latency,
  // the readahead). Safe from any thread while the mount exists.
  nlohmann::ordered_json StatsObject() const;

 private:
  KernelMount() = default;

  Filesystem* fs_ = nullptr;
  std::string mountpoint_;
  std::unique_ptr<erofs::ImageTree> tree_;
  std::unique_ptr<erofs::StorePacked> packed_;  // a compressed image's packed inode
  std::unique_ptr<erofs::Image> image_;
  double layout_s_ = 0;
  std::string dir_;                    // the private mount's directory
  std::string loop_;                   // "loopN" when EROFS reads a loop device
  std::atomic<bool> directio_{false};  // EROFS reads the image file with direct I/O
  std::atomic<bool> serving_{false};   // EROFS is mounted on the image
  int events_[2] = {-1, -1};           // 'c': the image was let go of; 'e': the session ended
  std::unique_ptr<ErofsServer> server_;
  // Made once EROFS reads the image through its page cache (never through a loop device or
  // with direct I/O, which would not see what it stores); on from then until Finish.
  std::unique_ptr<ErofsReadahead> readahead_;
  std::atomic<bool> readahead_on_{false};
  bool finished_ = false;
};

// `dsfs umount` of a -o kernel mount: if `mountpoint` carries EROFS over an image file of a
// dsfs image mount (directly or through a loop device), sets *handled and tears the layers down
// in order: EROFS (lazily with `lazy`), the loop device if any (explicitly if it did not clear
// itself), the private mount (also when its daemon is dead), its directory; then waits (bounded)
// for the daemon. Also clears what a crashed -o kernel mount of `mountpoint` left in /run/dsfs when
// EROFS is already gone. Any other EROFS mount: *handled, InvalidArgument. Anything else:
// *handled = false, nothing done.
Status UnmountKernel(const std::string& mountpoint, bool lazy, bool* handled);

// If `mountpoint` is a -o kernel mount, *stats_path = its private mount's stats file, true.
bool KernelStatsPath(const std::string& mountpoint, std::string* stats_path);

}  // namespace dsfs
