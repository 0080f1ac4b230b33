// An EROFS image synthesized on demand from a tree description, so the kernel's EROFS driver
// (over a loop device over one file that dsfs serves) can serve the tree with no per-file FUSE
// round trip (README, "The kernel path").
//
// Image::Build lays the image out once, in one pass over the tree, keeping plain arrays of 8
// bytes per inode (and a little per directory); Image::Read then produces any byte range of the
// image from the tree: superblock, inodes, directory blocks, file data, zero padding. Nothing of
// the image is stored.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "erofs/format.h"

namespace dsfs::erofs {

// What the image needs to know about one inode. Every field is known without reading data.
struct ImageInode {
  uint32_t mode = 0;  // st_mode: type (regular, directory or symlink) and permission bits
  uint32_t uid = 0, gid = 0;
  int64_t mtime_s = 0;
  uint32_t mtime_ns = 0;
  uint64_t size = 0;      // regular: bytes; symlink: target length; directory: ignored
  uint32_t name_len = 0;  // bytes of the name (1..255; the root's is ignored)
  // Directories: the children are inodes [first_child, first_child + child_count).
  uint32_t first_child = 0, child_count = 0;
};

// The tree an image is built from. Inodes are numbered [0, inode_count()), the root is 0, and
// every directory's children are a contiguous range of inodes, numbered after the directory
// itself and sorted bytewise by name (the dsfs store numbers its inodes this way, breadth first).
// Each inode but the root is the child of exactly one directory. Names are 1..255 bytes without
// '/' or NUL, and no child is named "." or "..".
//
// Thread safety: Image::Read calls every method from any number of threads at once; they must
// all be safe to call concurrently. The answers must not change while an Image uses the tree.
class ImageTree {
 public:
  virtual ~ImageTree() = default;
  virtual uint32_t inode_count() const = 0;
  virtual Status GetInode(uint32_t ino, ImageInode* inode) const = 0;
  // The name of `ino` (not the root): *name points into *scratch or into memory that lives as
  // long as the tree.
  virtual Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const = 0;
  // Exactly `len` bytes at `offset` of a regular file's contents or a symlink's target into
  // dst. REQUIRES: offset + len <= the inode's size. An error fails the Image::Read asking.
  virtual Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const = 0;
};

// For ReadData: bytes [offset, offset + len) of a symlink's `target` into `dst`
// (InvalidArgument past its end).
Status CopyTargetRange(std::string_view target, uint64_t offset, size_t len, char* dst);
// For ReadData: `len` bytes from `offset` into `dst`, from as many calls of `read` (bytes of
// the file at an offset, up to a length; what a Store or Filesystem Read gives) as it takes.
// Corruption naming `what` if the file ends first.
using ReadFn = std::function<Status(uint64_t offset, size_t len, std::string_view* out)>;
Status CopyFromReads(const ReadFn& read, uint64_t offset, size_t len, char* dst,
                     std::string_view what);

// The packed inode of a compressed image (EROFS fragments): extents of file bytes, each one zstd
// frame without a dictionary and a window of at most 1 MiB, which the kernel decodes (one
// pcluster each); dsfs serves the frames as they are. Thread safety: as ImageTree's.
class PackedData {
 public:
  virtual ~PackedData() = default;
  // fn(decoded bytes, frame bytes) of each extent, in order (Image::Build).
  virtual Status ForEachExtent(
      const std::function<Status(uint64_t decoded, uint32_t frame)>& fn) const = 0;
  // Exactly `len` bytes at `offset` of extent `e`'s frame into dst.
  virtual Status ReadFrame(uint64_t e, uint64_t offset, size_t len, char* dst) const = 0;
  // Where the bytes of regular file `ino` (one the image made a fragment) start: extent *e, at
  // *offset of its decoded bytes.
  virtual Status FragmentOf(uint32_t ino, uint64_t* e, uint64_t* offset) const = 0;
};

struct ImageOptions {
  // Tail packing: a file's (or symlink's, or directory's) last partial block is stored right
  // after its inode in the metadata area (EROFS FLAT_INLINE) when it fits in one block with the
  // inode, so one 4 KiB metadata block holds several tiny files. Off: every byte of data gets
  // its own data blocks (FLAT_PLAIN).
  bool inline_data = true;
  // With inline_data: the tails of regular files that also have data blocks are inlined too.
  // Off: a regular file is inline only whole (it fits after its inode in one block), so the
  // metadata area holds no byte of a larger file (a stat never reads one, and a damaged
  // larger file fails only its own reads). Directories and symlinks are inlined either way.
  bool inline_file_tails = true;
  // 32-byte inodes for those whose mtime equals the image's build time (the root's mtime), with
  // 16-bit uid/gid/nlink and a size under 4 GiB; 64-byte inodes for the rest. Off: all 64-byte.
  bool compact_inodes = true;
  std::string volume_name;  // at most 16 bytes
  uint8_t uuid[16] = {};
  // A compressed image: the regular files of 1 to fragment_max_bytes bytes are fragments of
  // a packed inode whose pclusters are `packed`'s extents (REQUIRES: it outlives the Image);
  // the rest as above. Null: an uncompressed image.
  const PackedData* packed = nullptr;
  uint64_t fragment_max_bytes = 64 << 10;
};

class Image {
 public:
  // Lays out the image of `tree`. REQUIRES: `tree` outlives the Image. InvalidArgument if the
  // tree breaks ImageTree's rules (ranges out of order or overlapping, bad name lengths, a child
  // named "." or ".."), NotSupported for other inode types (devices, fifos, sockets) or an image
  // past EROFS's 32-bit block addresses (16 TiB) or dsfs's 32-bit nids (128 GiB of metadata);
  // a tree error is returned as is.
  static Status Build(const ImageTree* tree, const ImageOptions& options,
                      std::unique_ptr<Image>* image);
  // NotSupported from Build of a compressed image whose extents EROFS cannot take as
  // pclusters (over 1 MiB of frame, two starting in one 4 KiB of the packed inode): the
  // caller may build the uncompressed image instead.
  ~Image();
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  // Size of the image in bytes (a multiple of 4 KiB).
  uint64_t size_bytes() const {
    return (meta_blocks_ + uint64_t{data_blocks_} + packed_blocks_) << 12;
  }
  // A compressed image (ImageOptions::packed): its packed inode's bytes and their pclusters.
  bool compressed() const { return options_.packed != nullptr; }
  uint64_t packed_bytes() const { return ext_start_.empty() ? 0 : ext_start_.back(); }
  uint32_t inode_count() const { return inode_count_; }
  // The EROFS nid of tree inode `ino` (the inode's byte offset / 32). REQUIRES: ino < count.
  uint64_t nid(uint32_t ino) const { return nid_[ino]; }
  uint32_t meta_blocks() const { return meta_blocks_; }
  // Heap bytes the layout holds.
  uint64_t memory_bytes() const;

