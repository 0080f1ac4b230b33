#include "kernel/view_tree.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "fs/control_dir.h"

namespace dsfs {

Status ViewTree::Build(const Filesystem* fs, View view, std::unique_ptr<ViewTree>* tree) {
  std::unique_ptr<ViewTree> t(new ViewTree(fs));
  // The bmp view shows every store entry under its own name in its own place, except a store
  // entry named .dsfs (kControlDirName) in the root, which the view hides behind its control
  // directory: only then does its numbering differ from the store's.
  if (view.kind == View::kBmp) {  // bmp and bmp-N
    uint32_t found;
    InodeRecord rec;
    Status s = fs->store().Lookup(Store::kRootIno, kControlDirName, &found, &rec);
    if (!s.ok() && !s.IsNotFound()) return s;
    if (s.IsNotFound()) {
      // Filesystem's numbers (fs/inode_space.h): store inode n of view v is Make(v, n), and
      // the view mounted as the root is 1.
      t->identity_ = true;
      t->view_ = view;
      *tree = std::move(t);
      return Status::OK();
    }
  }
  DSFS_RETURN_IF_ERROR(t->Walk());
  *tree = std::move(t);
  return Status::OK();
}

Status ViewTree::Walk() {
  fs_ino_.push_back(1);
  name_off_.push_back(0);
  first_child_.push_back(0);
  child_count_.push_back(0);
  // Breadth first: the arrays are the queue. A directory's children are gathered, sorted and
  // appended; only one directory's listing is held at a time.
  struct Child {
    std::string name;
    uint64_t fs_ino;
    bool dir;
    bool operator<(const Child& o) const { return name < o.name; }  // bytewise
  };
  std::vector<Child> children;
  std::vector<uint8_t> is_dir = {1};
  for (size_t i = 0; i < fs_ino_.size(); ++i) {
    if (!is_dir[i]) continue;
    children.clear();
    DSFS_RETURN_IF_ERROR(
        fs_->ReadDir(fs_ino_[i], 2, [&](std::string_view name, const struct stat& st, uint64_t) {
          children.push_back(
              {std::string(name), static_cast<uint64_t>(st.st_ino), S_ISDIR(st.st_mode)});
          return true;
        }));
    std::sort(children.begin(), children.end());
    if (fs_ino_.size() + children.size() > UINT32_MAX) {
      return Status::NotSupported("view has more than 2^32 entries");
    }
    first_child_[i] = static_cast<uint32_t>(fs_ino_.size());
    child_count_[i] = static_cast<uint32_t>(children.size());
    for (const Child& c : children) {
      fs_ino_.push_back(c.fs_ino);
      name_off_.push_back(names_.size());
      names_ += c.name;
      first_child_.push_back(0);
      child_count_.push_back(0);
      is_dir.push_back(c.dir ? 1 : 0);
    }
  }
  name_off_.push_back(names_.size());
  fs_ino_.shrink_to_fit();
  name_off_.shrink_to_fit();
  first_child_.shrink_to_fit();
  child_count_.shrink_to_fit();
  names_.shrink_to_fit();
  return Status::OK();
}

uint64_t ViewTree::FsIno(uint32_t ino) const {
  if (!identity_) return fs_ino_[ino];
  return ino == 0 ? 1 : InodeSpace::Make(view_, ino + 1);
}

uint32_t ViewTree::inode_count() const {
  if (identity_) return static_cast<uint32_t>(fs_->store().inode_count());
  return static_cast<uint32_t>(fs_ino_.size());
}

uint64_t ViewTree::memory_bytes() const {
  return fs_ino_.capacity() * 8 + name_off_.capacity() * 8 + first_child_.capacity() * 4 +
         child_count_.capacity() * 4 + names_.capacity();
}

Status ViewTree::GetInode(uint32_t ino, erofs::ImageInode* inode) const {
  struct stat st;
  DSFS_RETURN_IF_ERROR(fs_->GetAttr(FsIno(ino), &st));
  *inode = erofs::ImageInode{};
  inode->mode = st.st_mode;
  inode->uid = st.st_uid;
  inode->gid = st.st_gid;
  inode->mtime_s = st.st_mtim.tv_sec;
  inode->mtime_ns = static_cast<uint32_t>(st.st_mtim.tv_nsec);
  if (!S_ISDIR(st.st_mode)) inode->size = static_cast<uint64_t>(st.st_size);
  if (identity_) {
    InodeRecord rec;
    DSFS_RETURN_IF_ERROR(fs_->store().GetInode(ino + 1, &rec));
    inode->name_len = rec.name_len;
    if (IsDir(rec)) {
      uint32_t first = 0, count = 0;
      DSFS_RETURN_IF_ERROR(fs_->store().DirEntries(ino + 1, rec, &first, &count));
      inode->first_child = count ? first - 1 : 0;
      inode->child_count = count;
    }
    return Status::OK();
  }
  inode->name_len = static_cast<uint32_t>(name_off_[ino + 1] - name_off_[ino]);
  inode->first_child = child_count_[ino] ? first_child_[ino] : 0;
  inode->child_count = child_count_[ino];
  return Status::OK();
}

Status ViewTree::GetName(uint32_t ino, std::string* scratch, std::string_view* name) const {
  if (identity_) {
    InodeRecord rec;
    DSFS_RETURN_IF_ERROR(fs_->store().GetInode(ino + 1, &rec));
    return fs_->store().GetName(rec, name);
  }
  *name = std::string_view(names_).substr(name_off_[ino], name_off_[ino + 1] - name_off_[ino]);
  return Status::OK();
}

Status ViewTree::ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const {
  const uint64_t fino = FsIno(ino);
  struct stat st;
  DSFS_RETURN_IF_ERROR(fs_->GetAttr(fino, &st));
  if (S_ISLNK(st.st_mode)) {
    std::string_view target;
    DSFS_RETURN_IF_ERROR(fs_->ReadLink(fino, &target));
    return erofs::CopyTargetRange(target, offset, len, dst);
  }
  thread_local ReadBuffer buf;
  return erofs::CopyFromReads(
      [&](uint64_t off, size_t n, std::string_view* out) {
        return fs_->Read(fino, off, n, &buf, out);
      },
      offset, len, dst, "view file");
}

}  // namespace dsfs
