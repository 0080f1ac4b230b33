#include "kernel/kernel_mount.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/memory_limit.h"
#include "common/mount_table.h"
#include "common/system.h"
#include "erofs/store_tree.h"
#include "fs/stats.h"
#include "kernel/loop_device.h"
#include "kernel/view_tree.h"

namespace dsfs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Regular files up to this size are fragments of a compressed image's packed inode; larger ones
// keep data blocks of their own (not cached twice, in the packed inode's pages too).
constexpr uint64_t kFragmentMaxBytes = 64 << 10;

// ---------------------------------------------------------------------------------------------
// Paths and the mount table

struct MountEntry {
  std::string mountpoint, fstype, source;
};

std::vector<MountEntry> Mounts() {
  std::vector<MountEntry> out;
  ForEachMount([&](const std::string& mp, const MountInfo& m) {
    out.push_back({mp, m.fstype, m.source});
  });
  return out;
}

// The top mount at `path` (the last listed), if any.
std::optional<MountEntry> TopMountAt(const std::string& path) {
  std::optional<MountEntry> top;
  for (auto& e : Mounts()) {
    if (e.mountpoint == path) top = e;
  }
  return top;
}

bool IsMountedAt(const std::string& path) { return TopMountAt(path).has_value(); }

// The private mountpoint's name for mountpoint directory `st` and daemon `pid`.
std::string PrivatePrefix(const struct stat& st) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llx-%llu-", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  return std::string(kKernelRunDir) + "/" + buf;
}

pid_t PidOfPrivateDir(const std::string& dir) {
  size_t dash = dir.rfind('-');
  if (dash == std::string::npos) return -1;
  return static_cast<pid_t>(std::atol(dir.c_str() + dash + 1));
}

bool WaitFor(const std::function<bool()>& done, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

// If `backing` is the image of a dsfs image mount, its directory.
std::optional<std::string> PrivateDirOfImage(const std::string& backing) {
  const std::string prefix = std::string(kKernelRunDir) + "/";
  const std::string suffix = std::string("/") + ErofsServer::kImageName;
  if (backing.rfind(prefix, 0) != 0) return std::nullopt;
  if (backing.size() <= prefix.size() + suffix.size() ||
      backing.compare(backing.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  std::string dir = backing.substr(0, backing.size() - suffix.size());
  if (dir.find('/', prefix.size()) != std::string::npos) return std::nullopt;
  return dir;
}

// The private directory of the -o kernel mount at `abs`, if that is what is mounted there.
// *erofs is set for any EROFS mount at `abs`; *loop to its loop device name when EROFS reads
// a loop device ("" when it reads the image file itself).
std::optional<std::string> KernelLayers(const std::string& abs, bool* erofs, std::string* loop) {
  *erofs = false;
  loop->clear();
  std::optional<MountEntry> top = TopMountAt(abs);
  if (!top || top->fstype != "erofs") return std::nullopt;
  *erofs = true;
  *loop = LoopDeviceName(top->source);
  return PrivateDirOfImage(loop->empty() ? top->source : LoopBackingFile(*loop));
}

// ---------------------------------------------------------------------------------------------
// The image's tree

// Without allow_other a classic mount lets only the mounting user in; in EROFS the kernel
// applies the modes, so the root directory is the mounting user's, with its group and other
// bits cleared (with uid= another user, that user would otherwise be let in).
class PrivateRootTree : public erofs::ImageTree {
 public:
  explicit PrivateRootTree(std::unique_ptr<erofs::ImageTree> base) : base_(std::move(base)) {}
  uint32_t inode_count() const override { return base_->inode_count(); }
  Status GetInode(uint32_t ino, erofs::ImageInode* inode) const override {
    DSFS_RETURN_IF_ERROR(base_->GetInode(ino, inode));
    if (ino == 0) {
      inode->mode &= ~uint32_t{077};
      inode->uid = ::geteuid();
      inode->gid = ::getegid();
    }
    return Status::OK();
  }
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override {
    return base_->GetName(ino, scratch, name);
  }
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override {
    return base_->ReadData(ino, offset, len, dst);
  }

 private:
  std::unique_ptr<erofs::ImageTree> base_;
};

// Removes what dead -o kernel mounts of the directory `st` left in /run/dsfs.
void ClearStalePrivateDirs(const struct stat& st, bool* found) {
  const std::string prefix = PrivatePrefix(st);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kKernelRunDir, ec)) {
    const std::string dir = entry.path().string();
    if (dir.rfind(prefix, 0) != 0 || ProcessAlive(PidOfPrivateDir(dir))) continue;
    if (found) *found = true;
    if (IsMountedAt(dir)) ::umount2(dir.c_str(), MNT_DETACH);
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      Log()->warn("cannot remove {}: {}", dir, std::strerror(errno));
    }
  }
}

