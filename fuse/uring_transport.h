// How a mounted libfuse session is served: FUSE over io_uring (Linux 6.14+) where the kernel,
// its `enable_uring` module parameter and io_uring allow it, else the classic /dev/fuse loop.
//
// Over io_uring the kernel keeps one queue per possible CPU and hands a request to the queue of
// the CPU the requester runs on; each queue is served by one thread pinned to that CPU, so a
// round trip (Python's isatty() on every open: docs/kernel.md) is a switch on one CPU
// instead of a cross-CPU wakeup through the shared /dev/fuse queue.
//
// Debian 12's libfuse (3.14) knows nothing of io_uring. The transport keeps it for mounting,
// the INIT handshake and request decoding: it installs itself as the session's custom I/O
// (fuse_session_custom_io), so it sees the kernel's INIT (does it offer FUSE_OVER_IO_URING?)
// and can add the flag to libfuse's INIT reply; ring requests are laid out as /dev/fuse would
// deliver them and handed to fuse_session_process_buf, and the replies libfuse writes are
// recognised by their `unique` and committed to the ring entry they answer. Notifications
// (unique 0: fuse_lowlevel_notify_store and friends), FORGET and INTERRUPT keep going through
// /dev/fuse, which a classic loop thread keeps reading in both modes. For a filesystem without
// ioctls (dsfs), the transport answers them itself (TransportOptions::answer_ioctls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct fuse_session;

