#include "erofs/store_tree.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace dsfs::erofs {

uint32_t StoreTree::inode_count() const { return static_cast<uint32_t>(store_->inode_count()); }

Status StoreTree::GetInode(uint32_t ino, ImageInode* inode) const {
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(ino + 1, &rec));
  *inode = ImageInode{};
  inode->mode = rec.mode & ~(static_cast<uint32_t>(options_.umask) & 07777);
  inode->uid = options_.uid;
  inode->gid = options_.gid;
  inode->mtime_s = rec.mtime_s;
  inode->mtime_ns = rec.mtime_ns;
  inode->name_len = rec.name_len;
  if (IsDir(rec)) {
    uint32_t first = 0, count = 0;
    DSFS_RETURN_IF_ERROR(store_->DirEntries(ino + 1, rec, &first, &count));
    // An empty directory's first entry may be anything; keep it inside the tree.
    inode->first_child = count ? first - 1 : 0;
    inode->child_count = count;
  } else {
    inode->size = rec.size;
  }
  return Status::OK();
}

Status StoreTree::GetName(uint32_t ino, std::string* scratch, std::string_view* name) const {
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(ino + 1, &rec));
  return store_->GetName(rec, name);
}

Status StoreTree::ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const {
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(ino + 1, &rec));
  if (IsLink(rec)) {
    std::string_view target;
    DSFS_RETURN_IF_ERROR(store_->ReadLink(rec, &target));
    return CopyTargetRange(target, offset, len, dst);
  }
  if (offset > rec.size || len > rec.size - offset) {
    return Status::InvalidArgument("EROFS image: read past the end of a file");
  }
  ReadBuffer buf;
  return CopyFromReads([&](uint64_t off, size_t n,
                           std::string_view* out) { return store_->Read(rec, off, n, &buf, out); },
                       offset, len, dst, "store file");
}

Status StorePacked::Open(const Store* store, std::unique_ptr<StorePacked>* out) {
  std::unique_ptr<StorePacked> p(new StorePacked(store));
  DSFS_RETURN_IF_ERROR(store->ForEachKernelGroup([&](const Store::KernelGroup& g) {
    p->groups_.push_back(g);
    return Status::OK();
  }));
  *out = std::move(p);
  return Status::OK();
}

Status StorePacked::ForEachExtent(
    const std::function<Status(uint64_t decoded, uint32_t frame)>& fn) const {
  for (const Store::KernelGroup& g : groups_)
    DSFS_RETURN_IF_ERROR(fn(g.records_bytes, g.frame_bytes));
  return Status::OK();
}

Status StorePacked::ReadFrame(uint64_t e, uint64_t offset, size_t len, char* dst) const {
  if (e >= groups_.size()) return Status::InvalidArgument("EROFS image: no such packed extent");
  return store_->ReadKernelFrame(groups_[e], offset, len, dst);
}

Status StorePacked::FragmentOf(uint32_t ino, uint64_t* e, uint64_t* offset) const {
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(ino + 1, &rec));
  if (!IsReg(rec)) return Status::Corruption("EROFS image: a fragment is no regular file");
  uint64_t last_id = 0;
  DSFS_RETURN_IF_ERROR(store_->KernelRecordOffset(rec.data, &last_id, offset));
  auto it = std::lower_bound(groups_.begin(), groups_.end(), last_id,
                             [](const Store::KernelGroup& g, uint64_t v) { return g.last_id < v; });
  if (it == groups_.end() || it->last_id != last_id) {
    return Status::Corruption("EROFS image: the store's groups changed");
  }
  *e = static_cast<uint64_t>(it - groups_.begin());
  return Status::OK();
}

}  // namespace dsfs::erofs