// The image options of `fs`'s tree: compressed where the store and the kernel allow (*packed
// set; its reason logged once otherwise).
void ImageOptionsFor(Filesystem* fs, erofs::ImageOptions* io,
                     std::unique_ptr<erofs::StorePacked>* packed) {
  // Tiny files inline, after their inodes (EROFS FLAT_INLINE): about four 1 KB files share a
  // 4 KiB page of the image's cache instead of taking one each (beside their own pages in
  // EROFS's cache), and the readahead stores them with the inodes. The cost: a stat of one
  // reads (and the daemon decompresses) the tiny files whose inodes share its metadata block,
  // and a damaged tiny file fails those inodes too (EIO). Larger files keep all their bytes in
  // data blocks, tails included: their metadata stays readable whatever their records hold.
  io->inline_data = true;
  io->inline_file_tails = false;
  io->volume_name = "dsfs";
  if (fs->options().view != View::kOriginal) return;  // views: pixels made by dsfs
  std::string why;
  if (!KernelImageCompressed(fs->store(), &why)) {
    Log()->info("-o kernel: an uncompressed image: {}", why);
    return;
  }
  Status s = erofs::StorePacked::Open(&fs->store(), packed);
  if (!s.ok()) {
    Log()->warn("-o kernel: an uncompressed image: {}", s.ToString());
    return;
  }
  io->packed = packed->get();
  io->fragment_max_bytes = std::min<uint64_t>(kFragmentMaxBytes, fs->store().header().chunk_bytes);
}

// Kernel memory per inode read through EROFS (its inode, dentry and what else the cgroup's
// kmem counts): 150,000 photo crops read in a cgroup charged 24-131 MB of it.
constexpr uint64_t kKernelBytesPerInode = 1024;

// Whether a compressed image works inside `limit`: the kernel decodes a whole group into the
// packed inode's pages for any one of its files, so unless all of them (the small files' bytes)
// stay cached beside the image (its frames, in the RAM cache), and the kernel's inodes, each
// read of a file decodes its group again and drops other groups' pages. 150,000 photo crops
// (141 MB decoded, a 73 MB image; 368 MB by this sum) read at 8-31k files/s in 307 MB (the
// uncompressed image: 20-24k), 5-6k in 241 MB and 0.7-1.2k in 121 MB (7k); 77-223k in 614 MB
// (38-77k) (docs/kernel.md).
bool CompressedImageFits(const erofs::Image& image, const MemoryLimit& limit) {
  // $DSFS_KERNEL_FIT=always|never replaces the rule, for benchmarks that look for the bound.
  if (const char* fit = std::getenv("DSFS_KERNEL_FIT")) {
    if (std::strcmp(fit, "always") == 0) return true;
    if (std::strcmp(fit, "never") == 0) return false;
  }
  return image.packed_bytes() + image.size_bytes() + kKernelBytesPerInode * image.inode_count() <=
         limit.bytes;
}

}  // namespace

