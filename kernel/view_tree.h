// ViewTree: a view of a Filesystem (the one FsOptions::view mounts as its root) seen as an
// erofs::ImageTree, so `dsfs mount -o kernel,view=NAME` can serve that view through EROFS. In
// EROFS a view is its own tree: a hidden /.dsfs cannot be hidden from readdir there, and
// ImageFolder would take it for a class.
//
// Attributes (modes, owners, sizes, mtimes) are the ones Filesystem reports, so every rule it
// applies (umask, uid/gid, the tensor view's access rule) holds in the image too; bytes come from
// Filesystem::Read/ReadLink when the kernel reads their blocks (pixels are decoded then).
//
// Numbering: where the view keeps the store's names and shape (bmp) tree inode i is store inode
// i + 1, as for StoreTree, with no walk. Otherwise (npy renames images, tensor adds files) Build
// walks the view once, breadth first with each directory's children sorted bytewise, into plain
// arrays (24 bytes per inode plus the names): no heap object per file.
//
// Thread safety: after Build, every method is const and safe to call from any number of threads
// (Filesystem is).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "erofs/image.h"
#include "fs/filesystem.h"

namespace dsfs {

class ViewTree : public erofs::ImageTree {
 public:
  // `view` is the one `fs` mounts as its root (its FsOptions::view), not kOriginal (the
  // original tree is erofs::StoreTree). REQUIRES: `fs` outlives the tree. Errors are
  // Filesystem's (damaged metadata), or NotSupported past 2^32 entries.
  static Status Build(const Filesystem* fs, View view, std::unique_ptr<ViewTree>* tree);

  uint32_t inode_count() const override;
  Status GetInode(uint32_t ino, erofs::ImageInode* inode) const override;
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override;
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override;

  // True if Build numbered the view as the store (no walk).
  bool identity() const { return identity_; }
  uint64_t memory_bytes() const;

 private:
  explicit ViewTree(const Filesystem* fs) : fs_(fs) {}
  Status Walk();
  // The Filesystem (FUSE) inode number of tree inode `ino`.
  uint64_t FsIno(uint32_t ino) const;

  const Filesystem* fs_;
  bool identity_ = false;
  View view_ = View::kOriginal;  // identity: the view whose inode numbers it uses
  // Walk only, per tree inode: its Filesystem inode, its name (names_[name_off_[i],
  // name_off_[i + 1])), and for directories its children [first_child_, + child_count_).
  std::vector<uint64_t> fs_ino_, name_off_;
  std::vector<uint32_t> first_child_, child_count_;
  std::string names_;
};

}  // namespace dsfs
