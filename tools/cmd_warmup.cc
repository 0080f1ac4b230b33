// dsfs warmup MOUNTPOINT [PATH...]: reads files through a live mount so that what they need
// lands in the mount's caches (an S3 mount's disk cache, and the RAM cache within its budget).
//
// The files are read in the store's order (names sorted, depth first, as packed): a directory's
// files are adjacent in the store, so one thread reading a run of consecutive files makes one
// fetch per block, not one per file. Runs are handed to the threads one at a time. Nothing is
// kept in the page cache (POSIX_FADV_DONTNEED after each file): the point is the mount's own
// caches, which outlive the page cache's pressure. An interrupted warm-up keeps what it read;
// the next one finds it cached and goes on.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/path.h"
#include "common/system.h"
#include "common/units.h"
#include "fs/stats.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {
namespace {

constexpr uint64_t kReadBytes = 1 << 20;
// A run: consecutive files up to this many bytes (or kRunFiles files), read by one thread.
constexpr uint64_t kRunBytes = 64 << 20;
constexpr size_t kRunFiles = 1024;
// Failed files named one by one on `err`, up to this many.
constexpr uint64_t kFailuresShown = 10;

struct WarmFile {
  std::string path;
  uint64_t size;
};

// Lists the regular files under `path` (a file or a directory) in the store's order: names
// sorted, depth first. No symlink is followed; the mount's control directory is skipped.
void Collect(const std::string& path, bool top, const std::atomic<bool>* cancel,
             std::vector<WarmFile>* files, uint64_t* failed, std::vector<std::string>* errors) {
  if (cancel && cancel->load(std::memory_order_relaxed)) return;  // Ctrl-C during the listing
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    ++*failed;
    errors->push_back(path + ": " + std::strerror(errno));
    return;
  }
  if (S_ISREG(st.st_mode)) {
    files->push_back({path, static_cast<uint64_t>(st.st_size)});
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  std::vector<std::string> names;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (top && name == ".dsfs") continue;  // the control directory: views of the same data
      names.push_back(std::move(name));
    }
    ::closedir(d);
  } else {
    ++*failed;
    errors->push_back(path + ": " + std::strerror(errno));
    return;
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) Collect(path + "/" + n, false, cancel, files, failed, errors);
}

// The S3 GETs the mount at `mountpoint` made so far, from its stats; -1 if it makes none (a
// local store) or they cannot be read.
int64_t RemoteGets(const std::string& mountpoint) {
  std::ostringstream json;
  if (!RunStats(mountpoint, true, json).ok()) return -1;
  auto doc = nlohmann::json::parse(json.str(), nullptr, false);
  if (doc.is_discarded()) return -1;
  int64_t found = -1;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& v) {
    if (!v.is_object()) return;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() == "remote_gets" && it->is_number_unsigned()) {
        found = static_cast<int64_t>(it->get<uint64_t>());
      } else {
        walk(*it);
      }
    }
  };
  walk(doc);
  return found;
}

}  // namespace