std::string KernelCompressedImageMissing() {
  std::vector<std::string> missing;
  if (const char* fake = std::getenv("DSFS_EROFS_FEATURES")) {
    const std::string list = std::string(",") + fake + ",";
    for (const char* f : {"fragments", "zstd"}) {
      if (list.find(std::string(",") + f + ",") == std::string::npos) missing.push_back(f);
    }
  } else {
    struct stat st;
    if (::stat("/sys/fs/erofs/features/fragments", &st) != 0) missing.push_back("fragments");
    struct utsname u;
    int major = 0, minor = 0;
    if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2 ||
        major * 1000 + minor < 6010) {
      missing.push_back("zstd (Linux 6.10)");
    }
  }
  std::string out;
  for (const std::string& m : missing) out += (out.empty() ? "" : ", ") + m;
  return out;
}

bool KernelImageCompressed(const Store& store, std::string* why) {
  const uint32_t version = store.header().version;
  if (version < kKernelFormatVersion) {
    *why = "store format " + std::to_string(version) +
           " (its groups need its dictionary; dsfs pack --dict-size 0 writes format " +
           std::to_string(kKernelFormatVersion) + ")";
    return false;
  }
  if (store.remote()) {
    *why = "a store in object storage";
    return false;
  }
  const std::string missing = KernelCompressedImageMissing();
  if (!missing.empty()) {
    *why = "this kernel's EROFS has no " + missing;
    return false;
  }
  *why = "the store's zstd groups, decoded by the kernel";
  return true;
}

Status CheckKernelMountAllowed() {
  if (::geteuid() == 0) return Status::OK();
  return Status::FromErrno(EPERM,
                           "mount option kernel needs root (it attaches a loop device and mounts "
                           "EROFS); mount without -o kernel, or as root");
}

