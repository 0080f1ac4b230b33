#include "fs/fuse_ops.h"

#include <fuse_lowlevel.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "fs/service.h"

namespace dsfs {
namespace {

// Reads that decode images, served on threads of their own so that a reader of large images
// never holds the request threads every other request needs; as many as the request threads
// (at most one per core), so decoding runs as parallel as before and its memory stays bounded.
// Jobs still queued when it is destroyed are run first: each owes its request a reply.
class DecodeWorkers {
 public:
  explicit DecodeWorkers(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Run(); });
  }
  ~DecodeWorkers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  DecodeWorkers(const DecodeWorkers&) = delete;
  DecodeWorkers& operator=(const DecodeWorkers&) = delete;
  void Submit(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop_ and nothing owed
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;  // guards jobs_ and stop_
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

struct Context {
  Filesystem* fs;
  FuseOptions options;
  bool no_open = false;  // set in init: OPEN may be answered ENOSYS
  Prefetcher* prefetcher = nullptr;
  DecodeWorkers* decoders = nullptr;
};

Context* Ctx(fuse_req_t req) { return static_cast<Context*>(fuse_req_userdata(req)); }

// Every callback body runs inside Guard: an exception becomes EIO, never a dead daemon.
template <typename F>
void Guard(fuse_req_t req, const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    LogRepeated(spdlog::level::err, "{}: unexpected exception: {}", op, e.what());
    fuse_reply_err(req, EIO);
  } catch (...) {
    LogRepeated(spdlog::level::err, "{}: unexpected exception", op);
    fuse_reply_err(req, EIO);
  }
}

// A damaged record answers EIO on every read of it: logged through the repeat limiter, so a
// training loop that reads it a million times leaves a line and a count, not a million lines.
int ErrnoOf(const Status& s, const char* op, fuse_ino_t ino) {
  if (s.IsCorruption()) {
    LogRepeated(spdlog::level::err, "{} on inode {}: {}", op, ino, s.message());
  } else if (!s.IsNotFound()) {
    Log()->debug("{} on inode {}: {}", op, ino, s.message());
  }
  return s.ToErrno();
}

// The stats file changes: its attributes (new mtime each time) are never cached, so the kernel
// drops its cached pages before each read (auto_inval_data).
double AttrTimeout(Context* c, fuse_ino_t ino) {
  return c->fs->IsVirtual(ino) ? 0.0 : c->options.timeout_s;
}

void OpInit(void* userdata, struct fuse_conn_info* conn) {
  auto* ctx = static_cast<Context*>(userdata);
  ctx->no_open = ctx->options.zero_message_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT);
  // Force readdirplus: in "auto" mode the kernel mixes in plain readdirs and then looks every
  // entry up anyway (see DESIGN.md section 4).
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_READDIRPLUS) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  }
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, "lookup", [&] {
    Context* c = Ctx(req);
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.attr_timeout = c->options.timeout_s;
    e.entry_timeout = c->options.timeout_s;
    Status s = c->fs->Lookup(parent, name, &e.attr);
    if (s.IsNotFound()) {
      // Negative entry, cached as long as positive ones: the tree never changes.
      e.ino = 0;
      fuse_reply_entry(req, &e);
      return;
    }
    if (!s.ok()) {
      fuse_reply_err(req, ErrnoOf(s, "lookup", parent));
      return;
    }
    e.ino = e.attr.st_ino;
    e.generation = 1;
    e.attr_timeout = AttrTimeout(c, e.ino);
    fuse_reply_entry(req, &e);
  });
}

