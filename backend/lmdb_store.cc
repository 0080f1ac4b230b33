#include "backend/lmdb_store.h"

#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <utility>
#include <vector>

#include "common/file_watch.h"
#include "common/log.h"

namespace dsfs {
namespace {

// LMDB's meta page starts with a 16-byte page header followed by the magic 0xBEEFC0DE.
constexpr uint32_t kLmdbMagic = 0xBEEFC0DE;
constexpr size_t kLmdbMagicOffset = 16;
// Intermediate commits bound the dirty pages LMDB holds in RAM while packing (its limit is
// 128 Ki pages per transaction). The store is a temporary file until Commit(), so partial
// commits are never visible.
constexpr uint64_t kCommitEveryBytes = 128ull << 20;

Status LmdbError(int rc, std::string_view what, const std::string& path) {
  if (rc == ENOSPC || rc == EDQUOT) {
    return Status::NoSpace(path + ": no space left on device while " + std::string(what));
  }
  if (rc == MDB_MAP_FULL)
    return Status::NoSpace(path + ": store map full while " + std::string(what));
  if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND ||
      rc == MDB_VERSION_MISMATCH || rc == MDB_BAD_TXN) {
    return Status::Corruption(path + ": corrupt store (" + mdb_strerror(rc) + ") while " +
                              std::string(what));
  }
  if (rc > 0) return Status::FromErrno(rc, path + ": " + std::string(what));
  return Status::IOError(path + ": " + std::string(what) + ": " + mdb_strerror(rc));
}

std::atomic<uint64_t> g_next_reader_id{1};

// A store file changed under a reader (docs/hardening.md, "A store changed under a live
// mount"). An admin's `cp new.db mounted.db` truncates the inode the reader has mapped and
// writes another store into it: reads of the pages past its end then fault (SIGBUS), and the
// pages it rewrote hold another store's tree. The mapping is guarded (common/file_watch.h):
// a fault reads zeros, which LMDB takes for a damaged page (MDB_CORRUPTED: a zeroed page is no
// branch and no leaf) and dsfs's checksums refuse. The file is watched: once its meta pages
// are no longer the ones it was opened with (the first thing such a copy truncates and
// rewrites), the reader answers every read with IOError and never lets LMDB walk the new
// tree with the old one's root (LMDB asserts, or reads anywhere, on a page that is not what
// it expects). A truncation that keeps the meta pages keeps the reader serving whatever is
// still there. Either way the change is logged once, from the watch thread.
class LmdbReader final : public KvReader {
 public:
  LmdbReader(MDB_env* env, MDB_dbi dbi, std::string path)
      : env_(env), dbi_(dbi), path_(std::move(path)), id_(g_next_reader_id.fetch_add(1)) {}
  ~LmdbReader() override {
    watch_.reset();  // no callback runs from here on
    for (auto& t : threads_) CloseThread(t.get());
    mdb_env_close(env_);
  }

  Status Get(std::string_view key, PinnedValue* value) override {
    Thread* t = nullptr;
    DSFS_RETURN_IF_ERROR(ThreadState(&t));
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v;
    int rc = mdb_get(t->txn, dbi_, &k, &v);
    if (rc == MDB_NOTFOUND) return Status::NotFound("key not found");
    if (rc != 0) return Failed(t, rc);
    DSFS_RETURN_IF_ERROR(CheckInFile(v));
    // The map is read-only and stays mapped until the environment closes (a fault in it reads
    // zeros, see above): no pin needed.
    value->Set(std::string_view(static_cast<const char*>(v.mv_data), v.mv_size), nullptr);
    return Status::OK();
  }

  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    Thread* t = nullptr;
    DSFS_RETURN_IF_ERROR(ThreadState(&t));
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v;
    // LMDB refuses empty keys: the first key at or after "" is the first key.
    int rc = mdb_cursor_get(t->cursor, &k, &v, key.empty() ? MDB_FIRST : MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND) return Status::NotFound("no key at or after");
    if (rc != 0) return Failed(t, rc);
    DSFS_RETURN_IF_ERROR(CheckInFile(k));
    DSFS_RETURN_IF_ERROR(CheckInFile(v));
    found_key->assign(static_cast<const char*>(k.mv_data), k.mv_size);
    value->Set(std::string_view(static_cast<const char*>(v.mv_data), v.mv_size), nullptr);
    return Status::OK();
  }

  std::string_view Name() const override { return "lmdb"; }

