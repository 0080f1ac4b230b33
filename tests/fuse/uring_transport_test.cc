// FuseTransport (fuse/uring_transport.h) over real mounts: a tiny in-test filesystem served over
// io_uring and over the classic loop, checked from many threads, through ioctl, page-cache
// pushes, replies from other threads, unmounts and aborts under load, and each fallback.
//
// Needs root and /dev/fuse (skipped plainly otherwise). The io_uring tests set the fuse module
// parameter enable_uring to Y for their mounts (it only affects new mounts, and only servers
// that take it up in INIT) and put back what they found.
#include "fuse/uring_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "mount/mount.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using testing::kEnableUringPath;
using EnableUring = testing::ScopedEnableUring;
constexpr unsigned long kMagicIoctl = _IOR('d', 1, uint64_t);
constexpr uint64_t kMagicValue = 0x6473667375726e67ULL;  // "dsfsurng"

// ---------------------------------------------------------------------------------------------
// The filesystem: a root with kFiles files and a directory of kSubFiles more, plus "slow"
// (each read takes 20 ms), "async" (answered from another thread) and "push" (for
// notify_store). Entry and attribute timeouts are 0, so every stat and open is a round trip.

constexpr int kFiles = 100;
constexpr int kSubFiles = 20;
constexpr fuse_ino_t kRoot = 1;
constexpr fuse_ino_t kFirstFile = 2;                     // f000..f099
constexpr fuse_ino_t kSub = kFirstFile + kFiles;         // sub/
constexpr fuse_ino_t kFirstSubFile = kSub + 1;           // sub/g00..g19
constexpr fuse_ino_t kSlow = kFirstSubFile + kSubFiles;  // slow
constexpr fuse_ino_t kAsync = kSlow + 1;                 // async
constexpr fuse_ino_t kPush = kAsync + 1;                 // push
constexpr fuse_ino_t kLastIno = kPush;

