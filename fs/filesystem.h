// Filesystem: the FUSE-free core of the mounted tree. Callbacks in fuse/fuse_ops.cc unpack their
// arguments, call one method here and reply once; everything here is unit-tested without
// /dev/fuse.
//
// Inode numbers are FUSE's, laid out in fs/inode_space.h. The methods live in one file per
// subject: the tree (fs/filesystem.cc), the control directory /.dsfs (fs/control_dir.cc),
// reads of the views' files (fs/view_reads.cc), the stats file and status line (fs/stats.cc).
//
// The tree is immutable: every method is safe to call from any number of threads. The only
// mutable state is behind a mutex (tensor indexes) or in the shared RAM cache.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/byte_cache.h"
#include "common/histogram.h"
#include "common/status.h"
#include "fs/inode_space.h"
#include "fs/prefetcher.h"
#include "fs/views.h"
#include "store/store.h"

namespace dsfs {

struct FsOptions {
  uid_t uid = ::getuid();  // owner shown for every file: the mounting user by default
  gid_t gid = ::getgid();
  mode_t umask = 0;             // permission bits cleared from every stored mode (-o umask=)
  View view = View::kOriginal;  // what the mount shows at its root
  // Largest rendered image (BMP or pixels) the views make; larger images are served as their
  // original bytes and have no tensor view (fs/views.h, ViewRenders). The mount sets what its
  // RAM cache holds per entry, so an image is decoded once, not on every read.
  uint64_t max_render_bytes = UINT64_MAX;
};

// Request counters, by operation. Relaxed atomics: they are statistics.
struct RequestCounters {
  std::atomic<uint64_t> lookup{0}, getattr{0}, readdir{0}, open{0}, read{0}, readlink{0}, statfs{0},
      bytes_read{0}, errors{0};
  // Time in the core per request, by operation (Op order): from the call of the
  // method to its answer being ready, not the FUSE transport's queueing around it.
  enum Op { kLookup, kGetAttr, kReadDir, kOpen, kRead, kReadLink, kStatFs, kOps };
  static constexpr const char* kOpNames[kOps] = {"lookup", "getattr",  "readdir", "open",
                                                 "read",   "readlink", "statfs"};
  LatencyHistogram latency[kOps];
};

class Filesystem : public PushSource {
 public:
  // Size of the stats file: its JSON is padded with spaces to this size, so its attributes
  // never change while its contents do.
  static constexpr uint64_t kStatsBytes = 16384;

  // What serves the requests (the FUSE transport), as the stats file and the status line
  // show it. Filled in by the FUSE layer, which keeps this class free of FUSE.
  struct TransportStats {
    std::string description;     // "uring (2 queues x 8 entries)", "classic (why)", "pending ..."
    uint64_t ring_requests = 0;  // answered over io_uring
    uint64_t classic_requests = 0;             // read from /dev/fuse
    std::vector<uint64_t> per_queue_requests;  // ring requests by queue (= CPU)
    uint64_t ioctls = 0;  // ioctls answered ENOTTY by the transport itself (of the above)
  };
  using TransportStatsFn = std::function<TransportStats()>;

  // `cache` is where the views keep what they render (decoded pixels, BMPs, files.txt), each in
  // a namespace of its own; the mount gives it the cache it gave `store` (null: nothing kept).
  Filesystem(std::unique_ptr<Store> store, const FsOptions& options,
             std::shared_ptr<ByteCache> cache = nullptr);

  const Store& store() const { return *store_; }
  const FsOptions& options() const { return options_; }
  const InodeSpace& inode_space() const { return space_; }
  // Reads are reported to `prefetcher` (readahead) while it is set; null detaches it.
  // REQUIRES: no request is being served while it changes.
  void SetPrefetcher(Prefetcher* prefetcher) { prefetcher_ = prefetcher; }
  // The stats file and the status line report what `stats` returns while it is set (called
  // on each read of the stats file, from any request thread: it must be thread-safe); an
  // empty function detaches it. REQUIRES: no request is being served while it changes.
  void SetTransportStats(TransportStatsFn stats) { transport_stats_ = std::move(stats); }
  // The stats file shows what `source` returns (one line of JSON) while it is set: the mount's
  // assembly of every path's stats (mount/stats.h), which includes StatsObject. Unset (or an
  // empty function), the stats file shows StatsObject alone. Called on each read of the stats
  // file, from any request thread: it must be thread-safe. REQUIRES: no request is being
  // served while it changes.
  using StatsSourceFn = std::function<std::string()>;
  void SetStatsSource(StatsSourceFn source) { stats_source_ = std::move(source); }

