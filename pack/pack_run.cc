#include "pack/pack_run.h"

#include <algorithm>
#include <ctime>
#include <thread>

#include "common/log.h"
#include "common/memory_limit.h"
#include "store/segments.h"

namespace dsfs {
namespace {

// More compression threads than any machine has cores only costs memory (and a thread each).
constexpr int kMaxPackThreads = 1024;

}  // namespace

Status CheckOptions(const PackOptions& options) {
  if (options.chunk_bytes < 4096 || options.segment_bytes < 4096 ||
      options.chunk_bytes > kMaxChunkBytes || options.segment_bytes > kMaxSegmentRawBytes) {
    return Status::InvalidArgument(
        "chunk sizes must be 4096 bytes to 64 MiB, segment sizes 4096 bytes to 16 MiB");
  }
  if (options.group_bytes < 1024 || options.group_bytes > kMaxGroupBytes) {
    return Status::InvalidArgument("group sizes must be 1 KiB to 4 MiB");
  }
  if (options.zstd_level < 1 || options.zstd_level > ZSTD_maxCLevel()) {
    return Status::InvalidArgument("compression level must be between 1 and " +
                                   std::to_string(ZSTD_maxCLevel()));
  }
  if (options.dict_bytes != 0 &&
      (options.dict_bytes < 1024 || options.dict_bytes > kMaxDictBytes)) {
    return Status::InvalidArgument("dictionary size must be 0 (none) or 1K to 16M");
  }
  if (options.threads < 0 || options.threads > kMaxPackThreads) {
    return Status::InvalidArgument("threads must be 0 (one per CPU) to " +
                                   std::to_string(kMaxPackThreads));
  }
  return Status::OK();
}

static_assert(std::atomic<bool>::is_always_lock_free, "set from signal handlers");

Status CheckCancelled(const std::atomic<bool>* cancel) {
  return cancel && cancel->load(std::memory_order_relaxed) ? Status::IOError("interrupted")
                                                           : Status::OK();
}

std::string StripSlashes(std::string src) {
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  return src;
}

PackRun::PackRun(const PackOptions& options, KvWriter* writer,
                 const std::function<void(const PackProgress&)>& progress)
    : options_(options),
      writer_(writer),
      groups_{options.group_bytes, writer->value_sizing()},
      progress_(progress) {
  // Without a dictionary the groups are frames the kernel decodes itself: format 5.
  groups_.kernel_frames = options.dict_bytes == 0;
  threads_ = options.threads > 0
                 ? options.threads
                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void PackRun::ContinueFrom(const StoreHeader& h) {
  next_id_ = h.payload_count;
  payload_bytes_ = h.payload_bytes;
  next_pixel_id_ = h.pixel_count;
  pixel_bytes_ = h.pixel_bytes;
  images_ = h.image_count;
  const bool solid = h.version >= kSolidFormatVersion;
  solid_payload_from_ = solid ? h.solid_payload_from : h.payload_count;
  solid_pixel_from_ = solid ? h.solid_pixel_from : h.pixel_count;
  write_dict_ = false;
  groups_.kernel_frames = h.version >= kKernelFormatVersion;  // the store's own kind of groups
}

void PackRun::Report(bool force) {
  if (!progress_) return;
  auto now = Clock::now();
  if (!force && now - last_report_ < std::chrono::milliseconds(200)) return;
  last_report_ = now;
  progress_(prog_);
}

void PackRun::LogPhase(const char* name) {
  auto now = Clock::now();
  Log()->info("pack: {} took {:.2f} s", name,
              std::chrono::duration<double>(now - phase_start_).count());
  phase_start_ = now;
}

Status PackRun::WriteGroups(const EncodedGroups& g, char space, uint64_t* next_id) {
  size_t begin = 0;
  for (size_t i = 0; i < g.ends.size(); ++i) {
    *next_id += g.counts[i];
    DSFS_RETURN_IF_ERROR(writer_->Put(PayloadKey(*next_id - 1, space),
                                      std::string_view(g.values).substr(begin, g.ends[i] - begin)));
    begin = g.ends[i];
  }
  return Status::OK();
}

Status PackRun::Compress(std::shared_ptr<const Dictionary> dict,
                         const std::function<Status(OrderedCompressor*)>& produce,
                         const ImageFn& on_image) {
  prog_.phase = "compressing";
  OrderedCompressor comp(threads_, options_.zstd_level, std::move(dict),
                         BatchesInFlight(threads_, DefaultBudgets().pack_pipeline_bytes),
                         options_.predecode, options_.chunk_bytes, groups_);
  Status produced;
  std::thread producer([&] {
    produced = produce(&comp);
    comp.CloseInput();
  });
  Status s;
  for (;;) {
    if (!(s = CheckCancelled(options_.cancel)).ok()) break;
    Batch b;
    bool eof = false;
    if (!comp.Next(&b, std::chrono::milliseconds(100), &eof)) {
      if (eof) break;
      Report(false);
      continue;
    }
    s = b.status;
    if (s.ok() && !b.payloads.ends.empty() && b.first_id != next_id_) {
      s = Status::IOError("pack: payloads out of order");
    }
    if (s.ok()) s = WriteGroups(b.payloads, kPayloadSpace, &next_id_);
    uint64_t pixel_id = next_pixel_id_;
    if (s.ok()) s = WriteGroups(b.pixels, kPixelSpace, &next_pixel_id_);
    if (!s.ok()) break;
    for (const ImageResult& r : b.image_results) {
      WriteImage(r, pixel_id, on_image);
      pixel_id += r.pixel_records;
    }
    if (pixel_id != next_pixel_id_) {
      s = Status::IOError("pack: pixel records out of order");
      break;
    }
    payload_bytes_ += b.payloads.values.size();
    pixel_bytes_ += b.pixels.values.size();
    prog_.files_done += b.files_completed;
    prog_.bytes_done += b.raw_bytes;
    prog_.bytes_stored = payload_bytes_;
    Report(false);
  }
  comp.Abort();  // on error: unblock the producer
  producer.join();
  if (!produced.ok()) return produced;
  return s;
}

void PackRun::WriteImage(const ImageResult& r, uint64_t first_pixel, const ImageFn& on_image) {
  if (r.kind == ImageKind::kUnsupported) {
    // One line per image for the first few; a tree of millions of non-images (or of one
    // unsupported kind) must not bury the log: the rest are counted in the pack summary.
    if (++images_as_is_ <= kImageWarnings) {
      Log()->warn("{}: {}: the views serve it as it is", r.path, r.why);
    } else if (images_as_is_ == kImageWarnings + 1) {
      Log()->warn(
          "more images the views cannot decode: not logged one by one (counted in "
          "the summary)");
    }
  } else {
    ++images_;
  }
  on_image(r, r.pixel_records > 0 ? first_pixel + 1 : 0);
}

Status PackRun::Finish(const std::vector<InodeRecord>& inodes, const std::string& names,
                       const std::string& dict_bytes, PackStats* st) {
  prog_.phase = "finishing";
  Report(true);
  // The root is inode 1 (inodes[0]); its entries are inodes [data, data + size).
  const InodeRecord* root = inodes.empty() ? nullptr : &inodes[0];
  for (uint64_t i = 0; root && i < root->size && root->data + i <= inodes.size(); ++i) {
    const InodeRecord& e = inodes[root->data - 1 + i];
    std::string_view name = std::string_view(names).substr(e.name_off, e.name_len);
    for (const std::string& watched : options_.watch_root_names) {
      if (name == watched) st->root_names_found.push_back(watched);
    }
  }
  InodeLayout layout = InodeLayout::For(inodes);
  std::string inode_bytes(inodes.size() * layout.record_bytes(), '\0');
  const uint64_t inode_bytes_size = inode_bytes.size();
  for (size_t i = 0; i < inodes.size(); ++i) {
    layout.Encode(inodes[i], inode_bytes.data() + i * layout.record_bytes());
  }
  DSFS_RETURN_IF_ERROR(writer_->Put(kLayoutKey, layout.Serialize()));
  // The tables in compressed segments (store/segments.h), at kMinMetadataLevel at least.
  MetadataRecords meta;
  DSFS_RETURN_IF_ERROR(EncodeMetadata(inodes, inode_bytes, layout, names, options_.segment_bytes,
                                      std::max(options_.zstd_level, kMinMetadataLevel), threads_,
                                      &meta));
  std::string().swap(inode_bytes);
  for (const auto& [key, value] : meta.records) DSFS_RETURN_IF_ERROR(writer_->Put(key, value));
  st->metadata_raw_bytes = inode_bytes_size + names.size();
  st->metadata_bytes = 0;
  for (const auto& r : meta.records) st->metadata_bytes += r.second.size();
  LogPhase("metadata segments");
  if (!dict_bytes.empty() && write_dict_) {
    std::string record;
    DSFS_RETURN_IF_ERROR(EncodeDictionaryRecord(dict_bytes, options_.zstd_level, &record));
    DSFS_RETURN_IF_ERROR(writer_->Put(kDictKey, record));
  }
  StoreHeader h{};
  if (groups_.kernel_frames) h.version = kKernelFormatVersion;
  h.created_unix_s = static_cast<uint64_t>(std::time(nullptr));
  h.zstd_level = options_.zstd_level;
  h.chunk_bytes = options_.chunk_bytes;
  h.segment_bytes = options_.segment_bytes;
  h.dict_bytes = static_cast<uint32_t>(dict_bytes.size());
  h.inode_count = inodes.size();
  h.file_count = st->files;
  h.dir_count = st->dirs;
  h.symlink_count = st->symlinks;
  h.file_bytes = st->bytes_in;
  h.payload_count = next_id_;
  h.payload_bytes = payload_bytes_;
  h.names_bytes = names.size();
  h.image_count = images_;
  h.pixel_count = next_pixel_id_;
  h.pixel_bytes = pixel_bytes_;
  h.group_bytes = options_.group_bytes;
  h.solid_payload_from = solid_payload_from_;
  h.solid_pixel_from = solid_pixel_from_;
  SealHeader(&h);
  DSFS_RETURN_IF_ERROR(
      writer_->Put(kHeaderKey, std::string_view(reinterpret_cast<const char*>(&h), sizeof(h))));
  DSFS_RETURN_IF_ERROR(writer_->Commit());
  LogPhase("metadata and commit");
  st->payload_bytes = payload_bytes_;
  st->images = images_;
  st->images_as_is = images_as_is_;
  st->pixel_bytes = pixel_bytes_;
  st->dict_bytes = h.dict_bytes;
  st->seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  return Status::OK();
}

}  // namespace dsfs
