#include "store/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/log.h"
#include "common/memory_limit.h"
#include "common/path.h"

namespace dsfs {
namespace {

// Decompression contexts are per thread: FUSE serves from several threads at once.
PayloadDecoder& ThreadDecoder() {
  thread_local PayloadDecoder decoder;
  return decoder;
}

// The solid group a thread decompressed last, for reads without the RAM cache (dsfs verify
// and the tools read a group's files one after another; the views read pixels): one group per
// thread at most.
struct GroupMemo {
  uint64_t serial = 0;  // Store::serial_ (never reused, unlike a Store's address)
  char space = 0;
  uint64_t last_id = 0;
  ByteCache::Value content;
};
thread_local GroupMemo t_group_memo;

// The solid groups a thread missed last in the RAM cache, to tell a scan (a directory's files
// one after another: the next miss falls in the same group or the next) from random reads
// (where it falls anywhere). Several, so that a few readers scanning at once through the same
// FUSE threads are still seen as scans.
struct RecentMisses {
  static constexpr int kGroups = 8;
  uint64_t serial = 0;
  char space = 0;
  uint64_t last_id[kGroups] = {};
  int next = 0;
  // True if a recent miss was in the group [first, last] or within one group's worth of
  // records of it, on either side. Then remembers this group.
  bool NearAndNote(uint64_t store_serial, char s, uint64_t first, uint64_t last) {
    if (serial != store_serial || space != s) {
      *this = {};
      serial = store_serial;
      space = s;
      for (uint64_t& id : last_id) id = UINT64_MAX;
    }
    const uint64_t span = last - first + 1;
    bool near = false;
    for (uint64_t id : last_id) {
      if (id != UINT64_MAX && id + 2 * span >= last && id <= last + span) near = true;
    }
    last_id[next] = last;
    next = (next + 1) % kGroups;
    return near;
  }
};
thread_local RecentMisses t_recent_misses;

// Where a thread decompresses a group for the RAM cache (ReadSolid), which then copies out the
// records it keeps.
thread_local std::string t_group_scratch;

std::atomic<uint64_t> g_store_serials{1};

}  // namespace

Status Store::Open(const std::string& path, const StoreOptions& options,
                   std::unique_ptr<Store>* store) {
  KvReaderOptions kv_options;
  kv_options.random_access = options.random_access;
  kv_options.cache_dir = options.cache_dir;
  kv_options.cache_disk_bytes = options.cache_disk_bytes;
  kv_options.remote_attempts = options.remote_attempts;
  kv_options.remote_timeout_s = options.remote_timeout_s;
  std::unique_ptr<KvReader> kv;
  DSFS_RETURN_IF_ERROR(OpenKvReader(path, kv_options, &kv));
  Status s = Open(std::move(kv), store, options.cache, options.metadata_cache_bytes);
  if (!s.ok()) {
    // Messages from below already start with the path when they came from the OS.
    if (s.message().rfind(path, 0) == 0) return s;
    return s.WithContext(path);
  }
  return s;
}

namespace {

// Whether the file at `path` holds dsfs's magic in its first `max_bytes` (or all of it).
bool FileHoldsMagic(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string_view magic(kStoreMagic, sizeof(kStoreMagic));
  std::string buf(1 << 20, '\0');
  size_t kept = 0;  // the end of the previous block, for a magic across blocks
  bool found = false;
  for (uint64_t done = 0; !found && done < max_bytes;) {
    ssize_t n = ::read(fd, buf.data() + kept, buf.size() - kept);
    if (n <= 0) break;
    done += static_cast<uint64_t>(n);
    std::string_view block(buf.data(), kept + static_cast<size_t>(n));
    found = block.find(magic) != std::string_view::npos;
    kept = std::min(block.size(), magic.size() - 1);
    std::memmove(buf.data(), block.data() + block.size() - kept, kept);
  }
  ::close(fd);
  return found;
}

}  // namespace

bool Store::HasStoreHeader(const std::string& path) {
  KvReaderOptions options;
  std::unique_ptr<KvReader> kv;
  std::string backend;
  if (!DetectBackend(path, &backend).ok()) return false;
  if (OpenKvReader(path, options, &kv).ok()) {
    PinnedValue hv;
    return kv->Get(kHeaderKey, &hv).ok() && hv.size() >= sizeof(kStoreMagic) &&
           std::memcmp(hv.data().data(), kStoreMagic, sizeof(kStoreMagic)) == 0;
  }
  // A store too damaged to open: its header record (stored uncompressed, in LMDB's pages or in
  // RocksDB's small table of H keys) may still be found.
  constexpr uint64_t kScanBytes = 256 << 20;
  if (backend == "lmdb") return FileHoldsMagic(path, kScanBytes);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.path().extension() == ".sst" && e.is_regular_file(ec) && e.file_size(ec) < (1 << 20) &&
        FileHoldsMagic(e.path().string(), kScanBytes)) {
      return true;
    }
  }
  return false;
}

uint64_t DefaultMetadataCacheBytes() { return DefaultBudgets().metadata_cache_bytes; }