  void ReleaseCachedMemory() override {
    // A read-only shared file mapping: MADV_DONTNEED only drops this process's page-table
    // entries (its RSS); the pages stay in the page cache and fault back in on the next touch.
    if (map_addr_) {
      int rc = ::madvise(map_addr_, map_len_, MADV_DONTNEED);
      Log()->debug("released mapped pages of {}: {}", path_, rc == 0 ? "ok" : std::strerror(errno));
    }
  }

  void WillNeed(std::string_view range) override {
    // The map is opened MDB_NORDAHEAD (random small reads must not drag in neighbours), so a
    // large value would otherwise fault in one 4 KiB page at a time from a cold disk.
    WillNeedMapped(range);
  }

  // LMDB does not say where it mapped the file (me_mapaddr is only set for MDB_FIXEDMAP):
  // find the mapping of this file (device and inode) in /proc/self/maps, the one that holds
  // the store's first key (another reader of the same file in this process has a mapping of
  // its own), or without a key the first at offset 0. Then guards it and watches the file.
  void LocateMap() {
    struct stat st;
    if (mdb_env_get_fd(env_, &fd_) != 0 || fd_ < 0 || ::fstat(fd_, &st) != 0) {
      fd_ = -1;
      return;
    }
    const void* inside = nullptr;
    MDB_txn* txn = nullptr;
    MDB_cursor* cursor = nullptr;
    if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn) == 0) {
      MDB_val k, v;
      if (mdb_cursor_open(txn, dbi_, &cursor) == 0 &&
          mdb_cursor_get(cursor, &k, &v, MDB_FIRST) == 0) {
        inside = k.mv_data;
      }
      if (cursor) mdb_cursor_close(cursor);
      mdb_txn_abort(txn);
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(inside);
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      unsigned long start, end, offset, inode;
      unsigned int major, minor;
      char perms[8];
      if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %x:%x %lu", &start, &end, perms, &offset,
                      &major, &minor, &inode) != 7) {
        continue;
      }
      if (inode == st.st_ino && makedev(major, minor) == st.st_dev && offset == 0 &&
          (inside == nullptr || (at >= start && at < end))) {
        map_addr_ = reinterpret_cast<void*>(start);
        map_len_ = end - start;
        break;
      }
    }
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    // The meta pages as opened: what the watch compares the file's with.
    MDB_stat ms;
    const size_t psize = mdb_env_stat(env_, &ms) == 0 ? ms.ms_psize : 4096;
    meta_.resize(2 * psize);
    if (::pread(fd_, meta_.data(), meta_.size(), 0) != static_cast<ssize_t>(meta_.size())) {
      meta_.clear();
    }
    watch_ =
        FileWatch::Start(fd_, map_addr_, map_len_, [this](FileWatch::Event e) { OnChange(e); });
  }

 private:
  // One read transaction (and cursor) per thread, opened on first use and kept for the
  // reader's life: the store is immutable while served, and LMDB transactions must not be
  // shared between threads. A transaction that failed (LMDB marks it failed for good on a
  // damaged page) is closed and the thread's next read opens another.
  struct Thread {
    MDB_txn* txn = nullptr;
    MDB_cursor* cursor = nullptr;
  };
  static void CloseThread(Thread* t) {
    if (t->cursor) mdb_cursor_close(t->cursor);
    if (t->txn) mdb_txn_abort(t->txn);
    t->cursor = nullptr;
    t->txn = nullptr;
  }
  Status Begin(Thread* t) {
    if (replaced_.load(std::memory_order_acquire)) {
      return Status::IOError(path_ +
                             ": the store was rewritten under the mount (remount to serve it)");
    }
    if (t->txn) return Status::OK();
    int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t->txn);
    if (rc != 0) {
      t->txn = nullptr;
      return LmdbError(rc, "starting a read transaction", path_);
    }
    rc = mdb_cursor_open(t->txn, dbi_, &t->cursor);
    if (rc != 0) {
      t->cursor = nullptr;
      CloseThread(t);
      return LmdbError(rc, "opening a cursor", path_);
    }
    return Status::OK();
  }
  // An LMDB error `rc` of thread state `t`: closes its transaction, says what happened.
  // Once the file is known to have changed, as IOError: the damage is the change, logged
  // once, not a damaged store to log on every read of it.
  Status Failed(Thread* t, int rc) {
    CloseThread(t);
    if (replaced_.load(std::memory_order_acquire)) return Begin(t);  // the reason
    if (announced_.load(std::memory_order_acquire)) {
      return Status::IOError(path_ +
                             ": reading a store that changed while mounted: " + mdb_strerror(rc));
    }
    return LmdbError(rc, "reading", path_);
  }
  // Corruption unless `v` lies inside the file as it was opened: values and keys of an intact
  // tree always do; one of a page that another store's bytes replaced may point anywhere.
  Status CheckInFile(const MDB_val& v) const {
    if (map_addr_ == nullptr) return Status::OK();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(map_addr_);
    const uintptr_t at = reinterpret_cast<uintptr_t>(v.mv_data);
    if (at < begin || at - begin > file_bytes_ || v.mv_size > file_bytes_ - (at - begin)) {
      return Status::Corruption(path_ + ": corrupt store (a record lies outside the file)");
    }
    return Status::OK();
  }

  // Called by the watch thread after the file was written to, truncated, or a read of its
  // mapping faulted: decides whether the reader may go on, and says what happened, once.
  void OnChange(FileWatch::Event event) {
    struct stat st;
    const bool stat_ok = ::fstat(fd_, &st) == 0;
    const uint64_t now = stat_ok ? static_cast<uint64_t>(st.st_size) : 0;
    std::string meta(meta_.size(), '\0');
    const bool same_meta =
        !meta_.empty() &&
        ::pread(fd_, meta.data(), meta.size(), 0) == static_cast<ssize_t>(meta.size()) &&
        meta == meta_;
    std::string what;
    if (!same_meta) {
      replaced_.store(true, std::memory_order_release);
      what = "it was rewritten (" + std::to_string(now) + " bytes now, " +
             std::to_string(file_bytes_) +
             " when opened): every read of it fails (EIO) but what the cache holds; "
             "remount to serve the new store";
    } else if (now < file_bytes_) {
      what = "it was truncated (" + std::to_string(now) + " of its " + std::to_string(file_bytes_) +
             " bytes left): files whose bytes are gone fail (EIO), the others are served";
    } else {
      what = event == FileWatch::Event::kFaulted
                 ? "a page of it could not be read: files on it fail (EIO)"
                 : "it was written to: files whose bytes changed fail (EIO)";
    }
    if (!announced_.exchange(true)) {
      Log()->error("{}: the store changed under the mount: {}", path_, what);
    } else {
      Log()->debug("{}: the store changed again: {}", path_, what);
    }
  }

  Status ThreadState(Thread** out) {
    thread_local std::vector<std::pair<uint64_t, Thread*>> cache;
    for (const auto& [id, t] : cache) {
      if (id == id_) {
        *out = t;
        return Begin(t);
      }
    }
    auto t = std::make_unique<Thread>();
    DSFS_RETURN_IF_ERROR(Begin(t.get()));
    Thread* raw = t.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads_.push_back(std::move(t));
    }
    // Entries of readers that are gone are never matched again (ids are unique); keep the
    // per-thread list short for threads that outlive many readers (tests).
    if (cache.size() >= 64) cache.erase(cache.begin());
    cache.emplace_back(id_, raw);
    *out = raw;
    return Status::OK();
  }

  MDB_env* env_;
  MDB_dbi dbi_;
  std::string path_;
  uint64_t id_;
  void* map_addr_ = nullptr;  // the file's mapping, for ReleaseCachedMemory
  size_t map_len_ = 0;
  uint64_t file_bytes_ = 0;                       // the file's size when opened
  int fd_ = -1;                                   // LMDB's descriptor of the file
  std::string meta_;                              // its meta pages when opened (empty: unread)
  std::atomic<bool> replaced_{false};             // its meta pages changed: no more reads
  std::atomic<bool> announced_{false};            // the change has been logged
  std::unique_ptr<FileWatch> watch_;              // of the file and the mapping; set by LocateMap
  std::mutex mu_;                                 // guards threads_
  std::vector<std::unique_ptr<Thread>> threads_;  // every thread's state, closed at the end
};

}  // namespace

