#include "tools/commands.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <optional>

#include "common/log.h"
#include "common/path.h"
#include "common/units.h"
#include "common/version.h"
#include "pack/packer.h"
#include "pack/remote_source.h"

namespace dsfs {
namespace {

// A message for an error line: a name, a server's word or an argument the user typed in it
// cannot break the line nor send the terminal an escape (what is already escaped stays so).
std::string Printable(const std::string& message) { return PrintableName(message, false); }

// Set by the signal handlers of InterruptOnSignals: the cancellation token of the pack or add
// being run (PackOptions::cancel). A store to a lock-free atomic is all a handler may do.
std::atomic<bool> g_cancel_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from signal handlers");

// While alive, SIGINT, SIGTERM and SIGHUP (the terminal or SSH session went away) cancel the
// pack or add that was given token() (see PackOptions::cancel) instead of killing the process;
// the previous handlers come back after. No SA_RESTART: a read blocked on a pipe fails with
// EINTR, which also ends the run.
class InterruptOnSignals {
 public:
  InterruptOnSignals() {
    g_cancel_requested.store(false);
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_cancel_requested.store(true, std::memory_order_relaxed); };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    // Under nohup (SIGHUP ignored) the pack goes on as asked.
    sigaction(SIGHUP, nullptr, &old_hup_);
    if (old_hup_.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
  }
  ~InterruptOnSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGHUP, &old_hup_, nullptr);
    g_cancel_requested.store(false);
  }
  InterruptOnSignals(const InterruptOnSignals&) = delete;
  InterruptOnSignals& operator=(const InterruptOnSignals&) = delete;

  const std::atomic<bool>* token() const { return &g_cancel_requested; }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_hup_ {};
};

// CLI11 validator for sizes like 110K, 256KiB, 1M.
struct SizeValidator : public CLI::Validator {
  SizeValidator() {
    name_ = "SIZE";
    func_ = [](std::string& s) -> std::string {
      uint64_t v;
      Status st = ParseSize(s, &v);
      if (!st.ok()) return st.message() + " (" + kSizeSyntax + ")";
      s = std::to_string(v);
      return std::string();
    };
  }
};

constexpr const char* kMountOptionsHelp = R"(Mount options (-o, comma-separated; the same in fstab):
  cache_size=SIZE       RAM cache of decompressed data (default: 1/8 of the memory limit; up
                        to 3/8 where the files would fill more than half of it as page cache)
  push=SIZE             push listed directories' files into the page cache, up to SIZE
                        (default: 1/4 of the memory limit; 0 = off)
  cache_dir=DIR         a store in S3 (s3://BUCKET/PREFIX): keep what was fetched under DIR
                        (default: ~/.cache/dsfs), shared by later mounts of the same store
  cache_disk=SIZE       ... within SIZE of disk (default: 8G; 0: no disk cache)
  s3_attempts=N         a store in S3: tries per request before a read fails with EIO
                        (default: $DSFS_S3_ATTEMPTS, else 5)
  s3_timeout=SECONDS    ... a transfer stalled this long is dropped and retried
                        (default: $DSFS_S3_TIMEOUT_S, else 10)
  s3_anonymous          ... unsigned requests, no credentials (a public bucket)
  s3_addressing=MODE    ... auto (default: virtual-hosted on AWS, path style elsewhere),
                        path or virtual
  preload[=PATH]        decompress PATH (default: all) into the RAM cache after mounting
  threads=N             FUSE session threads (default 2)
  nice=N                their nice value, so readers' requests are served first (default -10)
  transport=MODE        auto (default): FUSE over io_uring where the kernel allows it
                        (enable_uring=Y), else the classic /dev/fuse loop; uring: the same,
                        warning when it falls back; classic: never io_uring
  timeout=S             kernel entry/attribute cache timeout (default 1000000)
  zero_open=0|1         answer OPEN without a round trip (default 1)
  os_readahead=0|1      let the OS read ahead in the store file (default 0)
  allow_other           let other users in (stored permission bits apply)
  uid=N,gid=N           owner shown for every file (default: the mounting user)
  umask=MODE            octal permission bits cleared from every stored mode (default 0)
  view=NAME             show a view at the root: original (default), bmp, npy, tensor,
                        bmp-N or jpeg-N (every image resized as torchvision's Resize(N), N 16
                        to 4096; all views are also at MOUNTPOINT/.dsfs/NAME)
  kernel[=loop]         root only: serve the tree (or the view=) through the kernel's EROFS,
                        no round trip per file; MOUNTPOINT/.dsfs is absent and `dsfs stats`
                        still works. EROFS reads the image file itself (Linux 6.12+), else
                        (or with kernel=loop) a loop device with direct I/O; without either
                        or without EROFS: a FUSE mount, and a log line says why
  log_level=LEVEL       trace, debug, info, warn, error, off (default: --log-level)
  log_file=PATH         append the log to PATH; SIGHUP reopens it (for logrotate)
  status_interval=S     seconds between STATUS= updates to systemd (default 5)
  metrics_file=PATH     rewrite PATH every status_interval with the mount's metrics in
                        Prometheus's text format (node_exporter's textfile collector);
                        removed at unmount
  debug                 trace every FUSE request to stderr
  ro                    accepted (dsfs is always read-only); rw is refused
