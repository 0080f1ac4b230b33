// Store: read access to a packed dsfs store (metadata and file contents), independent of FUSE.
//
// Thread safety: after Open, every const method may be called from any number of threads.
// Everything returned as a string_view points into the store (the memory map) and stays valid
// while the Store lives, but for names and symlink targets of a version 3 store (GetName,
// ReadLink): those point into a decompressed metadata segment, and stay valid through at
// least the calling thread's next SegmentedTable::kNameRingSlots - 1 (15) GetName/ReadLink
// calls (of any store); copy a name kept longer.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "backend/kv_open.h"
#include "cache/byte_cache.h"
#include "image/image.h"
#include "store/codec.h"
#include "store/format.h"
#include "store/segments.h"

namespace dsfs {

struct StoreOptions {
  // Decompressed chunks are kept here when set, in a namespace of the Store's own (the cache is
  // shared with the other clients whoever assembles the mount gives it to; the Store keeps a
  // reference).
  std::shared_ptr<ByteCache> cache;
  // How the key-value store is opened (random access; for a store in object storage its disk
  // cache, retry budget, signing and URL style).
  KvReaderOptions kv;
  // Decompressed metadata segments (version 3 stores) are kept in a cache of their own of at
  // most this many bytes; 0: DefaultMetadataCacheBytes().
  uint64_t metadata_cache_bytes = 0;
};

// The default bound of a Store's metadata segment cache: a 32nd of the memory limit
// (common/memory_limit.h, MemoryBudgets), at least 32 MiB unless that is more than an eighth
// of it (the whole tree of 1M files takes ~25 MB decompressed, of 10M ~290 MB).
uint64_t DefaultMetadataCacheBytes();

// Where the bytes of a read live: a cached chunk (pinned here), the store's memory map, or
// bytes assembled in `bytes`. Reuse one per thread to avoid allocations.
struct ReadBuffer {
  std::string bytes;
  ByteCache::Value pin;
};

class Store {
 public:
  static constexpr uint32_t kRootIno = 1;

  // Opens the store at `path`, detecting its backend. Errors name the path and say what is
  // wrong in one line (missing, not a dsfs store, unsupported version, corrupt, truncated).
  static Status Open(const std::string& path, const StoreOptions& options,
                     std::unique_ptr<Store>* store);
  // True if `path` holds a dsfs store: a store of a known backend with dsfs's header record
  // (its magic; the rest may be damaged, and for a store that no longer opens, the magic found
  // in its files). What `pack --force` and `convert --force` replace.
  static bool HasStoreHeader(const std::string& path);
  // Same, over an already opened key-value reader (tests use memory and fault-injecting ones).
  static Status Open(std::unique_ptr<KvReader> kv, std::unique_ptr<Store>* store,
                     std::shared_ptr<ByteCache> cache = nullptr, uint64_t metadata_cache_bytes = 0);

  const StoreHeader& header() const { return header_; }
  std::string_view backend_name() const { return kv_->Name(); }
  // The backend's own counters (KvReader::Counters): empty for local stores.
  std::vector<std::pair<std::string, uint64_t>> backend_counters() const { return kv_->Counters(); }
  uint64_t inode_count() const { return header_.inode_count; }
  // The page cache the files fill when read as files, at least: a page for each (4 KiB) or
  // their bytes, whichever is more.
  uint64_t PageCacheFootprintBytes() const;
  // A RAM cache of this capacity keeps every file once read (their bytes, the cache's charge
  // for each entry, an eighth to spare for its shards' unevenness): a miss then decompresses a
  // whole group, whose records all stay until they are read.
  uint64_t CacheBytesToHoldAll() const {
    return header_.file_bytes + header_.file_bytes / 8 +
           header_.file_count * ByteCache::kEntryOverhead;
  }

