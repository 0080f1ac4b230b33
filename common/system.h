// Facts about the system that several layers ask for, each found one way: a small file's
// contents (/proc, /sys), whether a process is alive, a path made absolute without resolving
// its last component.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace dsfs {

// Up to `max_bytes` of the file at `path` (a /proc or /sys file, a token); false if it cannot
// be opened. Trailing white space is kept: the caller decides what it means.
bool ReadSmallFile(const std::string& path, std::string* out, size_t max_bytes = 1 << 20);
// The same for a file that someone else may have put there: never through a link at `path`
// (ELOOP) unless `follow_link` (the file a link names is then what must be regular: a
// Kubernetes token file is a link), never blocking on a FIFO or device (O_NONBLOCK), and false
// (errno EINVAL) unless it is a regular file.
bool ReadSmallRegularFile(const std::string& path, std::string* out, size_t max_bytes,
                          bool follow_link = false);
// The same with trailing newlines and spaces removed; "" if it cannot be read.
std::string ReadSmallFileTrimmed(const std::string& path);

// The first line of the file at `path` (a sysfs or procfs value), without its newline; false
// (and "") if it cannot be opened.
bool ReadFirstLine(const std::string& path, std::string* line);

// True if process `pid` exists and has not exited: a zombie (exited, its parent's wait still
// missing) is not alive. A process of another user (kill(2) says EPERM) is.
bool ProcessAlive(pid_t pid);

// The value of environment variable `name`; empty when it is not set.
std::string GetEnv(const char* name);

// `path` made absolute and normalized, its directory resolved (symbolic links, "..") but not
// its last component, which may be a symbolic link or a dead FUSE mount (whose stat fails);
// with a trailing slash that component is resolved too. "" stays "" (it names nothing).
std::string AbsolutePath(const std::string& path);

}  // namespace dsfs