void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
void OpForgetMulti(fuse_req_t req, size_t, struct fuse_forget_data*) { fuse_reply_none(req); }

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Guard(req, "getattr", [&] {
    struct stat st;
    Status s = Ctx(req)->fs->GetAttr(ino, &st);
    if (!s.ok()) {
      fuse_reply_err(req, ErrnoOf(s, "getattr", ino));
      return;
    }
    // The root's attributes are cached like all others: with default_permissions every path
    // walk checks them, and an uncached root costs a GETATTR per open (4x slower hot reads).
    // A dead daemon is detected with statfs instead (CheckMountpoint).
    fuse_reply_attr(req, &st, AttrTimeout(Ctx(req), ino));
  });
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Guard(req, plus ? "readdirplus" : "readdir", [&] {
    Context* c = Ctx(req);
    std::vector<char> buf(size);
    size_t used = 0;
    bool complete = true;  // every remaining entry fit in this reply
    auto add = [&](std::string_view name, const struct stat& st, uint64_t next) {
      std::string n(name);
      size_t need;
      if (plus) {
        fuse_entry_param e;
        std::memset(&e, 0, sizeof(e));
        e.ino = st.st_ino;
        e.generation = 1;
        e.attr = st;
        e.attr_timeout = AttrTimeout(c, e.ino);
        e.entry_timeout = c->options.timeout_s;
        need = fuse_add_direntry_plus(req, buf.data() + used, size - used, n.c_str(), &e,
                                      static_cast<off_t>(next));
      } else {
        need = fuse_add_direntry(req, buf.data() + used, size - used, n.c_str(), &st,
                                 static_cast<off_t>(next));
      }
      if (need > size - used) {
        complete = false;
        return false;
      }
      used += need;
      return true;
    };
    Status s = c->fs->ReadDir(ino, static_cast<uint64_t>(off), add);
    if (!s.ok() && used == 0) {
      fuse_reply_err(req, ErrnoOf(s, "readdir", ino));
      return;
    }
    fuse_reply_buf(req, buf.data(), used);
    // The listing reached its end: the kernel knows every entry, so their contents can be
    // pushed into its page cache.
    if (plus && complete && s.ok() && c->prefetcher) c->prefetcher->DirectoryListed(ino);
  });
}

void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ReadDirCommon(req, ino, size, off, false);
}
void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ReadDirCommon(req, ino, size, off, true);
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, "opendir", [&] {
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
      fuse_reply_err(req, EROFS);
      return;
    }
    fi->keep_cache = 1;
    fi->cache_readdir = 1;
    fuse_reply_open(req, fi);
  });
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Guard(req, "open", [&] {
    Context* c = Ctx(req);
    Status s = c->fs->Open(ino, fi->flags);
    if (s.ok() && c->no_open) {
      // Success for the kernel, and the last OPEN it sends (see FuseOptions).
      fuse_reply_err(req, ENOSYS);
      return;
    }
    if (!s.ok()) {
      fuse_reply_err(req,
                     s.code() == Status::Code::kInvalidArgument ? EISDIR : ErrnoOf(s, "open", ino));
      return;
    }
    // Contents never change: keep the page cache across opens.
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  });
}

void ServeRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  Guard(req, "read", [&] {
    thread_local ReadBuffer buf;
    std::string_view out;
    Status s = Ctx(req)->fs->Read(ino, static_cast<uint64_t>(off), size, &buf, &out);
    if (!s.ok()) {
      fuse_reply_err(req, ErrnoOf(s, "read", ino));
      return;
    }
    fuse_reply_buf(req, out.data(), out.size());
  });
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  Context* c = Ctx(req);
  bool decodes = false;
  try {
    decodes = c->decoders && c->fs->ReadDecodes(ino, static_cast<uint64_t>(off), size);
  } catch (...) {
    // Served here then: ServeRead's Guard answers whatever fails.
  }
  // Replied to later, from a decode worker (libfuse allows a reply from any thread).
  if (decodes) {
    c->decoders->Submit([req, ino, size, off] { ServeRead(req, ino, size, off); });
    return;
  }
  ServeRead(req, ino, size, off);
}

void OpRelease(fuse_req_t req, fuse_ino_t, struct fuse_file_info*) { fuse_reply_err(req, 0); }

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, "readlink", [&] {
    std::string_view target;
    Status s = Ctx(req)->fs->ReadLink(ino, &target);
    if (!s.ok()) {
      fuse_reply_err(
          req, s.code() == Status::Code::kInvalidArgument ? EINVAL : ErrnoOf(s, "readlink", ino));
      return;
    }
    fuse_reply_readlink(req, std::string(target).c_str());
  });
}

