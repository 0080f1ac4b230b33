// dsfs extract STORE [DIR|-] [PATH...]: the tree (or the named paths) of a store, or of one of
// its views, written back to a directory or as a pax tar stream on stdout.
//
// The walk is the store's order (names sorted, depth first, as packed), which is the order of
// the payloads: each solid group is decoded once (Store::Read keeps the thread's last group).
// It streams: a directory is listed kListBatch entries at a time, so memory does not grow with
// the tree. Into a directory, everything is created relative to the descriptor of its parent
// (mkdirat, openat with O_NOFOLLOW and O_EXCL, symlinkat): a stored name is one component (no
// "/", never "." or ".."), a symlink is written as a link and never followed, and nothing
// outside DIR is ever written. A file that cannot be read (a damaged group) is named on one
// line and left out; the rest is written and the exit status is 1.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/path.h"
#include "common/units.h"
#include "fs/control_dir.h"
#include "fs/filesystem.h"
#include "fs/views.h"
#include "pack/tar_writer.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {
namespace {

constexpr uint64_t kRootIno = 1;  // the FUSE number of the (view's) root
// A directory is listed this many entries at a time (one batch per level held at once).
constexpr size_t kListBatch = 1024;
// Files up to this size are read whole before their tar header is written (a damaged one is
// then left out of the stream); a larger one that fails midway is padded with zeros.
constexpr uint64_t kTarBufferBytes = 8 << 20;
// Failures named one by one, up to this many; the rest are counted.
constexpr uint64_t kFailuresShown = 100;
constexpr int kMaxDepth = 4096;

// Reads a whole file in steps, handing each piece to `consume`.
using FileReader = std::function<Status(const std::function<Status(std::string_view)>& consume)>;

// Where the entries go: a directory or a tar stream. A non-OK status fails that entry (and,
// for a directory, what is below it); fatal() says the output itself failed and the walk stops.
class Output {
 public:
  virtual ~Output() = default;
  // `path`: relative, "/"-separated; `name`: its last component.
  virtual Status BeginDir(const std::string& path, std::string_view name, const struct stat& st,
                          bool merge) = 0;
  virtual Status EndDir(const struct stat& st) = 0;
  virtual Status File(const std::string& path, std::string_view name, const struct stat& st,
                      const FileReader& read) = 0;
  virtual Status Link(const std::string& path, std::string_view name, const struct stat& st,
                      std::string_view target) = 0;
  virtual Status Finish() = 0;
  bool fatal() const { return fatal_; }
  virtual uint64_t kept() const { return kept_; }
  // Entries left out unnamed: below a directory that failed (named) on another thread.
  virtual uint64_t skipped() const { return 0; }

 protected:
  bool fatal_ = false;
  uint64_t kept_ = 0;  // entries already in DIR, left as they were (--force)
};

// Failures of the output device itself (not of one entry) end the run.
bool IsFatalErrno(int e) { return e == ENOSPC || e == EDQUOT || e == EIO || e == EROFS; }

void TimesOf(const struct stat& st, struct timespec times[2]) {
  times[0] = st.st_mtim;
  times[1] = st.st_mtim;
}

class DirOutput : public Output {
 public:
  // `root_fd`: DIR, opened; owned from here.
  explicit DirOutput(int root_fd) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    umask_ = mask;
    dirs_.push_back({root_fd, false});
  }
  ~DirOutput() override {
    for (const Open& d : dirs_) ::close(d.fd);
  }

  Status BeginDir(const std::string& path, std::string_view name, const struct stat&,
                  bool merge) override {
    const std::string n(name);
    bool created = ::mkdirat(top(), n.c_str(), 0700) == 0;
    if (!created && errno != EEXIST) return Fail(errno, path);
    const int fd = ::openat(top(), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      // A file, or a symlink (never followed), where the directory goes.
      return Fail(errno == ELOOP ? ENOTDIR : errno, path + " (in DIR)");
    }
    if (!created && !merge) ++kept_;
    dirs_.push_back({fd, created});
    return Status::OK();
  }

