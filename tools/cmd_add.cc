// dsfs add and dsfs convert: changing a store without repacking it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "backend/kv_store.h"
#include "common/units.h"
#include "fs/control_dir.h"
#include "store/store.h"
#include "tools/commands.h"

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
  bool bar = !cmd.quiet && ::isatty(STDERR_FILENO);
  auto progress = [&](const PackProgress& p) {
    if (!bar) return;
    char line[160];
    std::snprintf(line, sizeof(line), "\r%-11s %llu/%llu files  %s/%s  ", p.phase,
                  static_cast<unsigned long long>(p.files_done),
                  static_cast<unsigned long long>(p.files_total), FormatBytes(p.bytes_done).c_str(),
                  FormatBytes(p.bytes_total).c_str());
    err << line << std::flush;
  };
  AddOptions options = cmd.options;
  // Not added if it is inside SRC: the store (where a symlink leads) and its temporaries.
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(cmd.store.c_str(), nullptr),
                                                   &std::free);
  options.store_path = real ? std::string(real.get()) : cmd.store;
  options.watch_root_names = {std::string(kControlDirName)};
  PackStats stats;
  Status s = AddDirectory(*base, cmd.src, options, writer.get(), progress, &stats);
  if (bar) err << "\r\033[K" << std::flush;
  DSFS_RETURN_IF_ERROR(s);
  writer.reset();
  WarnIfControlDirStored(stats);
  char line[300];
  std::snprintf(
      line, sizeof(line),
      "added %llu files, %llu directories, %llu symlinks (%s, stored as %s) in %.1f s\n",
      static_cast<unsigned long long>(stats.files), static_cast<unsigned long long>(stats.dirs),
      static_cast<unsigned long long>(stats.symlinks), FormatBytes(stats.bytes_in).c_str(),
      FormatBytes(stats.payload_bytes).c_str(), stats.seconds);
  out << line;
  if (stats.replaced) {
    out << "replaced " << stats.replaced << " entries of the store";
    if (stats.dropped) out << ", removing the " << stats.dropped << " entries below them";
    out << "\n";
  }
  return Status::OK();
}

Status RunConvert(const ConvertCommand& cmd, std::ostream& out) {
  // Refuse anything that is not a readable dsfs store before creating the destination.
  std::unique_ptr<Store> check;
  DSFS_RETURN_IF_ERROR(Store::Open(cmd.src, StoreOptions{}, &check));
  check.reset();
  std::unique_ptr<KvReader> reader;
  KvReaderOptions ro;
  ro.random_access = false;  // one pass front to back
  DSFS_RETURN_IF_ERROR(OpenKvReader(cmd.src, ro, &reader));
  KvWriterOptions wo;
  wo.overwrite = cmd.force;
  wo.is_store = Store::HasStoreHeader;
  wo.expected_bytes = StoreBytes(cmd.src);
  std::unique_ptr<KvWriter> writer;
  DSFS_RETURN_IF_ERROR(NewKvWriter(cmd.dst, cmd.backend, wo, &writer));
  // Records are copied as they are: payloads stay compressed, checksums stay valid.
  uint64_t records = 0, bytes = 0;
  DSFS_RETURN_IF_ERROR(
      ForEachRecord(reader.get(), "", [&](std::string_view key, std::string_view value) {
        ++records;
        bytes += value.size();
        return writer->Put(key, value);
      }));
  DSFS_RETURN_IF_ERROR(writer->Commit());
  writer.reset();
  out << "converted " << cmd.src << " (" << reader->Name() << ") -> " << cmd.dst << " ("
      << cmd.backend << "): " << records << " records, " << FormatBytes(bytes) << "\n";
  return Status::OK();
}

}  // namespace dsfs