void OpStatFs(fuse_req_t req, fuse_ino_t) {
  Guard(req, "statfs", [&] {
    struct statvfs st;
    Status s = Ctx(req)->fs->StatFs(&st);
    if (!s.ok()) {
      fuse_reply_err(req, s.ToErrno());
      return;
    }
    fuse_reply_statfs(req, &st);
  });
}

void OpGetXattr(fuse_req_t req, fuse_ino_t, const char*, size_t) {
  // ENOSYS makes the kernel stop asking (no xattrs are stored).
  fuse_reply_err(req, ENOSYS);
}
void OpListXattr(fuse_req_t req, fuse_ino_t, size_t) { fuse_reply_err(req, ENOSYS); }

// Everything that would modify the tree.
void RoSetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { fuse_reply_err(req, EROFS); }
void RoMkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
void RoUnlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoSymlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) {
  fuse_reply_err(req, EROFS);
}
void RoLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoWrite(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void RoSetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  fuse_reply_err(req, EROFS);
}
void RoRemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RoFallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetAttr;
  ops.readdir = OpReadDir;
  ops.readdirplus = OpReadDirPlus;
  ops.opendir = OpOpenDir;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.release = OpRelease;
  ops.readlink = OpReadLink;
  ops.statfs = OpStatFs;
  ops.getxattr = OpGetXattr;
  ops.listxattr = OpListXattr;
  ops.setattr = RoSetAttr;
  ops.mknod = RoMknod;
  ops.mkdir = RoMkdir;
  ops.unlink = RoUnlink;
  ops.rmdir = RoUnlink;
  ops.symlink = RoSymlink;
  ops.rename = RoRename;
  ops.link = RoLink;
  ops.write = RoWrite;
  ops.create = RoCreate;
  ops.setxattr = RoSetXattr;
  ops.removexattr = RoRemoveXattr;
  ops.fallocate = RoFallocate;
  return ops;
}

}  // namespace

