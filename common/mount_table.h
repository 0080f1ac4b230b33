// The mount table of this process's mount namespace (/proc/self/mountinfo): the one parser of
// it, for the mount, the unmount, the kernel path's teardown and the stats.
#pragma once

#include <functional>
#include <string>

namespace dsfs {

// Undoes /proc/self/mountinfo's escaping of space, tab, newline and backslash (\ooo).
std::string UnescapeMountinfo(const std::string& s);

// One mount, as mountinfo lists it.
struct MountInfo {
  std::string fstype;      // e.g. "fuse.dsfs", "tmpfs", "ext4"
  std::string source;      // a dsfs mount's store path; EROFS's image file or /dev/loopN
  unsigned dev_minor = 0;  // of st_dev: for FUSE, the connection number
};

// Calls fn(mountpoint, info) for each line of /proc/self/mountinfo, in order (later lines are
// mounted later).
void ForEachMount(
    const std::function<void(const std::string& mountpoint, const MountInfo& info)>& fn);

// The topmost mount at `path` (made absolute by AbsolutePath, common/system.h: its last
// component is not resolved): false if `path` is not a mountpoint.
bool FindMount(const std::string& path, MountInfo* info);

// True if `path` is a mountpoint listed in /proc/self/mountinfo.
bool IsMountpoint(const std::string& path);

}  // namespace dsfs
