#include "backend/s3/s3_kv_index.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <memory>

#include "common/coding.h"

namespace dsfs {
namespace {

constexpr char kIndexMagic[8] = {'D', 'S', 'F', 'S', 'S', '3', 'I', 'X'};
constexpr uint32_t kIndexVersion = 3;
constexpr uint32_t kOldIndexVersion = 2;  // its checksum leaves out the header
constexpr size_t kSumOffset = 48;
constexpr size_t kIndexHeaderBytes = kSumOffset + 8;
// The smallest entry: five one-byte varints (an empty key), the checksum.
constexpr uint64_t kMinEntryBytes = 5 + 8;
// An entry list compresses little (every entry holds an 8-byte checksum): more than this many
// times the compressed list is a bomb, not an index.
constexpr uint64_t kMaxListRatio = 16;

uint64_t IndexSum(std::string_view header, std::string_view body) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, header.data(), header.size());
  XXH3_64bits_update(st, body.data(), body.size());
  uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return sum;
}

// Decompresses `in` (one zstd frame) into `out` if it holds exactly `raw` bytes, growing the
// buffer as output comes (never allocating what a frame only claims).
bool DecompressExactly(std::string_view in, uint64_t raw, std::string* out) {
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> ds(ZSTD_createDStream(),
                                                                ZSTD_freeDStream);
  if (!ds) return false;
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  out->clear();
  size_t filled = 0;
  for (;;) {
    if (filled == out->size()) {
      if (out->size() > raw) return false;  // more than the header said
      out->resize(std::min<uint64_t>(raw + 1, std::max<uint64_t>(1 << 16, out->size() * 2)));
    }
    ZSTD_outBuffer dst{out->data(), out->size(), filled};
    size_t rc = ZSTD_decompressStream(ds.get(), &dst, &src);
    filled = dst.pos;
    if (ZSTD_isError(rc)) return false;
    if (rc == 0) break;                                           // the frame is complete
    if (src.pos == src.size && dst.pos < dst.size) return false;  // the input ends mid-frame
  }
  if (src.pos != src.size || filled != raw) return false;
  out->resize(filled);
  return true;
}

}  // namespace

void S3IndexBuilder::Add(std::string_view key, uint64_t object, uint64_t offset, uint64_t length,
                         uint64_t raw_length, uint64_t sum) {
  PutVarint64(&list_, key.size());
  list_.append(key);
  PutVarint64(&list_, object);
  PutVarint64(&list_, offset);
  PutVarint64(&list_, length);
  PutVarint64(&list_, raw_length);
  PutFixed64(&list_, sum);
  ++entries_;
}

Status S3IndexBuilder::Finish(uint64_t id, const std::vector<uint64_t>& object_sizes,
                              std::string* index) const {
  std::string body;
  for (uint64_t n : object_sizes) PutFixed64(&body, n);
  std::string z(ZSTD_compressBound(list_.size()), '\0');
  size_t zn = ZSTD_compress(z.data(), z.size(), list_.data(), list_.size(), 3);
  if (ZSTD_isError(zn)) return Status::IOError("S3 index: zstd failed");
  body.append(z.data(), zn);
  if (kIndexHeaderBytes + body.size() > kS3MaxIndexBytes || list_.size() > kS3MaxIndexListBytes) {
    return Status::InvalidArgument("S3 index: the store has too many values for one index");
  }
  index->assign(kIndexMagic, 8);
  PutFixed32(index, kIndexVersion);
  PutFixed32(index, 0);
  PutFixed64(index, id);
  PutFixed64(index, object_sizes.size());
  PutFixed64(index, entries_);
  PutFixed64(index, list_.size());
  PutFixed64(index, IndexSum(*index, body));
  index->append(body);
  return Status::OK();
}

uint64_t S3IndexChecksum(std::string_view bytes) {
  if (bytes.size() < kIndexHeaderBytes) return 0;
  const uint32_t version = DecodeFixed32(bytes.data() + 8);
  std::string_view body = bytes.substr(kIndexHeaderBytes);
  return version == kOldIndexVersion ? XXH3_64bits(body.data(), body.size())
                                     : IndexSum(bytes.substr(0, kSumOffset), body);
}

