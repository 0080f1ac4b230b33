#include "fs/uring_transport.h"

#include <fuse_lowlevel.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "fs/fuse_uring_abi.h"

namespace dsfs {

Status ParseTransportMode(std::string_view text, TransportMode* mode) {
  if (text == "auto") {
    *mode = TransportMode::kAuto;
  } else if (text == "uring") {
    *mode = TransportMode::kUring;
  } else if (text == "classic") {
    *mode = TransportMode::kClassic;
  } else {
    return Status::InvalidArgument("transport must be auto, uring or classic, not '" +
                                   std::string(text) + "'");
  }
  return Status::OK();
}

const char* TransportModeName(TransportMode mode) {
  switch (mode) {
    case TransportMode::kAuto:
      return "auto";
    case TransportMode::kUring:
      return "uring";
    case TransportMode::kClassic:
      return "classic";
  }
  return "?";
}

std::string TransportInfo::Describe() const {
  if (!decided) return "pending (INIT not answered yet)";
  if (uring) {
    return "uring (" + std::to_string(queues) + " queues x " + std::to_string(queue_depth) +
           " entries)";
  }
  return "classic (" + reason + ")";
}

namespace {

namespace abi = fuse_uring;

constexpr char kEnableUringPath[] = "/sys/module/fuse/parameters/enable_uring";
constexpr char kIoUringDisabledPath[] = "/proc/sys/kernel/io_uring_disabled";
// Ring entry header slots are this far apart in the entry memory (a ReqHeader is 288 bytes).
constexpr size_t kHeaderStride = 512;
// How long INIT waits for the queue threads to have their rings: they only create a ring and
// an eventfd, but a server that never answers INIT would hang every process that touches the
// mount.
constexpr auto kSetupTimeout = std::chrono::seconds(5);

std::string ReadFirstLine(const char* path, bool* exists) {
  std::ifstream in(path);
  *exists = static_cast<bool>(in);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// Why the kernel would not offer the ring, in words; "" if it looks as if it would.
std::string KernelSaysNo() {
  bool exists;
  std::string v = ReadFirstLine(kEnableUringPath, &exists);
  if (!exists) {
    return std::string("the kernel has no FUSE over io_uring (no ") + kEnableUringPath +
           "; it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)";
  }
  if (v.empty() || v[0] != 'Y') {
    return std::string("the fuse module parameter enable_uring is ") + (v.empty() ? "?" : v) +
           " (as root: echo Y > " + kEnableUringPath + ", then mount again)";
  }
  return "";
}

std::string IoUringError(int err) {
  bool exists;
  std::string disabled = ReadFirstLine(kIoUringDisabledPath, &exists);
  std::string s = std::string("io_uring is unavailable: io_uring_setup: ") + std::strerror(err);
  if (exists && !disabled.empty() && disabled != "0") {
    s += " (kernel.io_uring_disabled = " + disabled + ")";
  }
  return s;
}

enum EntryState : int {
  kInKernel,    // the kernel holds the command (or it is about to be submitted)
  kInCallback,  // a request is being processed by libfuse on the queue's thread
  kParked,      // the callback returned without replying: a reply will come from elsewhere
  kReplied,     // the reply is in the entry's buffers, to be committed by the queue's thread
};

struct Queue;

// One ring entry: a header and a payload buffer registered with the kernel, and the request
// it holds while that request is in userspace.
struct Entry {
  Queue* queue = nullptr;
  abi::ReqHeader* header = nullptr;
  char* payload = nullptr;
  struct iovec iov[2];
  uint32_t last_cmd = 0;
  uint64_t commit_id = 0;
  bool live = false;  // the kernel has its command or a request of it is in userspace
  // The request's unique while it is in userspace (0 otherwise): replies find their entry by it.
  std::atomic<uint64_t> unique{0};
  std::atomic<int> state{kInKernel};
};

struct Queue {
  int qid = 0;
  struct io_uring ring;
  bool has_ring = false;
  int eventfd = -1;
  int depth = 0;
  std::unique_ptr<Entry[]> entries;
  void* memory = nullptr;
  size_t memory_bytes = 0;
  std::thread thread;
  std::atomic<uint64_t> served{0};
  // Set by a reply from another thread to a parked entry; the eventfd wakes the queue thread.
  std::atomic<bool> async_replies{false};
};

// The entry whose request this thread is processing (set around fuse_session_process_buf by
// queue threads): the reply of a callback that answers before returning is found without a
// search.
thread_local Entry* tl_current = nullptr;

// user_data of the eventfd poll (entries are pointers to Entry).
constexpr uint64_t kPollTag = 1;

}  // namespace

class FuseTransport::Impl {
 public:
  Impl(fuse_session* se, const TransportOptions& options) : se_(se), options_(options) {
    options_.queue_depth = std::clamp(options_.queue_depth, 1, 1024);
    options_.classic_threads = std::max(1, options_.classic_threads);
  }
  ~Impl();

