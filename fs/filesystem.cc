#include "fs/filesystem.h"

#include <fcntl.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/units.h"

namespace dsfs {

Filesystem::Filesystem(std::unique_ptr<Store> store, const FsOptions& options)
    : store_(std::move(store)), options_(options) {}

void Filesystem::FillStat(uint64_t ino, const InodeRecord& rec, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_mode = rec.mode;
  // Directories report one link, as btrfs does: tools then make no assumption from it.
  st->st_nlink = 1;
  st->st_uid = options_.uid;
  st->st_gid = options_.gid;
  st->st_size = static_cast<off_t>(IsDir(rec) ? 0 : rec.size);
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>((rec.size + 511) / 512);
  if (IsDir(rec)) st->st_blocks = 0;
  st->st_mtim.tv_sec = rec.mtime_s;
  st->st_mtim.tv_nsec = rec.mtime_ns;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

namespace {
constexpr std::string_view kDotDsfs = ".dsfs";
constexpr std::string_view kStatsName = "stats";
}  // namespace

Status Filesystem::VirtualAttr(uint64_t ino, struct stat* st) const {
  InodeRecord root;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Store::kRootIno, &root));
  if (ino == DotDsfsIno()) {
    root.mode = S_IFDIR | 0555;
    FillStat(ino, root, st);
    return Status::OK();
  }
  if (ino == StatsIno()) {
    root.mode = S_IFREG | 0444;
    root.size = kStatsBytes;
    FillStat(ino, root, st);
    // A new mtime on every getattr: with attributes never cached, the kernel drops its cached
    // pages of the file before each read (FUSE auto_inval_data) and so reads fresh counters.
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    st->st_mtim = now;
    return Status::OK();
  }
  return Status::NotFound("no such inode");
}

Status Filesystem::Lookup(uint64_t parent, std::string_view name, struct stat* st) const {
  counters_.lookup.fetch_add(1, std::memory_order_relaxed);
  if (parent == Store::kRootIno && name == kDotDsfs) return VirtualAttr(DotDsfsIno(), st);
  if (parent == DotDsfsIno()) {
    if (name == kStatsName) return VirtualAttr(StatsIno(), st);
    if (name == "..") return GetAttr(Store::kRootIno, st);
    if (name == ".") return VirtualAttr(DotDsfsIno(), st);
    return Status::NotFound("no such file or directory");
  }
  if (IsVirtual(parent)) return Status::InvalidArgument("not a directory");
  if (parent > UINT32_MAX) return Status::NotFound("no such inode");
  uint32_t ino;
  InodeRecord rec;
  if (name == "." || name == "..") {
    DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(parent), &rec));
    ino = name == "." ? static_cast<uint32_t>(parent) : rec.parent;
    DSFS_RETURN_IF_ERROR(store_->GetInode(ino, &rec));
  } else {
    DSFS_RETURN_IF_ERROR(store_->Lookup(static_cast<uint32_t>(parent), name, &ino, &rec));
  }
  FillStat(ino, rec, st);
  return Status::OK();
}

Status Filesystem::GetAttr(uint64_t ino, struct stat* st) const {
  counters_.getattr.fetch_add(1, std::memory_order_relaxed);
  if (IsVirtual(ino)) return VirtualAttr(ino, st);
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  FillStat(ino, rec, st);
  return Status::OK();
}

Status Filesystem::ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fill) const {
  counters_.readdir.fetch_add(1, std::memory_order_relaxed);
  if (ino == DotDsfsIno()) {
    struct stat st;
    const std::pair<std::string_view, uint64_t> entries[] = {
        {".", DotDsfsIno()}, {"..", Store::kRootIno}, {kStatsName, StatsIno()}};
    for (uint64_t i = offset; i < 3; ++i) {
      DSFS_RETURN_IF_ERROR(GetAttr(entries[i].second, &st));
      if (!fill(entries[i].first, st, i + 1)) break;
    }
    return Status::OK();
  }
  if (IsVirtual(ino)) return Status::InvalidArgument("not a directory");
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord dir;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &dir));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(store_->DirEntries(static_cast<uint32_t>(ino), dir, &first, &count));
  struct stat st;
  if (offset == 0) {
    FillStat(ino, dir, &st);
    if (!fill(".", st, 1)) return Status::OK();
    offset = 1;
  }
  if (offset == 1) {
    InodeRecord parent;
    DSFS_RETURN_IF_ERROR(store_->GetInode(dir.parent, &parent));
    FillStat(dir.parent, parent, &st);
    if (!fill("..", st, 2)) return Status::OK();
    offset = 2;
  }
  for (uint64_t i = offset - 2; i < count; ++i) {
    InodeRecord rec;
    std::string_view name;
    DSFS_RETURN_IF_ERROR(store_->GetInode(first + static_cast<uint32_t>(i), &rec));
    DSFS_RETURN_IF_ERROR(store_->GetName(rec, &name));
    FillStat(first + i, rec, &st);
    if (!fill(name, st, i + 3)) break;
  }
  return Status::OK();
}

Status Filesystem::Open(uint64_t ino, int flags) const {
  counters_.open.fetch_add(1, std::memory_order_relaxed);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT | O_APPEND))) {
    return Status::ReadOnly("read-only file system");
  }
  struct stat st;
  DSFS_RETURN_IF_ERROR(GetAttr(ino, &st));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument("is a directory");
  return Status::OK();
}