  // True for a store in object storage (KvReader::remote()): what is not in memory is fetched
  // over the network, and may take as long as the backend's deadline.
  bool remote() const { return kv_->remote(); }
  // Whether a call may fetch from a remote backend, because what it needs is not in memory
  // (the RAM cache, the metadata segments loaded): the FUSE layer serves such requests off
  // its request threads. Hints (the caches may change right after), never fetching
  // themselves; false at once for a local backend.
  //   InodeMayFetch:   GetInode(ino) (its inode segment)
  //   NamesMayFetch:   the name pool's bytes [off, off + len) (GetName, ReadLink)
  //   EntriesMayFetch: Lookup in directory `dir` and a listing of it (its record, its
  //                    entries' records and names)
  //   ReadMayFetch:    Read(rec, offset, size) (a chunk not in the RAM cache)
  //   PixelsMayFetch:  the decoded pixels of image `rec`, from ReadPixels or its original
  bool InodeMayFetch(uint32_t ino) const;
  bool NamesMayFetch(uint64_t off, uint64_t len) const;
  bool EntriesMayFetch(uint32_t dir) const;
  bool ReadMayFetch(const InodeRecord& rec, uint64_t offset, uint64_t size) const;
  bool PixelsMayFetch(const InodeRecord& rec) const;

  // Copies out the record of inode `ino`. NotFound if no such inode; Corruption if its
  // metadata fails its checksum. Each call decodes (and checks) the record once: inode_decodes().
  Status GetInode(uint32_t ino, InodeRecord* rec) const;
  // Records GetInode has decoded on the calling thread (for any store) since the thread
  // started: what a request costs, counted without a shared counter on the lookup path (tests).
  uint64_t inode_decodes() const;
  Status GetName(const InodeRecord& rec, std::string_view* name) const;
  // Symlink target. InvalidArgument if `rec` is not a symlink.
  Status ReadLink(const InodeRecord& rec, std::string_view* target) const;
  // Finds `name` among the entries of directory `dir` (binary search). NotFound if absent,
  // InvalidArgument if `dir` is not a directory.
  Status Lookup(uint32_t dir, std::string_view name, uint32_t* ino, InodeRecord* rec) const;
  // Resolves a path relative to the root ("a/b", "/a/b", "" = root); symlinks are not followed.
  Status LookupPath(std::string_view path, uint32_t* ino, InodeRecord* rec) const;
  // Walks up the parent fields from inode `ino` to directory `top`: calls `visit(i, rec)` for
  // `ino` and each directory above it, `top` included, child first, and stops at the first
  // error it returns. The one walk up the tree. *reached is false if a parent field breaks the
  // chain before `top` (parents have smaller numbers, breadth first, so a damaged one cannot
  // loop): the walk ends there without an error.
  Status WalkUp(uint32_t ino, uint32_t top,
                const std::function<Status(uint32_t ino, const InodeRecord& rec)>& visit,
                bool* reached) const;
  // The path of inode `ino` relative to directory `top` ("a/b.jpg"; "" for `top` itself).
  // NotFound ("not below its directory") if the walk up does not reach `top`; on any error
  // *path holds the part found (its last components).
  Status PathOf(uint32_t ino, uint32_t top, std::string* path) const;
  // Range of a directory's entries: inode numbers [*first, *first + *count).
  Status DirEntries(uint32_t dir, const InodeRecord& rec, uint32_t* first, uint32_t* count) const;
  // Calls `entry(ino, rec)` for each entry of directory `dir`, in order, until it returns false.
  // The first record that cannot be read ends the listing with its error.
  Status ForEachEntry(uint32_t dir,
                      const std::function<bool(uint32_t ino, const InodeRecord& rec)>& entry) const;

  // Reads up to `size` bytes at `offset` of regular file `rec`. *out stays valid until *buf is
  // reused or destroyed (it points into the store's map, a cached chunk pinned by *buf, or
  // buf->bytes). Corruption if a payload fails its checksum: never returns wrong bytes.
  Status Read(const InodeRecord& rec, uint64_t offset, uint64_t size, ReadBuffer* buf,
              std::string_view* out) const;
  // The decoded pixels stored for image `rec` at pack time (--predecode): height rows of
  // width * 3 bytes. InvalidArgument if it has none; Corruption if they fail their checksum.
  Status ReadPixels(const InodeRecord& rec, std::string* rgb) const;
  // Decompresses chunk `index` of `rec` into the cache if it is not there (readahead).
  Status Prefetch(const InodeRecord& rec, uint64_t index) const;
  // Number of chunks of regular file `rec`.
  uint64_t ChunkCount(const InodeRecord& rec) const {
    return (rec.size + header_.chunk_bytes - 1) / header_.chunk_bytes;
  }
  // True if chunk `index` of `rec` is in the RAM cache (no hit or miss counted).
  bool ChunkCached(const InodeRecord& rec, uint64_t index) const {
    return cache_ && cache_->Contains(cache_id_, rec.data + index);
  }
  // The zstd dictionary the payloads were compressed with (empty if none).
  std::string_view dictionary_bytes() const { return dict_bytes_; }
  // Chunks decompressed since open, and the time spent on it.
  uint64_t decoded_chunks() const { return decoded_chunks_.load(std::memory_order_relaxed); }
  uint64_t decode_ns() const { return decode_ns_.load(std::memory_order_relaxed); }

