#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "backend/kv_open.h"
#include "common/log.h"
#include "common/units.h"
#include "fs/control_dir.h"
#include "pack/remote_source.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {

void WarnIfControlDirStored(const PackStats& stats) {
  if (stats.root_names_found.empty()) return;
  Log()->warn(
      "the tree's top-level {} is hidden in mounts by dsfs's own {} (views and stats); it is "
      "reachable inside the views, e.g. MOUNT/{}/bmp/{}, and with dsfs ls/cat",
      kControlDirName, kControlDirName, kControlDirName, kControlDirName);
}

Status RunPack(const PackCommand& cmd, std::ostream& out, std::ostream& err) {
  // SRC is a directory, an archive file, "-" for an archive on stdin, or a remote source
  // (pack/remote_source.h: an archive at an s3:// or http(s):// URL, or s3://BUCKET/PREFIX/).
  struct stat st;
  bool archive = cmd.src == "-" || IsRemotePackSource(cmd.src);
  if (!archive) {
    if (::stat(cmd.src.c_str(), &st) != 0) return Status::FromErrno(errno, cmd.src);
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(cmd.src + ": not a directory or an archive");
    }
    archive = S_ISREG(st.st_mode);
    struct stat dst;
    if (::stat(cmd.dst.c_str(), &dst) == 0 && dst.st_dev == st.st_dev && dst.st_ino == st.st_ino) {
      return Status::InvalidArgument(cmd.dst + ": is the source itself");
    }
  }
  KvWriterOptions wo;
  wo.overwrite = cmd.force;
  wo.is_store = Store::HasStoreHeader;
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewKvWriter(cmd.dst, cmd.backend, wo, &writer));

  ProgressLine bar(err, !cmd.quiet && ::isatty(STDERR_FILENO));
  auto progress = [&](const PackProgress& p) { bar.Update(p); };
  PackOptions options = cmd.options;
  options.store_path = cmd.dst;  // not packed if it is inside SRC
  options.watch_root_names = {std::string(kControlDirName)};
  PackStats stats;
  Status s = archive ? PackArchive(cmd.src, options, writer.get(), progress, &stats)
                     : PackDirectory(cmd.src, options, writer.get(), progress, &stats);
  bar.Clear();
  DSFS_RETURN_IF_ERROR(s);
  writer.reset();
  WarnIfControlDirStored(stats);
  if (cmd.quiet) return Status::OK();  // -q: nothing on success
  uint64_t store_bytes = StoreBytes(cmd.dst);
  char line[400];
  double ratio =
      stats.bytes_in ? static_cast<double>(store_bytes) / static_cast<double>(stats.bytes_in) : 0.0;
  double rate = stats.seconds > 0 ? static_cast<double>(stats.files) / stats.seconds : 0.0;
  std::snprintf(
      line, sizeof(line),
      "packed %llu files, %llu directories, %llu symlinks: %s -> %s (ratio %.3f) in "
      "%.1f s, %.0f files/s",
      static_cast<unsigned long long>(stats.files), static_cast<unsigned long long>(stats.dirs),
      static_cast<unsigned long long>(stats.symlinks), FormatBytes(stats.bytes_in).c_str(),
      FormatBytes(store_bytes).c_str(), ratio, stats.seconds, rate);
  out << line;
  if (stats.skipped) out << " (" << stats.skipped << " special files skipped)";
  if (stats.replaced) {
    out << " (" << stats.replaced << " archive entries replaced by later ones of the same path";
    if (stats.dropped) out << ", " << stats.dropped << " entries below them dropped";
    out << ")";
  }
  out << "\n";
  if (stats.images || stats.images_as_is) {
    out << "images: " << stats.images << " decodable by the views";
    if (stats.images_as_is) {
      out << ", " << stats.images_as_is << " served as they are ("
          << (stats.images_as_is > kImageWarnings
                  ? "the first " + std::to_string(kImageWarnings) + " logged"
                  : std::string("logged"))
          << ")";
    }
    if (cmd.options.predecode) out << "; decoded pixels stored: " << FormatBytes(stats.pixel_bytes);
    out << "\n";
  }
  return Status::OK();
}

}  // namespace dsfs