Status Filesystem::Read(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                        std::string_view* out) const {
  counters_.read.fetch_add(1, std::memory_order_relaxed);
  if (ino == StatsIno()) {
    buf->pin.reset();
    buf->bytes = StatsJson();
    buf->bytes.resize(kStatsBytes - 1, ' ');
    buf->bytes += '\n';
    *out = std::string_view(buf->bytes).substr(std::min<uint64_t>(offset, kStatsBytes));
    *out = out->substr(0, size);
    return Status::OK();
  }
  if (IsVirtual(ino)) return Status::InvalidArgument("is a directory");
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  Status s = store_->Read(rec, offset, size, buf, out);
  if (!s.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  counters_.bytes_read.fetch_add(out->size(), std::memory_order_relaxed);
  if (prefetcher_) prefetcher_->ReadServed(static_cast<uint32_t>(ino), rec, offset, out->size());
  return Status::OK();
}

Status Filesystem::ReadLink(uint64_t ino, std::string_view* target) const {
  counters_.readlink.fetch_add(1, std::memory_order_relaxed);
  if (IsVirtual(ino)) return Status::InvalidArgument("not a symbolic link");
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  return store_->ReadLink(rec, target);
}

Status Filesystem::StatFs(struct statvfs* st) const {
  counters_.statfs.fetch_add(1, std::memory_order_relaxed);
  std::memset(st, 0, sizeof(*st));
  const StoreHeader& h = store_->header();
  st->f_bsize = 4096;
  st->f_frsize = 4096;
  st->f_blocks = (h.file_bytes + 4095) / 4096;
  st->f_files = h.inode_count;
  st->f_namemax = 255;
  st->f_flag = ST_RDONLY;
  return Status::OK();
}

}  // namespace dsfs

namespace dsfs {

std::string Filesystem::StatsJson() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  std::string j = "{";
  // Starts member `key`: the caller appends its value.
  auto key = [&](std::string_view k) {
    if (j.back() != '{') j += ", ";
    j += "\"";
    j += k;
    j += "\": ";
  };
  auto field = [&](std::string_view k, uint64_t v) {
    key(k);
    j += std::to_string(v);
  };
  auto seconds = [&](std::string_view k, double s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f", s);
    key(k);
    j += buf;
  };
  auto open_obj = [&](std::string_view k) {
    key(k);
    j += "{";
  };
  seconds("uptime_s",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  open_obj("requests");
  field("lookup", n(c.lookup));
  field("getattr", n(c.getattr));
  field("readdir", n(c.readdir));
  field("open", n(c.open));
  field("read", n(c.read));
  field("readlink", n(c.readlink));
  field("statfs", n(c.statfs));
  j += "}";
  field("bytes_served", n(c.bytes_read));
  field("read_errors", n(c.errors));
  open_obj("cache");
  if (ByteCache* cache = store_->cache()) {
    ByteCache::Stats cs = cache->stats();
    field("hits", cs.hits);
    field("misses", cs.misses);
    field("bytes", cs.bytes);
    field("capacity_bytes", cs.capacity_bytes);
    field("entries", cs.entries);
    field("evictions", cs.evictions);
  }
  j += "}";
  open_obj("decompress");
  field("chunks", store_->decoded_chunks());
  seconds("seconds", static_cast<double>(store_->decode_ns()) / 1e9);
  j += "}";
  if (prefetcher_) {
    Prefetcher::Stats ps = prefetcher_->stats();
    open_obj("push");
    field("files", ps.pushed_files);
    field("bytes", ps.pushed_bytes);
    field("budget_bytes", ps.push_budget_bytes);
    field("retries", ps.push_retries);
    field("failures", ps.push_failures);
    j += "}";
    open_obj("readahead");
    field("files", ps.readahead_files);
    field("chunks", ps.readahead_chunks);
    j += "}";
    open_obj("preload");
    field("files", ps.preload_files);
    field("bytes", ps.preload_bytes);
    field("total_files", ps.preload_total_files);
    field("done", ps.preload_done ? 1 : 0);
    j += "}";
    field("queued_jobs", ps.queued_jobs);
  }
  const StoreHeader& h = store_->header();
  open_obj("store");
  field("files", h.file_count);
  field("directories", h.dir_count);
  field("file_bytes", h.file_bytes);
  j += "}}";
  return j;
}

std::string Filesystem::StatusLine() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  uint64_t requests = n(c.lookup) + n(c.getattr) + n(c.readdir) + n(c.open) + n(c.read) +
                      n(c.readlink) + n(c.statfs);
  std::string line = "serving: " + std::to_string(requests) + " requests, " +
                     FormatBytes(n(c.bytes_read)) + " read, " + std::to_string(n(c.errors)) +
                     " errors; ";
  if (ByteCache* cache = store_->cache()) {
    ByteCache::Stats cs = cache->stats();
    uint64_t lookups = cs.hits + cs.misses;
    line += "cache " + FormatBytes(cs.bytes) + " of " + FormatBytes(cs.capacity_bytes) + ", " +
            std::to_string(lookups == 0 ? 0 : cs.hits * 100 / lookups) + "% hits";
  } else {
    line += "no cache";
  }
  return line;
}

}  // namespace dsfs
