#include "fuse/erofs_server.h"

#include <fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
constexpr fuse_ino_t kRootIno = 1, kImageIno = 2, kStatsIno = 3;
constexpr size_t kBlock = 4096;
}  // namespace

// The callbacks: each unpacks, asks the image (or the stats function) and replies once.
struct ErofsServerOps {
  static ErofsServer* Srv(fuse_req_t req) {
    return static_cast<ErofsServer*>(fuse_req_userdata(req));
  }

  static bool Attr(ErofsServer* s, fuse_ino_t ino, struct stat* st) {
    std::memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_nlink = 1;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    switch (ino) {
      case kRootIno:
        st->st_mode = S_IFDIR | 0500;
        st->st_nlink = 2;
        return true;
      case kImageIno:
        st->st_mode = S_IFREG | 0400;
        st->st_size = static_cast<off_t>(s->image_->size_bytes());
        st->st_blksize = kBlock;
        st->st_blocks = static_cast<blkcnt_t>(s->image_->size_bytes() / 512);
        return true;
      case kStatsIno:
        st->st_mode = S_IFREG | 0400;
        st->st_size = static_cast<off_t>(ErofsServer::kStatsBytes);
        st->st_mtim = now;
        return true;
      default:
        return false;
    }
  }

  template <typename F>
  static void Guard(fuse_req_t req, const char* op, F&& body) {
    GuardRequest(req, "image ", op, std::forward<F>(body));
  }

