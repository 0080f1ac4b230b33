#include "store/packer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/path.h"
#include "common/units.h"
#include "image/image.h"
#include "store/codec.h"
#include "store/format.h"

namespace dsfs {
namespace {

using Clock = std::chrono::steady_clock;

// Files above this size gain nothing from the dictionary (it is tuned for small inputs).
constexpr uint64_t kDictMaxFileBytes = 64 << 10;
// More compression threads than any machine has cores only costs memory (and a thread each).
constexpr int kMaxPackThreads = 1024;
// The dictionary is trained on about this many times its size of sample files, spread evenly
// over the tree. zstd suggests 100x, but on our datasets 10x already gives the same ratio
// (32x32 JPEG: 0.3850 at 10x, 0.3852 at 100x; Fashion-MNIST PNG: 0.9573 vs 0.9566) while
// training takes 0.2-0.7 s instead of 2.5-4 s; 20x keeps a margin for more varied trees.
constexpr uint64_t kDictSampleFactor = 20;
// Training reads at most this many sample bytes, whatever the dictionary's size.
constexpr uint64_t kMaxSampleBytes = 64 << 20;
// The largest --dict-size: zstd gains nothing from larger dictionaries on small files, and
// training time and memory grow with it.
constexpr uint32_t kMaxDictBytes = 16 << 20;
// While the dictionary is trained on an archive's first small files, their batches are held
// back; so are the batches of the other files read meanwhile, up to this many bytes beyond the
// samples (then the dictionary is trained on what was found).
constexpr uint64_t kMaxHeldOtherBytes = 32 << 20;
// What a held chunk costs beside its bytes (its string and its place in the batch): counted
// against that bound, so that millions of tiny files are held within it too.
constexpr uint64_t kHeldChunkOverheadBytes = 64;

// Bytes of small files to train a `dict_bytes` dictionary on.
uint64_t SampleBytes(uint32_t dict_bytes) {
  return std::min<uint64_t>(uint64_t{dict_bytes} * kDictSampleFactor, kMaxSampleBytes);
}
// A unit of compression work: up to this many payloads or raw bytes.
constexpr size_t kBatchPayloads = 256;
constexpr uint64_t kBatchBytes = 8 << 20;

// The tree as it is being built: records in inode order plus what is needed to find each
// file's source again (the path of every directory).
struct Tree {
  std::vector<InodeRecord> inodes;  // index = inode number - 1
  std::string names;
  std::unordered_map<uint32_t, std::string> dir_paths;  // directory inode -> source path
  uint64_t skipped = 0;
};

uint32_t AddName(Tree* t, std::string_view name, uint64_t* off) {
  *off = t->names.size();
  t->names.append(name);
  return static_cast<uint32_t>(name.size());
}

InodeRecord RecordFromStat(const struct stat& st) {
  InodeRecord r{};
  r.mode = st.st_mode;
  r.mtime_s = st.st_mtim.tv_sec;
  r.mtime_ns = static_cast<uint32_t>(st.st_mtim.tv_nsec);
  return r;
}

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from signal handlers");

Status CheckInterrupted() {
  return g_interrupted.load(std::memory_order_relaxed) ? Status::IOError("interrupted")
                                                       : Status::OK();
}

// The store being written (PackOptions::store_path), found by its directory and name, so that
// a walk over a tree that holds it leaves it and its temporaries out.
struct StoreToSkip {
  bool any = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;