bool S3IndexId(std::string_view bytes, uint64_t* id) {
  if (bytes.size() < kIndexHeaderBytes || std::memcmp(bytes.data(), kIndexMagic, 8) != 0) {
    return false;
  }
  *id = DecodeFixed64(bytes.data() + 16);
  return true;
}

Status ParseS3Index(const std::string& name, std::string_view bytes, S3Index* index) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption(name + ": damaged S3 index (" + why + ")");
  };
  *index = S3Index{};
  if (bytes.size() < kIndexHeaderBytes || std::memcmp(bytes.data(), kIndexMagic, 8) != 0) {
    return Status::InvalidArgument(name + ": not a dsfs store (no dsfs index object)");
  }
  const uint32_t version = DecodeFixed32(bytes.data() + 8);
  if (version != kIndexVersion && version != kOldIndexVersion) {
    return Status::NotSupported(name + ": S3 index version " + std::to_string(version) +
                                " (this dsfs reads versions " + std::to_string(kOldIndexVersion) +
                                " and " + std::to_string(kIndexVersion) + ")");
  }
  if (bytes.size() > kS3MaxIndexBytes) return bad("larger than any index");
  const uint64_t id = DecodeFixed64(bytes.data() + 16);
  const uint64_t objects = DecodeFixed64(bytes.data() + 24),
                 entries = DecodeFixed64(bytes.data() + 32);
  const uint64_t raw = DecodeFixed64(bytes.data() + 40),
                 sum = DecodeFixed64(bytes.data() + kSumOffset);
  std::string_view body = bytes.substr(kIndexHeaderBytes);
  if (S3IndexChecksum(bytes) != sum) return bad("checksum");
  // Version 2's header is outside its checksum: its counts are only trusted as far as the
  // body's own size bears them out.
  if (objects > body.size() / 8 || objects > UINT32_MAX) return bad("object count");
  if (raw > kS3MaxIndexListBytes) return bad("entry list size");
  if (entries > raw / kMinEntryBytes) return bad("entry count");
  index->id = id;
  index->object_sizes.reserve(objects);
  for (uint64_t i = 0; i < objects; ++i) {
    uint64_t size = DecodeFixed64(body.data() + 8 * i);
    if (size > kS3MaxObjectBytes) return bad("object size");
    index->object_sizes.push_back(size);
  }
  body.remove_prefix(8 * objects);
  if (raw > kMaxListRatio * body.size() + (1 << 20)) return bad("entry list size");
  std::string list;
  if (!DecompressExactly(body, raw, &list)) return bad("entry list");
  std::string_view in(list);
  index->entries.reserve(std::min<uint64_t>(entries, list.size() / kMinEntryBytes));
  for (uint64_t i = 0; i < entries; ++i) {
    uint64_t klen, obj, off, len, raw_len;
    if (!GetVarint64(&in, &klen) || klen > in.size() || klen > UINT32_MAX) {
      return bad("entry key");
    }
    S3IndexEntry e;
    e.key_off = index->keys.size();
    e.key_len = static_cast<uint32_t>(klen);
    index->keys.append(in.substr(0, klen));
    in.remove_prefix(klen);
    if (!GetVarint64(&in, &obj) || !GetVarint64(&in, &off) || !GetVarint64(&in, &len) ||
        !GetVarint64(&in, &raw_len) || in.size() < 8) {
      return bad("entry");
    }
    if (len > kS3MaxValueBytes || raw_len > kS3MaxValueBytes) return bad("value size");
    if (obj >= objects || off > index->object_sizes[obj] || len > index->object_sizes[obj] - off) {
      return bad("entry out of its object");
    }
    e.sum = DecodeFixed64(in.data());
    in.remove_prefix(8);
    e.object = static_cast<uint32_t>(obj);
    e.offset = off;
    e.length = len;
    e.raw_length = raw_len;
    if (!index->entries.empty() && index->Key(index->entries.back()) >= index->Key(e)) {
      return bad("key order");
    }
    index->entries.push_back(e);
  }
  if (!in.empty()) return bad("entry list longer than its entries");
  return Status::OK();
}

}  // namespace dsfs
