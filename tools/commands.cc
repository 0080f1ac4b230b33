#include "tools/commands.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <functional>
#include <memory>
#include <optional>

#include "common/log.h"
#include "common/path.h"
#include "common/unique_fd.h"
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

namespace {

// The command line being run: dsfs's own options, and each command with what runs it once the
// arguments are parsed.
struct Cli {
  // What runs a command: its exit status, its error line printed.
  using Run = std::function<int(std::ostream& out, std::ostream& err)>;

  CLI::App app{"dsfs: pack image datasets into one compressed store and mount them read-only",
               "dsfs"};
  std::string log_level = "warn";
  CLI::Option* log_level_opt = nullptr;
  bool verbose = false;
  bool quiet = false;  // -q of dsfs or of a command: all one flag
  SizeValidator size_validator;
  std::vector<std::pair<CLI::App*, Run>> commands;
  CLI::App* help_cmd = nullptr;
  std::vector<std::string> help_names;
  // Ctrl-C, SIGTERM or SIGHUP during pack, add, warmup or extract: stop, and leave no store or
  // temporary behind.
  std::optional<InterruptOnSignals> interrupt;

  const std::atomic<bool>* CancelToken() {
    if (!interrupt) interrupt.emplace();
    return interrupt->token();
  }
};

// The exit status of a command that ended with `s`: its error line printed after what it wrote.
int Finish(const Status& s, std::ostream& out, std::ostream& err) {
  out.flush();
  if (s.ok()) return 0;
  err << "dsfs: error: " << Printable(s.message()) << "\n";
  return 1;
}

// Finish of `run` unless `store` is a URL of a scheme dsfs does not read.
int FinishOnStore(const std::string& store, const std::function<Status()>& run, std::ostream& out,
                  std::ostream& err) {
  Status s = CheckUrlScheme(store, kStoreSources);
  return Finish(s.ok() ? run() : s, out, err);
}

void AddGlobalOptions(Cli& c) {
  c.app.require_subcommand(1);
  c.app.set_version_flag("-V,--version", std::string("dsfs ") + DsfsVersion());
  // The options of dsfs itself are also taken after the subcommand (dsfs ls S --log-level
  // debug): a subcommand hands what it does not know to dsfs.
  c.app.fallthrough();
  c.log_level_opt =
      c.app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error or off")
          ->capture_default_str();
  c.app.add_flag("-v,--verbose", c.verbose, "log at info level (as --log-level info)");
  c.app.add_flag("-q,--quiet", c.quiet,
                 "print nothing on success: no progress, no summary (warnings stay)");
}

void AddPackCommand(Cli& c) {
  struct Args {
    PackCommand cmd;
    uint64_t dict_size, chunk_size, group_size;
  };
  auto a = std::make_shared<Args>();
  a->dict_size = a->cmd.options.dict_bytes;
  a->chunk_size = a->cmd.options.chunk_bytes;
  a->group_size = a->cmd.options.group_bytes;
  auto* cmd = c.app.add_subcommand(
      "pack",
      "pack SRC (a directory, a tar/cpio/zip archive, or - for an archive on stdin) into "
      "a new store DST");
  cmd->add_option("SRC", a->cmd.src,
                  "source directory, archive file, - (stdin), an archive at s3://BUCKET/KEY or "
                  "http(s)://URL, or the objects under s3://BUCKET/PREFIX/ (docs/pack-sources.md)")
      ->required();
  cmd->add_option("DST", a->cmd.dst, "the store to create (a file; a directory with rocksdb)")
      ->required();
  cmd->add_flag("-f,--force", a->cmd.force,
                "replace DST if it is a dsfs store or an empty directory (anything else "
                "there is refused)");
  cmd->add_option("--backend", a->cmd.backend, "lmdb (DST is one file) or rocksdb (a directory)")
      ->capture_default_str();
  cmd->add_option("-l,--level", a->cmd.options.zstd_level, "zstd compression level (1-22)")
      ->capture_default_str();
  cmd->add_option("--dict-size", a->dict_size, "zstd dictionary size, 0 = none (e.g. 110K)")
      ->transform(c.size_validator)
      ->capture_default_str();
  cmd->add_option("--chunk-size", a->chunk_size, "large files are stored in chunks of this size")
      ->transform(c.size_validator)
      ->capture_default_str();
  cmd->add_option("--group-size", a->group_size,
                  "small files are compressed together in groups of this size (1K-4M)")
      ->transform(c.size_validator)
      ->capture_default_str();
  cmd->add_option("-j,--threads", a->cmd.options.threads, "compression threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  cmd->add_flag("--predecode", a->cmd.options.predecode,
                "also store every image's decoded pixels, so the bmp/npy/tensor views "
                "never decode");
  c.commands.emplace_back(cmd, [&c, a](std::ostream& out, std::ostream& err) {
    if (!IsRemotePackSource(a->cmd.src)) {
      Status s = CheckUrlScheme(a->cmd.src,
                                "a source is a directory, an archive file, -, s3://BUCKET/KEY, "
                                "s3://BUCKET/PREFIX/ or an http(s):// URL of an archive");
      if (!s.ok()) return Finish(s, out, err);
    }
    a->cmd.quiet = c.quiet;
    a->cmd.options.cancel = c.CancelToken();
    a->cmd.options.dict_bytes = static_cast<uint32_t>(std::min<uint64_t>(a->dict_size, UINT32_MAX));
    if (a->chunk_size > (64u << 20)) {
      err << "dsfs: error: --chunk-size must be at most 64M\n";
      return 2;
    }
    a->cmd.options.chunk_bytes = static_cast<uint32_t>(a->chunk_size);
    if (a->group_size < 1024 || a->group_size > kMaxGroupBytes) {
      err << "dsfs: error: --group-size must be 1K to 4M\n";
      return 2;
    }
    a->cmd.options.group_bytes = static_cast<uint32_t>(a->group_size);
    return Finish(RunPack(a->cmd, out, err), out, err);
  });
}

void AddAddCommand(Cli& c) {
  auto a = std::make_shared<AddCommand>();
  auto* cmd = c.app.add_subcommand(
      "add", "add the files and directories of SRC to STORE (new names only), atomically");
  cmd->add_option("STORE", a->store, "existing store")->required();
  cmd->add_option("SRC", a->src, "source directory")->required();
  cmd->add_option("--prefix", a->options.prefix,
                  "directory of the store to add into (created if missing; default: root)");
  cmd->add_flag("--replace", a->options.replace, "replace entries that exist");
  cmd->add_option("-j,--threads", a->options.threads, "compression threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  c.commands.emplace_back(cmd, [&c, a](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        a->store,
        [&] {
          a->quiet = c.quiet;
          a->options.cancel = c.CancelToken();
          return RunAdd(*a, out, err);
        },
        out, err);
  });
}