  explicit StoreToSkip(const std::string& store_path) {
    if (store_path.empty()) return;
    std::string path = store_path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    name = slash == std::string::npos ? path : path.substr(slash + 1);
    struct stat st;
    if (name.empty() || ::stat(dir.c_str(), &st) != 0) return;
    any = true;
    dev = st.st_dev;
    ino = st.st_ino;
  }
  // For the entries of the directory open at `dfd`: whether to skip `entry`.
  bool InDir(int dfd) const {
    struct stat st;
    return any && ::fstat(dfd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
  }
  bool Skips(const std::string& entry) const {
    return entry == name || entry.rfind(name + ".tmp-", 0) == 0;
  }
};

// open(2) of a path that may be longer than PATH_MAX (a tree a few thousand directories deep,
// which the store takes): opened a piece under PATH_MAX at a time, each piece relative to the
// directory before it. The same as open(path, flags) otherwise.
int OpenLongPath(const std::string& path, int flags) {
  if (path.size() < PATH_MAX) return ::open(path.c_str(), flags);
  int dir = AT_FDCWD;
  size_t pos = 0;
  while (path.size() - pos >= PATH_MAX) {
    size_t cut = path.rfind('/', pos + PATH_MAX - 1);
    if (cut == std::string::npos || cut <= pos) {
      if (dir != AT_FDCWD) ::close(dir);
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = ::openat(dir, path.substr(pos, cut - pos).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    if (dir != AT_FDCWD) ::close(dir);
    if (fd < 0) {
      errno = err;
      return -1;
    }
    dir = fd;
    pos = cut + 1;
  }
  int fd = ::openat(dir, path.c_str() + pos, flags);
  int err = errno;
  if (dir != AT_FDCWD) ::close(dir);
  errno = err;
  return fd;
}

// Breadth-first walk: each directory's entries get consecutive inode numbers, sorted by name.
// Deeper trees than kMaxTreeDepth directories are InvalidArgument.
Status Walk(const std::string& src, const std::string& store_path, Tree* tree,
            const std::function<void(uint64_t)>& tick) {
  const StoreToSkip store(store_path);
  struct stat st;
  // SRC itself may be a symlink to the tree (as tar and mksquashfs take it); links inside it
  // are stored as links.
  std::string root_path = src;
  if (::lstat(src.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(src.c_str(), nullptr), &std::free);
    if (!real) return Status::FromErrno(errno, src);
    root_path = real.get();
  }
  if (::stat(root_path.c_str(), &st) != 0) return Status::FromErrno(errno, src);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(src + ": not a directory");
  InodeRecord root = RecordFromStat(st);
  root.parent = 1;
  tree->inodes.push_back(root);
  tree->dir_paths[1] = root_path;
  std::deque<std::pair<uint32_t, uint32_t>> queue{{1, 0}};  // directory inode, level
  std::vector<std::string> entries;
  while (!queue.empty()) {
    DSFS_RETURN_IF_ERROR(CheckInterrupted());
    auto [dir_ino, level] = queue.front();
    queue.pop_front();
    const std::string path = tree->dir_paths[dir_ino];  // kept: its files are read later
    int dfd = OpenLongPath(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return Status::FromErrno(errno, "cannot open directory " + path);
    DIR* d = ::fdopendir(dfd);
    if (!d) {
      int err = errno;
      ::close(dfd);
      return Status::FromErrno(err, "cannot read directory " + path);
    }
    entries.clear();
    const bool store_here = store.InDir(dfd);
    errno = 0;
    while (struct dirent* de = ::readdir(d)) {
      if (std::strcmp(de->d_name, ".") == 0 || std::strcmp(de->d_name, "..") == 0) continue;
      if (store_here && store.Skips(de->d_name)) {
        Log()->info("skipping {}/{}: the store being written", path, de->d_name);
        continue;
      }
      entries.emplace_back(de->d_name);
    }
    if (errno != 0) {
      int err = errno;
      ::closedir(d);
      return Status::FromErrno(err, "cannot read directory " + path);
    }
    std::sort(entries.begin(), entries.end());
    uint64_t first = tree->inodes.size() + 1;
    uint64_t count = 0;
    for (const std::string& name : entries) {
      if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int err = errno;
        ::closedir(d);
        return Status::FromErrno(err, "cannot stat " + path + "/" + name);
      }
      InodeRecord r = RecordFromStat(st);
      if (S_ISREG(st.st_mode)) {
        r.size = static_cast<uint64_t>(st.st_size);
      } else if (S_ISLNK(st.st_mode)) {
        // st_size is only a hint (procfs says 0; a link may change after lstat): a target
        // that fills the buffer may be cut, so read again with a larger one.
        std::string target(std::max<size_t>(static_cast<size_t>(st.st_size) + 1, 256), '\0');
        ssize_t n;
        while ((n = ::readlinkat(dfd, name.c_str(), target.data(), target.size())) >= 0 &&
               static_cast<size_t>(n) == target.size() && target.size() <= PATH_MAX) {
          target.resize(target.size() * 2);
        }
        if (n < 0 || static_cast<size_t>(n) == target.size()) {
          int err = n < 0 ? errno : ENAMETOOLONG;
          ::closedir(d);
          return Status::FromErrno(err, "cannot read symlink " + path + "/" + name);
        }
        target.resize(static_cast<size_t>(n));
        r.size = target.size();
        AddName(tree, target, &r.data);
      } else if (!S_ISDIR(st.st_mode)) {
        Log()->warn("skipping {}/{}: not a regular file, directory or symlink", path, name);
        ++tree->skipped;
        continue;
      }
      if (tree->inodes.size() >= UINT32_MAX - 1) {
        ::closedir(d);
        return Status::InvalidArgument("too many entries for one store (over 4 billion)");
      }
      r.parent = dir_ino;
      r.name_len = AddName(tree, name, &r.name_off);
      tree->inodes.push_back(r);
      uint32_t ino = static_cast<uint32_t>(tree->inodes.size());
      if (S_ISDIR(st.st_mode)) {
        if (level + 1 > kMaxTreeDepth) {
          ::closedir(d);
          return Status::InvalidArgument("tree too deep: " + path + "/" + name + " is " +
                                         std::to_string(level + 1) + " directories down (at most " +
                                         std::to_string(kMaxTreeDepth) + ")");
        }
        tree->dir_paths[ino] = path + "/" + name;
        queue.push_back({ino, level + 1});
      }
      ++count;
    }
    ::closedir(d);
    InodeRecord& dr = tree->inodes[dir_ino - 1];
    dr.size = count;
    dr.data = count ? first : 0;
    if (tick) tick(tree->inodes.size());
  }
  return Status::OK();
}

std::string SourcePath(const Tree& t, uint32_t ino) {
  const InodeRecord& r = t.inodes[ino - 1];
  return t.dir_paths.at(r.parent) + "/" + std::string(t.names.data() + r.name_off, r.name_len);
}

// Reads [offset, offset + len) of a source file, insisting it still has `size` bytes.
Status ReadSource(const std::string& path, uint64_t size, uint64_t offset, uint64_t len,
                  std::string* out) {
  int fd = OpenLongPath(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot read " + path);
  out->resize(len);
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, out->data() + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "cannot read " + path);
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  struct stat st;
  bool changed = ::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != size;
  ::close(fd);
  if (done != len || changed) return Status::IOError(path + ": file changed while packing");
  return Status::OK();
}

// A JPEG or PNG file whose chunks are all in one batch: decoded by the worker.
struct ImageJob {
  uint32_t handle;  // the producer's name for the file (inode number or archive node)
  size_t first_raw, raws;
  std::string path;  // for the log line if the views must serve it as is
};
struct ImageResult {
  uint32_t handle;
  ImageKind kind;
  uint32_t width = 0, height = 0;
  std::string pixel_records;       // encoded pixel records (predecode), back to back
  std::vector<size_t> pixel_ends;  // end offset of each
  uint64_t pixel_raw_bytes = 0;
  std::string path, why;  // kUnsupported: what was refused
};

// A batch of consecutive payloads (chunks), compressed together by one worker.
struct Batch {
  uint64_t first_id = 0;
  std::vector<std::string> raws;  // raw chunks
  std::vector<uint8_t> use_dict;
  std::string records;       // encoded payload records, back to back
  std::vector<size_t> ends;  // end offset of each record in `records`
  uint64_t raw_bytes = 0;
  uint64_t files_completed = 0;  // files whose last chunk is in this batch
  Status status;                 // a producer error travels to the writer in its batch
  std::vector<ImageJob> images;
  std::vector<ImageResult> image_results;
  bool full() const { return raws.size() >= kBatchPayloads || raw_bytes >= kBatchBytes; }
  void Add(std::string raw, bool dict) {
    raw_bytes += raw.size();
    raws.push_back(std::move(raw));
    use_dict.push_back(dict);
  }
};

// Decodes the image of `job` (its chunks are in `b`): what the views can make of it and, with
// an encoder (predecode), its pixels as encoded records of at most `chunk_bytes` raw bytes.
ImageResult AnalyzeImage(const Batch& b, const ImageJob& job, PayloadEncoder* enc,
                         uint32_t chunk_bytes, Status* status) {
  ImageResult r;
  r.handle = job.handle;
  std::string joined;
  std::string_view data = b.raws[job.first_raw];
  if (job.raws > 1) {
    for (size_t i = 0; i < job.raws; ++i) joined += b.raws[job.first_raw + i];
    data = joined;
  }
  DecodedImage img;
  Status s = DecodeImage(data, &img);
  if (!s.ok()) {
    r.kind = ImageKind::kUnsupported;
    r.path = job.path;
    r.why = s.ToString();
    return r;
  }
  r.kind = SniffImage(data);
  r.width = img.width;
  r.height = img.height;
  if (enc) {
    for (size_t off = 0; off < img.rgb.size(); off += chunk_bytes) {
      std::string_view part = std::string_view(img.rgb).substr(off, chunk_bytes);
      *status = enc->Encode(part, false, &r.pixel_records);
      if (!status->ok()) return r;
      r.pixel_ends.push_back(r.pixel_records.size());
    }
    r.pixel_raw_bytes = img.rgb.size();
  }
  return r;
}

// Compresses batches on worker threads and hands them back in submission order, with a bound
// on how many are in flight (so memory stays bounded whatever the source's speed).
class OrderedCompressor {
 public:
  OrderedCompressor(int threads, int level, std::shared_ptr<const Dictionary> dict,
                    size_t max_in_flight, bool predecode, uint32_t chunk_bytes)
      : max_in_flight_(max_in_flight), dict_(std::move(dict)) {
    for (int t = 0; t < threads; ++t) {
      workers_.emplace_back([this, level, predecode, chunk_bytes] {
        std::optional<PayloadEncoder> encoder;  // made with the dictionary of the first batch
        for (;;) {
          Batch b;
          uint64_t seq;
          {
            std::unique_lock lock(mu_);
            cv_work_.wait(lock, [&] { return aborted_ || !todo_.empty() || closed_; });
            if (aborted_ || todo_.empty()) return;
            seq = todo_.begin()->first;
            b = std::move(todo_.begin()->second);
            todo_.erase(todo_.begin());
            if (!encoder) encoder.emplace(level, dict_);
          }
          PayloadEncoder& enc = *encoder;
          for (size_t i = 0; b.status.ok() && i < b.raws.size(); ++i) {
            b.status = enc.Encode(b.raws[i], b.use_dict[i], &b.records);
            b.ends.push_back(b.records.size());
          }
          for (const ImageJob& job : b.images) {
            if (!b.status.ok()) break;
            b.image_results.push_back(
                AnalyzeImage(b, job, predecode ? &enc : nullptr, chunk_bytes, &b.status));
          }
          b.images.clear();
          b.raws.clear();
          std::lock_guard lock(mu_);
          done_.emplace(seq, std::move(b));
          cv_done_.notify_all();
        }
      });
    }
  }
  ~OrderedCompressor() {
    Abort();
    for (auto& w : workers_) w.join();
  }

  // Producer side: the dictionary the batches are compressed with, when it was not known at
  // construction. REQUIRES: before the first Submit.
  void SetDictionary(std::shared_ptr<const Dictionary> dict) {
    std::lock_guard lock(mu_);
    dict_ = std::move(dict);
  }
  // Producer side. Blocks while too many batches are in flight; false once aborted.
  bool Submit(Batch b) {
    std::unique_lock lock(mu_);
    cv_space_.wait(lock, [&] { return aborted_ || next_seq_ - written_seq_ < max_in_flight_; });
    if (aborted_) return false;
    todo_.emplace(next_seq_++, std::move(b));
    cv_work_.notify_one();
    return true;
  }
  void CloseInput() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_work_.notify_all();
    cv_done_.notify_all();
  }
  // Writer side: the next batch in order. False if none is ready within `wait`; *eof is set
  // once the input is closed and every batch was handed out.
  bool Next(Batch* out, std::chrono::milliseconds wait, bool* eof) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return done_.count(written_seq_) > 0; };
    cv_done_.wait_for(lock, wait,
                      [&] { return ready() || (closed_ && written_seq_ == next_seq_); });
    *eof = !ready() && closed_ && written_seq_ == next_seq_;
    if (!ready()) return false;
    auto it = done_.find(written_seq_);
    *out = std::move(it->second);
    done_.erase(it);
    ++written_seq_;
    cv_space_.notify_all();
    return true;
  }
  void Abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_work_.notify_all();
    cv_space_.notify_all();
    cv_done_.notify_all();
  }

