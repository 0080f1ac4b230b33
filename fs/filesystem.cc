#include "fs/filesystem.h"

#include <fcntl.h>

#include <cstring>

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

Status Filesystem::Lookup(uint64_t parent, std::string_view name, struct stat* st) const {
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
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  FillStat(ino, rec, st);
  return Status::OK();
}

Status Filesystem::ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fill) const {
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
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  DSFS_RETURN_IF_ERROR(store_->Read(rec, offset, size, buf, out));
  if (prefetcher_) prefetcher_->ReadServed(static_cast<uint32_t>(ino), rec, offset, out->size());
  return Status::OK();
}

Status Filesystem::ReadLink(uint64_t ino, std::string_view* target) const {
  if (ino > UINT32_MAX) return Status::NotFound("no such inode");
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(static_cast<uint32_t>(ino), &rec));
  return store_->ReadLink(rec, target);
}

Status Filesystem::StatFs(struct statvfs* st) const {
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
