// `dsfs mount -o kernel`: the tree (or one view) served by the kernel's EROFS driver, with no
// per-file FUSE round trip (README, "The kernel path"). Two layers, bottom to top:
//
//   1. a private FUSE mount (fs/image_server.h) at /run/dsfs/<dev>-<ino>-<pid> (mode 0700; dev
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

#include <functional>
#include <string>

#include "common/status.h"
#include "fs/filesystem.h"
#include "fs/mount.h"
#include "fs/serve.h"

namespace dsfs {

// Where the private image mounts live.
inline constexpr const char* kKernelRunDir = "/run/dsfs";

// OK for root; otherwise the error `dsfs mount -o kernel` reports (no fallback: the user asked).
Status CheckKernelMountAllowed();

// Serves `fs` (opened from config.store_path, showing config.fs.view) at config.mountpoint as
// EROFS, as ServeFuse does for a classic mount: calls `on_mounted` once EROFS is mounted, then
// serves the image until the EROFS mount is gone or SIGINT/SIGTERM arrives (which unmount it,
// lazily if busy). Not root: an error that says so. Root without loop devices or EROFS: one log
// line saying why, then a classic mount (ServeFuse with `fuse`).
Status ServeKernel(Filesystem* fs, ByteCache* cache, const MountConfig& config,
                   const FuseOptions& fuse, const std::function<void()>& on_mounted);

// `dsfs umount` of a -o kernel mount: if `mountpoint` carries EROFS over an image file of a
// dsfs image mount (directly or through a loop device), sets *handled and tears the layers down
// in order: EROFS (lazily with `lazy`), the loop device if any (explicitly if it did not clear
// itself), the private mount (also when its daemon is dead), its directory; then waits (bounded) for the
// daemon. Also clears what a crashed -o kernel mount of `mountpoint` left in /run/dsfs when
// EROFS is already gone. Any other EROFS mount: *handled, InvalidArgument. Anything else:
// *handled = false, nothing done.
Status UnmountKernel(const std::string& mountpoint, bool lazy, bool* handled);

// If `mountpoint` is a -o kernel mount, *stats_path = its private mount's stats file, true.
bool KernelStatsPath(const std::string& mountpoint, std::string* stats_path);

}  // namespace dsfs