 private:
  const size_t max_in_flight_;
  std::mutex mu_;  // guards everything below
  std::shared_ptr<const Dictionary> dict_;
  std::condition_variable cv_work_, cv_space_, cv_done_;
  std::map<uint64_t, Batch> todo_, done_;
  uint64_t next_seq_ = 0, written_seq_ = 0;
  bool closed_ = false, aborted_ = false;
  std::vector<std::thread> workers_;
};

// After kGroupTargetBytes, a group ends where the next record would spill onto a new page:
// LMDB stores large values on whole 4 KiB pages (16-byte page header), so the group then
// wastes less than one record's worth of its last page.
// A backend that packs small values itself (RocksDB) gets one record per group: a read then
// fetches just its record.
bool GroupEndsBefore(const KvWriter& writer, size_t group_bytes, size_t next_bytes) {
  constexpr size_t kPage = 4096, kPageHeader = 16;
  if (!writer.PrefersLargeValues()) return true;
  if (group_bytes < kGroupTargetBytes) return false;
  size_t pages_now = (group_bytes + kPageHeader + kPage - 1) / kPage;
  size_t pages_next = (group_bytes + next_bytes + kPageHeader + kPage - 1) / kPage;
  return pages_next > pages_now || group_bytes >= 4 * kGroupTargetBytes;
}

// Drives a pack: the producer (a source-specific function, on its own thread) feeds the
// compressor; this thread writes the records, grouped, in payload-id order, and reports
// progress.
class PackRun {
 public:
  PackRun(const PackOptions& options, KvWriter* writer,
          const std::function<void(const PackProgress&)>& progress)
      : options_(options), writer_(writer), progress_(progress) {
    threads_ = options.threads > 0
                   ? options.threads
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }

  PackProgress& progress() { return prog_; }
  // Continues the numbering and totals of an existing store (dsfs add): new payload and pixel
  // records get the ids after its last ones; its dictionary record is kept as it is.
  void ContinueFrom(const StoreHeader& h) {
    next_id_ = h.payload_count;
    payload_bytes_ = h.payload_bytes;
    next_pixel_id_ = h.pixel_count;
    pixel_bytes_ = h.pixel_bytes;
    images_ = h.image_count;
    write_dict_ = false;
  }
  uint64_t next_payload_id() const { return next_id_; }
  void Report(bool force) {
    if (!progress_) return;
    auto now = Clock::now();
    if (!force && now - last_report_ < std::chrono::milliseconds(200)) return;
    last_report_ = now;
    progress_(prog_);
  }
  void LogPhase(const char* name) {
    auto now = Clock::now();
    Log()->info("pack: {} took {:.2f} s", name,
                std::chrono::duration<double>(now - phase_start_).count());
    phase_start_ = now;
  }

  // Runs `produce` (which Submits batches and returns its status) against a compressor using
  // `dict`, writing everything it produces. Returns the first error.
  // `on_image` gets what became of every image job, with the pixel record id + 1 of its first
  // stored pixel record (0: none), on this thread.
  using ImageFn = std::function<void(const ImageResult&, uint64_t pixels)>;
  Status Compress(std::shared_ptr<const Dictionary> dict,
                  const std::function<Status(OrderedCompressor*)>& produce,
                  const ImageFn& on_image) {
    prog_.phase = "compressing";
    OrderedCompressor comp(threads_, options_.zstd_level, std::move(dict),
                           static_cast<size_t>(threads_) * 4, options_.predecode,
                           options_.chunk_bytes);
    Status produced;
    std::thread producer([&] {
      produced = produce(&comp);
      comp.CloseInput();
    });
    Status s;
    GroupBuilder group;
    for (;;) {
      if (!(s = CheckInterrupted()).ok()) break;
      Batch b;
      bool eof = false;
      if (!comp.Next(&b, std::chrono::milliseconds(100), &eof)) {
        if (eof) break;
        Report(false);
        continue;
      }
      s = b.status;
      if (s.ok() && !b.ends.empty() && b.first_id != next_id_) {
        s = Status::IOError("pack: payloads out of order");
      }
      size_t begin = 0;
      for (size_t i = 0; s.ok() && i < b.ends.size(); ++i) {
        std::string_view record = std::string_view(b.records).substr(begin, b.ends[i] - begin);
        begin = b.ends[i];
        if (group.count() > 0 && GroupEndsBefore(*writer_, group.bytes(), record.size() + 4)) {
          s = writer_->Put(PayloadKey(next_id_ - 1), group.Finish());
        }
        group.Add(record);
        ++next_id_;
      }
      for (size_t i = 0; s.ok() && i < b.image_results.size(); ++i) {
        s = WriteImage(b.image_results[i], on_image);
      }
      if (!s.ok()) break;
      payload_bytes_ += b.records.size();
      prog_.files_done += b.files_completed;
      prog_.bytes_done += b.raw_bytes;
      prog_.bytes_stored = payload_bytes_;
      Report(false);
    }
    if (s.ok() && group.count() > 0) s = writer_->Put(PayloadKey(next_id_ - 1), group.Finish());
    if (s.ok() && pixel_group_.count() > 0) {
      s = writer_->Put(PayloadKey(next_pixel_id_ - 1, kPixelSpace), pixel_group_.Finish());
    }
    comp.Abort();  // on error: unblock the producer
    producer.join();
    if (!produced.ok()) return produced;
    return s;
  }

  // Stores an image's pixel records and reports it.
  Status WriteImage(const ImageResult& r, const ImageFn& on_image) {
    uint64_t pixels = 0;
    if (r.kind == ImageKind::kUnsupported) {
      // One line per image for the first few; a tree of millions of non-images (or of one
      // unsupported kind) must not bury the log: the rest are counted in the pack summary.
      if (++images_as_is_ <= kImageWarnings) {
        Log()->warn("{}: {}: the views serve it as it is", r.path, r.why);
      } else if (images_as_is_ == kImageWarnings + 1) {
        Log()->warn(
            "more images the views cannot decode: not logged one by one (counted in "
            "the summary)");
      }
    } else {
      ++images_;
    }
    if (!r.pixel_ends.empty()) pixels = next_pixel_id_ + 1;
    size_t begin = 0;
    for (size_t end : r.pixel_ends) {
      std::string_view record = std::string_view(r.pixel_records).substr(begin, end - begin);
      begin = end;
      if (pixel_group_.count() > 0 &&
          GroupEndsBefore(*writer_, pixel_group_.bytes(), record.size() + 4)) {
        DSFS_RETURN_IF_ERROR(
            writer_->Put(PayloadKey(next_pixel_id_ - 1, kPixelSpace), pixel_group_.Finish()));
      }
      pixel_group_.Add(record);
      ++next_pixel_id_;
    }
    pixel_bytes_ += r.pixel_records.size();
    on_image(r, pixels);
    return Status::OK();
  }

  // Writes the metadata tables, dictionary and header, and commits.
  Status Finish(const std::vector<InodeRecord>& inodes, const std::string& names,
                const std::string& dict_bytes, PackStats* st) {
    prog_.phase = "finishing";
    Report(true);
    // The root's entries are inodes 2 .. 1 + the root's entry count.
    for (uint64_t i = 1; !inodes.empty() && i <= inodes[0].size && i < inodes.size(); ++i) {
      if (std::string_view(names).substr(inodes[i].name_off, inodes[i].name_len) == ".dsfs") {
        Log()->warn(
            "the tree's top-level .dsfs is hidden in mounts by dsfs's own .dsfs (views and "
            "stats); it is reachable inside the views, e.g. MOUNT/.dsfs/bmp/.dsfs, and with "
            "dsfs ls/cat");
        break;
      }
    }
    InodeLayout layout = InodeLayout::For(inodes);
    std::string inode_bytes(inodes.size() * layout.record_bytes(), '\0');
    for (size_t i = 0; i < inodes.size(); ++i) {
      layout.Encode(inodes[i], inode_bytes.data() + i * layout.record_bytes());
    }
    DSFS_RETURN_IF_ERROR(writer_->Put(kLayoutKey, layout.Serialize()));
    DSFS_RETURN_IF_ERROR(writer_->Put(kInodeKey, inode_bytes));
    DSFS_RETURN_IF_ERROR(
        writer_->Put(kInodeSumKey, SegmentSums(inode_bytes, options_.segment_bytes)));
    DSFS_RETURN_IF_ERROR(writer_->Put(kNameKey, names));
    DSFS_RETURN_IF_ERROR(writer_->Put(kNameSumKey, SegmentSums(names, options_.segment_bytes)));
    // The dictionary is stored uncompressed so readers use it in place.
    if (!dict_bytes.empty() && write_dict_)
      DSFS_RETURN_IF_ERROR(writer_->Put(kDictKey, RawPayloadRecord(dict_bytes)));
    StoreHeader h{};
    h.created_unix_s = static_cast<uint64_t>(std::time(nullptr));
    h.zstd_level = options_.zstd_level;
    h.chunk_bytes = options_.chunk_bytes;
    h.segment_bytes = options_.segment_bytes;
    h.dict_bytes = static_cast<uint32_t>(dict_bytes.size());
    h.inode_count = inodes.size();
    h.file_count = st->files;
    h.dir_count = st->dirs;
    h.symlink_count = st->symlinks;
    h.file_bytes = st->bytes_in;
    h.payload_count = next_id_;
    h.payload_bytes = payload_bytes_;
    h.names_bytes = names.size();
    h.image_count = images_;
    h.pixel_count = next_pixel_id_;
    h.pixel_bytes = pixel_bytes_;
    SealHeader(&h);
    DSFS_RETURN_IF_ERROR(
        writer_->Put(kHeaderKey, std::string_view(reinterpret_cast<const char*>(&h), sizeof(h))));
    DSFS_RETURN_IF_ERROR(writer_->Commit());
    LogPhase("metadata and commit");
    st->payload_bytes = payload_bytes_;
    st->images = images_;
    st->images_as_is = images_as_is_;
    st->pixel_bytes = pixel_bytes_;
    st->dict_bytes = h.dict_bytes;
    st->seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    return Status::OK();
  }

