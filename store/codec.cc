#define ZSTD_STATIC_LINKING_ONLY  // magicless frames (ZSTD_c_format), stable since zstd 1.3
#include "store/codec.h"

#include <xxhash.h>
#include <zdict.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/coding.h"

namespace dsfs {

Status TrainDictionary(const std::vector<std::string>& samples, size_t dict_bytes,
                       std::string* dict) {
  dict->clear();
  // zstd needs a handful of samples and several times the dictionary size to learn anything.
  size_t total = 0;
  for (const auto& s : samples) total += s.size();
  if (samples.size() < 8 || dict_bytes < 1024 || total < 4 * dict_bytes) return Status::OK();
  std::string flat;
  flat.reserve(total);
  std::vector<size_t> sizes;
  sizes.reserve(samples.size());
  for (const auto& s : samples) {
    flat += s;
    sizes.push_back(s.size());
  }
  dict->resize(dict_bytes);
  size_t n = ZDICT_trainFromBuffer(dict->data(), dict_bytes, flat.data(), sizes.data(),
                                   static_cast<unsigned>(sizes.size()));
  if (ZDICT_isError(n)) {
    // Training fails on data without repeated structure; that is not an error, just no gain.
    dict->clear();
    return Status::OK();
  }
  dict->resize(n);
  return Status::OK();
}

Status Dictionary::Create(std::string_view bytes, int level, std::shared_ptr<Dictionary>* out) {
  std::shared_ptr<Dictionary> d(new Dictionary());
  if (!bytes.empty()) {
    d->cdict_ = ZSTD_createCDict(bytes.data(), bytes.size(), level);
    d->ddict_ = ZSTD_createDDict(bytes.data(), bytes.size());
    if (!d->cdict_ || !d->ddict_) return Status::Corruption("invalid zstd dictionary");
  }
  *out = std::move(d);
  return Status::OK();
}

Dictionary::~Dictionary() {
  ZSTD_freeCDict(cdict_);
  ZSTD_freeDDict(ddict_);
}

namespace {

uint32_t RecordChecksum(const char* rec, size_t size) {
  return static_cast<uint32_t>(XXH3_64bits(rec + 4, size - 4));
}

void SealRecord(Codec codec, uint32_t raw_bytes, char* rec, size_t size) {
  PayloadHeader h{0, static_cast<uint32_t>(codec) << 30 | raw_bytes};
  std::memcpy(rec, &h, sizeof(h));
  h.checksum = RecordChecksum(rec, size);
  std::memcpy(rec, &h.checksum, sizeof(h.checksum));
}

}  // namespace

PayloadEncoder::PayloadEncoder(int level, std::shared_ptr<const Dictionary> dict)
    : level_(level), dict_(std::move(dict)), cctx_(ZSTD_createCCtx()) {
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_format, ZSTD_f_zstd1_magicless);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_contentSizeFlag, 0);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_dictIDFlag, 0);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 0);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level_);
}

PayloadEncoder::~PayloadEncoder() {
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeCCtx(frame_cctx_);
}

void PayloadEncoder::SetMaxBlockBytes(uint32_t bytes) {
  if (bytes != 0) bytes = std::clamp<uint32_t>(bytes, 1 << 10, ZSTD_BLOCKSIZE_MAX);
  block_bytes_ = bytes;
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_maxBlockSize, static_cast<int>(bytes));
  if (frame_cctx_)
    ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_maxBlockSize, static_cast<int>(bytes));
}

Status PayloadEncoder::EncodeKernelGroup(std::string_view content, std::string* out) {
  if (content.size() > kMaxPayloadBytes || content.size() < 4) {
    return Status::InvalidArgument("payload group too large or without an index");
  }
  const uint64_t index_bytes = 4 + 4ull * DecodeFixed32(content.data());
  if (index_bytes > content.size()) return Status::InvalidArgument("payload group index damaged");
  if (!frame_cctx_) {
    // A standard frame as the kernel's EROFS decodes it: magic number, no dictionary id (none
    // is used), a window of at most 1 MiB; the content size in the header costs a few bytes.
    frame_cctx_ = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_dictIDFlag, 0);
    ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_checksumFlag, 0);
    ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_maxBlockSize, static_cast<int>(block_bytes_));
  }
  const std::string_view records = content.substr(index_bytes);
  int window_log = 10;
  while (window_log < kKernelFrameWindowLog && (size_t{1} << window_log) < records.size()) {
    ++window_log;
  }
  ZSTD_CCtx_setParameter(frame_cctx_, ZSTD_c_windowLog, window_log);
  const size_t start = out->size();
  const size_t bound = ZSTD_compressBound(records.size());
  out->resize(start + sizeof(PayloadHeader) + index_bytes + bound);
  char* dst = out->data() + start + sizeof(PayloadHeader);
  std::memcpy(dst, content.data(), index_bytes);
  const size_t n =
      ZSTD_compress2(frame_cctx_, dst + index_bytes, bound, records.data(), records.size());
  if (ZSTD_isError(n)) return Status::IOError(std::string("zstd: ") + ZSTD_getErrorName(n));
  out->resize(start + sizeof(PayloadHeader) + index_bytes + n);
  SealRecord(Codec::kZstdFrame, static_cast<uint32_t>(content.size()), out->data() + start,
             out->size() - start);
  return Status::OK();
}