void AddConvertCommand(Cli& c) {
  auto a = std::make_shared<ConvertCommand>();
  auto* cmd = c.app.add_subcommand(
      "convert", "copy store SRC into a new store DST of another backend (no recompression)");
  cmd->add_option("SRC", a->src, "existing store")->required();
  cmd->add_option("DST", a->dst, "store to create")->required();
  cmd->add_option("--backend", a->backend, "lmdb, rocksdb or s3 (DST s3://BUCKET/PREFIX)")
      ->required();
  cmd->add_flag("-f,--force", a->force, "replace DST if it is a dsfs store or an empty directory");
  cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  c.commands.emplace_back(cmd, [&c, a](std::ostream& out, std::ostream& err) {
    a->quiet = c.quiet;
    return FinishOnStore(
        a->src, [&] { return RunConvert(*a, out, err); }, out, err);
  });
}

void AddPushCommand(Cli& c) {
  auto a = std::make_shared<PushCommand>();
  auto* cmd = c.app.add_subcommand(
      "push", "upload store SRC to object storage as s3://BUCKET/PREFIX, for dsfs mount s3://...");
  cmd->add_option("SRC", a->src, "existing store")->required();
  cmd->add_option("DST", a->dst, "s3://BUCKET/PREFIX")->required();
  cmd->add_flag("-f,--force", a->force, "replace a store already at DST");
  cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  cmd->footer(
      "Credentials and endpoint the AWS way: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
      "AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE and ~/.aws/credentials\n"
      "(never on the command line). A push that stops leaves nothing mountable; running it\n"
      "again skips the data objects already uploaded. See docs/s3.md.");
  c.commands.emplace_back(cmd, [&c, a](std::ostream& out, std::ostream& err) {
    a->quiet = c.quiet;
    return FinishOnStore(
        a->src, [&] { return RunPush(*a, out, err); }, out, err);
  });
}

