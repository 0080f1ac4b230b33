// The cost of one FUSE round trip, by transport (fuse/uring_transport.h): isatty() (ioctl TCGETS,
// which FUSE always forwards; Python's open() calls it) and stat() (one GETATTR: the file's
// attributes are never cached) on a file of a mount, against the same calls on ext4, idle and
// beside N busy processes. docs/kernel.md says why the round trip matters.
//
// The server is a child process (as dsfs is a daemon): a one-file filesystem served by
// FuseTransport with dsfs's settings (2 classic threads, nice -10). Needs root and /dev/fuse; for
// the io_uring runs it sets the fuse module parameter enable_uring to Y and puts back what it
// found.
//
//   dsfs-roundtrip-bench [--seconds S] [--reps R] [--rounds N] [--busy 0,2]
//                        [--configs classic,uring,uring:nodefer,uring:coop,uring:poll=20:nopin]
//                        [--ext4-dir DIR] [--dsfs BINARY --store STORE --file PATH]
//
// With --dsfs, the server is a real dsfs mount instead: `BINARY mount STORE DIR -o
// transport=CONFIG` (a config is then only auto, uring or classic), measured on the file PATH
// of the store (and its copy on ext4): isatty() per call, stat() (answered from the attribute
// cache), pread() of 4 KiB with O_DIRECT (one READ round trip each) and the unmodified read a
// program does: open, read the whole file (from the page cache), close.
//
// A config is a transport (auto, uring, classic) with options: libfuse (ioctls answered by a
// libfuse callback, not by the transport as dsfs has them answered), nodefer (rings without dsfs's
// IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN), coop (COOP_TASKRUN), poll=US (busy-poll before
// sleeping), nopin (queue threads not pinned to their CPUs). The configs take turns, round after
// round, so that each sees the same background load; printed is the median per (target, busy
// processes, call) of microseconds per call over all rounds.
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fuse/uring_transport.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kEnableUring[] = "/sys/module/fuse/parameters/enable_uring";
constexpr fuse_ino_t kFile = 2;

// ---- the server ------------------------------------------------------------------------------

void FillStat(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_nlink = ino == FUSE_ROOT_ID ? 2 : 1;
  st->st_mode = ino == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0644);
  st->st_size = ino == FUSE_ROOT_ID ? 0 : 4096;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != FUSE_ROOT_ID || std::strcmp(name, "file") != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = kFile;
  e.generation = 1;
  e.entry_timeout = 1e6;  // the name stays known: stat() costs one GETATTR, not a LOOKUP too
  e.attr_timeout = 0;
  FillStat(kFile, &e.attr);
  fuse_reply_entry(req, &e);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  struct stat st;
  FillStat(ino, &st);
  fuse_reply_attr(req, &st, 0);
}

void OpOpen(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) { fuse_reply_open(req, fi); }

void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, struct fuse_file_info*, unsigned,
             const void*, size_t, size_t) {
  fuse_reply_err(req, ENOTTY);  // what dsfs answers (ENOSYS, which the kernel turns into this)
}

// Child: mounts at `dir`, reports the transport on `report_fd`, serves until unmounted.
[[noreturn]] void ServeChild(const std::string& dir, const dsfs::TransportOptions& options,
                             int report_fd) {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.lookup = OpLookup;
  ops.getattr = OpGetAttr;
  ops.open = OpOpen;
  ops.ioctl = OpIoctl;
  const char* argv[] = {"roundtrip_bench", "-o", "subtype=roundtrip_bench"};
  struct fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (!se || fuse_session_mount(se, dir.c_str()) != 0) _exit(2);
  std::unique_ptr<dsfs::FuseTransport> t;
  if (!dsfs::FuseTransport::Create(se, options, &t).ok()) _exit(3);
  // dsfs's serving threads run at nice -10 (fuse/fuse_ops.h); they inherit it from here.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), -10);
  std::thread reporter([&] {
    struct stat st;
    ::stat((dir + "/file").c_str(), &st);  // makes sure INIT has happened
    dsfs::TransportInfo info = t->info();
    for (int i = 0; i < 1000 && !info.decided; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      info = t->info();
    }
    std::string d = info.Describe() + "\n";
    (void)!::write(report_fd, d.data(), d.size());
    ::close(report_fd);
  });
  (void)t->Serve();
  reporter.join();
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  _exit(0);
}

// ---- the measurements ------------------------------------------------------------------------