ValueSizing LmdbValueSizing() {
  // LMDB stores a large value on whole 4 KiB pages, the first with a 16-byte page header.
  ValueSizing v;
  v.page_bytes = 4096;
  v.page_header_bytes = 16;
  return v;
}

namespace {

class LmdbWriter final : public KvWriter {
 public:
  // `dest`: where Commit puts the store (and what it may replace there). `lock_fd` (an
  // updater's lock on the store it replaces; may be -1) is closed with the writer.
  LmdbWriter(StoreDestination dest, std::string tmp_path, int lock_fd = -1)
      : dest_(std::move(dest)), tmp_(std::move(tmp_path)), lock_fd_(lock_fd) {}
  ~LmdbWriter() override {
    if (txn_) mdb_txn_abort(txn_);
    if (env_) mdb_env_close(env_);
    if (!committed_) ::unlink(tmp_.c_str());
    if (tmp_lock_fd_ >= 0) ::close(tmp_lock_fd_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  Status Open(uint64_t map_size) {
    int rc = mdb_env_create(&env_);
    if (rc != 0) return LmdbError(rc, "creating environment", tmp_);
    rc = mdb_env_set_mapsize(env_, map_size);
    if (rc != 0) return LmdbError(rc, "setting map size", tmp_);
    rc = mdb_env_open(env_, tmp_.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    if (rc != 0) return LmdbError(rc, "creating the store", tmp_);
    tmp_lock_fd_ = LockTemporary(tmp_);  // alive, to writers of other PID namespaces too
    DSFS_RETURN_IF_ERROR(Begin());
    // A copy of an existing store: appending (MDB_APPEND) is right only past its last key.
    MDB_cursor* c = nullptr;
    if (mdb_cursor_open(txn_, dbi_, &c) == 0) {
      MDB_val k, v;
      if (mdb_cursor_get(c, &k, &v, MDB_LAST) == 0) {
        last_key_.assign(static_cast<const char*>(k.mv_data), k.mv_size);
      }
      mdb_cursor_close(c);
    }
    return Status::OK();
  }

  ValueSizing value_sizing() const override { return LmdbValueSizing(); }

  Status Put(std::string_view key, std::string_view value) override {
    if (!txn_) return Status::IOError(tmp_ + ": writer already failed");
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    bool ascending = last_key_.empty() || key > std::string_view(last_key_);
    int rc = mdb_put(txn_, dbi_, &k, &v, ascending ? MDB_APPEND : 0);
    if (rc != 0) {
      mdb_txn_abort(txn_);
      txn_ = nullptr;
      if (rc == EIO && OutOfSpace()) rc = ENOSPC;  // a spill to disk hit a full disk
      return LmdbError(rc, "writing", tmp_);
    }
    if (ascending) last_key_.assign(key);
    pending_bytes_ += key.size() + value.size();
    if (pending_bytes_ >= kCommitEveryBytes) {
      DSFS_RETURN_IF_ERROR(CommitTxn());
      DSFS_RETURN_IF_ERROR(Begin());
    }
    return Status::OK();
  }

  Status Commit() override {
    if (!txn_) return Status::IOError(tmp_ + ": writer already failed");
    DSFS_RETURN_IF_ERROR(CommitTxn());
    int rc = mdb_env_sync(env_, 1);
    if (rc == EIO && OutOfSpace()) rc = ENOSPC;
    if (rc != 0) return LmdbError(rc, "syncing", tmp_);
    mdb_env_close(env_);
    env_ = nullptr;
    DSFS_RETURN_IF_ERROR(MoveStoreIntoPlace(tmp_, dest_));
    if (tmp_lock_fd_ >= 0) ::close(tmp_lock_fd_);  // the store now: no temporary to hold
    tmp_lock_fd_ = -1;
    committed_ = true;
    return Status::OK();
  }

 private:
  Status Begin() {
    int rc = mdb_txn_begin(env_, nullptr, 0, &txn_);
    if (rc != 0) {
      txn_ = nullptr;
      return LmdbError(rc, "starting a write transaction", tmp_);
    }
    rc = mdb_dbi_open(txn_, nullptr, 0, &dbi_);
    if (rc != 0) return LmdbError(rc, "opening the database", tmp_);
    pending_bytes_ = 0;
    return Status::OK();
  }
  Status CommitTxn() {
    int rc = mdb_txn_commit(txn_);
    txn_ = nullptr;
    if (rc == EIO && OutOfSpace()) rc = ENOSPC;
    if (rc != 0) return LmdbError(rc, "committing", tmp_);
    return Status::OK();
  }
  // LMDB reports a short write (the disk filled up mid-write) as EIO; tell the two apart by
  // looking at what is left on the filesystem.
  bool OutOfSpace() const {
    struct statvfs vfs;
    std::string dir = std::filesystem::path(tmp_).parent_path().string();
    if (::statvfs(dir.empty() ? "." : dir.c_str(), &vfs) != 0) return false;
    return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize < pending_bytes_ + (1u << 20);
  }

  StoreDestination dest_;
  std::string tmp_;
  int tmp_lock_fd_ = -1;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  std::string last_key_;
  uint64_t pending_bytes_ = 0;
  bool committed_ = false;
  int lock_fd_ = -1;
};

// Copies the file `from` to `to` (a new file): copy_file_range, so the kernel copies (or
// shares the extents, on filesystems that can) without a pass through user space.
Status CopyFile(const std::string& from, const std::string& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::FromErrno(errno, from);
  // Readable by no one else until it gets the store's own mode (MoveStoreIntoPlace).
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    ::close(in);
    return Status::FromErrno(err, "cannot create " + to);
  }
  Status s;
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      s = errno == ENOSPC || errno == EDQUOT
              ? Status::NoSpace(to + ": no space left on device while copying the store")
              : Status::FromErrno(errno, "copying " + from + " to " + to);
      break;
    }
  }
  ::close(in);
  ::close(out);
  if (!s.ok()) ::unlink(to.c_str());
  return s;
}

// ---------------------------------------------------------------------------------------------
// The structural check of a store opened read-only (docs/hardening.md). LMDB trusts its pages:
// a damaged page number or node offset in a branch or leaf page makes it read wherever that
// leads, and the process dies of SIGSEGV or SIGBUS before dsfs sees a value (whose checksum
// would have caught the damage). So before the store is served, a child process walks the
// whole main database with LMDB itself: every key in order with a cursor, each one looked up
// again with mdb_get (that descends the branch pages, comparing their keys as every lookup
// does), every key and value pointer checked to lie inside the file. What a damaged tree does
// to LMDB happens in the child; the parent only reads its report, or how it died.
//
// The child uses the transaction and cursor the parent opened before fork(), so it allocates
// nothing and calls nothing but LMDB's read functions and a few system calls: it is safe to
// fork from a process that already runs threads (the walk needs no lock: MDB_NOLOCK, read
// only). Values are not read: LMDB computes an overflow value's pointer without touching its
// pages, so the walk reads the branch and leaf pages only (31 of 72,400 pages of a 1M-file
// store).

enum class TreeFault : uint32_t {
  kNone = 0,
  kLmdbError,    // LMDB returned an error while walking (lmdb_rc)
  kKeyOrder,     // a key not greater than the one before it
  kKeyLost,      // a key the cursor found that a lookup does not find
  kOtherValue,   // a lookup of a key finds another value than the cursor
  kTooMany,      // more entries than the database records
  kTooFew,       // fewer entries than the database records
  kOutsideFile,  // a key or value pointer outside the file's bytes
};

// What the child writes to its pipe (one write, well under PIPE_BUF: atomic).
struct TreeReport {
  TreeFault fault = TreeFault::kNone;
  int32_t lmdb_rc = 0;
  uint64_t entries = 0;  // entries walked
};

// One mapping of the store's file (offset 0) in this process.
struct MappedRange {
  uintptr_t begin = 0, end = 0;
};
constexpr size_t kMaxRanges = 16;

// The mappings of the file (device, inode) at offset 0 in /proc/self/maps, at most kMaxRanges:
// LMDB does not say where it mapped the file. Another reader of the same file in this process
// has a mapping of its own; the child picks the one that holds the first key.
size_t FileMappings(dev_t dev, ino_t ino, MappedRange* ranges) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (n < kMaxRanges && std::getline(maps, line)) {
    unsigned long start, end, offset, inode;
    unsigned int major, minor;
    char perms[8];
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %x:%x %lu", &start, &end, perms, &offset, &major,
                    &minor, &inode) != 7) {
      continue;
    }
    if (inode == ino && makedev(major, minor) == dev && offset == 0) {
      ranges[n++] = {static_cast<uintptr_t>(start), static_cast<uintptr_t>(end)};
    }
  }
  return n;
}