Status PayloadEncoder::Encode(std::string_view raw, bool use_dict, std::string* out) {
  if (raw.size() > kMaxPayloadBytes) return Status::InvalidArgument("payload too large");
  size_t start = out->size();
  size_t bound = ZSTD_compressBound(raw.size());
  out->resize(start + sizeof(PayloadHeader) + bound);
  char* dst = out->data() + start + sizeof(PayloadHeader);
  Codec codec;
  size_t n;
  if (use_dict && dict_ && dict_->cdict()) {
    ZSTD_CCtx_refCDict(cctx_, dict_->cdict());  // its level applies
    codec = Codec::kZstdDict;
  } else {
    ZSTD_CCtx_refCDict(cctx_, nullptr);
    codec = Codec::kZstd;
  }
  n = ZSTD_compress2(cctx_, dst, bound, raw.data(), raw.size());
  if (ZSTD_isError(n)) return Status::IOError(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n >= raw.size()) {
    // Incompressible: store as is (reads then skip decompression altogether).
    std::memcpy(dst, raw.data(), raw.size());
    n = raw.size();
    codec = Codec::kRaw;
  }
  out->resize(start + sizeof(PayloadHeader) + n);
  SealRecord(codec, static_cast<uint32_t>(raw.size()), out->data() + start,
             sizeof(PayloadHeader) + n);
  return Status::OK();
}

namespace {

// Encodes records [a, b) as one solid group into *out (replacing it).
Status EncodeGroup(const std::vector<std::string_view>& records, size_t a, size_t b,
                   bool kernel_frames, PayloadEncoder* enc, std::string* content,
                   std::string* out) {
  GroupBuilder g;
  for (size_t i = a; i < b; ++i) g.Add(records[i]);
  *content = g.Finish();
  out->clear();
  if (kernel_frames) return enc->EncodeKernelGroup(*content, out);
  return enc->Encode(*content, /*use_dict=*/true, out);
}

}  // namespace

Status EncodeSolidGroups(const std::vector<std::string_view>& records, const GroupSizing& sizing,
                         PayloadEncoder* enc, EncodedGroups* out) {
  // A group's last page is worth filling when this much of it is left.
  constexpr size_t kMinFillBytes = 64;
  constexpr int kFillTries = 3;
  const uint64_t target = sizing.group_bytes;
  const ValueSizing& pages = sizing.values;
  enc->SetMaxBlockBytes(sizing.block_bytes);
  std::string content, group, bigger;
  size_t a = 0;
  while (a < records.size()) {
    size_t b = a + 1;
    uint64_t raw = records[a].size();
    while (b < records.size() && b - a < kMaxGroupRecords && raw + records[b].size() <= target) {
      raw += records[b++].size();
    }
    // Format 5: no group smaller than kMinKernelGroupBytes where records follow (it takes the
    // next ones whatever their size), and no such rest after it (it takes that too).
    if (sizing.kernel_frames) {
      while (b < records.size() && b - a < kMaxGroupRecords && raw < kMinKernelGroupBytes) {
        raw += records[b++].size();
      }
      uint64_t rest = 0;
      for (size_t c = b; c < records.size() && rest < kMinKernelGroupBytes; ++c) {
        rest += records[c].size();
      }
      if (b < records.size() && rest < kMinKernelGroupBytes &&
          records.size() - a <= kMaxGroupRecords) {
        for (; b < records.size(); ++b) raw += records[b].size();
      }
    }
    DSFS_RETURN_IF_ERROR(EncodeGroup(records, a, b, sizing.kernel_frames, enc, &content, &group));
    // Fill the last page: estimate how many more records fit from the ratio so far, compress
    // again, keep the larger group if it still fits; after a miss, try with half as many.
    size_t limit = SIZE_MAX;
    for (int t = 0; t < kFillTries && pages.page_bytes > 0 && b < records.size(); ++t) {
      const size_t footprint = pages.Footprint(group.size());
      const size_t free = footprint - pages.page_header_bytes - group.size();
      if (free < kMinFillBytes) break;
      const double ratio = static_cast<double>(group.size()) / static_cast<double>(content.size());
      size_t c = b;
      uint64_t raw2 = raw;
      double estimate = 0;
      while (c < records.size() && c - b < limit && c - a < kMaxGroupRecords &&
             raw2 + records[c].size() <= 2 * target &&
             estimate + (records[c].size() + 4) * ratio <= free * 0.9) {
        estimate += (records[c].size() + 4) * ratio;
        raw2 += records[c++].size();
      }
      if (c == b) break;
      std::string bigger_content;
      DSFS_RETURN_IF_ERROR(
          EncodeGroup(records, a, c, sizing.kernel_frames, enc, &bigger_content, &bigger));
      if (pages.Footprint(bigger.size()) <= footprint) {
        group.swap(bigger);
        content.swap(bigger_content);
        b = c;
        raw = raw2;
        limit = SIZE_MAX;
      } else {
        limit = std::max<size_t>(1, (c - b) / 2);
        if (c - b == 1) break;
      }
    }
    out->values += group;
    out->ends.push_back(out->values.size());
    out->counts.push_back(static_cast<uint32_t>(b - a));
    a = b;
  }
  return Status::OK();
}