  static void Init(void*, struct fuse_conn_info* conn) {
    // The loop device reads with direct I/O, in requests of up to max_pages (1 MiB with
    // libfuse's default max_write); buffered readers (a root user reading /image) read ahead
    // as far.
    conn->max_readahead = 1 << 20;
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Guard(req, "lookup", [&] {
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      fuse_ino_t ino = 0;
      if (parent == kRootIno && std::strcmp(name, ErofsServer::kImageName) == 0) ino = kImageIno;
      if (parent == kRootIno && std::strcmp(name, ErofsServer::kStatsName) == 0) ino = kStatsIno;
      if (ino == 0) {
        fuse_reply_err(req, ENOENT);
        return;
      }
      Attr(Srv(req), ino, &e.attr);
      e.ino = ino;
      e.generation = 1;
      e.entry_timeout = 1e6;
      e.attr_timeout = ino == kStatsIno ? 0 : 1e6;
      fuse_reply_entry(req, &e);
    });
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
    Guard(req, "getattr", [&] {
      struct stat st;
      if (!Attr(Srv(req), ino, &st)) {
        fuse_reply_err(req, ENOENT);
        return;
      }
      fuse_reply_attr(req, &st, ino == kStatsIno ? 0 : 1e6);
    });
  }

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info*) {
    Guard(req, "readdir", [&] {
      if (ino != kRootIno) {
        fuse_reply_err(req, ENOTDIR);
        return;
      }
      const std::pair<const char*, fuse_ino_t> entries[] = {{".", kRootIno},
                                                            {"..", kRootIno},
                                                            {ErofsServer::kImageName, kImageIno},
                                                            {ErofsServer::kStatsName, kStatsIno}};
      std::vector<char> buf(size);
      size_t used = 0;
      for (off_t i = off; i < 4; ++i) {
        struct stat st;
        Attr(Srv(req), entries[i].second, &st);
        size_t need =
            fuse_add_direntry(req, buf.data() + used, size - used, entries[i].first, &st, i + 1);
        if (need > size - used) break;
        used += need;
      }
      fuse_reply_buf(req, buf.data(), used);
    });
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    Guard(req, "open", [&] {
      if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
      }
      if (ino == kImageIno) {
        Srv(req)->open_images_.fetch_add(1);
        fi->keep_cache = 1;
      } else if (ino == kStatsIno) {
        fi->direct_io = 1;  // fresh counters on every read
      } else {
        fuse_reply_err(req, EISDIR);
        return;
      }
      if (fuse_reply_open(req, fi) != 0 && ino == kImageIno) {
        // The opener was interrupted: no RELEASE will follow.
        Srv(req)->open_images_.fetch_sub(1);
      }
    });
  }

  static void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
    ErofsServer* s = Srv(req);
    fuse_reply_err(req, 0);
    if (ino == kImageIno && s->open_images_.fetch_sub(1) == 1 && s->on_image_closed_) {
      s->on_image_closed_();
    }
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
    Guard(req, "read", [&] {
      ErofsServer* s = Srv(req);
      if (ino == kStatsIno) {
        s->counters_.stats_reads.fetch_add(1, std::memory_order_relaxed);
        std::string j = s->stats_json_ ? s->stats_json_() : "{}";
        j.resize(ErofsServer::kStatsBytes - 1, ' ');
        j += '\n';
        const size_t from = std::min<size_t>(static_cast<size_t>(off), j.size());
        fuse_reply_buf(req, j.data() + from, std::min(size, j.size() - from));
        return;
      }
      if (ino != kImageIno) {
        fuse_reply_err(req, EISDIR);
        return;
      }
      if (s->fetchers_) {
        // A remote store: the read may wait on the object store (up to its deadline), so it is
        // served by a fetch thread and the session threads stay free for the stats file and
        // the rest. No hint says which image ranges are in memory (erofs::Image maps bytes to
        // files only inside Read): every image read goes, the hand-over costs a wake-up.
        s->fetchers_->Add(
            [req, size, off] { Guard(req, "read", [&] { ReadImage(req, size, off); }); },
            [req] { fuse_reply_err(req, EIO); });
        return;
      }
      ReadImage(req, size, off);
    });
  }

  // Image bytes [off, off + size) answered to `req` (once), on whichever thread serves it.
  static void ReadImage(fuse_req_t req, size_t size, off_t off) {
    ErofsServer* s = Srv(req);
    const uint64_t total = s->image_->size_bytes();
    const uint64_t offset = static_cast<uint64_t>(off);
    const size_t len =
        offset >= total ? 0 : static_cast<size_t>(std::min<uint64_t>(size, total - offset));
    thread_local std::vector<char> buf;
    if (buf.size() < len) buf.resize(len);
    s->counters_.reads.fetch_add(1, std::memory_order_relaxed);
    const ScopedLatency timed(s->counters_.read_latency);
    Status st = s->image_->Read(offset, len, buf.data());
    size_t good = len;
    if (!st.ok() && s->page_cache_reader_.load(std::memory_order_relaxed)) {
      // Read through the image's page cache (a file-backed EROFS mount): a short reply would
      // tell the kernel the image ends there. EIO for the whole request: the kernel reads the
      // page a reader waits for again on its own, so only the damaged file's pages fail.
      s->counters_.errors.fetch_add(1, std::memory_order_relaxed);
      LogRepeated(spdlog::level::err, "EROFS image read at {} (+{}): {}", offset, len,
                  st.message());
      fuse_reply_err(req, EIO);
      return;
    }
    if (!st.ok()) {
      // Find the first failing block: the bytes before it are answered as a short read
      // (the loop device asks again for the rest, which then fails alone).
      good = 0;
      while (good < len) {
        const size_t n =
            std::min(kBlock - static_cast<size_t>((offset + good) % kBlock), len - good);
        if (!s->image_->Read(offset + good, n, buf.data() + good).ok()) break;
        good += n;
      }
      s->counters_.errors.fetch_add(1, std::memory_order_relaxed);
      LogRepeated(spdlog::level::err, "EROFS image read at {} (+{}): {}", offset + good, len - good,
                  st.message());
      if (good == 0) {
        fuse_reply_err(req, EIO);
        return;
      }
    }
    s->counters_.bytes_read.fetch_add(good, std::memory_order_relaxed);
    fuse_reply_buf(req, buf.data(), good);
    if (s->options_.on_read) s->options_.on_read(offset);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    struct statvfs st;
    std::memset(&st, 0, sizeof(st));
    st.f_bsize = st.f_frsize = kBlock;
    st.f_blocks = Srv(req)->image_->size_bytes() / kBlock;
    st.f_files = 3;
    st.f_namemax = 255;
    fuse_reply_statfs(req, &st);
  }

  static void NoXattr(fuse_req_t req, fuse_ino_t, const char*, size_t) {
    fuse_reply_err(req, ENOSYS);
  }
  static void NoListXattr(fuse_req_t req, fuse_ino_t, size_t) { fuse_reply_err(req, ENOSYS); }

  // In the struct's order; every other operation is left to libfuse (ENOSYS). (GCC warns of the
  // members a designated initializer leaves out, which is its point here.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
  static fuse_lowlevel_ops Make() {
    return fuse_lowlevel_ops{.init = Init,
                             .lookup = Lookup,
                             .getattr = GetAttr,
                             .open = Open,
                             .read = Read,
                             .release = Release,
                             .readdir = ReadDir,
                             .statfs = StatFs,
                             .getxattr = NoXattr,
                             .listxattr = NoListXattr};
  }