// The walk itself, in the child. No allocation, no logging: LMDB's read functions only.
TreeReport WalkTree(MDB_txn* txn, MDB_dbi dbi, MDB_cursor* cursor, uint64_t expected,
                    const MappedRange* ranges, size_t nranges, uint64_t file_size) {
  TreeReport r;
  uintptr_t lo = 0, hi = 0;  // the file's bytes in the map that holds the first key
  auto inside = [&](const MDB_val& v) {
    uintptr_t p = reinterpret_cast<uintptr_t>(v.mv_data);
    return nranges == 0 || (p >= lo && p <= hi && v.mv_size <= hi - p);
  };
  MDB_val key, value, prev{0, nullptr};
  int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST);
  for (; rc == 0; rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)) {
    if (r.entries == 0 && nranges > 0) {
      uintptr_t p = reinterpret_cast<uintptr_t>(key.mv_data);
      for (size_t i = 0; i < nranges; ++i) {
        if (p >= ranges[i].begin && p < ranges[i].end) {
          lo = ranges[i].begin;
          hi = lo + std::min<uint64_t>(file_size, ranges[i].end - ranges[i].begin);
        }
      }
    }
    // Before anything reads them: a key LMDB would compare, a value dsfs would read.
    if (!inside(key) || !inside(value)) {
      r.fault = TreeFault::kOutsideFile;
      return r;
    }
    if (++r.entries > expected) {
      r.fault = TreeFault::kTooMany;
      return r;
    }
    if (r.entries > 1 && mdb_cmp(txn, dbi, &prev, &key) >= 0) {
      r.fault = TreeFault::kKeyOrder;
      return r;
    }
    MDB_val found;
    int g = mdb_get(txn, dbi, &key, &found);
    if (g != 0) {
      r.fault = g == MDB_NOTFOUND ? TreeFault::kKeyLost : TreeFault::kLmdbError;
      r.lmdb_rc = g;
      return r;
    }
    if (found.mv_data != value.mv_data || found.mv_size != value.mv_size) {
      r.fault = TreeFault::kOtherValue;
      return r;
    }
    prev = key;  // points into the map, valid for the whole read-only transaction
  }
  if (rc != MDB_NOTFOUND) {
    r.fault = TreeFault::kLmdbError;
    r.lmdb_rc = rc;
  } else if (r.entries != expected) {
    r.fault = TreeFault::kTooFew;
  }
  return r;
}