void AddMountCommands(Cli& c) {
  struct Args {
    MountConfig config;
    std::vector<std::string> opts;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = c.app.add_subcommand("mount", "mount STORE read-only at MOUNTPOINT");
  cmd->add_option("STORE", a->config.store_path, kStoreHelp)->required();
  cmd->add_option("MOUNTPOINT", a->config.mountpoint,
                  "an existing directory, or /dev/fd/N: a /dev/fuse descriptor a privileged "
                  "parent mounted (docs/containers.md)")
      ->required();
  cmd->add_flag("-f,--foreground", a->config.foreground, "stay in the foreground");
  // Each -o list is split by ParseMountOptions, which skips empty items (CLI11's own splitting
  // turned "-o ,,," into a missing argument).
  cmd->add_option("-o", a->opts, "comma-separated mount options (below)");
  cmd->footer(std::string(kMountOptionsHelp) + "\n\n" + kServiceHelp);
  c.commands.emplace_back(cmd, [a](std::ostream& out, std::ostream& err) {
    std::string joined;
    for (const auto& o : a->opts) joined += (joined.empty() ? "" : ",") + o;
    Status s = ParseMountOptions(joined, &a->config);
    if (!s.ok()) {
      err << "dsfs: error: " << Printable(s.message()) << "\n";
      return 2;
    }
    return Finish(RunMount(a->config), out, err);
  });

  struct UmountArgs {
    std::string point;
    bool lazy = false;
  };
  auto u = std::make_shared<UmountArgs>();
  auto* umount = c.app.add_subcommand("umount", "unmount a dsfs mount (also a dead one)");
  umount->add_option("MOUNTPOINT", u->point, "the directory a dsfs mount is at")->required();
  umount->add_flag("-z,--lazy", u->lazy, "detach now even if busy");
  c.commands.emplace_back(umount, [u](std::ostream& out, std::ostream& err) {
    return Finish(RunUmount(u->point, u->lazy), out, err);
  });
}

// ls, cat, info and verify: what a store holds.
void AddInspectCommands(Cli& c) {
  struct Args {
    std::string store, path = "/";
    bool long_format = false, recursive = false, json = false;
  };
  auto ls = std::make_shared<Args>();
  auto* ls_cmd = c.app.add_subcommand("ls", "list PATH inside STORE");
  ls_cmd->add_option("STORE", ls->store, kStoreHelp)->required();
  ls_cmd->add_option("PATH", ls->path, "a directory (or file) inside the store")
      ->capture_default_str();
  ls_cmd->add_flag("-l", ls->long_format, "long format (mode, size, mtime)");
  ls_cmd->add_flag("-R", ls->recursive, "recurse into directories");
  ls_cmd->add_flag("--json", ls->json, "one JSON object per entry and line");
  c.commands.emplace_back(ls_cmd, [ls](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        ls->store,
        [&] { return RunLs(ls->store, ls->path, ls->long_format, ls->recursive, out, ls->json); },
        out, err);
  });

  auto cat = std::make_shared<Args>();
  auto* cat_cmd = c.app.add_subcommand("cat", "write the file at PATH inside STORE to stdout");
  cat_cmd->add_option("STORE", cat->store, kStoreHelp)->required();
  cat_cmd->add_option("PATH", cat->path, "a file inside the store")->required();
  c.commands.emplace_back(cat_cmd, [cat](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        cat->store, [&] { return RunCat(cat->store, cat->path, out); }, out, err);
  });

  auto info = std::make_shared<Args>();
  auto* info_cmd = c.app.add_subcommand(
      "info", "show what STORE holds, and whether the tensor view has PATH (default /)");
  info_cmd->add_option("STORE", info->store, kStoreHelp)->required();
  info_cmd->add_option("PATH", info->path, "a directory inside the store, for the tensor view")
      ->capture_default_str();
  info_cmd->add_flag("--json", info->json, "machine-readable output");
  c.commands.emplace_back(info_cmd, [info](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        info->store, [&] { return RunInfo(info->store, info->path, info->json, out); }, out, err);
  });

  auto verify = std::make_shared<Args>();
  auto* verify_cmd = c.app.add_subcommand("verify", "check every payload of STORE");
  verify_cmd->add_option("STORE", verify->store, kStoreHelp)->required();
  verify_cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  verify_cmd->add_flag("--json", verify->json, "one JSON object: counts and the damaged files");
  c.commands.emplace_back(verify_cmd, [&c, verify](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        verify->store, [&] { return RunVerify(verify->store, c.quiet, out, err, verify->json); },
        out, err);
  });
}