 private:
  const PackOptions& options_;
  KvWriter* writer_;
  std::function<void(const PackProgress&)> progress_;
  int threads_;
  PackProgress prog_;
  Clock::time_point start_ = Clock::now(), phase_start_ = start_, last_report_ = start_;
  uint64_t next_id_ = 0, payload_bytes_ = 0;
  GroupBuilder pixel_group_;
  uint64_t next_pixel_id_ = 0, pixel_bytes_ = 0, images_ = 0, images_as_is_ = 0;
  bool write_dict_ = true;
};

Status CheckOptions(const PackOptions& options) {
  if (options.chunk_bytes < 4096 || options.segment_bytes < 4096 ||
      options.chunk_bytes > kMaxChunkBytes) {
    return Status::InvalidArgument(
        "chunk sizes must be 4096 bytes to 64 MiB, segment sizes at least 4096 bytes");
  }
  if (options.zstd_level < 1 || options.zstd_level > ZSTD_maxCLevel()) {
    return Status::InvalidArgument("compression level must be between 1 and " +
                                   std::to_string(ZSTD_maxCLevel()));
  }
  if (options.dict_bytes != 0 &&
      (options.dict_bytes < 1024 || options.dict_bytes > kMaxDictBytes)) {
    return Status::InvalidArgument("dictionary size must be 0 (none) or 1K to 16M");
  }
  if (options.threads < 0 || options.threads > kMaxPackThreads) {
    return Status::InvalidArgument("threads must be 0 (one per CPU) to " +
                                   std::to_string(kMaxPackThreads));
  }
  return Status::OK();
}

Status TrainOnSamples(const Tree& tree, const std::vector<uint32_t>& files, uint32_t dict_bytes,
                      std::string* dict) {
  dict->clear();
  if (dict_bytes == 0) return Status::OK();
  std::vector<uint32_t> small;
  uint64_t small_bytes = 0;
  for (uint32_t ino : files) {
    uint64_t size = tree.inodes[ino - 1].size;
    if (size <= kDictMaxFileBytes) {
      small.push_back(ino);
      small_bytes += size;
    }
  }
  if (small.empty()) return Status::OK();
  // Every k-th small file, evenly over the tree, up to SampleBytes.
  uint64_t want = SampleBytes(dict_bytes);
  size_t stride = std::max<uint64_t>(1, small_bytes / std::max<uint64_t>(want, 1));
  std::vector<std::string> samples;
  uint64_t got = 0;
  for (size_t i = 0; i < small.size() && got < want; i += stride) {
    const InodeRecord& r = tree.inodes[small[i] - 1];
    std::string data;
    DSFS_RETURN_IF_ERROR(ReadSource(SourcePath(tree, small[i]), r.size, 0, r.size, &data));
    got += data.size();
    samples.push_back(std::move(data));
  }
  return TrainDictionary(samples, dict_bytes, dict);
}

// The tree of an archive as it streams in: entries arrive in any order, so inode numbers are
// given only at the end (breadth-first, names sorted, as for a directory).
class ArchiveTree {
 public:
  struct Node {
    std::string name;
    uint32_t parent = 0;
    uint32_t mode = 0;
    int64_t mtime_s = 0;
    uint32_t mtime_ns = 0;
    uint64_t size = 0;
    uint64_t data = 0;               // first payload id, or symlink target offset in targets_
    std::vector<uint32_t> children;  // directories only
    uint8_t image = 0;               // InodeRecord's image fields
    uint32_t width = 0, height = 0;
    uint64_t pixels = 0;
  };

  ArchiveTree() {
    Node root;
    root.mode = S_IFDIR | 0755;
    root.mtime_s = std::time(nullptr);
    nodes_.push_back(root);
    dirs_[""] = 0;
  }

  // Normalizes an archive path: no leading "/" or "./", no empty or "." parts. Refuses ".."
  // (an archive must not place files outside its own tree) and names longer than the kernel
  // takes (kMaxNameBytes). `what` says where the path comes from, for the message.
  static Status Normalize(std::string_view in, std::string_view what, std::string* out) {
    out->clear();
    // More parts than the deepest tree holds (its directories and a leaf) are refused here,
    // before the tree's directories are made (one per level, each named by its whole path).
    size_t parts = 0;
    for (std::string_view part : PathParts(in)) {
      if (++parts > size_t{kMaxTreeDepth} + 1) {
        return Status::InvalidArgument("tree too deep: " + std::string(what) + " " + Shorten(in) +
                                       " is more than " + std::to_string(kMaxTreeDepth) +
                                       " directories down");
      }
      if (part == "..") {
        return Status::InvalidArgument("unsafe " + std::string(what) +
                                       " (with '..'): " + Shorten(in));
      }
      if (part.size() > kMaxNameBytes) {
        return Status::InvalidArgument(
            "name longer than " + std::to_string(kMaxNameBytes) + " bytes in " + std::string(what) +
            ": " + std::string(part.substr(0, 32)) + "... (" + std::to_string(part.size()) +
            " bytes" + (part.size() == in.size() ? std::string() : ", in " + Shorten(in)) + ")");
      }
      if (!out->empty()) *out += '/';
      *out += part;
    }
    return Status::OK();
  }

  // A path for a message: long ones are cut in the middle.
  static std::string Shorten(std::string_view path) {
    if (path.size() <= 80) return std::string(path);
    return std::string(path.substr(0, 40)) + "..." + std::string(path.substr(path.size() - 37));
  }

  // The directory node at `path`, created (with its parents) if the archive has not listed it.
  uint32_t Dir(const std::string& path, int64_t mtime_s) {
    auto it = dirs_.find(path);
    if (it != dirs_.end()) return it->second;
    size_t slash = path.rfind('/');
    uint32_t parent = Dir(slash == std::string::npos ? "" : path.substr(0, slash), mtime_s);
    Node n;
    n.name = slash == std::string::npos ? path : path.substr(slash + 1);
    n.parent = parent;
    n.mode = S_IFDIR | 0755;
    n.mtime_s = mtime_s;
    uint32_t id = Add(std::move(n));
    dirs_[path] = id;
    return id;
  }

  // A non-directory entry at `path` (its parent directories are created as needed).
  uint32_t Leaf(const std::string& path, int64_t mtime_s) {
    size_t slash = path.rfind('/');
    Node n;
    n.parent = Dir(slash == std::string::npos ? "" : path.substr(0, slash), mtime_s);
    n.name = slash == std::string::npos ? path : path.substr(slash + 1);
    return Add(std::move(n));
  }

