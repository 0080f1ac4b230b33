#include "common/system.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace dsfs {

namespace {

// Up to `max_bytes` from `fd`, which it closes.
void ReadAndClose(int fd, std::string* out, size_t max_bytes) {
  // In pieces: procfs and sysfs files report no size, and most hold a few bytes.
  char buf[4096];
  while (out->size() < max_bytes) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof(buf), max_bytes - out->size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
}

}  // namespace

bool ReadSmallFile(const std::string& path, std::string* out, size_t max_bytes) {
  out->clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ReadAndClose(fd, out, max_bytes);
  return true;
}

bool ReadSmallRegularFile(const std::string& path, std::string* out, size_t max_bytes,
                          bool follow_link) {
  out->clear();
  const int fd =
      ::open(path.c_str(), O_RDONLY | (follow_link ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return false;
  }
  ReadAndClose(fd, out, max_bytes);
  return true;
}

std::string ReadSmallFileTrimmed(const std::string& path) {
  std::string s;
  if (!ReadSmallFile(path, &s)) return "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool ReadFirstLine(const std::string& path, std::string* line) {
  line->clear();
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, *line);
  return true;
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie has exited: only its parent's wait is missing. /proc/PID/stat: "PID (COMM) S ...",
  // COMM may hold anything, so the state follows the last ')'.
  std::string stat = ReadSmallFileTrimmed("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return !(paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

std::string AbsolutePath(const std::string& path) {
  // An empty path has no absolute form (std::filesystem::absolute throws): it names no mount.
  if (path.empty()) return path;
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  // With a trailing slash ("a/b/") the parent is b itself, which is resolved, as POSIX
  // resolves a path that ends in a slash.
  const std::string parent = p.parent_path().string();
  char buf[PATH_MAX];
  if (::realpath(parent.c_str(), buf) == nullptr) return p.string();
  std::string r = buf;
  const std::string name = p.filename().string();
  if (name.empty()) return r;
  if (r != "/") r += "/";
  return r + name;
}

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace dsfs