[[noreturn]] void TreeCheckChild(pid_t parent, int report_fd, MDB_txn* txn, MDB_dbi dbi,
                                 MDB_cursor* cursor, uint64_t expected, const MappedRange* ranges,
                                 size_t nranges, uint64_t file_size) {
  // Ends with the process that waits for it; never leaves a core file of a crash it was
  // made to have.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(2);
  ::prctl(PR_SET_DUMPABLE, 0);
  // Default actions: a fault kills it (whatever handlers the parent has, e.g. a sanitizer's),
  // and so does an interrupt of the command it belongs to.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS, SIGINT, SIGTERM,
                  SIGHUP, SIGPIPE}) {
    ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing it could print (LMDB's assertions) reaches the command's stderr: the parent says
  // what happened, in one line. It keeps no other descriptor open, so the pipe of a check
  // another thread runs at the same time sees its end when that check's child exits.
  if (report_fd < 3) report_fd = ::fcntl(report_fd, F_DUPFD, 3);
  int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  if (report_fd > 3) ::close_range(3, static_cast<unsigned>(report_fd) - 1, 0);
  if (report_fd >= 3) ::close_range(static_cast<unsigned>(report_fd) + 1, ~0u, 0);
  TreeReport r = WalkTree(txn, dbi, cursor, expected, ranges, nranges, file_size);
  ssize_t n = ::write(report_fd, &r, sizeof(r));
  _exit(n == static_cast<ssize_t>(sizeof(r)) ? 0 : 3);
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool IsFaultSignal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT ||
         sig == SIGTRAP || sig == SIGSYS;
}

// Runs the check on the open environment `env` (its main database `dbi`) of the store file
// `path` (`st`: its stat). `timeout`: how long the walk may take before it is killed.
Status CheckTree(MDB_env* env, MDB_dbi dbi, const std::string& path, const struct stat& st,
                 std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) return LmdbError(rc, "starting a read transaction", path);
  MDB_stat ds;
  rc = mdb_stat(txn, dbi, &ds);
  MDB_cursor* cursor = nullptr;
  if (rc == 0) rc = mdb_cursor_open(txn, dbi, &cursor);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError(rc, "opening a cursor", path);
  }
  MappedRange ranges[kMaxRanges];
  size_t nranges = FileMappings(st.st_dev, st.st_ino, ranges);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    int err = errno;
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    return Status::FromErrno(err, path + ": checking its LMDB B-tree: pipe");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    TreeCheckChild(parent, fds[1], txn, dbi, cursor, ds.ms_entries, ranges, nranges,
                   static_cast<uint64_t>(st.st_size));
  }
  const int fork_errno = errno;
  // The child has its own copy of the transaction; this process is done with it.
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return Status::FromErrno(fork_errno, path + ": checking its LMDB B-tree: fork");
  }
  // Its report, its end (the pipe's end of file), or the deadline.
  TreeReport report;
  size_t got = 0;
  bool timed_out = false;
  const auto deadline = start + timeout;
  while (got < sizeof(report)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int prc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (prc < 0 && errno != EINTR) break;
    if (prc <= 0) continue;
    ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&report) + got, sizeof(report) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  pid_t w;
  do {
    w = ::waitpid(pid, &wstatus, 0);
  } while (w < 0 && errno == EINTR);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) {
    return Status::IOError(path + ": the check of its LMDB B-tree did not finish in " +
                           std::to_string(timeout.count() / 1000) +
                           " s (a damaged store, or a stalled disk)");
  }
  const std::string damaged = path + ": damaged store: its LMDB B-tree is inconsistent (";
  if (got < sizeof(report)) {
    // It ended without a report: how?
    if (w == pid && WIFSIGNALED(wstatus)) {
      int sig = WTERMSIG(wstatus);
      if (IsFaultSignal(sig)) {
        return Status::Corruption(damaged + "the check died of " + SignalName(sig) + ")");
      }
      return Status::IOError(path + ": the check of its LMDB B-tree was ended by " +
                             SignalName(sig));
    }
    if (w == pid && WIFEXITED(wstatus)) {
      return Status::Corruption(damaged + "the check exited with status " +
                                std::to_string(WEXITSTATUS(wstatus)) + ")");
    }
    return Status::Corruption(damaged + "the check ended without a report)");
  }
  // An if-chain, not a switch: clang's AddressSanitizer reports a stack-use-after-scope for
  // the temporaries of a switch's cases (the logger's shared_ptr) that jump past each other.
  const TreeFault f = report.fault;
  const std::string entry = std::to_string(report.entries);
  if (f == TreeFault::kNone) {
    Log()->debug(
        "checked the LMDB B-tree of {}: {} entries, {} branch and {} leaf pages in {:.1f} ms", path,
        report.entries, ds.ms_branch_pages, ds.ms_leaf_pages, ms);
    return Status::OK();
  }
  std::string why;
  if (f == TreeFault::kLmdbError) {
    why = std::string(mdb_strerror(report.lmdb_rc)) + " after " + entry + " entries";
  } else if (f == TreeFault::kKeyOrder) {
    why = "entry " + entry + " is out of order";
  } else if (f == TreeFault::kKeyLost) {
    why = "a lookup does not find entry " + entry;
  } else if (f == TreeFault::kOtherValue) {
    why = "a lookup of entry " + entry + " finds another value";
  } else if (f == TreeFault::kTooMany || f == TreeFault::kTooFew) {
    why = entry + (f == TreeFault::kTooMany ? " or more" : "") + " entries where it records " +
          std::to_string(ds.ms_entries);
  } else if (f == TreeFault::kOutsideFile) {
    why = "entry " + std::to_string(report.entries + 1) + " lies outside the file";
  } else {
    why = "an unknown report";
  }
  return Status::Corruption(damaged + why + ")");
}