// Microseconds per call of `call`, run for `seconds`.
template <typename F>
double UsPerCall(double seconds, F&& call) {
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  uint64_t n = 0;
  auto t0 = Clock::now();
  while (true) {
    for (int i = 0; i < 64; ++i) call();
    n += 64;
    if (Clock::now() >= end) break;
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  return us / static_cast<double>(n);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<pid_t> StartBusy(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t p = ::fork();
    if (p == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    pids.push_back(p);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return pids;
}

void StopBusy(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) ::kill(p, SIGKILL);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
}

struct Args {
  double seconds = 0.5;
  int reps = 1;    // runs of `seconds` per round and measurement
  int rounds = 5;  // the configurations take turns this many times
  std::vector<int> busy = {0, 2};
  std::vector<std::string> configs = {"classic", "uring"};
  std::string ext4_dir = "/var/tmp";
  std::string dsfs;   // the dsfs binary: measure real mounts of `store`
  std::string store;  // the store those mounts serve
  std::string file;   // the file measured, a path in the store ("/a/b.jpg")
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(sep, start);
    if (c == std::string::npos) c = s.size();
    if (c > start) out.push_back(s.substr(start, c - start));
    start = c + 1;
  }
  return out;
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    std::string v = argv[i + 1];
    if (k == "--seconds") {
      a->seconds = std::stod(v);
    } else if (k == "--reps") {
      a->reps = std::max(1, std::stoi(v));
    } else if (k == "--rounds") {
      a->rounds = std::max(1, std::stoi(v));
    } else if (k == "--busy") {
      a->busy.clear();
      for (auto& b : Split(v, ',')) a->busy.push_back(std::stoi(b));
    } else if (k == "--configs") {
      a->configs = Split(v, ',');
    } else if (k == "--ext4-dir") {
      a->ext4_dir = v;
    } else if (k == "--dsfs") {
      a->dsfs = v;
    } else if (k == "--store") {
      a->store = v;
    } else if (k == "--file") {
      a->file = v;
    } else {
      return false;
    }
  }
  return argc % 2 == 1;
}

// "uring:nodefer:poll=20:nopin" -> options. False on an unknown word.
bool ConfigOptions(const std::string& config, dsfs::TransportOptions* o) {
  std::vector<std::string> words = Split(config, ':');
  if (words.empty() || !dsfs::ParseTransportMode(words[0], &o->mode).ok()) return false;
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "nopin") {
      o->pin_threads = false;
    } else if (w == "coop") {
      o->extra_ring_flags |= IORING_SETUP_COOP_TASKRUN;
    } else if (w == "nodefer") {
      o->defer_taskrun = false;
    } else if (w == "libfuse") {
      o->answer_ioctls = false;
    } else if (w.rfind("poll=", 0) == 0) {
      o->busy_poll_us = std::stoi(w.substr(5));
    } else {
      return false;
    }
  }
  return true;
}

// Samples (us per call) by target, busy processes and call.
struct Samples {
  std::map<std::string, std::vector<double>> by_key;
  void Add(const std::string& key, double us) { by_key[key].push_back(us); }
};

std::string Key(const std::string& target, int busy, const char* call) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-22s busy=%d %-6s", target.c_str(), busy, call);
  return buf;
}

void Measure(const std::string& target, const std::string& file, const Args& a, Samples* out) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(file.c_str());
    return;
  }
  for (int busy : a.busy) {
    std::vector<pid_t> pids = StartBusy(busy);
    for (int r = 0; r < a.reps; ++r) {
      out->Add(Key(target, busy, "isatty"), UsPerCall(a.seconds, [&] { (void)::isatty(fd); }));
      struct stat s;
      out->Add(Key(target, busy, "stat"),
               UsPerCall(a.seconds, [&] { (void)::stat(file.c_str(), &s); }));
    }
    StopBusy(pids);
  }
  ::close(fd);
}

// The dsfs measurements (see the top): the isatty/stat of Measure, plus reads.
void MeasureReads(const std::string& target, const std::string& file, const Args& a, Samples* out) {
  Measure(target, file, a, out);
  int dfd = ::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  void* page = std::aligned_alloc(4096, 1 << 20);
  std::vector<char> whole(1 << 20);
  for (int busy : a.busy) {
    std::vector<pid_t> pids = StartBusy(busy);
    for (int r = 0; r < a.reps; ++r) {
      if (dfd >= 0) {
        out->Add(Key(target, busy, "pread4k_direct"),
                 UsPerCall(a.seconds, [&] { (void)!::pread(dfd, page, 4096, 0); }));
      }
      out->Add(Key(target, busy, "open_read_close"), UsPerCall(a.seconds, [&] {
                 int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
                 if (fd < 0) return;
                 while (::read(fd, whole.data(), whole.size()) > 0) {
                 }
                 ::close(fd);
               }));
    }
    StopBusy(pids);
  }
  std::free(page);
  if (dfd >= 0) ::close(dfd);
}

