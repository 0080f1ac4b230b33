// Loop devices for `dsfs mount -o kernel` (kernel/kernel_mount.h): attaching one read-only, with
// direct I/O and AUTOCLEAR, to a file; finding and clearing it again. Names are "loopN".
//
// Thread safety: plain functions over the kernel's loop driver; safe from any thread.
#pragma once

#include <string>

#include "common/status.h"

namespace dsfs {

// Attaches a free loop device to `file`: read-only, direct I/O, AUTOCLEAR (it detaches itself
// when its last opener goes), 4 KiB logical blocks; retries when another process takes the free
// device first. On success *name is "loopN" and *loop_fd an open descriptor of the device: the
// caller keeps it open until something else (a mount) holds the device, since closing it first
// clears the device. NotSupported where there are no loop devices or no LOOP_CONFIGURE.
[[nodiscard]] Status AttachLoopDevice(const std::string& file, std::string* name, int* loop_fd);

// LOOP_CLR_FD: detaches `name` now, or, while it is in use, once its last user goes.
void ClearLoopDevice(const std::string& name);

// "/dev/loopN" -> "loopN"; "" if `source` is not a loop device.
std::string LoopDeviceName(const std::string& source);

// The backing file of loop device `name` (from sysfs), "" when it has none.
std::string LoopBackingFile(const std::string& name);

// True if `name` reads its backing file with direct I/O.
bool LoopDirectIo(const std::string& name);

}  // namespace dsfs