Status Store::Open(std::unique_ptr<KvReader> kv, std::unique_ptr<Store>* store,
                   std::shared_ptr<ByteCache> cache, uint64_t metadata_cache_bytes) {
  std::unique_ptr<Store> st(new Store());
  st->kv_ = std::move(kv);
  st->cache_ = std::move(cache);
  // Created now, used only by version 3 stores (it takes no memory until it holds segments).
  st->meta_cache_ = std::make_shared<ByteCache>(
      metadata_cache_bytes ? metadata_cache_bytes : DefaultMetadataCacheBytes(), 4);
  if (st->cache_) st->cache_id_ = st->cache_->NewId();
  st->serial_ = g_store_serials.fetch_add(1, std::memory_order_relaxed);
  DSFS_RETURN_IF_ERROR(st->Init());
  *store = std::move(st);
  return Status::OK();
}

Status Store::Init() {
  PinnedValue hv;
  Status s = kv_->Get(kHeaderKey, &hv);
  if (s.IsNotFound()) return Status::InvalidArgument("not a dsfs store (no header)");
  DSFS_RETURN_IF_ERROR(s);
  DSFS_RETURN_IF_ERROR(ParseHeader(hv.data(), &header_));
  const StoreHeader& h = header_;
  if (h.inode_count == 0 || h.inode_count > UINT32_MAX - 1 || h.chunk_bytes == 0 ||
      h.chunk_bytes > kMaxChunkBytes || h.segment_bytes == 0) {
    return Status::Corruption("store header has impossible values");
  }
  if (h.version >= kSolidFormatVersion) {
    if (h.group_bytes == 0 || h.group_bytes > kMaxGroupBytes ||
        h.solid_payload_from > h.payload_count || h.solid_pixel_from > h.pixel_count) {
      return Status::Corruption("store header has impossible values");
    }
    solid_payload_from_ = h.solid_payload_from;
    solid_pixel_from_ = h.solid_pixel_from;
    max_group_bytes_ = SolidGroupMaxBytes(h.group_bytes, h.chunk_bytes);
  }
  auto get = [&](std::string_view key, PinnedValue* v) -> Status {
    Status gs = kv_->Get(key, v);
    if (gs.IsNotFound()) {
      return Status::Corruption("store is missing its '" + std::string(key) + "' record");
    }
    return gs;
  };
  DSFS_RETURN_IF_ERROR(get(kLayoutKey, &layout_value_));
  DSFS_RETURN_IF_ERROR(InodeLayout::Parse(layout_value_.data(), h.version, &layout_));
  if (h.version >= kSegmentedFormatVersion) {
    DSFS_RETURN_IF_ERROR(InitSegments());
  } else {
    DSFS_RETURN_IF_ERROR(get(kInodeKey, &inode_value_));
    DSFS_RETURN_IF_ERROR(get(kInodeSumKey, &inode_sums_));
    DSFS_RETURN_IF_ERROR(get(kNameKey, &name_value_));
    DSFS_RETURN_IF_ERROR(get(kNameSumKey, &name_sums_));
    if (inode_value_.size() != h.inode_count * layout_.record_bytes()) {
      return Status::Corruption("inode table size does not match the header");
    }
    if (name_value_.size() != h.names_bytes) {
      return Status::Corruption("name table size does not match the header");
    }
    auto will_need = [kv = kv_.get()](std::string_view range) { kv->WillNeed(range); };
    DSFS_RETURN_IF_ERROR(
        inodes_.Init("inode", inode_value_.data(), inode_sums_.data(), h.segment_bytes, will_need));
    DSFS_RETURN_IF_ERROR(
        names_.Init("name", name_value_.data(), name_sums_.data(), h.segment_bytes, will_need));
  }
  if (h.dict_bytes > 0) {
    PinnedValue dict_value;
    DSFS_RETURN_IF_ERROR(get(kDictKey, &dict_value));
    DSFS_RETURN_IF_ERROR(DecodeDictionaryRecord(dict_value.data(), h.dict_bytes, &dict_bytes_));
  }
  DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_bytes_, h.zstd_level, &dict_));
  // The root must be a directory: checks the first segment of each table on the way.
  InodeRecord root;
  DSFS_RETURN_IF_ERROR(GetInode(kRootIno, &root));
  if (!IsDir(root)) return Status::Corruption("store root is not a directory");
  // Opening may have touched every page of a table (RocksDB verifies a whole block's checksum
  // on Get): they stay in the page cache, not in the daemon's RSS.
  kv_->ReleaseCachedMemory();
  return Status::OK();
}

namespace {
thread_local uint64_t t_inode_decodes = 0;  // Store::inode_decodes()
}  // namespace

uint64_t Store::inode_decodes() const { return t_inode_decodes; }