void AddExtractCommand(Cli& c) {
  auto a = std::make_shared<ExtractCommand>();
  auto* cmd = c.app.add_subcommand(
      "extract",
      "write the tree of STORE (or its PATHs) into directory DIR, or as a pax tar stream to "
      "stdout (DIR -, the default)");
  cmd->add_option("STORE", a->store, kStoreHelp)->required();
  cmd->add_option("DIR", a->dest,
                  "the directory to write into (made if missing), or - for a tar "
                  "stream on stdout")
      ->capture_default_str();
  cmd->add_option("PATH", a->paths, "files or directories inside the store");
  cmd->add_option("--view", a->view,
                  "the view written out: original, bmp, npy, tensor, bmp-N, jpeg-N")
      ->capture_default_str();
  cmd->add_flag("-f,--force", a->force,
                "write into a non-empty DIR: adds what is missing, replaces nothing");
  cmd->add_option("-j,--threads", a->threads,
                  "into a DIR: 1, read and write on one thread; 2, the writes on a thread of "
                  "their own")
      ->capture_default_str()
      ->check(CLI::Range(1, 2));
  cmd->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  cmd->footer(
      "Files are written in the store's order, each group decoded once. Nothing is written\n"
      "outside DIR: symlinks are written as links and never followed. A file that cannot be\n"
      "read is named on stderr and left out, the rest is written, and the exit status is 1.");
  c.commands.emplace_back(cmd, [&c, a](std::ostream& out, std::ostream& err) {
    return FinishOnStore(
        a->store,
        [&] {
          a->quiet = c.quiet;
          a->cancel = c.CancelToken();
          return RunExtract(*a, out, err);
        },
        out, err);
  });
}