std::string Content(fuse_ino_t ino) {
  if (ino == kPush) return std::string(8192, 'A');
  // Sizes from 0 to ~600 KiB: several READs per file, some of the largest size libfuse allows.
  size_t size = (ino * 7919 + ino * ino * 131) % 600000;
  if (ino % 10 == 3) size = 0;
  std::string s(size, '\0');
  uint32_t x = static_cast<uint32_t>(ino) * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string NameOf(fuse_ino_t ino) {
  char buf[16];
  if (ino >= kFirstFile && ino < kSub) {
    std::snprintf(buf, sizeof(buf), "f%03d", static_cast<int>(ino - kFirstFile));
    return buf;
  }
  if (ino == kSub) return "sub";
  if (ino >= kFirstSubFile && ino < kSlow) {
    std::snprintf(buf, sizeof(buf), "g%02d", static_cast<int>(ino - kFirstSubFile));
    return buf;
  }
  if (ino == kSlow) return "slow";
  if (ino == kAsync) return "async";
  if (ino == kPush) return "push";
  return "";
}

fuse_ino_t ParentOf(fuse_ino_t ino) { return ino >= kFirstSubFile && ino < kSlow ? kSub : kRoot; }

bool IsDir(fuse_ino_t ino) { return ino == kRoot || ino == kSub; }

class TestFs {
 public:
  TestFs() {
    for (fuse_ino_t i = kFirstFile; i <= kLastIno; ++i) {
      if (!IsDir(i)) contents_[i] = Content(i);
    }
    worker_ = std::thread([this] { AsyncWorker(); });
  }
  ~TestFs() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  static fuse_lowlevel_ops Ops() {
    fuse_lowlevel_ops ops;
    std::memset(&ops, 0, sizeof(ops));
    ops.lookup = Lookup;
    ops.getattr = GetAttr;
    ops.readdir = ReadDir;
    ops.open = Open;
    ops.read = Read;
    ops.ioctl = Ioctl;
    return ops;
  }

  const std::string& content(fuse_ino_t ino) const { return contents_.at(ino); }
  std::atomic<uint64_t> ioctls{0};

 private:
  static TestFs* Self(fuse_req_t req) { return static_cast<TestFs*>(fuse_req_userdata(req)); }

  void Stat(fuse_ino_t ino, struct stat* st) const {
    std::memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_nlink = IsDir(ino) ? 2 : 1;
    st->st_mode = IsDir(ino) ? (S_IFDIR | 0755) : (S_IFREG | 0644);
    st->st_size = IsDir(ino) ? 0 : static_cast<off_t>(contents_.at(ino).size());
    st->st_mtime = 1700000000;
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    for (fuse_ino_t i = kFirstFile; i <= kLastIno; ++i) {
      if (ParentOf(i) == parent && NameOf(i) == name) {
        fuse_entry_param e;
        std::memset(&e, 0, sizeof(e));
        e.ino = i;
        e.generation = 1;
        Self(req)->Stat(i, &e.attr);
        fuse_reply_entry(req, &e);
        return;
      }
    }
    fuse_reply_err(req, ENOENT);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
    if (ino < kRoot || ino > kLastIno) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    struct stat st;
    Self(req)->Stat(ino, &st);
    fuse_reply_attr(req, &st, 0);
  }

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info*) {
    if (!IsDir(ino)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<fuse_ino_t> kids;
    for (fuse_ino_t i = kFirstFile; i <= kLastIno; ++i) {
      if (ParentOf(i) == ino) kids.push_back(i);
    }
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t k = static_cast<size_t>(off); k < kids.size(); ++k) {
      struct stat st;
      Self(req)->Stat(kids[k], &st);
      size_t need = fuse_add_direntry(req, buf.data() + used, size - used, NameOf(kids[k]).c_str(),
                                      &st, static_cast<off_t>(k + 1));
      if (need > size - used) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    if (IsDir(ino)) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    // "push" keeps its page cache: what notify_store put there must still be there.
    fi->keep_cache = ino == kPush;
    fuse_reply_open(req, fi);
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
    TestFs* self = Self(req);
    const std::string& c = self->contents_.at(ino);
    size_t start = std::min(c.size(), static_cast<size_t>(off));
    size_t n = std::min(size, c.size() - start);
    if (ino == kSlow) std::this_thread::sleep_for(milliseconds(20));
    if (ino == kAsync) {
      // Answered later from the worker thread: the request's ring entry waits, parked.
      std::lock_guard<std::mutex> l(self->mu_);
      self->pending_.push_back({req, std::string_view(c).substr(start, n)});
      self->cv_.notify_all();
      return;
    }
    fuse_reply_buf(req, c.data() + start, n);
  }

  static void Ioctl(fuse_req_t req, fuse_ino_t, unsigned int cmd, void*, struct fuse_file_info*,
                    unsigned, const void*, size_t, size_t out_size) {
    Self(req)->ioctls++;
    if (cmd == kMagicIoctl && out_size >= sizeof(kMagicValue)) {
      fuse_reply_ioctl(req, 0, &kMagicValue, sizeof(kMagicValue));
    } else {
      fuse_reply_err(req, ENOTTY);
    }
  }

  void AsyncWorker() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      auto [req, data] = pending_.front();
      pending_.pop_front();
      l.unlock();
      std::this_thread::sleep_for(milliseconds(2));
      fuse_reply_buf(req, data.data(), data.size());
      l.lock();
    }
  }

  std::map<fuse_ino_t, std::string> contents_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<fuse_req_t, std::string_view>> pending_;
  bool stop_ = false;
  std::thread worker_;
};

// ---------------------------------------------------------------------------------------------
// Environment

#define SKIP_UNLESS_URING(guard)                                                                \
  do {                                                                                          \
    SKIP_UNLESS_CAN_MOUNT();                                                                    \
    if (!(guard).exists()) {                                                                    \
      GTEST_SKIP() << "SKIPPED: this kernel has no FUSE over io_uring (no " << kEnableUringPath \
                   << ")";                                                                      \
    }                                                                                           \
  } while (0)

