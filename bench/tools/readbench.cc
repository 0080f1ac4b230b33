// dsfs-readbench: how fast a file system serves many small files.
//
//   dsfs-readbench ROOT [--list FILE] [--threads N] [--passes N] [--seed S] [--limit N] [--stat]
//   dsfs-readbench ROOT --write-list FILE
//   dsfs-readbench --seq FILE [--block 1M] [--passes N]
//
// The file list (paths relative to ROOT) comes from --list, or from a walk of ROOT that is not
// timed. Reading the list from a file lets a benchmark read a FUSE mount cold: a walk of the
// mount would look every file up first. The list is shuffled with a fixed seed (the same order
// for every file system), then N threads take paths from it in turn and open + read the whole
// file + close it (or lstat it with --stat). Each pass prints one JSON line:
//   {"mode":"read","root":..,"threads":..,"pass":..,"files":..,"bytes":..,"elapsed_s":..,
//    "files_per_s":..,"mb_per_s":..,"errors":..}
// --seq reads one large file sequentially in blocks and prints MB/s the same way.
// Exit status: 0 when every pass had no error, 1 when some file failed, 2 on bad usage.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  std::string root;
  std::string list;
  std::string write_list;
  std::string seq;
  unsigned threads = 1;
  unsigned passes = 1;
  std::uint64_t seed = 42;
  std::size_t limit = 0;
  std::size_t block = 1 << 20;
  bool stat_only = false;
  bool no_shuffle = false;
  std::string label;
};

[[noreturn]] void usage(const char* msg) {
  if (msg) std::fprintf(stderr, "dsfs-readbench: %s\n", msg);
  std::fprintf(stderr,
               "usage: dsfs-readbench ROOT [--list FILE] [--threads N] [--passes N] [--seed S]\n"
               "                      [--limit N] [--stat] [--no-shuffle] [--label TEXT]\n"
               "       dsfs-readbench ROOT --write-list FILE\n"
               "       dsfs-readbench --seq FILE [--block SIZE] [--passes N]\n"
               "SIZE takes K, M or G (powers of 1024). The list holds one path a line,\n"
               "relative to ROOT (or absolute).\n");
  std::exit(2);
}

std::uint64_t parse_size(const std::string& s) {
  if (s.empty()) usage("empty number");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str()) usage(("bad number: " + s).c_str());
  std::string suffix(end);
  if (suffix.empty() || suffix == "B") return v;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") return v << 10;
  if (suffix == "M" || suffix == "m" || suffix == "MiB") return v << 20;
  if (suffix == "G" || suffix == "g" || suffix == "GiB") return v << 30;
  usage(("bad size suffix: " + s).c_str());
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--list")
      o.list = value();
    else if (a == "--write-list")
      o.write_list = value();
    else if (a == "--seq")
      o.seq = value();
    else if (a == "--threads" || a == "-t")
      o.threads = static_cast<unsigned>(parse_size(value()));
    else if (a == "--passes")
      o.passes = static_cast<unsigned>(parse_size(value()));
    else if (a == "--seed")
      o.seed = parse_size(value());
    else if (a == "--limit")
      o.limit = parse_size(value());
    else if (a == "--block")
      o.block = parse_size(value());
    else if (a == "--stat")
      o.stat_only = true;
    else if (a == "--no-shuffle")
      o.no_shuffle = true;
    else if (a == "--label")
      o.label = value();
    else if (a == "-h" || a == "--help")
      usage(nullptr);
    else if (!a.empty() && a[0] == '-')
      usage(("unknown option " + a).c_str());
    else if (o.root.empty())
      o.root = a;
    else
      usage("more than one ROOT");
  }
  if (o.threads == 0 || o.passes == 0 || o.block == 0)
    usage("--threads, --passes and --block must be > 0");
  if (o.seq.empty() && o.root.empty()) usage("no ROOT");
  return o;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '"':
        r += "\\\"";
        break;
      case '\\':
        r += "\\\\";
        break;
      case '\n':
        r += "\\n";
        break;
      case '\t':
        r += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          r += buf;
        } else {
          r += c;
        }
    }
  }
  return r;
}

// Regular files under root, relative to it, sorted (the walk order of a directory is not stable).
std::vector<std::string> walk(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) {
    std::fprintf(stderr, "dsfs-readbench: cannot walk %s: %s\n", root.c_str(),
                 ec.message().c_str());
    std::exit(1);
  }
  const fs::path base(root);
  for (; it != end; it.increment(ec)) {
    if (ec) {
      std::fprintf(stderr, "dsfs-readbench: walk: %s\n", ec.message().c_str());
      std::exit(1);
    }
    if (!it->is_regular_file(ec)) continue;
    files.push_back(it->path().lexically_relative(base).native());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> read_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "dsfs-readbench: cannot read list %s\n", path.c_str());
    std::exit(1);
  }
  std::vector<std::string> files;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) files.push_back(line);
  }
  return files;
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct PassResult {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::uint64_t errors = 0;
  double elapsed = 0;
  std::string first_error;
};

