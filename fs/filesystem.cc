#include "fs/filesystem.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "fs/control_dir.h"

namespace dsfs {

Filesystem::Filesystem(std::unique_ptr<Store> store, const FsOptions& options,
                       std::shared_ptr<ByteCache> cache)
    : store_(std::move(store)), options_(options), space_(options.view), cache_(std::move(cache)) {
  if (cache_) {
    pixels_id_ = cache_->NewId();
    bmp_id_ = cache_->NewId();
    files_txt_id_ = cache_->NewId();
  }
}

void Filesystem::FillStat(uint64_t ino, const InodeRecord& rec, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = Out(ino);
  st->st_mode = rec.mode & ~(options_.umask & 07777);
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

Status Filesystem::FillViewStat(View v, uint32_t ino, const InodeRecord& rec, struct stat* st,
                                bool encode) const {
  FillStat(InodeSpace::Make(v, ino), rec, st);
  if (IsReg(rec) && v != View::kOriginal) {
    uint64_t size;
    if (ViewEncodes(v, rec, options_.max_render_bytes)) {
      if (!encode) {
        st->st_nlink = 0;  // kAttrsUnknown
        return Status::OK();
      }
      ByteCache::Value file;
      DSFS_RETURN_IF_ERROR(ResizedFile(v, ino, rec, &file));
      size = file->size();
    } else {
      size = ViewFileBytes(v, rec, options_.max_render_bytes);
    }
    st->st_size = static_cast<off_t>(size);
    st->st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  }
  return Status::OK();
}

Status Filesystem::ForEachFile(uint64_t fuse_dir,
                               const std::function<bool(uint64_t ino, uint64_t size)>& file) const {
  const uint64_t dir = In(fuse_dir);
  View v;
  if (!InodeSpace::ViewOfKind(Kind(dir), &v)) return Status::InvalidArgument("not listed");
  return store_->ForEachEntry(Number(dir), [&](uint32_t ino, const InodeRecord& rec) {
    // A jpeg-N file's attributes are not in its listing (the kernel looks it up when it is
    // opened): the kernel has no inode to push its bytes into.
    if (!IsReg(rec) || ViewEncodes(v, rec, options_.max_render_bytes)) return true;
    return file(Out(InodeSpace::Make(v, ino)), ViewFileBytes(v, rec, options_.max_render_bytes));
  });
}

Status Filesystem::Attr(uint64_t ino, struct stat* st) const {
  uint32_t kind = Kind(ino);
  if (kind == kControl) return ControlAttr(ino, st);
  View v;
  const bool view = InodeSpace::ViewOfKind(kind, &v);
  if (!view && (kind < kTensorFileKind || kind >= kControl))
    return Status::NotFound("no such inode");
  InodeRecord rec;
  if (!view) {
    std::shared_ptr<const TensorIndex> t;
    DSFS_RETURN_IF_ERROR(Tensor(Number(ino), &t));
    if (!t->available) return Status::NotFound("no tensor view here: " + t->why);
    DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
    // Never more readable than its members one by one (fs/views.h, ReadAccess).
    rec.mode = S_IFREG | t->access.bits();
    rec.size = t->FileBytes(static_cast<TensorFile>(kind - kTensorFileKind));
    FillStat(ino, rec, st);
    return Status::OK();
  }
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  return FillViewStat(v, Number(ino), rec, st, /*encode=*/true);
}

Status Filesystem::LookupIn(uint64_t parent, std::string_view name, uint64_t* ino) const {
  Status s;
  if (LookupControl(parent, name, ino, &s)) return s;
  const uint32_t kind = Kind(parent);
  View v;
  if (!InodeSpace::ViewOfKind(kind, &v)) return Status::InvalidArgument("not a directory");
  const uint32_t dir = Number(parent);
  InodeRecord rec;
  uint32_t found;
  if (name == "." || name == "..") {
    DSFS_RETURN_IF_ERROR(store_->GetInode(dir, &rec));
    if (!IsDir(rec)) return Status::InvalidArgument("not a directory");
    *ino = Make(kind, name == "." ? dir : rec.parent);
    return Status::OK();
  }
  if (v == View::kTensor) {
    for (uint32_t f = 0; f < 4; ++f) {
      if (name != kTensorFileNames[f]) continue;
      std::shared_ptr<const TensorIndex> t;
      DSFS_RETURN_IF_ERROR(Tensor(dir, &t));
      if (t->available) {
        *ino = Make(kTensorFileKind + f, dir);
        return Status::OK();
      }
    }
  }
  if (v == View::kNpy) {
    Status s = NpyViewImage(dir, name, &found);
    if (s.ok()) {
      *ino = Make(kind, found);
      return Status::OK();
    }
    if (!s.IsNotFound()) return s;
  }
  DSFS_RETURN_IF_ERROR(store_->Lookup(dir, name, &found, &rec));
  // The npy view shows images only under their .npy names.
  if (v == View::kNpy && Renders(v, rec)) return Status::NotFound("no such file");
  *ino = Make(kind, found);
  return Status::OK();
}

Status Filesystem::Lookup(uint64_t parent, std::string_view name, struct stat* st) const {
  counters_.lookup.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kLookup]);
  uint64_t ino;
  DSFS_RETURN_IF_ERROR(LookupIn(In(parent), name, &ino));
  return Attr(ino, st);
}

