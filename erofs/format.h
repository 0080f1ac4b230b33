// The EROFS on-disk structures dsfs writes (uncompressed images only), as the Linux kernel's
// fs/erofs/erofs_fs.h and Documentation/filesystems/erofs.rst define them. All fields are
// little-endian; dsfs only builds on little-endian hosts (checked below), so the structs are
// filled in place. Internal to erofs/: the public interface is erofs/image.h.
#pragma once

#include <bit>
#include <cstdint>

namespace dsfs::erofs {

static_assert(std::endian::native == std::endian::little,
              "EROFS images are little-endian; this code fills the structs in place");

inline constexpr uint32_t kSuperMagic = 0xE0F5E1E2;
inline constexpr uint32_t kSuperOffset = 1024;  // the superblock's byte offset in block 0
inline constexpr uint32_t kBlockBits = 12;      // 4 KiB blocks: the page size, as the kernel wants
inline constexpr uint32_t kBlockBytes = 1u << kBlockBits;
inline constexpr uint32_t kSlotBytes = 32;  // nid unit: inode offset = meta start + nid * 32
inline constexpr uint32_t kNameMax = 255;
inline constexpr uint32_t kNullAddr = 0xFFFFFFFF;  // raw_blkaddr of an inode with no data block

// i_format: bit 0 the inode version, bits 1-3 the data layout.
inline constexpr uint16_t kInodeCompact = 0;
inline constexpr uint16_t kInodeExtended = 1;
inline constexpr uint16_t kLayoutFlatPlain = 0;   // data in consecutive blocks at raw_blkaddr
inline constexpr uint16_t kLayoutFlatInline = 2;  // same, the last partial block after the inode
inline constexpr uint16_t Format(uint16_t version, uint16_t layout) {
  return static_cast<uint16_t>(version | (layout << 1));
}

// erofs_dirent file_type.
inline constexpr uint8_t kFtUnknown = 0, kFtRegFile = 1, kFtDir = 2, kFtChrdev = 3, kFtBlkdev = 4,
                         kFtFifo = 5, kFtSock = 6, kFtSymlink = 7;

struct SuperBlock {
  uint32_t magic;
  uint32_t checksum;  // crc32c of the block from kSuperOffset on, if feature_compat says so
  uint32_t feature_compat;
  uint8_t blkszbits;
  uint8_t sb_extslots;
  uint16_t root_nid;
  uint64_t inos;
  uint64_t build_time;  // compact inodes' mtime
  uint32_t build_time_nsec;
  uint32_t blocks;
  uint32_t meta_blkaddr;
  uint32_t xattr_blkaddr;
  uint8_t uuid[16];
  uint8_t volume_name[16];
  uint32_t feature_incompat;
  uint16_t available_compr_algs;
  uint16_t extra_devices;
  uint16_t devt_slotoff;
  uint8_t dirblkbits;
  uint8_t xattr_prefix_count;
  uint32_t xattr_prefix_start;
  uint64_t packed_nid;
  uint8_t xattr_filter_reserved;
  uint8_t reserved[23];
};
static_assert(sizeof(SuperBlock) == 128);

struct InodeCompact {
  uint16_t i_format;
  uint16_t i_xattr_icount;
  uint16_t i_mode;
  uint16_t i_nlink;
  uint32_t i_size;
  uint32_t i_reserved;  // newer kernels: mtime - build_time; always 0 here
  uint32_t i_raw_blkaddr;
  uint32_t i_ino;  // only for 32-bit stat
  uint16_t i_uid;
  uint16_t i_gid;
  uint32_t i_reserved2;
};
static_assert(sizeof(InodeCompact) == 32);

struct InodeExtended {
  uint16_t i_format;
  uint16_t i_xattr_icount;
  uint16_t i_mode;
  uint16_t i_reserved;
  uint64_t i_size;
  uint32_t i_raw_blkaddr;
  uint32_t i_ino;
  uint32_t i_uid;
  uint32_t i_gid;
  uint64_t i_mtime;
  uint32_t i_mtime_nsec;
  uint32_t i_nlink;
  uint8_t i_reserved2[16];
};
static_assert(sizeof(InodeExtended) == 64);

#pragma pack(push, 1)
struct Dirent {
  uint64_t nid;
  uint16_t nameoff;  // offset of the name in the block; the first one / 12 = dirents in it
  uint8_t file_type;
  uint8_t reserved;
};
#pragma pack(pop)
static_assert(sizeof(Dirent) == 12);

}  // namespace dsfs::erofs
