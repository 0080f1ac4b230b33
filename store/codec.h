// Payload records: zstd compression (optionally with the store's trained dictionary) and the
// xxh3 checksum that guards every record. See store/format.h for the record layout.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/kv_open.h"
#include "common/status.h"
#include "store/format.h"

namespace dsfs {

// Trains a zstd dictionary of at most `dict_bytes` on `samples`. Returns OK with an empty
// *dict when the samples are too few or too uniform for a useful dictionary.
Status TrainDictionary(const std::vector<std::string>& samples, size_t dict_bytes,
                       std::string* dict);

// Shared, immutable compression/decompression dictionaries (digested once).
// Safe to use from many threads at once.
class Dictionary {
 public:
  // `bytes` may be empty (no dictionary).
  static Status Create(std::string_view bytes, int level, std::shared_ptr<Dictionary>* out);
  ~Dictionary();
  bool empty() const { return cdict_ == nullptr && ddict_ == nullptr; }
  const ZSTD_CDict* cdict() const { return cdict_; }
  const ZSTD_DDict* ddict() const { return ddict_; }

 private:
  Dictionary() = default;
  ZSTD_CDict* cdict_ = nullptr;
  ZSTD_DDict* ddict_ = nullptr;
};

// Builds payload records. One per thread (holds a zstd context).
class PayloadEncoder {
 public:
  PayloadEncoder(int level, std::shared_ptr<const Dictionary> dict);
  ~PayloadEncoder();
  PayloadEncoder(const PayloadEncoder&) = delete;
  PayloadEncoder& operator=(const PayloadEncoder&) = delete;
  // Appends the record for `raw` to *out: zstd with the dictionary when there is one (and
  // `use_dict`), stored raw when compression does not make it smaller.
  Status Encode(std::string_view raw, bool use_dict, std::string* out);
  // The most raw bytes in one zstd block of what Encode makes from now on (1 KiB to 128 KiB;
  // 0: zstd's default, 128 KiB). A reader decodes a frame in whole blocks
  // (PayloadDecoder::DecodePrefix): small blocks let it stop near the bytes it wants.
  void SetMaxBlockBytes(uint32_t bytes);
  // Appends the kZstdFrame record of the solid group `content` (GroupBuilder's: index, then
  // records) to *out: the index as it is, the records as one standard zstd frame without a
  // dictionary, whatever its size (format 5).
  Status EncodeKernelGroup(std::string_view content, std::string* out);

 private:
  int level_;
  std::shared_ptr<const Dictionary> dict_;
  ZSTD_CCtx* cctx_;
  ZSTD_CCtx* frame_cctx_ = nullptr;  // EncodeKernelGroup's, made on first use
  uint32_t block_bytes_ = 0;
};

// The zstd block size of solid groups (GroupSizing::block_bytes); see
// bench/results/miss-cost/miss-cost-*.
inline constexpr uint32_t kSolidBlockBytes = 8 << 10;

// How a pack cuts records into solid groups (store/format.h).
struct GroupSizing {
  uint32_t group_bytes = 128 << 10;  // raw bytes a group fills
  ValueSizing values;                // the backend's: a group fills its last page
  // Raw bytes per zstd block of a group: a read that misses the RAM cache decodes the group's
  // blocks up to the record it wants, no further (store/store.cc, ReadSolid).
  uint32_t block_bytes = kSolidBlockBytes;
  // Format 5: each group a Codec::kZstdFrame record (PayloadEncoder::EncodeKernelGroup), and
  // no group but a batch's first smaller than kMinKernelGroupBytes of records (EROFS starts
  // at most one pcluster in each 4 KiB of the packed inode).
  bool kernel_frames = false;
};
inline constexpr uint32_t kMinKernelGroupBytes = 8192;

// Solid groups, encoded: payload records, back to back.
struct EncodedGroups {
  std::string values;
  std::vector<size_t> ends;      // end offset of each group in `values`
  std::vector<uint32_t> counts;  // records in each
};

// Cuts `records` (raw chunks, consecutive ids) into solid groups and appends each, encoded,
// to *out: the records that fit in sizing.group_bytes (at least one), and then, where the
// backend stores values on pages, as many of the following ones as still fit in the group's
// last page once compressed (tried by compressing again, a few times at most).
Status EncodeSolidGroups(const std::vector<std::string_view>& records, const GroupSizing& sizing,
                         PayloadEncoder* enc, EncodedGroups* out);

// The dictionary record ("Z") of a store: the dictionary compressed (without a dictionary),
// or stored raw where that is not smaller (and in stores of versions before 4).
Status EncodeDictionaryRecord(std::string_view dict, int level, std::string* record);
// The dictionary of `dict_bytes` held by `record`; Corruption if it does not check out.
Status DecodeDictionaryRecord(std::string_view record, uint32_t dict_bytes, std::string* dict);

// The record holding `raw` uncompressed (checksummed).
std::string RawPayloadRecord(std::string_view raw);

// A payload record whose checksum has been verified.
struct PayloadView {
  Codec codec;
  uint32_t raw_bytes;
  std::string_view stored;  // the bytes after the header
  // kZstdFrame: the index's bytes at the start of `stored` (4 + 4 * count); the frame follows.
  uint32_t index_bytes = 0;
};

// Verifies the checksum and structure of a record. Corruption on any mismatch.
Status ParsePayload(std::string_view record, PayloadView* out);

// Decompresses payload records. One per thread (holds a zstd context).
class PayloadDecoder {
 public:
  PayloadDecoder();
  ~PayloadDecoder();
  PayloadDecoder(const PayloadDecoder&) = delete;
  PayloadDecoder& operator=(const PayloadDecoder&) = delete;
  // Writes exactly p.raw_bytes bytes to `dst` (capacity >= p.raw_bytes). Corruption if the
  // data does not decompress to exactly that size.
  Status Decode(const PayloadView& p, const Dictionary* dict, char* dst);
  // Decompresses the start of p into `dst` (capacity >= p.raw_bytes), stopping as soon as
  // the bytes out reach need(prefix), where `prefix` is what is out so far: need() is asked
  // again each time more is out and may raise its answer (e.g. once a group's index is out).
  // zstd decodes whole blocks, so more than asked may come out. Sets *decoded to the bytes
  // out (<= p.raw_bytes; all of them where need() asks for more). Corruption if the data does
  // not decompress or ends before raw_bytes. The caller must have verified p (ParsePayload):
  // the checksum covers the compressed bytes, so a prefix is as verified as the whole.
  Status DecodePrefix(const PayloadView& p, const Dictionary* dict, char* dst,
                      const std::function<uint64_t(std::string_view prefix)>& need,
                      uint64_t* decoded);

 private:
  // Ends whatever frame the context was in and decodes with `ddict` (nullptr: none) from now on.
  void UseDictionary(const ZSTD_DDict* ddict);
  // The context for kZstdFrame frames (standard, with magic), its session reset.
  ZSTD_DCtx* FrameContext();
  ZSTD_DCtx* dctx_;
  ZSTD_DCtx* frame_dctx_ = nullptr;
};

}  // namespace dsfs