Status Filesystem::GetAttr(uint64_t ino, struct stat* st) const {
  counters_.getattr.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kGetAttr]);
  return Attr(In(ino), st);
}

Status Filesystem::NpyViewImage(uint32_t dir, std::string_view name, uint32_t* image) const {
  constexpr std::string_view kNpyExt = ".npy";
  if (name.size() <= kNpyExt.size() || name.substr(name.size() - kNpyExt.size()) != kNpyExt) {
    return Status::NotFound("not an .npy name");
  }
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(
      store_->Lookup(dir, name.substr(0, name.size() - kNpyExt.size()), image, &rec));
  return Renders(View::kNpy, rec) ? Status::OK() : Status::NotFound("not an image it renders");
}

Status Filesystem::ReadDir(uint64_t fuse_ino, uint64_t offset, const DirFiller& fill) const {
  counters_.readdir.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kReadDir]);
  const uint64_t ino = In(fuse_ino);
  if (ino == kDotDsfsIno) return ReadDirControl(offset, fill);
  View v;
  if (!InodeSpace::ViewOfKind(Kind(ino), &v)) {
    return Kind(ino) >= kTensorFileKind && Kind(ino) <= kControl
               ? Status::InvalidArgument("not a directory")
               : Status::NotFound("no such inode");
  }
  const uint32_t dir_ino = Number(ino);
  InodeRecord dir;
  DSFS_RETURN_IF_ERROR(store_->GetInode(dir_ino, &dir));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(store_->DirEntries(dir_ino, dir, &first, &count));
  std::shared_ptr<const TensorIndex> tensor;
  if (v == View::kTensor) DSFS_RETURN_IF_ERROR(Tensor(dir_ino, &tensor));
  const bool has_tensor = tensor && tensor->available;
  struct stat st;
  if (offset == 0) {
    DSFS_RETURN_IF_ERROR(FillViewStat(v, dir_ino, dir, &st, false));
    if (!fill(".", st, 1)) return Status::OK();
    offset = 1;
  }
  if (offset == 1) {
    InodeRecord parent;
    DSFS_RETURN_IF_ERROR(store_->GetInode(dir.parent, &parent));
    DSFS_RETURN_IF_ERROR(FillViewStat(v, dir.parent, parent, &st, false));
    if (!fill("..", st, 2)) return Status::OK();
    offset = 2;
  }
  std::string npy_name;
  for (uint64_t i = offset - 2; i < count; ++i) {
    InodeRecord rec;
    std::string_view name;
    uint32_t ino_i = first + static_cast<uint32_t>(i);
    DSFS_RETURN_IF_ERROR(store_->GetInode(ino_i, &rec));
    DSFS_RETURN_IF_ERROR(store_->GetName(rec, &name));
    // Names a generated entry takes are not listed twice (lookups find the generated one).
    if (ino == space_.root() && name == kControlDirName) continue;  // dsfs's own .dsfs
    if (has_tensor && std::find(std::begin(kTensorFileNames), std::end(kTensorFileNames), name) !=
                          std::end(kTensorFileNames)) {
      continue;  // the tensor view's file of that name
    }
    if (v == View::kNpy && !Renders(v, rec)) {
      uint32_t image;
      Status s = NpyViewImage(dir_ino, name, &image);
      if (s.ok()) continue;  // the npy view's file of image X takes the name "X.npy"
      if (!s.IsNotFound()) return s;
    }
    if (v == View::kNpy && Renders(v, rec)) {
      npy_name.assign(name);
      npy_name += ".npy";
      name = npy_name;
    }
    DSFS_RETURN_IF_ERROR(FillViewStat(v, ino_i, rec, &st, false));
    if (!fill(name, st, i + 3)) return Status::OK();
  }
  if (has_tensor) {
    for (uint64_t i = std::max<uint64_t>(offset - 2, count); i < count + 4; ++i) {
      uint32_t f = static_cast<uint32_t>(i - count);
      DSFS_RETURN_IF_ERROR(Attr(Make(kTensorFileKind + f, dir_ino), &st));
      if (!fill(kTensorFileNames[f], st, i + 3)) break;
    }
  }
  return Status::OK();
}

