// Layout and synthesis of an EROFS image (see image.h and format.h).
//
// The image, 4 KiB blocks:
//   block 0..meta_blocks-1  the metadata area (meta_blkaddr = 0, as mkfs.erofs writes it): the
//                           superblock at byte 1024, then every inode in inode order from byte
//                           1152 (nid 36, the root), each followed by its inline tail, if any.
//                           An inode and its tail never cross a block boundary: a slot that
//                           does not fit in what is left of a block starts the next one.
//   the data area           each inode's data blocks in inode order: the directory blocks and
//                           the files of one directory come out contiguous in directory order
//                           (its children are consecutive inodes), so readahead on the loop
//                           device brings a directory's neighbouring small files in together.
// Everything else is derived again on each Read from the tree's attributes with the same rules
// (ShapeOf), so the layout keeps only each inode's nid and first data block.
#include "erofs/image.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "erofs/format.h"

namespace dsfs::erofs {
namespace {

constexpr uint32_t kFirstSlotByte = kSuperOffset + sizeof(SuperBlock);  // 1152: nid 36
// A compressed image has its zstd configuration there (8 bytes): the root is nid 37.
constexpr uint32_t kFirstPackedSlotByte = kFirstSlotByte + kSlotBytes;
// The packed inode: an extended inode, its map header, 8 reserved bytes, then the indexes.
constexpr uint32_t kPackedIndexStart = sizeof(InodeExtended) + sizeof(MapHeader) + 8;
constexpr uint32_t kSlotsPerBlock = kBlockBytes / kSlotBytes;
// In nid_ between Layout's two passes: a directory (other inodes hold their slot count there).
constexpr uint32_t kDirMark = 0x80000000u;

constexpr uint32_t kTypeMask = 0170000;
bool IsDirMode(uint32_t m) { return (m & kTypeMask) == 0040000; }
bool IsRegMode(uint32_t m) { return (m & kTypeMask) == 0100000; }
bool IsLinkMode(uint32_t m) { return (m & kTypeMask) == 0120000; }

uint8_t FileType(uint32_t mode) {
  if (IsRegMode(mode)) return kFtRegFile;
  if (IsDirMode(mode)) return kFtDir;
  if (IsLinkMode(mode)) return kFtSymlink;
  return kFtUnknown;
}

uint64_t RoundUp(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

// One entry of a directory as the image lists it: its children with "." and ".." merged in at
// their sorted places. Entry e is "." at dir.dot, ".." at dir.dotdot + 1, otherwise a child.
enum class EntryKind { kDot, kDotDot, kChild };
template <typename D>
EntryKind EntryAt(const D& dir, uint32_t e, uint32_t* child) {
  if (e == dir.dot) return EntryKind::kDot;
  if (e == dir.dotdot + 1) return EntryKind::kDotDot;
  *child = dir.first_child + (e < dir.dot ? e : e <= dir.dotdot ? e - 1 : e - 2);
  return EntryKind::kChild;
}

}  // namespace

struct Image::Shape {
  uint64_t size;    // i_size
  uint64_t blocks;  // blocks in the data area
  uint32_t nlink;
  uint32_t isize;  // 32 (compact) or 64 (extended)
  uint32_t tail;   // bytes stored inline after the inode (0: FLAT_PLAIN)
  bool fragment;   // all of it in the packed inode (an 8-byte map header after the inode)
};

uint64_t Image::SlotBytes(const Shape& s) {
  return RoundUp(s.isize + s.tail + (s.fragment ? sizeof(MapHeader) : 0), kSlotBytes);
}

Image::~Image() = default;

Status Image::Build(const ImageTree* tree, const ImageOptions& options,
                    std::unique_ptr<Image>* image) {
  if (options.volume_name.size() > sizeof(SuperBlock::volume_name)) {
    return Status::InvalidArgument("EROFS volume name longer than 16 bytes");
  }
  std::unique_ptr<Image> img(new Image(tree, options));
  DSFS_RETURN_IF_ERROR(img->Layout());
  *image = std::move(img);
  return Status::OK();
}

uint64_t Image::memory_bytes() const {
  return sizeof(*this) + nid_.capacity() * sizeof(nid_[0]) + blk_.capacity() * sizeof(blk_[0]) +
         dirs_.capacity() * sizeof(Dir) + dir_block_entry_.capacity() * sizeof(uint32_t) +
         by_first_child_.capacity() * sizeof(uint32_t) + ext_start_.capacity() * 8 +
         (ext_blk_.capacity() + ext_frame_.capacity()) * 4;
}

Image::Shape Image::ShapeOf(uint32_t ino, const ImageInode& attr, const Dir* dir) const {
  Shape s;
  s.size = dir ? dir->size : attr.size;
  s.nlink = dir ? dir->nlink : 1;
  // A compact inode has no mtime of its own (it shows the superblock's build time), 16-bit
  // uid/gid/nlink and a 32-bit size.
  const bool compact = options_.compact_inodes && attr.mtime_s == build_time_s_ &&
                       attr.mtime_ns == build_time_ns_ && attr.uid <= 0xFFFF &&
                       attr.gid <= 0xFFFF && s.size <= 0xFFFFFFFFu && s.nlink <= 0xFFFF;
  s.isize = compact ? sizeof(InodeCompact) : sizeof(InodeExtended);
  // A compressed image's small files: all their bytes in the packed inode, none here.
  s.fragment = options_.packed && IsRegMode(attr.mode) && s.size > 0 &&
               s.size <= options_.fragment_max_bytes;
  if (s.fragment) {
    s.tail = 0;
    s.blocks = 0;
    return s;
  }
  const uint32_t tail = static_cast<uint32_t>(s.size % kBlockBytes);
  // The kernel reads inline data only from the inode's own block; a tail that cannot share an
  // empty block with its inode goes to a data block instead.
  const bool may_inline = options_.inline_data &&
                          (options_.inline_file_tails || !IsRegMode(attr.mode) || s.size == tail);
  s.tail = may_inline && tail > 0 && s.isize + tail <= kBlockBytes ? tail : 0;
  s.blocks = s.tail ? s.size / kBlockBytes : (s.size + kBlockBytes - 1) / kBlockBytes;
  return s;
}

const Image::Dir* Image::FindDir(uint32_t ino) const {
  auto it = std::lower_bound(dirs_.begin(), dirs_.end(), ino,
                             [](const Dir& d, uint32_t v) { return d.ino < v; });
  return it != dirs_.end() && it->ino == ino ? &*it : nullptr;
}

uint32_t Image::DirBlocks(const Dir& dir) const {
  return static_cast<uint32_t>((dir.size + kBlockBytes - 1) / kBlockBytes);
}

Status Image::ReadInodes(std::vector<uint8_t>* name_len) {
  const uint32_t n = inode_count_;
  // Threads for big trees only: a small one is read before a thread would start.
  const uint32_t threads = static_cast<uint32_t>(std::clamp<uint64_t>(
      std::min<uint64_t>(std::thread::hardware_concurrency(), n / 100000), 1, 8));
  std::vector<Status> status(threads);
  auto read_range = [&](uint32_t t) {
    const uint32_t begin = static_cast<uint32_t>(uint64_t{n} * t / threads);
    const uint32_t end = static_cast<uint32_t>(uint64_t{n} * (t + 1) / threads);
    ImageInode attr;
    for (uint32_t ino = begin; ino < end; ino++) {
      Status s = tree_->GetInode(ino, &attr);
      if (!s.ok()) {
        status[t] = s;
        return;
      }
      if (ino > 0 && (attr.name_len == 0 || attr.name_len > kNameMax)) {
        status[t] = Status::InvalidArgument("EROFS image: name of inode " + std::to_string(ino) +
                                            " is not 1 to 255 bytes");
        return;
      }
      (*name_len)[ino] = static_cast<uint8_t>(attr.name_len);
      if (IsDirMode(attr.mode)) {
        nid_[ino] = kDirMark;
        continue;
      }
      if (!IsRegMode(attr.mode) && !IsLinkMode(attr.mode)) {
        status[t] = Status::NotSupported("EROFS image: inode " + std::to_string(ino) +
                                         " is neither a file, a directory nor a symlink");
        return;
      }
      if (IsLinkMode(attr.mode) && (attr.size == 0 || attr.size >= kBlockBytes)) {
        status[t] = Status::InvalidArgument("EROFS image: symlink target of inode " +
                                            std::to_string(ino) + " is empty or over 4095 bytes");
        return;
      }
      const Shape shape = ShapeOf(ino, attr, nullptr);
      if (shape.blocks > std::numeric_limits<uint32_t>::max()) {
        status[t] = Status::NotSupported("EROFS image over 16 TiB (32-bit block addresses)");
        return;
      }
      nid_[ino] = static_cast<uint32_t>(SlotBytes(shape) / kSlotBytes);
      blk_[ino] = static_cast<uint32_t>(shape.blocks);
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < threads; t++) pool.emplace_back(read_range, t);
  read_range(0);
  for (auto& th : pool) th.join();
  for (const Status& s : status) DSFS_RETURN_IF_ERROR(s);
  return Status::OK();
}

Status Image::Layout() {
  const uint32_t n = tree_->inode_count();
  if (n == 0) return Status::InvalidArgument("EROFS image of an empty tree (no root)");
  inode_count_ = n;
  ImageInode attr;
  DSFS_RETURN_IF_ERROR(tree_->GetInode(0, &attr));
  if (!IsDirMode(attr.mode)) {
    return Status::InvalidArgument("EROFS image: the root is no directory");
  }
  // Compact inodes take their mtime from here; the root's is as likely as any to be shared.
  build_time_s_ = attr.mtime_s;
  build_time_ns_ = attr.mtime_ns;

  nid_.resize(uint64_t{n} + 1);
  blk_.resize(uint64_t{n} + 1);
  // Pass 1, on several threads: every inode read once. For all but directories nid_ holds its
  // slots and blk_ its data blocks (pass 2 turns both into positions); a directory is marked in
  // nid_, its shape waits for its children's names. name_len keeps each name's length for its
  // parent's entry blocks. (At 10M inodes the reads are most of a mount's time.)
  std::vector<uint8_t> name_len(n);
  DSFS_RETURN_IF_ERROR(ReadInodes(&name_len));

  // Pass 2, in inode order: directories laid out from their children's names, then every
  // inode's place.
  std::vector<std::pair<uint32_t, uint32_t>> parents;  // (child directory, its parent)
  first_slot_byte_ = options_.packed ? kFirstPackedSlotByte : kFirstSlotByte;
  uint64_t cur = first_slot_byte_;  // next free metadata byte
  uint64_t data = 0;                // next free data block
  uint64_t children = 0;
  bool ranges_sorted = true;
  uint64_t last_first = 0;
  for (uint32_t ino = 0; ino < n; ino++) {
    uint64_t slot, blocks;
    if (nid_[ino] & kDirMark) {
      DSFS_RETURN_IF_ERROR(tree_->GetInode(ino, &attr));
      Dir d{};
      d.ino = ino;
      d.parent = ino;  // the root's; others are set below
      DSFS_RETURN_IF_ERROR(LayoutDir(ino, attr, name_len, &d, &parents));
      children += d.child_count;
      if (d.child_count) {
        if (d.first_child < last_first) ranges_sorted = false;
        last_first = d.first_child;
      }
      dirs_.push_back(d);
      const Shape s = ShapeOf(ino, attr, &dirs_.back());
      slot = SlotBytes(s);
      blocks = s.blocks;
    } else {
      slot = uint64_t{nid_[ino]} * kSlotBytes;
      blocks = blk_[ino];
    }
    if (cur % kBlockBytes + slot > kBlockBytes) cur = RoundUp(cur, kBlockBytes);
    if (cur / kSlotBytes > std::numeric_limits<uint32_t>::max() - kSlotsPerBlock) {
      return Status::NotSupported("EROFS image: metadata over 128 GiB");
    }
    nid_[ino] = static_cast<uint32_t>(cur / kSlotBytes);
    cur += slot;
    blk_[ino] = static_cast<uint32_t>(data);
    data += blocks;
    if (data > std::numeric_limits<uint32_t>::max()) {
      return Status::NotSupported("EROFS image over 16 TiB (32-bit block addresses)");
    }
  }
  nid_[n] = static_cast<uint32_t>(cur / kSlotBytes);
  blk_[n] = static_cast<uint32_t>(data);
  data_blocks_ = static_cast<uint32_t>(data);
  if (options_.packed) DSFS_RETURN_IF_ERROR(LayoutPacked(&cur));
  const uint64_t meta_blocks = RoundUp(cur, kBlockBytes) / kBlockBytes;
  if (meta_blocks + data + packed_blocks_ > std::numeric_limits<uint32_t>::max()) {
    return Status::NotSupported("EROFS image over 16 TiB (32-bit block addresses)");
  }
  meta_blocks_ = static_cast<uint32_t>(meta_blocks);
  data_blocks_ = static_cast<uint32_t>(data);

  // Every inode but the root must be the child of exactly one directory: the ranges, all above
  // their directories and inside the tree, must not overlap and must add up to n - 1.
  if (children != n - 1) {
    return Status::InvalidArgument("EROFS image: the directories' children (" +
                                   std::to_string(children) + ") are not the tree's " +
                                   std::to_string(n - 1) + " non-root inodes");
  }
  std::vector<std::pair<uint32_t, uint32_t>> sorted_ranges;
  if (!ranges_sorted) {
    for (const Dir& d : dirs_) {
      if (d.child_count) sorted_ranges.emplace_back(d.first_child, d.child_count);
    }
    std::sort(sorted_ranges.begin(), sorted_ranges.end());
  }
  uint64_t end = 1;
  auto check_range = [&](uint32_t first, uint32_t count) {
    if (first < end) return false;
    end = uint64_t{first} + count;
    return true;
  };
  bool ok = true;
  if (ranges_sorted) {
    for (const Dir& d : dirs_) {
      if (d.child_count) ok = ok && check_range(d.first_child, d.child_count);
    }
  } else {
    for (const auto& [first, count] : sorted_ranges) ok = ok && check_range(first, count);
  }
  if (!ok) return Status::InvalidArgument("EROFS image: two directories share children");
  for (uint32_t i = 0; i < dirs_.size(); i++) {
    if (dirs_[i].child_count) by_first_child_.push_back(i);
  }
  if (!ranges_sorted) {
    std::sort(by_first_child_.begin(), by_first_child_.end(),
              [&](uint32_t a, uint32_t b) { return dirs_[a].first_child < dirs_[b].first_child; });
  }

  // ".." of each directory. Breadth-first numbering finds the directories in inode order.
  if (!std::is_sorted(parents.begin(), parents.end())) std::sort(parents.begin(), parents.end());
  for (const auto& [child, parent] : parents) {
    auto it = std::lower_bound(dirs_.begin(), dirs_.end(), child,
                               [](const Dir& d, uint32_t v) { return d.ino < v; });
    if (it == dirs_.end() || it->ino != child) {
      return Status::Corruption("EROFS image: the tree changed while being laid out");
    }
    it->parent = parent;
  }
  return Status::OK();
}

Status Image::LayoutDir(uint32_t ino, const ImageInode& attr, const std::vector<uint8_t>& name_len,
                        Dir* dir, std::vector<std::pair<uint32_t, uint32_t>>* parents) {
  const uint32_t n = inode_count_;
  dir->first_child = attr.first_child;
  dir->child_count = attr.child_count;
  if (attr.child_count &&
      (attr.first_child <= ino || uint64_t{attr.first_child} + attr.child_count > n)) {
    return Status::InvalidArgument("EROFS image: children of directory " + std::to_string(ino) +
                                   " are not after it inside the tree");
  }
  // "." and ".." sort among the children like any name (mkfs.erofs and the kernel's binary
  // search over blocks expect one bytewise order): find their places by binary search.
  std::string scratch;
  std::string_view name;
  Status status;
  auto lower_bound = [&](std::string_view key, uint32_t* pos) -> Status {
    uint32_t lo = 0, hi = attr.child_count;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      DSFS_RETURN_IF_ERROR(tree_->GetName(attr.first_child + mid, &scratch, &name));
      if (name == key) {
        return Status::InvalidArgument("EROFS image: directory " + std::to_string(ino) +
                                       " has a child named \"" + std::string(key) + "\"");
      }
      if (name < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    *pos = lo;
    return Status::OK();
  };
  DSFS_RETURN_IF_ERROR(lower_bound(".", &dir->dot));
  DSFS_RETURN_IF_ERROR(lower_bound("..", &dir->dotdot));

  // Dirents and names fill a block until the next entry does not fit; entries never span
  // blocks. The directory's size ends where the last block's names end (as mkfs.erofs sets it).
  dir->nlink = 2;
  dir->first_block = static_cast<uint32_t>(dir_block_entry_.size());
  dir_block_entry_.push_back(0);
  uint64_t full_blocks = 0;
  uint32_t used = 0;
  const uint32_t entries = attr.child_count + 2;
  for (uint32_t e = 0; e < entries; e++) {
    uint32_t child = 0;
    uint32_t bytes;
    switch (EntryAt(*dir, e, &child)) {
      case EntryKind::kDot:
        bytes = 1;
        break;
      case EntryKind::kDotDot:
        bytes = 2;
        break;
      default:
        // Children come after their directory: pass 2 has not placed them yet.
        bytes = name_len[child];
        if (nid_[child] & kDirMark) {
          dir->nlink++;
          parents->emplace_back(child, ino);
        }
    }
    const uint32_t len = sizeof(Dirent) + bytes;
    if (used + len > kBlockBytes) {
      full_blocks++;
      used = 0;
      dir_block_entry_.push_back(e);
    }
    used += len;
  }
  dir->size = full_blocks * kBlockBytes + used;
  return Status::OK();
}

void Image::WriteSuperBlock(char* dst) const {
  SuperBlock sb{};
  sb.magic = kSuperMagic;
  // No EROFS_FEATURE_COMPAT_SB_CHKSUM: its crc32c covers the rest of block 0, i.e. the first
  // inodes and their inline data, which would then have to be read from the store at Build. It
  // would guard nothing: this block is computed, never stored, and what it is computed from is
  // checksummed by the store.
  sb.feature_compat = 0;
  if (options_.packed) {
    // Zstd pclusters of any number of blocks, the data at their ends (zero padding), and the
    // packed inode; the zstd configuration follows the superblock.
    sb.feature_incompat = kIncompatZeroPadding | kIncompatComprCfgs | kIncompatFragments;
    sb.available_compr_algs = 1u << kAlgorithmZstd;
    sb.packed_nid = packed_off_ / kSlotBytes;
    ZstdCfgs cfgs{};
    cfgs.size = sizeof(ZstdCfgs) - sizeof(cfgs.size);
    cfgs.windowlog = 20 - 10;  // the 1 MiB window the kernel allows at most
    std::memcpy(dst + sizeof(SuperBlock), &cfgs, sizeof(cfgs));
  }
  sb.blkszbits = kBlockBits;
  sb.root_nid = static_cast<uint16_t>(nid_[0]);
  sb.inos = inode_count_;
  sb.build_time = static_cast<uint64_t>(build_time_s_);
  sb.build_time_nsec = build_time_ns_;
  sb.blocks = meta_blocks_ + data_blocks_ + packed_blocks_;
  sb.meta_blkaddr = 0;
  sb.xattr_blkaddr = 0;
  std::memcpy(sb.uuid, options_.uuid, sizeof(sb.uuid));
  std::memcpy(sb.volume_name, options_.volume_name.data(), options_.volume_name.size());
  std::memcpy(dst, &sb, sizeof(sb));
}

Status Image::WriteInode(uint32_t ino, char* dst) const {
  ImageInode attr;
  DSFS_RETURN_IF_ERROR(tree_->GetInode(ino, &attr));
  const Dir* dir = IsDirMode(attr.mode) ? FindDir(ino) : nullptr;
  if (IsDirMode(attr.mode) && !dir) return Status::Corruption("EROFS image: tree changed");
  const Shape s = ShapeOf(ino, attr, dir);
  const uint16_t layout = s.fragment ? kLayoutCompressedFull
                          : s.tail   ? kLayoutFlatInline
                                     : kLayoutFlatPlain;
  // A compressed inode's field holds its compressed blocks instead: a fragment has none.
  const uint32_t blkaddr = s.fragment ? 0 : s.blocks ? meta_blocks_ + blk_[ino] : kNullAddr;
  if (s.isize == sizeof(InodeCompact)) {
    InodeCompact i{};
    i.i_format = Format(kInodeCompact, layout);
    i.i_mode = static_cast<uint16_t>(attr.mode);
    i.i_nlink = static_cast<uint16_t>(s.nlink);
    i.i_size = static_cast<uint32_t>(s.size);
    i.i_raw_blkaddr = blkaddr;
    i.i_ino = ino;
    i.i_uid = static_cast<uint16_t>(attr.uid);
    i.i_gid = static_cast<uint16_t>(attr.gid);
    std::memcpy(dst, &i, sizeof(i));
  } else {
    InodeExtended i{};
    i.i_format = Format(kInodeExtended, layout);
    i.i_mode = static_cast<uint16_t>(attr.mode);
    i.i_size = s.size;
    i.i_raw_blkaddr = blkaddr;
    i.i_ino = ino;
    i.i_uid = attr.uid;
    i.i_gid = attr.gid;
    i.i_mtime = static_cast<uint64_t>(attr.mtime_s);
    i.i_mtime_nsec = attr.mtime_ns;
    i.i_nlink = s.nlink;
    std::memcpy(dst, &i, sizeof(i));
  }
  if (s.fragment) {
    uint64_t e = 0, off = 0;
    DSFS_RETURN_IF_ERROR(options_.packed->FragmentOf(ino, &e, &off));
    // Within the packed inode (a file of several chunks may span extents: the kernel reads
    // a fragment across pclusters).
    if (e + 1 >= ext_start_.size() || off > ext_start_[e + 1] - ext_start_[e] ||
        s.size > ext_start_.back() - ext_start_[e] - off) {
      return Status::Corruption("EROFS image: inode " + std::to_string(ino) +
                                " lies outside its packed extent");
    }
    const uint64_t header = (ext_start_[e] + off) | kFragmentInodeBit;
    std::memcpy(dst + s.isize, &header, sizeof(header));
    return Status::OK();
  }
  if (!s.tail) return Status::OK();
  char* tail = dst + s.isize;
  if (dir) return DirBlock(*dir, static_cast<uint32_t>(s.blocks), s.tail, tail);
  return tree_->ReadData(ino, s.size - s.tail, s.tail, tail);
}

Status Image::MetaBlock(uint32_t block, char* dst) const {
  std::memset(dst, 0, kBlockBytes);
  if (block == 0) WriteSuperBlock(dst + kSuperOffset);
  if (options_.packed) WritePackedMeta(block, dst);
  const uint64_t lo = uint64_t{block} * kSlotsPerBlock, hi = lo + kSlotsPerBlock;
  const auto end = nid_.begin() + inode_count_;
  for (auto it = std::lower_bound(nid_.begin(), end, lo); it != end && *it < hi; ++it) {
    DSFS_RETURN_IF_ERROR(
        WriteInode(static_cast<uint32_t>(it - nid_.begin()), dst + (*it - lo) * kSlotBytes));
  }
  return Status::OK();
}

Status Image::DirBlock(const Dir& dir, uint32_t index, uint32_t len, char* dst) const {
  const uint32_t blocks = DirBlocks(dir);
  const uint32_t e0 = dir_block_entry_[dir.first_block + index];
  const uint32_t e1 =
      index + 1 < blocks ? dir_block_entry_[dir.first_block + index + 1] : dir.child_count + 2;
  uint32_t nameoff = (e1 - e0) * sizeof(Dirent);
  if (nameoff > len) return Status::Corruption("EROFS image: tree changed");
  std::string scratch;
  std::string_view name;
  ImageInode attr;
  Dirent* de = reinterpret_cast<Dirent*>(dst);
  for (uint32_t e = e0; e < e1; e++, de++) {
    uint32_t child = 0;
    Dirent d{};
    switch (EntryAt(dir, e, &child)) {
      case EntryKind::kDot:
        d.nid = nid_[dir.ino];
        d.file_type = kFtDir;
        name = ".";
        break;
      case EntryKind::kDotDot:
        d.nid = nid_[dir.parent];
        d.file_type = kFtDir;
        name = "..";
        break;
      default:
        DSFS_RETURN_IF_ERROR(tree_->GetInode(child, &attr));
        DSFS_RETURN_IF_ERROR(tree_->GetName(child, &scratch, &name));
        d.nid = nid_[child];
        d.file_type = FileType(attr.mode);
    }
    d.nameoff = static_cast<uint16_t>(nameoff);
    if (nameoff + name.size() > len) return Status::Corruption("EROFS image: tree changed");
    std::memcpy(de, &d, sizeof(d));
    std::memcpy(dst + nameoff, name.data(), name.size());
    nameoff += static_cast<uint32_t>(name.size());
  }
  // The kernel takes the last name to end at the first NUL or at the directory's end.
  std::memset(dst + nameoff, 0, len - nameoff);
  return Status::OK();
}

Status Image::DataRange(uint32_t ino, uint64_t offset, size_t len, char* dst) const {
  ImageInode attr;
  DSFS_RETURN_IF_ERROR(tree_->GetInode(ino, &attr));
  const Dir* dir = IsDirMode(attr.mode) ? FindDir(ino) : nullptr;
  if (IsDirMode(attr.mode) && !dir) return Status::Corruption("EROFS image: tree changed");
  const Shape s = ShapeOf(ino, attr, dir);
  uint64_t pos = offset - (uint64_t{meta_blocks_} + blk_[ino]) * kBlockBytes;  // in the inode
  if (dir) {
    while (len > 0) {
      const uint32_t index = static_cast<uint32_t>(pos / kBlockBytes);
      const uint32_t in = static_cast<uint32_t>(pos % kBlockBytes);
      const size_t m = std::min<size_t>(len, kBlockBytes - in);
      const uint32_t used = static_cast<uint32_t>(
          std::min<uint64_t>(kBlockBytes, s.size - uint64_t{index} * kBlockBytes));
      if (in == 0 && m == kBlockBytes) {
        DSFS_RETURN_IF_ERROR(DirBlock(*dir, index, used, dst));
        std::memset(dst + used, 0, kBlockBytes - used);
      } else {
        char buf[kBlockBytes];
        DSFS_RETURN_IF_ERROR(DirBlock(*dir, index, used, buf));
        std::memset(buf + used, 0, kBlockBytes - used);
        std::memcpy(dst, buf + in, m);
      }
      dst += m;
      pos += m;
      len -= m;
    }
    return Status::OK();
  }
  // A file's bytes in the data area: all of it, or all but the inline tail.
  const uint64_t data_bytes = s.tail ? s.blocks * kBlockBytes : s.size;
  size_t from_file =
      pos < data_bytes ? static_cast<size_t>(std::min<uint64_t>(len, data_bytes - pos)) : 0;
  if (from_file) DSFS_RETURN_IF_ERROR(tree_->ReadData(ino, pos, from_file, dst));
  std::memset(dst + from_file, 0, len - from_file);
  return Status::OK();
}

uint32_t Image::OwnerOfSlot(uint64_t slot) const {
  const auto end = nid_.begin() + inode_count_;
  return static_cast<uint32_t>(std::upper_bound(nid_.begin(), end, slot) - nid_.begin() - 1);
}

bool Image::DirOfInode(uint32_t ino, uint32_t* dir) const {
  if (FindDir(ino)) {
    *dir = ino;
    return true;
  }
  auto it = std::upper_bound(by_first_child_.begin(), by_first_child_.end(), ino,
                             [&](uint32_t v, uint32_t d) { return v < dirs_[d].first_child; });
  if (it == by_first_child_.begin()) return false;
  const Dir& parent = dirs_[*(it - 1)];
  if (ino >= uint64_t{parent.first_child} + parent.child_count) return false;
  *dir = parent.ino;
  return true;
}

bool Image::DirOfByte(uint64_t offset, uint32_t* dir) const {
  const uint64_t meta_end = uint64_t{meta_blocks_} * kBlockBytes;
  if (offset >= size_bytes()) return false;
  if (offset < meta_end) {
    // An inode (and maybe its inline data) is being read: its slot's owner, as in MetaBlock.
    if (offset < first_slot_byte_) return DirOfInode(0, dir);
    if (offset >= uint64_t{nid_[inode_count_]} * kSlotBytes) return false;  // the packed inode
    return DirOfInode(OwnerOfSlot(offset / kSlotBytes), dir);
  }
  const uint64_t rel = (offset - meta_end) / kBlockBytes;
  if (rel >= data_blocks_) return false;  // a pcluster of a compressed image
  // The owner of the block, as in Read.
  const uint32_t ino =
      static_cast<uint32_t>(std::upper_bound(blk_.begin(), blk_.end(), rel) - blk_.begin() - 1);
  return DirOfInode(ino, dir);
}

void Image::ChildrenData(uint32_t dir, uint64_t* offset, uint64_t* len) const {
  *offset = *len = 0;
  const Dir* d = FindDir(dir);
  if (!d || d->child_count == 0) return;
  const uint64_t first = blk_[d->first_child], end = blk_[d->first_child + d->child_count];
  *offset = (uint64_t{meta_blocks_} + first) * kBlockBytes;
  *len = (end - first) * kBlockBytes;
}

void Image::ChildrenMeta(uint32_t dir, uint64_t* offset, uint64_t* len) const {
  *offset = *len = 0;
  const Dir* d = FindDir(dir);
  if (!d || d->child_count == 0) return;
  const uint64_t first = uint64_t{nid_[d->first_child]} * kSlotBytes;
  const uint64_t end = uint64_t{nid_[d->first_child + d->child_count]} * kSlotBytes;
  *offset = first / kBlockBytes * kBlockBytes;
  *len = RoundUp(end, kBlockBytes) - *offset;
}

void Image::ForEachChildData(uint32_t dir,
                             const std::function<void(uint64_t offset, uint64_t len)>& fn) const {
  const Dir* d = FindDir(dir);
  if (!d) return;
  for (uint32_t i = d->first_child; i < d->first_child + d->child_count; ++i) {
    const uint64_t first = blk_[i], end = blk_[i + 1];
    if (end > first)
      fn((uint64_t{meta_blocks_} + first) * kBlockBytes, (end - first) * kBlockBytes);
  }
}

Status Image::Read(uint64_t offset, size_t len, char* dst) const {
  const uint64_t total = size_bytes();
  if (offset > total || len > total - offset) {
    return Status::InvalidArgument("EROFS image read past its end");
  }
  const uint64_t meta_end = uint64_t{meta_blocks_} * kBlockBytes;
  while (len > 0) {
    size_t m;
    if (offset < meta_end) {
      const uint32_t block = static_cast<uint32_t>(offset / kBlockBytes);
      const uint32_t in = static_cast<uint32_t>(offset % kBlockBytes);
      m = std::min<size_t>(len, kBlockBytes - in);
      if (in == 0 && m == kBlockBytes) {
        DSFS_RETURN_IF_ERROR(MetaBlock(block, dst));
      } else {
        char buf[kBlockBytes];
        DSFS_RETURN_IF_ERROR(MetaBlock(block, buf));
        std::memcpy(dst, buf + in, m);
      }
    } else {
      // The owner of a data block: the last inode whose first block is at or before it (inodes
      // with no blocks share their successor's first block and come before it).
      const uint64_t rel = (offset - meta_end) / kBlockBytes;
      if (rel >= data_blocks_) {  // the pclusters of a compressed image
        const uint64_t area = offset - meta_end - uint64_t{data_blocks_} * kBlockBytes;
        DSFS_RETURN_IF_ERROR(PackedRange(area, len, dst));
        return Status::OK();
      }
      const auto it = std::upper_bound(blk_.begin(), blk_.end(), rel);
      const uint32_t ino = static_cast<uint32_t>(it - blk_.begin() - 1);
      const uint64_t end = (uint64_t{meta_blocks_} + *it) * kBlockBytes;
      m = static_cast<size_t>(std::min<uint64_t>(len, end - offset));
      DSFS_RETURN_IF_ERROR(DataRange(ino, offset, m, dst));
    }
    offset += m;
    dst += m;
    len -= m;
  }
  return Status::OK();
}

Status Image::LayoutPacked(uint64_t* cur) {
  // The extents: each a pcluster of whole blocks, its frame at the end (the kernel skips the
  // zeros before it within the first block), the packed inode's bytes in order.
  ext_start_.assign(1, 0);
  ext_blk_.assign(1, 0);
  ext_frame_.clear();
  uint64_t blocks = 0;
  DSFS_RETURN_IF_ERROR(options_.packed->ForEachExtent([&](uint64_t decoded, uint32_t frame) {
    const uint64_t e = ext_frame_.size();
    if (decoded == 0 || frame == 0 || decoded > kPclusterMaxDecoded || frame > kPclusterMaxBytes) {
      return Status::NotSupported("packed extent " + std::to_string(e) + " (" +
                                  std::to_string(decoded) + " bytes, a " + std::to_string(frame) +
                                  "-byte frame) is no EROFS pcluster (1 MiB, 12 MiB at most)");
    }
    blocks += RoundUp(frame, kBlockBytes) / kBlockBytes;
    if (blocks > std::numeric_limits<uint32_t>::max() || ext_start_.size() > (1u << 31)) {
      return Status::NotSupported("EROFS image over 16 TiB (32-bit block addresses)");
    }
    ext_start_.push_back(ext_start_.back() + decoded);
    ext_blk_.push_back(static_cast<uint32_t>(blocks));
    ext_frame_.push_back(frame);
    return Status::OK();
  }));
  const uint64_t size = ext_start_.back();
  const uint64_t lclusters = RoundUp(size, kBlockBytes) / kBlockBytes;
  // One HEAD per lcluster (4 KiB of the packed inode), and a NONHEAD after it to carry the
  // block count of a pcluster of more than one block (else the kernel takes one block).
  for (size_t e = 0; e + 1 < ext_start_.size(); ++e) {
    const uint64_t head = ext_start_[e] / kBlockBytes;
    const uint64_t next = e + 2 < ext_start_.size() ? ext_start_[e + 1] / kBlockBytes : lclusters;
    const bool big = ext_blk_[e + 1] - ext_blk_[e] > 1;
    if (next <= head || (big && next < head + 2)) {
      return Status::NotSupported("packed extent " + std::to_string(e) +
                                  " is too small for an EROFS pcluster of its own");
    }
  }
  packed_blocks_ = static_cast<uint32_t>(blocks);
  // The packed inode after the tree's: its inode and map header in one block.
  if (*cur % kBlockBytes + kPackedIndexStart > kBlockBytes) *cur = RoundUp(*cur, kBlockBytes);
  packed_off_ = *cur;
  packed_end_ = packed_off_ + kPackedIndexStart + lclusters * sizeof(LclusterIndex);
  if (packed_end_ / kSlotBytes > std::numeric_limits<uint32_t>::max()) {
    return Status::NotSupported("EROFS image: metadata over 128 GiB");
  }
  *cur = packed_end_;
  return Status::OK();
}

LclusterIndex Image::IndexOf(uint64_t lcn) const {
  // The extent whose head is at or before this lcluster: the last one starting before its end.
  const uint64_t end = (lcn + 1) * kBlockBytes;
  const size_t e = static_cast<size_t>(
      std::lower_bound(ext_start_.begin(), ext_start_.end() - 1, end) - ext_start_.begin() - 1);
  const uint64_t head = ext_start_[e] / kBlockBytes;
  LclusterIndex li{};
  if (head == lcn) {
    li.di_advise = kLclusterHead1;
    li.di_clusterofs = static_cast<uint16_t>(ext_start_[e] % kBlockBytes);
    li.di_u.blkaddr = meta_blocks_ + data_blocks_ + ext_blk_[e];
    return li;
  }
  const uint64_t lclusters = RoundUp(ext_start_.back(), kBlockBytes) / kBlockBytes;
  const uint64_t next = e + 2 < ext_start_.size() ? ext_start_[e + 1] / kBlockBytes : lclusters;
  li.di_advise = kLclusterNonHead;
  li.di_u.delta[0] = static_cast<uint16_t>(
      lcn == head + 1 ? kD0Cblkcnt | (ext_blk_[e + 1] - ext_blk_[e]) : lcn - head);
  li.di_u.delta[1] = static_cast<uint16_t>(next - lcn);
  return li;
}

void Image::WritePackedMeta(uint32_t block, char* dst) const {
  const uint64_t lo = std::max<uint64_t>(packed_off_, uint64_t{block} * kBlockBytes);
  const uint64_t hi = std::min<uint64_t>(packed_end_, (uint64_t{block} + 1) * kBlockBytes);
  if (lo >= hi) return;
  char* base = dst - uint64_t{block} * kBlockBytes;  // dst as if it were the whole area
  if (lo == packed_off_) {
    InodeExtended i{};
    i.i_format = Format(kInodeExtended, kLayoutCompressedFull);
    i.i_mode = 0100000;  // a regular file no directory names
    i.i_size = ext_start_.back();
    i.i_raw_blkaddr = packed_blocks_;  // compressed blocks
    i.i_ino = inode_count_;
    i.i_mtime = static_cast<uint64_t>(build_time_s_);
    i.i_mtime_nsec = build_time_ns_;
    i.i_nlink = 1;
    MapHeader h{};
    h.h_advise = kAdviseBigPcluster1;
    h.h_algorithmtype = kAlgorithmZstd;
    std::memcpy(base + packed_off_, &i, sizeof(i));
    std::memcpy(base + packed_off_ + sizeof(i), &h, sizeof(h));
  }
  const uint64_t first = packed_off_ + kPackedIndexStart;
  for (uint64_t pos = std::max(lo, first); pos < hi; pos += sizeof(LclusterIndex)) {
    const LclusterIndex li = IndexOf((pos - first) / sizeof(LclusterIndex));
    std::memcpy(base + pos, &li, sizeof(li));
  }
}

Status Image::PackedRange(uint64_t offset, size_t len, char* dst) const {
  while (len > 0) {
    const uint64_t block = offset / kBlockBytes;
    const size_t e = static_cast<size_t>(std::upper_bound(ext_blk_.begin(), ext_blk_.end(), block) -
                                         ext_blk_.begin() - 1);
    if (e >= ext_frame_.size()) return Status::InvalidArgument("EROFS image read past its end");
    const uint64_t start = uint64_t{ext_blk_[e]} * kBlockBytes;
    const uint64_t end = uint64_t{ext_blk_[e + 1]} * kBlockBytes;
    const uint64_t pad = end - start - ext_frame_[e];  // zeros before the frame
    const size_t m = static_cast<size_t>(std::min<uint64_t>(len, end - offset));
    const uint64_t in = offset - start;
    const size_t zeros = in < pad ? static_cast<size_t>(std::min<uint64_t>(m, pad - in)) : 0;
    std::memset(dst, 0, zeros);
    if (m > zeros) {
      DSFS_RETURN_IF_ERROR(options_.packed->ReadFrame(e, in + zeros - pad, m - zeros, dst + zeros));
    }
    offset += m;
    dst += m;
    len -= m;
  }
  return Status::OK();
}

Status CopyTargetRange(std::string_view target, uint64_t offset, size_t len, char* dst) {
  if (offset > target.size() || len > target.size() - offset) {
    return Status::InvalidArgument("EROFS image: read past a symlink target");
  }
  std::memcpy(dst, target.data() + offset, len);
  return Status::OK();
}

Status CopyFromReads(const ReadFn& read, uint64_t offset, size_t len, char* dst,
                     std::string_view what) {
  while (len > 0) {
    std::string_view out;
    DSFS_RETURN_IF_ERROR(read(offset, len, &out));
    if (out.empty()) return Status::Corruption(std::string(what) + " shorter than its size");
    const size_t m = std::min(out.size(), len);
    std::memcpy(dst, out.data(), m);
    dst += m;
    offset += m;
    len -= m;
  }
  return Status::OK();
}

}  // namespace dsfs::erofs
