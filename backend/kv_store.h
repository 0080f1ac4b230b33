// Key-value store interface under the dsfs store format. Nothing above backend/ knows which
// implementation it talks to.
//
// Keys and values are byte strings. A store is written once by a KvWriter (into a temporary
// path that Commit() renames into place, so a failed or interrupted write leaves nothing at the
// destination) and then served read-only by a KvReader. An updater (NewKvUpdater) adds keys to
// an existing store in one atomic step; readers opened before keep the version they opened.
//
// Backends: "lmdb" (one file), "rocksdb" (a directory) and "s3" (objects under
// s3://BUCKET/PREFIX, backend/s3_store.h; read-only once written). Readers detect the backend
// from what is on disk (or the s3:// of the source); writers are created by name.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace dsfs {

// A value returned by KvReader::Get. data() stays valid as long as this object AND the reader
// that filled it live; backends that serve from a memory map (LMDB) pin nothing, others keep a
// pin here (e.g. a RocksDB PinnableSlice).
class PinnedValue {
 public:
  struct Pin {
    virtual ~Pin() = default;
  };
  PinnedValue() = default;
  PinnedValue(PinnedValue&&) = default;
  PinnedValue& operator=(PinnedValue&&) = default;

  std::string_view data() const { return data_; }
  size_t size() const { return data_.size(); }
  // True when no pin is held: data() then stays valid as long as the reader, even after this
  // object is gone (memory-mapped backends).
  bool stable() const { return pin_ == nullptr; }
  void Reset() {
    data_ = {};
    pin_.reset();
  }
  // For implementations: points at `data`, keeping `pin` (may be null) alive with it.
  void Set(std::string_view data, std::unique_ptr<Pin> pin) {
    data_ = data;
    pin_ = std::move(pin);
  }

 private:
  std::string_view data_;
  std::unique_ptr<Pin> pin_;
};

// Read side. Get() is safe to call from any number of threads at once.
class KvReader {
 public:
  virtual ~KvReader() = default;
  // On success fills *value (zero copy where the backend allows). A missing key is NotFound;
  // any other failure is IOError or Corruption.
  virtual Status Get(std::string_view key, PinnedValue* value) = 0;
  // Finds the first key >= `key`: fills *found_key (valid as long as *value) and *value.
  // NotFound if there is none.
  virtual Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) = 0;
  // Finds the first key >= `key`, like Seek, without its value (a backend that fetches values
  // over a network or from a disk cache need not read it).
  virtual Status SeekKey(std::string_view key, std::string* found_key) {
    PinnedValue v;
    return Seek(key, found_key, &v);
  }
  // Short name of the backend ("lmdb", "memory", ...), for `dsfs info`.
  virtual std::string_view Name() const = 0;
  // Lets go of memory the backend holds only as a cache of the store (for a memory map: its
  // resident pages, which the kernel keeps in its page cache anyway). Values returned before
  // stay valid. Thread-safe.
  virtual void ReleaseCachedMemory() {}
  // Hints that the bytes of `range` (inside a value this reader returned) are about to be
  // read, so a backend reading from a cold file can fetch them in one request. Thread-safe.
  virtual void WillNeed(std::string_view range) {}
  // Counters of a backend that fetches over a network (requests, bytes, its disk cache), by
  // name, for the mount's stats; empty for local backends. Thread-safe.
  virtual std::vector<std::pair<std::string, uint64_t>> Counters() const { return {}; }
  // True for a backend that fetches over a network (object storage): reading ahead what may
  // never be used costs requests there, not page cache.
  virtual bool remote() const { return false; }
};

// For memory-mapped backends: asks the kernel to read `range` of a mapping opened for random
// access, in steps of the readahead window (the kernel drops what a single request asks
// beyond it), instead of a page fault at a time.
void WillNeedMapped(std::string_view range);
// The same for `length` bytes of an open file from `offset` (posix_fadvise WILLNEED has the
// same limit per call).
void WillNeedFile(int fd, uint64_t offset, uint64_t length);