  Node& node(uint32_t id) { return nodes_[id]; }
  // Adds `n` as an entry of node `parent` (dsfs add builds the store's tree this way).
  uint32_t AddChild(uint32_t parent, Node n) {
    n.parent = parent;
    return Add(std::move(n));
  }
  // Same for a directory, which Dir() finds at `path` from then on.
  uint32_t AddDir(uint32_t parent, Node n, const std::string& path) {
    uint32_t id = AddChild(parent, std::move(n));
    dirs_[path] = id;
    return id;
  }
  // The directory at `path`: the existing one (its attributes kept), or a new one (with its
  // parents) with these attributes.
  uint32_t DirFor(const std::string& path, uint32_t mode, int64_t mtime_s, uint32_t mtime_ns) {
    auto it = dirs_.find(path);
    if (it != dirs_.end()) return it->second;
    uint32_t id = Dir(path, mtime_s);
    nodes_[id].mode = mode;
    nodes_[id].mtime_s = mtime_s;
    nodes_[id].mtime_ns = mtime_ns;
    return id;
  }
  uint64_t AddTarget(std::string_view target) {
    uint64_t off = targets_.size();
    targets_.append(target);
    return off;
  }
  // The regular file the archive holds at normalized `path` so far (the latest entry of that
  // name), or UINT32_MAX.
  uint32_t FileSoFar(const std::string& path) {
    size_t slash = path.rfind('/');
    auto dir = dirs_.find(slash == std::string::npos ? "" : path.substr(0, slash));
    if (dir == dirs_.end()) return UINT32_MAX;
    std::string_view name =
        slash == std::string::npos ? path : std::string_view(path).substr(slash + 1);
    // Found through an index of every entry by directory and name, made at the first hard
    // link (archives without any need none): scanning the directory, a large one with many
    // links took quadratic time.
    if (!indexed_) {
      indexed_ = true;
      for (uint32_t id = 1; id < nodes_.size(); ++id) Index(id);
    }
    auto it = latest_.find(EntryKey(dir->second, name));
    if (it == latest_.end()) return UINT32_MAX;
    return S_ISREG(nodes_[it->second].mode) ? it->second : UINT32_MAX;
  }
  // Node `node` is a hard link of node `source`: one file, so it gets source's contents (and
  // those of whatever source links to in turn) when the tree is built.
  void Link(uint32_t node, uint32_t source) { link_source_[node] = source; }

  // Numbers the tree breadth-first (entries sorted by name; of two entries with one name the
  // later in the archive wins) and produces the inode records and name pool.
  // Room for `n` nodes: a tree of millions grows without reallocating (and copying) them all.
  void Reserve(size_t n) { nodes_.reserve(n); }

  Status Build(std::vector<InodeRecord>* inodes, std::string* names, PackStats* st) {
    *st = PackStats{};
    inodes->reserve(inodes->size() + nodes_.size());
    auto before = [&](uint32_t a, uint32_t b) { return nodes_[a].name < nodes_[b].name; };
    for (Node& n : nodes_) {
      if (n.children.empty()) continue;
      // A store's directories come back sorted and unique (the common case of `dsfs add`).
      if (std::adjacent_find(n.children.begin(), n.children.end(), [&](uint32_t a, uint32_t b) {
            return !before(a, b);
          }) == n.children.end()) {
        continue;
      }
      std::stable_sort(n.children.begin(), n.children.end(), before);
      // Keep the last of equal names (stable sort keeps archive order among them).
      std::vector<uint32_t> unique;
      for (size_t i = 0; i < n.children.size(); ++i) {
        if (i + 1 < n.children.size() &&
            nodes_[n.children[i]].name == nodes_[n.children[i + 1]].name) {
          Dropped(n.children[i], n.children[i + 1], st);
          continue;
        }
        unique.push_back(n.children[i]);
      }
      n.children.swap(unique);
    }
    // Each link's file: the end of its chain of links, found once per link (a chain of links
    // to links, each to the one before, would otherwise be walked once per link: quadratic).
    std::unordered_map<uint32_t, uint32_t> file_of;
    std::vector<uint32_t> chain;
    for (const auto& [id, first] : link_source_) {
      uint32_t src = first;
      chain.assign(1, id);
      for (size_t steps = 0;;) {
        if (auto done = file_of.find(src); done != file_of.end()) {
          src = done->second;
          break;
        }
        auto next = link_source_.find(src);
        if (next == link_source_.end()) break;
        if (++steps > link_source_.size()) {
          return Status::InvalidArgument("archive hard links form a cycle: " + nodes_[id].name);
        }
        chain.push_back(src);
        src = next->second;
      }
      for (uint32_t c : chain) file_of[c] = src;
      nodes_[id].size = nodes_[src].size;
      nodes_[id].data = nodes_[src].data;
      nodes_[id].image = nodes_[src].image;
      nodes_[id].width = nodes_[src].width;
      nodes_[id].height = nodes_[src].height;
      nodes_[id].pixels = nodes_[src].pixels;
    }
    std::vector<uint32_t> order{0};  // node ids in inode order
    std::vector<uint32_t> ino_of(nodes_.size(), 0);
    ino_of[0] = 1;
    if (nodes_.size() >= UINT32_MAX - 1) {
      return Status::InvalidArgument("too many entries for one store (over 4 billion)");
    }
    inodes->clear();
    names->clear();
    // Breadth-first: order[i] is `level` directories down the tree while i < level_end.
    size_t level_end = 1;
    uint32_t level = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == level_end) {
        ++level;
        level_end = order.size();
      }
      const Node& n = nodes_[order[i]];
      if (S_ISDIR(n.mode) && level > kMaxTreeDepth) {
        return Status::InvalidArgument("tree too deep: " + Shorten(PathOf(order[i])) + " is " +
                                       std::to_string(level) + " directories down (at most " +
                                       std::to_string(kMaxTreeDepth) + ")");
      }
      InodeRecord r{};
      r.mode = n.mode;
      r.mtime_s = n.mtime_s;
      r.mtime_ns = n.mtime_ns;
      r.parent = ino_of[n.parent];
      r.name_off = names->size();
      r.name_len = static_cast<uint32_t>(n.name.size());
      names->append(n.name);
      if (S_ISDIR(n.mode)) {
        ++st->dirs;
        r.size = n.children.size();
        r.data = n.children.empty() ? 0 : order.size() + 1;
        for (uint32_t c : n.children) {
          ino_of[c] = static_cast<uint32_t>(order.size() + 1);
          order.push_back(c);
        }
      } else if (S_ISLNK(n.mode)) {
        ++st->symlinks;
        r.size = n.size;
        r.data = names->size();
        names->append(targets_, n.data, n.size);
      } else {
        ++st->files;
        st->bytes_in += n.size;
        r.size = n.size;
        r.data = n.data;
        r.image = n.image;
        r.width = n.width;
        r.height = n.height;
        r.pixels = n.pixels;
      }
      inodes->push_back(r);
    }
    return Status::OK();
  }

 private:
  // Counts what the later entry `by` of the same path drops: `old` and everything below it;
  // logs it (the first few) where it is more than an older version of the same kind of entry.
  void Dropped(uint32_t old, uint32_t by, PackStats* st) {
    constexpr uint64_t kDropWarnings = 20;
    ++st->replaced;
    uint64_t below = 0;
    std::vector<uint32_t> stack = nodes_[old].children;
    while (!stack.empty()) {
      uint32_t c = stack.back();
      stack.pop_back();
      ++below;
      stack.insert(stack.end(), nodes_[c].children.begin(), nodes_[c].children.end());
    }
    st->dropped += below;
    auto kind = [&](uint32_t id) {
      uint32_t type = nodes_[id].mode & S_IFMT;
      return type == S_IFDIR ? "directory" : type == S_IFLNK ? "symlink" : "file";
    };
    if (below == 0 && (nodes_[old].mode & S_IFMT) == (nodes_[by].mode & S_IFMT)) return;
    if (++drop_warnings_ <= kDropWarnings) {
      Log()->warn("{}: a {} replaced by a later {} of the same path{}", Shorten(PathOf(old)),
                  kind(old), kind(by),
                  below ? " (" + std::to_string(below) + " entries below it dropped)" : "");
    } else if (drop_warnings_ == kDropWarnings + 1) {
      Log()->warn("more entries replaced: not logged one by one (counted in the summary)");
    }
  }
  // The path of node `id` (for messages).
  std::string PathOf(uint32_t id) const {
    std::vector<std::string_view> parts;
    for (; id != 0; id = nodes_[id].parent) parts.push_back(nodes_[id].name);
    std::string path;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      if (!path.empty()) path += '/';
      path += *it;
    }
    return path;
  }

  static std::string EntryKey(uint32_t parent, std::string_view name) {
    std::string key(reinterpret_cast<const char*>(&parent), sizeof(parent));
    key.append(name);
    return key;
  }
  // The latest entry of its name in its directory (a later one of the same name wins).
  void Index(uint32_t id) { latest_[EntryKey(nodes_[id].parent, nodes_[id].name)] = id; }

  uint32_t Add(Node n) {
    uint32_t id = static_cast<uint32_t>(nodes_.size());
    nodes_[n.parent].children.push_back(id);
    nodes_.push_back(std::move(n));
    if (indexed_) Index(id);
    return id;
  }
  std::vector<Node> nodes_;
  std::unordered_map<std::string, uint32_t> dirs_;
  std::string targets_;
  std::unordered_map<uint32_t, uint32_t> link_source_;  // hard link node -> its source node
  bool indexed_ = false;                                // latest_ is made (FileSoFar)
  std::unordered_map<std::string, uint32_t> latest_;    // EntryKey -> latest node of that name
  uint64_t drop_warnings_ = 0;
};

