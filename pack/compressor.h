// Internal to pack/: the compression side of a pack. Sources cut file contents into chunks and
// gather them into batches; worker threads cut each batch into solid groups and compress them
// (and decode the images in it) and hand the batches back in submission order; the dictionary is
// trained on small files (dir_source samples the tree; HeldTraining trains on the first files of a
// stream).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/worker_group.h"
#include "image/image.h"
#include "store/codec.h"

namespace dsfs {

// Files above this size gain nothing from the dictionary (it is tuned for small inputs).
inline constexpr uint64_t kDictMaxFileBytes = 64 << 10;
// The largest --dict-size: zstd gains nothing from larger dictionaries on small files, and
// training time and memory grow with it.
inline constexpr uint32_t kMaxDictBytes = 16 << 20;

// Bytes of small files to train a `dict_bytes` dictionary on (bounded by the memory limit,
// common/memory_limit.h).
uint64_t SampleBytes(uint32_t dict_bytes);

// How many batches may be in flight through an OrderedCompressor of `threads` workers for them
// to hold about `pipeline_bytes` (MemoryBudgets::pack_pipeline_bytes): 4 per thread at most,
// 2 at least.
size_t BatchesInFlight(int threads, uint64_t pipeline_bytes);

// A JPEG or PNG file whose chunks are all in one batch: decoded by the worker.
struct ImageJob {
  uint32_t handle;  // the producer's name for the file (inode number or tree node)
  size_t first_raw, raws;
  std::string path;  // for the log line if the views must serve it as is
};
// What the views can make of an image (ImageJob), and its pixels (predecode).
struct ImageResult {
  uint32_t handle;
  ImageKind kind;
  uint32_t width = 0, height = 0;
  std::vector<std::string> pixel_chunks;  // raw pixel records (predecode; the worker groups them)
  uint32_t pixel_records = 0;             // how many
  uint64_t pixel_raw_bytes = 0;
  std::string path, why;  // kUnsupported: what was refused
};

// A batch of consecutive payloads (chunks), compressed by one worker into solid groups (no
// group spans two batches).
struct Batch {
  // A unit of compression work: up to this many payloads or raw bytes (a batch of small files
  // makes tens of groups, so few end short at the batch's end).
  static constexpr size_t kMaxPayloads = 8192;
  static constexpr uint64_t kMaxBytes = 8 << 20;

  uint64_t first_id = 0;
  std::vector<std::string> raws;  // raw chunks
  std::vector<uint8_t> use_dict;  // whether a chunk is a dictionary training sample
  EncodedGroups payloads;         // the chunks' groups, encoded
  EncodedGroups pixels;           // the pixel records' groups (predecode), in image order
  uint64_t raw_bytes = 0;
  uint64_t files_completed = 0;  // files whose last chunk is in this batch
  Status status;                 // a producer error travels to the writer in its batch
  std::vector<ImageJob> images;
  std::vector<ImageResult> image_results;
  bool full() const { return raws.size() >= kMaxPayloads || raw_bytes >= kMaxBytes; }
  void Add(std::string raw, bool dict) {
    raw_bytes += raw.size();
    raws.push_back(std::move(raw));
    use_dict.push_back(dict);
  }
};

// Compresses batches on worker threads and hands them back in submission order, with a bound
// on how many are in flight (so memory stays bounded whatever the source's speed).
// Thread safety: one producer thread (SetDictionary, Submit, CloseInput) and one writer thread
// (Next) at a time; Abort from either. mu_ guards the queues.
class OrderedCompressor {
 public:
  // `threads` workers compress at `level` with `dict` (may be null until SetDictionary) into
  // groups cut by `groups`; with `predecode`, images' pixels are stored as records of at most
  // `chunk_bytes`.
  OrderedCompressor(int threads, int level, std::shared_ptr<const Dictionary> dict,
                    size_t max_in_flight, bool predecode, uint32_t chunk_bytes, GroupSizing groups);
  // Aborts and joins the workers.
  ~OrderedCompressor();

  // Producer side: the dictionary the batches are compressed with, when it was not known at
  // construction. REQUIRES: before the first Submit.
  void SetDictionary(std::shared_ptr<const Dictionary> dict);
  // Producer side. Blocks while too many batches are in flight; false once aborted.
  bool Submit(Batch b);
  void CloseInput();
  // Writer side: the next batch in order. False if none is ready within `wait`; *eof is set
  // once the input is closed and every batch was handed out.
  bool Next(Batch* out, std::chrono::milliseconds wait, bool* eof);
  // Unblocks everyone; Submit and Next fail from then on.
  void Abort();

 private:
  void Work();

  const GroupSizing groups_;
  const int level_;
  const bool predecode_;
  const uint32_t chunk_bytes_;
  // Sets *flag (closed_ or aborted_) under mu_ and wakes every waiter.
  void SetAndWakeAll(bool* flag);

  const size_t max_in_flight_;
  std::mutex mu_;  // guards everything below
  std::shared_ptr<const Dictionary> dict_;
  std::condition_variable cv_space_, cv_done_;
  std::map<uint64_t, Batch> todo_, done_;
  std::vector<std::unique_ptr<PayloadEncoder>> encoders_;  // idle ones
  uint64_t next_seq_ = 0, written_seq_ = 0;
  bool closed_ = false, aborted_ = false;
  // Last: destroyed first, so no job runs on what the members above held.
  std::unique_ptr<WorkerGroup> workers_;
};

// The producer side of a stream whose dictionary is trained on its own first small files
// (archives): the batches read until there are SampleBytes of small files are held back,
// within MemoryBudgets::pack_held_bytes of other files (large ones are read through in batches
// like any other), then the dictionary is trained on what was found and set, and they are
// submitted.
// Thread: the producer's.
class HeldTraining {
 public:
  // `dict_bytes` 0: no dictionary, nothing held.
  HeldTraining(OrderedCompressor* comp, uint32_t dict_bytes, int zstd_level);

  // Submits the batch *b (or holds it while training) and leaves *b empty. IOError "aborted"
  // once the compressor is aborted (the writer failed: it reports why; see aborted()).
  Status Flush(Batch* b);
  // At the end of the stream: trains on what is held if the stream held less than the samples.
  Status Finish();
  bool aborted() const { return aborted_; }
  // The trained dictionary ("" if none).
  const std::string& dictionary() const { return dict_; }

 private:
  Status Submit(Batch&& batch);
  Status Train();

  OrderedCompressor* comp_;
  const uint32_t dict_bytes_;
  const int zstd_level_;
  const uint64_t want_;
  bool training_, aborted_ = false;
  std::vector<Batch> held_;
  uint64_t held_bytes_ = 0, sample_bytes_ = 0;
  std::string dict_;
};

}  // namespace dsfs