  Status Install();
  Status Serve();
  TransportInfo Info() const;

  // The session's custom I/O.
  ssize_t Read(int fd, void* buf, size_t len);
  ssize_t Writev(int fd, struct iovec* iov, int count);

 private:
  enum class Phase { kSetup, kGo, kClassic };

  void StartQueues();
  void StopQueues();
  void QueueMain(Queue* q);
  bool SetUpRing(Queue* q, std::string* error);
  void RunQueue(Queue* q);
  void HandleCqe(Queue* q, uint64_t data, int res, int* live, bool* poll_armed);
  void ServeRequest(Queue* q, Entry* e);
  void Commit(Queue* q, Entry* e);
  void ErrorReply(Queue* q, Entry* e, uint64_t unique, int error);
  void CommitAsyncReplies(Queue* q);
  void PrepCmd(Queue* q, Entry* e, uint32_t cmd);
  void ArmPoll(Queue* q);
  struct io_uring_sqe* GetSqe(Queue* q);

  void NoteInit(const void* buf, size_t len);
  ssize_t AnswerInit(int fd, struct iovec* iov, int count);
  std::string PrepareEntries(size_t payload_size);
  void Decide(const std::string& reason);
  void QueueRegistered(Queue* q, int error);
  Entry* FindEntry(uint64_t unique);
  ssize_t ReplyToEntry(Entry* e, const struct iovec* iov, int count);