  Status EndDir(const struct stat& st) override {
    const Open d = dirs_.back();
    dirs_.pop_back();
    Status s;
    if (d.created) s = SetAttrs(d.fd, st, "a directory");
    ::close(d.fd);
    return s;
  }

  Status File(const std::string& path, std::string_view name, const struct stat& st,
              const FileReader& read) override {
    const std::string n(name);
    const int fd = ::openat(top(), n.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            st.st_mode & 0777);
    if (fd < 0) {
      if (errno == EEXIST) {
        ++kept_;  // --force only adds: what is there stays
        return Status::OK();
      }
      return Fail(errno, path);
    }
    Status s = read([&](std::string_view data) { return WriteAll(fd, data, path); });
    if (s.ok()) s = SetAttrs(fd, st, path);
    if (::close(fd) != 0 && s.ok()) s = Fail(errno, path);
    if (!s.ok()) ::unlinkat(top(), n.c_str(), 0);  // no partial file left behind
    return s;
  }

  Status Link(const std::string& path, std::string_view name, const struct stat& st,
              std::string_view target) override {
    const std::string n(name);
    if (::symlinkat(std::string(target).c_str(), top(), n.c_str()) != 0) {
      if (errno == EEXIST) {
        ++kept_;
        return Status::OK();
      }
      return Fail(errno, path);
    }
    struct timespec times[2];
    TimesOf(st, times);
    if (::utimensat(top(), n.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) return Fail(errno, path);
    return Status::OK();
  }

  Status Finish() override { return Status::OK(); }

  // The root's own attributes, once everything below is written.
  Status SetRootAttrs(const struct stat& st) { return SetAttrs(dirs_.front().fd, st, "DIR"); }

 private:
  struct Open {
    int fd;
    bool created;
  };
  int top() const { return dirs_.back().fd; }

  Status Fail(int e, const std::string& what) {
    if (IsFatalErrno(e)) fatal_ = true;
    return Status::FromErrno(e, what);
  }

  Status WriteAll(int fd, std::string_view data, const std::string& path) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(n < 0 ? errno : EIO, path);
      data.remove_prefix(static_cast<size_t>(n));
    }
    return Status::OK();
  }

  Status SetAttrs(int fd, const struct stat& st, const std::string& what) {
    const mode_t mode = st.st_mode & 07777;
    // Files were created with the permission bits; only what the umask took (or a directory's
    // 0700) needs a chmod.
    if (S_ISDIR(st.st_mode) || mode != (mode & 0777 & ~umask_)) {
      if (::fchmod(fd, mode) != 0) return Fail(errno, what);
    }
    struct timespec times[2];
    TimesOf(st, times);
    if (::futimens(fd, times) != 0) return Fail(errno, what);
    return Status::OK();
  }

  mode_t umask_ = 022;
  std::vector<Open> dirs_;
};

// Writes into a directory on a thread of its own, in the order the entries come, while the
// caller goes on reading and decoding the next ones: the walk's reads and the file system's
// writes overlap. What is queued is bounded (kQueueBytes of contents); a file larger than
// kDirectBytes is written by the caller itself once the queue is empty. A write that fails is
// reported through `report` (from this thread) and what is below a directory that failed is
// left out with it.
class PipelinedOutput : public Output {
 public:
  using Report = std::function<void(const Status&)>;
  PipelinedOutput(std::unique_ptr<DirOutput> inner, Report report)
      : inner_(std::move(inner)), report_(std::move(report)), thread_([this] { Consume(); }) {}
  ~PipelinedOutput() override { Stop(); }

