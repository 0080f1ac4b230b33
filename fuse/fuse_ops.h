// The libfuse3 low-level callbacks of a mount: each unpacks its arguments, calls one Filesystem
// method and replies once (the model is libfuse's passthrough_hp.cc). Nothing here builds
// anything: the session is fuse/tree_session.h, the assembly of a mount (prefetcher, preload,
// systemd status, thread priorities) mount/serve.h.
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "fuse/tree_session.h"

namespace dsfs {

class RequestWorkers;

// What the callbacks serve from: the session's userdata, filled in by whoever assembles the
// mount. The pointers change only while no request is served.
struct FuseContext {
  Filesystem* fs;
  FuseOptions options;
  bool no_open = false;  // set in init: OPEN may be answered ENOSYS
  // Told of every complete readdirplus (it pushes the files); null: nothing pushed.
  Prefetcher* prefetcher = nullptr;
  // Requests that render an image not in the cache are handed to these, and on a remote
  // store those that may fetch what is not in memory to `fetchers` (fuse/request_workers.h,
  // Filesystem::*Fetches); null: served on the request thread.
  RequestWorkers* decoders = nullptr;
  RequestWorkers* fetchers = nullptr;
};

// The callbacks. REQUIRES: the session's userdata is a FuseContext that outlives it.
fuse_lowlevel_ops FuseOps();

}  // namespace dsfs