  fuse_session* const se_;
  TransportOptions options_;
  int fd_ = -1;
  // Set in Install, read-only after: the queues (none if classic was decided before INIT) and
  // why there are none.
  std::vector<std::unique_ptr<Queue>> queues_;
  std::string early_reason_;
  size_t payload_size_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> entries_ready_{false};  // FindEntry may look at the queues' entries
  std::atomic<uint64_t> init_unique_{0};
  std::atomic<bool> init_answered_{false};
  uint64_t kernel_flags_ = 0;  // the kernel's INIT flags (flags | flags2 << 32)
  uint32_t kernel_minor_ = 0;
  std::atomic<uint64_t> classic_requests_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  Phase phase_ = Phase::kSetup;
  int queues_set_up_ = 0;      // queue threads done creating their ring (or failing to)
  std::string setup_error_;    // the first queue thread's failure
  int queues_registered_ = 0;  // queues whose REGISTERs the kernel accepted
  bool decided_ = false;
  bool uring_ = false;
  std::string reason_;  // why classic
};

namespace {

struct Slot {
  std::atomic<int> fd{-1};
  std::atomic<FuseTransport::Impl*> impl{nullptr};
};
// The custom I/O callbacks get the session's userdata (the filesystem's), not ours: the
// transport is found by the device fd. Lock-free lookups; registration under the mutex.
constexpr int kMaxTransports = 16;
Slot g_slots[kMaxTransports];
std::mutex g_slots_mu;

FuseTransport::Impl* FindTransport(int fd) {
  for (auto& s : g_slots) {
    if (s.fd.load(std::memory_order_acquire) == fd) return s.impl.load(std::memory_order_acquire);
  }
  return nullptr;
}

ssize_t HookRead(int fd, void* buf, size_t len, void*) {
  FuseTransport::Impl* t = FindTransport(fd);
  return t ? t->Read(fd, buf, len) : ::read(fd, buf, len);
}

ssize_t HookWritev(int fd, struct iovec* iov, int count, void*) {
  FuseTransport::Impl* t = FindTransport(fd);
  return t ? t->Writev(fd, iov, count) : ::writev(fd, iov, count);
}

void BlockServerSignals() {
  // libfuse's handlers end the session from whichever thread gets SIGINT/SIGTERM; the queue
  // threads keep out of the way so that the classic loop sees them as it always has.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace

FuseTransport::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> l(g_slots_mu);
    for (auto& s : g_slots) {
      if (s.impl.load() == this) {
        s.fd.store(-1, std::memory_order_release);
        s.impl.store(nullptr, std::memory_order_release);
      }
    }
  }
  for (auto& q : queues_) {
    if (q->memory) ::munmap(q->memory, q->memory_bytes);
  }
}

Status FuseTransport::Impl::Install() {
  fd_ = fuse_session_fd(se_);
  if (fd_ < 0) return Status::InvalidArgument("FUSE session is not mounted");
  {
    std::lock_guard<std::mutex> l(g_slots_mu);
    Slot* free_slot = nullptr;
    for (auto& s : g_slots) {
      if (s.fd.load() == fd_)
        return Status::InvalidArgument("FUSE session already has a transport");
      if (!free_slot && s.fd.load() < 0) free_slot = &s;
    }
    if (!free_slot) return Status::IOError("too many FUSE transports in one process");
    free_slot->impl.store(this, std::memory_order_release);
    free_slot->fd.store(fd_, std::memory_order_release);
  }
  // The queues exist from here on (their threads start in Serve), so info() can read them
  // from any thread without a lock.
  if (options_.mode != TransportMode::kClassic) {
    early_reason_ = KernelSaysNo();
    if (early_reason_.empty()) {
      int n = ::get_nprocs_conf();  // the kernel keeps one queue per *possible* CPU
      for (int i = 0; i < n; ++i) {
        auto q = std::make_unique<Queue>();
        q->qid = i;
        q->depth = options_.queue_depth;
        queues_.push_back(std::move(q));
      }
    }
  }
  static const struct fuse_custom_io io = {HookWritev, HookRead, nullptr, nullptr};
  if (fuse_session_custom_io(se_, &io, fd_) != 0) {
    return Status::IOError("libfuse refused the custom I/O (fuse_session_custom_io)");
  }
  return Status::OK();
}

// ---- INIT ----------------------------------------------------------------------------------

ssize_t FuseTransport::Impl::Read(int fd, void* buf, size_t len) {
  ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header))) {
    classic_requests_.fetch_add(1, std::memory_order_relaxed);
    const auto* in = static_cast<const fuse_in_header*>(buf);
    if (in->opcode == FUSE_INIT) NoteInit(buf, static_cast<size_t>(n));
  }
  return n;
}

void FuseTransport::Impl::NoteInit(const void* buf, size_t len) {
  const auto* in = static_cast<const fuse_in_header*>(buf);
  const char* arg = static_cast<const char*>(buf) + sizeof(*in);
  size_t arg_len = len - sizeof(*in);
  // fuse_init_in: major, minor, max_readahead, flags, then (7.36+) flags2.
  uint32_t words[5] = {0, 0, 0, 0, 0};
  std::memcpy(words, arg, std::min(arg_len, sizeof(words)));
  kernel_minor_ = words[1];
  kernel_flags_ = words[3];
  if ((words[3] & FUSE_INIT_EXT) && arg_len >= sizeof(words)) {
    kernel_flags_ |= static_cast<uint64_t>(words[4]) << 32;
  }
  init_unique_.store(in->unique, std::memory_order_release);
}

ssize_t FuseTransport::Impl::Writev(int fd, struct iovec* iov, int count) {
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  uint64_t unique = out->unique;
  if (unique != 0) {
    if (unique == init_unique_.load(std::memory_order_acquire) && !init_answered_.exchange(true)) {
      return AnswerInit(fd, iov, count);
    }
    Entry* e = tl_current;
    if (!e || e->unique.load(std::memory_order_relaxed) != unique) e = FindEntry(unique);
    if (e) return ReplyToEntry(e, iov, count);
  }
  // Notifications, and replies to requests read from /dev/fuse.
  return ::writev(fd, iov, count);
}

