#include "fuse/fuse_session.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace dsfs {

namespace {

// The last message libfuse logged (for the error line of a failed mount).
std::mutex last_mutex;
std::string last_message;

// libfuse's own messages ("fuse: failed to open /dev/fuse: ...") into dsfs's log at info: a
// failure is reported by dsfs in its one error line, not by a second line from libfuse.
void LibfuseLog(enum fuse_log_level, const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view line(buf);
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  Log()->info("libfuse: {}", line);
  std::lock_guard<std::mutex> lock(last_mutex);
  last_message.assign(line);
}

}  // namespace

FuseArgs::FuseArgs(std::string_view subtype, std::string fsname, bool allow_other, bool debug) {
  // -o debug: libfuse's request tracing goes to stderr, as libfuse writes it.
  fuse_set_log_func(debug ? nullptr : LibfuseLog);
  std::replace(fsname.begin(), fsname.end(), ',', '_');
  std::string opts = "ro,default_permissions,subtype=" + std::string(subtype) + ",fsname=" + fsname;
  if (allow_other) opts += ",allow_other";
  argv_ = {"dsfs", "-o", opts};
  if (debug) argv_.push_back("-d");
  for (auto& a : argv_) cargv_.push_back(a.data());
  args_ = FUSE_ARGS_INIT(static_cast<int>(cargv_.size()), cargv_.data());
}

Status MountSession(struct fuse_session* se, const std::string& target, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(last_mutex);
    last_message.clear();
  }
  errno = 0;
  if (fuse_session_mount(se, target.c_str()) == 0) return Status::OK();
  const int err = errno;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(last_mutex);
    reason = last_message;
  }
  if (reason.empty() && err != 0) reason = std::strerror(err);
  if (reason.empty()) reason = "is /dev/fuse available?";
  return Status::IOError(what + ": mount failed: " + reason);
}

int RunFuseLoop(struct fuse_session* se, int threads) {
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(std::max(1, threads)));
  fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(std::max(1, threads)));
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  return rc;
}

}  // namespace dsfs