// stats and warmup: what a live mount does.
void AddLiveMountCommands(Cli& c) {
  struct StatsArgs {
    std::string point;
    bool json = false, prometheus = false;
  };
  auto st = std::make_shared<StatsArgs>();
  auto* stats = c.app.add_subcommand("stats", "show the live counters of a mount");
  stats->add_option("MOUNTPOINT", st->point, "the directory a live dsfs mount is at")->required();
  auto* json_flag = stats->add_flag("--json", st->json, "the raw JSON");
  stats
      ->add_flag("--prometheus", st->prometheus,
                 "the Prometheus text exposition format (metric names: docs/usage.md)")
      ->excludes(json_flag);
  c.commands.emplace_back(stats, [st](std::ostream& out, std::ostream& err) {
    return Finish(RunStats(st->point, st->json, out, st->prometheus), out, err);
  });

  auto w = std::make_shared<WarmupCommand>();
  auto* warmup = c.app.add_subcommand(
      "warmup",
      "read PATHs (default: all) of a live mount so that they land in its caches (an S3 "
      "store's disk cache, the RAM cache within its budget)");
  warmup->add_option("MOUNTPOINT", w->mountpoint, "a live dsfs mount")->required();
  warmup->add_option("PATH", w->paths,
                     "files or directories inside the mount (relative to it, or absolute)");
  warmup->add_option("-j,--threads", w->threads, "files read at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  warmup->add_flag("-q,--quiet", c.quiet, kQuietHelp);
  warmup->add_flag("--json", w->json, "the summary as one JSON object");
  warmup->footer(
      "Files are read in the store's order, in runs of consecutive files per thread, and\n"
      "dropped from the page cache after. Ctrl-C stops it keeping what was read: run it again\n"
      "to finish. Exit status 1 if any file could not be read. See docs/s3.md.");
  c.commands.emplace_back(warmup, [&c, w](std::ostream& out, std::ostream& err) {
    w->quiet = c.quiet;
    w->cancel = c.CancelToken();
    return Finish(RunWarmup(*w, out, err), out, err);
  });
}

void AddCacheCommands(Cli& c) {
  struct Args {
    std::string dir;
    int keep_days = 30;
    bool dry_run = false, json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cache = c.app.add_subcommand(
      "cache", "list or clean up the S3 disk caches in a cache_dir (default ~/.cache/dsfs)");
  cache->require_subcommand(1);
  cache->footer(
      "dsfs cache ls [DIR]: one entry per store cached in DIR. dsfs cache gc [DIR]\n"
      "[--keep-days N] [-n]: frees what no mount uses. See docs/s3.md.");
  auto* ls = cache->add_subcommand(
      "ls", "list the stores cached in DIR: URL, endpoint, identity, size, last use, mounted");
  ls->add_option("DIR", a->dir,
                 "a cache_dir (default: $XDG_CACHE_HOME/dsfs or "
                 "~/.cache/dsfs)");
  ls->add_flag("--json", a->json, "one JSON object");
  c.commands.emplace_back(ls, [a](std::ostream& out, std::ostream& err) {
    return Finish(RunCacheLs(a->dir, out, a->json), out, err);
  });
  auto* gc = cache->add_subcommand(
      "gc",
      "remove the caches in DIR no mount uses that were not used within --keep-days days, "
      "and stores pushed over since");
  gc->add_option("DIR", a->dir,
                 "a cache_dir (default: $XDG_CACHE_HOME/dsfs or "
                 "~/.cache/dsfs)");
  gc->add_option("--keep-days", a->keep_days, "keep caches used within this many days")
      ->capture_default_str()
      ->check(CLI::Range(0, 36500));
  gc->add_flag("-n,--dry-run", a->dry_run, "say what would be removed, remove nothing");
  gc->footer(
      "A cache a live mount uses is never removed (each mount holds a lock on its cache).\n"
      "Only dsfs's own files, never through a symlink, only this user's.");
  c.commands.emplace_back(gc, [a](std::ostream& out, std::ostream& err) {
    return Finish(RunCacheGc(a->dir, a->keep_days, a->dry_run, out), out, err);
  });
}

void AddHelpCommand(Cli& c) {
  c.help_cmd = c.app.add_subcommand(
      "help", "print the help of dsfs, or of COMMAND: the same as dsfs COMMAND --help");
  c.help_cmd->add_option("COMMAND", c.help_names,
                         "a command, and one of its own (dsfs help cache gc)");
  // Set last: a subcommand takes its parent's footer when it is made, and this one is dsfs's
  // own (dsfs mount --help repeats it: the mount options are what it is about).
  c.app.footer(std::string(kServiceHelp) +
               "\n\nThe options of a command: dsfs help COMMAND, or dsfs COMMAND --help.");
}

// Parses `args` into `c`: -1 when a command is to run, else the exit status (help, version or
// a usage error printed).
int Parse(Cli& c, const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    c.app.parse(rev);
  } catch (const CLI::CallForHelp& e) {
    out << c.app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << c.app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // A first word that is no command reads better named than as "a subcommand is required".
    if (c.app.get_subcommands().empty() && !args.empty() && !args[0].empty() && args[0][0] != '-') {
      what = "unknown command '" + PrintableName(args[0]) + "'";
    }
    err << "dsfs: error: " << Printable(what) << " (see " << SelectedCommand(c.app) << " --help)\n";
    return 2;
  }
  return -1;
}

}  // namespace

int DsfsMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Cli c;
  AddGlobalOptions(c);
  AddPackCommand(c);
  AddAddCommand(c);
  AddConvertCommand(c);
  AddPushCommand(c);
  AddMountCommands(c);
  AddInspectCommands(c);
  AddExtractCommand(c);
  AddLiveMountCommands(c);
  AddCacheCommands(c);
  AddHelpCommand(c);
  if (int rc = Parse(c, args, out, err); rc >= 0) return rc;
  if (*c.help_cmd) return PrintHelp(c.app, c.help_names, out, err);
  if (c.log_level_opt->count() == 0) c.log_level = c.verbose ? "info" : "warn";
  // As found on return: the tests run DsfsMain in-process, one command after another.
  const ScopeExit restore_level([level = Log()->level()] { Log()->set_level(level); });
  if (!SetLogLevel(c.log_level)) {
    err << "dsfs: error: unknown log level '" << PrintableName(c.log_level)
        << "' (one of trace, debug, info, warn, error, off)\n";
    return 2;
  }
  for (const auto& [cmd, run] : c.commands) {
    if (*cmd) return run(out, err);
  }
  return 0;
}

}  // namespace dsfs