ssize_t FuseTransport::Impl::AnswerInit(int fd, struct iovec* iov, int count) {
  std::string reason;
  fuse_init_out patched;
  std::memset(&patched, 0, sizeof(patched));
  std::vector<struct iovec> v(iov, iov + count);
  const size_t need = offsetof(fuse_init_out, flags2) + sizeof(patched.flags2);
  if (options_.mode == TransportMode::kClassic) {
    reason = "requested with -o transport=classic";
  } else if (!early_reason_.empty()) {
    reason = early_reason_;
  } else if (!(kernel_flags_ & abi::kOverIoUring)) {
    reason = KernelSaysNo();
    if (reason.empty()) {
      reason = "the kernel did not offer FUSE_OVER_IO_URING in INIT (protocol 7." +
               std::to_string(kernel_minor_) + ")";
    }
  } else if (count < 2 || v[1].iov_len < need) {
    reason = "libfuse's INIT reply is an error or has no flags2 field";
  } else {
    std::memcpy(&patched, v[1].iov_base, std::min(v[1].iov_len, sizeof(patched)));
    // What the kernel will make of the reply: its largest request, which every payload
    // buffer must hold (dev_uring.c: max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages)).
    size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t max_pages = (patched.flags & FUSE_MAX_PAGES) ? std::max<size_t>(patched.max_pages, 1)
                                                        : 32;  // FUSE_DEFAULT_MAX_PAGES_PER_REQ
    size_t payload = std::max<size_t>({8192, patched.max_write, max_pages * page});
    payload = (payload + page - 1) / page * page;
    reason = PrepareEntries(payload);
    if (reason.empty()) {
      patched.flags |= FUSE_INIT_EXT;
      patched.flags2 |= static_cast<uint32_t>(abi::kOverIoUring >> 32);
      v[1].iov_base = &patched;
      v[1].iov_len = std::min(v[1].iov_len, sizeof(patched));
    }
  }
  ssize_t n = ::writev(fd, v.data(), count);
  int err = errno;
  if (n < 0 && reason.empty()) reason = std::string("INIT reply failed: ") + std::strerror(err);
  Decide(reason);
  errno = err;  // libfuse looks at it when n < 0
  return n;
}

// Waits for the queue threads' rings and gives each entry its buffers. Returns why not, or "".
std::string FuseTransport::Impl::PrepareEntries(size_t payload_size) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, kSetupTimeout,
                      [&] { return queues_set_up_ == static_cast<int>(queues_.size()); })) {
      return "the io_uring queue threads did not start in time";
    }
    if (!setup_error_.empty()) return setup_error_;
  }
  payload_size_ = payload_size;
  for (auto& q : queues_) {
    // The headers first, then the payloads, each on its own pages.
    size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t headers = (static_cast<size_t>(q->depth) * kHeaderStride + page - 1) / page * page;
    q->memory_bytes = headers + static_cast<size_t>(q->depth) * payload_size;
    // Reserved, not committed: a payload's pages are touched only as far as requests fill it.
    void* m = ::mmap(nullptr, q->memory_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      q->memory = nullptr;
      return std::string("cannot map the ring buffers: ") + std::strerror(errno);
    }
    q->memory = m;
    char* base = static_cast<char*>(m);
    q->entries.reset(new Entry[q->depth]);
    for (int i = 0; i < q->depth; ++i) {
      Entry& e = q->entries[i];
      e.queue = q.get();
      e.header = reinterpret_cast<abi::ReqHeader*>(base + static_cast<size_t>(i) * kHeaderStride);
      e.payload = base + headers + static_cast<size_t>(i) * payload_size;
      e.iov[0] = {e.header, sizeof(abi::ReqHeader)};
      e.iov[1] = {e.payload, payload_size};
    }
  }
  entries_ready_.store(true, std::memory_order_release);
  return "";
}

// The decision is logged before info() can report it (the log line is written under mu_): who
// sees "decided" also finds the line.
void FuseTransport::Impl::Decide(const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = reason.empty() ? Phase::kGo : Phase::kClassic;
    if (!reason.empty()) {
      auto level =
          options_.mode == TransportMode::kUring ? spdlog::level::warn : spdlog::level::info;
      Log()->log(level, "FUSE transport: classic /dev/fuse loop: {}", reason);
      decided_ = true;
      reason_ = reason;
    }
  }
  cv_.notify_all();
}