  // Asks the backend to read the whole tree's metadata (inode and name tables) ahead, if they
  // take at most `max_bytes`: lookups and listings then find it in memory. Returns the bytes
  // announced (0 if over the limit). A version 3 store announces its stored (compressed)
  // segments to a local backend; one in object storage is left to fetch them as they are used
  // (returns 0).
  uint64_t WillNeedMetadata(uint64_t max_bytes) const;

  // The metadata as stored: raw bytes of the inode table and name pool, stored bytes (of a
  // version 3 store's segments; the raw sizes for older ones) and segments (0 for older ones).
  struct MetadataSize {
    uint64_t inode_bytes = 0, name_bytes = 0, stored_bytes = 0, segments = 0;
  };
  MetadataSize metadata_size() const;
  // Counters of the metadata segment cache (version 3 stores; zero otherwise).
  ByteCache::Stats metadata_cache_stats() const;

  // Verifies the metadata tables completely (mounting checks them lazily, on first access),
  // and that no name is longer than kMaxNameBytes. Corruption names what is wrong.
  Status VerifyMetadata() const;
  // Reads and checks every chunk of regular file `rec`.
  Status VerifyFile(const InodeRecord& rec) const;

  // Format 5 (kKernelFormatVersion): the solid payload groups as the kernel's EROFS decodes
  // them (erofs/store_tree.h). All of them, in id order: their records are every file's bytes.
  struct KernelGroup {
    uint64_t last_id = 0;        // its key
    uint32_t count = 0;          // records in it
    uint64_t records_bytes = 0;  // raw bytes of its records
    uint32_t frame_bytes = 0;    // bytes of its zstd frame
  };
  // fn for each payload group, reading only each group's header (unverified: a damaged one
  // is caught by ReadKernelFrame). NotSupported for stores of other formats or in object
  // storage (every group would be fetched); Corruption if the groups do not follow each other.
  Status ForEachKernelGroup(const std::function<Status(const KernelGroup&)>& fn) const;
  // Bytes [offset, offset + len) of the zstd frame of group `g` (as ForEachKernelGroup gave
  // it), once its record's checksum and sizes check out (Corruption otherwise). The verified
  // group is kept in the RAM cache (where the store has one), for this and KernelRecordOffset:
  // the kernel asks for a group's frame again whenever the pages it decoded it into were
  // dropped, and for a fragment's inode whenever its metadata block was; the cache's memory is
  // not given up to the churn of the files' pages as the store's map is (docs/kernel.md).
  Status ReadKernelFrame(const KernelGroup& g, uint64_t offset, size_t len, char* dst) const;
  // Where payload `id` lies: the key of its group, and its offset among the group's records
  // (from the group's verified index).
  Status KernelRecordOffset(uint64_t id, uint64_t* last_id, uint64_t* offset) const;

 private:
  Store() = default;
  Status Init();
  // Chunk `index` of `rec`, decompressed: *out points into the map (raw chunks), a cached
  // buffer (pinned in *pin) or *scratch (no cache).
  Status ReadChunk(const InodeRecord& rec, uint64_t index, bool use_cache, ByteCache::Value* pin,
                   std::string* scratch, std::string_view* out) const;

