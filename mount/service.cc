#include "mount/service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
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

namespace {

// statfs(path) in a child process: 0 and the filesystem's magic, or -1 and errno. A request a
// daemon sends its own mount must never be made by a thread of the daemon: killed (SIGKILL)
// while the request is with it but unanswered, the daemon cannot exit (that thread waits for
// the answer, uninterruptibly), so its /dev/fuse stays open and the connection never aborts:
// the mount, and everything that touches it, hangs for good. A child is not killed with it; its
// request fails once the daemon is gone.
int StatfsInChild(const std::string& path, uint64_t* magic, int* err) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    *err = errno;
    return -1;
  }
  const char* c_path = path.c_str();
  pid_t pid = ::fork();
  if (pid < 0) {
    *err = errno;
    ::close(p[0]);
    ::close(p[1]);
    return -1;
  }
  if (pid == 0) {
    // Only async-signal-safe calls here (the daemon runs threads). Nothing of the daemon's is
    // kept open (its /dev/fuse above all: held here, it would keep a dead daemon's connection).
    ::close_range(3, static_cast<unsigned>(p[1]) - 1, 0);
    ::close_range(static_cast<unsigned>(p[1]) + 1, ~0U, 0);
    struct statfs sfs;
    int rc;
    do {
      rc = ::statfs(c_path, &sfs);
    } while (rc != 0 && errno == EINTR);
    int64_t out[2] = {rc == 0 ? 0 : errno, rc == 0 ? static_cast<int64_t>(sfs.f_type) : 0};
    (void)!::write(p[1], out, sizeof(out));
    ::_exit(0);
  }
  ::close(p[1]);
  int64_t in[2] = {EIO, 0};
  ssize_t n;
  do {
    n = ::read(p[0], in, sizeof(in));
  } while (n < 0 && errno == EINTR);
  ::close(p[0]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(in)) || in[0] != 0) {
    *err = n == static_cast<ssize_t>(sizeof(in)) ? static_cast<int>(in[0]) : EIO;
    return -1;
  }
  *magic = static_cast<uint64_t>(in[1]);
  return 0;
}

}  // namespace

void ServiceMonitor::Run() {
  if (options_.notify) {
    // statfs is never answered from the kernel's caches: when it returns, this daemon's loop
    // has answered INIT and STATFS, so every later request will be answered too. The loop
    // threads start right after Start(), so this waits only for them; an unmount that comes
    // first (signal) closes the device, and the probe fails instead of hanging.
    auto t0 = std::chrono::steady_clock::now();
    uint64_t magic = 0;
    int err = 0;
    int rc = StatfsInChild(options_.mountpoint, &magic, &err);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rc == 0 && magic == options_.fs_magic) {
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
  auto interval = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && options_.on_interval) options_.on_interval();
  };
  interval();
  for (;;) {
    struct pollfd pfd = {wake_read_, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(options_.status_interval.count()));
    if (rc < 0 && errno != EINTR) break;
    if (rc == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (ready_sent_ && !stopping_) Notify("STATUS=" + status_());
      }
      interval();
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