void FuseTransport::Impl::QueueRegistered(Queue* q, int error) {
  std::lock_guard<std::mutex> l(mu_);
  if (error != 0) {
    // The kernel turns the ring off for the connection (fc->io_uring = 0) and serves
    // everything through /dev/fuse again.
    if (!decided_ || uring_) {
      reason_ = "the kernel refused ring registration of queue " + std::to_string(q->qid) + ": " +
                std::strerror(error);
      Log()->warn("FUSE transport: classic /dev/fuse loop: {}", reason_);
      decided_ = true;
      uring_ = false;
    }
  } else if (++queues_registered_ == static_cast<int>(queues_.size()) && !decided_) {
    Log()->info("FUSE transport: io_uring, {} queues x {} entries ({} KiB payload each)",
                queues_.size(), options_.queue_depth, payload_size_ / 1024);
    decided_ = true;
    uring_ = true;
  }
}

// ---- replies -------------------------------------------------------------------------------

Entry* FuseTransport::Impl::FindEntry(uint64_t unique) {
  if (!entries_ready_.load(std::memory_order_acquire)) return nullptr;
  for (auto& q : queues_) {
    for (int i = 0; i < q->depth; ++i) {
      if (q->entries[i].unique.load(std::memory_order_acquire) == unique) return &q->entries[i];
    }
  }
  return nullptr;
}

ssize_t FuseTransport::Impl::ReplyToEntry(Entry* e, const struct iovec* iov, int count) {
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof(out));
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (n + iov[i].iov_len > payload_size_) {
      LogRepeated(spdlog::level::err, "io_uring reply of {} bytes exceeds the {} byte buffer",
                  n + iov[i].iov_len, payload_size_);
      out.error = -EIO;
      n = 0;
      break;
    }
    std::memcpy(e->payload + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  if (out.error != 0) n = 0;
  out.len = static_cast<uint32_t>(sizeof(out) + n);
  std::memcpy(e->header->in_out, &out, sizeof(out));
  e->header->ring_ent_in_out.payload_sz = static_cast<uint32_t>(n);
  int prev = e->state.exchange(kReplied, std::memory_order_acq_rel);
  if (prev == kParked) {
    // The queue thread is past the callback (maybe asleep in the kernel): wake it to commit.
    Queue* q = e->queue;
    q->async_replies.store(true, std::memory_order_release);
    uint64_t one = 1;
    if (::write(q->eventfd, &one, sizeof(one)) < 0) {
      LogRepeated(spdlog::level::err, "io_uring queue wakeup failed: {}", std::strerror(errno));
    }
  }
  return static_cast<ssize_t>(sizeof(out) + n);
}

// ---- queue threads -------------------------------------------------------------------------

void FuseTransport::Impl::StartQueues() {
  for (auto& q : queues_) q->thread = std::thread([this, q = q.get()] { QueueMain(q); });
}

bool FuseTransport::Impl::SetUpRing(Queue* q, std::string* error) {
  struct io_uring_params p;
  std::memset(&p, 0, sizeof(p));
  // URING_CMD to /dev/fuse needs 128-byte SQEs (the command is in the extra 64 bytes); the
  // completions carry nothing beyond res, so 16-byte CQEs do. CQ twice the SQ: every command
  // (depth + the eventfd poll) has at most one completion outstanding.
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE | options_.extra_ring_flags;
  p.cq_entries = static_cast<unsigned>(2 * (q->depth + 1));
  int rc = io_uring_queue_init_params(static_cast<unsigned>(q->depth + 1), &q->ring, &p);
  if (rc < 0) {
    *error = IoUringError(-rc);
    return false;
  }
  q->has_ring = true;
  q->eventfd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q->eventfd < 0) {
    *error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }
  return true;
}

