#include "tests/fuzz/fuzz_targets.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_set>
#include <vector>

#include "backend/s3/s3_kv_index.h"
#include "fs/filesystem.h"
#include "image/image.h"
#include "store/codec.h"
#include "store/format.h"
#include "store/store.h"

namespace dsfs::fuzz {
namespace {

// Bounds that keep one execution short: a fuzzed store may claim any number of entries.
constexpr size_t kMaxEntriesVisited = 256;
constexpr uint64_t kMaxBytesReadPerFile = 256 << 10;
constexpr uint64_t kReadPiece = 64 << 10;
// Records the record harness decompresses (Store::ReadRecord bounds them by the chunk size,
// at most kMaxChunkBytes; a smaller bound keeps executions fast).
constexpr uint32_t kMaxFuzzRecordBytes = 1 << 20;

// A target's own invariant failed: a bug, reported as a crash.
[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}

void RepairRecord(char* rec, size_t size) {
  if (size < sizeof(PayloadHeader)) return;
  uint32_t sum = static_cast<uint32_t>(XXH3_64bits(rec + 4, size - 4));
  std::memcpy(rec, &sum, 4);
}

void RepairHeader(std::string* h) {
  if (h->size() != sizeof(StoreHeader)) return;
  uint64_t sum = XXH3_64bits(h->data(), offsetof(StoreHeader, checksum));
  std::memcpy(h->data() + offsetof(StoreHeader, checksum), &sum, 8);
}

void RepairTrailingSum(std::string* v) {
  if (v->size() < 8) return;
  uint64_t sum = XXH3_64bits(v->data(), v->size() - 8);
  std::memcpy(v->data() + v->size() - 8, &sum, 8);
}

// A group of an older version: its index and records, each record checksummed. (A solid
// group is one payload record: RepairRecord.)
void RepairGroup(std::string* g) {
  if (g->size() < 4) return;
  uint32_t count;
  std::memcpy(&count, g->data(), 4);
  if (count == 0 || g->size() < 4 + 4ull * count) return;
  const uint64_t base = 4 + 4ull * count;
  uint32_t begin = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t end;
    std::memcpy(&end, g->data() + 4 + 4ull * i, 4);
    if (begin <= end && base + end <= g->size()) {
      RepairRecord(g->data() + base + begin, end - begin);
    }
    begin = end;
  }
}

// Reads every entry it can reach below `roots`, in any view; errors are fine, crashes not.
void ExerciseFilesystem(const Filesystem& fs) {
  std::deque<uint64_t> dirs = {1};
  struct stat st;
  if (fs.Lookup(1, ".dsfs", &st).ok()) {
    for (const char* v : {"bmp", "npy", "tensor", "stats"}) {
      struct stat vst;
      if (fs.Lookup(st.st_ino, v, &vst).ok() && S_ISDIR(vst.st_mode)) dirs.push_back(vst.st_ino);
    }
  }
  std::unordered_set<uint64_t> seen;
  size_t visited = 0;
  ReadBuffer buf;
  while (!dirs.empty() && visited < kMaxEntriesVisited) {
    uint64_t dir = dirs.front();
    dirs.pop_front();
    if (!seen.insert(dir).second) continue;
    std::vector<std::string> names;
    (void)fs.ReadDir(dir, 0, [&](std::string_view name, const struct stat&, uint64_t) {
      if (name != "." && name != "..") names.emplace_back(name);
      return names.size() < kMaxEntriesVisited;
    });
    for (const std::string& name : names) {
      if (++visited > kMaxEntriesVisited) break;
      if (!fs.Lookup(dir, name, &st).ok()) continue;
      if (S_ISDIR(st.st_mode)) {
        dirs.push_back(st.st_ino);
      } else if (S_ISLNK(st.st_mode)) {
        std::string_view target;
        (void)fs.ReadLink(st.st_ino, &target);
      } else if (S_ISREG(st.st_mode)) {
        uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), kMaxBytesReadPerFile);
        for (uint64_t off = 0; off < end; off += kReadPiece) {
          std::string_view out;
          if (!fs.Read(st.st_ino, off, kReadPiece, &buf, &out).ok()) break;
          if (out.size() > kReadPiece) Fail("read returned more than asked");
        }
      }
    }
  }
}

}  // namespace

std::string SerializeTable(const MemTable& table, bool repair_checksums) {
  std::string out(1, repair_checksums ? '\1' : '\0');
  for (const auto& [k, v] : table.data) {
    uint16_t kl = static_cast<uint16_t>(k.size());
    uint32_t vl = static_cast<uint32_t>(v.size());
    out.append(reinterpret_cast<const char*>(&kl), 2);
    out += k;
    out.append(reinterpret_cast<const char*>(&vl), 4);
    out += v;
  }
  return out;
}

