#include "kernel/loop_device.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/log.h"
#include "common/system.h"

namespace dsfs {
namespace {

// The first line of a sysfs file, "" if there is none.
std::string ReadLine(const std::string& path) {
  std::string line;
  ReadFirstLine(path, &line);
  return line;
}

}  // namespace

// "/dev/loopN" -> "loopN", or "" if `source` is not a loop device.
std::string LoopDeviceName(const std::string& source) {
  constexpr std::string_view kPrefix = "/dev/loop";
  if (source.rfind(kPrefix, 0) != 0 || source.size() == kPrefix.size()) return "";
  for (size_t i = kPrefix.size(); i < source.size(); ++i) {
    if (source[i] < '0' || source[i] > '9') return "";
  }
  return source.substr(5);
}

// The backing file of loop device `name` ("loopN"), "" when it has none.
std::string LoopBackingFile(const std::string& name) {
  return ReadLine("/sys/block/" + name + "/loop/backing_file");
}

bool LoopDirectIo(const std::string& name) {
  return ReadLine("/sys/block/" + name + "/loop/dio") == "1";
}

void ClearLoopDevice(const std::string& name) {
  int fd = ::open(("/dev/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  // On a device still in use this only sets AUTOCLEAR: it detaches when its last user goes.
  if (::ioctl(fd, LOOP_CLR_FD, 0) != 0 && errno != ENXIO) {
    Log()->debug("LOOP_CLR_FD on /dev/{}: {}", name, std::strerror(errno));
  }
  ::close(fd);
}

Status AttachLoopDevice(const std::string& file, std::string* name, int* loop_fd) {
  int ctl = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) {
    int err = errno;
    return Status::NotSupported(std::string("no loop devices (/dev/loop-control: ") +
                                std::strerror(err) + ")");
  }
  int file_fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (file_fd < 0) {
    int err = errno;
    ::close(ctl);
    return Status::FromErrno(err, "open " + file);
  }
  Status result = Status::IOError("no free loop device after 32 tries");
  for (int attempt = 0; attempt < 32; ++attempt) {
    int n = ::ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) {
      result = Status::FromErrno(errno, "LOOP_CTL_GET_FREE");
      break;
    }
    std::string dev = "/dev/loop" + std::to_string(n);
    int fd = -1;
    // devtmpfs makes the node at once; allow a moment where udev does.
    for (int waited_ms = 0; waited_ms < 1000; waited_ms += 10) {
      if ((fd = ::open(dev.c_str(), O_RDONLY | O_CLOEXEC)) >= 0 || errno != ENOENT) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fd < 0) {
      result = Status::FromErrno(errno, "open " + dev);
      break;
    }
    struct loop_config cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.fd = static_cast<uint32_t>(file_fd);
    cfg.block_size = 4096;  // EROFS's block: every request to the image is whole blocks
    cfg.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(cfg.info.lo_file_name), file.c_str(), LO_NAME_SIZE - 1);
    if (::ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
      *name = "loop" + std::to_string(n);
      *loop_fd = fd;
      result = Status::OK();
      break;
    }
    int err = errno;
    ::close(fd);
    if (err == EBUSY) continue;  // another process took it between GET_FREE and CONFIGURE
    result = err == EINVAL || err == ENOTTY
                 ? Status::NotSupported("the kernel's loop driver has no LOOP_CONFIGURE")
                 : Status::FromErrno(err, "LOOP_CONFIGURE " + dev);
    break;
  }
  ::close(file_fd);
  ::close(ctl);
  return result;
}

}  // namespace dsfs