  Status BeginDir(const std::string& path, std::string_view name, const struct stat& st,
                  bool merge) override {
    return Push({Op::kBeginDir, path, std::string(name), st, merge, {}});
  }
  Status EndDir(const struct stat& st) override {
    return Push({Op::kEndDir, {}, {}, st, false, {}});
  }
  Status File(const std::string& path, std::string_view name, const struct stat& st,
              const FileReader& read) override {
    if (static_cast<uint64_t>(st.st_size) > kDirectBytes) {
      Wait();  // every entry before it is written: the stack of directories is this one's
      Status s = inner_->File(path, name, st, read);
      if (inner_->fatal()) failed_fatal_ = true;
      return s;
    }
    std::string data;
    data.reserve(static_cast<size_t>(st.st_size));
    DSFS_RETURN_IF_ERROR(read([&](std::string_view piece) {
      data.append(piece);
      return Status::OK();
    }));
    return Push({Op::kFile, path, std::string(name), st, false, std::move(data)});
  }
  Status Link(const std::string& path, std::string_view name, const struct stat& st,
              std::string_view target) override {
    return Push({Op::kLink, path, std::string(name), st, false, std::string(target)});
  }
  Status Finish() override {
    Wait();
    return Status::OK();
  }
  uint64_t kept() const override { return inner_->kept(); }
  uint64_t skipped() const override { return skipped_.load(); }
  DirOutput& inner() { return *inner_; }

 private:
  static constexpr uint64_t kQueueBytes = 32 << 20;
  static constexpr uint64_t kDirectBytes = 4 << 20;
  static constexpr size_t kQueueOps = 8192;
  struct Op {
    enum Kind { kBeginDir, kEndDir, kFile, kLink, kStop } kind;
    std::string path, name;
    struct stat st;
    bool merge;
    std::string data;  // a file's contents, a link's target
  };

  Status Push(Op op) {
    if (failed_fatal_.load()) {
      fatal_ = true;
      return Status::IOError("writing into DIR failed");
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto fits = [&] {
      return queue_.empty() ||
             (bytes_ + op.data.size() <= kQueueBytes && queue_.size() < kQueueOps);
    };
    if (!fits()) {
      producer_waiting_ = true;
      room_.wait(lock, fits);
      producer_waiting_ = false;
    }
    bytes_ += op.data.size();
    queue_.push_back(std::move(op));
    // One wake-up per batch, not per entry: the writer takes the whole queue at once.
    if (consumer_waiting_) work_.notify_one();
    return Status::OK();
  }

  // Until every queued entry is written.
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    producer_waiting_ = true;
    room_.wait(lock, [&] { return queue_.empty() && !busy_; });
    producer_waiting_ = false;
    if (failed_fatal_.load()) fatal_ = true;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({Op::kStop, {}, {}, {}, false, {}});
      work_.notify_one();
    }
    thread_.join();
  }

  // Takes what is queued, all of it, and writes it; until the stop entry.
  void Consume() {
    int skipping = 0;  // depth inside a directory that could not be made
    std::deque<Op> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        busy_ = false;
        if (producer_waiting_) room_.notify_all();
        consumer_waiting_ = true;
        work_.wait(lock, [&] { return !queue_.empty(); });
        consumer_waiting_ = false;
        batch.swap(queue_);
        bytes_ = 0;
        busy_ = true;
        if (producer_waiting_) room_.notify_all();
      }
      for (const Op& op : batch) {
        if (op.kind == Op::kStop) return;
        if (!failed_fatal_.load()) Apply(op, &skipping);
      }
      batch.clear();
    }
  }

  void Apply(const Op& op, int* skipping) {
    if (*skipping > 0) {
      if (op.kind == Op::kBeginDir) ++*skipping;
      if (op.kind == Op::kEndDir) --*skipping;
      if (op.kind != Op::kEndDir) ++skipped_;
      return;
    }
    Status s;
    switch (op.kind) {
      case Op::kBeginDir:
        s = inner_->BeginDir(op.path, op.name, op.st, op.merge);
        if (!s.ok()) *skipping = 1;
        break;
      case Op::kEndDir:
        s = inner_->EndDir(op.st);
        break;
      case Op::kFile: {
        const std::string& data = op.data;
        s = inner_->File(op.path, op.name, op.st,
                         [&](const auto& consume) { return consume(data); });
        break;
      }
      case Op::kLink:
        s = inner_->Link(op.path, op.name, op.st, op.data);
        break;
      case Op::kStop:
        break;
    }
    if (inner_->fatal()) failed_fatal_ = true;
    if (!s.ok()) report_(s);
  }

  std::unique_ptr<DirOutput> inner_;
  Report report_;
  std::mutex mu_;
  std::condition_variable work_, room_;
  std::deque<Op> queue_;
  uint64_t bytes_ = 0;
  bool busy_ = false;              // the writer holds a batch
  bool consumer_waiting_ = false;  // the writer waits for work
  bool producer_waiting_ = false;  // the walk waits for room, or for the queue to drain
  std::atomic<bool> failed_fatal_{false};
  std::atomic<uint64_t> skipped_{0};
  std::thread thread_;  // last: started once the rest is there
};

