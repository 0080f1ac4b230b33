// Internals of FuseTransport (fuse/uring_transport.h), shared by fuse/uring_transport.cc (custom
// I/O, INIT, the decision, serving) and fuse/uring_queue.cc (the ring queues and their threads).
// Not for use elsewhere.
#pragma once

#include <fuse_lowlevel.h>
#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fuse/fuse_uring_abi.h"
#include "fuse/uring_transport.h"

namespace dsfs {
namespace uring_internal {

namespace abi = fuse_uring;

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
inline thread_local Entry* tl_current = nullptr;

// user_data of the eventfd poll (entries are pointers to Entry).
constexpr uint64_t kPollTag = 1;

}  // namespace uring_internal

class FuseTransport::Impl {
  using Entry = uring_internal::Entry;
  using Queue = uring_internal::Queue;

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
  std::atomic<uint64_t> ioctls_{0};  // answered ENOSYS here (answer_ioctls), on either path

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

}  // namespace dsfs