void FuseTransport::Impl::QueueMain(Queue* q) {
  BlockServerSignals();
  std::string name = "dsfs-ring-" + std::to_string(q->qid);
  pthread_setname_np(pthread_self(), name.c_str());
  if (options_.pin_threads) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(q->qid, &set);
    // A possible CPU that is offline gets no requests (the kernel picks the requester's CPU),
    // but its queue must still be registered for the ring to be ready.
    if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
      Log()->debug("io_uring queue {}: cannot pin to its CPU: {}", q->qid, std::strerror(errno));
    }
  }
  std::string error;
  bool ok = SetUpRing(q, &error);
  Phase phase;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!ok && setup_error_.empty()) setup_error_ = error;
    ++queues_set_up_;
    cv_.notify_all();
    cv_.wait(l, [&] { return phase_ != Phase::kSetup || stop_.load(); });
    phase = phase_;
  }
  if (phase == Phase::kGo && !stop_.load()) RunQueue(q);
}

struct io_uring_sqe* FuseTransport::Impl::GetSqe(Queue* q) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(&q->ring);
  if (!sqe) {
    // Cannot happen (the SQ has a slot for every command), but never lose a commit.
    io_uring_submit(&q->ring);
    sqe = io_uring_get_sqe(&q->ring);
  }
  return sqe;
}

void FuseTransport::Impl::PrepCmd(Queue* q, Entry* e, uint32_t cmd) {
  struct io_uring_sqe* sqe = GetSqe(q);
  if (!sqe) {
    LogRepeated(spdlog::level::err, "io_uring queue {}: no SQE for a command", q->qid);
    return;
  }
  std::memset(sqe, 0, 128);  // an SQE128: the command area is the second half
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd_;
  sqe->cmd_op = cmd;
  if (cmd == abi::kCmdRegister) {
    sqe->addr = reinterpret_cast<uint64_t>(e->iov);
    sqe->len = 2;  // header and payload
  }
  abi::CmdReq req;
  std::memset(&req, 0, sizeof(req));
  req.qid = static_cast<uint16_t>(q->qid);
  req.commit_id = cmd == abi::kCmdCommitAndFetch ? e->commit_id : 0;
  std::memcpy(sqe->cmd, &req, sizeof(req));
  io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(e));
  e->last_cmd = cmd;
}

void FuseTransport::Impl::ArmPoll(Queue* q) {
  struct io_uring_sqe* sqe = GetSqe(q);
  if (!sqe) return;
  std::memset(sqe, 0, 128);
  io_uring_prep_poll_add(sqe, q->eventfd, POLLIN);
  io_uring_sqe_set_data64(sqe, kPollTag);
}

