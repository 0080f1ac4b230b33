#include "store/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "common/coding.h"

namespace dsfs {

std::string PayloadKey(uint64_t id, char space) {
  std::string key(9, '\0');
  key[0] = space;
  for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>((id >> (56 - 8 * i)) & 0xff);
  return key;
}

bool ParsePayloadKey(std::string_view key, uint64_t* id, char space) {
  if (key.size() != 9 || key[0] != space) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(key[1 + i]);
  *id = v;
  return true;
}

void GroupBuilder::Add(std::string_view record) {
  records_.append(record);
  ends_.push_back(static_cast<uint32_t>(records_.size()));
}

std::string GroupBuilder::Finish() {
  std::string out;
  out.reserve(bytes());
  PutFixed32(&out, count());
  for (uint32_t end : ends_) PutFixed32(&out, end);
  out.append(records_);
  ends_.clear();
  records_.clear();
  return out;
}

Status FindInGroup(std::string_view group, uint64_t last_id, uint64_t id,
                   std::string_view* record) {
  if (group.size() < 4) return Status::Corruption("payload group too short");
  const uint32_t count = DecodeFixed32(group.data());
  if (count == 0 || group.size() < 4 + 4ull * count) {
    return Status::Corruption("payload group index damaged");
  }
  if (id > last_id || last_id - id >= count) return Status::Corruption("payload record missing");
  uint32_t i = count - 1 - static_cast<uint32_t>(last_id - id);
  const uint32_t begin = i > 0 ? DecodeFixed32(group.data() + 4 + 4 * (i - 1)) : 0;
  const uint32_t end = DecodeFixed32(group.data() + 4 + 4 * i);
  uint64_t base = 4 + 4ull * count;
  if (begin > end || base + end > group.size()) {
    return Status::Corruption("payload group index damaged");
  }
  *record = group.substr(base + begin, end - begin);
  return Status::OK();
}

namespace {

int BitsFor(uint64_t max_value) { return max_value == 0 ? 0 : 64 - __builtin_clzll(max_value); }

// Bit b of a record is bit (b % 8) of byte b / 8. `p` must have 16 readable bytes past the
// field's first byte (records are decoded from a padded copy).
uint64_t GetBits(const unsigned char* p, uint32_t bit, int width) {
  if (width == 0) return 0;
  unsigned __int128 x;
  std::memcpy(&x, p + bit / 8, sizeof(x));
  x >>= bit % 8;
  uint64_t v = static_cast<uint64_t>(x);
  return width == 64 ? v : v & ((uint64_t{1} << width) - 1);
}

// ORs the low `width` bits of `value` into a zeroed field: only the field's own bytes are
// touched (records are encoded in place, unpadded).
void PutBits(unsigned char* p, uint32_t bit, int width, uint64_t value) {
  if (width == 0) return;
  if (width < 64) value &= (uint64_t{1} << width) - 1;
  unsigned __int128 x = static_cast<unsigned __int128>(value) << (bit % 8);
  unsigned char* q = p + bit / 8;
  for (int i = 0, n = static_cast<int>((bit % 8 + width + 7) / 8); i < n; ++i) {
    q[i] |= static_cast<unsigned char>(x >> (8 * i));
  }
}

// mtime - min as an unsigned distance: two mtimes may be more than INT64_MAX apart (an
// archive may carry any), where the signed difference overflows.
uint64_t MtimeOffset(int64_t mtime, int64_t min) {
  return static_cast<uint64_t>(mtime) - static_cast<uint64_t>(min);
}

}  // namespace

InodeLayout InodeLayout::For(const std::vector<InodeRecord>& records) {
  InodeLayout l;
  uint64_t max[kFields] = {};
  l.min_mtime_s_ = records.empty() ? 0 : records[0].mtime_s;
  for (const auto& r : records) l.min_mtime_s_ = std::min(l.min_mtime_s_, r.mtime_s);
  for (const auto& r : records) {
    max[kSize] = std::max(max[kSize], r.size);
    max[kData] = std::max(max[kData], r.data);
    max[kNameOff] = std::max(max[kNameOff], r.name_off);
    max[kNameLen] = std::max<uint64_t>(max[kNameLen], r.name_len);
    max[kMtime] = std::max(max[kMtime], MtimeOffset(r.mtime_s, l.min_mtime_s_));
    max[kMtimeNs] = std::max<uint64_t>(max[kMtimeNs], r.mtime_ns);
    max[kParent] = std::max<uint64_t>(max[kParent], r.parent);
    max[kImage] = std::max<uint64_t>(max[kImage], r.image);
    max[kWidth] = std::max<uint64_t>(max[kWidth], r.width);
    max[kHeight] = std::max<uint64_t>(max[kHeight], r.height);
    max[kPixels] = std::max(max[kPixels], r.pixels);
    if (std::find(l.modes_.begin(), l.modes_.end(), r.mode) == l.modes_.end()) {
      l.modes_.push_back(r.mode);
    }
  }
  std::sort(l.modes_.begin(), l.modes_.end());
  max[kMode] = l.modes_.empty() ? 0 : l.modes_.size() - 1;
  for (int f = 0; f < kFields; ++f) l.bits_[f] = static_cast<uint8_t>(BitsFor(max[f]));
  l.Finish();
  return l;
}

void InodeLayout::Finish() {
  uint32_t bit = 0;
  for (int f = 0; f < kFields; ++f) {
    offset_[f] = bit;
    bit += bits_[f];
  }
  record_bytes_ = std::max<uint32_t>(1, (bit + 7) / 8);
}

std::string InodeLayout::Serialize() const {
  std::string out;
  out.append(reinterpret_cast<const char*>(bits_), kFields);
  out.append(reinterpret_cast<const char*>(&min_mtime_s_), 8);
  uint32_t n = static_cast<uint32_t>(modes_.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(reinterpret_cast<const char*>(modes_.data()), 4 * modes_.size());
  uint64_t sum = XXH3_64bits(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  return out;
}

Status InodeLayout::Parse(std::string_view bytes, uint32_t version, InodeLayout* layout) {
  InodeLayout l;
  const size_t fields = version == 1 ? kFieldsV1 : kFields;
  if (bytes.size() < fields + 8 + 4 + 8) return Status::Corruption("inode layout too short");
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (XXH3_64bits(bytes.data(), bytes.size() - 8) != sum) {
    return Status::Corruption("inode layout checksum mismatch");
  }
  std::memcpy(l.bits_, bytes.data(), fields);
  std::memcpy(&l.min_mtime_s_, bytes.data() + fields, 8);
  uint32_t n;
  std::memcpy(&n, bytes.data() + fields + 8, 4);
  if (bytes.size() != fields + 8 + 4 + 4ull * n + 8) {
    return Status::Corruption("inode layout has the wrong size");
  }
  l.modes_.resize(n);
  // (An empty table, which only a damaged layout has, leaves data() null: no memcpy of it.)
  if (n > 0) std::memcpy(l.modes_.data(), bytes.data() + fields + 12, 4ull * n);
  for (int f = 0; f < kFields; ++f) {
    if (l.bits_[f] > 64) return Status::Corruption("inode layout has an impossible width");
  }
  l.Finish();
  *layout = std::move(l);
  return Status::OK();
}

void InodeLayout::Encode(const InodeRecord& r, char* dst) const {
  auto* p = reinterpret_cast<unsigned char*>(dst);
  std::memset(p, 0, record_bytes_);
  uint64_t mode_index = static_cast<uint64_t>(
      std::lower_bound(modes_.begin(), modes_.end(), r.mode) - modes_.begin());
  const uint64_t v[kFields] = {
      r.size,     r.data,     r.name_off, r.name_len, MtimeOffset(r.mtime_s, min_mtime_s_),
      r.mtime_ns, mode_index, r.parent,   r.image,    r.width,
      r.height,   r.pixels};
  for (int f = 0; f < kFields; ++f) PutBits(p, offset_[f], bits_[f], v[f]);
}

namespace {

uint64_t WidthMask(int width) { return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

// A field of a record in place, touching only the field's own bytes.
uint64_t GetField(const char* rec, uint32_t bit, int width) {
  const auto* q = reinterpret_cast<const unsigned char*>(rec) + bit / 8;
  unsigned __int128 x = 0;
  for (int i = 0, n = static_cast<int>((bit % 8 + width + 7) / 8); i < n; ++i) {
    x |= static_cast<unsigned __int128>(q[i]) << (8 * i);
  }
  return static_cast<uint64_t>(x >> (bit % 8)) & WidthMask(width);
}
void SetField(char* rec, uint32_t bit, int width, uint64_t value) {
  auto* q = reinterpret_cast<unsigned char*>(rec) + bit / 8;
  const unsigned __int128 m = static_cast<unsigned __int128>(WidthMask(width)) << (bit % 8);
  const unsigned __int128 v = static_cast<unsigned __int128>(value & WidthMask(width)) << (bit % 8);
  for (int i = 0, n = static_cast<int>((bit % 8 + width + 7) / 8); i < n; ++i) {
    q[i] = static_cast<unsigned char>((q[i] & ~static_cast<unsigned char>(m >> (8 * i))) |
                                      static_cast<unsigned char>(v >> (8 * i)));
  }
}

}  // namespace

void InodeLayout::DeltaEncode(char* records, size_t n) const {
  for (int f : {kData, kNameOff, kMtime, kMtimeNs, kParent, kPixels}) {
    if (bits_[f] == 0) continue;
    // Back to front: each record's predecessor still holds its own value.
    for (size_t i = n; i-- > 1;) {
      char* cur = records + i * record_bytes_;
      const uint64_t v = GetField(cur, offset_[f], bits_[f]);
      const uint64_t prev = GetField(cur - record_bytes_, offset_[f], bits_[f]);
      SetField(cur, offset_[f], bits_[f], v - prev);
    }
  }
}

void InodeLayout::DeltaDecode(char* records, size_t n) const {
  for (int f : {kData, kNameOff, kMtime, kMtimeNs, kParent, kPixels}) {
    if (bits_[f] == 0) continue;
    for (size_t i = 1; i < n; ++i) {
      char* cur = records + i * record_bytes_;
      const uint64_t d = GetField(cur, offset_[f], bits_[f]);
      const uint64_t prev = GetField(cur - record_bytes_, offset_[f], bits_[f]);
      SetField(cur, offset_[f], bits_[f], d + prev);
    }
  }
}

Status InodeLayout::Decode(const char* src, InodeRecord* r) const {
  unsigned char buf[8 * kFields + 32] = {};
  std::memcpy(buf, src, record_bytes_);
  r->size = GetBits(buf, offset_[kSize], bits_[kSize]);
  r->data = GetBits(buf, offset_[kData], bits_[kData]);
  r->name_off = GetBits(buf, offset_[kNameOff], bits_[kNameOff]);
  uint64_t name_len = GetBits(buf, offset_[kNameLen], bits_[kNameLen]);
  uint64_t ns = GetBits(buf, offset_[kMtimeNs], bits_[kMtimeNs]);
  uint64_t mode = GetBits(buf, offset_[kMode], bits_[kMode]);
  uint64_t parent = GetBits(buf, offset_[kParent], bits_[kParent]);
  uint64_t image = GetBits(buf, offset_[kImage], bits_[kImage]);
  uint64_t width = GetBits(buf, offset_[kWidth], bits_[kWidth]);
  uint64_t height = GetBits(buf, offset_[kHeight], bits_[kHeight]);
  if (name_len > UINT32_MAX || parent > UINT32_MAX || ns >= 1000000000 || mode >= modes_.size() ||
      image > 3 || width > UINT32_MAX || height > UINT32_MAX) {
    return Status::Corruption("inode record out of range");
  }
  r->image = static_cast<uint8_t>(image);
  r->width = static_cast<uint32_t>(width);
  r->height = static_cast<uint32_t>(height);
  r->pixels = GetBits(buf, offset_[kPixels], bits_[kPixels]);
  r->name_len = static_cast<uint32_t>(name_len);
  // A damaged offset may not fit: refused rather than overflowed.
  uint64_t mtime_offset = GetBits(buf, offset_[kMtime], bits_[kMtime]);
  // Any offset up to INT64_MAX - min (which exceeds INT64_MAX when min is negative).
  if (mtime_offset > static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(min_mtime_s_)) {
    return Status::Corruption("inode record out of range");
  }
  r->mtime_s = static_cast<int64_t>(static_cast<uint64_t>(min_mtime_s_) + mtime_offset);
  r->mtime_ns = static_cast<uint32_t>(ns);
  r->mode = modes_[mode];
  r->parent = static_cast<uint32_t>(parent);
  return Status::OK();
}

void SealHeader(StoreHeader* h) {
  std::memcpy(h->magic, kStoreMagic, sizeof(kStoreMagic));
  if (h->version != kKernelFormatVersion) h->version = kFormatVersion;
  h->header_bytes = sizeof(StoreHeader);
  h->checksum = XXH3_64bits(h, offsetof(StoreHeader, checksum));
}

Status ParseHeader(std::string_view bytes, StoreHeader* h) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kStoreMagic, sizeof(kStoreMagic)) != 0) {
    return Status::InvalidArgument("not a dsfs store (bad magic)");
  }
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, sizeof(version));
  if (version < kOldestFormatVersion || version > kNewestFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(version) +
                                " is not supported (this dsfs reads versions " +
                                std::to_string(kOldestFormatVersion) + " to " +
                                std::to_string(kNewestFormatVersion) + ")");
  }
  if (bytes.size() != sizeof(StoreHeader)) {
    return Status::Corruption("store header has the wrong size");
  }
  std::memcpy(h, bytes.data(), sizeof(StoreHeader));
  if (h->checksum != XXH3_64bits(h, offsetof(StoreHeader, checksum))) {
    return Status::Corruption("store header checksum mismatch");
  }
  return Status::OK();
}

