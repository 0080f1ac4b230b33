// `dsfs mount -o kernel`: the tree (or one view) served by the kernel's EROFS driver, with no
// per-file FUSE round trip (README, "The kernel path"). Three layers, bottom to top:
//
//   1. a private FUSE mount (fs/image_server.h) at /run/dsfs/<dev>-<ino>-<pid> (mode 0700; dev
//      and ino identify MNT's directory, pid is the daemon's) holding one file, `image`: an
//      EROFS image synthesized on demand from the store (erofs/image.h), and `stats`;
//   2. a read-only loop device with direct I/O on that file (LOOP_CONFIGURE, AUTOCLEAR: it
//      detaches itself when the EROFS mount above it goes);
//   3. EROFS mounted read-only (nosuid, nodev) at MNT.
//
// Finding the layers from MNT: mountinfo names MNT's source, /dev/loopN; the loop device's
// /sys/block/loopN/loop/backing_file is the image file inside the private mount. When the EROFS
// mount ends (dsfs umount, umount(8), a lazy unmount once its last file closes), the loop device
// lets go of the image and the daemon sees the image's last RELEASE: it unmounts its private
// mount, removes the directory and exits.
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

// `dsfs umount` of a -o kernel mount: if `mountpoint` carries EROFS over a loop device whose
// backing file lies in a dsfs image mount, sets *handled and tears the layers down in order:
// EROFS (lazily with `lazy`), the loop device (explicitly if it did not clear itself), the
// private mount (also when its daemon is dead), its directory; then waits (bounded) for the
// daemon. Also clears what a crashed -o kernel mount of `mountpoint` left in /run/dsfs when
// EROFS is already gone. Any other EROFS mount: *handled, InvalidArgument. Anything else:
// *handled = false, nothing done.
Status UnmountKernel(const std::string& mountpoint, bool lazy, bool* handled);

// If `mountpoint` is a -o kernel mount, *stats_path = its private mount's stats file, true.
bool KernelStatsPath(const std::string& mountpoint, std::string* stats_path);

}  // namespace dsfs