Status KernelMount::Mount(Filesystem* fs, ByteCache* cache, const std::string& mnt,
                          const std::string& target, const KernelOptions& options,
                          std::unique_ptr<KernelMount>* out) {
  DSFS_RETURN_IF_ERROR(CheckKernelMountAllowed());
  const View view = fs->options().view;
  if (view.kind == View::kJpeg) {
    // An image lays out every file's size at mount, and a jpeg-N file's is known only once
    // it is encoded: the whole tree would be encoded before the mount answers.
    return Status::NotSupported("a " + ViewName(view) +
                                " file's size is known only once it is encoded");
  }
  struct stat mnt_st;
  if (::stat(mnt.c_str(), &mnt_st) != 0) return Status::FromErrno(errno, mnt);
  std::unique_ptr<KernelMount> km(new KernelMount);
  km->fs_ = fs;
  km->mountpoint_ = mnt;

  // The tree and its image layout.
  auto t0 = Clock::now();
  // The layout reads every inode record: have the store's tables read from disk in large
  // requests first (as a classic mount warms them in the background), not a fault at a time.
  fs->store().WillNeedMetadata(options.metadata_readahead_bytes);
  if (view == View::kOriginal) {
    erofs::StoreTreeOptions so;
    so.uid = fs->options().uid;
    so.gid = fs->options().gid;
    so.umask = fs->options().umask;
    km->tree_ = std::make_unique<erofs::StoreTree>(&fs->store(), so);
  } else {
    std::unique_ptr<ViewTree> vt;
    DSFS_RETURN_IF_ERROR(ViewTree::Build(fs, view, &vt));
    km->tree_ = std::move(vt);
  }
  if (!options.allow_other) km->tree_ = std::make_unique<PrivateRootTree>(std::move(km->tree_));
  erofs::ImageOptions io;
  ImageOptionsFor(fs, &io, &km->packed_);
  const MemoryLimit& limit = ProcessMemoryLimit();
  const uint64_t cache_bytes = cache ? cache->capacity_bytes() : 0;
  // directio where the image does not fit twice beside the RAM cache in the memory limit.
  auto fits_twice = [&](const erofs::Image& im) {
    return 2 * im.size_bytes() + cache_bytes <= limit.bytes;
  };
  Status built = erofs::Image::Build(km->tree_.get(), io, &km->image_);
  if (built.code() == Status::Code::kNotSupported && io.packed) {
    Log()->info("-o kernel: an uncompressed image: {}", built.message());
    io.packed = nullptr;
    km->packed_.reset();
    built = erofs::Image::Build(km->tree_.get(), io, &km->image_);
  }
  DSFS_RETURN_IF_ERROR(built);
  if (km->image_->compressed() && !CompressedImageFits(*km->image_, limit)) {
    Log()->info(
        "-o kernel: an uncompressed image: the compressed one's small files ({} bytes decoded) "
        "and image ({} bytes) do not fit in the memory limit of {}",
        km->image_->packed_bytes(), km->image_->size_bytes(), limit.ToString());
    io.packed = nullptr;
    km->packed_.reset();
    DSFS_RETURN_IF_ERROR(erofs::Image::Build(km->tree_.get(), io, &km->image_));
  }
  // Inline data only where EROFS reads the image through its page cache: with directio (or a
  // loop device) the metadata still comes through a page cache, a page per request and no
  // readahead, beside the files' own pages: 20,000 photo crops at half their footprint read
  // at 0.6x the speed of the plain image (docs/kernel.md).
  if (!io.packed && (options.loop || !fits_twice(*km->image_))) {
    io.inline_data = false;
    DSFS_RETURN_IF_ERROR(erofs::Image::Build(km->tree_.get(), io, &km->image_));
  }
  const erofs::Image& image = *km->image_;
  km->layout_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  Log()->info("EROFS image of {} inodes, {} bytes{}, laid out in {:.3f} s ({} bytes of layout)",
              image.inode_count(), image.size_bytes(),
              image.compressed() ? " (compressed: " + std::to_string(image.packed_bytes()) +
                                       " bytes of small files as fragments)"
                                 : std::string(),
              km->layout_s_, image.memory_bytes());

  // Layer 1: the private FUSE mount.
  if (::mkdir(kKernelRunDir, 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, std::string("mkdir ") + kKernelRunDir);
  }
  ::chmod(kKernelRunDir, 0700);
  ClearStalePrivateDirs(mnt_st, nullptr);
  const std::string dir = PrivatePrefix(mnt_st) + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + dir);
  if (::pipe2(km->events_, O_CLOEXEC | O_NONBLOCK) != 0) {
    int err = errno;
    ::rmdir(dir.c_str());
    return Status::FromErrno(err, "pipe");
  }
  KernelMount* self = km.get();
  ErofsServerOptions so = options.server;
  so.on_read = [self](uint64_t offset) {
    if (self->readahead_on_.load(std::memory_order_acquire)) self->readahead_->Touched(offset);
  };
  km->server_ = std::make_unique<ErofsServer>(
      km->image_.get(), std::move(so),
      options.stats_json ? options.stats_json : [self] {
        nlohmann::ordered_json j = {{"kernel", self->StatsObject()}};
        return OneLineJson(j);
      },
      [self] {
        // The loop device let go of the image: EROFS is gone.
        if (self->serving_.load()) (void)!::write(self->events_[1], "c", 1);
      });
  ErofsServer& server = *km->server_;
  server.OnEnded([self] { (void)!::write(self->events_[1], "e", 1); });
  Status s = server.Start(dir);
  if (!s.ok()) {
    ::rmdir(dir.c_str());
    km->finished_ = true;
    return s;
  }
  km->dir_ = dir;

  // Layer 2: EROFS at MNT, reading the image file itself (a file-backed mount, Linux 6.12+):
  // its reads go through the image's page cache, so the kernel reads ahead in the image and a
  // first touch of a directory brings its neighbours in large requests. Kernels without
  // file-backed mounts (ENOTBLK), and -o kernel=loop, put a loop device between the two.
  const std::string image_path = dir + "/" + ErofsServer::kImageName;
  const unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV;
  int err = 0;
  // directio (Linux 6.13+): EROFS reads the image file with direct I/O, so each block is cached
  // once, in EROFS's own page cache, not also in the image's, both charged to the reader's
  // memory limit (issue 29). It costs the first touch: every block EROFS misses is then one
  // request (2.4x slower over a tree of 8 KB files, bench/kernel_cache_bench.sh), where through
  // the image's page cache the readahead has stored whole directories. So directio only where
  // the image does not fit twice beside the RAM cache in the memory limit; older kernels refuse
  // the option (EINVAL): mounted without it.
  // A compressed image always: the daemon's RAM cache holds the groups' frames it serves
  // (Store::ReadKernelFrame), so a copy in the image's page cache would only take room from the
  // packed inode's decoded pages; measured on 150,000 photo crops at half their footprint,
  // 26-31k files/s with directio against 11k without (docs/kernel.md).
  const bool want_directio = image.compressed() || !fits_twice(image);
  std::string& loop = km->loop_;
  if (!options.loop) {
    server.SetPageCacheReader(true);  // EROFS reads the superblock already during mount(2)
    err = -1;
    if (want_directio) {
      err =
          ::mount(image_path.c_str(), target.c_str(), "erofs", flags, "directio") == 0 ? 0 : errno;
      km->directio_.store(err == 0);
      if (err == 0) {
        Log()->info(
            "-o kernel: the image ({} bytes) does not fit twice in the memory limit of "
            "{}: EROFS reads it with direct I/O",
            image.size_bytes(), limit.ToString());
      }
    }
    if (err == EINVAL) {
      Log()->info("-o kernel: EROFS here has no directio option: the image is cached twice");
    }
    if (err != 0 && err != ENOTBLK) {
      err = ::mount(image_path.c_str(), target.c_str(), "erofs", flags, nullptr) == 0 ? 0 : errno;
    }
    if (err == ENOTBLK)
      Log()->info("-o kernel: EROFS here reads block devices only: a loop device");
  }
  if (options.loop || err == ENOTBLK) {
    server.SetPageCacheReader(false);
    int loop_fd = -1;
    s = AttachLoopDevice(image_path, &loop, &loop_fd);
    if (!s.ok()) {
      km->Finish();
      return s;  // NotSupported where this machine has no loop devices: the caller falls back
    }
    if (!LoopDirectIo(loop)) {
      Log()->warn("/dev/{}: direct I/O refused, the image is cached twice", loop);
    }
    const std::string dev = "/dev/" + loop;
    err = ::mount(dev.c_str(), target.c_str(), "erofs", flags, nullptr) == 0 ? 0 : errno;
    ::close(loop_fd);  // AUTOCLEAR: EROFS holds the device now, or it detaches
  }
  if (err != 0) {
    const std::string what = loop.empty() ? image_path : "/dev/" + loop;
    loop.clear();  // it cleared itself: nothing of it is ours any more
    km->Finish();
    if (err == ENODEV) {
      return Status::NotSupported(std::string("this kernel has no EROFS (mount: ") +
                                  std::strerror(err) + ")");
    }
    return Status::FromErrno(err, "mount erofs " + what + " at " + mnt);
  }
  km->serving_.store(true);
  // Into the image's page cache, which neither EROFS with directio nor a loop device with
  // direct I/O ever reads: there the pushed pages would only be charged to the limit.
  if (loop.empty() && !km->directio_.load() && options.readahead_bytes > 0) {
    km->readahead_ =
        std::make_unique<ErofsReadahead>(km->image_.get(), options.readahead_bytes,
                                         [&server](uint64_t offset, std::string_view data) {
                                           return server.StoreImage(offset, data);
                                         });
    km->readahead_on_.store(true, std::memory_order_release);
    // EROFS read the superblock's block during mount(2), before the readahead was on: with
    // the root's inode and, inline, its entries, which no request will ask for again.
    km->readahead_->Touched(0);
  }
  Log()->info("{}: EROFS on {}", mnt,
              loop.empty() ? image_path : "/dev/" + loop + " over " + image_path);
  *out = std::move(km);
  return Status::OK();
}

