// Fuzz targets: the bodies of the libFuzzer harnesses (tests/fuzz/*_fuzzer.cc), kept in a
// library so the unit tests replay the seed corpus and every saved crash input through exactly
// the same code (tests/unit/fuzz_test.cc) in the normal build, without clang or libFuzzer.
//
// Each target takes any bytes and must return without crashing, hanging, reading out of bounds
// or allocating without bound. Thread safety: none needed (libFuzzer calls one at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tests/support/fakes/mem_store.h"

namespace dsfs::fuzz {

// The store reader: the input is a serialized key-value table (SerializeTable). Its first byte
// says whether checksums are recomputed before opening (odd: yes), so mutations reach the
// parsers behind the checksums (header, inode layout and table, name pool, dictionary, payload
// groups and records) as well as the checks themselves. The store is opened, every directory
// listed, every file read and verified, in the original tree and in the bmp, npy and tensor
// views (which decode the images).
int FuzzStore(const uint8_t* data, size_t size);
// The image decoders (JPEG via TurboJPEG, PNG via libpng) and the BMP/NPY renderers.
int FuzzImage(const uint8_t* data, size_t size);
// Single-record parsers: the first byte picks payload record (checksum repaired, then
// decompressed), inode layout plus records, payload group index, or store header.
int FuzzRecord(const uint8_t* data, size_t size);

// The S3 index parser (backend/s3/s3_kv_index.h): the first byte says whether the checksum field is
// recomputed first (odd: yes), so mutations reach the checks behind it. A parsed index has
// every key read and every entry checked against its object.
int FuzzS3Index(const uint8_t* data, size_t size);
// An S3 index object of a few entries (the seeds' and the tests' input).
std::string SampleS3Index(int entries, uint64_t id);

// FuzzStore's input format: a flag byte, then per key u16 key length, key, u32 value length,
// value (little-endian). ParseTable is lenient: it stops at the first incomplete entry.
std::string SerializeTable(const MemTable& table, bool repair_checksums);
void ParseTable(std::string_view in, MemTable* table);

// Recomputes every checksum of a store table that the reader checks (header, layout, segment
// sums, dictionary and payload records), leaving everything else as it is.
void RepairChecksums(MemTable* table);

}  // namespace dsfs::fuzz
