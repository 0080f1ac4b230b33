// The mount a daemon made, told apart from whatever its mountpoint carries later.
//
// A daemon outlives its mount when the mount was detached (`dsfs umount --lazy`, umount -l)
// while a file on it was open: the detached mount still needs it. By then the mountpoint may
// carry another mount (a new dsfs mount, or anything else), which an unmount by path, on a
// signal or as the session ends, would take down. So the daemon notes which mount it made,
// by the kernel's mount ID, and unmounts the path only while that is still its topmost mount.
#pragma once

#include <cstdint>
#include <string>

namespace dsfs {

class OwnMount {
 public:
  OwnMount() = default;
  // Notes the topmost mount at `path` as this daemon's. Call right after mounting it, before
  // serving: the look needs no request (attributes are not fetched).
  explicit OwnMount(std::string path);

  const std::string& path() const { return path_; }
  // The mount's ID; 0 if it could not be read (then nothing is ever unmounted).
  uint64_t id() const { return id_; }

  // True if the topmost mount at path() is still the one noted.
  bool StillMounted() const;

  // umount2(path(), flags) if the topmost mount there is still the one noted; false without
  // doing anything otherwise (errno = 0), or if umount2 fails (its errno). With MNT_DETACH the
  // mount is detached through a descriptor of the mount checked, so nothing else can be.
  bool Unmount(int flags) const;

 private:
  // A descriptor of the mount root at path() if that is still the mount noted; else -1.
  int OpenIfStillMounted() const;

  std::string path_;
  uint64_t id_ = 0;
};

}  // namespace dsfs