// Captures what the dsfs logger writes at info and above, for the scope.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_pattern("%l %v");
    level_ = Log()->level();
    Log()->set_level(spdlog::level::info);
    Log()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = Log()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    Log()->set_level(level_);
  }
  // The lines that contain `what`.
  std::vector<std::string> Lines(const std::string& what) {
    Log()->flush();
    return testing::LinesWith(out_.str(), what);
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
};

int ThreadCount() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

// One mount of TestFs served by a FuseTransport on its own thread.
class TestMount {
 public:
  ~TestMount() { Stop(); }

  void Start(const TransportOptions& options) {
    ops_ = TestFs::Ops();
    const char* argv[] = {"uring_transport_test", "-o", "subtype=dsfs_uring_test"};
    struct fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
    se_ = fuse_session_new(&args, &ops_, sizeof(ops_), &fs_);
    ASSERT_NE(se_, nullptr);
    ASSERT_EQ(fuse_session_mount(se_, dir_.path().c_str()), 0);
    mounted_ = true;
    Status s = FuseTransport::Create(se_, options, &transport_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    serve_ = std::async(std::launch::async, [this] { return transport_->Serve(); });
  }

  // Waits until the transport has decided (INIT answered; over io_uring, every queue
  // registered). The first stat makes sure the kernel has sent INIT.
  TransportInfo WaitDecided() {
    struct stat st;
    ::stat(dir_.path().c_str(), &st);
    auto deadline = Clock::now() + std::chrono::seconds(5);
    TransportInfo info = transport_->info();
    while (!info.decided && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
      info = transport_->info();
    }
    return info;
  }

  // Unmounts (lazily if busy) and waits for Serve to return; fails the test if it does not
  // within `timeout`.
  void Stop(milliseconds timeout = milliseconds(10000)) {
    if (mounted_) {
      if (::umount2(dir_.path().c_str(), 0) != 0) ::umount2(dir_.path().c_str(), MNT_DETACH);
      mounted_ = false;
    }
    WaitServed(timeout);
    Destroy();
  }

  void WaitServed(milliseconds timeout) {
    if (!serve_.valid()) return;
    if (serve_.wait_for(timeout) != std::future_status::ready) {
      ADD_FAILURE() << "Serve did not return within " << timeout.count() << " ms";
      // Free the threads stuck on the mount, or the test process cannot even exit.
      Abort();
      ::umount2(dir_.path().c_str(), MNT_DETACH);
      if (serve_.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        std::fflush(nullptr);
        std::_Exit(1);
      }
    }
    Status s = serve_.get();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  void Destroy() {
    if (se_) {
      fuse_session_unmount(se_);
      fuse_session_destroy(se_);
      se_ = nullptr;
    }
    transport_.reset();
  }

  // Aborts the connection (as `echo 1 > /sys/fs/fuse/connections/N/abort`). False if that
  // cannot be done (no fusectl).
  bool Abort() {
    // Not stat(): the mount may be the thing that hangs. mountinfo names its device.
    MountInfo mi;
    if (!FindMount(dir_.path(), &mi)) return false;
    std::string p = "/sys/fs/fuse/connections/" + std::to_string(mi.dev_minor) + "/abort";
    std::ofstream out(p);
    if (!out) return false;
    out << "1\n";
    return static_cast<bool>(out.flush());
  }

  std::string Path(const std::string& rel) const { return dir_.path() + "/" + rel; }
  const std::string& dir() const { return dir_.path(); }
  FuseTransport* transport() { return transport_.get(); }
  fuse_session* session() { return se_; }
  TestFs& fs() { return fs_; }
  bool unmounted_by_test() { return !mounted_; }
  void ForgetMounted() { mounted_ = false; }

 private:
  testing::TempDir dir_;
  TestFs fs_;
  fuse_lowlevel_ops ops_;
  fuse_session* se_ = nullptr;
  bool mounted_ = false;
  std::unique_ptr<FuseTransport> transport_;
  std::future<Status> serve_;
};

std::string ReadAll(const std::string& path, int* err) {
  *err = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return "";
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      *err = errno;
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string RelPath(fuse_ino_t ino) {
  return ParentOf(ino) == kSub ? "sub/" + NameOf(ino) : NameOf(ino);
}

// The checks every transport must pass: tree, attributes, contents from `threads` threads,
// ioctl, a reply from another thread.
void CheckServes(TestMount& m, int threads, bool ioctls_reach_the_filesystem = true) {
  std::vector<std::string> want_root;
  std::vector<std::string> want_sub;
  for (fuse_ino_t i = kFirstFile; i <= kLastIno; ++i) {
    (ParentOf(i) == kSub ? want_sub : want_root).push_back(NameOf(i));
  }
  std::sort(want_root.begin(), want_root.end());
  std::sort(want_sub.begin(), want_sub.end());
  EXPECT_EQ(testing::DirNames(m.dir()), want_root);
  EXPECT_EQ(testing::DirNames(m.Path("sub")), want_sub);

  struct stat st;
  ASSERT_EQ(::stat(m.Path("sub").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_NE(::stat(m.Path("nothing").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);

  // Every file from every thread, each in its own order, twice.
  std::vector<fuse_ino_t> files;
  for (fuse_ino_t i = kFirstFile; i <= kLastIno; ++i) {
    if (!IsDir(i) && i != kSlow && i != kPush) files.push_back(i);
  }
  std::atomic<int> bad{0};
  std::atomic<int> reads{0};
  std::mutex first_mu;
  std::string first_bad;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<fuse_ino_t> order = files;
      std::rotate(order.begin(), order.begin() + (t * 7) % order.size(), order.end());
      if (t % 2) std::reverse(order.begin(), order.end());
      for (int round = 0; round < 2; ++round) {
        for (fuse_ino_t ino : order) {
          struct stat fst;
          int err = 0;
          bool ok = ::stat(m.Path(RelPath(ino)).c_str(), &fst) == 0 &&
                    fst.st_size == static_cast<off_t>(m.fs().content(ino).size()) &&
                    fst.st_ino == ino;
          std::string got = ReadAll(m.Path(RelPath(ino)), &err);
          ok = ok && err == 0 && got == m.fs().content(ino);
          reads++;
          if (!ok && bad++ == 0) {
            std::lock_guard<std::mutex> l(first_mu);
            first_bad = RelPath(ino) + ": err " + std::to_string(err) + ", " +
                        std::to_string(got.size()) + " bytes of " +
                        std::to_string(m.fs().content(ino).size());
          }
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0) << "first: " << first_bad;
  EXPECT_EQ(reads.load(), threads * 2 * static_cast<int>(files.size()));
  if (!ioctls_reach_the_filesystem) return;

  // ioctl: FUSE always forwards it; the answer must come back with its data.
  int fd = ::open(m.Path("f001").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  uint64_t v = 0;
  EXPECT_EQ(::ioctl(fd, kMagicIoctl, &v), 0) << std::strerror(errno);
  EXPECT_EQ(v, kMagicValue);
  errno = 0;
  EXPECT_EQ(::isatty(fd), 0);
  EXPECT_EQ(errno, ENOTTY);
  ::close(fd);
  EXPECT_GE(m.fs().ioctls.load(), 2u);
}

// ---------------------------------------------------------------------------------------------

TEST(TransportModeTest, ParsesTheThreeNames) {
  TransportMode m = TransportMode::kClassic;
  ASSERT_TRUE(ParseTransportMode("auto", &m).ok());
  EXPECT_EQ(m, TransportMode::kAuto);
  ASSERT_TRUE(ParseTransportMode("uring", &m).ok());
  EXPECT_EQ(m, TransportMode::kUring);
  ASSERT_TRUE(ParseTransportMode("classic", &m).ok());
  EXPECT_EQ(m, TransportMode::kClassic);
  Status s = ParseTransportMode("io_uring", &m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("auto, uring or classic"), std::string::npos) << s.ToString();
  EXPECT_EQ(m, TransportMode::kClassic);  // unchanged
  EXPECT_STREQ(TransportModeName(TransportMode::kAuto), "auto");
  EXPECT_EQ(TransportOptions().mode, TransportMode::kAuto);  // the default
}

TEST(TransportInfoTest, DescribesEachState) {
  TransportInfo i;
  EXPECT_EQ(i.Describe(), "pending (INIT not answered yet)");
  i.decided = true;
  i.reason = "requested with -o transport=classic";
  EXPECT_EQ(i.Describe(), "classic (requested with -o transport=classic)");
  i.uring = true;
  i.queues = 2;
  i.queue_depth = 8;
  EXPECT_EQ(i.Describe(), "uring (2 queues x 8 entries)");
}

TEST(UringTransportTest, ServesEverythingOverTheRing) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  int threads_before = ThreadCount();
  {
    LogCapture log;
    TestMount m;
    m.Start(TransportOptions{});
    TransportInfo info = m.WaitDecided();
    ASSERT_TRUE(info.decided);
    ASSERT_TRUE(info.uring) << info.Describe();
    std::vector<std::string> lines = log.Lines("FUSE transport");
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("info FUSE transport: io_uring, "), std::string::npos) << lines[0];
    EXPECT_EQ(info.queues, ::get_nprocs_conf());
    EXPECT_EQ(info.Describe(),
              "uring (" + std::to_string(::get_nprocs_conf()) + " queues x 8 entries)");

    CheckServes(m, 16);
    // The reply from another thread reaches its parked entry.
    int err;
    EXPECT_EQ(ReadAll(m.Path("async"), &err), m.fs().content(kAsync));
    EXPECT_EQ(err, 0);

    info = m.transport()->info();
    EXPECT_GT(info.ring_requests, 16u * 2 * kFiles) << info.ring_requests;
    // /dev/fuse saw INIT, and what the kernel queued before the ring was ready: a handful.
    EXPECT_LT(info.classic_requests, 20u) << info.classic_requests;
    m.Stop();
  }
  EXPECT_EQ(ThreadCount(), threads_before) << "threads left behind";
}

TEST(UringTransportTest, EachCpuIsServedByItsOwnQueue) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  TestMount m;
  m.Start(TransportOptions{});
  ASSERT_TRUE(m.WaitDecided().uring);
  int ncpu = ::get_nprocs();
  for (int cpu = 0; cpu < ncpu; ++cpu) {
    std::vector<uint64_t> before = m.transport()->info().per_queue_requests;
    std::thread t([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      ASSERT_EQ(::sched_setaffinity(0, sizeof(set), &set), 0);
      struct stat st;
      for (int i = 0; i < 100; ++i) ASSERT_EQ(::stat(m.Path("f002").c_str(), &st), 0);
    });
    t.join();
    std::vector<uint64_t> after = m.transport()->info().per_queue_requests;
    ASSERT_EQ(after.size(), before.size());
    for (size_t q = 0; q < after.size(); ++q) {
      uint64_t d = after[q] - before[q];
      if (static_cast<int>(q) == cpu) {
        EXPECT_GE(d, 100u) << "queue " << q << " served " << d << " of the stats from CPU " << cpu;
      } else {
        EXPECT_LT(d, 5u) << "queue " << q << " served " << d << " of the stats from CPU " << cpu;
      }
    }
  }
  m.Stop();
}

TEST(UringTransportTest, PageCachePushStillWorks) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  TestMount m;
  m.Start(TransportOptions{});
  ASSERT_TRUE(m.WaitDecided().uring);
  int fd = ::open(m.Path("push").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // Through /dev/fuse (unique 0), from a thread that is no queue's.
  std::string pushed(4096, 'B');
  struct fuse_bufvec bufv = FUSE_BUFVEC_INIT(pushed.size());
  bufv.buf[0].mem = pushed.data();
  ASSERT_EQ(fuse_lowlevel_notify_store(m.session(), kPush, 0, &bufv, fuse_buf_copy_flags{}), 0);
  char buf[8192];
  ASSERT_EQ(::pread(fd, buf, sizeof(buf), 0), 8192);
  EXPECT_EQ(std::string(buf, 4096), pushed) << "the kernel did not keep the pushed page";
  EXPECT_EQ(std::string(buf + 4096, 4096), std::string(4096, 'A'));
  ::close(fd);
  m.Stop();
}

// Mounts fusectl on /sys/fs/fuse/connections for the scope if it is not there (it is where a
// connection is aborted), and unmounts it again if it did.
class FuseCtl {
 public:
  FuseCtl() {
    DIR* d = ::opendir("/sys/fs/fuse/connections");
    bool empty = true;
    if (d) {
      while (struct dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') empty = false;
      }
      ::closedir(d);
    }
    MountInfo mi;
    bool fusectl = FindMount("/sys/fs/fuse/connections", &mi) && mi.fstype == "fusectl";
    if (!fusectl && empty) {
      mounted_ = ::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr) == 0;
    }
  }
  ~FuseCtl() {
    if (mounted_) ::umount2("/sys/fs/fuse/connections", MNT_DETACH);
  }

 private:
  bool mounted_ = false;
};

// Readers keep the queues busy (one file takes 20 ms a read) while the mount goes away.
void UnmountUnderLoad(bool abort_connection) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  FuseCtl ctl;
  int threads_before = ThreadCount();
  {
    TestMount m;
    m.Start(TransportOptions{});
    ASSERT_TRUE(m.WaitDecided().uring);
    std::atomic<bool> done{false};
    std::atomic<int> reads{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t) {
      ts.emplace_back([&, t] {
        while (!done.load()) {
          int err;
          ReadAll(m.Path(t % 2 ? "slow" : RelPath(kFirstFile + t)), &err);
          if (err != 0) return;  // gone
          reads++;
        }
      });
    }
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_GT(reads.load(), 8);
    auto t0 = Clock::now();
    if (abort_connection) {
      EXPECT_TRUE(m.Abort()) << "cannot abort through /sys/fs/fuse/connections";
    } else {
      ASSERT_EQ(::umount2(m.dir().c_str(), MNT_DETACH), 0);
    }
    m.ForgetMounted();
    m.WaitServed(milliseconds(10000));
    auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
    done = true;
    for (auto& t : ts) t.join();
    EXPECT_LT(ms, 5000) << "Serve took " << ms << " ms to return";
    if (abort_connection) ::umount2(m.dir().c_str(), MNT_DETACH);
    m.Destroy();
  }
  EXPECT_EQ(ThreadCount(), threads_before) << "threads left behind";
}

TEST(UringTransportTest, LazyUnmountWhileRequestsAreInFlightEndsCleanly) {
  UnmountUnderLoad(false);
}

TEST(UringTransportTest, AbortWhileRequestsAreInFlightEndsCleanly) { UnmountUnderLoad(true); }

TEST(UringTransportTest, FallsBackToClassicWhenTheModuleParameterIsOff) {
  EnableUring off(false);
  SKIP_UNLESS_CAN_MOUNT();
  LogCapture log;
  TestMount m;
  m.Start(TransportOptions{});
  TransportInfo info = m.WaitDecided();
  ASSERT_TRUE(info.decided);
  EXPECT_FALSE(info.uring);
  std::vector<std::string> lines = log.Lines("FUSE transport");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "info FUSE transport: classic /dev/fuse loop: " + info.reason);
  if (off.exists()) {
    EXPECT_NE(info.reason.find("enable_uring is N"), std::string::npos) << info.reason;
  } else {
    EXPECT_NE(info.reason.find("no FUSE over io_uring"), std::string::npos) << info.reason;
  }
  CheckServes(m, 8);
  info = m.transport()->info();
  EXPECT_EQ(info.ring_requests, 0u);
  EXPECT_GT(info.classic_requests, 8u * 2 * kFiles);
  m.Stop();
}

TEST(UringTransportTest, ForcedUringThatCannotBeHadWarnsAndServesClassic) {
  EnableUring off(false);
  SKIP_UNLESS_CAN_MOUNT();
  LogCapture log;
  TransportOptions o;
  o.mode = TransportMode::kUring;
  TestMount m;
  m.Start(o);
  TransportInfo info = m.WaitDecided();
  ASSERT_TRUE(info.decided);
  EXPECT_FALSE(info.uring);
  std::vector<std::string> lines = log.Lines("FUSE transport");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "warning FUSE transport: classic /dev/fuse loop: " + info.reason);
  CheckServes(m, 4);
  m.Stop();
}

TEST(UringTransportTest, ClassicWhenRequested) {
  EnableUring on(true);
  SKIP_UNLESS_CAN_MOUNT();
  TransportOptions o;
  o.mode = TransportMode::kClassic;
  TestMount m;
  m.Start(o);
  TransportInfo info = m.WaitDecided();
  ASSERT_TRUE(info.decided);
  EXPECT_FALSE(info.uring);
  EXPECT_EQ(info.Describe(), "classic (requested with -o transport=classic)");
  EXPECT_EQ(info.queues, 0);
  CheckServes(m, 8);
  m.Stop();
}

TEST(UringTransportTest, FallsBackToClassicWhenIoUringSetupFails) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  TransportOptions o;
  o.extra_ring_flags = 1u << 31;  // no such io_uring_setup flag: EINVAL
  TestMount m;
  m.Start(o);
  TransportInfo info = m.WaitDecided();
  ASSERT_TRUE(info.decided);
  EXPECT_FALSE(info.uring);
  EXPECT_NE(info.reason.find("io_uring is unavailable: io_uring_setup: Invalid argument"),
            std::string::npos)
      << info.reason;
  CheckServes(m, 4);
  m.Stop();
}