class TarOutput : public Output {
 public:
  explicit TarOutput(std::ostream& out)
      : out_(out), tar_([this](const void* data, size_t n) { return Sink(data, n); }) {}

  Status Open() { return Guard(tar_.Open()); }

  Status BeginDir(const std::string& path, std::string_view, const struct stat& st, bool) override {
    return Guard(tar_.AddDirectory(path, st.st_mode, st.st_mtim));
  }
  Status EndDir(const struct stat&) override { return Status::OK(); }

  Status File(const std::string& path, std::string_view, const struct stat& st,
              const FileReader& read) override {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size <= kTarBufferBytes) {
      // Read first: a file that fails is not in the stream at all.
      buffer_.clear();
      Status s = read([&](std::string_view data) {
        buffer_.append(data);
        return Status::OK();
      });
      if (!s.ok()) return s;
      if (buffer_.size() != size) return Status::Corruption(path + ": size changed while read");
      DSFS_RETURN_IF_ERROR(Guard(tar_.BeginFile(path, size, st.st_mode, st.st_mtim)));
      return Guard(tar_.Write(buffer_));
    }
    DSFS_RETURN_IF_ERROR(Guard(tar_.BeginFile(path, size, st.st_mode, st.st_mtim)));
    uint64_t written = 0;
    Status s = read([&](std::string_view data) {
      if (written + data.size() > size) data = data.substr(0, size - written);
      written += data.size();
      return Guard(tar_.Write(data));
    });
    if (fatal_) return s;
    // The header promised `size` bytes: the rest of a file that failed midway are zeros (the
    // failure is reported, the exit status 1; the stream stays well formed).
    const std::string zeros(64 << 10, '\0');
    while (written < size) {
      const uint64_t n = std::min<uint64_t>(zeros.size(), size - written);
      DSFS_RETURN_IF_ERROR(Guard(tar_.Write(std::string_view(zeros.data(), n))));
      written += n;
    }
    return s;
  }

  Status Link(const std::string& path, std::string_view, const struct stat& st,
              std::string_view target) override {
    return Guard(tar_.AddSymlink(path, target, st.st_mode, st.st_mtim));
  }

  Status Finish() override {
    DSFS_RETURN_IF_ERROR(Guard(tar_.Close()));
    errno = 0;
    out_.flush();
    if (!out_)
      return Status::IOError(std::string("writing the tar stream: ") +
                             (errno ? std::strerror(errno) : "write error"));
    return Status::OK();
  }

 private:
  Status Sink(const void* data, size_t n) {
    errno = 0;
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    if (!out_) {
      return Status::IOError(std::string("writing the tar stream: ") +
                             (errno ? std::strerror(errno) : "write error"));
    }
    return Status::OK();
  }
  // Any failure of the tar writer is the stream's: fatal.
  Status Guard(Status s) {
    if (!s.ok()) fatal_ = true;
    return s;
  }

  std::ostream& out_;
  TarWriter tar_;
  std::string buffer_;
};

// True for a name that is one path component dsfs may create: not empty, not "." or "..", no
// "/" and no NUL. A store's names are checked when it opens and verifies; a crafted one that
// slips through is refused here all the same.
bool SafeName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