struct ArchiveCloser {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

// The archive's bytes, through zlib: gzip data is inflated with its checksums checked (the
// gzip filter of libarchive 3.6 ignores a bad CRC and would pack wrong bytes), anything else
// passes through as it is for libarchive's own filters (bzip2, xz, zstd, ...) and formats.
struct GzInput {
  gzFile gz = nullptr;
  std::string buf = std::string(1 << 20, '\0');
  ~GzInput() {
    if (gz) gzclose(gz);
  }
};

la_ssize_t GzRead(struct archive* a, void* client, const void** out) {
  auto* in = static_cast<GzInput*>(client);
  int n = gzread(in->gz, in->buf.data(), static_cast<unsigned>(in->buf.size()));
  if (n < 0) {
    int err = 0;
    std::string msg = gzerror(in->gz, &err);
    // zlib names the input "<fd:N>: " first: the caller names the file.
    if (msg.rfind("<fd:", 0) == 0 && msg.find(": ") != std::string::npos) {
      msg = msg.substr(msg.find(": ") + 2);
    }
    archive_set_error(a, err == Z_ERRNO ? errno : EIO, "%s",
                      err == Z_ERRNO ? std::strerror(errno) : ("gzip data: " + msg).c_str());
    return -1;
  }
  *out = in->buf.data();
  return n;
}

Status ArchiveError(struct archive* a, const std::string& src) {
  const char* msg = archive_error_string(a);
  int err = archive_errno(a);
  std::string text = src + ": " + (msg ? msg : "cannot read archive");
  if (err == ENOENT) return Status::NotFound(text);
  return Status::IOError(text);
}

// Opens `src` (a path, or "-" for stdin) as the input of `a`.
Status OpenArchiveInput(struct archive* a, const std::string& src, GzInput* in) {
  int fd = src == "-" ? ::dup(0) : ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string text = (src == "-" ? "stdin" : src) + ": " + std::strerror(errno);
    return errno == ENOENT ? Status::NotFound(text) : Status::IOError(text);
  }
  in->gz = gzdopen(fd, "rb");
  if (!in->gz) {
    ::close(fd);
    return Status::IOError(src + ": cannot read");
  }
  gzbuffer(in->gz, 1 << 20);
  if (archive_read_open(a, in, nullptr, GzRead, nullptr) != ARCHIVE_OK) {
    return ArchiveError(a, src == "-" ? "stdin" : src);
  }
  return Status::OK();
}

}  // namespace

void InterruptPacking(bool interrupt) { g_interrupted.store(interrupt, std::memory_order_relaxed); }

Status PackArchive(const std::string& src, const PackOptions& options, KvWriter* writer,
                   const std::function<void(const PackProgress&)>& progress, PackStats* stats) {
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  GzInput input;  // outlives the archive reader (declared first, destroyed last)
  std::unique_ptr<struct archive, ArchiveCloser> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  // Real archive formats only: "all" would also take any text file for an mtree spec.
  archive_read_support_format_tar(a.get());
  archive_read_support_format_cpio(a.get());
  archive_read_support_format_zip(a.get());
  archive_read_support_format_7zip(a.get());
  DSFS_RETURN_IF_ERROR(OpenArchiveInput(a.get(), src, &input));
  std::string name = src == "-" ? "stdin" : src;

  PackRun run(options, writer, progress);
  PackProgress& prog = run.progress();
  ArchiveTree tree;
  uint64_t next_id = 0;
  bool at_end = false;
  std::string path;
  std::string read_buf(options.chunk_bytes, '\0');  // one chunk as it is read

  // Reads the next entry into the tree; file contents become chunks added to *b (ids from
  // next_id). Returns OK with at_end set after the last entry.
  auto read_entry = [&](Batch* b, const std::function<Status(Batch*)>& flush) -> Status {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) {
      at_end = true;
      return Status::OK();
    }
    if (r < ARCHIVE_WARN) return ArchiveError(a.get(), name);
    const char* raw_path = archive_entry_pathname(e);
    if (!raw_path) return Status::InvalidArgument(name + ": archive entry without a name");
    DSFS_RETURN_IF_ERROR(ArchiveTree::Normalize(raw_path, "path in archive", &path));
    int64_t mtime_s = archive_entry_mtime(e);
    uint32_t mtime_ns = static_cast<uint32_t>(archive_entry_mtime_nsec(e));
    mode_t mode = archive_entry_mode(e);
    // A hard link names a file stored before it. It is that file from then on (a later entry
    // of the target's name does not change it, as when tar extracts). A link that carries data
    // (cpio's newc format puts a file's data on its last link) is the file's contents, for the
    // earlier names too.
    uint32_t link_source = UINT32_MAX;
    const bool has_data = archive_entry_size_is_set(e) && archive_entry_size(e) > 0;
    if (const char* link = archive_entry_hardlink(e)) {
      if (path.empty()) return Status::InvalidArgument(name + ": hard link without a name");
      std::string target;
      DSFS_RETURN_IF_ERROR(ArchiveTree::Normalize(link, "hard link target in archive", &target));
      link_source = tree.FileSoFar(target);
      if (link_source == UINT32_MAX) {
        return Status::InvalidArgument(name + ": " + path + " is a hard link to " + link +
                                       ", which is not a regular file stored before it");
      }
      if (!has_data) {
        uint32_t id = tree.Leaf(path, mtime_s);
        tree.node(id).mode = S_IFREG | (mode & 07777);
        tree.node(id).mtime_s = mtime_s;
        tree.node(id).mtime_ns = mtime_ns;
        tree.Link(id, link_source);
        return Status::OK();
      }
    }
    switch (link_source != UINT32_MAX ? AE_IFREG : archive_entry_filetype(e)) {
      case AE_IFDIR: {
        uint32_t id = tree.Dir(path, mtime_s);
        tree.node(id).mode = S_IFDIR | (mode & 07777);
        tree.node(id).mtime_s = mtime_s;
        tree.node(id).mtime_ns = mtime_ns;
        return Status::OK();
      }
      case AE_IFLNK: {
        if (path.empty()) return Status::InvalidArgument(name + ": symlink without a name");
        const char* target = archive_entry_symlink(e);
        if (target && std::strlen(target) >= PATH_MAX) {
          Log()->warn("skipping {}: a symlink target longer than any path ({} bytes)", path,
                      std::strlen(target));
          return Status::OK();
        }
        uint32_t id = tree.Leaf(path, mtime_s);
        ArchiveTree::Node& n = tree.node(id);
        n.mode = S_IFLNK | 0777;
        n.mtime_s = mtime_s;
        n.mtime_ns = mtime_ns;
        n.size = target ? std::strlen(target) : 0;
        n.data = tree.AddTarget(target ? target : "");
        return Status::OK();
      }
      case AE_IFREG: {
        if (path.empty()) return Status::InvalidArgument(name + ": file without a name");
        uint32_t id = tree.Leaf(path, mtime_s);
        uint64_t first = next_id;
        uint64_t size = 0;
        bool small = archive_entry_size_is_set(e) &&
                     static_cast<uint64_t>(archive_entry_size(e)) <= kDictMaxFileBytes;
        bool image = false;
        size_t first_raw = b->raws.size();
        // libarchive gives a sparse file's data with its holes filled, except a hole at the end
        // (all of a file that is one hole): that is filled here, up to the recorded size.
        const uint64_t declared = archive_entry_sparse_count(e) > 0 && archive_entry_size_is_set(e)
                                      ? static_cast<uint64_t>(archive_entry_size(e))
                                      : 0;
        bool data_end = false;  // libarchive said so: not asked again
        auto read_data = [&](char* dst, size_t len, uint64_t done) -> la_ssize_t {
          la_ssize_t n = data_end ? 0 : archive_read_data(a.get(), dst, len);
          data_end = data_end || n == 0;
          if (n == 0 && done < declared) {
            n = static_cast<la_ssize_t>(std::min<uint64_t>(len, declared - done));
            std::memset(dst, 0, static_cast<size_t>(n));
          }
          return n;
        };
        for (;;) {
          size_t got = 0;
          while (got < read_buf.size()) {
            la_ssize_t n = read_data(read_buf.data() + got, read_buf.size() - got, size + got);
            if (n < 0) return ArchiveError(a.get(), name + ": " + path);
            if (n == 0) break;
            got += static_cast<size_t>(n);
          }
          if (got == 0) break;
          // A copy of exactly its size: batches hold thousands of small chunks.
          std::string chunk(read_buf.data(), got);
          if (size == 0) image = SniffImage(chunk) != ImageKind::kNone;
          size += got;
          if (b->raws.empty()) b->first_id = next_id;
          b->Add(std::move(chunk), small);
          ++next_id;
          // An image's chunks stay in one batch (the worker decodes it whole), up to a limit.
          if (image && size > kMaxImageFileBytes) image = false;
          if (b->full() && !image) DSFS_RETURN_IF_ERROR(flush(b));
          if (b->raws.empty()) first_raw = 0;
          if (got < options.chunk_bytes) break;
        }
        if (image) b->images.push_back({id, first_raw, b->raws.size() - first_raw, path});
        ArchiveTree::Node& n = tree.node(id);
        n.mode = S_IFREG | (mode & 07777);
        n.mtime_s = mtime_s;
        n.mtime_ns = mtime_ns;
        n.size = size;
        n.data = size ? first : 0;
        if (link_source != UINT32_MAX) tree.Link(link_source, id);
        ++b->files_completed;
        prog.bytes_total += size;
        ++prog.files_total;
        if (b->full()) DSFS_RETURN_IF_ERROR(flush(b));
        return Status::OK();
      }
      default:
        Log()->warn("skipping {}: not a regular file, directory or symlink", path);
        return Status::OK();
    }
  };

  // The dictionary is trained on the first small files of the stream: the batches read until
  // there are SampleBytes of them are held back, within kMaxHeldOtherBytes of other files
  // (large ones are read through in batches like any other), then submitted.
  std::string dict_bytes;
  prog.phase = "training";
  DSFS_RETURN_IF_ERROR(run.Compress(
      nullptr,
      [&](OrderedCompressor* comp) -> Status {
        bool training = options.dict_bytes > 0, aborted = false;
        const uint64_t want = SampleBytes(options.dict_bytes);
        std::vector<Batch> held;
        uint64_t held_bytes = 0, sample_bytes = 0;
        auto submit = [&](Batch&& batch) {
          if (!aborted && !comp->Submit(std::move(batch))) aborted = true;
          return aborted ? Status::IOError("aborted") : Status::OK();
        };
        auto train = [&]() -> Status {
          training = false;
          std::vector<std::string> samples;
          for (const Batch& h : held) {
            for (size_t i = 0; i < h.raws.size(); ++i) {
              if (h.use_dict[i]) samples.push_back(h.raws[i]);
            }
          }
          DSFS_RETURN_IF_ERROR(TrainDictionary(samples, options.dict_bytes, &dict_bytes));
          samples = {};
          std::shared_ptr<Dictionary> dict;
          DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_bytes, options.zstd_level, &dict));
          comp->SetDictionary(dict);
          Log()->info("pack: dictionary trained on {} of the first {}", FormatBytes(sample_bytes),
                      FormatBytes(held_bytes));
          for (Batch& h : held) DSFS_RETURN_IF_ERROR(submit(std::move(h)));
          held.clear();
          return Status::OK();
        };
        auto flush = [&](Batch* batch) -> Status {
          Batch full = std::move(*batch);
          *batch = Batch();
          if (!training) return submit(std::move(full));
          for (size_t i = 0; i < full.raws.size(); ++i) {
            if (full.use_dict[i]) sample_bytes += full.raws[i].size();
          }
          held_bytes += full.raw_bytes + full.raws.size() * kHeldChunkOverheadBytes;
          held.push_back(std::move(full));
          if (sample_bytes >= want || held_bytes >= want + kMaxHeldOtherBytes) return train();
          return Status::OK();
        };
        Batch b;
        while (!at_end) {
          Status s = read_entry(&b, flush);
          if (aborted) return Status::OK();  // the writer failed; it reports why
          if (!s.ok()) return s;
          run.Report(false);
        }
        if (!b.raws.empty() || b.files_completed) DSFS_RETURN_IF_ERROR(flush(&b));
        if (training) DSFS_RETURN_IF_ERROR(train());
        return Status::OK();
      },
      [&](const ImageResult& r, uint64_t pixels) {
        ArchiveTree::Node& n = tree.node(r.handle);
        n.image = static_cast<uint8_t>(r.kind);
        n.width = r.width;
        n.height = r.height;
        n.pixels = pixels;
      }));
  run.LogPhase("reading, training and compressing");
  if (archive_read_close(a.get()) != ARCHIVE_OK) return ArchiveError(a.get(), name);

  std::vector<InodeRecord> inodes;
  std::string names;
  PackStats st;
  DSFS_RETURN_IF_ERROR(tree.Build(&inodes, &names, &st));
  DSFS_RETURN_IF_ERROR(run.Finish(inodes, names, dict_bytes, &st));
  if (stats) *stats = st;
  return Status::OK();
}