PassResult run_pass(const std::vector<std::string>& paths, unsigned threads, bool stat_only) {
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> total_bytes{0}, total_files{0}, total_errors{0};
  std::mutex err_mu;
  std::string first_error;
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};

  auto worker = [&]() {
    std::vector<char> buf(256 * 1024);
    std::uint64_t bytes = 0, files = 0, errors = 0;
    auto fail = [&](const std::string& path, const char* what, int e) {
      ++errors;
      std::lock_guard<std::mutex> lock(err_mu);
      if (first_error.empty())
        first_error = std::string(what) + " " + path + ": " + std::strerror(e);
    };
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (;;) {
      std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= paths.size()) break;
      const std::string& p = paths[i];
      if (stat_only) {
        struct stat st;
        if (::lstat(p.c_str(), &st) != 0) {
          fail(p, "lstat", errno);
          continue;
        }
        ++files;
        continue;
      }
      int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        fail(p, "open", errno);
        continue;
      }
      bool ok = true;
      for (;;) {
        ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n > 0) {
          bytes += static_cast<std::uint64_t>(n);
          continue;
        }
        if (n == 0) break;
        if (errno == EINTR) continue;
        fail(p, "read", errno);
        ok = false;
        break;
      }
      if (::close(fd) != 0 && ok) {
        fail(p, "close", errno);
        ok = false;
      }
      if (ok) ++files;
    }
    total_bytes += bytes;
    total_files += files;
    total_errors += errors;
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  while (ready.load() < threads) std::this_thread::yield();
  double t0 = now_s();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  PassResult r;
  r.elapsed = now_s() - t0;
  r.files = total_files;
  r.bytes = total_bytes;
  r.errors = total_errors;
  r.first_error = first_error;
  return r;
}

void print_result(const char* mode, const Options& o, const std::string& target, unsigned threads,
                  unsigned pass, const PassResult& r) {
  double el = r.elapsed > 0 ? r.elapsed : 1e-9;
  std::printf("{\"mode\":\"%s\",", mode);
  if (!o.label.empty()) std::printf("\"label\":\"%s\",", json_escape(o.label).c_str());
  std::printf(
      "\"root\":\"%s\",\"threads\":%u,\"pass\":%u,\"files\":%llu,\"bytes\":%llu,"
      "\"elapsed_s\":%.6f,\"files_per_s\":%.1f,\"mb_per_s\":%.3f,\"errors\":%llu",
      json_escape(target).c_str(), threads, pass, static_cast<unsigned long long>(r.files),
      static_cast<unsigned long long>(r.bytes), r.elapsed, static_cast<double>(r.files) / el,
      static_cast<double>(r.bytes) / 1e6 / el, static_cast<unsigned long long>(r.errors));
  if (!r.first_error.empty())
    std::printf(",\"first_error\":\"%s\"", json_escape(r.first_error).c_str());
  std::printf("}\n");
  std::fflush(stdout);
}

int seq_read(const Options& o) {
  std::vector<char> buf(o.block);
  int status = 0;
  for (unsigned pass = 1; pass <= o.passes; ++pass) {
    PassResult r;
    int fd = ::open(o.seq.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "dsfs-readbench: open %s: %s\n", o.seq.c_str(), std::strerror(errno));
      return 1;
    }
    double t0 = now_s();
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n > 0) {
        r.bytes += static_cast<std::uint64_t>(n);
        continue;
      }
      if (n == 0) break;
      if (errno == EINTR) continue;
      r.errors = 1;
      r.first_error = std::string("read ") + o.seq + ": " + std::strerror(errno);
      break;
    }
    ::close(fd);
    r.elapsed = now_s() - t0;
    r.files = r.errors ? 0 : 1;
    print_result("seq", o, o.seq, 1, pass, r);
    if (r.errors) status = 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (!o.seq.empty()) return seq_read(o);

  std::vector<std::string> rel = o.list.empty() ? walk(o.root) : read_list(o.list);
  if (!o.write_list.empty()) {
    std::ofstream out(o.write_list);
    for (const auto& p : rel) out << p << '\n';
    out.close();
    if (!out) {
      std::fprintf(stderr, "dsfs-readbench: cannot write %s\n", o.write_list.c_str());
      return 1;
    }
    std::fprintf(stderr, "dsfs-readbench: %zu files listed in %s\n", rel.size(),
                 o.write_list.c_str());
    return 0;
  }
  if (rel.empty()) {
    std::fprintf(stderr, "dsfs-readbench: no files\n");
    return 1;
  }
  if (!o.no_shuffle) {
    // std::shuffle's algorithm is not specified; a Fisher-Yates over mt19937_64 is, so the order
    // is the same with every standard library.
    std::mt19937_64 rng(o.seed);
    for (std::size_t i = rel.size() - 1; i > 0; --i) {
      std::size_t j = static_cast<std::size_t>(rng() % (i + 1));
      std::swap(rel[i], rel[j]);
    }
  }
  if (o.limit && o.limit < rel.size()) rel.resize(o.limit);

  std::vector<std::string> paths;
  paths.reserve(rel.size());
  std::string prefix = o.root;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  for (auto& p : rel) paths.push_back(!p.empty() && p.front() == '/' ? p : prefix + p);

  int status = 0;
  for (unsigned pass = 1; pass <= o.passes; ++pass) {
    PassResult r = run_pass(paths, o.threads, o.stat_only);
    print_result(o.stat_only ? "stat" : "read", o, o.root, o.threads, pass, r);
    if (r.errors) status = 1;
  }
  return status;
}
