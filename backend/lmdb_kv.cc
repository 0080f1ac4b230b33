#include "backend/lmdb_kv.h"

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

#include "backend/lmdb_check.h"
#include "backend/per_thread.h"
#include "backend/store_files.h"
#include "common/file_watch.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace dsfs {
namespace {

using lmdb::CheckTree;
using lmdb::DefaultCheckTimeout;
using lmdb::LmdbError;

// LMDB's meta page starts with a 16-byte page header followed by the magic 0xBEEFC0DE.
constexpr uint32_t kLmdbMagic = 0xBEEFC0DE;
constexpr size_t kLmdbMagicOffset = 16;
// Intermediate commits bound the dirty pages LMDB holds in RAM while packing (its limit is
// 128 Ki pages per transaction). The store is a temporary file until Commit(), so partial
// commits are never visible.
constexpr uint64_t kCommitEveryBytes = 128ull << 20;

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
      : env_(env), dbi_(dbi), path_(std::move(path)) {}
  ~LmdbReader() override {
    watch_.reset();    // no callback runs from here on
    threads_.Clear();  // their transactions, before the environment
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
    ~Thread() { CloseThread(this); }
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
    DSFS_RETURN_IF_ERROR(threads_.Get(
        [](std::unique_ptr<Thread>* made) {
          *made = std::make_unique<Thread>();
          return Status::OK();
        },
        out));
    return Begin(*out);
  }

  MDB_env* env_;
  MDB_dbi dbi_;
  std::string path_;
  void* map_addr_ = nullptr;  // the file's mapping, for ReleaseCachedMemory
  size_t map_len_ = 0;
  uint64_t file_bytes_ = 0;             // the file's size when opened
  int fd_ = -1;                         // LMDB's descriptor of the file
  std::string meta_;                    // its meta pages when opened (empty: unread)
  std::atomic<bool> replaced_{false};   // its meta pages changed: no more reads
  std::atomic<bool> announced_{false};  // the change has been logged
  std::unique_ptr<FileWatch> watch_;    // of the file and the mapping; set by LocateMap
  PerThread<Thread> threads_;           // every thread's state, closed at the end
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
  // `dest`: where Commit puts the store (and what it may replace there). `lock` (an
  // updater's lock on the store it replaces; may be none) is closed with the writer.
  LmdbWriter(StoreDestination dest, std::string tmp_path, UniqueFd lock = UniqueFd())
      : dest_(std::move(dest)), tmp_(std::move(tmp_path)), lock_(std::move(lock)) {}
  ~LmdbWriter() override {
    if (txn_) mdb_txn_abort(txn_);
    if (env_) mdb_env_close(env_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  Status Open(uint64_t map_size) {
    int rc = mdb_env_create(&env_);
    if (rc != 0) return LmdbError(rc, "creating environment", tmp_);
    rc = mdb_env_set_mapsize(env_, map_size);
    if (rc != 0) return LmdbError(rc, "setting map size", tmp_);
    rc = mdb_env_open(env_, tmp_.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    if (rc != 0) return LmdbError(rc, "creating the store", tmp_);
    tmp_lock_ = LockTemporary(tmp_);  // alive, to writers of other PID namespaces too
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
    tmp_lock_.reset();  // the store now: no temporary to hold
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
  UniqueFd tmp_lock_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  std::string last_key_;
  uint64_t pending_bytes_ = 0;
  bool committed_ = false;
  UniqueFd lock_;
};

// Copies the file `from` to `to` (a new file): copy_file_range, so the kernel copies (or
// shares the extents, on filesystems that can) without a pass through user space.
Status CopyFile(const std::string& from, const std::string& to) {
  const UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return Status::FromErrno(errno, from);
  // Readable by no one else until it gets the store's own mode (MoveStoreIntoPlace).
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return Status::FromErrno(errno, "cannot create " + to);
  Status s;
  for (;;) {
    ssize_t n = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, 1 << 30, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      s = errno == ENOSPC || errno == EDQUOT
              ? Status::NoSpace(to + ": no space left on device while copying the store")
              : Status::FromErrno(errno, "copying " + from + " to " + to);
      break;
    }
  }
  out.reset();
  if (!s.ok()) ::unlink(to.c_str());
  return s;
}

}  // namespace

bool LooksLikeLmdb(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  uint32_t magic = 0;
  const ssize_t n = ::pread(fd.get(), &magic, sizeof(magic), kLmdbMagicOffset);
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

namespace {

// Readers never lock (MDB_NOLOCK); updaters take an exclusive flock on the store so two of
// them cannot both copy the same version (the second one's rename would drop the first's
// keys). A store renamed over while we waited is not the one to update: look again.
Status LockForUpdate(const std::string& path, UniqueFd* lock, struct stat* st) {
  for (int attempt = 0;; ++attempt) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Status::FromErrno(errno, path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return Status::IOError(path + ": the store is being written by another process");
      }
      return Status::FromErrno(errno, "locking " + path);
    }
    struct stat now;
    if (::fstat(fd.get(), st) == 0 && ::stat(path.c_str(), &now) == 0 && st->st_ino == now.st_ino &&
        st->st_dev == now.st_dev) {
      *lock = std::move(fd);
      return Status::OK();
    }
    if (attempt > 10) return Status::IOError(path + ": the store keeps changing");
  }
}

}  // namespace

Status NewLmdbUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer) {
  if (!LooksLikeLmdb(path)) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
    return Status::InvalidArgument(path + ": not a dsfs store");
  }
  UniqueFd lock;
  struct stat st;
  DSFS_RETURN_IF_ERROR(LockForUpdate(path, &lock, &st));
  // The new version is a copy of the store (records byte for byte) that the puts then change,
  // renamed over the store by Commit: atomic, and a mounted reader keeps its open file (LMDB
  // readers opened MDB_NOLOCK could not protect their pages from writers in the same file).
  // Copies left by updaters that were killed (their process is gone) are garbage.
  RemoveDeadTemporaries(path);
  // The writer reads the copy's tree (its last key) with LMDB in this process: the store's
  // tree is checked first, as for every read-only open.
  DSFS_RETURN_IF_ERROR(CheckLmdbTree(path));
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  DSFS_RETURN_IF_ERROR(CopyFile(path, tmp));
  StoreDestination dest;
  dest.path = path;
  dest.found = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint32_t>(st.st_mode)};
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto w = std::make_unique<LmdbWriter>(std::move(dest), tmp, std::move(lock));
  DSFS_RETURN_IF_ERROR(w->Open(size * 2 + (8ull << 30)));
  *writer = std::move(w);
  return Status::OK();
}

}  // namespace dsfs
