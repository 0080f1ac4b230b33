// Internal to pack/: one pack or add from start to commit. The source's producer (on a thread
// of its own) feeds an OrderedCompressor, which cuts the records into solid groups that fill
// the backend's pages (KvWriter::value_sizing); the calling thread writes the groups in
// payload-id order, reports progress, and at the end writes the metadata tables, dictionary and
// header and commits.
//
// Thread safety: a PackRun is used by the thread that made it; only the producer passed to
// Compress runs elsewhere (and must not touch the PackRun but for Report, see below).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/kv_open.h"
#include "common/status.h"
#include "pack/compressor.h"
#include "pack/packer.h"
#include "store/format.h"

namespace dsfs {

// InvalidArgument naming the first option out of range.
Status CheckOptions(const PackOptions& options);
// IOError "interrupted" once *cancel is set (see PackOptions::cancel); OK for a null token.
Status CheckCancelled(const std::atomic<bool>* cancel);
// `src` without trailing slashes (but "/" stays).
std::string StripSlashes(std::string src);

class PackRun {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` and `writer` must outlive the run; `progress` may be empty.
  PackRun(const PackOptions& options, KvWriter* writer,
          const std::function<void(const PackProgress&)>& progress);

  // The progress reported; sources fill in totals and phases.
  PackProgress& progress() { return prog_; }
  // Continues the numbering and totals of an existing store (dsfs add): new payload and pixel
  // records get the ids after its last ones (in solid groups, whatever the store's version);
  // its dictionary record is kept as it is.
  void ContinueFrom(const StoreHeader& h);
  uint64_t next_payload_id() const { return next_id_; }
  // Calls the progress callback, at most every 200 ms unless `force`.
  void Report(bool force);
  // Logs how long the phase `name` took (since the previous LogPhase or the start).
  void LogPhase(const char* name);

  // Runs `produce` (which Submits batches and returns its status) on a thread of its own,
  // against a compressor using `dict` (which `produce` may set later: SetDictionary), writing
  // everything it produces. Returns the first error; "interrupted" if cancelled.
  // `on_image` gets what became of every image job, with the pixel record id + 1 of its first
  // stored pixel record (0: none), on this thread.
  using ImageFn = std::function<void(const ImageResult&, uint64_t pixels)>;
  Status Compress(std::shared_ptr<const Dictionary> dict,
                  const std::function<Status(OrderedCompressor*)>& produce,
                  const ImageFn& on_image);

  // Writes the metadata tables (`inodes`, `names`), the dictionary (unless ContinueFrom) and
  // the header, and commits. `st` holds the tree's counts; the stored sizes and the time are
  // added to it.
  Status Finish(const std::vector<InodeRecord>& inodes, const std::string& names,
                const std::string& dict_bytes, PackStats* st);

 private:
  // Reports an image whose pixel records (if any) start at pixel id `first_pixel`.
  void WriteImage(const ImageResult& r, uint64_t first_pixel, const ImageFn& on_image);
  // Writes the groups of record space `space` in `g`, the first starting at id *next_id;
  // advances *next_id past them.
  Status WriteGroups(const EncodedGroups& g, char space, uint64_t* next_id);

  const PackOptions& options_;
  KvWriter* writer_;
  GroupSizing groups_;  // kernel_frames: a format 5 store (no dictionary)
  std::function<void(const PackProgress&)> progress_;
  int threads_;
  PackProgress prog_;
  Clock::time_point start_ = Clock::now(), phase_start_ = start_, last_report_ = start_;
  uint64_t next_id_ = 0, payload_bytes_ = 0;
  // Version 4 header fields: what ContinueFrom found, or a new store's.
  uint64_t solid_payload_from_ = 0, solid_pixel_from_ = 0;
  uint64_t next_pixel_id_ = 0, pixel_bytes_ = 0, images_ = 0, images_as_is_ = 0;
  bool write_dict_ = true;
};

}  // namespace dsfs
