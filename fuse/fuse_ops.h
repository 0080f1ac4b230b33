// The libfuse3 low-level callbacks of a mount: each unpacks its arguments, calls one Filesystem
// method and replies once (the model is libfuse's passthrough_hp.cc). Nothing here builds
// anything: the session is fuse/tree_session.h, the assembly of a mount (prefetcher, preload,
// systemd status, thread priorities) mount/serve.h.
#pragma once

#include <fuse_lowlevel.h>

#include <string>

#include "common/worker_group.h"
#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "fuse/tree_session.h"

namespace dsfs {

// What the callbacks serve from: the session's userdata, filled in by whoever assembles the
// mount. The pointers change only while no request is served.
struct FuseContext {
  Filesystem* fs;
  FuseOptions options;
  bool no_open = false;  // set in init: OPEN may be answered ENOSYS
  // Told of every complete readdirplus (it pushes the files); null: nothing pushed.
  Prefetcher* prefetcher = nullptr;
  // Worker groups that requests the request threads hand over run on (ServeOrHandOver), so
  // that a request that takes long never holds the threads every other request needs:
  // `decoders` for requests that render an image not in the cache (CPU bound: as many as the
  // request threads, at most one per core) and, on a remote store, `fetchers` for requests
  // that may wait on the object store (Filesystem::*Fetches; I/O bound: more threads than
  // cores, bounded), so that slow fetches starve neither decodes nor the requests answered
  // from memory. Null: served on the request thread. Both are OnStop::kAbandon: a request
  // still queued as the pool goes is answered.
  WorkerGroup* decoders = nullptr;
  WorkerGroup* fetchers = nullptr;
};

// The callbacks. REQUIRES: the session's userdata is a FuseContext that outlives it.
fuse_lowlevel_ops FuseOps();

}  // namespace dsfs
