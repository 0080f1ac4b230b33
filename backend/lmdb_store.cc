#include "backend/lmdb_store.h"

#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <utility>
#include <vector>

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

class LmdbReader final : public KvReader {
 public:
  LmdbReader(MDB_env* env, MDB_dbi dbi, std::string path)
      : env_(env), dbi_(dbi), path_(std::move(path)), id_(g_next_reader_id.fetch_add(1)) {}
  ~LmdbReader() override {
    for (auto& t : threads_) {
      mdb_cursor_close(t->cursor);
      mdb_txn_abort(t->txn);
    }
    mdb_env_close(env_);
  }

  Status Get(std::string_view key, PinnedValue* value) override {
    Thread* t = nullptr;
    DSFS_RETURN_IF_ERROR(ThreadState(&t));
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v;
    int rc = mdb_get(t->txn, dbi_, &k, &v);
    if (rc == MDB_NOTFOUND) return Status::NotFound("key not found");
    if (rc != 0) return LmdbError(rc, "reading", path_);
    // The map is read-only and nothing writes the file while it is served, so the pointer
    // stays valid until the environment closes: no pin needed.
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
    if (rc != 0) return LmdbError(rc, "reading", path_);
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
  // find the mapping of this file (device and inode) in /proc/self/maps.
  void LocateMap(dev_t dev, ino_t ino) {
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
      if (inode == ino && makedev(major, minor) == dev && offset == 0) {
        map_addr_ = reinterpret_cast<void*>(start);
        map_len_ = end - start;
        return;
      }
    }
  }

 private:
  // One read transaction (and cursor) per thread, opened on first use and kept for the
  // reader's life: the store is immutable while served, and LMDB transactions must not be
  // shared between threads.
  struct Thread {
    MDB_txn* txn = nullptr;
    MDB_cursor* cursor = nullptr;
  };
  Status ThreadState(Thread** out) {
    thread_local std::vector<std::pair<uint64_t, Thread*>> cache;
    for (const auto& [id, t] : cache) {
      if (id == id_) {
        *out = t;
        return Status::OK();
      }
    }
    auto t = std::make_unique<Thread>();
    int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t->txn);
    if (rc != 0) return LmdbError(rc, "starting a read transaction", path_);
    rc = mdb_cursor_open(t->txn, dbi_, &t->cursor);
    if (rc != 0) {
      mdb_txn_abort(t->txn);
      return LmdbError(rc, "opening a cursor", path_);
    }
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
  std::mutex mu_;                                 // guards threads_
  std::vector<std::unique_ptr<Thread>> threads_;  // every thread's state, closed at the end
};

}  // namespace

ValueSizing LmdbValueSizing() {
  // After 64 KiB, a value ends where the next record would spill onto a new page: LMDB stores
  // large values on whole 4 KiB pages (16-byte page header), so the value then wastes less than
  // one record's worth of its last page. 256 KiB at most: a read of one record of a group
  // still faults in only the pages it touches, but the group's index stays small.
  ValueSizing v;
  v.target_bytes = 64 << 10;
  v.page_bytes = 4096;
  v.page_header_bytes = 16;
  v.max_bytes = 4 * v.target_bytes;
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
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  Status Open(uint64_t map_size) {
    int rc = mdb_env_create(&env_);
    if (rc != 0) return LmdbError(rc, "creating environment", tmp_);
    rc = mdb_env_set_mapsize(env_, map_size);
    if (rc != 0) return LmdbError(rc, "setting map size", tmp_);
    rc = mdb_env_open(env_, tmp_.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    if (rc != 0) return LmdbError(rc, "creating the store", tmp_);
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

}  // namespace

bool LooksLikeLmdb(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint32_t magic = 0;
  ssize_t n = ::pread(fd, &magic, sizeof(magic), kLmdbMagicOffset);
  ::close(fd);
  return n == sizeof(magic) && magic == kLmdbMagic;
}

Status OpenLmdbReader(const std::string& path, const KvReaderOptions& options,
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
  auto r = std::make_unique<LmdbReader>(env, dbi, path);
  r->LocateMap(st.st_dev, st.st_ino);
  *reader = std::move(r);
  return Status::OK();
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