Status EncodeDictionaryRecord(std::string_view dict, int level, std::string* record) {
  record->clear();
  PayloadEncoder enc(level, nullptr);
  return enc.Encode(dict, /*use_dict=*/false, record);
}

Status DecodeDictionaryRecord(std::string_view record, uint32_t dict_bytes, std::string* dict) {
  PayloadView p;
  DSFS_RETURN_IF_ERROR(ParsePayload(record, &p).WithContext("dictionary"));
  if (p.codec == Codec::kZstdDict || p.raw_bytes != dict_bytes) {
    return Status::Corruption("dictionary record does not match the header");
  }
  dict->resize(p.raw_bytes);
  PayloadDecoder decoder;
  return decoder.Decode(p, nullptr, dict->data()).WithContext("dictionary");
}

std::string RawPayloadRecord(std::string_view raw) {
  std::string rec(sizeof(PayloadHeader), '\0');
  rec += raw;
  SealRecord(Codec::kRaw, static_cast<uint32_t>(raw.size()), rec.data(), rec.size());
  return rec;
}

Status ParsePayload(std::string_view record, PayloadView* out) {
  if (record.size() < sizeof(PayloadHeader)) return Status::Corruption("payload record too short");
  PayloadHeader h;
  std::memcpy(&h, record.data(), sizeof(h));
  if (RecordChecksum(record.data(), record.size()) != h.checksum) {
    return Status::Corruption("payload checksum mismatch");
  }
  uint32_t codec = h.codec_and_size >> 30;
  out->codec = static_cast<Codec>(codec);
  out->raw_bytes = h.codec_and_size & kMaxPayloadBytes;
  out->stored = record.substr(sizeof(PayloadHeader));
  out->index_bytes = 0;
  if (out->codec == Codec::kRaw && out->stored.size() != out->raw_bytes) {
    return Status::Corruption("raw payload has the wrong size");
  }
  if (out->codec == Codec::kZstdFrame) {
    const uint64_t index_bytes =
        out->stored.size() < 4 ? UINT64_MAX : 4 + 4ull * DecodeFixed32(out->stored.data());
    if (index_bytes > out->stored.size() || index_bytes > out->raw_bytes) {
      return Status::Corruption("payload group index damaged");
    }
    out->index_bytes = static_cast<uint32_t>(index_bytes);
  }
  return Status::OK();
}

PayloadDecoder::PayloadDecoder() : dctx_(ZSTD_createDCtx()) {
  ZSTD_DCtx_setParameter(dctx_, ZSTD_d_format, ZSTD_f_zstd1_magicless);
}
PayloadDecoder::~PayloadDecoder() {
  ZSTD_freeDCtx(dctx_);
  ZSTD_freeDCtx(frame_dctx_);
}

ZSTD_DCtx* PayloadDecoder::FrameContext() {
  if (!frame_dctx_) {
    frame_dctx_ = ZSTD_createDCtx();
    // What the kernel allows: a reader never allocates a larger window for a crafted frame.
    ZSTD_DCtx_setParameter(frame_dctx_, ZSTD_d_windowLogMax, kKernelFrameWindowLog);
  }
  ZSTD_DCtx_reset(frame_dctx_, ZSTD_reset_session_only);
  return frame_dctx_;
}