Status Store::GetInode(uint32_t ino, InodeRecord* rec) const {
  if (ino == 0 || ino > header_.inode_count) return Status::NotFound("no such inode");
  if (segmented_) {
    const uint64_t i = ino - 1;
    const std::string* seg;
    DSFS_RETURN_IF_ERROR(inode_segments_.Pinned(i / inodes_per_segment_, &seg));
    ++t_inode_decodes;
    // InitSegments checked every segment's raw size: whole records.
    return layout_.Decode(seg->data() + (i % inodes_per_segment_) * layout_.record_bytes(), rec);
  }
  uint64_t off = static_cast<uint64_t>(ino - 1) * layout_.record_bytes();
  DSFS_RETURN_IF_ERROR(inodes_.Check(off, layout_.record_bytes()));
  ++t_inode_decodes;
  return layout_.Decode(inodes_.data() + off, rec);
}

Status Store::NameBytes(uint64_t off, uint64_t len, bool ring, SegmentedTable::Segment* pin,
                        std::string_view* out) const {
  if (segmented_) return name_segments_.View(off, len, ring, pin, out);
  DSFS_RETURN_IF_ERROR(names_.Check(off, len));
  *out = std::string_view(names_.data() + off, len);
  return Status::OK();
}

Status Store::GetName(const InodeRecord& rec, std::string_view* name) const {
  return NameBytes(rec.name_off, rec.name_len, true, nullptr, name);
}

Status Store::ReadLink(const InodeRecord& rec, std::string_view* target) const {
  if (!IsLink(rec)) return Status::InvalidArgument("not a symbolic link");
  return NameBytes(rec.data, rec.size, true, nullptr, target);
}

Status Store::DirEntries(uint32_t dir, const InodeRecord& rec, uint32_t* first,
                         uint32_t* count) const {
  if (!IsDir(rec)) return Status::InvalidArgument("not a directory");
  if (rec.size == 0) {
    *first = 0;
    *count = 0;
    return Status::OK();
  }
  // Breadth-first numbering puts every entry after its directory and inside the table.
  if (rec.data <= dir || rec.data > header_.inode_count ||
      rec.size > header_.inode_count - rec.data + 1) {
    return Status::Corruption("directory entry range out of bounds");
  }
  *first = static_cast<uint32_t>(rec.data);
  *count = static_cast<uint32_t>(rec.size);
  WillNeedEntries(*first, *count);
  return Status::OK();
}

Status Store::ForEachEntry(
    uint32_t dir, const std::function<bool(uint32_t ino, const InodeRecord& rec)>& entry) const {
  InodeRecord d;
  DSFS_RETURN_IF_ERROR(GetInode(dir, &d));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(DirEntries(dir, d, &first, &count));
  for (uint32_t i = 0; i < count; ++i) {
    InodeRecord rec;
    DSFS_RETURN_IF_ERROR(GetInode(first + i, &rec));
    if (!entry(first + i, rec)) break;
  }
  return Status::OK();
}

void Store::WillNeedEntries(uint32_t first, uint32_t count) const {
  // A lookup's binary search or a listing touches the whole range: one read from a cold disk
  // instead of a page fault per step. Huge directories are left to per-segment requests.
  constexpr uint64_t kMaxBytes = 1 << 20;
  // Segments are fetched whole when first used (and a remote backend fetches their
  // neighbours with them).
  if (segmented_) return;
  const uint64_t rb = layout_.record_bytes();
  const uint64_t off = static_cast<uint64_t>(first - 1) * rb;
  if (count * rb > kMaxBytes) return;
  inodes_.WillNeed(off, count * rb);
  // Names follow inode order: the entries' names lie between the first's and the last's.
  // (Unverified records are only a hint here; every use of them goes through Check.)
  InodeRecord a, b;
  if (!layout_.Decode(inodes_.data() + off, &a).ok() ||
      !layout_.Decode(inodes_.data() + off + (count - 1) * rb, &b).ok() ||
      b.name_off < a.name_off || b.name_off - a.name_off > kMaxBytes) {
    return;
  }
  names_.WillNeed(a.name_off, b.name_off - a.name_off + b.name_len);
}

