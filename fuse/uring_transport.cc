#include "fuse/uring_transport.h"

#include <fuse_lowlevel.h>
#include <liburing.h>
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
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/system.h"
#include "fuse/fuse_session.h"
#include "fuse/fuse_uring_abi.h"
#include "fuse/uring_transport_impl.h"

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
using uring_internal::Entry;
using uring_internal::Queue;
using uring_internal::tl_current;

constexpr char kEnableUringPath[] = "/sys/module/fuse/parameters/enable_uring";
// Ring entry header slots are this far apart in the entry memory (a ReqHeader is 288 bytes).
constexpr size_t kHeaderStride = 512;
// How long INIT waits for the queue threads to have their rings: they only create a ring and
// an eventfd, but a server that never answers INIT would hang every process that touches the
// mount.
constexpr auto kSetupTimeout = std::chrono::seconds(5);

// Why the kernel would not offer the ring, in words; "" if it looks as if it would.
std::string KernelSaysNo() {
  std::string v;
  if (!ReadFirstLine(kEnableUringPath, &v)) {
    return std::string("the kernel has no FUSE over io_uring (no ") + kEnableUringPath +
           "; it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)";
  }
  if (v.empty() || v[0] != 'Y') {
    return std::string("the fuse module parameter enable_uring is ") + (v.empty() ? "?" : v) +
           " (as root: echo Y > " + kEnableUringPath + ", then mount again)";
  }
  return "";
}

}  // namespace

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
  for (;;) {
    ssize_t n = ::read(fd, buf, len);
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return n;
    classic_requests_.fetch_add(1, std::memory_order_relaxed);
    const auto* in = static_cast<const fuse_in_header*>(buf);
    if (in->opcode == FUSE_INIT) NoteInit(buf, static_cast<size_t>(n));
    if (in->opcode != FUSE_IOCTL || !options_.answer_ioctls) return n;
    // What libfuse would answer (the filesystem has no ioctl), without making it a request.
    fuse_out_header out;
    out.len = sizeof(out);
    out.error = -ENOSYS;
    out.unique = in->unique;
    ioctls_.fetch_add(1, std::memory_order_relaxed);
    // A failed write (the requester was interrupted, or the mount is gone) is for the next
    // read to report, as libfuse's own replies are.
    (void)!::write(fd, &out, sizeof(out));
  }
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
  if (count >= 2 && v[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(patched.flags)) {
    // The reply as libfuse made it, written from `patched` from here on.
    std::memcpy(&patched, v[1].iov_base, std::min(v[1].iov_len, sizeof(patched)));
    v[1].iov_base = &patched;
    v[1].iov_len = std::min(v[1].iov_len, sizeof(patched));
    if (options_.parallel_dirops && (kernel_flags_ & FUSE_PARALLEL_DIROPS)) {
      patched.flags |= FUSE_PARALLEL_DIROPS;
    }
  }
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
  i.ioctls = ioctls_.load(std::memory_order_relaxed);
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

std::unique_ptr<FuseTransport> CreateTransportOrClassic(fuse_session* se,
                                                        const TransportOptions& options,
                                                        std::string_view who,
                                                        std::string* classic) {
  std::unique_ptr<FuseTransport> transport;
  Status s = FuseTransport::Create(se, options, &transport);
  if (s.ok()) return transport;
  // Nothing was changed: libfuse's own loop serves the session as before the transport.
  Log()->warn("{}FUSE transport: classic /dev/fuse loop: {}", who, s.message());
  *classic = "classic (" + s.message() + ")";
  return nullptr;
}

int ServeFuseSession(fuse_session* se, FuseTransport* transport, int threads,
                     std::string_view who) {
  if (!transport) return RunFuseLoop(se, threads);
  Status s = transport->Serve();
  if (!s.ok()) Log()->warn("{}FUSE transport: {}", who, s.message());
  return 0;
}

}  // namespace dsfs