void PayloadDecoder::UseDictionary(const ZSTD_DDict* ddict) {
  // A prefix decode stops mid-frame: until the session is reset, zstd refuses a new dictionary
  // (stage_wrong) and would decode with the old one, which may be freed by now.
  ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
  ZSTD_DCtx_refDDict(dctx_, ddict);
}

Status PayloadDecoder::Decode(const PayloadView& p, const Dictionary* dict, char* dst) {
  size_t n;
  switch (p.codec) {
    case Codec::kRaw:
      std::memcpy(dst, p.stored.data(), p.raw_bytes);
      return Status::OK();
    case Codec::kZstd:
      UseDictionary(nullptr);
      n = ZSTD_decompressDCtx(dctx_, dst, p.raw_bytes, p.stored.data(), p.stored.size());
      break;
    case Codec::kZstdDict:
      if (!dict || !dict->ddict()) return Status::Corruption("payload needs a missing dictionary");
      UseDictionary(dict->ddict());
      n = ZSTD_decompressDCtx(dctx_, dst, p.raw_bytes, p.stored.data(), p.stored.size());
      break;
    case Codec::kZstdFrame:
      std::memcpy(dst, p.stored.data(), p.index_bytes);
      n = ZSTD_decompressDCtx(FrameContext(), dst + p.index_bytes, p.raw_bytes - p.index_bytes,
                              p.stored.data() + p.index_bytes, p.stored.size() - p.index_bytes);
      if (!ZSTD_isError(n)) n += p.index_bytes;
      break;
    default:
      return Status::Corruption("payload has an unknown codec");
  }
  if (ZSTD_isError(n)) {
    return Status::Corruption(std::string("payload does not decompress: ") + ZSTD_getErrorName(n));
  }
  if (n != p.raw_bytes) return Status::Corruption("payload decompressed to the wrong size");
  return Status::OK();
}

Status PayloadDecoder::DecodePrefix(const PayloadView& p, const Dictionary* dict, char* dst,
                                    const std::function<uint64_t(std::string_view)>& need,
                                    uint64_t* decoded) {
  *decoded = 0;
  if (p.codec == Codec::kRaw) {
    std::memcpy(dst, p.stored.data(), p.raw_bytes);
    *decoded = p.raw_bytes;
    return Status::OK();
  }
  if (p.codec != Codec::kZstd && p.codec != Codec::kZstdDict && p.codec != Codec::kZstdFrame) {
    return Status::Corruption("payload has an unknown codec");
  }
  if (p.codec == Codec::kZstdDict && (!dict || !dict->ddict())) {
    return Status::Corruption("payload needs a missing dictionary");
  }
  ZSTD_DCtx* dctx = dctx_;
  ZSTD_inBuffer in{p.stored.data(), p.stored.size(), 0};
  ZSTD_outBuffer out{dst, 0, 0};
  if (p.codec == Codec::kZstdFrame) {
    // The index is stored as it is: out first, then the frame of the records after it.
    dctx = FrameContext();
    std::memcpy(dst, p.stored.data(), p.index_bytes);
    in.pos = out.pos = p.index_bytes;
  } else {
    UseDictionary(p.codec == Codec::kZstdDict ? dict->ddict() : nullptr);
  }
  size_t left = 1;  // what zstd says is left of the frame (0: it ended)
  for (;;) {
    const uint64_t want = std::min<uint64_t>(need(std::string_view(dst, out.pos)), p.raw_bytes);
    if (out.pos >= want) break;
    // Exactly what is wanted: zstd decodes a block that does not fit into its own buffer and
    // hands out only what fits, so the blocks past the wanted bytes are never decoded.
    out.size = want;
    const size_t before = out.pos;
    left = ZSTD_decompressStream(dctx, &out, &in);
    if (ZSTD_isError(left)) {
      return Status::Corruption(std::string("payload does not decompress: ") +
                                ZSTD_getErrorName(left));
    }
    if (out.pos == before && (left == 0 || in.pos == in.size)) {
      return Status::Corruption("payload decompressed to the wrong size");
    }
  }
  if (out.pos == p.raw_bytes && left != 0) {
    // All of raw_bytes is out: the frame must end here (as Decode demands).
    char extra;
    ZSTD_outBuffer more{&extra, 1, 0};
    left = ZSTD_decompressStream(dctx, &more, &in);
    if (ZSTD_isError(left) || more.pos != 0 || left != 0) {
      return Status::Corruption("payload decompressed to the wrong size");
    }
  }
  *decoded = out.pos;
  return Status::OK();
}

}  // namespace dsfs
