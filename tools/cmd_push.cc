// dsfs push: a store uploaded to S3 object storage (backend/s3/s3_kv.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "backend/kv_open.h"
#include "common/units.h"
#include "s3/url.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {

Status RunPush(const PushCommand& cmd, std::ostream& out, std::ostream& err) {
  if (!IsS3Url(cmd.dst)) {
    return Status::InvalidArgument(cmd.dst + ": the destination of push is s3://BUCKET/PREFIX");
  }
  S3Url url;
  DSFS_RETURN_IF_ERROR(ParseS3Url(cmd.dst, &url));
  // Refuse anything that is not a readable dsfs store before touching the bucket.
  std::unique_ptr<KvReader> reader;
  DSFS_RETURN_IF_ERROR(OpenStoreRecords(cmd.src, &reader));
  const uint64_t total = StoreBytes(cmd.src);
  const auto start = std::chrono::steady_clock::now();
  KvWriterOptions wo;
  wo.overwrite = cmd.force;
  S3WriterOptions so;
  // On a terminal one line redrawn with the rate and the time left (tools/progress.h), after
  // each data object; otherwise only the summary.
  ProgressLine bar(err, !cmd.quiet && ::isatty(STDERR_FILENO));
  PackProgress prog;
  prog.phase = "pushing";
  prog.bytes_total = total;
  uint64_t records = 0, bytes = 0, skipped_objects = 0;
  so.progress = [&](uint64_t done, uint64_t, uint64_t skipped) {
    prog.files_done = records;
    prog.bytes_done = std::min(done, total);
    skipped_objects = skipped;
    bar.Update(prog);
  };
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewS3Writer(cmd.dst, wo, so, &writer));
  DSFS_RETURN_IF_ERROR(
      ForEachRecord(reader.get(), "", [&](std::string_view key, std::string_view value) {
        ++records;
        bytes += value.size();
        return writer->Put(key, value);
      }));
  DSFS_RETURN_IF_ERROR(writer->Commit());
  writer.reset();
  bar.Clear();
  if (cmd.quiet) return Status::OK();  // -q: nothing on success
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "pushed " << cmd.src << " -> " << url.ToString() << ": " << records << " records, "
      << FormatBytes(bytes) << " in " << FormatDuration(s) << ", "
      << FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes) / std::max(s, 1e-3))) << "/s"
      << (skipped_objects ? " (" + std::to_string(skipped_objects) + " data objects already there)"
                          : "")
      << "\n";
  return Status::OK();
}

}  // namespace dsfs