// The bound on a check: generous, since a legitimate walk reads only the branch and leaf pages
// (a few per thousand of a store's pages), but a store on a stalled disk must not hang a mount.
std::chrono::milliseconds DefaultCheckTimeout(MDB_env* env) {
  MDB_stat st;
  uint64_t pages = mdb_env_stat(env, &st) == 0 ? st.ms_branch_pages + st.ms_leaf_pages : 0;
  // 60 s, and 10 ms per page to read (a disk seek each), at most 10 minutes.
  return std::chrono::milliseconds(60'000 + std::min<uint64_t>(pages, 54'000) * 10);
}

}  // namespace

bool LooksLikeLmdb(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint32_t magic = 0;
  ssize_t n = ::pread(fd, &magic, sizeof(magic), kLmdbMagicOffset);
  ::close(fd);
  return n == sizeof(magic) && magic == kLmdbMagic;
}

namespace {

// OpenLmdbReader, with the tree check killed after `timeout` if given (else DefaultCheckTimeout).
Status OpenCheckedReader(const std::string& path, const KvReaderOptions& options,
                         std::optional<std::chrono::milliseconds> timeout,
                         std::unique_ptr<KvReader>* reader) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  if (!LooksLikeLmdb(path)) return Status::InvalidArgument(path + ": not a dsfs store");
  MDB_env* env = nullptr;
  int rc = mdb_env_create(&env);
  if (rc != 0) return LmdbError(rc, "creating environment", path);
  unsigned flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR | MDB_NOTLS;
  if (options.random_access) flags |= MDB_NORDAHEAD;
  rc = mdb_env_open(env, path.c_str(), flags, 0);
  if (rc != 0) {
    mdb_env_close(env);
    return LmdbError(rc, "opening", path);
  }
  MDB_envinfo info;
  MDB_stat stat;
  mdb_env_info(env, &info);
  mdb_env_stat(env, &stat);
  uint64_t needed = (static_cast<uint64_t>(info.me_last_pgno) + 1) * stat.ms_psize;
  if (static_cast<uint64_t>(st.st_size) < needed) {
    mdb_env_close(env);
    return Status::Corruption(path + ": store is truncated (" + std::to_string(st.st_size) +
                              " bytes, expected at least " + std::to_string(needed) + ")");
  }
  MDB_txn* txn = nullptr;
  rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) {
    mdb_env_close(env);
    return LmdbError(rc, "starting a read transaction", path);
  }
  MDB_dbi dbi;
  rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
  mdb_txn_abort(txn);
  if (rc != 0) {
    mdb_env_close(env);
    return LmdbError(rc, "opening the database", path);
  }
  // Before anything reads the tree in this process: a damaged one is refused here, in one line.
  Status check = CheckTree(env, dbi, path, st, timeout ? *timeout : DefaultCheckTimeout(env));
  if (!check.ok()) {
    mdb_env_close(env);
    return check;
  }
  auto r = std::make_unique<LmdbReader>(env, dbi, path);
  r->LocateMap();
  *reader = std::move(r);
  return Status::OK();
}

}  // namespace