In the foreground (-f) the log goes to stderr and, if $NOTIFY_SOCKET is set (systemd
Type=notify), dsfs sends READY=1 once the mount answers, STATUS= lines and STOPPING=1.
SIGTERM/SIGINT unmount and exit 0; SIGHUP reopens the log file and never ends the daemon.
Without -f, dsfs returns once the mount answers and the daemon logs to syslog (or log_file).)";

constexpr const char* kServiceHelp = R"(Running as a service:
  fstab:    /data/ds.db /mnt/ds fuse.dsfs ro,allow_other,cache_size=8G 0 0
            (mount(8) runs the mount helper mount.fuse.dsfs, a link to dsfs, which mounts
            like `dsfs mount`; `mount /mnt/ds`, `umount /mnt/ds` and systemd .mount units work)
  systemd:  dsfs@.service, instance = the escaped mountpoint (systemd-escape -p /mnt/ds), reads
            STORE= and OPTIONS= from /etc/dsfs/INSTANCE.conf; systemctl start dsfs@mnt-ds
            (a store in S3: dsfs-s3@.service, the same with the network)
  by hand:  mount -t fuse.dsfs -o ro,cache_size=8G /data/ds.db /mnt/ds
  The Debian package (cpack -G DEB) and cmake --install put bin/dsfs, /sbin/mount.fuse.dsfs
  (mount(8) looks in /sbin only) and the units in lib/systemd/system. See docs/service.md.)";

constexpr const char* kQuietHelp =
    "print nothing on success: no progress line, no summary (warnings and errors stay)";
constexpr const char* kStoreHelp =
    "a store: a file (lmdb), a directory (rocksdb) or s3://BUCKET/PREFIX";

// "dsfs" and the subcommands the parse got to ("dsfs cache gc"): whose --help to point to.
std::string SelectedCommand(const CLI::App& app) {
  std::string name = "dsfs";
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().back();
    name += " " + at->get_name();
  }
  return name;
}

// dsfs help [COMMAND [SUBCOMMAND]]: what dsfs COMMAND [SUBCOMMAND] --help prints, once the
// names are known to be commands.
int PrintHelp(CLI::App& app, const std::vector<std::string>& names, std::ostream& out,
              std::ostream& err) {
  CLI::App* at = &app;
  std::string known = "dsfs", path;  // the commands found so far; all the names given so far
  for (const std::string& name : names) {
    auto found = at->get_subcommands([&](CLI::App* sub) { return sub->check_name(name); });
    path += (path.empty() ? "" : " ") + name;
    if (found.empty()) {
      err << "dsfs: error: unknown command '" << PrintableName(path) << "' (see " << known
          << " --help)\n";
      return 2;
    }
    at = found.front();
    known += " " + at->get_name();
  }
  std::vector<std::string> again = names;
  again.push_back("--help");
  return DsfsMain(again, out, err);
}