std::string SegmentSums(std::string_view data, uint32_t segment_bytes) {
  std::string sums;
  for (uint64_t off = 0; off < data.size(); off += segment_bytes) {
    uint64_t len = std::min<uint64_t>(segment_bytes, data.size() - off);
    uint64_t sum = XXH3_64bits(data.data() + off, len);
    sums.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  }
  return sums;
}

Status CheckedTable::Init(std::string_view name, std::string_view data, std::string_view sums,
                          uint32_t segment_bytes, std::function<void(std::string_view)> will_need) {
  name_ = name;
  will_need_ = std::move(will_need);
  if (segment_bytes == 0) return Status::Corruption("store header: zero segment size");
  uint64_t segments = (data.size() + segment_bytes - 1) / segment_bytes;
  if (sums.size() != segments * sizeof(uint64_t)) {
    return Status::Corruption(name_ + " table: checksum list does not match its size");
  }
  data_ = data;
  sums_ = sums.data();
  segments_ = segments;
  segment_bytes_ = segment_bytes;
  verified_ = std::make_unique<std::atomic<uint8_t>[]>(segments);
  for (uint64_t i = 0; i < segments; ++i) verified_[i].store(0, std::memory_order_relaxed);
  return Status::OK();
}

Status CheckedTable::Check(uint64_t off, uint64_t len) const {
  if (off > data_.size() || len > data_.size() - off) {
    return Status::Corruption(name_ + " table: reference out of range");
  }
  if (len == 0) return Status::OK();
  uint64_t first = off / segment_bytes_;
  uint64_t last = (off + len - 1) / segment_bytes_;
  WillNeed(off, len);
  for (uint64_t s = first; s <= last; ++s) {
    if (verified_[s].load(std::memory_order_acquire)) continue;
    uint64_t start = s * segment_bytes_;
    uint64_t n = std::min<uint64_t>(segment_bytes_, data_.size() - start);
    uint64_t expected;  // small LMDB values are not 8-byte aligned: copy, never cast
    std::memcpy(&expected, sums_ + s * sizeof(uint64_t), sizeof(expected));
    if (XXH3_64bits(data_.data() + start, n) != expected) {
      return Status::Corruption(name_ + " table: checksum mismatch in segment " +
                                std::to_string(s));
    }
    verified_[s].store(1, std::memory_order_release);
  }
  return Status::OK();
}

void CheckedTable::WillNeed(uint64_t off, uint64_t len) const {
  if (!will_need_ || len == 0 || off > data_.size() || len > data_.size() - off) return;
  uint64_t first = off / segment_bytes_;
  uint64_t last = (off + len - 1) / segment_bytes_;
  while (first <= last && verified_[first].load(std::memory_order_acquire)) ++first;
  while (last > first && verified_[last].load(std::memory_order_acquire)) --last;
  if (first > last) return;
  uint64_t start = first * segment_bytes_;
  uint64_t end = std::min<uint64_t>((last + 1) * segment_bytes_, data_.size());
  will_need_(data_.substr(start, end - start));
}

}  // namespace dsfs