  // Asks the backend to read the metadata of entries [first, first + count) ahead.
  void WillNeedEntries(uint32_t first, uint32_t count) const;
  Status InitSegments();
  // Bytes [off, off + len) of the name pool. Version 3: pinned by the calling thread's ring
  // (`ring`, GetName and ReadLink) or by *pin (the store's own uses, which hold names while
  // they look up others); older versions: a view into the store, pin unused.
  Status NameBytes(uint64_t off, uint64_t len, bool ring, SegmentedTable::Segment* pin,
                   std::string_view* out) const;
  // Record `id` of `space` ("P" payloads, "Q" pixels), decompressed, of `expected` bytes; the
  // cache (may be null) is looked up and filled by id.
  Status ReadRecord(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                    ByteCache::Value* pin, std::string* scratch, std::string_view* out) const;
  // ReadRecord of a record in a solid group: looked up in `cache`; else its group is read and
  // decompressed (without a cache, the thread's last group is kept for the next read), and
  // with a cache every record of the group is put there.
  // The verified kZstdFrame group keyed `last_id` (*p; `stored` in *pin or *v): from the RAM
  // cache, else read, verified and cached there (where the store has a cache).
  Status KernelGroupOf(uint64_t last_id, ByteCache::Value* pin, PinnedValue* v,
                       PayloadView* p) const;
  Status ReadSolid(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                   ByteCache::Value* pin, std::string_view* out) const;
  // Corruption unless the group before `group` (its index; keyed `last_id`) ends right
  // before it.
  Status CheckGroupStart(char space, std::string_view group, uint64_t last_id) const;
  Status TimedDecode(const PayloadView& p, char* dst) const;
  // Counts one decode that started at t0 (decoded_chunks_, decode_ns_).
  void CountDecodeSince(std::chrono::steady_clock::time_point t0) const;
  // PayloadDecoder::DecodePrefix, timed like TimedDecode.
  Status TimedDecodePrefix(const PayloadView& p, char* dst,
                           const std::function<uint64_t(std::string_view)>& need,
                           uint64_t* decoded) const;
  void NoteBackendRead(uint64_t bytes) const;

  std::unique_ptr<KvReader> kv_;
  StoreHeader header_{};
  PinnedValue layout_value_, inode_value_, inode_sums_, name_value_, name_sums_;
  InodeLayout layout_;
  CheckedTable inodes_, names_;  // versions 1 and 2: the tables stored raw
  // Version 3: the tables in segments, read lazily into meta_cache_.
  bool segmented_ = false;
  uint64_t inodes_per_segment_ = 0;
  SegmentedTable inode_segments_, name_segments_;
  std::shared_ptr<ByteCache> meta_cache_;
  std::shared_ptr<Dictionary> dict_;
  std::string dict_bytes_;
  std::shared_ptr<ByteCache> cache_;
  ByteCache::Id cache_id_ = 0;  // the payloads' namespace in cache_
  // The verified kernel groups' namespace in cache_ (KernelGroupOf): u32 raw bytes, stored bytes.
  ByteCache::Id frame_cache_id_ = 0;
  // Version 4: records from these ids on are in solid groups.
  uint64_t solid_payload_from_ = UINT64_MAX, solid_pixel_from_ = UINT64_MAX;
  uint64_t max_group_bytes_ = 0;
  uint64_t serial_ = 0;  // unique among the process's stores
  mutable std::atomic<uint64_t> decoded_chunks_{0}, decode_ns_{0};
  // Bytes of payload read from the backend since it last released its cached memory.
  mutable std::atomic<uint64_t> read_since_release_{0};
};

// The RAM cache a mount of `store` gets by default inside this process's memory limit:
// CacheBytesFor (common/memory_limit.h) of the store's footprint.
uint64_t DefaultMountCacheBytes(const Store& store);

// True for the file types a store holds.
inline bool IsDir(const InodeRecord& r) { return (r.mode & 0170000) == 0040000; }
inline bool IsReg(const InodeRecord& r) { return (r.mode & 0170000) == 0100000; }
inline bool IsLink(const InodeRecord& r) { return (r.mode & 0170000) == 0120000; }
// A regular file the views serve decoded (ImageKind kJpeg or kPng, with its size recorded).
// The limits are checked here too, not only at pack time: a damaged or crafted store claiming a
// huge image gets it served as is, never a huge decode buffer or view file.
inline bool IsDecodableImage(const InodeRecord& r) {
  const auto kind = static_cast<ImageKind>(r.image);
  return IsReg(r) && (kind == ImageKind::kJpeg || kind == ImageKind::kPng) && r.width > 0 &&
         r.height > 0 && r.width <= kMaxImageSide && r.height <= kMaxImageSide &&
         uint64_t{r.width} * r.height <= kMaxImagePixels && r.size <= kMaxImageFileBytes;
}

}  // namespace dsfs