Status OpenLmdbReader(const std::string& path, const KvReaderOptions& options,
                      std::unique_ptr<KvReader>* reader) {
  return OpenCheckedReader(path, options, std::nullopt, reader);
}

Status CheckLmdbTree(const std::string& path, std::optional<std::chrono::milliseconds> timeout) {
  std::unique_ptr<KvReader> reader;
  return OpenCheckedReader(path, KvReaderOptions(), timeout, &reader);  // which checks
}

Status NewLmdbWriter(const std::string& path, const KvWriterOptions& options,
                     std::unique_ptr<KvWriter>* writer) {
  StoreDestination dest;
  DSFS_RETURN_IF_ERROR(CheckReplaceable(path, options, &dest));
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  // Address space is cheap on 64-bit and LMDB grows the file only as pages are written.
  uint64_t map_size = options.expected_bytes * 2 + (8ull << 30);
  auto w = std::make_unique<LmdbWriter>(std::move(dest), tmp);
  DSFS_RETURN_IF_ERROR(w->Open(map_size));
  *writer = std::move(w);
  return Status::OK();
}

Status NewLmdbUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer) {
  if (!LooksLikeLmdb(path)) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
    return Status::InvalidArgument(path + ": not a dsfs store");
  }
  // Readers never lock (MDB_NOLOCK); updaters take an exclusive flock on the store so two of
  // them cannot both copy the same version (the second one's rename would drop the first's
  // keys). A store renamed over while we waited is not the one to update: look again.
  int fd = -1;
  for (int attempt = 0;; ++attempt) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::IOError(path + ": the store is being written by another process");
      }
      return Status::FromErrno(err, "locking " + path);
    }
    struct stat locked, now;
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &now) == 0 &&
        locked.st_ino == now.st_ino && locked.st_dev == now.st_dev) {
      break;
    }
    ::close(fd);
    if (attempt > 10) return Status::IOError(path + ": the store keeps changing");
  }
  // The new version is a copy of the store (records byte for byte) that the puts then change,
  // renamed over the store by Commit: atomic, and a mounted reader keeps its open file (LMDB
  // readers opened MDB_NOLOCK could not protect their pages from writers in the same file).
  // Copies left by updaters that were killed (their process is gone) are garbage.
  RemoveDeadTemporaries(path);
  // The writer reads the copy's tree (its last key) with LMDB in this process: the store's
  // tree is checked first, as for every read-only open.
  Status check = CheckLmdbTree(path);
  if (!check.ok()) {
    ::close(fd);
    return check;
  }
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  Status s = CopyFile(path, tmp);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, path);
  }
  StoreDestination dest;
  dest.path = path;
  dest.found = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint32_t>(st.st_mode)};
  uint64_t size = static_cast<uint64_t>(st.st_size);
  auto w = std::make_unique<LmdbWriter>(std::move(dest), tmp, fd);
  DSFS_RETURN_IF_ERROR(w->Open(size * 2 + (8ull << 30)));
  *writer = std::move(w);
  return Status::OK();
}

}  // namespace dsfs
