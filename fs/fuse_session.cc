#include "fs/fuse_session.h"

#include <algorithm>

namespace dsfs {

FuseArgs::FuseArgs(std::string_view subtype, std::string fsname, bool allow_other, bool debug) {
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
