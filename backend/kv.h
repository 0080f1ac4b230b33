// Key-value store interface under the dsfs store format. Nothing above backend/ knows which
// implementation it talks to.
//
// Keys and values are byte strings. A store is written once by a KvWriter (into a temporary
// path that Commit() renames into place, so a failed or interrupted write leaves nothing at the
// destination) and then served read-only by a KvReader. An updater (NewKvUpdater) adds keys to
// an existing store in one atomic step; readers opened before keep the version they opened.
//
// Backends: "lmdb" (one file), "rocksdb" (a directory) and "s3" (objects under
// s3://BUCKET/PREFIX, backend/s3/s3_kv.h; read-only once written). Readers detect the backend
// from what is on disk (or the s3:// of the source); writers are created by name: both by the
// opener, backend/kv_open.h, which also holds their options. Store files (replace, move into place,
// temporaries): backend/store_files.h.
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

// Calls `fn` for every key >= `from`, in key order, with its value (valid during the call).
// Stops at, and returns, the first error of `fn` or the reader.
Status ForEachRecord(KvReader* reader, std::string_view from,
                     const std::function<Status(std::string_view key, std::string_view value)>& fn);

}  // namespace dsfs
