// dsfs push: a store uploaded to S3 object storage (backend/s3_store.h).
#include <chrono>

#include "backend/kv_store.h"
#include "backend/s3_store.h"
#include "common/units.h"
#include "store/store.h"
#include "tools/commands.h"

namespace dsfs {

Status RunPush(const PushCommand& cmd, std::ostream& out, std::ostream& err) {
  if (!IsS3Url(cmd.dst)) {
    return Status::InvalidArgument(cmd.dst + ": the destination of push is s3://BUCKET/PREFIX");
  }
  S3Url url;
  DSFS_RETURN_IF_ERROR(ParseS3Url(cmd.dst, &url));
  // Refuse anything that is not a readable dsfs store before touching the bucket.
  std::unique_ptr<Store> check;
  DSFS_RETURN_IF_ERROR(Store::Open(cmd.src, StoreOptions{}, &check));
  check.reset();
  std::unique_ptr<KvReader> reader;
  KvReaderOptions ro;
  ro.random_access = false;  // one pass front to back
  DSFS_RETURN_IF_ERROR(OpenKvReader(cmd.src, ro, &reader));
  const uint64_t total = StoreBytes(cmd.src);
  const auto start = std::chrono::steady_clock::now();
  KvWriterOptions wo;
  wo.overwrite = cmd.force;
  S3WriterOptions so;
  if (!cmd.quiet) {
    so.progress = [&](uint64_t bytes, uint64_t objects, uint64_t skipped) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      err << "push: " << FormatBytes(bytes) << " of ~" << FormatBytes(total) << ", " << objects
          << " data objects" << (skipped ? " (" + std::to_string(skipped) + " already there)" : "")
          << ", " << FormatBytes(static_cast<uint64_t>(bytes / std::max(s, 1e-3))) << "/s\n";
    };
  }
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewS3Writer(cmd.dst, wo, so, &writer));
  uint64_t records = 0, bytes = 0;
  DSFS_RETURN_IF_ERROR(
      ForEachRecord(reader.get(), "", [&](std::string_view key, std::string_view value) {
        ++records;
        bytes += value.size();
        return writer->Put(key, value);
      }));
  DSFS_RETURN_IF_ERROR(writer->Commit());
  writer.reset();
  out << "pushed " << cmd.src << " -> " << url.ToString() << ": " << records << " records, "
      << FormatBytes(bytes) << "\n";
  return Status::OK();
}

}  // namespace dsfs