Status Store::Lookup(uint32_t dir, std::string_view name, uint32_t* ino, InodeRecord* rec) const {
  InodeRecord d;
  DSFS_RETURN_IF_ERROR(GetInode(dir, &d));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(DirEntries(dir, d, &first, &count));
  // Entries are sorted bytewise by name.
  uint32_t lo = 0, hi = count;
  SegmentedTable::Segment pin;  // not the thread's ring: callers may hold a name meanwhile
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    InodeRecord r;
    DSFS_RETURN_IF_ERROR(GetInode(first + mid, &r));
    std::string_view n;
    DSFS_RETURN_IF_ERROR(NameBytes(r.name_off, r.name_len, false, &pin, &n));
    int c = n.compare(name);
    if (c == 0) {
      if (r.parent != dir) return Status::Corruption("directory entry has the wrong parent");
      *ino = first + mid;
      *rec = r;
      return Status::OK();
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return Status::NotFound("no such file or directory");
}

uint64_t Store::WillNeedMetadata(uint64_t max_bytes) const {
  if (segmented_) {
    // A remote backend fetches what it is asked for: the segments come as they are used.
    if (kv_->remote()) return 0;
    const uint64_t bytes = inode_segments_.stored_bytes() + name_segments_.stored_bytes();
    if (bytes > max_bytes) return 0;
    for (const SegmentedTable* t : {&inode_segments_, &name_segments_}) {
      const char space = t == &inode_segments_ ? kInodeSegmentSpace : kNameSegmentSpace;
      for (uint64_t i = 0; i < t->segments(); ++i) {
        PinnedValue v;
        if (kv_->Get(SegmentKey(space, i), &v).ok()) kv_->WillNeed(v.data());
      }
    }
    return bytes;
  }
  uint64_t bytes = inodes_.size() + names_.size();
  if (bytes > max_bytes) return 0;
  inodes_.WillNeed(0, inodes_.size());
  names_.WillNeed(0, names_.size());
  return bytes;
}

Status Store::LookupPath(std::string_view path, uint32_t* ino, InodeRecord* rec) const {
  uint32_t cur = kRootIno;
  InodeRecord r;
  DSFS_RETURN_IF_ERROR(GetInode(cur, &r));
  for (std::string_view part : PathParts(path)) {
    if (part == "..") {
      cur = r.parent;
      DSFS_RETURN_IF_ERROR(GetInode(cur, &r));
      continue;
    }
    if (!IsDir(r)) return Status::InvalidArgument("not a directory");
    DSFS_RETURN_IF_ERROR(Lookup(cur, part, &cur, &r));
  }
  *ino = cur;
  *rec = r;
  return Status::OK();
}

Status Store::WalkUp(uint32_t ino, uint32_t top,
                     const std::function<Status(uint32_t ino, const InodeRecord& rec)>& visit,
                     bool* reached) const {
  *reached = false;
  for (uint32_t cur = ino;;) {
    InodeRecord r;
    DSFS_RETURN_IF_ERROR(GetInode(cur, &r));
    DSFS_RETURN_IF_ERROR(visit(cur, r));
    if (cur == top) break;
    if (r.parent >= cur) return Status::OK();
    cur = r.parent;
  }
  *reached = true;
  return Status::OK();
}

Status Store::PathOf(uint32_t ino, uint32_t top, std::string* path) const {
  std::vector<std::string_view> parts;        // last component first
  std::vector<SegmentedTable::Segment> pins;  // what they point into (version 3)
  bool reached = false;
  Status s = WalkUp(
      ino, top,
      [&](uint32_t cur, const InodeRecord& r) {
        if (cur == top) return Status::OK();
        std::string_view name;
        SegmentedTable::Segment pin;
        DSFS_RETURN_IF_ERROR(NameBytes(r.name_off, r.name_len, false, &pin, &name));
        parts.push_back(name);
        if (pin) pins.push_back(std::move(pin));
        return Status::OK();
      },
      &reached);
  if (s.ok() && !reached) {
    // The component whose parent field broke the chain is not part of the path.
    if (!parts.empty()) parts.pop_back();
    s = Status::NotFound("not below its directory");
  }
  path->clear();
  for (size_t i = parts.size(); i-- > 0;) {
    path->append(parts[i]);
    if (i > 0) path->push_back('/');
  }
  return s;
}

// Records above this size are announced to the backend before they are read (WillNeed).
constexpr size_t kWillNeedBytes = 16 << 10;

Status Store::ReadChunk(const InodeRecord& rec, uint64_t index, bool use_cache,
                        ByteCache::Value* pin, std::string* scratch, std::string_view* out) const {
  uint64_t chunk = header_.chunk_bytes;
  uint64_t expected = std::min<uint64_t>(chunk, rec.size - index * chunk);
  Status s = ReadRecord(kPayloadSpace, rec.data + index, expected,
                        use_cache ? cache_.get() : nullptr, pin, scratch, out);
  if (!s.ok()) {
    return s.WithContext("payload " + std::to_string(rec.data + index) + " (chunk " +
                         std::to_string(index) + ")");
  }
  return s;
}

Status Store::ReadPixels(const InodeRecord& rec, std::string* rgb) const {
  if (!IsDecodableImage(rec) || rec.pixels == 0) {
    return Status::InvalidArgument("no stored pixels");
  }
  uint64_t total = uint64_t{rec.width} * rec.height * 3;
  uint64_t chunk = header_.chunk_bytes;
  rgb->clear();
  std::string scratch;
  for (uint64_t i = 0; i * chunk < total; ++i) {
    ByteCache::Value pin;
    std::string_view data;
    Status s = ReadRecord(kPixelSpace, rec.pixels - 1 + i, std::min(chunk, total - i * chunk),
                          nullptr, &pin, &scratch, &data);
    if (!s.ok()) return s.WithContext("pixel record " + std::to_string(rec.pixels - 1 + i));
    // Reserved only once a record matched its expected size: a claimed size alone (bounded by
    // IsDecodableImage anyway) allocates nothing.
    if (i == 0) rgb->reserve(total);
    rgb->append(data);
  }
  return Status::OK();
}

uint64_t DefaultMountCacheBytes(const Store& store) {
  return CacheBytesFor(DefaultBudgets(), ProcessMemoryLimit().bytes,
                       store.PageCacheFootprintBytes(), store.CacheBytesToHoldAll());
}

uint64_t Store::PageCacheFootprintBytes() const {
  constexpr uint64_t kPage = 4096;
  return std::max(header_.file_bytes, header_.file_count * kPage);
}

Status Store::ReadSolid(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                        ByteCache::Value* pin, std::string_view* out) const {
  if (cache) {
    if (ByteCache::Value v = cache->Get(cache_id_, id)) {
      if (v->size() != expected) return Status::Corruption("payload has the wrong size");
      *out = *v;
      *pin = std::move(v);
      return Status::OK();
    }
  }
  std::string key;
  uint64_t last_id = 0;
  Status s = kv_->SeekKey(PayloadKey(id, space), &key);
  if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, &last_id, space))) {
    return Status::Corruption("payload record missing");
  }
  DSFS_RETURN_IF_ERROR(s);
  GroupMemo& memo = t_group_memo;
  ByteCache::Value group;
  std::string_view content;
  PinnedValue v;
  bool neighbours = false;       // whether the whole group is out, for the RAM cache
  bool scratch_content = false;  // `content` is in t_group_scratch
  if (!cache && memo.serial == serial_ && memo.space == space && memo.last_id == last_id) {
    group = memo.content;
    content = *group;
  } else {
    s = kv_->Get(key, &v);
    if (s.IsNotFound()) return Status::Corruption("payload record missing");
    DSFS_RETURN_IF_ERROR(s);
    NoteBackendRead(v.size());
    if (v.size() > kWillNeedBytes) kv_->WillNeed(v.data());
    PayloadView p;
    DSFS_RETURN_IF_ERROR(ParsePayload(v.data(), &p));
    if (p.raw_bytes > max_group_bytes_) return Status::Corruption("payload group too large");
    if (p.codec == Codec::kRaw && v.stable()) {
      // Zero copy: the value lives as long as the store (and the page cache is its cache).
      content = p.stored;
    } else if (cache) {
      // A miss of the RAM cache. Its neighbours are worth decompressing and caching when they
      // will be read: in a scan (this thread missed this group or the one beside it just
      // before) and where the cache holds enough groups to keep them until then (below).
      // Random reads get the group decompressed up to the wanted record and no further: the
      // index first, then the records up to this one's end (about half the group on average,
      // in whole zstd blocks). ParsePayload verified the compressed bytes, so the prefix is.
      // A cache that holds all the files (with a quarter to spare for its own bookkeeping)
      // keeps every neighbour until it is read, in any order.
      constexpr uint64_t kNeighbourGroups = 64;
      const uint64_t capacity = cache->capacity_bytes();
      const bool room = capacity >= kNeighbourGroups * p.raw_bytes;
      const bool holds_all = space == kPayloadSpace && capacity >= CacheBytesToHoldAll();
      bool whole = false, decided = false;
      auto need = [&](std::string_view pre) -> uint64_t {
        if (whole) return p.raw_bytes;
        if (pre.size() < 4) return 4;
        uint32_t count;
        std::memcpy(&count, pre.data(), 4);
        // A damaged index stops here: FindInGroup reports it.
        if (count == 0 || id > last_id || last_id - id >= count) return pre.size();
        const uint32_t i = count - 1 - static_cast<uint32_t>(last_id - id);
        const uint64_t index_to_mine = 4 + 4ull * (i + 1);
        if (pre.size() < index_to_mine) return index_to_mine;
        if (!decided) {
          decided = true;
          const bool near =
              t_recent_misses.NearAndNote(serial_, space, last_id - count + 1, last_id);
          whole = room && (holds_all || near);
          if (whole) return p.raw_bytes;
        }
        uint32_t end;
        std::memcpy(&end, pre.data() + 4 + 4ull * i, 4);
        return 4 + 4ull * count + end;
      };
      // Into the thread's scratch buffer: the records wanted are copied out below.
      std::string& buf = t_group_scratch;
      if (buf.size() < p.raw_bytes) buf.resize(p.raw_bytes);
      uint64_t decoded = 0;
      DSFS_RETURN_IF_ERROR(TimedDecodePrefix(p, buf.data(), need, &decoded));
      content = std::string_view(buf).substr(0, decoded);
      scratch_content = true;
      neighbours = whole || (room && decoded == p.raw_bytes);
    } else {
      auto fresh = std::make_shared<std::string>(p.raw_bytes, '\0');
      DSFS_RETURN_IF_ERROR(TimedDecode(p, fresh->data()));
      group = std::move(fresh);
      content = *group;
    }
    DSFS_RETURN_IF_ERROR(CheckGroupStart(space, content, last_id));
    if (!cache && group) memo = {serial_, space, last_id, group};
  }
  std::string_view record;
  DSFS_RETURN_IF_ERROR(FindInGroup(content, last_id, id, &record));
  if (record.size() != expected) return Status::Corruption("payload has the wrong size");
  if (cache && (group || scratch_content)) {
    // Where the whole group is out (above), every record of it goes to the cache, each on its
    // own (as records of older versions are): its neighbours are a directory's next files,
    // read next, and a cache too small to hold a whole group still holds records. Not into a
    // cache of fewer than kNeighbourGroups groups, nor on random reads: they would evict a
    // group's worth of records on every miss (measured: 3.7k files/s instead of 15k through a
    // 2 MiB cache).
    uint32_t count;
    std::memcpy(&count, content.data(), 4);  // FindInGroup checked the index
    for (uint64_t other = last_id - count + 1; neighbours && other <= last_id; ++other) {
      std::string_view r;
      if (other == id || !FindInGroup(content, last_id, other, &r).ok()) continue;
      if (!cache->Contains(cache_id_, other)) {
        cache->Insert(cache_id_, other, std::make_shared<std::string>(r));
      }
    }
    auto mine = std::make_shared<std::string>(record);
    *out = *mine;
    cache->Insert(cache_id_, id, mine);
    *pin = std::move(mine);
    // A thread keeps a scratch buffer of one default-sized group, not one of the largest.
    constexpr size_t kKeepScratchBytes = 1 << 20;
    if (scratch_content && t_group_scratch.size() > kKeepScratchBytes) {
      std::string().swap(t_group_scratch);
    }
    return Status::OK();
  }
  *out = record;
  *pin = std::move(group);
  return Status::OK();
}

