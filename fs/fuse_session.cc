#include "fs/fuse_session.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace dsfs {

namespace {

// libfuse's own messages ("fuse: failed to open /dev/fuse: ...") into dsfs's log at info: a
// failure is reported by dsfs in its one error line, not by a second line from libfuse.
void LibfuseLog(enum fuse_log_level, const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view line(buf);
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  Log()->info("libfuse: {}", line);
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