const char* kHelperUsage =
    "usage: mount.fuse.dsfs STORE MOUNTPOINT [-s] [-f] [-n] [-v] [-o OPTIONS]\n"
    "       mount.fuse.dsfs -V|--version\n"
    "  as run by mount(8) for `mount -t fuse.dsfs STORE MOUNTPOINT -o OPTIONS` and fstab lines\n"
    "  of type fuse.dsfs. Generic options (defaults, noauto, nofail, _netdev, noatime, nosuid,\n"
    "  x-systemd.*, ...) are ignored, rw (from defaults) mounts read-only with a warning, -s\n"
    "  skips unknown options, -f mounts nothing, -v logs at info level.\n";

}  // namespace

int MountHelperMain(const std::string& program, const std::vector<std::string>& args,
                    std::ostream& out, std::ostream& err) {
  MountHelperArgs h;
  Status s = ParseMountHelperArgs(args, &h);
  if (h.help) {
    out << kHelperUsage << kMountOptionsHelp << "\n";
    return 0;
  }
  if (h.version) {
    out << "mount.fuse.dsfs (dsfs " << DsfsVersion() << ")\n";
    return 0;
  }
  if (!s.ok()) {
    err << "dsfs: error: " << Printable(s.message()) << " (" << PrintableName(program) << ")\n";
    return 1;
  }
  if (h.verbose && h.config.log_level.empty()) SetLogLevel("info");
  if (h.asked_rw) {
    err << "dsfs: warning: " << PrintableName(h.config.store_path)
        << ": dsfs mounts are read-only: 'rw' is mounted read-only\n";
  }
  if (h.fake) return 0;
  if (!h.ignored.empty() && h.verbose) {
    std::string list;
    for (const auto& o : h.ignored) list += (list.empty() ? "" : ",") + o;
    Log()->info("ignoring generic mount options: {}", list);
  }
  s = RunMount(h.config);
  if (!s.ok()) {
    err << "dsfs: error: " << Printable(s.message()) << "\n";
    return 32;  // mount(8): mount failure
  }
  return 0;
}

int DsfsMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"dsfs: pack image datasets into one compressed store and mount them read-only",
               "dsfs"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("dsfs ") + DsfsVersion());
  // The options of dsfs itself are also taken after the subcommand (dsfs ls S --log-level
  // debug): a subcommand hands what it does not know to dsfs.
  app.fallthrough();
  std::string log_level = "warn";
  auto* log_level_opt =
      app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
          ->capture_default_str();
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "log at info level (as --log-level info)");
  app.add_flag("-q,--quiet", quiet,
               "print nothing on success: no progress, no summary (warnings stay)");
  SizeValidator size_validator;

  PackCommand pack;
  uint64_t dict_size = pack.options.dict_bytes, chunk_size = pack.options.chunk_bytes,
           group_size = pack.options.group_bytes;
  auto* pack_cmd = app.add_subcommand(
      "pack",
      "pack SRC (a directory, a tar/cpio/zip archive, or - for an archive on stdin) into "
      "a new store DST");
  pack_cmd
      ->add_option("SRC", pack.src,
                   "source directory, archive file, - (stdin), an archive at s3://BUCKET/KEY or "
                   "http(s)://URL, or the objects under s3://BUCKET/PREFIX/ (docs/pack-sources.md)")
      ->required();
  pack_cmd->add_option("DST", pack.dst, "the store to create (a file; a directory with rocksdb)")
      ->required();
  pack_cmd->add_flag("-f,--force", pack.force,
                     "replace DST if it is a dsfs store or an empty directory (anything else "
                     "there is refused)");
  pack_cmd->add_option("--backend", pack.backend, "lmdb (DST is one file) or rocksdb (a directory)")
      ->capture_default_str();
  pack_cmd->add_option("-l,--level", pack.options.zstd_level, "zstd compression level (1-22)")
      ->capture_default_str();
  pack_cmd->add_option("--dict-size", dict_size, "zstd dictionary size, 0 = none (e.g. 110K)")
      ->transform(size_validator)
      ->capture_default_str();
  pack_cmd->add_option("--chunk-size", chunk_size, "large files are stored in chunks of this size")
      ->transform(size_validator)
      ->capture_default_str();
  pack_cmd
      ->add_option("--group-size", group_size,
                   "small files are compressed together in groups of this size (1K-4M)")
      ->transform(size_validator)
      ->capture_default_str();
  pack_cmd->add_option("-j,--threads", pack.options.threads, "compression threads (0 = all cores)")
      ->capture_default_str();
  pack_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);
  pack_cmd->add_flag("--predecode", pack.options.predecode,
                     "also store every image's decoded pixels, so the bmp/npy/tensor views "
                     "never decode");

  AddCommand add;
  auto* add_cmd = app.add_subcommand(
      "add", "add the files and directories of SRC to STORE (new names only), atomically");
  add_cmd->add_option("STORE", add.store, "existing store")->required();
  add_cmd->add_option("SRC", add.src, "source directory")->required();
  add_cmd->add_option("--prefix", add.options.prefix,
                      "directory of the store to add into (created if missing; default: root)");
  add_cmd->add_flag("--replace", add.options.replace, "replace entries that exist");
  add_cmd->add_option("-j,--threads", add.options.threads, "compression threads (0 = all cores)")
      ->capture_default_str();
  add_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);

  ConvertCommand convert;
  auto* convert_cmd = app.add_subcommand(
      "convert", "copy store SRC into a new store DST of another backend (no recompression)");
  convert_cmd->add_option("SRC", convert.src, "existing store")->required();
  convert_cmd->add_option("DST", convert.dst, "store to create")->required();
  convert_cmd
      ->add_option("--backend", convert.backend, "lmdb, rocksdb or s3 (DST s3://BUCKET/PREFIX)")
      ->required();
  convert_cmd->add_flag("-f,--force", convert.force,
                        "replace DST if it is a dsfs store or an empty directory");
  convert_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);

  PushCommand push;
  auto* push_cmd = app.add_subcommand(
      "push", "upload store SRC to object storage as s3://BUCKET/PREFIX, for dsfs mount s3://...");
  push_cmd->add_option("SRC", push.src, "existing store")->required();
  push_cmd->add_option("DST", push.dst, "s3://BUCKET/PREFIX")->required();
  push_cmd->add_flag("-f,--force", push.force, "replace a store already at DST");
  push_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);
  push_cmd->footer(
      "Credentials and endpoint the AWS way: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
      "AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE and ~/.aws/credentials\n"
      "(never on the command line). A push that stops leaves nothing mountable; running it\n"
      "again skips the data objects already uploaded. See docs/s3.md.");

  MountConfig mount;
  std::vector<std::string> mount_opts;
  auto* mount_cmd = app.add_subcommand("mount", "mount STORE read-only at MOUNTPOINT");
  mount_cmd->add_option("STORE", mount.store_path, kStoreHelp)->required();
  mount_cmd
      ->add_option("MOUNTPOINT", mount.mountpoint,
                   "an existing directory, or /dev/fd/N: a /dev/fuse descriptor a privileged "
                   "parent mounted (docs/containers.md)")
      ->required();
  mount_cmd->add_flag("-f,--foreground", mount.foreground, "stay in the foreground");
  // Each -o list is split by ParseMountOptions, which skips empty items (CLI11's own splitting
  // turned "-o ,,," into a missing argument).
  mount_cmd->add_option("-o", mount_opts, "comma-separated mount options (below)");
  mount_cmd->footer(std::string(kMountOptionsHelp) + "\n\n" + kServiceHelp);

  std::string umount_point;
  bool lazy = false;
  auto* umount_cmd = app.add_subcommand("umount", "unmount a dsfs mount (also a dead one)");
  umount_cmd->add_option("MOUNTPOINT", umount_point, "the directory a dsfs mount is at")
      ->required();
  umount_cmd->add_flag("-z,--lazy", lazy, "detach now even if busy");

  std::string store_path, path = "/";
  bool long_format = false, recursive = false, json = false;
  auto* ls_cmd = app.add_subcommand("ls", "list PATH inside STORE");
  ls_cmd->add_option("STORE", store_path, kStoreHelp)->required();
  ls_cmd->add_option("PATH", path, "a directory (or file) inside the store")->capture_default_str();
  ls_cmd->add_flag("-l", long_format, "long format (mode, size, mtime)");
  ls_cmd->add_flag("-R", recursive, "recurse into directories");
  ls_cmd->add_flag("--json", json, "one JSON object per entry and line");
  auto* cat_cmd = app.add_subcommand("cat", "write the file at PATH inside STORE to stdout");
  cat_cmd->add_option("STORE", store_path, kStoreHelp)->required();
  cat_cmd->add_option("PATH", path, "a file inside the store")->required();
  auto* info_cmd = app.add_subcommand(
      "info", "show what STORE holds, and whether the tensor view has PATH (default /)");
  info_cmd->add_option("STORE", store_path, kStoreHelp)->required();
  info_cmd->add_option("PATH", path, "a directory inside the store, for the tensor view")
      ->capture_default_str();
  info_cmd->add_flag("--json", json, "machine-readable output");
  auto* verify_cmd = app.add_subcommand("verify", "check every payload of STORE");
  verify_cmd->add_option("STORE", store_path, kStoreHelp)->required();
  verify_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);
  verify_cmd->add_flag("--json", json, "one JSON object: counts and the damaged files");

  ExtractCommand extract;
  auto* extract_cmd = app.add_subcommand(
      "extract",
      "write the tree of STORE (or its PATHs) into directory DIR, or as a pax tar stream to "
      "stdout (DIR -, the default)");
  extract_cmd->add_option("STORE", extract.store, kStoreHelp)->required();
  extract_cmd
      ->add_option("DIR", extract.dest,
                   "the directory to write into (made if missing), or - for a tar "
                   "stream on stdout")
      ->capture_default_str();
  extract_cmd->add_option("PATH", extract.paths, "files or directories inside the store");
  extract_cmd
      ->add_option("--view", extract.view,
                   "the view written out: original, bmp, npy, tensor, bmp-N, jpeg-N")
      ->capture_default_str();
  extract_cmd->add_flag("-f,--force", extract.force,
                        "write into a non-empty DIR: adds what is missing, replaces nothing");
  extract_cmd
      ->add_option("-j,--threads", extract.threads,
                   "into a DIR: 1, read and write on one thread; 2, the writes on a thread of "
                   "their own")
      ->capture_default_str()
      ->check(CLI::Range(1, 2));
  extract_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);
  extract_cmd->footer(
      "Files are written in the store's order, each group decoded once. Nothing is written\n"
      "outside DIR: symlinks are written as links and never followed. A file that cannot be\n"
      "read is named on stderr and left out, the rest is written, and the exit status is 1.");

  std::string stats_point;
  bool stats_json = false;
  auto* stats_cmd = app.add_subcommand("stats", "show the live counters of a mount");
  stats_cmd->add_option("MOUNTPOINT", stats_point, "the directory a live dsfs mount is at")
      ->required();
  bool stats_prometheus = false;
  auto* stats_json_flag = stats_cmd->add_flag("--json", stats_json, "the raw JSON");
  stats_cmd
      ->add_flag("--prometheus", stats_prometheus,
                 "the Prometheus text exposition format (metric names: docs/usage.md)")
      ->excludes(stats_json_flag);

  WarmupCommand warmup;
  auto* warmup_cmd = app.add_subcommand(
      "warmup",
      "read PATHs (default: all) of a live mount so that they land in its caches (an S3 "
      "store's disk cache, the RAM cache within its budget)");
  warmup_cmd->add_option("MOUNTPOINT", warmup.mountpoint, "a live dsfs mount")->required();
  warmup_cmd->add_option("PATH", warmup.paths,
                         "files or directories inside the mount (relative to it, or absolute)");
  warmup_cmd->add_option("-j,--threads", warmup.threads, "files read at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  warmup_cmd->add_flag("-q,--quiet", quiet, kQuietHelp);
  warmup_cmd->add_flag("--json", warmup.json, "the summary as one JSON object");
  warmup_cmd->footer(
      "Files are read in the store's order, in runs of consecutive files per thread, and\n"
      "dropped from the page cache after. Ctrl-C stops it keeping what was read: run it again\n"
      "to finish. Exit status 1 if any file could not be read. See docs/s3.md.");

  std::string cache_dir;
  int keep_days = 30;
  bool dry_run = false;
  auto* cache_cmd = app.add_subcommand(
      "cache", "list or clean up the S3 disk caches in a cache_dir (default ~/.cache/dsfs)");
  cache_cmd->require_subcommand(1);
  cache_cmd->footer(
      "dsfs cache ls [DIR]: one entry per store cached in DIR. dsfs cache gc [DIR]\n"
      "[--keep-days N] [-n]: frees what no mount uses. See docs/s3.md.");
  auto* cache_ls_cmd = cache_cmd->add_subcommand(
      "ls", "list the stores cached in DIR: URL, endpoint, identity, size, last use, mounted");
  cache_ls_cmd->add_option("DIR", cache_dir,
                           "a cache_dir (default: $XDG_CACHE_HOME/dsfs or "
                           "~/.cache/dsfs)");
  cache_ls_cmd->add_flag("--json", json, "one JSON object");
  auto* cache_gc_cmd = cache_cmd->add_subcommand(
      "gc",
      "remove the caches in DIR no mount uses that were not used within --keep-days days, "
      "and stores pushed over since");
  cache_gc_cmd->add_option("DIR", cache_dir,
                           "a cache_dir (default: $XDG_CACHE_HOME/dsfs or "
                           "~/.cache/dsfs)");
  cache_gc_cmd->add_option("--keep-days", keep_days, "keep caches used within this many days")
      ->capture_default_str()
      ->check(CLI::Range(0, 36500));
  cache_gc_cmd->add_flag("-n,--dry-run", dry_run, "say what would be removed, remove nothing");
  cache_gc_cmd->footer(
      "A cache a live mount uses is never removed (each mount holds a lock on its cache).\n"
      "Only dsfs's own files, never through a symlink, only this user's.");

  std::vector<std::string> help_names;
  auto* help_cmd = app.add_subcommand(
      "help", "print the help of dsfs, or of COMMAND: the same as dsfs COMMAND --help");
  help_cmd->add_option("COMMAND", help_names, "a command, and one of its own (dsfs help cache gc)");
  // Set last: a subcommand takes its parent's footer when it is made, and this one is dsfs's
  // own (dsfs mount --help repeats it: the mount options are what it is about).
  app.footer(std::string(kServiceHelp) +
             "\n\nThe options of a command: dsfs help COMMAND, or dsfs COMMAND --help.");

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // A first word that is no command reads better named than as "a subcommand is required".
    if (app.get_subcommands().empty() && !args.empty() && !args[0].empty() && args[0][0] != '-') {
      what = "unknown command '" + PrintableName(args[0]) + "'";
    }
    err << "dsfs: error: " << Printable(what) << " (see " << SelectedCommand(app) << " --help)\n";
    return 2;
  }
  if (*help_cmd) return PrintHelp(app, help_names, out, err);
  // -q (of dsfs or of the subcommand, all one flag): no progress, no summary; warnings stay.
  pack.quiet = add.quiet = convert.quiet = push.quiet = warmup.quiet = extract.quiet = quiet;
  if (log_level_opt->count() == 0) log_level = verbose ? "info" : "warn";
  // As found on return: the tests run DsfsMain in-process, one command after another.
  const spdlog::level::level_enum level_before = Log()->level();
  struct RestoreLevel {
    spdlog::level::level_enum level;
    ~RestoreLevel() { Log()->set_level(level); }
  } restore{level_before};
  if (!SetLogLevel(log_level)) {
    err << "dsfs: error: unknown log level '" << PrintableName(log_level)
        << "' (one of trace, debug, info, warn, error, off)\n";
    return 2;
  }

  Status s;
  const std::string* store = *ls_cmd || *cat_cmd || *info_cmd || *verify_cmd ? &store_path
                             : *extract_cmd                                  ? &extract.store
                             : *add_cmd                                      ? &add.store
                             : *convert_cmd                                  ? &convert.src
                             : *push_cmd                                     ? &push.src
                                                                             : nullptr;
  if (store) s = CheckUrlScheme(*store, kStoreSources);
  if (*pack_cmd && !IsRemotePackSource(pack.src)) {
    s = CheckUrlScheme(pack.src,
                       "a source is a directory, an archive file, -, s3://BUCKET/KEY, "
                       "s3://BUCKET/PREFIX/ or an http(s):// URL of an archive");
  }
  if (!s.ok()) {
    err << "dsfs: error: " << Printable(s.message()) << "\n";
    return 1;
  }
  // Ctrl-C, SIGTERM or SIGHUP during pack or add: stop, and leave no store or temporary behind.
  std::optional<InterruptOnSignals> interrupt;
  if (*pack_cmd || *add_cmd || *warmup_cmd || *extract_cmd) {
    interrupt.emplace();
    extract.cancel = interrupt->token();
    pack.options.cancel = interrupt->token();
    add.options.cancel = interrupt->token();
    warmup.cancel = interrupt->token();
  }
  if (*pack_cmd) {
    pack.options.dict_bytes = static_cast<uint32_t>(std::min<uint64_t>(dict_size, UINT32_MAX));
    if (chunk_size > (64u << 20)) {
      err << "dsfs: error: --chunk-size must be at most 64M\n";
      return 2;
    }
    pack.options.chunk_bytes = static_cast<uint32_t>(chunk_size);
    if (group_size < 1024 || group_size > kMaxGroupBytes) {
      err << "dsfs: error: --group-size must be 1K to 4M\n";
      return 2;
    }
    pack.options.group_bytes = static_cast<uint32_t>(group_size);
    s = RunPack(pack, out, err);
  } else if (*add_cmd) {
    s = RunAdd(add, out, err);
  } else if (*convert_cmd) {
    s = RunConvert(convert, out, err);
  } else if (*push_cmd) {
    s = RunPush(push, out, err);
  } else if (*mount_cmd) {
    std::string joined;
    for (const auto& o : mount_opts) joined += (joined.empty() ? "" : ",") + o;
    s = ParseMountOptions(joined, &mount);
    if (!s.ok()) {
      err << "dsfs: error: " << Printable(s.message()) << "\n";
      return 2;
    }
    s = RunMount(mount);
  } else if (*umount_cmd) {
    s = RunUmount(umount_point, lazy);
  } else if (*ls_cmd) {
    s = RunLs(store_path, path, long_format, recursive, out, json);
  } else if (*cat_cmd) {
    s = RunCat(store_path, path, out);
  } else if (*info_cmd) {
    s = RunInfo(store_path, path, json, out);
  } else if (*stats_cmd) {
    s = RunStats(stats_point, stats_json, out, stats_prometheus);
  } else if (*verify_cmd) {
    s = RunVerify(store_path, quiet, out, err, json);
  } else if (*warmup_cmd) {
    s = RunWarmup(warmup, out, err);
  } else if (*extract_cmd) {
    s = RunExtract(extract, out, err);
  } else if (*cache_ls_cmd) {
    s = RunCacheLs(cache_dir, out, json);
  } else if (*cache_gc_cmd) {
    s = RunCacheGc(cache_dir, keep_days, dry_run, out);
  }
  out.flush();
  if (!s.ok()) {
    err << "dsfs: error: " << Printable(s.message()) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace dsfs