void FuseTransport::Impl::RunQueue(Queue* q) {
  for (int i = 0; i < q->depth; ++i) {
    PrepCmd(q, &q->entries[i], abi::kCmdRegister);
    q->entries[i].live = true;
  }
  ArmPoll(q);
  int live = q->depth;
  bool poll_armed = true;
  int rc = io_uring_submit(&q->ring);
  if (rc < 0) {
    Log()->error("io_uring queue {}: cannot submit the registration: {}", q->qid,
                 std::strerror(-rc));
    QueueRegistered(q, -rc);
    return;
  }
  // A refused REGISTER completes during the submission (fuse_uring_cmd fails inline); an
  // accepted one completes only when a request arrives.
  int register_error = 0;
  {
    unsigned head, n = 0;
    struct io_uring_cqe* cqe;
    std::vector<std::pair<uint64_t, int>> done;
    io_uring_for_each_cqe(&q->ring, head, cqe) {
      done.emplace_back(cqe->user_data, cqe->res);
      ++n;
    }
    io_uring_cq_advance(&q->ring, n);
    for (auto& [data, res] : done) {
      if (data != kPollTag && res < 0 && res != -EINTR && res != -EAGAIN &&
          reinterpret_cast<Entry*>(data)->last_cmd == abi::kCmdRegister && !register_error) {
        register_error = -res;
      }
    }
    QueueRegistered(q, register_error);
    for (auto& [data, res] : done) HandleCqe(q, data, res, &live, &poll_armed);
  }
  while (!stop_.load(std::memory_order_relaxed) && live > 0) {
    if (options_.busy_poll_us > 0) {
      io_uring_submit(&q->ring);
      auto until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(options_.busy_poll_us);
      struct io_uring_cqe* cqe = nullptr;
      // With DEFER_TASKRUN the kernel delivers requests only when asked to (io_uring_enter
      // with GETEVENTS), so the spin has to ask.
      const bool deferred = options_.extra_ring_flags & IORING_SETUP_DEFER_TASKRUN;
      while (io_uring_peek_cqe(&q->ring, &cqe) != 0 && std::chrono::steady_clock::now() < until) {
        if (deferred) io_uring_get_events(&q->ring);
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      rc = cqe ? 0 : io_uring_submit_and_wait(&q->ring, 1);
    } else {
      rc = io_uring_submit_and_wait(&q->ring, 1);
    }
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      Log()->error("io_uring queue {}: io_uring_enter: {}", q->qid, std::strerror(-rc));
      break;
    }
    unsigned head, n = 0;
    struct io_uring_cqe* cqe;
    io_uring_for_each_cqe(&q->ring, head, cqe) {
      // Copied out first: the callback below may take a while, and the slot is ours until
      // the head moves, but the values are all that is needed.
      uint64_t data = cqe->user_data;
      int res = cqe->res;
      ++n;
      HandleCqe(q, data, res, &live, &poll_armed);
    }
    io_uring_cq_advance(&q->ring, n);
    if (q->async_replies.exchange(false, std::memory_order_acq_rel)) CommitAsyncReplies(q);
    if (!poll_armed && !stop_.load()) {
      ArmPoll(q);
      poll_armed = true;
    }
  }
  // Commits prepared but not submitted would only fail now (the connection is gone or we are
  // stopping); io_uring_queue_exit cancels the commands the kernel still holds.
}

void FuseTransport::Impl::HandleCqe(Queue* q, uint64_t data, int res, int* live, bool* poll_armed) {
  if (data == kPollTag) {
    *poll_armed = false;
    uint64_t v;
    while (::read(q->eventfd, &v, sizeof(v)) > 0) {
    }
    return;
  }
  Entry* e = reinterpret_cast<Entry*>(data);
  if (res == -EINTR || res == -EAGAIN) {
    PrepCmd(q, e, e->last_cmd);  // try the same command again
    return;
  }
  if (res < 0) {
    // -ENOTCONN: unmounted or aborted; the entry is gone from the kernel.
    if (e->live) --*live;
    e->live = false;
    // A refused REGISTER was reported by QueueRegistered.
    if (res != -ENOTCONN && res != -ECANCELED && e->last_cmd != abi::kCmdRegister &&
        !stop_.load()) {
      LogRepeated(spdlog::level::warn, "io_uring queue {}: command {} failed: {}", q->qid,
                  e->last_cmd, std::strerror(-res));
    }
    return;
  }
  ServeRequest(q, e);
}

void FuseTransport::Impl::ServeRequest(Queue* q, Entry* e) {
  // The kernel splits what /dev/fuse delivers in one piece: the fuse_in_header in in_out, the
  // first argument (the per-opcode struct, possibly empty) in op_in, the rest in the payload.
  // in.len is still the /dev/fuse length, so the first argument's size is what is left.
  // libfuse wants the /dev/fuse layout: put the pieces back together.
  thread_local std::vector<char> linear;
  fuse_in_header in;
  std::memcpy(&in, e->header->in_out, sizeof(in));
  const abi::EntInOut& eio = e->header->ring_ent_in_out;
  e->commit_id = eio.commit_id;
  size_t payload = eio.payload_sz;
  if (in.len < sizeof(in) + payload || in.len - sizeof(in) - payload > abi::kOpInOutSize ||
      payload > payload_size_) {
    LogRepeated(spdlog::level::err,
                "io_uring request {} (opcode {}) has an impossible layout: len {}, payload {}",
                in.unique, in.opcode, in.len, payload);
    ErrorReply(q, e, in.unique, EIO);
    return;
  }
  size_t op_size = in.len - sizeof(in) - payload;
  if (linear.size() < in.len) linear.resize(sizeof(in) + abi::kOpInOutSize + payload_size_);
  std::memcpy(linear.data(), &in, sizeof(in));
  std::memcpy(linear.data() + sizeof(in), e->header->op_in, op_size);
  if (payload) std::memcpy(linear.data() + sizeof(in) + op_size, e->payload, payload);
  struct fuse_buf buf;
  std::memset(&buf, 0, sizeof(buf));
  buf.mem = linear.data();
  buf.size = in.len;
  e->state.store(kInCallback, std::memory_order_relaxed);
  e->unique.store(in.unique, std::memory_order_release);
  tl_current = e;
  fuse_session_process_buf(se_, &buf);
  tl_current = nullptr;
  q->served.fetch_add(1, std::memory_order_relaxed);
  int expected = kInCallback;
  if (!e->state.compare_exchange_strong(expected, kParked, std::memory_order_acq_rel)) {
    Commit(q, e);  // replied during the callback
  }
}