Status Store::ReadRecord(char space, uint64_t id, uint64_t expected, ByteCache* cache,
                         ByteCache::Value* pin, std::string* scratch, std::string_view* out) const {
  if (id >= (space == kPixelSpace ? solid_pixel_from_ : solid_payload_from_)) {
    return ReadSolid(space, id, expected, cache, pin, out);
  }
  // Older versions: each record compressed alone, cached alone.
  if (cache) {
    if (ByteCache::Value v = cache->Get(cache_id_, id)) {
      *out = *v;
      *pin = std::move(v);
      return Status::OK();
    }
  }
  PinnedValue v;
  std::string key;
  std::string_view record;
  uint64_t last_id = 0;
  Status s = kv_->Seek(PayloadKey(id, space), &key, &v);
  if (s.IsNotFound() || (s.ok() && !ParsePayloadKey(key, &last_id, space))) {
    s = Status::Corruption("payload record missing");
  }
  if (s.ok()) s = FindInGroup(v.data(), last_id, id, &record);
  if (s.ok()) s = CheckGroupStart(space, v.data(), last_id);
  if (s.ok()) {
    NoteBackendRead(record.size());
    // Small records sit in one or two pages; a large one is fetched in one go.
    if (record.size() > kWillNeedBytes) kv_->WillNeed(record);
  }
  PayloadView p;
  if (s.ok()) s = ParsePayload(record, &p);
  if (s.ok() && p.raw_bytes != expected) s = Status::Corruption("payload has the wrong size");
  if (s.ok() && p.codec == Codec::kRaw && v.stable()) {
    // Zero copy: the value lives as long as the store (and the page cache is its cache).
    *out = p.stored;
    return Status::OK();
  }
  if (s.ok()) {
    if (cache) {
      auto fresh = std::make_shared<std::string>(p.raw_bytes, '\0');
      s = TimedDecode(p, fresh->data());
      if (s.ok()) {
        *out = *fresh;
        cache->Insert(cache_id_, id, fresh);
        *pin = std::move(fresh);
      }
    } else {
      scratch->resize(p.raw_bytes);
      s = TimedDecode(p, scratch->data());
      if (s.ok()) *out = *scratch;
    }
  }
  return s;
}