void ParseTable(std::string_view in, MemTable* table) {
  in.remove_prefix(std::min<size_t>(1, in.size()));
  while (in.size() >= 2) {
    uint16_t kl;
    std::memcpy(&kl, in.data(), 2);
    if (in.size() < 2ull + kl + 4) return;
    std::string key(in.substr(2, kl));
    uint32_t vl;
    std::memcpy(&vl, in.data() + 2 + kl, 4);
    in.remove_prefix(2 + kl + 4);
    if (vl > in.size()) return;
    table->data[key] = std::string(in.substr(0, vl));
    in.remove_prefix(vl);
  }
}

void RepairChecksums(MemTable* table) {
  auto& d = table->data;
  uint32_t segment_bytes = 0;
  StoreHeader h{};
  if (auto it = d.find(kHeaderKey); it != d.end()) {
    RepairHeader(&it->second);
    if (it->second.size() == sizeof(StoreHeader)) {
      std::memcpy(&h, it->second.data(), sizeof(h));
      segment_bytes = h.segment_bytes;
    }
  }
  if (auto it = d.find(kLayoutKey); it != d.end()) RepairTrailingSum(&it->second);
  // Tiny segments would make the sum lists larger than the tables: leave those broken.
  if (segment_bytes >= 16) {
    const std::pair<std::string_view, std::string_view> tables[] = {{kInodeKey, kInodeSumKey},
                                                                    {kNameKey, kNameSumKey}};
    for (auto [table_key, sum_key] : tables) {
      auto t = d.find(table_key);
      if (t != d.end()) d[std::string(sum_key)] = SegmentSums(t->second, segment_bytes);
    }
  }
  // Version 3: each segment's stored size and checksum in the segment index, then the index's
  // own checksum (what the index says of raw sizes is left as it is).
  if (auto it = d.find(kSegmentIndexKey); it != d.end()) {
    std::string& ix = it->second;
    constexpr size_t kHead = 24, kEntry = 16;
    if (ix.size() >= kHead + 8) {
      uint64_t ni, nn;
      std::memcpy(&ni, ix.data() + 8, 8);
      std::memcpy(&nn, ix.data() + 16, 8);
      const uint64_t room = (ix.size() - kHead - 8) / kEntry;
      for (uint64_t i = 0; i < room && i < ni + nn && ni <= room; ++i) {
        const bool inode = i < ni;
        auto seg =
            d.find(SegmentKey(inode ? kInodeSegmentSpace : kNameSegmentSpace, inode ? i : i - ni));
        if (seg == d.end() || seg->second.empty()) continue;
        char* e = ix.data() + kHead + kEntry * i;
        uint32_t stored = static_cast<uint32_t>(seg->second.size());
        uint64_t sum = XXH3_64bits(seg->second.data(), seg->second.size());
        std::memcpy(e + 4, &stored, 4);
        std::memcpy(e + 8, &sum, 8);
      }
      RepairTrailingSum(&ix);
    }
  }
  if (auto it = d.find(kDictKey); it != d.end()) RepairRecord(it->second.data(), it->second.size());
  for (auto& [k, v] : d) {
    uint64_t id;
    const bool pixels = ParsePayloadKey(k, &id, kPixelSpace);
    if (!pixels && !ParsePayloadKey(k, &id, kPayloadSpace)) continue;
    const bool solid = h.version >= kSolidFormatVersion &&
                       id >= (pixels ? h.solid_pixel_from : h.solid_payload_from);
    if (solid) {
      RepairRecord(v.data(), v.size());
    } else {
      RepairGroup(&v);
    }
  }
}

int FuzzStore(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto table = std::make_shared<MemTable>();
  ParseTable(in, table.get());
  if (!in.empty() && (in[0] & 1)) RepairChecksums(table.get());
  auto cache = std::make_shared<ByteCache>(4 << 20, 2);
  std::unique_ptr<Store> store;
  if (!Store::Open(NewMemReader(table), &store, cache).ok()) return 0;
  (void)store->VerifyMetadata();
  for (uint32_t ino = 1; ino <= store->inode_count() && ino <= kMaxEntriesVisited; ++ino) {
    InodeRecord rec;
    if (!store->GetInode(ino, &rec).ok()) continue;
    std::string_view s;
    (void)store->GetName(rec, &s);
    if (IsLink(rec)) (void)store->ReadLink(rec, &s);
    // A crafted size may claim any number of chunks: verify the first few.
    if (IsReg(rec) && store->ChunkCount(rec) <= 64) (void)store->VerifyFile(rec);
    if (IsDecodableImage(rec) && rec.pixels != 0) {
      std::string rgb;
      if (store->ReadPixels(rec, &rgb).ok() && rgb.size() != uint64_t{rec.width} * rec.height * 3) {
        Fail("stored pixels of the wrong size");
      }
    }
  }
  Filesystem fs(std::move(store), FsOptions{}, cache);
  ExerciseFilesystem(fs);
  return 0;
}