class Extractor {
 public:
  Extractor(const Filesystem& fs, Output& output, const ExtractCommand& cmd, std::ostream& out,
            std::ostream& err)
      : fs_(fs),
        output_(output),
        cmd_(cmd),
        out_(out),
        err_(err),
        bar_(err, !cmd.quiet && ::isatty(STDERR_FILENO)) {
    progress_.phase = "extracting";
    step_ = std::max<uint64_t>(fs.store().header().chunk_bytes, 64 << 10);
  }

  // Everything below the root (`whole`), or the entry at `path` with its parents.
  Status ExtractAll() {
    progress_.files_total = fs_.store().header().file_count;
    if (cmd_.view == "original") progress_.bytes_total = fs_.store().header().file_bytes;
    std::string path;
    return WalkDir(kRootIno, &path, 1);
  }

  Status ExtractPath(const std::string& wanted) {
    std::vector<std::string> parts;
    for (size_t at = 0; at <= wanted.size();) {
      size_t slash = wanted.find('/', at);
      if (slash == std::string::npos) slash = wanted.size();
      std::string part = wanted.substr(at, slash - at);
      at = slash + 1;
      if (part.empty() || part == ".") continue;
      if (part == "..") return Status::InvalidArgument(wanted + ": a PATH has no '..'");
      parts.push_back(std::move(part));
    }
    uint64_t ino = kRootIno;
    struct stat st;
    std::string path;
    size_t opened = 0;
    Status s;
    for (size_t i = 0; i < parts.size() && s.ok(); ++i) {
      s = fs_.Lookup(ino, parts[i], &st).WithContext(wanted);
      if (!s.ok()) break;
      ino = st.st_ino;
      path += (path.empty() ? "" : "/") + parts[i];
      if (i + 1 < parts.size()) {
        if (!S_ISDIR(st.st_mode)) {
          s = Status::InvalidArgument(wanted + ": not a directory");
        } else if ((s = output_.BeginDir(path, parts[i], st, true)).ok()) {
          ++opened;
          parent_stats_.push_back(st);
        }
      } else {
        // The entry itself fails alone (a damaged file is named, the other PATHs written).
        Status e = Entry(ino, parts[i], st, &path, 1);
        if (!e.ok() && output_.fatal()) s = e;
        if (!e.ok() && !output_.fatal()) Failed(e);
      }
    }
    if (parts.empty()) {
      std::string root;
      s = WalkDir(kRootIno, &root, 1);
    }
    for (; opened > 0; --opened) {
      Status e = output_.EndDir(parent_stats_.back());
      parent_stats_.pop_back();
      if (s.ok()) s = e;
    }
    return s;
  }

  // Names a failed entry on one line (any thread).
  void Report(const Status& s) { Failed(s); }

  Status Summary(const std::string& where) {
    bar_.Clear();
    failed_ += output_.skipped();
    if (failed_ > kFailuresShown) {
      err_ << "dsfs: error: ... and " << (failed_ - kFailuresShown) << " more entries failed\n";
    }
    if (!cmd_.quiet && where != "-") {
      out_ << "extracted " << files_ << " files (" << FormatBytes(bytes_) << "), " << dirs_
           << " directories, " << links_ << " symlinks into " << PrintableName(where);
      if (output_.kept()) out_ << "; " << output_.kept() << " already there, kept";
      out_ << "\n";
    }
    if (failed_) {
      return Status::Corruption(std::to_string(failed_) +
                                " entries could not be extracted (named above)");
    }
    return Status::OK();
  }

