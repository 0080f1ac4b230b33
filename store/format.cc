#include "store/format.h"

#include <xxhash.h>

#include <cstring>

namespace dsfs {

std::string PayloadKey(uint64_t id) {
  std::string key(9, '\0');
  key[0] = 'P';
  for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>((id >> (56 - 8 * i)) & 0xff);
  return key;
}

void SealHeader(StoreHeader* h) {
  std::memcpy(h->magic, kStoreMagic, sizeof(kStoreMagic));
  h->version = kFormatVersion;
  h->header_bytes = sizeof(StoreHeader);
  h->checksum = XXH3_64bits(h, offsetof(StoreHeader, checksum));
}

Status ParseHeader(std::string_view bytes, StoreHeader* h) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kStoreMagic, sizeof(kStoreMagic)) != 0) {
    return Status::InvalidArgument("not a dsfs store (bad magic)");
  }
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, sizeof(version));
  if (version != kFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(version) +
                                " is not supported (this dsfs reads version " +
                                std::to_string(kFormatVersion) + ")");
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
                          uint32_t segment_bytes) {
  name_ = name;
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

}  // namespace dsfs