Status Filesystem::Open(uint64_t ino, int flags) const {
  counters_.open.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kOpen]);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT | O_APPEND))) {
    return Status::ReadOnly("read-only file system");
  }
  struct stat st;
  DSFS_RETURN_IF_ERROR(Attr(In(ino), &st));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument("is a directory");
  return Status::OK();
}

Status Filesystem::Read(uint64_t fuse_ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                        std::string_view* out) const {
  counters_.read.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kRead]);
  const uint64_t ino = In(fuse_ino);
  InodeRecord rec;
  Status s = ReadIno(ino, offset, size, buf, out, &rec);
  if (!s.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  counters_.bytes_read.fetch_add(out->size(), std::memory_order_relaxed);
  // The record this read decoded: the prefetcher does not decode it again.
  if (prefetcher_ && Kind(ino) == 0) prefetcher_->ReadServed(fuse_ino, rec, offset, out->size());
  return Status::OK();
}

Status Filesystem::ReadFile(uint64_t fuse_ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                            std::string_view* out) const {
  InodeRecord rec;
  return ReadIno(In(fuse_ino), offset, size, buf, out, &rec);
}

Status Filesystem::ReadIno(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                           std::string_view* out, InodeRecord* rec) const {
  if (ino == kStatsIno) return ReadStats(offset, size, buf, out);
  const uint32_t kind = Kind(ino);
  if (kind == kControl) return Status::InvalidArgument("is a directory");
  View v;
  if (!InodeSpace::ViewOfKind(kind, &v)) {
    if (kind < kTensorFileKind || kind > kControl) return Status::NotFound("no such inode");
    return ReadTensorFile(static_cast<TensorFile>(kind - kTensorFileKind), Number(ino), offset,
                          size, buf, out);
  }
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), rec));
  if (Renders(v, *rec)) return ReadImageView(v, Number(ino), *rec, offset, size, buf, out);
  if (v != View::kOriginal && IsReg(*rec) &&
      rec->image == static_cast<uint8_t>(ImageKind::kUnsupported))
    NoteServedAsIs(Number(ino));
  if (v.kind != View::kOriginal && v.kind != View::kTensor && IsDecodableImage(*rec)) {
    NoteTooLargeToRender(Number(ino), *rec);
  }
  return store_->Read(*rec, offset, size, buf, out);
}

// The *Fetches hints follow what each request reads (Lookup, Attr, ReadDir, ReadIno above and
// the views' reads), asking the Store whether each piece is in memory. A piece they cannot
// read without fetching is a fetch; one that fails to read fails the request at once, which
// they leave to the request thread.

bool Filesystem::TensorBuilt(uint32_t dir) const {
  std::lock_guard lock(mu_);
  return tensors_.count(dir) > 0;
}

bool Filesystem::AttrMayFetch(uint64_t ino) const {
  const uint32_t kind = Kind(ino);
  if (kind == kControl) return store_->InodeMayFetch(Store::kRootIno);  // see ControlAttr
  View v;
  if (!InodeSpace::ViewOfKind(kind, &v)) {
    if (kind < kTensorFileKind || kind >= kControl) return false;
    return !TensorBuilt(Number(ino)) || store_->InodeMayFetch(Number(ino));
  }
  if (store_->InodeMayFetch(Number(ino))) return true;
  InodeRecord rec;
  if (!store_->GetInode(Number(ino), &rec).ok()) return false;
  if (IsLink(rec)) return store_->NamesMayFetch(rec.data, rec.size);  // ReadLink
  // A jpeg-N file's size is known once it is encoded (FillViewStat).
  return v != View::kOriginal && IsReg(rec) && ViewEncodes(v, rec, options_.max_render_bytes) &&
         !RenderCached(v, Number(ino)) && store_->PixelsMayFetch(rec);
}

