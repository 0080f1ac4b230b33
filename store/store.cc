// The store: opening it (its header, format, metadata tables) and its metadata: inodes,
// names, directories, paths. Payload reads: store/store_payload.cc.
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

std::atomic<uint64_t> g_store_serials{1};

}  // namespace

Status Store::Open(const std::string& path, const StoreOptions& options,
                   std::unique_ptr<Store>* store) {
  std::unique_ptr<KvReader> kv;
  DSFS_RETURN_IF_ERROR(OpenKvReader(path, options.kv, &kv));
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
  if (st->cache_) {
    st->cache_id_ = st->cache_->NewId();
    st->frame_cache_id_ = st->cache_->NewId();
  }
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

ByteCache::Stats Store::metadata_cache_stats() const {
  return segmented_ && meta_cache_ ? meta_cache_->stats() : ByteCache::Stats{};
}

}  // namespace dsfs
