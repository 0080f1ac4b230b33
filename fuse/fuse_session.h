// What every FUSE session of dsfs sets up the same way: its arguments and its classic
// multithreaded loop. The tree's mount (mount/serve.cc) and the EROFS image's private mount
// (fuse/erofs_server.cc) both start from here.
#pragma once

#include <fuse_lowlevel.h>

#include <cerrno>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace dsfs {

// The arguments of a read-only session: "-o ro,default_permissions,subtype=SUBTYPE,
// fsname=FSNAME[,allow_other]", and "-d" (libfuse's request tracing) when `debug`. A comma in
// `fsname` becomes '_' (it would end the option; libfuse has no escaping for it).
class FuseArgs {
 public:
  FuseArgs(std::string_view subtype, std::string fsname, bool allow_other, bool debug);
  FuseArgs(const FuseArgs&) = delete;
  FuseArgs& operator=(const FuseArgs&) = delete;
  // For fuse_session_new; valid while this lives.
  struct fuse_args* get() {
    return &args_;
  }

 private:
  std::vector<std::string> argv_;
  std::vector<char*> cargv_;
  struct fuse_args args_;
};

// Runs the body of a callback of request `req`: an exception becomes EIO, never a dead daemon,
// and a line through the repeat limiter ("PREFIXOP: unexpected exception: what").
template <typename F>
void GuardRequest(fuse_req_t req, const char* prefix, const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    LogRepeated(spdlog::level::err, "{}{}: unexpected exception: {}", prefix, op, e.what());
    fuse_reply_err(req, EIO);
  } catch (...) {
    LogRepeated(spdlog::level::err, "{}{}: unexpected exception", prefix, op);
    fuse_reply_err(req, EIO);
  }
}

// fuse_session_mount(se, target): on failure, IOError "WHAT: mount failed: REASON", where
// REASON is libfuse's own last message of the attempt (e.g. "fuse: failed to open /dev/fuse:
// Permission denied"), or the errno it left, or a hint when it said nothing.
Status MountSession(struct fuse_session* se, const std::string& target, const std::string& what);

// Serves `se` with libfuse's own loop on `threads` threads (at least 1, all kept idle-ready,
// no cloned device fds) until the session ends; returns the loop's result.
int RunFuseLoop(struct fuse_session* se, int threads);

}  // namespace dsfs