// answer_ioctls (what dsfs sets: it has no ioctl): every ioctl fails ENOTTY without reaching
// the filesystem's callback, on both paths, and the transport counts them.
TEST(UringTransportTest, AnsweredIoctlsNeverReachTheFilesystem) {
  EnableUring on(true);
  SKIP_UNLESS_URING(on);
  for (TransportMode mode : {TransportMode::kUring, TransportMode::kClassic}) {
    SCOPED_TRACE(TransportModeName(mode));
    TransportOptions o;
    o.mode = mode;
    o.answer_ioctls = true;
    TestMount m;
    m.Start(o);
    TransportInfo info = m.WaitDecided();
    ASSERT_TRUE(info.decided);
    EXPECT_EQ(info.uring, mode == TransportMode::kUring) << info.Describe();
    for (const char* path : {"f001", "sub"}) {
      int fd = ::open(m.Path(path).c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0) << path;
      uint64_t v = 0;
      EXPECT_EQ(::ioctl(fd, kMagicIoctl, &v), -1);
      EXPECT_EQ(errno, ENOTTY) << path;
      EXPECT_EQ(v, 0u);
      errno = 0;
      EXPECT_EQ(::isatty(fd), 0);
      EXPECT_EQ(errno, ENOTTY) << path;
      ::close(fd);
    }
    EXPECT_EQ(m.fs().ioctls.load(), 0u);
    info = m.transport()->info();
    EXPECT_EQ(info.ioctls, 4u);
    CheckServes(m, 2, /*ioctls_reach_the_filesystem=*/false);  // everything else still is
    m.Stop();
  }
}

}  // namespace
}  // namespace dsfs