// How a backend lays out large values: on whole pages of `page_bytes`, each carrying
// `page_header_bytes` of the backend's own (LMDB puts every value over ~2 KB on whole 4 KiB
// pages), or packed back to back (page_bytes 0: RocksDB, S3). Solid payload groups fill
// their last page (store/codec.h).
struct ValueSizing {
  size_t page_bytes = 0;
  size_t page_header_bytes = 0;

  // The bytes a value of `value_bytes` occupies: its pages, or itself where values are packed.
  size_t Footprint(size_t value_bytes) const {
    if (page_bytes == 0) return value_bytes;
    return (value_bytes + page_header_bytes + page_bytes - 1) / page_bytes * page_bytes;
  }
};

// Write side. Not thread-safe: one thread writes.
class KvWriter {
 public:
  virtual ~KvWriter() = default;
  // Stores key -> value. Keys given in ascending byte order are the fast path.
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // Makes everything durable and moves the store to its final path atomically. After a failed
  // Commit, or if the writer is destroyed without one, the temporary data is removed.
  virtual Status Commit() = 0;
  // How the backend lays out large values (dsfs's payload groups fill their pages, see
  // store/codec.h). Constant for the writer's life.
  virtual ValueSizing value_sizing() const { return ValueSizing{}; }
};

struct KvWriterOptions {
  // Replace what is at the destination: a store (one that `is_store` accepts, see
  // CheckReplaceable) or an empty directory, never anything else.
  bool overwrite = false;
  uint64_t expected_bytes = 0;  // a hint for sizing the store (LMDB map size)
  // Whether the file or directory at a path is a store that `overwrite` may replace (dsfs's
  // own check: its header). Empty: any store of a known backend (LMDB file, RocksDB directory).
  std::function<bool(const std::string& path)> is_store;
  // How a RocksDB store lays out its tables (LMDB has no such choice). dsfs always writes the
  // defaults, chosen by bench/rocksdb_options_bench.py (results in
  // bench/results/backends/rocksdb-options-*.md); only that benchmark's own pack tool
  // (bench/tools/tuned_pack.cc) writes others. Any layout is a valid store, read like any other.
  struct RocksdbLayout {
    uint32_t block_bytes = 4096;  // SST block size: small payload records share blocks
    uint32_t bloom_bits = 0;      // bloom filter bits per key; 0: none (dsfs reads by Seek)
    bool zstd_blocks = false;     // RocksDB block compression (records are zstd'd already)
  } rocksdb;
};

// What is at a new store's destination, as checked before writing (st_ino 0: nothing).
struct StoreDestination {
  std::string path;
  struct Found {
    uint64_t dev = 0, ino = 0;
    uint32_t mode = 0;
    // An empty directory: replaced only if it still is (nothing put in it meanwhile).
    bool empty_dir = false;
  } found;
};

// Checks that a new store may be written at `path`: nothing is there; or, with
// options.overwrite, a store that options.is_store accepts (damaged ones included, as long as
// they still are one) or an empty directory. A symlink, any other file and any non-empty
// directory are refused (InvalidArgument naming what is there); without overwrite anything
// there is Exists. Fills *dest for MoveStoreIntoPlace.
Status CheckReplaceable(const std::string& path, const KvWriterOptions& options,
                        StoreDestination* dest);

// Puts the finished store `tmp` (a file or directory) at dest.path, atomically: where the
// checked store is, it is replaced (its mode, owner, group and extended attributes, ACLs
// included, are given to the new version first) and removed; where nothing was, nothing may
// have appeared since. Refuses (and leaves everything as it is) if what is at dest.path is no
// longer what CheckReplaceable found there, or an empty directory found there is no longer
// empty (files put in it while the store was written are never removed).
Status MoveStoreIntoPlace(const std::string& tmp, const StoreDestination& dest);

