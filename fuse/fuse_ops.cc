#include "fuse/fuse_ops.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "fuse/fuse_session.h"

namespace dsfs {
namespace {

using Context = FuseContext;

Context* Ctx(fuse_req_t req) { return static_cast<Context*>(fuse_req_userdata(req)); }

// Every callback body runs inside Guard: an exception becomes EIO, never a dead daemon.
template <typename F>
void Guard(fuse_req_t req, const char* op, F&& body) {
  GuardRequest(req, "", op, std::forward<F>(body));
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
  // entry up anyway.
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_READDIRPLUS) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  }
}

// Where request `req` is served: `serve` runs on a fetch worker when `fetches` says it may
// fetch from a remote backend what is not in memory, on a decode worker when `renders` says
// it needs a render (decoding an image) that is not in the cache, else here. So a stalled
// object store or a large image never holds the request threads, which keep answering from
// memory (cached files, loaded metadata, the stats file). A local store has no fetch workers:
// `fetches` is not even asked. The worker replies (libfuse allows a reply from any thread); a
// fetch still queued when the mount ends is answered EIO.
template <typename Fetches, typename Renders, typename F>
void ServeOrHandOver(Context* c, fuse_req_t req, Fetches&& fetches, Renders&& renders, F serve) {
  bool fetch = false, render = false;
  try {
    fetch = c->fetchers && fetches();
    render = !fetch && c->decoders && renders();
  } catch (...) {
    // Served here then: the serving function's Guard answers whatever fails.
  }
  if (fetch) {
    c->fetchers->Add(std::move(serve), [req] { fuse_reply_err(req, EIO); });
  } else if (render) {
    c->decoders->Add(std::move(serve));
  } else {
    serve();
  }
}

constexpr auto kNever = [] { return false; };

void ServeLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
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

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Context* c = Ctx(req);
  // A jpeg-N file's size is known once it is encoded.
  ServeOrHandOver(
      c, req, [&] { return c->fs->LookupFetches(parent, name); },
      [&] { return c->fs->LookupRenders(parent, name); },
      [req, parent, n = std::string(name)] { ServeLookup(req, parent, n.c_str()); });
}

void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
void OpForgetMulti(fuse_req_t req, size_t, struct fuse_forget_data*) { fuse_reply_none(req); }

void ServeGetAttr(fuse_req_t req, fuse_ino_t ino) {
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

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Context* c = Ctx(req);
  ServeOrHandOver(
      c, req, [&] { return c->fs->AttrFetches(ino); }, [&] { return c->fs->AttrRenders(ino); },
      [req, ino] { ServeGetAttr(req, ino); });
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
        // Node 0: the kernel lists the name (with st_ino: readdir(3) skips a d_ino of 0) and
        // keeps no attributes for it; it looks the entry up when it is opened.
        e.ino = Filesystem::AttrsUnknown(st) ? 0 : st.st_ino;
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

void ServeReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Context* c = Ctx(req);
  ServeOrHandOver(
      c, req, [&] { return c->fs->ReadDirFetches(ino); }, kNever,
      [req, ino, size, off, plus] { ReadDirCommon(req, ino, size, off, plus); });
}
void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ServeReadDir(req, ino, size, off, false);
}
void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  ServeReadDir(req, ino, size, off, true);
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

void ServeOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
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

void OpOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* c = Ctx(req);
  // Open checks the attributes: a jpeg-N file evicted from the cache since its lookup.
  ServeOrHandOver(
      c, req, [&] { return c->fs->AttrFetches(ino); }, [&] { return c->fs->AttrRenders(ino); },
      [req, ino, copy = *fi]() mutable { ServeOpen(req, ino, &copy); });
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
  ServeOrHandOver(
      c, req, [&] { return c->fs->ReadFetches(ino, static_cast<uint64_t>(off), size); },
      [&] { return c->fs->ReadDecodes(ino, static_cast<uint64_t>(off), size); },
      [req, ino, size, off] { ServeRead(req, ino, size, off); });
}

void OpRelease(fuse_req_t req, fuse_ino_t, struct fuse_file_info*) { fuse_reply_err(req, 0); }

void ServeReadLink(fuse_req_t req, fuse_ino_t ino) {
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

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  Context* c = Ctx(req);
  ServeOrHandOver(
      c, req, [&] { return c->fs->AttrFetches(ino); }, kNever,
      [req, ino] { ServeReadLink(req, ino); });
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

}  // namespace

fuse_lowlevel_ops FuseOps() {
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

}  // namespace dsfs
