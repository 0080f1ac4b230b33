// The EROFS on-disk structures dsfs writes, as the Linux kernel's
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
inline constexpr uint16_t kLayoutCompressedFull = 1;  // z_erofs_map_header, 8-byte lcluster indexes
inline constexpr uint16_t Format(uint16_t version, uint16_t layout) {
  return static_cast<uint16_t>(version | (layout << 1));
}

// erofs_dirent file_type.
inline constexpr uint8_t kFtUnknown = 0, kFtRegFile = 1, kFtDir = 2, kFtChrdev = 3, kFtBlkdev = 4,
                         kFtFifo = 5, kFtSock = 6, kFtSymlink = 7;

// Compressed images (erofs-utils include/erofs_fs.h; docs/kernel.md): feature_incompat bits,
// the zstd algorithm, z_erofs_map_header, lcluster indexes.
inline constexpr uint32_t kIncompatZeroPadding = 0x1;  // compressed data at a pcluster's end
inline constexpr uint32_t kIncompatComprCfgs = 0x2;    // also BIG_PCLUSTER
inline constexpr uint32_t kIncompatFragments = 0x20;
inline constexpr uint16_t kAlgorithmZstd = 3;
inline constexpr uint16_t kAdviseBigPcluster1 = 0x2;
inline constexpr uint16_t kLclusterHead1 = 1, kLclusterNonHead = 2;
inline constexpr uint16_t kD0Cblkcnt = 1u << 11;
inline constexpr uint64_t kFragmentInodeBit = 1ull << 63;  // of a file's 8-byte map header
inline constexpr uint32_t kPclusterMaxBytes = 1u << 20;
inline constexpr uint64_t kPclusterMaxDecoded = 12ull << 20;

struct MapHeader {
  uint32_t h_fragmentoff;
  uint16_t h_advise;
  uint8_t h_algorithmtype;  // HEAD1 in bits 0-3, HEAD2 in 4-7
  uint8_t h_clusterbits;    // lcluster bits - block bits
};
static_assert(sizeof(MapHeader) == 8);

struct LclusterIndex {
  uint16_t di_advise;  // the type in bits 0-1
  uint16_t di_clusterofs;
  union {
    uint32_t blkaddr;   // HEAD
    uint16_t delta[2];  // NONHEAD: to its HEAD (or D0_CBLKCNT | blocks), to the next HEAD
  } di_u;
};
static_assert(sizeof(LclusterIndex) == 8);

struct ZstdCfgs {
  uint16_t size;  // of what follows: 6
  uint8_t format;
  uint8_t windowlog;  // log2(window) - 10
  uint8_t reserved[4];
};
static_assert(sizeof(ZstdCfgs) == 8);

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