Status ServeFuse(Filesystem* fs, const std::string& mountpoint, const FuseOptions& options,
                 const std::function<void()>& on_mounted) {
  Context ctx{fs, options};
  std::vector<std::string> argv = {"dsfs"};
  std::string fsname = options.fsname.empty() ? std::string("dsfs") : options.fsname;
  // A comma would end the option; libfuse has no escaping for it.
  std::replace(fsname.begin(), fsname.end(), ',', '_');
  std::string opts = "ro,default_permissions,subtype=dsfs,fsname=" + fsname;
  if (options.allow_other) opts += ",allow_other";
  argv.push_back("-o");
  argv.push_back(opts);
  if (options.debug) argv.push_back("-d");
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargv.size()), cargv.data());

  fuse_lowlevel_ops ops = MakeOps();
  struct fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &ctx);
  if (!se) return Status::InvalidArgument("cannot create FUSE session (bad options?)");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Status::IOError("cannot install signal handlers");
  }
  // libfuse ends the session on SIGHUP; dsfs reopens its log instead (ServiceMonitor). Until
  // the monitor runs, a SIGHUP is ignored rather than fatal.
  ::signal(SIGHUP, SIG_IGN);
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Status::IOError(mountpoint + ": mount failed (is /dev/fuse available?)");
  }
  // Before anything reads from the session: the transport must see the kernel's INIT. It
  // decides there (and logs in one line) whether io_uring or the classic loop serves.
  TransportOptions to;
  to.mode = options.transport;
  to.classic_threads = std::max(1, options.threads);
  std::unique_ptr<FuseTransport> transport;
  Status ts = FuseTransport::Create(se, to, &transport);
  if (!ts.ok()) {
    // Nothing was changed: libfuse's own loop serves the session as before the transport.
    Log()->warn("FUSE transport: classic /dev/fuse loop: {}", ts.message());
    transport.reset();
  }
  FuseTransport* tp = transport.get();
  std::string no_transport = "classic (" + ts.message() + ")";
  fs->SetTransportStats([tp, no_transport] {
    Filesystem::TransportStats st;
    if (!tp) {
      st.description = no_transport;
      return st;
    }
    TransportInfo info = tp->info();
    st.description = info.Describe();
    st.ring_requests = info.ring_requests;
    st.classic_requests = info.classic_requests;
    st.per_queue_requests = info.per_queue_requests;
    return st;
  });
  Prefetcher::Options po;
  po.push_budget_bytes = options.push_bytes;
  auto prefetcher = std::make_unique<Prefetcher>(
      &fs->store(), po,
      [se](uint64_t ino, uint64_t offset, std::string_view data) {
        struct fuse_bufvec bufv = FUSE_BUFVEC_INIT(data.size());
        bufv.buf[0].mem = const_cast<char*>(data.data());
        return fuse_lowlevel_notify_store(se, ino, static_cast<off_t>(offset), &bufv,
                                          fuse_buf_copy_flags{});
      },
      fs);
  ctx.prefetcher = prefetcher.get();
  fs->SetPrefetcher(prefetcher.get());
  if (!options.preload_path.empty()) {
    uint32_t ino;
    InodeRecord rec;
    Status ps = fs->store().LookupPath(options.preload_path, &ino, &rec);
    if (ps.ok() && IsDir(rec)) {
      prefetcher->Preload(ino);
    } else {
      Log()->warn("preload: {}: not a directory in the store", options.preload_path);
    }
  }
  // Keep the metadata hot: read the tree's tables ahead in the background, so a cold scan or
  // stat storm after mounting does not wait on one page fault after another. Bounded so a
  // store with huge metadata does not push everything else out of the page cache.
  std::thread warm([store = &fs->store()] {
    uint64_t ram = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
    uint64_t bytes = store->WillNeedMetadata(ram / 8);
    Log()->debug("metadata read ahead: {} bytes", bytes);
  });
  if (on_mounted) on_mounted();
  ServiceMonitor::Options mo;
  mo.mountpoint = mountpoint;
  mo.notify = options.notify_systemd;
  mo.status_interval = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.05, options.status_interval_s) * 1000));
  ServiceMonitor monitor(mo, [fs] { return fs->StatusLine(); });
  Status ms = monitor.Start();
  if (!ms.ok()) Log()->warn("service monitor: {}", ms.message());
  // The loop threads libfuse starts from here, and the transport's ring threads, inherit this
  // thread's nice value (per thread on Linux); the prefetch workers set their own (19) and stay
  // in the background.
  int old_nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  if (options.nice != old_nice &&
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), options.nice) != 0) {
    Log()->debug("cannot set the request threads' nice value to {}: {}", options.nice,
                 std::strerror(errno));
  }
  // No more decoders than cores: more would only hold more decoded images at once.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto decoders = std::make_unique<DecodeWorkers>(std::min(options.threads, cores));
  ctx.decoders = decoders.get();
  int rc = 0;
  if (transport) {
    Status serve = transport->Serve();
    if (!serve.ok()) Log()->warn("FUSE transport: {}", serve.message());
  } else {
    struct fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(std::max(1, options.threads)));
    fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(std::max(1, options.threads)));
    rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  }
  // Before the session goes: the reads still queued are answered (or fail on the closed
  // connection).
  ctx.decoders = nullptr;
  decoders.reset();
  monitor.Stopping();
  warm.join();
  Prefetcher::Stats ps = prefetcher->stats();
  Log()->info("unmounting: pushed {} files ({} bytes, {} retries, {} failures), readahead {} files",
              ps.pushed_files, ps.pushed_bytes, ps.push_retries, ps.push_failures,
              ps.readahead_files);
  // The workers use the session: stop them before it goes.
  fs->SetPrefetcher(nullptr);
  ctx.prefetcher = nullptr;
  prefetcher.reset();
  // Closes the device first: a readiness probe still waiting fails instead of hanging Stop.
  fuse_session_unmount(se);
  monitor.Stop();
  // No request is served any more (the stats file included); the session outlives the
  // transport (its custom I/O), which the prefetcher's pushes went through until now.
  fs->SetTransportStats(nullptr);
  transport.reset();
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (rc != 0) Log()->info("FUSE session loop returned {}", rc);
  return Status::OK();
}

}  // namespace dsfs
