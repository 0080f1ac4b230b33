// Fixed-width and variable-length integers in byte strings, as LevelDB's util/coding.h: every
// on-disk and on-wire integer of dsfs (the store's segment and group indexes, the S3 index) is
// written and read here. Fixed-width integers are little-endian, whatever the host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsfs {

inline void PutFixed32(std::string* dst, uint32_t v) {
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(v >> (8 * i));
  dst->append(buf, 4);
}

inline void PutFixed64(std::string* dst, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
  dst->append(buf, 8);
}

// The 4 (8) bytes at `p`, which the caller has checked are there.
inline uint32_t DecodeFixed32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{b[i]} << (8 * i);
  return v;
}

inline uint64_t DecodeFixed64(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{b[i]} << (8 * i);
  return v;
}

// Seven bits a byte, low bits first, the high bit set on every byte but the last.
inline void PutVarint64(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

// Reads a varint from the front of *in and drops it from there. False if *in ends first or
// holds more than ten bytes of one (nothing a 64-bit value needs).
inline bool GetVarint64(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

}  // namespace dsfs