bool Filesystem::AttrFetches(uint64_t fuse_ino) const {
  return store_->remote() && AttrMayFetch(In(fuse_ino));
}

bool Filesystem::LookupFetches(uint64_t fuse_parent, std::string_view name) const {
  if (!store_->remote()) return false;
  const uint64_t parent = In(fuse_parent);
  uint64_t ino;
  Status s;
  if (LookupControl(parent, name, &ino, &s)) return s.ok() && AttrMayFetch(ino);
  View v;
  if (!InodeSpace::ViewOfKind(Kind(parent), &v)) return false;
  const uint32_t dir = Number(parent);
  if (name == "." || name == "..") {
    InodeRecord rec;
    if (store_->InodeMayFetch(dir)) return true;
    if (!store_->GetInode(dir, &rec).ok() || !IsDir(rec)) return false;
    return AttrMayFetch(Make(Kind(parent), name == "." ? dir : rec.parent));
  }
  if (store_->EntriesMayFetch(dir)) return true;
  if (v == View::kTensor && !TensorBuilt(dir) &&
      std::find(std::begin(kTensorFileNames), std::end(kTensorFileNames), name) !=
          std::end(kTensorFileNames)) {
    return true;
  }
  // Everything LookupIn reads is in memory now: the entry it finds, and then its attributes.
  if (!LookupIn(parent, name, &ino).ok()) return false;
  return AttrMayFetch(ino);
}

bool Filesystem::ReadDirFetches(uint64_t fuse_ino) const {
  if (!store_->remote()) return false;
  const uint64_t ino = In(fuse_ino);
  if (ino == kDotDsfsIno) return store_->InodeMayFetch(Store::kRootIno);  // the views' roots
  View v;
  if (!InodeSpace::ViewOfKind(Kind(ino), &v)) return false;
  const uint32_t dir = Number(ino);
  if (store_->EntriesMayFetch(dir)) return true;
  if (v == View::kTensor && !TensorBuilt(dir)) return true;
  InodeRecord rec;
  if (!store_->GetInode(dir, &rec).ok()) return false;
  return store_->InodeMayFetch(rec.parent);  // ".."
}

bool Filesystem::ReadFetches(uint64_t fuse_ino, uint64_t offset, uint64_t size) const {
  if (!store_->remote()) return false;
  const uint64_t ino = In(fuse_ino);
  const uint32_t kind = Kind(ino);
  if (ino == kStatsIno || kind == kControl) return false;
  View v;
  if (!InodeSpace::ViewOfKind(kind, &v)) {
    if (kind < kTensorFileKind || kind > kControl) return false;
    const uint32_t dir = Number(ino);
    if (!TensorBuilt(dir)) return true;
    switch (static_cast<TensorFile>(kind - kTensorFileKind)) {
      case TensorFile::kImages:
        return ReadDecodes(fuse_ino, offset, size);  // an image's pixels not cached
      case TensorFile::kFiles:
        return !(cache_ && cache_->Contains(files_txt_id_, dir));  // the entries' names
      default:
        return false;  // from the index
    }
  }
  if (store_->InodeMayFetch(Number(ino))) return true;
  InodeRecord rec;
  if (!store_->GetInode(Number(ino), &rec).ok()) return false;
  if (Renders(v, rec)) return !RenderCached(v, Number(ino)) && store_->PixelsMayFetch(rec);
  return store_->ReadMayFetch(rec, offset, size);
}

Status Filesystem::ReadLink(uint64_t fuse_ino, std::string_view* target) const {
  counters_.readlink.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kReadLink]);
  const uint64_t ino = In(fuse_ino);
  View v;
  if (!InodeSpace::ViewOfKind(Kind(ino), &v)) return Status::InvalidArgument("not a symbolic link");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  return store_->ReadLink(rec, target);
}

Status Filesystem::StatFs(struct statvfs* st) const {
  counters_.statfs.fetch_add(1, std::memory_order_relaxed);
  const ScopedLatency timed(counters_.latency[RequestCounters::kStatFs]);
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
