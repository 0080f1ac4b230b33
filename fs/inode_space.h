// InodeSpace: the inode numbers a mount shows the kernel (FUSE's), and what they stand for.
//
// A number is kind << 32 | number: kind 0 is the original tree (number = the store's inode,
// root = 1), kinds 1-3 the same store inodes seen in the bmp, npy and tensor views
// (fs/views.h), kinds 4-7 the generated files of tensor view directory `number`, kind 8 the
// hidden control directory /.dsfs (1) and its stats file (2) (fs/control_dir.h), and kinds
// kResized | format << 13 | N the store inodes seen in resized view bmp-N (format 0) or jpeg-N
// (format 1).
//
// A mount of a view as its root (FsOptions::view) shows that view's root as FUSE inode 1, and
// the original tree's root (MOUNT/.dsfs/original) takes the view root's number: In() and
// Out() swap the two. Everything else is the same number on both sides.
//
// A value type, immutable after construction: safe to use from any number of threads.
#pragma once

#include <cstdint>

#include "fs/views.h"

namespace dsfs {

class InodeSpace {
 public:
  static constexpr uint32_t kTensorFileKind = 4;  // 4..7: TensorFile
  static constexpr uint32_t kControl = 8;
  static constexpr uint64_t kControlDirIno = uint64_t{kControl} << 32 | 1;
  static constexpr uint64_t kStatsIno = uint64_t{kControl} << 32 | 2;
  static constexpr uint32_t kResized = 1 << 16;

  // The space of a mount whose root shows view `root_view`.
  explicit InodeSpace(View root_view = View::kOriginal) : root_(Make(root_view, 1)) {}

  static uint32_t Kind(uint64_t ino) { return static_cast<uint32_t>(ino >> 32); }
  static uint32_t Number(uint64_t ino) { return static_cast<uint32_t>(ino); }
  static uint64_t Make(uint32_t kind, uint32_t number) { return uint64_t{kind} << 32 | number; }
  // The kind of view `v`'s store inodes.
  static uint32_t KindOf(View v) {
    if (!v.resized()) return v.kind;
    return kResized | (v.kind == View::kJpeg ? 1u << 13 : 0u) | v.side;
  }
  // The view whose store inodes have kind `kind`; false for the other kinds (tensor files, the
  // control directory, numbers no view has).
  static bool ViewOfKind(uint32_t kind, View* v) {
    if (kind <= View::kTensor) {
      *v = View(static_cast<View::Kind>(kind));
      return true;
    }
    const uint32_t side = kind & 0x1fff, format = (kind >> 13) & 7;
    if ((kind & ~uint32_t{0xffff}) != kResized || format > 1 || side == 0) return false;
    *v = View(format == 1 ? View::kJpeg : View::kBmp, side);
    return true;
  }
  // Store inode `ino` as view `v` shows it.
  static uint64_t Make(View v, uint32_t ino) { return Make(KindOf(v), ino); }

  // Our number of the mount's root (the view it shows, number 1).
  uint64_t root() const { return root_; }
  // FUSE's inode numbers <-> ours.
  uint64_t In(uint64_t fuse_ino) const { return Swap(fuse_ino); }
  uint64_t Out(uint64_t ino) const { return Swap(ino); }

  // The FUSE number of store inode `store_ino` in the original tree.
  uint64_t FromStore(uint32_t store_ino) const { return Out(Make(View::kOriginal, store_ino)); }
  // The store inode that FUSE inode `fuse_ino` shows in the original tree; false if it is
  // anything else (a view's file, a generated file, the control directory).
  bool ToStore(uint64_t fuse_ino, uint32_t* store_ino) const {
    const uint64_t ino = In(fuse_ino);
    if (Kind(ino) != 0) return false;
    *store_ino = Number(ino);
    return true;
  }

 private:
  uint64_t Swap(uint64_t ino) const { return ino == 1 ? root_ : ino == root_ ? 1 : ino; }

  uint64_t root_;
};

}  // namespace dsfs
