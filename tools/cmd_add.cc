// dsfs add and dsfs convert: changing a store without repacking it.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "backend/kv_open.h"
#include "common/units.h"
#include "fs/control_dir.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {

Status RunAdd(const AddCommand& cmd, std::ostream& out, std::ostream& err) {
  struct stat st;
  if (::stat(cmd.src.c_str(), &st) != 0) return Status::FromErrno(errno, cmd.src);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(cmd.src + ": not a directory");
  // The updater first: it locks the store (and, for LMDB, copies it), so the version read
  // below is the one the update replaces.
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewKvUpdater(cmd.store, &writer));
  std::unique_ptr<Store> base;
  DSFS_RETURN_IF_ERROR(Store::Open(cmd.store, StoreOptions{}, &base));
  ProgressLine bar(err, !cmd.quiet && ::isatty(STDERR_FILENO));
  auto progress = [&](const PackProgress& p) { bar.Update(p); };
  AddOptions options = cmd.options;
  // Not added if it is inside SRC: the store (where a symlink leads) and its temporaries.
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(cmd.store.c_str(), nullptr),
                                                   &std::free);
  options.store_path = real ? std::string(real.get()) : cmd.store;
  options.watch_root_names = {std::string(kControlDirName)};
  PackStats stats;
  Status s = AddDirectory(*base, cmd.src, options, writer.get(), progress, &stats);
  bar.Clear();
  DSFS_RETURN_IF_ERROR(s);
  writer.reset();
  WarnIfControlDirStored(stats);
  if (cmd.quiet) return Status::OK();  // -q: nothing on success
  char line[300];
  double rate = stats.seconds > 0 ? static_cast<double>(stats.files) / stats.seconds : 0.0;
  std::snprintf(
      line, sizeof(line),
      "added %llu files, %llu directories, %llu symlinks (%s, stored as %s) in %.1f s, %.0f "
      "files/s\n",
      static_cast<unsigned long long>(stats.files), static_cast<unsigned long long>(stats.dirs),
      static_cast<unsigned long long>(stats.symlinks), FormatBytes(stats.bytes_in).c_str(),
      FormatBytes(stats.payload_bytes).c_str(), stats.seconds, rate);
  out << line;
  if (stats.replaced) {
    out << "replaced " << stats.replaced << " entries of the store";
    if (stats.dropped) out << ", removing the " << stats.dropped << " entries below them";
    out << "\n";
  }
  return Status::OK();
}

Status OpenStoreRecords(const std::string& src, std::unique_ptr<KvReader>* reader) {
  std::unique_ptr<Store> check;
  DSFS_RETURN_IF_ERROR(Store::Open(src, StoreOptions{}, &check));
  check.reset();
  KvReaderOptions ro;
  ro.random_access = false;  // one pass front to back
  return OpenKvReader(src, ro, reader);
}

Status RunConvert(const ConvertCommand& cmd, std::ostream& out, std::ostream& err) {
  std::unique_ptr<KvReader> reader;
  DSFS_RETURN_IF_ERROR(OpenStoreRecords(cmd.src, &reader));
  KvWriterOptions wo;
  wo.overwrite = cmd.force;
  wo.is_store = Store::HasStoreHeader;
  wo.expected_bytes = StoreBytes(cmd.src);
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewKvWriter(cmd.dst, cmd.backend, wo, &writer));
  // Records are copied as they are: payloads stay compressed, checksums stay valid. The
  // progress counts records as "files" and their bytes against the size of SRC.
  ProgressLine bar(err, !cmd.quiet && ::isatty(STDERR_FILENO));
  PackProgress prog;
  prog.phase = "copying";
  prog.bytes_total = wo.expected_bytes;
  const auto start = std::chrono::steady_clock::now();
  uint64_t records = 0, bytes = 0;
  Status s = ForEachRecord(reader.get(), "", [&](std::string_view key, std::string_view value) {
    ++records;
    bytes += value.size();
    if ((records & 255) == 0 && bar.Due()) {
      prog.files_done = records;
      prog.bytes_done = std::min(bytes, prog.bytes_total);
      bar.Update(prog);
    }
    return writer->Put(key, value);
  });
  if (s.ok()) {
    prog.phase = "finishing";
    prog.files_done = records;
    prog.bytes_done = prog.bytes_total;
    bar.Update(prog);
    s = writer->Commit();
  }
  bar.Clear();
  DSFS_RETURN_IF_ERROR(s);
  writer.reset();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (cmd.quiet) return Status::OK();
  char rate[96];
  std::snprintf(
      rate, sizeof(rate), " in %.1f s, %s/s", seconds,
      FormatBytes(seconds > 0 ? static_cast<uint64_t>(static_cast<double>(bytes) / seconds) : 0)
          .c_str());
  out << "converted " << cmd.src << " (" << reader->Name() << ") -> " << cmd.dst << " ("
      << cmd.backend << "): " << records << " records, " << FormatBytes(bytes) << rate << "\n";
  return Status::OK();
}

}  // namespace dsfs