Status Store::CheckGroupStart(char space, std::string_view group, uint64_t last_id) const {
  // Records carry no id: a group found under a damaged key (one that grew, still below the
  // next group's) would hand out its neighbours' records, checksums and all. The group before
  // must end exactly where this one starts.
  uint32_t count;
  if (group.size() < 4) return Status::Corruption("payload group too short");
  std::memcpy(&count, group.data(), 4);
  if (count > last_id + 1) return Status::Corruption("payload group key damaged");
  const uint64_t first = last_id - count + 1;
  if (first == 0) return Status::OK();
  std::string key;
  uint64_t prev_id = 0;
  Status s = kv_->SeekKey(PayloadKey(first - 1, space), &key);
  if (!s.ok() && !s.IsNotFound()) return s;
  if (!s.ok() || !ParsePayloadKey(key, &prev_id, space) || prev_id != first - 1) {
    return Status::Corruption("payload group key damaged");
  }
  return Status::OK();
}

void Store::NoteBackendRead(uint64_t bytes) const {
  // Scanning a store larger than RAM through a memory map would otherwise grow the daemon's
  // RSS to the size of the store: every so often the backend lets go of mapped pages.
  constexpr uint64_t kReleaseEveryBytes = 16ull << 20;
  uint64_t total = read_since_release_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (total >= kReleaseEveryBytes &&
      read_since_release_.compare_exchange_strong(total, 0, std::memory_order_relaxed)) {
    kv_->ReleaseCachedMemory();
  }
}