  // Fills dst with image bytes [offset, offset + len). InvalidArgument if that range passes
  // size_bytes(); a tree error (e.g. a damaged record of a file) fails the whole read, with the
  // tree's status. Large reads are answered in one go: a file's contiguous data is read from
  // the tree in one ReadData call. Thread safety: safe to call concurrently (const, no state).
  Status Read(uint64_t offset, size_t len, char* dst) const;

  // For reading ahead: the directory that image byte `offset` serves (false past the image):
  // a directory's own entry blocks and inode serve it, a file's or symlink's blocks and inode
  // (with its inline data) its parent.
  bool DirOfByte(uint64_t offset, uint32_t* dir) const;
  // The whole metadata blocks holding the inodes of the children of directory `dir` (and their
  // inline data, which is all of a tiny file's): what a first stat or read of them reads.
  // *len = 0 for an empty directory or an inode that is none.
  void ChildrenMeta(uint32_t dir, uint64_t* offset, uint64_t* len) const;
  // The image bytes [*offset, *offset + *len) holding the data of the children of directory
  // `dir` (their contents and entry blocks, side by side in name order): what a first touch of
  // the directory's files reads. *len = 0 for an empty directory or an inode that is none.
  void ChildrenData(uint32_t dir, uint64_t* offset, uint64_t* len) const;
  // The same range child by child, in image order: fn(offset, len) for each child of `dir`
  // that has data (a file's contents, a subdirectory's entry blocks), its ranges side by side.
  void ForEachChildData(uint32_t dir,
                        const std::function<void(uint64_t offset, uint64_t len)>& fn) const;