Status RunWarmup(const WarmupCommand& cmd, std::ostream& out, std::ostream& err) {
  char* real = ::realpath(cmd.mountpoint.c_str(), nullptr);
  if (real == nullptr) {
    return Status::FromErrno(errno, cmd.mountpoint);
  }
  const std::string mountpoint = real;
  ::free(real);
  // Only a live dsfs mount (its stats answer): a warm-up of any other directory would read
  // it all for nothing.
  {
    std::ostringstream ignored;
    Status s = RunStats(mountpoint, true, ignored);
    if (!s.ok()) return s;
  }
  const int64_t gets_before = RemoteGets(mountpoint);

  std::vector<WarmFile> files;
  uint64_t failed = 0;
  std::vector<std::string> errors;
  std::vector<std::string> roots = cmd.paths;
  if (roots.empty()) roots.push_back("");
  for (const auto& p : roots) {
    // PATH inside the mount: relative to it, or an absolute path below it. Its directory is
    // resolved (a link of the store's on the way may point anywhere) and must be in the mount;
    // its last name is taken as it is (Collect follows no link, as for the files below it).
    if (!(!p.empty() && p[0] == '/') &&
        (p == ".." || p.rfind("../", 0) == 0 || p.find("/../") != std::string::npos ||
         (p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0))) {
      return Status::InvalidArgument(p + ": a path inside the mount may not hold '..'");
    }
    const std::string path = AbsolutePath(!p.empty() && p[0] == '/' ? p
                                          : p.empty()               ? mountpoint
                                                                    : mountpoint + "/" + p);
    if (path != mountpoint && path.rfind(mountpoint + "/", 0) != 0) {
      return Status::InvalidArgument(p + ": not inside the mount " + mountpoint);
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
    Collect(path, path == mountpoint, cmd.cancel, &files, &failed, &errors);
  }

  // Runs of consecutive files.
  std::vector<size_t> run_starts;
  uint64_t total_bytes = 0;
  {
    uint64_t run_bytes = kRunBytes;
    size_t run_files = kRunFiles;
    for (size_t i = 0; i < files.size(); ++i) {
      if (run_bytes >= kRunBytes || run_files >= kRunFiles) {
        run_starts.push_back(i);
        run_bytes = run_files = 0;
      }
      run_bytes += files[i].size;
      ++run_files;
      total_bytes += files[i].size;
    }
    run_starts.push_back(files.size());
  }
  const size_t runs = run_starts.size() - 1;

  std::atomic<size_t> next_run{0};
  std::atomic<uint64_t> files_done{0}, bytes_done{0}, read_failed{0};
  std::mutex errors_mu;
  auto read_run = [&](size_t run) {
    std::vector<char> buf(kReadBytes);
    for (size_t i = run_starts[run]; i < run_starts[run + 1]; ++i) {
      if (cmd.cancel && cmd.cancel->load(std::memory_order_relaxed)) return;
      const WarmFile& f = files[i];
      int fd = ::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      int err_no = fd < 0 ? errno : 0;
      off_t pos = 0;
      while (fd >= 0) {
        ssize_t n = ::pread(fd, buf.data(), buf.size(), pos);
        if (n < 0 && errno == EINTR) {
          if (cmd.cancel && cmd.cancel->load(std::memory_order_relaxed)) break;
          continue;
        }
        if (n < 0) err_no = errno;
        if (n <= 0) break;
        pos += n;
        bytes_done.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      }
      if (fd >= 0) {
        // The mount's caches hold it now; the page cache need not (a job's own reads will
        // fill it with what it reads).
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
      if (err_no != 0) {
        read_failed.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(errors_mu);
        errors.push_back(f.path + ": " + std::strerror(err_no));
      }
      files_done.fetch_add(1, std::memory_order_relaxed);
    }
  };
  auto worker = [&] {
    for (size_t run; (run = next_run.fetch_add(1)) < runs;) {
      if (cmd.cancel && cmd.cancel->load(std::memory_order_relaxed)) return;
      read_run(run);
    }
  };
  const int threads = cmd.threads > 0
                          ? cmd.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ProgressLine progress(err, !cmd.quiet && ::isatty(STDERR_FILENO));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int>(threads, static_cast<int>(std::max<size_t>(runs, 1))); ++t) {
    pool.emplace_back(worker);
  }
  std::atomic<bool> all_done{false};
  std::thread drawer([&] {
    while (!all_done.load()) {
      if (progress.Due()) {
        PackProgress p;
        p.phase = "warming";
        p.files_done = files_done.load();
        p.files_total = files.size();
        p.bytes_done = bytes_done.load();
        p.bytes_total = total_bytes;
        progress.Update(p);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& t : pool) t.join();
  all_done.store(true);
  drawer.join();
  progress.Clear();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  failed += read_failed.load();
  for (size_t i = 0; i < errors.size() && i < kFailuresShown; ++i) {
    err << "dsfs: warning: " << PrintableName(errors[i], false) << "\n";
  }
  if (errors.size() > kFailuresShown) {
    err << "dsfs: warning: ... and " << errors.size() - kFailuresShown << " more\n";
  }
  const bool interrupted = cmd.cancel && cmd.cancel->load();
  if (cmd.json) {
    // {"bytes_cached", "files_read", "files", "failed", "seconds", "bytes_per_s", "s3_gets"
    // (null for a local store), "interrupted"}: on `out`, also when interrupted.
    const int64_t gets_after = gets_before >= 0 ? RemoteGets(mountpoint) : -1;
    nlohmann::ordered_json j = {
        {"bytes_cached", bytes_done.load()},
        {"files_read", files_done.load()},
        {"files", files.size()},
        {"failed", failed},
        {"seconds", StatsSeconds(seconds)},
        {"bytes_per_s", seconds > 0 ? static_cast<uint64_t>(bytes_done.load() / seconds) : 0},
        {"s3_gets", nullptr},
        {"interrupted", interrupted}};
    if (gets_after >= 0) j["s3_gets"] = gets_after - gets_before;
    out << OneLineJson(j) << "\n";
  } else if (!cmd.quiet || interrupted) {
    std::ostream& where = interrupted ? err : out;
    where << FormatBytes(bytes_done.load()) << " cached, " << failed << " failed ("
          << files_done.load() << "/" << files.size() << " files, " << FormatDuration(seconds);
    if (seconds > 0) {
      where << ", "
            << FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes_done.load()) / seconds))
            << "/s";
    }
    const int64_t gets_after = gets_before >= 0 ? RemoteGets(mountpoint) : -1;
    if (gets_after >= 0) where << ", " << (gets_after - gets_before) << " S3 GETs";
    where << ")\n";
  }
  if (interrupted) {
    return Status::IOError("interrupted: what was read stays cached; run it again to finish");
  }
  if (failed > 0) return Status::IOError(std::to_string(failed) + " files could not be read");
  return Status::OK();
}

}  // namespace dsfs