namespace {

// Gives the regular files of `tree` consecutive payload ids from `first_id`, in inode order (so
// a directory's files are adjacent in the store), and counts the tree's entries into *st.
// Returns the files that have contents, in that order.
std::vector<uint32_t> AssignPayloadIds(Tree* tree, uint32_t chunk_bytes, uint64_t first_id,
                                       PackStats* st) {
  std::vector<uint32_t> files;
  uint64_t next_id = first_id;
  for (uint32_t i = 0; i < tree->inodes.size(); ++i) {
    InodeRecord& r = tree->inodes[i];
    if ((r.mode & S_IFMT) == S_IFREG) {
      ++st->files;
      st->bytes_in += r.size;
      if (r.size > 0) {
        r.data = next_id;
        next_id += (r.size + chunk_bytes - 1) / chunk_bytes;
        files.push_back(i + 1);
      }
    } else if ((r.mode & S_IFMT) == S_IFDIR) {
      ++st->dirs;
    } else {
      ++st->symlinks;
    }
  }
  st->skipped = tree->skipped;
  return files;
}

// Reads, compresses (with `dict`) and writes the contents of `files` of `tree`, whose payload
// ids (AssignPayloadIds) continue from where `run` is, and records what became of each image.
Status CompressFiles(PackRun* run, Tree* tree, const std::vector<uint32_t>& files,
                     const PackOptions& options, std::shared_ptr<const Dictionary> dict) {
  const uint64_t first_id = run->next_payload_id();
  return run->Compress(
      dict,
      [&](OrderedCompressor* comp) -> Status {
        uint64_t id = first_id;
        Batch b;
        for (uint32_t ino : files) {
          const uint64_t size = tree->inodes[ino - 1].size;
          std::string path = SourcePath(*tree, ino);
          bool image = false;
          size_t first_raw = b.raws.size();
          for (uint64_t off = 0; off < size; off += options.chunk_bytes) {
            if (b.raws.empty()) b.first_id = id;
            std::string raw;
            Status s = ReadSource(path, size, off,
                                  std::min<uint64_t>(options.chunk_bytes, size - off), &raw);
            if (!s.ok()) {
              b.status = s;
              comp->Submit(std::move(b));
              return Status::OK();  // the error reaches the writer in order, after earlier batches
            }
            if (off == 0) {
              image = size <= kMaxImageFileBytes && SniffImage(raw) != ImageKind::kNone;
            }
            b.Add(std::move(raw), size <= kDictMaxFileBytes);
            ++id;
            // An image's chunks stay in one batch: the worker decodes it whole.
            if (b.full() && !image) {
              if (!comp->Submit(std::move(b))) return Status::OK();
              b = Batch();
            }
          }
          if (image) b.images.push_back({ino, first_raw, b.raws.size() - first_raw, path});
          ++b.files_completed;
          if (b.full()) {
            if (!comp->Submit(std::move(b))) return Status::OK();
            b = Batch();
          }
        }
        if (!b.raws.empty() || b.files_completed) comp->Submit(std::move(b));
        return Status::OK();
      },
      [&](const ImageResult& r, uint64_t pixels) {
        // The producer reads only the size and names of records: these fields are the writer's.
        InodeRecord& rec = tree->inodes[r.handle - 1];
        rec.image = static_cast<uint8_t>(r.kind);
        rec.width = r.width;
        rec.height = r.height;
        rec.pixels = pixels;
      });
}

std::string StripSlashes(std::string src) {
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  return src;
}

}  // namespace

