// ErofsServer: a small low-level FUSE server that presents one EROFS image (erofs/image.h),
// which exists only virtually, as a read-only file, for `dsfs mount -o kernel` to mount EROFS on
// (kernel/kernel_mount.h: the kernel path; this is its FUSE layer). Its tree is fixed:
//
//   /        directory, 0500 root
//   /image   the image, Image::size_bytes() bytes, 0400 root; reads answered from Image::Read
//   /stats   the mount's counters as JSON (what `dsfs stats` shows), padded with spaces to
//            kStatsBytes and re-read on every read (direct I/O, attributes never cached)
//
// Reads of the image come from EROFS through the image's page cache (or from a loop device with
// direct I/O): up to 1 MiB (the session's max_pages), answered in one go; each read served is
// told to options.on_read (the kernel path's readahead, kernel/erofs_readahead.h). A read that
// fails (a damaged record under it) is answered EIO whole when the image is read through its page
// cache: a short reply would tell the kernel the image ends there, and the kernel reads each page a
// reader waits for again alone, so only the damaged file's pages fail. For a loop device it
// answers the bytes before the first failing 4 KiB block, or EIO if that block is the first.
// With options.fetch_threads > 0 (a store in object storage) every read of the image is served
// by one of that many fetch threads (common/worker_group.h), never by a session thread: while
// the endpoint stalls, the stats file and the other requests keep answering at once. A read
// still queued when the server stops is answered EIO; every request is answered once.
//
// Thread safety: Start/Stop from one thread; the counters may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/histogram.h"
#include "common/status.h"
#include "common/worker_group.h"
#include "erofs/image.h"
#include "fuse/uring_transport.h"

struct fuse_session;

namespace dsfs {

struct ErofsServerOptions {
  // The tree's session options (a first read of a file waits on one image read, as a classic
  // mount's request), with fsname "dsfs-image:" + the store path.
  SessionOptions session;
  // Told of each image read served (its offset), on the thread that served it; never called
  // once Stop has returned.
  std::function<void(uint64_t offset)> on_read;
  // Threads that serve the image's reads, off the session threads (a remote store: reads may
  // wait on the object store up to its deadline); 0: the session threads read (a local store,
  // no pool, no hand-over).
  int fetch_threads = 0;
};

class ErofsServer {
 public:
  static constexpr uint64_t kStatsBytes = 16384;
  static constexpr const char* kImageName = "image";
  static constexpr const char* kStatsName = "stats";

  struct Counters {
    std::atomic<uint64_t> reads{0}, bytes_read{0}, errors{0}, stats_reads{0};
    LatencyHistogram read_latency;  // image reads, from the request to the reply
  };

  // `stats_json` gives the stats file's JSON (unpadded), called from a session thread on each
  // read of it. `on_image_closed` is called (from a session thread) each time the image's last
  // open file is released: once the loop device lets go of it. REQUIRES: `image` outlives the
  // server.
  ErofsServer(const erofs::Image* image, ErofsServerOptions options,
              std::function<std::string()> stats_json, std::function<void()> on_image_closed);
  ~ErofsServer();  // Stop(), then closes the session
  ErofsServer(const ErofsServer&) = delete;
  ErofsServer& operator=(const ErofsServer&) = delete;

  // Mounts at `dir` (an existing empty directory) and serves from background threads.
  [[nodiscard]] Status Start(const std::string& dir);
  // Unmounts (lazily if busy) unless already unmounted, and waits for the session threads: no
  // request is served after it (the session itself goes with the server). Safe to call twice.
  void Stop();
  // True once the session loop has ended (unmounted from outside, or Stop).
  bool ended() const { return ended_.load(); }
  // Calls `fn` (from the session thread) when the session loop ends.
  void OnEnded(std::function<void()> fn) { on_ended_ = std::move(fn); }

  const Counters& counters() const { return counters_; }
  // Stores image bytes [offset, offset + data.size()) in the kernel's page cache of the image
  // file (fuse_lowlevel_notify_store): 0 or -errno. REQUIRES: Start succeeded; until the
  // server is destroyed (after Stop it fails harmlessly).
  int StoreImage(uint64_t offset, std::string_view data);
  // The image is read through its page cache (EROFS on the file itself), not by a loop device
  // with direct I/O: a failing read is answered EIO whole, never short (see Read).
  void SetPageCacheReader(bool on) { page_cache_reader_.store(on); }
  uint64_t open_images() const { return open_images_.load(); }
  // What serves the session ("io_uring, 2 queues x 8 entries ..." or "classic (why)").
  std::string transport() const;

 private:
  friend struct ErofsServerOps;
  const erofs::Image* image_;
  ErofsServerOptions options_;
  std::function<std::string()> stats_json_;
  std::function<void()> on_image_closed_, on_ended_;
  std::string dir_;
  struct fuse_session* se_ = nullptr;
  // Null where the classic loop serves; the session outlives it (its custom I/O).
  std::unique_ptr<FuseTransport> transport_;
  std::string no_transport_;  // why not, for transport()
  // Null without options.fetch_threads; made by the loop thread before the session threads,
  // destroyed in Stop once the session loop has ended (no more Submit) and before the session
  // goes (its jobs reply through it).
  std::unique_ptr<WorkerGroup> fetchers_;
  std::atomic<bool> page_cache_reader_{false};
  std::thread loop_;
  std::atomic<bool> ended_{false};
  bool stopped_ = false;
  std::atomic<uint64_t> open_images_{0};
  Counters counters_;
};

}  // namespace dsfs