  Status Lookup(uint64_t parent, std::string_view name, struct stat* st) const;
  Status GetAttr(uint64_t ino, struct stat* st) const;
  // Lists directory `ino` from position `offset` (0 = ".", 1 = "..", 2 + i = entry i). `fill`
  // gets each name, its attributes and the offset of the entry after it, and returns false to
  // stop (reply buffer full).
  // An entry whose st.st_nlink is 0 (AttrsUnknown) comes with its name, type and number only:
  // its attributes cost a render to know (a jpeg-N file's size is known once it is encoded),
  // which a listing does not pay for; the kernel looks it up when it is opened.
  using DirFiller =
      std::function<bool(std::string_view name, const struct stat& st, uint64_t next_offset)>;
  static bool AttrsUnknown(const struct stat& st) { return st.st_nlink == 0; }
  Status ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fill) const;
  // ReadOnly for any write access, InvalidArgument ("is a directory") for directories.
  Status Open(uint64_t ino, int flags) const;
  // Reads up to `size` bytes at `offset`; see Store::Read for where *out points.
  Status Read(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
              std::string_view* out) const;
  // True if Read(ino, offset, size) would decode an image (what it needs is not in the cache):
  // the FUSE layer then serves it off the request threads, which stay free for every other
  // request. A hint: the cache may change before the read.
  bool ReadDecodes(uint64_t ino, uint64_t offset, uint64_t size) const;
  // The same for GetAttr (and Open) of `ino` and Lookup of `name` in `parent`: true where the
  // attributes need a render (a jpeg-N file's size, known once it is encoded) not in the cache.
  bool AttrRenders(uint64_t ino) const;
  bool LookupRenders(uint64_t parent, std::string_view name) const;
  // True if serving the request may fetch from a remote backend (Store::remote(): object
  // storage) what is not in memory: a chunk not in the RAM cache, a metadata segment not
  // loaded, the source of a render not in the cache. The FUSE layer then serves it on a fetch
  // worker, so that a slow or stalled endpoint never holds the request threads, which keep
  // answering from memory (cached files, loaded metadata, the stats file). Hints that fetch
  // nothing themselves (the caches may change before the request is served); false at once
  // for a local store. Ask them before the *Renders hints above, which may read metadata
  // that is not loaded.
  bool LookupFetches(uint64_t parent, std::string_view name) const;
  bool AttrFetches(uint64_t ino) const;  // GetAttr, Open and ReadLink of `ino`
  bool ReadDirFetches(uint64_t ino) const;
  bool ReadFetches(uint64_t ino, uint64_t offset, uint64_t size) const;
  Status ReadLink(uint64_t ino, std::string_view* target) const;
  // The RGB pixels (height rows of width * 3 bytes) the views decode regular file `ino` of the
  // store's tree to: the stored pixels (pack --predecode) or the original decoded now, kept in
  // the RAM cache when `keep`. *decoded false (and OK) for a file the views serve as it is (not
  // a JPEG or PNG they reproduce exactly, or not a file of the tree). For dsfs.torch's datasets.
  Status DecodedPixels(uint64_t ino, bool keep, bool* decoded, uint32_t* width, uint32_t* height,
                       ByteCache::Value* px) const;
  Status StatFs(struct statvfs* st) const;

  // True for the one inode whose attributes must not be cached by the kernel: the stats file
  // (the /.dsfs directory is cached like the rest: every path into a view walks through it).
  bool IsVirtual(uint64_t ino) const { return ino == kStatsIno; }
  // PushSource: the files of a listed directory of any view, and their bytes.
  Status ForEachFile(uint64_t dir,
                     const std::function<bool(uint64_t ino, uint64_t size)>& file) const override;
  Status ReadFile(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                  std::string_view* out) const override;
  RequestCounters& counters() const { return counters_; }
  // The stats file's contents (unpadded JSON, on one line): the stats source's, else
  // StatsObject's. StatsObject: the tree's own counters (requests and their latency, caches,
  // decodes, the store's backend), without what the mount adds (mount/stats.h).
  std::string StatsJson() const;
  nlohmann::ordered_json StatsObject() const;
  // The same counters as one short line for systemd's STATUS= ("serving: 1234 requests,
  // 5.6 MB read, 0 errors; cache 12.0 MB of 1.0 GB, 85% hits").
  std::string StatusLine() const;

 private:
  static constexpr uint32_t kTensorFileKind = InodeSpace::kTensorFileKind;
  static constexpr uint32_t kControl = InodeSpace::kControl;
  static constexpr uint64_t kDotDsfsIno = InodeSpace::kControlDirIno;
  static constexpr uint64_t kStatsIno = InodeSpace::kStatsIno;
  static uint32_t Kind(uint64_t ino) { return InodeSpace::Kind(ino); }
  static uint32_t Number(uint64_t ino) { return InodeSpace::Number(ino); }
  static uint64_t Make(uint32_t kind, uint32_t number) { return InodeSpace::Make(kind, number); }
  uint64_t In(uint64_t fuse_ino) const { return space_.In(fuse_ino); }
  uint64_t Out(uint64_t ino) const { return space_.Out(ino); }