 private:
  struct Dir {
    uint32_t ino;
    uint32_t parent;
    uint32_t first_child, child_count;
    uint32_t first_block;  // index of its first block in dir_block_entry_
    uint32_t nlink;        // 2 + subdirectories
    uint64_t size;         // bytes of dirents and names, the last block partial
    // Where "." and ".." go among the children sorted by name: the number of children that
    // sort before each.
    uint32_t dot, dotdot;
  };
  struct Shape;  // an inode's format, derived from its attributes (image.cc)

  Image(const ImageTree* tree, const ImageOptions& options) : tree_(tree), options_(options) {}
  Status Layout();
  // Layout's first pass: every inode's attributes, read on several threads (see Layout).
  Status ReadInodes(std::vector<uint8_t>* name_len);
  // Lays out directory `ino`'s blocks from its children's name lengths; appends (child
  // directory, ino) to *parents.
  Status LayoutDir(uint32_t ino, const ImageInode& attr, const std::vector<uint8_t>& name_len,
                   Dir* dir, std::vector<std::pair<uint32_t, uint32_t>>* parents);
  Shape ShapeOf(uint32_t ino, const ImageInode& attr, const Dir* dir) const;
  const Dir* FindDir(uint32_t ino) const;
  // The inode whose slots hold 32-byte slot `slot` of the metadata area (at or after nid 36).
  uint32_t OwnerOfSlot(uint64_t slot) const;
  // DirOfByte for a byte of inode `ino`'s: `ino` if a directory, else its parent.
  bool DirOfInode(uint32_t ino, uint32_t* dir) const;
  uint32_t DirBlocks(const Dir& dir) const;

  Status MetaBlock(uint32_t block, char* dst) const;
  Status WriteInode(uint32_t ino, char* dst) const;
  // Block `index` of directory `dir` (its first `len` bytes) into dst.
  Status DirBlock(const Dir& dir, uint32_t index, uint32_t len, char* dst) const;
  // Data area bytes [offset, offset + len), all within the blocks of inode `ino`.
  Status DataRange(uint32_t ino, uint64_t offset, size_t len, char* dst) const;
  void WriteSuperBlock(char* dst) const;
  // Compressed images: the extents' places, the packed inode after the tree's inodes at
  // metadata byte *cur (moved past it); its bytes in metadata block `block`; the pcluster
  // area's bytes [offset, offset + len) (offset relative to the area).
  Status LayoutPacked(uint64_t* cur);
  void WritePackedMeta(uint32_t block, char* dst) const;
  LclusterIndex IndexOf(uint64_t lcn) const;
  Status PackedRange(uint64_t offset, size_t len, char* dst) const;
  // Bytes an inode of shape `s` takes in the metadata area.
  static uint64_t SlotBytes(const Shape& s);

  const ImageTree* tree_;
  ImageOptions options_;
  uint32_t inode_count_ = 0;
  int64_t build_time_s_ = 0;
  uint32_t build_time_ns_ = 0;
  uint32_t meta_blocks_ = 0, data_blocks_ = 0;
  // Per inode, plus one past the end: nid (in 32-byte slots from the image start; nid_[n] = end
  // of the metadata area) and first data block relative to the data area (blk_[n] = its size).
  // Both grow with the inode number, so the owner of a byte is found by binary search.
  std::vector<uint32_t> nid_, blk_;
  std::vector<Dir> dirs_;  // sorted by ino
  // Indices into dirs_ of the directories with children, sorted by first_child: the parent of
  // any inode but the root by binary search.
  std::vector<uint32_t> by_first_child_;
  // Per directory block, all directories' blocks in order: the index of its first entry among
  // the directory's entries (children plus "." and "..", sorted).
  std::vector<uint32_t> dir_block_entry_;
  // Compressed images: per extent plus one past the end, its first byte in the packed inode
  // and its first block in the pcluster area (after the data area); its frame's bytes.
  uint32_t first_slot_byte_ = 0;
  std::vector<uint64_t> ext_start_;
  std::vector<uint32_t> ext_blk_, ext_frame_;
  uint64_t packed_off_ = 0, packed_end_ = 0;  // the packed inode's metadata bytes
  uint32_t packed_blocks_ = 0;
};

}  // namespace dsfs::erofs