namespace dsfs {

// `-o transport=`: auto (io_uring when available, else classic), uring (the same, but a
// fallback is logged as a warning), classic (never io_uring).
enum class TransportMode { kAuto, kUring, kClassic };

// What every FUSE session of dsfs is made with: the tree's (FuseOptions::session) and the EROFS
// image's (ErofsServerOptions::session), set once by the mount.
struct SessionOptions {
  int threads = 2;  // session loop threads (on 2 cores 1-2 beat libfuse's 10)
  // How requests reach the daemon (`-o transport=`): FUSE over io_uring where the kernel, its
  // enable_uring parameter and io_uring allow it, else the classic /dev/fuse loop with
  // `threads` threads. The choice is logged in one line and shown in the stats file. Over
  // io_uring a read that EROFS misses costs about half a classic round trip too: inside a
  // memory limit smaller than the tree that is every other read of the image (issue 29).
  TransportMode transport = TransportMode::kAuto;
  // Nice value of the session loop threads. Every request is a round trip a reader waits on
  // (Python's open() alone costs one: an ioctl FUSE cannot answer in the kernel), so under
  // CPU-bound readers (DataLoader workers) the threads must be scheduled first: -10 cut the
  // cost of a hot open from ~50 to ~12 us with two busy workers on two cores. Needs root or
  // CAP_SYS_NICE; without them the threads keep the caller's.
  int nice = -10;
  bool debug = false;  // libfuse request tracing to stderr
  std::string fsname;  // shown in /proc/mounts (the store path; "dsfs-image:" + it)
};

// Parses "auto", "uring" or "classic"; InvalidArgument otherwise (`mode` unchanged).
[[nodiscard]] Status ParseTransportMode(std::string_view text, TransportMode* mode);
const char* TransportModeName(TransportMode mode);

struct TransportOptions {
  TransportMode mode = TransportMode::kAuto;
  // Threads of the classic /dev/fuse loop (libfuse's fuse_session_loop_mt). Over io_uring
  // they only see INIT, FORGET, INTERRUPT and requests queued before the ring was ready.
  int classic_threads = 2;
  // Ring entries per CPU queue: requests one queue can hold in userspace at once. Each entry
  // has a payload buffer of the negotiated maximum request size (1 MiB with libfuse 3.14's
  // defaults), reserved address space that is touched only as far as requests fill it.
  int queue_depth = 8;
  // Pin each queue's thread to its CPU. The kernel picks the queue by the requester's CPU,
  // so a pinned thread is woken on the CPU that waits for it.
  bool pin_threads = true;
  // Before sleeping in the kernel, look for the next request this long (0 = never). Only
  // useful where the serving thread has a CPU of its own (see bench/tools/roundtrip_bench.cc).
  int busy_poll_us = 0;
  // Set up each ring with IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN: only the
  // queue thread submits, and the kernel runs the ring's completions (a request arriving)
  // when that thread waits for them instead of interrupting it. A round trip costs about a
  // quarter less (bench/results/roundtrip/roundtrip-20261201-2100.md).
  bool defer_taskrun = true;
  // Added to each ring's io_uring_setup flags (IORING_SETUP_COOP_TASKRUN, ..._SINGLE_ISSUER,
  // for measurements). A flag the kernel rejects makes the setup fail, and the transport falls
  // back to the classic loop as it would if io_uring were disabled (the tests do this).
  unsigned extra_ring_flags = 0;
  // The session's filesystem has no ioctl callback: answer every FUSE_IOCTL with ENOSYS (what
  // libfuse would answer; the caller sees ENOTTY) in the transport, on either path, without
  // a libfuse request. Python's open() sends one per file (isatty); this took a tenth off
  // its round trip over io_uring (bench/results/roundtrip/roundtrip-20261202-0403.md).
  bool answer_ioctls = false;
  // The session's filesystem serves lookups and readdirs of one directory concurrently (dsfs
  // is read-only): the transport adds FUSE_PARALLEL_DIROPS to libfuse's INIT reply where the
  // kernel offers it. libfuse 3.14 never sends it, whatever init() asks, and the kernel then
  // takes the directory's lock around every lookup: one lookup stalled on a remote store held
  // every other lookup in its directory, the stats file's in the root included.
  bool parallel_dirops = false;
};

// Which transport serves, for `dsfs stats` and /.dsfs/stats.
struct TransportInfo {
  bool decided = false;                      // false until the kernel's INIT has been answered
  bool uring = false;                        // requests are answered over io_uring
  std::string reason;                        // why the classic loop serves ("" over io_uring)
  int queues = 0;                            // ring queues (one per possible CPU)
  int queue_depth = 0;                       // entries per queue
  uint64_t ring_requests = 0;                // requests answered over the ring
  uint64_t classic_requests = 0;             // requests read from /dev/fuse
  std::vector<uint64_t> per_queue_requests;  // ring requests by queue (= CPU)
  // Of the requests above, the ioctls, answered ENOTTY by the transport (no libfuse request).
  uint64_t ioctls = 0;
  // One line: "uring (2 queues x 8 entries)", "classic (enable_uring=N ...)", "pending".
  std::string Describe() const;
};

// Serves one mounted session.
//
// Thread safety: Create and Serve from one thread; info() from any thread at any time.
class FuseTransport {
 public:
  // REQUIRES: `se` was created (fuse_session_new) and mounted (fuse_session_mount) and no loop
  // has read from it yet (the transport must see INIT). The session must outlive the
  // transport. Installs the transport as the session's custom I/O; fails (and changes nothing)
  // if libfuse refuses that.
  [[nodiscard]] static Status Create(fuse_session* se, const TransportOptions& options,
                                     std::unique_ptr<FuseTransport>* transport);
  ~FuseTransport();
  FuseTransport(const FuseTransport&) = delete;
  FuseTransport& operator=(const FuseTransport&) = delete;

  // Serves requests until the filesystem is unmounted (or its connection aborted) or
  // fuse_session_exit() is called (libfuse's signal handlers do). Returns once every thread
  // it started has been joined; requests still in a callback finish first. Call once.
  [[nodiscard]] Status Serve();

  TransportInfo info() const;

  class Impl;

 private:
  explicit FuseTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a mount's session is served by: FuseTransport::Create, or null where libfuse refuses
// the custom I/O, which is then one warning line ("<who>FUSE transport: classic /dev/fuse loop:
// why") and *classic = "classic (why)" for the stats. Serve() or, for null, libfuse's loop:
// ServeFuseSession.
std::unique_ptr<FuseTransport> CreateTransportOrClassic(fuse_session* se,
                                                        const TransportOptions& options,
                                                        std::string_view who, std::string* classic);
// Serves `se` until it is unmounted: over `transport`, else libfuse's classic loop of `threads`
// threads. Returns the classic loop's status (0 over the transport, whose failure is logged).
int ServeFuseSession(fuse_session* se, FuseTransport* transport, int threads, std::string_view who);

}  // namespace dsfs