  // The control directory (fs/control_dir.cc).
  // Answers a lookup in the root or in /.dsfs that the control directory owns: true with the
  // result in *s (and *ino), false when the tree answers it.
  bool LookupControl(uint64_t parent, std::string_view name, uint64_t* ino, Status* s) const;
  Status ControlAttr(uint64_t ino, struct stat* st) const;
  Status Attr(uint64_t ino, struct stat* st) const;  // our inode numbers
  Status LookupIn(uint64_t parent, std::string_view name, uint64_t* ino) const;
  Status ReadDirControl(uint64_t offset, const DirFiller& fill) const;
  // Bytes of the stats file: its JSON padded with spaces to kStatsBytes.
  Status ReadStats(uint64_t offset, uint64_t size, ReadBuffer* buf, std::string_view* out) const;
  // The tree (fs/filesystem.cc).
  // Reads of our inode `ino`; *rec is the store record read when it is a store inode (kinds
  // 0-3), for the prefetcher (one decode per READ).
  Status ReadIno(uint64_t ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                 std::string_view* out, InodeRecord* rec) const;
  // If `name` in store directory `dir` is "X.npy" for a decodable image X there, X (whose npy
  // view file takes that name) in *image; NotFound otherwise.
  Status NpyViewImage(uint32_t dir, std::string_view name, uint32_t* image) const;
  void FillStat(uint64_t ino, const InodeRecord& rec, struct stat* st) const;
  // The attributes view `v` shows for a store entry. A jpeg-N image's size needs it encoded:
  // done when `encode`, else *st is marked AttrsUnknown.
  Status FillViewStat(View v, uint32_t ino, const InodeRecord& rec, struct stat* st,
                      bool encode) const;

  // Reads of view files (fs/view_reads.cc).
  Status ReadImageView(View v, uint32_t ino, const InodeRecord& rec, uint64_t offset, uint64_t size,
                       ReadBuffer* buf, std::string_view* out) const;
  Status ReadTensorFile(TensorFile f, uint32_t dir, uint64_t offset, uint64_t size, ReadBuffer* buf,
                        std::string_view* out) const;
  // The decoded pixels of image `ino` (from the cache, the stored pixels or by decoding the
  // original); cached when `keep`.
  Status Pixels(uint32_t ino, const InodeRecord& rec, bool keep, ByteCache::Value* out) const;
  // The file resized view `v` shows for image `ino` (a BMP or a JPEG), rendered on first use
  // and kept in the cache. REQUIRES: v.resized() and Renders(v, rec).
  Status ResizedFile(View v, uint32_t ino, const InodeRecord& rec, ByteCache::Value* out) const;
  // The cache namespace of resized view `v`'s files, made on first use.
  ByteCache::Id ResizedId(View v) const;
  // The tensor index of store directory `dir`, built on first use and kept.
  Status Tensor(uint32_t dir, std::shared_ptr<const TensorIndex>* out) const;
  // AttrFetches of our inode number `ino`.
  bool AttrMayFetch(uint64_t ino) const;
  // True if the tensor index of store directory `dir` is built (Tensor reads nothing then).
  bool TensorBuilt(uint32_t dir) const;
  // True if the file view `v` renders of image `ino` (for npy: its pixels) is in the cache.
  bool RenderCached(View v, uint32_t ino) const;
  // Logs once per inode that a view serves an image as it is.
  void NoteServedAsIs(uint32_t ino) const;
  // Logs once per mount that images too large to render are served as they are.
  void NoteTooLargeToRender(uint32_t ino, const InodeRecord& rec) const;
  bool Renders(View v, const InodeRecord& rec) const {
    return ViewRenders(v, rec, options_.max_render_bytes);
  }
  // The path of store inode `ino` ("/a/b.jpg"), for log lines.
  std::string PathOf(uint32_t ino) const;

  std::unique_ptr<Store> store_;
  FsOptions options_;
  InodeSpace space_;
  // The views' RAM cache and their namespaces in it.
  std::shared_ptr<ByteCache> cache_;
  ByteCache::Id pixels_id_ = 0, bmp_id_ = 0, files_txt_id_ = 0;
  mutable std::mutex mu_;  // guards the three maps below
  mutable std::unordered_map<uint32_t, std::shared_ptr<const TensorIndex>> tensors_;
  mutable std::unordered_set<uint32_t> logged_as_is_;
  mutable std::unordered_map<uint32_t, ByteCache::Id> resized_ids_;  // by InodeSpace::KindOf
  mutable std::atomic<uint64_t> images_decoded_{0}, image_decode_ns_{0};
  mutable std::atomic<uint64_t> images_resized_{0}, image_resize_ns_{0};
  mutable std::atomic<bool> logged_too_large_{false};
  Prefetcher* prefetcher_ = nullptr;
  TransportStatsFn transport_stats_;
  StatsSourceFn stats_source_;
  mutable RequestCounters counters_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace dsfs