 private:
  // Lists `dir` a batch at a time and extracts each entry (directories depth first).
  Status WalkDir(uint64_t dir, std::string* path, int depth) {
    if (depth > kMaxDepth) {
      return Status::Corruption(*path + ": tree deeper than " + std::to_string(kMaxDepth));
    }
    struct Listed {
      std::string name;
      struct stat st;
    };
    std::vector<Listed> batch;
    uint64_t offset = 2;  // past "." and ".."
    const size_t base = path->size();
    for (;;) {
      batch.clear();
      uint64_t next = offset;
      DSFS_RETURN_IF_ERROR(
          fs_.ReadDir(dir, offset,
                      [&](std::string_view name, const struct stat& st, uint64_t after) {
                        if (batch.size() >= kListBatch) return false;
                        batch.push_back({std::string(name), st});
                        next = after;
                        return true;
                      })
              .WithContext(base ? path->substr(0, base) : "/"));
      if (batch.empty()) break;
      offset = next;
      for (Listed& e : batch) {
        if (Cancelled()) return Status::IOError("interrupted");
        // The mount's control directory, at the root: no stored entry.
        if (dir == kRootIno && e.name == kControlDirName && !S_ISREG(e.st.st_mode) &&
            fs_.inode_space().In(e.st.st_ino) == InodeSpace::kControlDirIno) {
          continue;
        }
        path->resize(base);
        if (base) *path += '/';
        *path += e.name;
        Status s = Entry(e.st.st_ino, e.name, e.st, path, depth);
        if (output_.fatal()) return s;
        if (!s.ok()) Failed(s);
      }
      path->resize(base);
    }
    return Status::OK();
  }

  Status Entry(uint64_t ino, std::string_view name, struct stat st, std::string* path, int depth) {
    if (!SafeName(name)) {
      return Status::Corruption(PrintableName(*path) + ": a stored name that is no file name");
    }
    if (S_ISDIR(st.st_mode)) {
      DSFS_RETURN_IF_ERROR(output_.BeginDir(*path, name, st, false));
      ++dirs_;
      Status s = WalkDir(ino, path, depth + 1);
      Status e = output_.EndDir(st);
      return s.ok() ? e : s;
    }
    if (S_ISLNK(st.st_mode)) {
      std::string_view target;
      DSFS_RETURN_IF_ERROR(fs_.ReadLink(ino, &target).WithContext(*path));
      const std::string copy(target);  // the store's view may not outlive more reads
      DSFS_RETURN_IF_ERROR(output_.Link(*path, name, st, copy));
      ++links_;
      return Status::OK();
    }
    if (!S_ISREG(st.st_mode)) return Status::OK();
    // A view file whose size is known once it is rendered (jpeg-N).
    if (Filesystem::AttrsUnknown(st))
      DSFS_RETURN_IF_ERROR(fs_.GetAttr(ino, &st).WithContext(*path));
    const std::string& p = *path;
    FileReader read = [&](const std::function<Status(std::string_view)>& consume) -> Status {
      for (uint64_t off = 0;;) {
        std::string_view data;
        DSFS_RETURN_IF_ERROR(fs_.Read(ino, off, step_, &buf_, &data).WithContext(p));
        if (data.empty()) return Status::OK();
        DSFS_RETURN_IF_ERROR(consume(data));
        off += data.size();
        if (data.size() < step_ && off >= static_cast<uint64_t>(st.st_size)) return Status::OK();
      }
    };
    DSFS_RETURN_IF_ERROR(output_.File(p, name, st, read));
    ++files_;
    bytes_ += static_cast<uint64_t>(st.st_size);
    if (bar_.Due()) {
      std::lock_guard<std::mutex> lock(report_mu_);
      progress_.files_done = files_;
      progress_.bytes_done = bytes_;
      bar_.Update(progress_);
    }
    return Status::OK();
  }

  void Failed(const Status& s) {
    std::lock_guard<std::mutex> lock(report_mu_);
    if (++failed_ <= kFailuresShown) {
      bar_.Clear();
      err_ << "dsfs: error: " << PrintableName(s.message(), false) << "\n" << std::flush;
    }
  }

  bool Cancelled() const { return cmd_.cancel && cmd_.cancel->load(std::memory_order_relaxed); }

  const Filesystem& fs_;
  Output& output_;
  const ExtractCommand& cmd_;
  std::ostream& out_;
  std::ostream& err_;
  ProgressLine bar_;
  PackProgress progress_;
  ReadBuffer buf_;
  uint64_t step_ = 0;
  uint64_t files_ = 0, bytes_ = 0, dirs_ = 0, links_ = 0, failed_ = 0;
  std::vector<struct stat> parent_stats_;
  std::mutex report_mu_;  // Failed() is called from the writing thread too
};

