// The `dsfs` command. Each subcommand is a function over its arguments and two streams, so tests
// run it in-process; tools/main.cc is only the process wrapper.
#pragma once

#include <atomic>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/kv_open.h"
#include "common/status.h"
#include "mount/mount.h"
#include "pack/packer.h"

namespace dsfs {

// Runs `dsfs ARGS...` (args excludes the program name). Returns the exit status: 0 on success,
// 1 on failure (one "dsfs: error: ..." line on `err`), 2 on a usage error.
int DsfsMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Subcommands, called by DsfsMain after parsing.
struct PackCommand {
  std::string src, dst;
  std::string backend = "lmdb";  // "lmdb" (one file) or "rocksdb" (a directory)
  bool force = false;
  bool quiet = false;  // -q: no progress line, no summary (errors only)
  PackOptions options;
};
Status RunPack(const PackCommand& cmd, std::ostream& out, std::ostream& err);

struct AddCommand {
  std::string store, src;
  bool quiet = false;
  AddOptions options;
};
// dsfs add STORE SRC [--prefix PATH] [--replace]: see AddDirectory.
Status RunAdd(const AddCommand& cmd, std::ostream& out, std::ostream& err);

// After a pack or add that watched kControlDirName (PackOptions::watch_root_names): logs a
// warning if the stored root holds an entry of that name, which mounts hide behind their
// control directory (fs/control_dir.h).
void WarnIfControlDirStored(const PackStats& stats);

struct ConvertCommand {
  std::string src, dst;
  std::string backend = "lmdb";
  bool force = false;
  bool quiet = false;
};
// dsfs convert SRC DST --backend NAME: copies every record of SRC, byte for byte (payloads
// are not decompressed), into a new store of another (or the same) backend. On a terminal
// (stderr) and without `quiet`, a progress line on `err`; one summary line on `out` (none
// when `quiet`).
Status RunConvert(const ConvertCommand& cmd, std::ostream& out, std::ostream& err);
// For convert and push: the records of store `src`, read once front to back, after checking
// that `src` is a readable dsfs store (before anything is created at the destination).
Status OpenStoreRecords(const std::string& src, std::unique_ptr<KvReader>* reader);

struct PushCommand {
  std::string src, dst;
  bool force = false;
  bool quiet = false;
};
// dsfs push SRC s3://BUCKET/PREFIX: uploads every record of SRC (as convert does) into a store
// in S3 object storage (backend/s3/s3_kv.h), with progress on `err`.
Status RunPush(const PushCommand& cmd, std::ostream& out, std::ostream& err);

// How a size is written, for the errors that find none: appended to ParseSize's message.
inline constexpr const char* kSizeSyntax =
    "a size is bytes, or a number with K, M, G or T: 4096, 64K, 256KiB, 1M, 8G";

// Parses a mount option list ("threads=2,allow_other,...") into `config`: the one place where
// -o options are understood. InvalidArgument names an unknown or malformed option.
Status ParseMountOptions(const std::string& list, MountConfig* config);
// Parses an option list as mount(8) passes it from fstab or `mount -o`: the options every
// filesystem gets (defaults, auto, noauto, nofail, _netdev, nosuid, noatime, x-systemd.*, ...)
// are skipped and appended to `ignored`; the rest go to ParseMountOptions ("rw" is refused).
// With `sloppy` (mount -s), unknown options are skipped too.
Status ParseFstabMountOptions(const std::string& list, bool sloppy, MountConfig* config,
                              std::vector<std::string>* ignored);

// The mount helper: mount(8) runs `mount.fuse.dsfs STORE MOUNTPOINT [-sfnv] [-o OPTIONS]` for
// `mount -t fuse.dsfs` and fstab lines of type fuse.dsfs.
struct MountHelperArgs {
  MountConfig config;
  bool fake = false;     // -f: parse and check, mount nothing
  bool verbose = false;  // -v: log at info level
  bool help = false;
  bool version = false;              // -V, --version
  std::vector<std::string> ignored;  // generic options skipped ("rw" among them)
  bool asked_rw = false;             // "rw" or -w (fstab's "defaults"): read-only all the same
};
Status ParseMountHelperArgs(const std::vector<std::string>& args, MountHelperArgs* out);
// Runs the helper (`program` is its argv[0], for messages). Mounts in the background and
// returns once the mount answers. Exit status as mount(8) expects from helpers: 0 mounted,
// 1 bad invocation, 32 mount failure; one "dsfs: error: ..." line on `err` on failure.
int MountHelperMain(const std::string& program, const std::vector<std::string>& args,
                    std::ostream& out, std::ostream& err);

// Applies the config's logging options (log file, level), then MountStore.
Status RunMount(const MountConfig& config);
Status RunUmount(const std::string& mountpoint, bool lazy);

// `json`: one JSON object per entry and line (docs/usage.md, "JSON output"), whatever
// `long_format`.
Status RunLs(const std::string& store, const std::string& path, bool long_format, bool recursive,
             std::ostream& out, bool json = false);
Status RunCat(const std::string& store, const std::string& path, std::ostream& out);
// `path`: the directory whose tensor view availability is reported.
Status RunInfo(const std::string& store, const std::string& path, bool json, std::ostream& out);
// Prints the live counters of the dsfs mount at `mountpoint` (its /.dsfs/stats file): as
// "key: value" lines, the raw JSON (`json`), or Prometheus's text format (`prometheus`,
// mount/metrics.h).
Status RunStats(const std::string& mountpoint, bool json, std::ostream& out,
                bool prometheus = false);
struct WarmupCommand {
  std::string mountpoint;
  std::vector<std::string> paths;  // inside the mount (default: all of it)
  int threads = 8;                 // -j: files read at once (runs of consecutive files each)
  bool quiet = false;
  bool json = false;  // the summary as one JSON object (docs/usage.md, "JSON output")
  const std::atomic<bool>* cancel = nullptr;  // set: stop, keeping what was read
};
// dsfs warmup MOUNTPOINT [PATH...]: reads the files of PATHs (default: all) through the live
// mount so that they land in its caches (an S3 mount's disk cache, the RAM cache within its
// budget); a progress line on `err` on a terminal; "SIZE cached, N failed (...)" on `out`.
// IOError if any file could not be read, or if interrupted.
Status RunWarmup(const WarmupCommand& cmd, std::ostream& out, std::ostream& err);

// The cache_dir a mount of a store in S3 uses by default: $XDG_CACHE_HOME/dsfs, else
// ~/.cache/dsfs.
std::string DefaultCacheDir();
// dsfs cache ls [DIR]: the S3 disk caches in DIR (default DefaultCacheDir()).
// `json`: one JSON object (docs/usage.md, "JSON output").
Status RunCacheLs(const std::string& dir, std::ostream& out, bool json = false);
// dsfs cache gc [DIR] [--keep-days N] [-n]: see GcS3Caches.
Status RunCacheGc(const std::string& dir, int keep_days, bool dry_run, std::ostream& out);

struct ExtractCommand {
  std::string store;
  std::string dest = "-";          // a directory (made if missing), or "-": a tar stream on `out`
  std::vector<std::string> paths;  // inside the store (default: all of it)
  std::string view = "original";   // the view written out (fs/views.h: bmp, npy, bmp-256, ...)
  bool force = false;              // write into a non-empty directory, adding only
  bool quiet = false;
  // Into a DIR: 1, the walk writes; 2, the writes on a thread of their own (measured no faster
  // on 2 busy CPUs: bench/results/extract).
  int threads = 1;
  const std::atomic<bool>* cancel = nullptr;  // set: stop
};
// dsfs extract STORE [DIR|-] [PATH...]: the tree (or PATHs, with their parents) written into
// DIR or as a pax tar stream on `out`, with modes, mtimes, symlinks (as links) and empty
// directories; never writes outside DIR, refuses a non-empty DIR unless `force`, and then never
// replaces what is there. An entry that cannot be read or written is named on `err` and left
// out, the rest written: then Corruption. A progress line on a terminal (stderr); a summary
// line on `out` for a DIR unless `quiet`.
Status RunExtract(const ExtractCommand& cmd, std::ostream& out, std::ostream& err);

// Checks every payload; lists the damaged files on `out`, a progress line on `err` when it is a
// terminal (not `quiet`), "verified N files" unless `quiet`. Corruption if any is damaged.
// `json`: instead, one JSON object on `out` (docs/usage.md, "JSON output"), also when damaged.
Status RunVerify(const std::string& store, bool quiet, std::ostream& out, std::ostream& err,
                 bool json = false);

}  // namespace dsfs