void Store::CountDecodeSince(std::chrono::steady_clock::time_point t0) const {
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  decoded_chunks_.fetch_add(1, std::memory_order_relaxed);
  decode_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

Status Store::TimedDecode(const PayloadView& p, char* dst) const {
  auto t0 = std::chrono::steady_clock::now();
  Status s = ThreadDecoder().Decode(p, dict_.get(), dst);
  CountDecodeSince(t0);
  return s;
}

Status Store::TimedDecodePrefix(const PayloadView& p, char* dst,
                                const std::function<uint64_t(std::string_view)>& need,
                                uint64_t* decoded) const {
  auto t0 = std::chrono::steady_clock::now();
  Status s = ThreadDecoder().DecodePrefix(p, dict_.get(), dst, need, decoded);
  CountDecodeSince(t0);
  return s;
}

Status Store::Read(const InodeRecord& rec, uint64_t offset, uint64_t size, ReadBuffer* buf,
                   std::string_view* out) const {
  if (!IsReg(rec)) return Status::InvalidArgument("not a regular file");
  buf->pin.reset();
  if (offset >= rec.size || size == 0) {
    *out = {};
    return Status::OK();
  }
  size = std::min(size, rec.size - offset);
  uint64_t chunk = header_.chunk_bytes;
  uint64_t first = offset / chunk;
  uint64_t last = (offset + size - 1) / chunk;
  if (first == last) {
    std::string_view data;
    DSFS_RETURN_IF_ERROR(ReadChunk(rec, first, true, &buf->pin, &buf->bytes, &data));
    *out = data.substr(offset - first * chunk, size);
    return Status::OK();
  }
  // Spans chunks: assemble into buf->bytes.
  std::string result;
  result.reserve(size);
  std::string scratch;
  for (uint64_t i = first; i <= last; ++i) {
    std::string_view data;
    ByteCache::Value pin;
    DSFS_RETURN_IF_ERROR(ReadChunk(rec, i, true, &pin, &scratch, &data));
    uint64_t begin = (i == first) ? offset - first * chunk : 0;
    uint64_t end = (i == last) ? offset + size - last * chunk : data.size();
    result.append(data.substr(begin, end - begin));
  }
  buf->bytes = std::move(result);
  *out = buf->bytes;
  return Status::OK();
}

Status Store::Prefetch(const InodeRecord& rec, uint64_t index) const {
  if (!cache_ || !IsReg(rec) || index >= ChunkCount(rec)) return Status::OK();
  if (ChunkCached(rec, index)) return Status::OK();
  ByteCache::Value pin;
  std::string scratch;
  std::string_view data;
  return ReadChunk(rec, index, true, &pin, &scratch, &data);
}

Status Store::VerifyMetadata() const {
  if (segmented_) {
    // Straight from the store, never from the cache: verify checks what is stored.
    std::string raw;
    for (const SegmentedTable* t : {&inode_segments_, &name_segments_}) {
      for (uint64_t i = 0; i < t->segments(); ++i) DSFS_RETURN_IF_ERROR(t->Load(i, &raw));
    }
  } else {
    DSFS_RETURN_IF_ERROR(inodes_.CheckAll());
    DSFS_RETURN_IF_ERROR(names_.CheckAll());
  }
  // A name the kernel cannot take makes its whole directory unlistable through a mount
  // (stores packed before pack refused them may hold one).
  for (uint32_t ino = 2; ino <= header_.inode_count; ++ino) {
    InodeRecord r;
    DSFS_RETURN_IF_ERROR(GetInode(ino, &r));
    if (r.name_len > kMaxNameBytes) {
      return Status::Corruption("inode " + std::to_string(ino) + " has a name of " +
                                std::to_string(r.name_len) + " bytes (at most " +
                                std::to_string(kMaxNameBytes) + ")");
    }
  }
  return Status::OK();
}

Status Store::VerifyFile(const InodeRecord& rec) const {
  if (!IsReg(rec) || rec.size == 0) return Status::OK();
  // Straight from the store, never from the cache: verify checks what is stored.
  uint64_t chunks = ChunkCount(rec);
  std::string scratch;
  for (uint64_t i = 0; i < chunks; ++i) {
    std::string_view data;
    ByteCache::Value pin;
    DSFS_RETURN_IF_ERROR(ReadChunk(rec, i, false, &pin, &scratch, &data));
  }
  return Status::OK();
}

Status Store::InitSegments() {
  const StoreHeader& h = header_;
  PinnedValue v;
  Status s = kv_->Get(kSegmentIndexKey, &v);
  if (s.IsNotFound()) return Status::Corruption("store is missing its 'M' record");
  DSFS_RETURN_IF_ERROR(s);
  SegmentIndex ix;
  DSFS_RETURN_IF_ERROR(SegmentIndex::Parse(v.data(), &ix));
  // The index must describe exactly the tables the header declares: the inode table in
  // segments of inodes_per_segment whole records (the last may hold fewer), the name pool
  // names_bytes long.
  const uint64_t rb = layout_.record_bytes();
  const uint64_t per = ix.inodes_per_segment;
  if (per == 0 || per * rb > kMaxSegmentRawBytes ||
      ix.inodes.size() != (h.inode_count + per - 1) / per) {
    return Status::Corruption("segment index does not match the inode table");
  }
  for (size_t i = 0; i < ix.inodes.size(); ++i) {
    const uint64_t records = i + 1 < ix.inodes.size() ? per : h.inode_count - i * per;
    if (ix.inodes[i].raw_bytes != records * rb) {
      return Status::Corruption("segment index does not match the inode table");
    }
  }
  uint64_t names = 0;
  for (const SegmentEntry& e : ix.names) names += e.raw_bytes;
  if (names != h.names_bytes) {
    return Status::Corruption("name table size does not match the header");
  }
  const uint64_t serial = serial_;
  inodes_per_segment_ = per;
  DSFS_RETURN_IF_ERROR(inode_segments_.Init("inode", kInodeSegmentSpace, std::move(ix.inodes),
                                            kv_.get(), meta_cache_.get(), serial,
                                            {&layout_, (ix.flags & kSegmentDeltas) != 0}));
  DSFS_RETURN_IF_ERROR(name_segments_.Init("name", kNameSegmentSpace, std::move(ix.names),
                                           kv_.get(), meta_cache_.get(), serial));
  segmented_ = true;
  return Status::OK();
}

Store::MetadataSize Store::metadata_size() const {
  MetadataSize m;
  if (segmented_) {
    m.inode_bytes = inode_segments_.size();
    m.name_bytes = name_segments_.size();
    m.stored_bytes = inode_segments_.stored_bytes() + name_segments_.stored_bytes();
    m.segments = inode_segments_.segments() + name_segments_.segments();
  } else {
    m.inode_bytes = inodes_.size();
    m.name_bytes = names_.size();
    m.stored_bytes = m.inode_bytes + m.name_bytes;
  }
  return m;
}

// The *MayFetch hints: what the calls they stand for would read, looked up in memory only.
// Versions 1 and 2 hold their tables whole (read when the store was opened): only payloads
// are fetched.

bool Store::InodeMayFetch(uint32_t ino) const {
  if (!kv_->remote() || !segmented_ || ino == 0 || ino > header_.inode_count) return false;
  return !inode_segments_.Cached((ino - 1) / inodes_per_segment_);
}

bool Store::NamesMayFetch(uint64_t off, uint64_t len) const {
  if (!kv_->remote() || !segmented_ || len == 0 || off >= name_segments_.size()) return false;
  const uint64_t last = std::min(off + len, name_segments_.size()) - 1;
  for (uint64_t s = name_segments_.SegmentOf(off); s <= name_segments_.SegmentOf(last); ++s) {
    if (!name_segments_.Cached(s)) return true;
  }
  return false;
}

bool Store::EntriesMayFetch(uint32_t dir) const {
  if (!kv_->remote() || !segmented_) return false;
  InodeRecord d;
  if (InodeMayFetch(dir)) return true;
  // A failure here fails the call too, without a fetch.
  if (!GetInode(dir, &d).ok() || !IsDir(d) || d.size == 0) return false;
  if (d.data <= dir || d.data > header_.inode_count || d.size > header_.inode_count - d.data + 1) {
    return false;  // damaged: DirEntries fails
  }
  const uint64_t first = d.data, last = d.data + d.size - 1;
  // A directory over more segments than this is handed over whole: a lookup touches a few of
  // them, a listing all, and checking each costs a cache probe.
  constexpr uint64_t kMaxSegmentsChecked = 64;
  const uint64_t s0 = (first - 1) / inodes_per_segment_, s1 = (last - 1) / inodes_per_segment_;
  if (s1 - s0 >= kMaxSegmentsChecked) return true;
  for (uint64_t s = s0; s <= s1; ++s) {
    if (!inode_segments_.Cached(s)) return true;
  }
  // Names follow inode order: the entries' names lie between the first's and the last's.
  InodeRecord a, b;
  if (!GetInode(static_cast<uint32_t>(first), &a).ok() ||
      !GetInode(static_cast<uint32_t>(last), &b).ok()) {
    return false;
  }
  if (b.name_off < a.name_off) return true;  // not in order: the call finds out
  return NamesMayFetch(a.name_off, b.name_off - a.name_off + std::max<uint64_t>(b.name_len, 1));
}

bool Store::ReadMayFetch(const InodeRecord& rec, uint64_t offset, uint64_t size) const {
  if (!kv_->remote() || !IsReg(rec) || offset >= rec.size || size == 0) return false;
  if (!cache_) return true;
  const uint64_t chunk = header_.chunk_bytes;
  const uint64_t end = std::min(rec.size, offset + size);
  for (uint64_t i = offset / chunk; i <= (end - 1) / chunk; ++i) {
    if (!ChunkCached(rec, i)) return true;
  }
  return false;
}

bool Store::PixelsMayFetch(const InodeRecord& rec) const {
  if (!kv_->remote()) return false;
  // Stored pixels are read past the RAM cache (the views keep what they make of them).
  if (rec.pixels != 0) return true;
  return ReadMayFetch(rec, 0, rec.size);
}

ByteCache::Stats Store::metadata_cache_stats() const {
  return segmented_ && meta_cache_ ? meta_cache_->stats() : ByteCache::Stats{};
}

}  // namespace dsfs