void FuseTransport::Impl::Commit(Queue* q, Entry* e) {
  e->unique.store(0, std::memory_order_relaxed);
  e->state.store(kInKernel, std::memory_order_relaxed);
  PrepCmd(q, e, abi::kCmdCommitAndFetch);
}

void FuseTransport::Impl::ErrorReply(Queue* q, Entry* e, uint64_t unique, int error) {
  fuse_out_header out;
  out.len = sizeof(out);
  out.error = -error;
  out.unique = unique;
  std::memcpy(e->header->in_out, &out, sizeof(out));
  e->header->ring_ent_in_out.payload_sz = 0;
  Commit(q, e);
}

void FuseTransport::Impl::CommitAsyncReplies(Queue* q) {
  for (int i = 0; i < q->depth; ++i) {
    Entry& e = q->entries[i];
    if (e.live && e.state.load(std::memory_order_acquire) == kReplied &&
        e.unique.load(std::memory_order_relaxed) != 0) {
      Commit(q, &e);
    }
  }
}

// ---- serving -------------------------------------------------------------------------------

Status FuseTransport::Impl::Serve() {
  StartQueues();
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(options_.classic_threads));
  fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(options_.classic_threads));
  int rc = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  StopQueues();
  if (rc != 0) Log()->debug("FUSE session loop returned {}", rc);
  return Status::OK();
}

void FuseTransport::Impl::StopQueues() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& q : queues_) {
    if (q->eventfd >= 0) {
      uint64_t one = 1;
      (void)!::write(q->eventfd, &one, sizeof(one));
    }
  }
  for (auto& q : queues_) {
    if (q->thread.joinable()) q->thread.join();
  }
  entries_ready_.store(false, std::memory_order_release);
  for (auto& q : queues_) {
    if (q->has_ring) io_uring_queue_exit(&q->ring);
    q->has_ring = false;
    if (q->eventfd >= 0) ::close(q->eventfd);
    q->eventfd = -1;
    // The entry memory stays until the transport goes: a late reply from another thread may
    // still be looking at an entry it found just before entries_ready_ went false.
  }
}

TransportInfo FuseTransport::Impl::Info() const {
  TransportInfo i;
  {
    std::lock_guard<std::mutex> l(mu_);
    i.decided = decided_;
    i.uring = uring_;
    i.reason = reason_;
  }
  i.queues = static_cast<int>(queues_.size());
  i.queue_depth = options_.queue_depth;
  for (auto& q : queues_) {
    uint64_t n = q->served.load(std::memory_order_relaxed);
    i.per_queue_requests.push_back(n);
    i.ring_requests += n;
  }
  i.classic_requests = classic_requests_.load(std::memory_order_relaxed);
  return i;
}

// ---- public --------------------------------------------------------------------------------

FuseTransport::FuseTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FuseTransport::~FuseTransport() = default;

Status FuseTransport::Create(fuse_session* se, const TransportOptions& options,
                             std::unique_ptr<FuseTransport>* transport) {
  auto impl = std::make_unique<Impl>(se, options);
  Status s = impl->Install();
  if (!s.ok()) return s;
  transport->reset(new FuseTransport(std::move(impl)));
  return Status::OK();
}

Status FuseTransport::Serve() { return impl_->Serve(); }

TransportInfo FuseTransport::info() const { return impl_->Info(); }

}  // namespace dsfs