inline constexpr std::string_view kDefaultBackend = "lmdb";
// The ValueSizing of `backend`'s writers (KvWriter::value_sizing), for writers that mimic one
// (the tests' in-memory store mimics LMDB). One record per value for an unknown backend.
ValueSizing BackendValueSizing(std::string_view backend);
// Creates a writer for a new store of `backend` ("lmdb", "rocksdb" or "s3", the last only at
// an s3:// `path`, and the only one there) at `path`.
// InvalidArgument names the backends if `backend` is not one of them.
Status NewKvWriter(const std::string& path, std::string_view backend,
                   const KvWriterOptions& options, std::unique_ptr<KvWriter>* writer);

// Creates a writer that updates the existing store at `path` (backend detected): keys put
// replace or join the store's keys, all others stay. Commit() switches the store to the new
// version atomically: a crash at any moment leaves the old version or the new one. Readers
// opened before Commit keep serving the old version. One updater per store at a time (a
// second one fails with IOError). NotFound / InvalidArgument as OpenKvReader. A symlink is
// followed: the store it names is updated, and the link stays.
Status NewKvUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer);

// Removes what writers of a store at `path` left behind when they were killed: a `path`.tmp-PID
// that is dsfs's (an LMDB file, or an empty file, or a directory holding a RocksDB database or
// a writer's dsfs-staging-PID), whose process is gone here and which no writer holds locked
// (LockTemporary): a PID names no process of another PID namespace (a container) or machine
// (a shared directory), a lock does. Anything else of that name (a file, a directory of
// files) is not dsfs's and stays. Writers call it before they start.
void RemoveDeadTemporaries(const std::string& path);

// An exclusive flock(2) on a writer's temporary (a file or a directory), for the writer to hold
// (close the descriptor) until the temporary is renamed or removed. -1 if it cannot be had (a
// filesystem without flock): the temporary is then told alive by its PID alone.
int LockTemporary(const std::string& tmp);

// The backend of the store at `path` ("lmdb", "rocksdb"). NotFound if nothing is there;
// InvalidArgument ("not a dsfs store") otherwise.
Status DetectBackend(const std::string& path, std::string* backend);

// Bytes the store at `path` takes on disk (a file's size, or a directory's files' sizes).
uint64_t StoreBytes(const std::string& path);

// Calls `fn` for every key >= `from`, in key order, with its value (valid during the call).
// Stops at, and returns, the first error of `fn` or the reader.
Status ForEachRecord(KvReader* reader, std::string_view from,
                     const std::function<Status(std::string_view key, std::string_view value)>& fn);

struct KvReaderOptions {
  bool random_access = true;  // disable OS readahead on the data file (MDB_NORDAHEAD)
  // Remote stores (IsRemoteStore): what was fetched is kept under cache_dir (a directory of
  // the backend's own, keyed by the store's identity; survives the reader) within
  // cache_disk_bytes. Empty or 0: no disk cache. Local backends ignore both.
  std::string cache_dir;
  uint64_t cache_disk_bytes = 0;
  // Remote stores: the retry budget of each request, tries (the first included) and seconds a
  // transfer may stall; 0: the backend's default (for S3: DSFS_S3_ATTEMPTS and
  // DSFS_S3_TIMEOUT_S from the environment, else 5 tries and 10 s).
  int remote_attempts = 0;
  int remote_timeout_s = 0;
};

// True if `source` names a store in object storage ("s3://BUCKET/PREFIX") rather than a path:
// such a source is opened and written like a path, but is not a file (no stat, no absolute
// form).
bool IsRemoteStore(std::string_view source);

// Opens the store at `path` read-only, detecting its backend from what is on disk.
// NotFound if nothing is there; InvalidArgument ("not a dsfs store") if it is not a known backend.
// An LMDB store's tree is checked before it is served (in a child process: a damaged tree
// makes LMDB fault, docs/hardening.md); a damaged one is refused with a Corruption status.
Status OpenKvReader(const std::string& path, const KvReaderOptions& options,
                    std::unique_ptr<KvReader>* reader);

// The structural check OpenKvReader runs on the store at `path`, on its own: for LMDB the walk
// of its B-tree (CheckLmdbTree, killed after `timeout` if given, else after a generous bound
// of its own); OK for the other backends, whose readers check what they read.
Status CheckKvStructure(const std::string& path,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt);

}  // namespace dsfs