// Opens DIR (made if missing: its parent must exist) for writing into; refuses a non-empty one
// unless `force`. *fresh: made here or empty, so the root's attributes may be applied to it.
Status OpenTarget(const std::string& dir, bool force, int* fd, bool* fresh) {
  *fresh = false;
  if (::mkdir(dir.c_str(), 0700) == 0) {
    *fresh = true;
  } else if (errno != EEXIST) {
    return Status::FromErrno(errno, dir);
  }
  *fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) return Status::FromErrno(errno, dir);
  if (*fresh) return Status::OK();
  const int probe = ::dup(*fd);
  DIR* d = probe >= 0 ? ::fdopendir(probe) : nullptr;
  if (d == nullptr) {
    if (probe >= 0) ::close(probe);
    return Status::FromErrno(errno, dir);
  }
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  *fresh = empty;
  if (!empty && !force) {
    ::close(*fd);
    *fd = -1;
    return Status::Exists(dir + ": not empty (--force adds to it, replacing nothing)");
  }
  return Status::OK();
}

// A deep tree holds one descriptor per level open while it is written.
void RaiseDescriptorLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 1 << 16);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

Status RunExtract(const ExtractCommand& cmd, std::ostream& out, std::ostream& err) {
  View view;
  DSFS_RETURN_IF_ERROR(ParseView(cmd.view, &view));
  for (const std::string& p : cmd.paths) {
    if (p == ".." || p.rfind("../", 0) == 0 || p.find("/../") != std::string::npos ||
        (p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0)) {
      return Status::InvalidArgument(PrintableName(p) + ": a PATH has no '..'");
    }
  }
  std::unique_ptr<Store> store;
  DSFS_RETURN_IF_ERROR(Store::Open(cmd.store, StoreOptions{}, &store));
  FsOptions fo;
  fo.view = view;
  // The views keep what they render while it is read in steps (a large BMP is decoded once).
  auto cache = view == View::kOriginal ? nullptr : std::make_shared<ByteCache>(256 << 20);
  Filesystem fs(std::move(store), fo, cache);

  // As tar(1) does: a binary stream is no use on a terminal.
  if (cmd.dest == "-" && &out == &std::cout && ::isatty(STDOUT_FILENO)) {
    return Status::InvalidArgument(
        "refusing to write a tar stream to a terminal: give a DIR, or redirect stdout");
  }
  std::unique_ptr<Output> output;
  DirOutput* plain_output = nullptr;  // the directory written into (under the pipeline)
  bool fresh = false;
  Extractor* extractor = nullptr;  // set below; the writing thread reports through it
  if (cmd.dest == "-") {
    auto tar = std::make_unique<TarOutput>(out);
    DSFS_RETURN_IF_ERROR(tar->Open());
    output = std::move(tar);
  } else {
    int fd = -1;
    DSFS_RETURN_IF_ERROR(OpenTarget(cmd.dest, cmd.force, &fd, &fresh));
    RaiseDescriptorLimit();
    auto direct = std::make_unique<DirOutput>(fd);
    plain_output = direct.get();
    if (cmd.threads >= 2) {
      auto d = std::make_unique<PipelinedOutput>(
          std::move(direct), [&extractor](const Status& s) { extractor->Report(s); });
      plain_output = &d->inner();
      output = std::move(d);
    } else {
      output = std::move(direct);
    }
  }
  Extractor x(fs, *output, cmd, out, err);
  extractor = &x;
  Status s;
  if (cmd.paths.empty()) {
    s = x.ExtractAll();
  } else {
    for (const std::string& p : cmd.paths) {
      s = x.ExtractPath(p);
      if (!s.ok() || output->fatal()) break;
    }
  }
  Status finished = output->Finish();  // every queued entry written
  if (s.ok()) s = finished;
  if (s.ok() && plain_output && fresh && cmd.paths.empty()) {
    struct stat root;
    s = fs.GetAttr(kRootIno, &root);
    if (s.ok()) s = plain_output->SetRootAttrs(root);
  }
  if (!s.ok()) return s;
  return x.Summary(cmd.dest);
}

}  // namespace dsfs
