#include "mount/own_mount.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace dsfs {
namespace {

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x4000U  // Linux 6.8: a 64-bit ID never reused
#endif

// The mount ID of what `fd` is on; 0 if unknown. Where the kernel has them, the IDs that are
// never reused; else the old ones, which are free to reuse only once a mount is gone.
uint64_t MountIdOfFd(int fd) {
  struct statx sx;
  // DONT_SYNC: a FUSE mount answers from what it has, never with a request to its daemon
  // (which may not serve yet).
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID | STATX_MNT_ID_UNIQUE,
              &sx) != 0) {
    return 0;
  }
  if (!(sx.stx_mask & (STATX_MNT_ID | STATX_MNT_ID_UNIQUE))) return 0;
  return sx.stx_mnt_id;
}

int OpenMountRoot(const std::string& path) {
  return ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

}  // namespace

OwnMount::OwnMount(std::string path) : path_(std::move(path)) {
  int fd = OpenMountRoot(path_);
  if (fd < 0) return;
  id_ = MountIdOfFd(fd);
  ::close(fd);
}

int OwnMount::OpenIfStillMounted() const {
  int fd = id_ == 0 ? -1 : OpenMountRoot(path_);
  if (fd >= 0 && MountIdOfFd(fd) != id_) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

bool OwnMount::StillMounted() const {
  int fd = OpenIfStillMounted();
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

bool OwnMount::Unmount(int flags) const {
  int fd = OpenIfStillMounted();
  if (fd < 0) {
    errno = 0;
    return false;
  }
  int rc;
  if (flags & MNT_DETACH) {
    // The descriptor pins the mount, which only a detach allows: it is the one just checked.
    rc = ::umount2(("/proc/self/fd/" + std::to_string(fd)).c_str(), flags);
    int err = errno;
    ::close(fd);
    errno = err;
  } else {
    ::close(fd);
    rc = ::umount2(path_.c_str(), flags);
  }
  return rc == 0;
}

}  // namespace dsfs