#pragma GCC diagnostic pop
};

ErofsServer::ErofsServer(const erofs::Image* image, ErofsServerOptions options,
                         std::function<std::string()> stats_json,
                         std::function<void()> on_image_closed)
    : image_(image),
      options_(std::move(options)),
      stats_json_(std::move(stats_json)),
      on_image_closed_(std::move(on_image_closed)) {}

ErofsServer::~ErofsServer() {
  Stop();
  if (!se_) return;
  // Closes the device; unmounts nothing that is already gone (the device reports POLLERR).
  fuse_session_unmount(se_);
  transport_.reset();  // StoreImage went through it until here
  fuse_session_destroy(se_);
}

int ErofsServer::StoreImage(uint64_t offset, std::string_view data) {
  struct fuse_bufvec bv = FUSE_BUFVEC_INIT(data.size());
  bv.buf[0].mem = const_cast<char*>(data.data());
  return fuse_lowlevel_notify_store(se_, kImageIno, static_cast<off_t>(offset), &bv,
                                    static_cast<fuse_buf_copy_flags>(0));
}

Status ErofsServer::Start(const std::string& dir) {
  dir_ = dir;
  FuseArgs args("dsfs-image",
                options_.session.fsname.empty() ? "dsfs-image" : options_.session.fsname,
                /*allow_other=*/false, options_.session.debug);
  static const fuse_lowlevel_ops ops = ErofsServerOps::Make();
  se_ = fuse_session_new(args.get(), &ops, sizeof(ops), this);
  if (!se_) return Status::InvalidArgument("cannot create the image's FUSE session");
  if (Status ms = MountSession(se_, dir, dir + " (the image's mount)"); !ms.ok()) {
    fuse_session_destroy(se_);
    se_ = nullptr;
    return ms;
  }
  // Before anything reads from the session: the transport must see the kernel's INIT.
  TransportOptions to;
  to.mode = options_.session.transport;
  to.classic_threads = std::max(1, options_.session.threads);
  to.answer_ioctls = true;  // the image has no ioctls
  transport_ = CreateTransportOrClassic(se_, to, "image ", &no_transport_);
  loop_ = std::thread([this] {
    // The loop threads libfuse starts from here, and the fetch threads, inherit this thread's
    // nice value. Without root or CAP_SYS_NICE they keep the caller's.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), options_.session.nice);
    // Before the session threads exist (they read fetchers_ without a lock).
    if (options_.fetch_threads > 0) {
      fetchers_ =
          std::make_unique<WorkerGroup>("dsfs-img-fetch", options_.fetch_threads,
                                        WorkerGroup::kKeepNice, WorkerGroup::OnStop::kAbandon);
    }
    if (int rc = ServeFuseSession(se_, transport_.get(), options_.session.threads, "image ");
        rc != 0) {
      Log()->debug("image FUSE session loop returned {}", rc);
    }
    ended_.store(true);
    if (on_ended_) on_ended_();
  });
  return Status::OK();
}

void ErofsServer::Stop() {
  if (!se_ || stopped_) return;
  stopped_ = true;
  if (!ended_.load()) {
    // The loop threads wait in read(/dev/fuse): unmounting ends them (ENODEV).
    if (::umount2(dir_.c_str(), 0) != 0 && errno == EBUSY) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  if (loop_.joinable()) loop_.join();
  // No session thread submits now: a read still queued is answered EIO, one under way ends
  // within the backend's deadline; both reply through the session, which is still there.
  fetchers_.reset();
}

std::string ErofsServer::transport() const {
  return transport_ ? transport_->info().Describe() : no_transport_;
}

}  // namespace dsfs
