#include "pack/compressor.h"

#include <algorithm>

#include "common/log.h"
#include "common/memory_limit.h"
#include "common/units.h"

namespace dsfs {
namespace {

// The dictionary is trained on about this many times its size of sample files, spread evenly
// over the tree. zstd suggests 100x, but on our datasets 10x already gives the same ratio
// (32x32 JPEG: 0.3850 at 10x, 0.3852 at 100x; Fashion-MNIST PNG: 0.9573 vs 0.9566) while
// training takes 0.2-0.7 s instead of 2.5-4 s; 20x keeps a margin for more varied trees.
constexpr uint64_t kDictSampleFactor = 20;
// Training reads at most this many sample bytes, whatever the dictionary's size, and no more
// than the memory limit's share (MemoryBudgets::pack_sample_bytes), but never fewer than this
// many times the dictionary (zstd cannot train on less).
constexpr uint64_t kMaxSampleBytes = 64 << 20;
constexpr uint64_t kMinSampleFactor = 4;
// While the dictionary is trained on an archive's first small files, their batches are held
// back; so are the batches of the other files read meanwhile, up to
// MemoryBudgets::pack_held_bytes beyond the samples (then the dictionary is trained on what was
// found).
// What a held chunk costs beside its bytes (its string and its place in the batch): counted
// against that bound, so that millions of tiny files are held within it too.
constexpr uint64_t kHeldChunkOverheadBytes = 64;

// Decodes the image of `job` (its chunks are in `b`): what the views can make of it and, with
// `predecode`, its pixels as raw records of at most `chunk_bytes`.
ImageResult AnalyzeImage(const Batch& b, const ImageJob& job, bool predecode,
                         uint32_t chunk_bytes) {
  ImageResult r;
  r.handle = job.handle;
  std::string joined;
  std::string_view data = b.raws[job.first_raw];
  if (job.raws > 1) {
    for (size_t i = 0; i < job.raws; ++i) joined += b.raws[job.first_raw + i];
    data = joined;
  }
  DecodedImage img;
  Status s = DecodeImage(data, &img);
  if (!s.ok()) {
    r.kind = ImageKind::kUnsupported;
    r.path = job.path;
    r.why = s.ToString();
    return r;
  }
  r.kind = SniffImage(data);
  r.width = img.width;
  r.height = img.height;
  if (predecode) {
    for (size_t off = 0; off < img.rgb.size(); off += chunk_bytes) {
      r.pixel_chunks.emplace_back(std::string_view(img.rgb).substr(off, chunk_bytes));
    }
    r.pixel_records = static_cast<uint32_t>(r.pixel_chunks.size());
    r.pixel_raw_bytes = img.rgb.size();
  }
  return r;
}

}  // namespace

uint64_t SampleBytes(uint32_t dict_bytes) {
  const uint64_t cap = std::max(std::min(kMaxSampleBytes, DefaultBudgets().pack_sample_bytes),
                                uint64_t{dict_bytes} * kMinSampleFactor);
  return std::min<uint64_t>(uint64_t{dict_bytes} * kDictSampleFactor, cap);
}

size_t BatchesInFlight(int threads, uint64_t pipeline_bytes) {
  // A batch holds up to Batch::kMaxBytes of raw chunks and about as much again once encoded;
  // two batches at least keep the reader and one worker busy.
  const uint64_t per_batch = 2 * Batch::kMaxBytes;
  const uint64_t most = static_cast<uint64_t>(std::max(threads, 1)) * 4;
  return static_cast<size_t>(std::clamp<uint64_t>(pipeline_bytes / per_batch, 2, most));
}

OrderedCompressor::OrderedCompressor(int threads, int level, std::shared_ptr<const Dictionary> dict,
                                     size_t max_in_flight, bool predecode, uint32_t chunk_bytes,
                                     GroupSizing groups)
    : groups_(groups),
      level_(level),
      predecode_(predecode),
      chunk_bytes_(chunk_bytes),
      max_in_flight_(max_in_flight),
      dict_(std::move(dict)),
      workers_(std::make_unique<WorkerGroup>("dsfs-compress", threads)) {}

OrderedCompressor::~OrderedCompressor() {
  Abort();
  workers_->Stop();  // what is queued is dropped (it returns at once once aborted)
}

// One job per submitted batch: it compresses the first batch in order of those not yet taken.
void OrderedCompressor::Work() {
  Batch b;
  uint64_t seq;
  std::unique_ptr<PayloadEncoder> encoder;
  {
    std::lock_guard lock(mu_);
    if (aborted_ || todo_.empty()) return;
    seq = todo_.begin()->first;
    b = std::move(todo_.begin()->second);
    todo_.erase(todo_.begin());
    // An encoder (a zstd context with the dictionary) per thread at once, reused by the jobs
    // after: made with the dictionary the first batch is compressed with.
    if (encoders_.empty()) {
      encoder = std::make_unique<PayloadEncoder>(level_, dict_);
    } else {
      encoder = std::move(encoders_.back());
      encoders_.pop_back();
    }
  }
  {
    PayloadEncoder& enc = *encoder;
    const bool predecode = predecode_;
    const uint32_t chunk_bytes = chunk_bytes_;
    if (b.status.ok()) {
      std::vector<std::string_view> chunks(b.raws.begin(), b.raws.end());
      b.status = EncodeSolidGroups(chunks, groups_, &enc, &b.payloads);
    }
    for (const ImageJob& job : b.images) {
      if (!b.status.ok()) break;
      b.image_results.push_back(AnalyzeImage(b, job, predecode, chunk_bytes));
    }
    if (b.status.ok() && predecode) {
      std::vector<std::string_view> pixels;
      for (const ImageResult& r : b.image_results) {
        pixels.insert(pixels.end(), r.pixel_chunks.begin(), r.pixel_chunks.end());
      }
      b.status = EncodeSolidGroups(pixels, groups_, &enc, &b.pixels);
    }
    for (ImageResult& r : b.image_results) r.pixel_chunks = {};
    b.images.clear();
    b.raws.clear();
  }
  std::lock_guard lock(mu_);
  encoders_.push_back(std::move(encoder));
  done_.emplace(seq, std::move(b));
  cv_done_.notify_all();
}

void OrderedCompressor::SetDictionary(std::shared_ptr<const Dictionary> dict) {
  std::lock_guard lock(mu_);
  dict_ = std::move(dict);
}

bool OrderedCompressor::Submit(Batch b) {
  std::unique_lock lock(mu_);
  cv_space_.wait(lock, [&] { return aborted_ || next_seq_ - written_seq_ < max_in_flight_; });
  if (aborted_) return false;
  todo_.emplace(next_seq_++, std::move(b));
  lock.unlock();
  workers_->Add([this] { Work(); });
  return true;
}

void OrderedCompressor::CloseInput() { SetAndWakeAll(&closed_); }

bool OrderedCompressor::Next(Batch* out, std::chrono::milliseconds wait, bool* eof) {
  std::unique_lock lock(mu_);
  auto ready = [&] { return done_.count(written_seq_) > 0; };
  cv_done_.wait_for(lock, wait, [&] { return ready() || (closed_ && written_seq_ == next_seq_); });
  *eof = !ready() && closed_ && written_seq_ == next_seq_;
  if (!ready()) return false;
  auto it = done_.find(written_seq_);
  *out = std::move(it->second);
  done_.erase(it);
  ++written_seq_;
  cv_space_.notify_all();
  return true;
}

void OrderedCompressor::Abort() { SetAndWakeAll(&aborted_); }

void OrderedCompressor::SetAndWakeAll(bool* flag) {
  std::lock_guard lock(mu_);
  *flag = true;
  cv_space_.notify_all();
  cv_done_.notify_all();
}

HeldTraining::HeldTraining(OrderedCompressor* comp, uint32_t dict_bytes, int zstd_level)
    : comp_(comp),
      dict_bytes_(dict_bytes),
      zstd_level_(zstd_level),
      want_(SampleBytes(dict_bytes)),
      training_(dict_bytes > 0) {}

Status HeldTraining::Submit(Batch&& batch) {
  if (!aborted_ && !comp_->Submit(std::move(batch))) aborted_ = true;
  return aborted_ ? Status::IOError("aborted") : Status::OK();
}

Status HeldTraining::Train() {
  training_ = false;
  std::vector<std::string> samples;
  for (const Batch& h : held_) {
    for (size_t i = 0; i < h.raws.size(); ++i) {
      if (h.use_dict[i]) samples.push_back(h.raws[i]);
    }
  }
  DSFS_RETURN_IF_ERROR(TrainDictionary(samples, dict_bytes_, &dict_));
  samples = {};
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_, zstd_level_, &dict));
  comp_->SetDictionary(dict);
  Log()->info("pack: dictionary trained on {} of the first {}", FormatBytes(sample_bytes_),
              FormatBytes(held_bytes_));
  for (Batch& h : held_) DSFS_RETURN_IF_ERROR(Submit(std::move(h)));
  held_.clear();
  return Status::OK();
}

Status HeldTraining::Flush(Batch* batch) {
  Batch full = std::move(*batch);
  *batch = Batch();
  if (!training_) return Submit(std::move(full));
  for (size_t i = 0; i < full.raws.size(); ++i) {
    if (full.use_dict[i]) sample_bytes_ += full.raws[i].size();
  }
  held_bytes_ += full.raw_bytes + full.raws.size() * kHeldChunkOverheadBytes;
  held_.push_back(std::move(full));
  if (sample_bytes_ >= want_ || held_bytes_ >= want_ + DefaultBudgets().pack_held_bytes) {
    return Train();
  }
  return Status::OK();
}

Status HeldTraining::Finish() { return training_ ? Train() : Status::OK(); }

}  // namespace dsfs
