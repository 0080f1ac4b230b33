#include "fs/service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/statfs.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace dsfs {
namespace {


// The write end of the running monitor's self-pipe, for the signal handler (-1: none).
std::atomic<int> g_wake_fd{-1};
struct sigaction g_old_hup;

void OnSighup(int) {
  int saved = errno;
  int fd = g_wake_fd.load();
  if (fd >= 0) {
    char c = 'h';
    [[maybe_unused]] ssize_t n = ::write(fd, &c, 1);
  }
  errno = saved;
}

}  // namespace

ServiceMonitor::ServiceMonitor(Options options, std::function<std::string()> status)
    : options_(std::move(options)), status_(std::move(status)) {}

ServiceMonitor::~ServiceMonitor() { Stop(); }

Status ServiceMonitor::Start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return Status::FromErrno(errno, "pipe");
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  g_wake_fd.store(wake_write_);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSighup;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(SIGHUP, &sa, &g_old_hup) != 0) {
    int err = errno;
    g_wake_fd.store(-1);
    ::close(wake_read_);
    ::close(wake_write_);
    wake_read_ = wake_write_ = -1;
    return Status::FromErrno(err, "sigaction(SIGHUP)");
  }
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ServiceMonitor::Notify(const std::string& message) {
  if (!options_.notify) return;
  int rc = sd_notify(0, message.c_str());
  if (rc < 0) Log()->warn("sd_notify: {}", std::strerror(-rc));
}

void ServiceMonitor::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  stopping_ = true;
  Notify("STOPPING=1\nSTATUS=stopping: unmounting " + options_.mountpoint);
}

void ServiceMonitor::Stop() {
  if (!started_) return;
  started_ = false;
  char c = 'q';
  [[maybe_unused]] ssize_t n = ::write(wake_write_, &c, 1);
  if (thread_.joinable()) thread_.join();
  ::sigaction(SIGHUP, &g_old_hup, nullptr);
  g_wake_fd.store(-1);
  ::close(wake_read_);
  ::close(wake_write_);
  wake_read_ = wake_write_ = -1;
}

void ServiceMonitor::Run() {
  if (options_.notify) {
    // statfs is never answered from the kernel's caches: when it returns, this daemon's loop
    // has answered INIT and STATFS, so every later request will be answered too. The loop
    // threads start right after Start(), so this waits only for them; an unmount that comes
    // first (signal) closes the device, and the probe fails instead of hanging.
    auto t0 = std::chrono::steady_clock::now();
    struct statfs sfs;
    int rc;
    do {
      rc = ::statfs(options_.mountpoint.c_str(), &sfs);
    } while (rc != 0 && errno == EINTR);
    int err = rc == 0 ? 0 : errno;
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rc == 0 && static_cast<uint64_t>(sfs.f_type) == options_.fs_magic) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        Notify("READY=1\nSTATUS=" + status_());
        ready_sent_ = true;
        Log()->info("{}: mount answers ({:.1f} ms after the loop started); ready",
                    options_.mountpoint, ms);
      }
    } else {
      Log()->warn("{}: the mount did not answer ({}); not reporting ready", options_.mountpoint,
                  rc == 0 ? "not the filesystem it serves" : std::strerror(err));
    }
  }
  for (;;) {
    struct pollfd pfd = {wake_read_, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(options_.status_interval.count()));
    if (rc < 0 && errno != EINTR) break;
    if (rc == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (ready_sent_ && !stopping_) Notify("STATUS=" + status_());
      }
      RepeatedLog().Flush(false);
      continue;
    }
    char buf[64];
    ssize_t n = ::read(wake_read_, buf, sizeof(buf));
    bool quit = false;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == 'q') quit = true;
      if (buf[i] == 'h') {
        Log()->info("SIGHUP received");
        ReopenLogFile();
      }
    }
    if (quit) break;
  }
  RepeatedLog().Flush(true);
}

}  // namespace dsfs