int FuzzImage(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  DecodedImage img;
  if (!DecodeImage(in, &img).ok()) return 0;
  if (img.width == 0 || img.height == 0 || img.width > kMaxImageSide ||
      img.height > kMaxImageSide || uint64_t{img.width} * img.height > kMaxImagePixels) {
    Fail("decoded an image outside the limits");
  }
  if (img.rgb.size() != uint64_t{img.width} * img.height * 3) Fail("pixels of the wrong size");
  std::string bmp;
  RenderBmp(img.width, img.height, img.rgb, &bmp);
  if (bmp.size() != BmpBytes(img.width, img.height)) Fail("BMP of the wrong size");
  (void)NpyHeader("|u1", {img.height, img.width, 3});
  return 0;
}

int FuzzRecord(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (selector % 4) {
    case 0: {  // payload record
      RepairRecord(rest.data(), rest.size());
      PayloadView p;
      if (!ParsePayload(rest, &p).ok() || p.raw_bytes > kMaxFuzzRecordBytes) return 0;
      static PayloadDecoder decoder;
      std::string out(p.raw_bytes, '\0');
      (void)decoder.Decode(p, nullptr, out.data());
      return 0;
    }
    case 1: {  // inode layout, then records decoded with it
      if (rest.size() < 2) return 0;
      uint16_t n;
      std::memcpy(&n, rest.data(), 2);
      std::string layout_bytes = rest.substr(2, n);
      RepairTrailingSum(&layout_bytes);
      InodeLayout layout;
      uint32_t version = (selector & 4) ? 1 : 2;
      if (!InodeLayout::Parse(layout_bytes, version, &layout).ok()) return 0;
      std::string_view records =
          std::string_view(rest).substr(std::min<size_t>(rest.size(), 2 + n));
      for (size_t off = 0; off + layout.record_bytes() <= records.size();
           off += layout.record_bytes()) {
        InodeRecord rec;
        (void)layout.Decode(records.data() + off, &rec);
      }
      return 0;
    }
    case 2: {  // payload group index
      if (rest.size() < 16) return 0;
      uint64_t last_id, id;
      std::memcpy(&last_id, rest.data(), 8);
      std::memcpy(&id, rest.data() + 8, 8);
      std::string_view group = std::string_view(rest).substr(16);
      std::string_view record;
      if (FindInGroup(group, last_id, id, &record).ok() &&
          (record.data() < group.data() ||
           record.data() + record.size() > group.data() + group.size())) {
        Fail("group record outside the group");
      }
      return 0;
    }
    default: {  // store header
      RepairHeader(&rest);
      StoreHeader h;
      (void)ParseHeader(rest, &h);
      return 0;
    }
  }
}

int FuzzS3Index(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) && bytes.size() >= 56) {
    uint64_t sum = S3IndexChecksum(bytes);
    std::memcpy(bytes.data() + 48, &sum, 8);
  }
  S3Index index;
  if (!ParseS3Index("fuzz", bytes, &index).ok()) return 0;
  uint64_t total = 0;
  for (const auto& e : index.entries) {
    total += index.Key(e).size();
    if (e.object >= index.object_sizes.size() ||
        e.offset + e.length > index.object_sizes[e.object]) {
      std::abort();  // the parser let an entry out of its object
    }
  }
  return total == index.keys.size() ? 0 : (std::abort(), 0);
}

std::string SampleS3Index(int entries, uint64_t id) {
  S3IndexBuilder b;
  uint64_t offset = 0;
  for (int i = 0; i < entries; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "k%04d", i);
    const uint64_t length = 100 + 37 * i;
    b.Add(key, 0, offset, length, i % 3 == 0 ? 4 * length : 0, 0x1234567 * (i + 1));
    offset += length;
  }
  std::string index;
  (void)b.Finish(id, {offset}, &index);
  return index;
}

}  // namespace dsfs::fuzz
