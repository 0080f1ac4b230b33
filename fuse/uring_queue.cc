// The ring queues of FuseTransport (see fuse/uring_transport.h and fuse/uring_transport_impl.h):
// one thread per possible CPU, each with its own io_uring, registering its entries with the
// kernel, serving what they deliver through libfuse and committing the replies.
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/system.h"
#include "fuse/uring_transport_impl.h"

namespace dsfs {

namespace abi = fuse_uring;
using uring_internal::Entry;
using uring_internal::kInCallback;
using uring_internal::kInKernel;
using uring_internal::kParked;
using uring_internal::kPollTag;
using uring_internal::kReplied;
using uring_internal::Queue;
using uring_internal::tl_current;

namespace {

constexpr char kIoUringDisabledPath[] = "/proc/sys/kernel/io_uring_disabled";

std::string IoUringError(int err) {
  std::string disabled;
  const bool exists = ReadFirstLine(kIoUringDisabledPath, &disabled);
  std::string s = std::string("io_uring is unavailable: io_uring_setup: ") + std::strerror(err);
  if (exists && !disabled.empty() && disabled != "0") {
    s += " (kernel.io_uring_disabled = " + disabled + ")";
  }
  return s;
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
  if (options_.defer_taskrun) p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
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
      const bool deferred = options_.defer_taskrun;
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
  if (in.opcode == FUSE_IOCTL && options_.answer_ioctls) {
    // What libfuse would answer (the filesystem has no ioctl), without making it a request.
    ioctls_.fetch_add(1, std::memory_order_relaxed);
    q->served.fetch_add(1, std::memory_order_relaxed);
    ErrorReply(q, e, in.unique, ENOSYS);
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

}  // namespace dsfs