KernelMount::~KernelMount() {
  Finish();
  for (int fd : events_) {
    if (fd >= 0) ::close(fd);
  }
}

bool KernelMount::ServeUntil(int stop_fd) {
  ErofsServer& server = *server_;
  while (!server.ended()) {
    if (serving_.load() && server.open_images() == 0) return false;
    struct pollfd pfd[2] = {{events_[0], POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(pfd, 2, 1000);
    if (n < 0 && errno != EINTR) return false;
    char c[16];
    if (pfd[0].revents & POLLIN) (void)!::read(events_[0], c, sizeof(c));
    if (pfd[1].revents & POLLIN) {
      (void)!::read(stop_fd, c, sizeof(c));
      return true;
    }
  }
  return false;
}

void KernelMount::Finish() {
  if (finished_ || !server_) return;
  finished_ = true;
  ErofsServer& server = *server_;
  if (!serving_.load()) {
    // EROFS never mounted (or refused): it may still hold the image a moment.
    WaitFor([&] { return server.open_images() == 0; }, milliseconds(2000));
  } else if (server.ended() && server.open_images() > 0) {
    // The private mount went away under the loop device (not by us): EROFS reads fail from
    // here on, and `dsfs umount` clears the rest.
    Log()->warn("{}: the image mount {} is gone; clear the mount with: dsfs umount {}", mountpoint_,
                dir_, mountpoint_);
  } else if (!server.ended()) {
    // After a signal: the loop device clears once EROFS lets go (at once unless busy).
    if (!WaitFor([&] { return server.open_images() == 0 || server.ended(); }, milliseconds(2000)) &&
        !loop_.empty()) {
      ClearLoopDevice(loop_);
    }
  }
  server.Stop();  // no request is served from here on: none tells the readahead of a read
  readahead_on_.store(false);
  readahead_.reset();  // its worker stores through the server's session until here
  if (!dir_.empty() && ::rmdir(dir_.c_str()) != 0 && errno != ENOENT) {
    Log()->warn("cannot remove {}: {}", dir_, std::strerror(errno));
  }
  if (serving_.load()) {
    Log()->info("{}: unmounted ({} image reads, {} errors)", mountpoint_,
                server.counters().reads.load(), server.counters().errors.load());
  }
}

std::string KernelMount::StatusLine() const {
  const ErofsServer::Counters& c = server_->counters();
  return "serving EROFS: " + std::to_string(c.reads.load()) + " image reads, " +
         std::to_string(c.bytes_read.load() >> 20) + " MiB read, " +
         std::to_string(c.errors.load()) + " errors";
}

nlohmann::ordered_json KernelMount::StatsObject() const {
  const erofs::Image& image = *image_;
  const ErofsServer* server = server_.get();
  nlohmann::ordered_json kernel = {{"image_bytes", image.size_bytes()},
                                   // 1: small files are fragments of the store's own groups
                                   {"compressed", image.compressed() ? 1 : 0},
                                   {"inodes", image.inode_count()},
                                   {"layout_bytes", image.memory_bytes()},
                                   {"layout_ms", static_cast<uint64_t>(layout_s_ * 1000)},
                                   // "file": EROFS reads the image file itself; or "loopN"
                                   {"backing", loop_.empty() ? std::string("file") : loop_},
                                   // 1: EROFS reads the image file with direct I/O (no copy
                                   // of it in the image's page cache)
                                   {"directio", directio_.load() ? 1 : 0}};
  if (server) {
    const ErofsServer::Counters& c = server->counters();
    kernel["transport"] = server->transport();
    kernel["image_reads"] = c.reads.load(std::memory_order_relaxed);
    kernel["image_bytes_read"] = c.bytes_read.load(std::memory_order_relaxed);
    kernel["image_read_errors"] = c.errors.load(std::memory_order_relaxed);
    kernel["image_read_latency"] = HistogramJson(c.read_latency);
    if (const ErofsReadahead* ra =
            readahead_on_.load(std::memory_order_acquire) ? readahead_.get() : nullptr) {
      const ErofsReadahead::Stats st = ra->stats();
      kernel["readahead"] = {{"dirs", st.dirs},
                             {"bytes", st.bytes},
                             {"failures", st.failures},
                             {"skipped_files", st.skipped_files},
                             {"budget_bytes", st.budget_bytes}};
    }
  }
  return kernel;
}

Status UnmountKernel(const std::string& mountpoint, bool lazy, bool* handled) {
  *handled = false;
  const std::string abs = AbsolutePath(mountpoint);
  bool erofs = false;
  std::string loop;
  std::optional<std::string> dir = KernelLayers(abs, &erofs, &loop);
  if (!erofs) {
    // EROFS already gone (umount(8), or a crash in between): what is left in /run/dsfs.
    if (IsMountedAt(abs)) return Status::OK();
    struct stat st;
    if (::stat(abs.c_str(), &st) != 0) return Status::OK();
    ClearStalePrivateDirs(st, handled);
    return Status::OK();
  }
  *handled = true;
  if (!dir) {
    return Status::InvalidArgument(mountpoint +
                                   " is an EROFS mount that dsfs did not make; use umount(8)");
  }
  const pid_t pid = PidOfPrivateDir(*dir);
  const std::string image = *dir + "/" + ErofsServer::kImageName;
  // 1. EROFS.
  if (::umount2(abs.c_str(), lazy ? MNT_DETACH : 0) != 0) {
    int err = errno;
    if (err == EBUSY) {
      return Status::Busy(mountpoint + " is busy (files open on it); use dsfs umount --lazy");
    }
    return Status::FromErrno(err, "cannot unmount " + mountpoint);
  }
  // A bind mount of the same EROFS (or the mount this one was bound from) still holds it:
  // nothing below is this mountpoint's to take down.
  for (const MountEntry& e : Mounts()) {
    if (e.fstype == "erofs" &&
        (e.source == image || (!loop.empty() && LoopDeviceName(e.source) == loop))) {
      Log()->warn(
          "{}: unmounted, but its daemon still runs: the same EROFS is still mounted "
          "at {}",
          mountpoint, e.mountpoint);
      return Status::OK();
    }
  }
  const bool alive = ProcessAlive(pid);
  // 2. EROFS lets go of the image (a loop device clears itself then: AUTOCLEAR). After a lazy
  // unmount with files open, a live daemon keeps serving them and cleans up after the last.
  if (loop.empty()) {
    if (lazy && alive) return Status::OK();
  } else {
    if (lazy && alive && LoopBackingFile(loop) == image) return Status::OK();
    if (!WaitFor([&] { return LoopBackingFile(loop) != image; },
                 milliseconds(alive ? 5000 : 500))) {
      ClearLoopDevice(loop);
    }
  }
  // 3. The private mount: its daemon unmounts it and exits; a dead one's is cleared here.
  if (alive) WaitFor([&] { return !ProcessAlive(pid); }, milliseconds(5000));
  if (IsMountedAt(*dir)) ::umount2(dir->c_str(), MNT_DETACH);
  if (::rmdir(dir->c_str()) != 0 && errno != ENOENT) {
    Log()->warn("cannot remove {}: {}", *dir, std::strerror(errno));
  }
  if (ProcessAlive(pid)) {
    Log()->warn("the daemon {} of {} has not exited yet", pid, mountpoint);
  }
  return Status::OK();
}

bool KernelStatsPath(const std::string& mountpoint, std::string* stats_path) {
  bool erofs = false;
  std::string loop;
  std::optional<std::string> dir = KernelLayers(AbsolutePath(mountpoint), &erofs, &loop);
  if (!dir) return false;
  *stats_path = *dir + "/" + ErofsServer::kStatsName;
  return true;
}

}  // namespace dsfs