// Runs `argv` and waits for it; its exit status (-1 if it could not run).
int RunWait(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> c;
    for (const auto& s : argv) c.push_back(const_cast<char*>(s.c_str()));
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// One dsfs mount of `config` (auto, uring, classic) for one round; "" if it did not come up.
std::string MeasureDsfs(const std::string& config, const Args& a, Samples* out) {
  if (std::ifstream(kEnableUring)) {
    std::ofstream(kEnableUring) << (config == "classic" ? "N" : "Y") << "\n";
  }
  char tmpl[] = "/tmp/roundtrip_bench.XXXXXX";
  if (!::mkdtemp(tmpl)) return "";
  std::string dir = tmpl;
  std::string described;
  if (RunWait({a.dsfs, "mount", a.store, dir, "-o", "transport=" + config}) == 0) {
    std::string json;
    {  // closed before the unmount, which refuses a mount with open files
      std::ifstream stats(dir + "/.dsfs/stats");
      json.assign(std::istreambuf_iterator<char>(stats), std::istreambuf_iterator<char>());
    }
    size_t at = json.find("\"serving\": \"");
    if (at != std::string::npos) {
      at += 12;
      described = json.substr(at, json.find('"', at) - at);
    }
    MeasureReads("dsfs-" + config, dir + a.file, a, out);
    RunWait({a.dsfs, "umount", dir});
  }
  ::rmdir(dir.c_str());
  return described;
}

// One server of `config` for one round; "" if it did not come up.
std::string MeasureFuse(const std::string& config, const Args& a, Samples* out) {
  dsfs::TransportOptions o;
  o.answer_ioctls = true;  // as dsfs does; "libfuse" has the callback below answer them
  ConfigOptions(config, &o);
  if (std::ifstream(kEnableUring)) {
    std::ofstream(kEnableUring) << (o.mode == dsfs::TransportMode::kClassic ? "N" : "Y") << "\n";
  }
  char tmpl[] = "/tmp/roundtrip_bench.XXXXXX";
  if (!::mkdtemp(tmpl)) return "";
  std::string dir = tmpl;
  int p[2];
  if (::pipe(p) != 0) return "";
  pid_t server = ::fork();
  if (server == 0) {
    ::close(p[0]);
    ServeChild(dir, o, p[1]);
  }
  ::close(p[1]);
  char buf[256] = {0};
  ssize_t n = ::read(p[0], buf, sizeof(buf) - 1);
  ::close(p[0]);
  std::string described = n > 0 ? std::string(buf, static_cast<size_t>(n) - 1) : "";
  if (!described.empty()) Measure(config, dir + "/file", a, out);
  if (::umount2(dir.c_str(), 0) != 0) ::umount2(dir.c_str(), MNT_DETACH);
  int status = 0;
  ::waitpid(server, &status, 0);
  ::rmdir(dir.c_str());
  return described;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  dsfs::TransportOptions probe;
  bool ok = Parse(argc, argv, &a);
  for (auto& c : a.configs) ok = ok && ConfigOptions(c, &probe);
  if (!a.dsfs.empty()) {
    ok = ok && !a.store.empty() && !a.file.empty() && a.file[0] == '/';
    for (auto& c : a.configs) ok = ok && (c == "auto" || c == "uring" || c == "classic");
  }
  if (!ok) {
    std::fprintf(
        stderr,
        "usage: %s [--seconds S] [--reps R] [--rounds N] [--busy 0,2]\n"
        "          [--configs classic,uring,uring:nodefer,uring:coop,uring:poll=20:nopin]\n"
        "          [--ext4-dir DIR] [--dsfs BINARY --store STORE --file /PATH]\n",
        argv[0]);
    return 2;
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "SKIPPED: needs root (it mounts)\n");
    return 0;
  }
  std::string saved;
  {
    std::ifstream in(kEnableUring);
    if (in) std::getline(in, saved);
  }
  std::printf("# %u CPUs; %d rounds, each config %d x %.2f s per measurement; medians\n",
              std::thread::hardware_concurrency(), a.rounds, a.reps, a.seconds);
  Samples samples;
  std::map<std::string, std::string> described;
  std::string ext4 = a.ext4_dir + "/roundtrip_bench." + std::to_string(::getpid());
  if (a.dsfs.empty()) {
    std::ofstream(ext4) << std::string(4096, 'x');
  } else {
    // The ext4 baseline reads a copy of the measured file, taken through a first mount.
    char tmpl[] = "/tmp/roundtrip_bench.XXXXXX";
    if (::mkdtemp(tmpl) &&
        RunWait({a.dsfs, "mount", a.store, tmpl, "-o", "transport=classic"}) == 0) {
      {
        std::ifstream in(std::string(tmpl) + a.file, std::ios::binary);
        std::ofstream(ext4, std::ios::binary) << in.rdbuf();
      }
      RunWait({a.dsfs, "umount", tmpl});
    }
    ::rmdir(tmpl);
  }
  for (int round = 0; round < a.rounds; ++round) {
    if (a.dsfs.empty()) {
      Measure("ext4", ext4, a, &samples);
    } else {
      MeasureReads("ext4", ext4, a, &samples);
    }
    for (const std::string& c : a.configs) {
      std::string d = a.dsfs.empty() ? MeasureFuse(c, a, &samples) : MeasureDsfs(c, a, &samples);
      if (!d.empty()) described[c] = d;
    }
  }
  ::unlink(ext4.c_str());
  if (!saved.empty()) std::ofstream(kEnableUring) << saved << "\n";
  for (auto& [c, d] : described) std::printf("# %-22s served by %s\n", c.c_str(), d.c_str());
  for (auto& [key, v] : samples.by_key) {
    std::printf("%s %7.2f us  (min %.2f, max %.2f, n=%zu)\n", key.c_str(), Median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                v.size());
  }
  return 0;
}