Status PackDirectory(const std::string& src_in, const PackOptions& options, KvWriter* writer,
                     const std::function<void(const PackProgress&)>& progress, PackStats* stats) {
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  std::string src = StripSlashes(src_in);
  PackRun run(options, writer, progress);
  PackProgress& prog = run.progress();

  Tree tree;
  prog.phase = "scanning";
  DSFS_RETURN_IF_ERROR(Walk(src, options.store_path, &tree, [&](uint64_t n) {
    prog.files_total = n;
    run.Report(false);
  }));
  run.LogPhase("scanning");

  PackStats st;
  std::vector<uint32_t> files = AssignPayloadIds(&tree, options.chunk_bytes, 0, &st);
  prog.files_total = st.files;
  prog.files_done = st.files - files.size();  // empty files need no work
  prog.bytes_total = st.bytes_in;

  prog.phase = "training";
  run.Report(true);
  std::string dict_bytes;
  DSFS_RETURN_IF_ERROR(TrainOnSamples(tree, files, options.dict_bytes, &dict_bytes));
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_bytes, options.zstd_level, &dict));
  run.LogPhase("dictionary training");

  DSFS_RETURN_IF_ERROR(CompressFiles(&run, &tree, files, options, dict));
  run.LogPhase("compressing");
  DSFS_RETURN_IF_ERROR(run.Finish(tree.inodes, tree.names, dict_bytes, &st));
  if (stats) *stats = st;
  return Status::OK();
}

Status AddDirectory(const Store& base, const std::string& src_in, const AddOptions& add,
                    KvWriter* writer, const std::function<void(const PackProgress&)>& progress,
                    PackStats* stats) {
  const StoreHeader& h = base.header();
  // The new files are stored as the old ones are: same chunking (readers split files by the
  // header's chunk size), level and dictionary, and predecoded if the store is.
  PackOptions options;
  options.zstd_level = h.zstd_level;
  options.chunk_bytes = h.chunk_bytes;
  options.segment_bytes = h.segment_bytes;
  options.dict_bytes = 0;  // nothing is trained: the store's own dictionary is used as it is
  options.threads = add.threads;
  options.predecode = h.pixel_count > 0;
  options.store_path = add.store_path;
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  std::string prefix;
  DSFS_RETURN_IF_ERROR(ArchiveTree::Normalize(add.prefix, "--prefix", &prefix));
  std::string src = StripSlashes(src_in);
  PackRun run(options, writer, progress);
  run.ContinueFrom(h);
  PackProgress& prog = run.progress();

  // The store's tree, as nodes that are renumbered once the new entries are in. All of its
  // metadata is read: ask for it in large requests rather than a page fault at a time.
  base.WillNeedMetadata(UINT64_MAX);
  ArchiveTree merged;
  merged.Reserve(h.inode_count + h.inode_count / 50 + 1024);
  prog.phase = "reading the store";
  {
    InodeRecord root;
    DSFS_RETURN_IF_ERROR(base.GetInode(Store::kRootIno, &root));
    merged.node(0).mode = root.mode;
    merged.node(0).mtime_s = root.mtime_s;
    merged.node(0).mtime_ns = root.mtime_ns;
  }
  // Breadth-first order: a directory's node exists before its entries are read.
  std::vector<uint32_t> node_of(h.inode_count + 1, 0);
  std::vector<std::string> dir_path(h.inode_count + 1);
  for (uint32_t ino = 1; ino <= h.inode_count; ++ino) {
    InodeRecord r;
    DSFS_RETURN_IF_ERROR(base.GetInode(ino, &r));
    if (!IsDir(r)) continue;
    uint32_t first, count;
    DSFS_RETURN_IF_ERROR(base.DirEntries(ino, r, &first, &count));
    for (uint32_t e = first; e < first + count; ++e) {
      InodeRecord c;
      std::string_view name;
      DSFS_RETURN_IF_ERROR(base.GetInode(e, &c));
      DSFS_RETURN_IF_ERROR(base.GetName(c, &name));
      ArchiveTree::Node n;
      n.name = std::string(name);
      n.mode = c.mode;
      n.mtime_s = c.mtime_s;
      n.mtime_ns = c.mtime_ns;
      if (IsLink(c)) {
        std::string_view target;
        DSFS_RETURN_IF_ERROR(base.ReadLink(c, &target));
        n.size = target.size();
        n.data = merged.AddTarget(target);
      } else if (IsReg(c)) {
        n.size = c.size;
        n.data = c.data;
        n.image = c.image;
        n.width = c.width;
        n.height = c.height;
        n.pixels = c.pixels;
      }
      if (IsDir(c)) {
        std::string path = dir_path[ino].empty() ? n.name : dir_path[ino] + "/" + n.name;
        node_of[e] = merged.AddDir(node_of[ino], std::move(n), path);
        dir_path[e] = std::move(path);
      } else {
        node_of[e] = merged.AddChild(node_of[ino], std::move(n));
      }
    }
  }
  node_of.clear();
  dir_path.clear();
  run.LogPhase("reading the store");

  prog.phase = "scanning";
  Tree tree;
  DSFS_RETURN_IF_ERROR(Walk(src, options.store_path, &tree, [&](uint64_t n) {
    prog.files_total = n;
    run.Report(false);
  }));
  run.LogPhase("scanning");

  // Every new name is checked before anything is written: an existing directory takes new
  // entries; any other existing name is an error unless replacing.
  std::vector<std::string> rel(tree.inodes.size() + 1);
  rel[1] = prefix;
  for (uint32_t ino = 2; ino <= tree.inodes.size(); ++ino) {
    const InodeRecord& r = tree.inodes[ino - 1];
    std::string_view name(tree.names.data() + r.name_off, r.name_len);
    rel[ino] = rel[r.parent].empty() ? std::string(name) : rel[r.parent] + "/" + std::string(name);
  }
  for (uint32_t ino = 1; ino <= tree.inodes.size(); ++ino) {
    if (rel[ino].empty()) continue;
    uint32_t found;
    InodeRecord old;
    Status s = base.LookupPath(rel[ino], &found, &old);
    if (s.IsNotFound()) continue;
    if (s.code() == Status::Code::kInvalidArgument) {
      // A parent is a file or symlink in the store.
      if (add.replace) continue;
      return Status::Exists(rel[ino] + ": a parent of it is not a directory in the store");
    }
    DSFS_RETURN_IF_ERROR(s);
    bool dir = S_ISDIR(tree.inodes[ino - 1].mode);
    if (dir && IsDir(old)) continue;
    if (!add.replace) {
      return Status::Exists(rel[ino] + ": already exists in the store (use --replace)");
    }
  }

  PackStats added;
  std::vector<uint32_t> files =
      AssignPayloadIds(&tree, options.chunk_bytes, h.payload_count, &added);
  --added.dirs;  // the source directory itself is the prefix, not a new entry
  prog.files_total = added.files;
  prog.files_done = added.files - files.size();
  prog.bytes_total = added.bytes_in;
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(base.dictionary_bytes(), h.zstd_level, &dict));
  DSFS_RETURN_IF_ERROR(CompressFiles(&run, &tree, files, options, dict));
  run.LogPhase("compressing");

  // The new entries join the tree; a replaced name's old entry is dropped by Build (the later
  // of two equal names wins), its payloads stay unreferenced in the store.
  std::vector<uint32_t> new_node(tree.inodes.size() + 1, 0);
  for (uint32_t ino = 1; ino <= tree.inodes.size(); ++ino) {
    const InodeRecord& r = tree.inodes[ino - 1];
    if (S_ISDIR(r.mode)) {
      new_node[ino] = merged.DirFor(rel[ino], r.mode, r.mtime_s, r.mtime_ns);
      continue;
    }
    ArchiveTree::Node n;
    n.name = std::string(tree.names.data() + r.name_off, r.name_len);
    n.mode = r.mode;
    n.mtime_s = r.mtime_s;
    n.mtime_ns = r.mtime_ns;
    n.size = r.size;
    if (S_ISLNK(r.mode)) {
      n.data = merged.AddTarget(std::string_view(tree.names.data() + r.data, r.size));
    } else {
      n.data = r.size ? r.data : 0;
      n.image = r.image;
      n.width = r.width;
      n.height = r.height;
      n.pixels = r.pixels;
    }
    merged.AddChild(new_node[r.parent], std::move(n));
  }

  std::vector<InodeRecord> inodes;
  std::string names;
  PackStats st;
  DSFS_RETURN_IF_ERROR(merged.Build(&inodes, &names, &st));
  DSFS_RETURN_IF_ERROR(run.Finish(inodes, names, std::string(base.dictionary_bytes()), &st));
  added.seconds = st.seconds;
  added.payload_bytes = st.payload_bytes - h.payload_bytes;
  added.images = st.images - h.image_count;
  added.images_as_is = st.images_as_is;
  added.dict_bytes = st.dict_bytes;
  added.replaced = st.replaced;
  added.dropped = st.dropped;
  if (stats) *stats = added;
  return Status::OK();
}

}  // namespace dsfs
