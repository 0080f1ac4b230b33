#include "backend/rocksdb_kv.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/per_thread.h"
#include "backend/store_files.h"
#include "common/file_watch.h"
#include "common/log.h"
#include "common/path.h"
#include "common/unique_fd.h"

namespace dsfs {
namespace {

namespace fs = std::filesystem;

// RocksDB writes its own LOG file into the database directory unless given a logger: a store
// on read-only media could not be opened, and a served store must not grow. dsfs logs itself.
class NullLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

Status FromRocks(const rocksdb::Status& s, const std::string& path, std::string_view what) {
  std::string text = path + ": " + std::string(what) + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(text);
  if (s.IsCorruption()) return Status::Corruption(path + ": corrupt store (" + s.ToString() + ")");
  if (s.IsNoSpace() || s.ToString().find("No space left") != std::string::npos) {
    return Status::NoSpace(path + ": no space left on device while " + std::string(what));
  }
  if (s.IsInvalidArgument()) return Status::InvalidArgument(text);
  if (s.IsBusy() || s.ToString().find("lock") != std::string::npos) {
    return Status::IOError(path + ": the store is being written by another process (" +
                           s.ToString() + ")");
  }
  return Status::IOError(text);
}

// The settings dsfs uses, and the alternatives bench/rocksdb_options_bench.py measured against
// them (results in bench/results/backends/rocksdb-options-*.md). The defaults:
//  - No RocksDB compression: payload and pixel groups are zstd-compressed (with dsfs's own
//    dictionary) already, and so are the metadata segments; an
//    uncompressed block is used as it is read, a compressed one would be decompressed into
//    another block on every read.
//  - 4 KiB blocks: small values share blocks; payload groups (~100 KiB) and the metadata
//    segments are blocks of their own. (Measured when stores held one record per small file.)
//  - No bloom filter: dsfs reads payloads by Seek (a filter helps only point lookups), and its
//    few point lookups (the metadata keys, once at open) always hit.
//  - No block cache: the page cache is the block cache, and dsfs keeps decompressed records
//    in its own cache (a block cache would hold a third copy).
// KvWriterOptions::RocksdbLayout overrides the first three for the writer, for that
// benchmark only: the reader finds a store's block size, filter and compression in its files.
rocksdb::Options TableOptions(const KvWriterOptions::RocksdbLayout& layout = {}) {
  rocksdb::Options o;
  rocksdb::BlockBasedTableOptions t;
  t.block_size = layout.block_bytes;
  t.no_block_cache = true;
  t.cache_index_and_filter_blocks = false;
  if (layout.bloom_bits > 0) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(static_cast<int>(layout.bloom_bits)));
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  o.compression = layout.zstd_blocks ? rocksdb::kZSTD : rocksdb::kNoCompression;
  o.bottommost_compression = o.compression;
  o.info_log = std::make_shared<NullLogger>();
  // Nothing but dsfs writes these databases, and only by ingestion: no compaction ever runs,
  // so no file a mounted reader uses is deleted.
  o.disable_auto_compactions = true;
  return o;
}

struct CopyPin : PinnedValue::Pin {
  std::string bytes;
};
struct SlicePin : PinnedValue::Pin {
  rocksdb::PinnableSlice slice;
};

class RocksdbReader final : public KvReader {
 public:
  RocksdbReader(rocksdb::DB* db, std::string path) : db_(db), path_(std::move(path)) {
    // dsfs checks every record it reads (xxh3 per payload record and metadata segment), but a
    // damaged block must be refused before RocksDB parses it: it asserts (aborts the daemon)
    // on malformed block entries (found by tests/unit/corruption_test.cc).
    ro_.verify_checksums = true;
    ro_.fill_cache = false;  // no block cache: see TableOptions
  }
  ~RocksdbReader() override {
    tables_.clear();  // their watches: no callback runs from here on
    iterators_.Clear();
    db_->Close().PermitUncheckedError();
    delete db_;
  }

  // Watches the table files (see Table).
  void WatchTables() {
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    for (const auto& f : files) {
      auto t = std::make_unique<Table>();
      t->path = f.directory + "/" + f.relative_filename;
      t->fd.reset(::open(t->path.c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st;
      if (!t->fd || ::fstat(t->fd.get(), &st) != 0) continue;
      t->bytes = static_cast<uint64_t>(st.st_size);
      t->head.resize(std::min<uint64_t>(t->bytes, kHeadBytes));
      if (::pread(t->fd.get(), t->head.data(), t->head.size(), 0) !=
          static_cast<ssize_t>(t->head.size())) {
        continue;
      }
      Table* raw = t.get();
      t->watch = FileWatch::Start(t->fd.get(), nullptr, 0,
                                  [this, raw](FileWatch::Event) { OnChange(*raw); });
      tables_.push_back(std::move(t));
    }
  }

  Status Get(std::string_view key, PinnedValue* value) override {
    DSFS_RETURN_IF_ERROR(CheckNotReplaced());
    ReadAheadLargeValue(key);
    auto pin = std::make_unique<SlicePin>();
    rocksdb::Status s = db_->Get(ro_, db_->DefaultColumnFamily(),
                                 rocksdb::Slice(key.data(), key.size()), &pin->slice);
    if (s.IsNotFound()) return Status::NotFound("key not found");
    if (!s.ok()) return Failed(s);
    std::string_view data(pin->slice.data(), pin->slice.size());
    value->Set(data, std::move(pin));
    return Status::OK();
  }

  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    DSFS_RETURN_IF_ERROR(CheckNotReplaced());
    rocksdb::Iterator* it = nullptr;
    DSFS_RETURN_IF_ERROR(iterators_.Get(
        [this](std::unique_ptr<rocksdb::Iterator>* made) {
          made->reset(db_->NewIterator(ro_));
          return (*made)->status().ok()
                     ? Status::OK()
                     : FromRocks((*made)->status(), path_, "opening an iterator");
        },
        &it));
    it->Seek(rocksdb::Slice(key.data(), key.size()));
    if (!it->Valid()) {
      if (!it->status().ok()) {
        Status failed = Failed(it->status());
        // An iterator that met a damaged block keeps failing the seeks after it with that
        // block's error, even to keys of other blocks: `dsfs verify` (one thread) called the
        // files of the groups after a damaged one damaged too, and a mount thread failed
        // them, where `dsfs cat` (a fresh iterator) read them. This thread gets a new one.
        iterators_.Retire(it);
        return failed;
      }
      return Status::NotFound("no key at or after");
    }
    found_key->assign(it->key().data(), it->key().size());
    rocksdb::Slice v = it->value();
    // The value is valid only until this thread's next Seek, so it is copied out. Pinning
    // blocks for the iterator's life (ReadOptions::pin_data) would avoid the copy, but the
    // pins are released only with the iterator, which lives as long as the mount: memory
    // would grow with every block ever read. The copy is one group, next to decompressing.
    auto pin = std::make_unique<CopyPin>();
    pin->bytes.assign(v.data(), v.size());
    std::string_view data = pin->bytes;
    value->Set(data, std::move(pin));
    return Status::OK();
  }

  std::string_view Name() const override { return "rocksdb"; }

  // Blocks are read with pread(2) into memory of RocksDB's (no memory map: see
  // OpenRocksdbReader), so a value is no view of the file: nothing to release and nothing to
  // read ahead once it is returned (a large one is read ahead before, ReadAheadLargeValue).

 private:
  // A table file as opened. The reader has every one of them open (max_open_files = -1) and
  // reads them with pread(2): a file truncated under it fails the reads of the blocks it lost
  // (RocksDB: a short read, Corruption) and serves the others, each block's checksum checked.
  // One rewritten in place (`cp` of another store's file over it) could hold another store's
  // intact blocks at the offsets of this one's index: once a table's first bytes are no longer
  // the ones it was opened with, the reader answers every read with IOError. Either way the
  // change is logged once, from the watch thread (common/file_watch.h).
  static constexpr uint64_t kHeadBytes = 4096;
  struct Table {
    std::string path;
    UniqueFd fd;
    uint64_t bytes = 0;                // its size when opened
    std::string head;                  // its first kHeadBytes when opened
    std::unique_ptr<FileWatch> watch;  // declared after fd: stops before fd closes
  };

  Status CheckNotReplaced() const {
    if (!replaced_.load(std::memory_order_acquire)) return Status::OK();
    return Status::IOError(path_ +
                           ": the store was rewritten under the mount (remount to serve it)");
  }

  // A read that failed. Once the store is known to have changed, as IOError: the damage is
  // the change, logged once, not a damaged store to log on every read of it.
  Status Failed(const rocksdb::Status& s) const {
    if (announced_.load(std::memory_order_acquire)) {
      return Status::IOError(path_ +
                             ": reading a store that changed while mounted: " + s.ToString());
    }
    return FromRocks(s, path_, "reading");
  }

  // Called by the watch thread after table `t` was written to or truncated.
  void OnChange(const Table& t) {
    struct stat st;
    const uint64_t now = ::fstat(t.fd.get(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    std::string head(t.head.size(), '\0');
    const bool same_head =
        ::pread(t.fd.get(), head.data(), head.size(), 0) == static_cast<ssize_t>(head.size()) &&
        head == t.head;
    std::string what;
    if (!same_head) {
      replaced_.store(true, std::memory_order_release);
      what = "its table file " + t.path + " was rewritten (" + std::to_string(now) +
             " bytes now, " + std::to_string(t.bytes) +
             " when opened): every read of the store fails (EIO) but what the cache holds; "
             "remount to serve the new store";
    } else if (now < t.bytes) {
      what = "its table file " + t.path + " was truncated (" + std::to_string(now) + " of its " +
             std::to_string(t.bytes) +
             " bytes left): files whose bytes are gone fail (EIO), the others are served";
    } else {
      what = "its table file " + t.path + " was written to: files whose bytes changed fail (EIO)";
    }
    if (!announced_.exchange(true)) {
      Log()->error("{}: the store changed under the mount: {}", path_, what);
    } else {
      Log()->debug("{}: the store changed again: {}", path_, what);
    }
  }

  // A value that is most of its table file (dsfs's metadata tables: one value each) is read
  // whole by Get (RocksDB verifies the block's checksum) from a file opened for random access
  // (no readahead): through the memory map this reader once used, 290 MB took 4.7 s at 10
  // million files, a 4 KiB page fault at a time. Read such a file ahead in large requests
  // first (WillNeedFile). Small values cost one size estimate.
  void ReadAheadLargeValue(std::string_view key) {
    constexpr uint64_t kLargeValueBytes = 1 << 20;
    std::string end(key);
    end.push_back('\0');
    rocksdb::Range range(rocksdb::Slice(key.data(), key.size()), rocksdb::Slice(end));
    uint64_t bytes = 0;
    if (!db_->GetApproximateSizes(&range, 1, &bytes).ok() || bytes < kLargeValueBytes) return;
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    for (const auto& f : files) {
      if (key < std::string_view(f.smallestkey) || key > std::string_view(f.largestkey) ||
          f.size > 2 * bytes) {
        continue;
      }
      const UniqueFd fd(
          ::open((f.directory + "/" + f.relative_filename).c_str(), O_RDONLY | O_CLOEXEC));
      if (fd) WillNeedFile(fd.get(), 0, f.size);
    }
  }

  rocksdb::DB* db_;
  std::string path_;
  std::vector<std::unique_ptr<Table>> tables_;  // set once, before the first read
  std::atomic<bool> replaced_{false};           // a table file was rewritten: no more reads
  std::atomic<bool> announced_{false};          // the change has been logged
  rocksdb::ReadOptions ro_;
  PerThread<rocksdb::Iterator> iterators_;  // one per thread: iterators are not thread-safe
};

// Streams puts into one SST file per leading key byte (dsfs's key spaces: H, I, L, N, P, Q,
// Z), so the files never overlap and are ingested together. A key that arrives out of order
// within its space is held in memory and written through a WriteBatch after the ingestion
// (fresh stores only: an update must stay one atomic ingestion).
class RocksdbWriter final : public KvWriter {
 public:
  // `db_dir`: the directory the database is built in. Fresh store: `dest.path`.tmp-PID,
  // moved to `dest.path` at commit. Update: the store itself, already open in `db`.
  RocksdbWriter(StoreDestination dest, std::string db_dir, rocksdb::DB* db,
                const KvWriterOptions::RocksdbLayout& layout = {})
      : dest_(std::move(dest)),
        final_(dest_.path),
        dir_(std::move(db_dir)),
        staging_(dir_ + "/dsfs-staging-" + std::to_string(::getpid())),
        update_(db != nullptr),
        db_(db),
        options_(TableOptions(layout)) {}
  ~RocksdbWriter() override {
    streams_.clear();
    CloseDb();
    std::error_code ec;
    fs::remove_all(staging_, ec);
    if (!committed_ && !update_) fs::remove_all(dir_, ec);
  }

  Status Prepare() {
    std::error_code ec;
    if (!update_ && !fs::create_directory(dir_, ec)) {
      return Status::FromErrno(ec.value() ? ec.value() : EEXIST, "cannot create " + dir_);
    }
    if (!update_) tmp_lock_ = LockTemporary(dir_);  // alive, to other PID namespaces too
    if (update_) {
      // Staging directories of updaters that were killed (this one holds the LOCK now).
      for (const auto& e : fs::directory_iterator(dir_, ec)) {
        if (e.path().filename().string().rfind("dsfs-staging-", 0) == 0) {
          fs::remove_all(e.path(), ec);
        }
      }
    }
    fs::remove_all(staging_, ec);
    if (!fs::create_directory(staging_, ec)) {
      return Status::FromErrno(ec.value(), "cannot create " + staging_);
    }
    return Status::OK();
  }

  Status Put(std::string_view key, std::string_view value) override {
    if (failed_) return Status::IOError(dir_ + ": writer already failed");
    unsigned char space = key.empty() ? 0 : static_cast<unsigned char>(key[0]);
    Stream& st = streams_[space];
    if (key.empty() || (!st.last.empty() && key <= std::string_view(st.last))) {
      held_[std::string(key)] = std::string(value);
      return Status::OK();
    }
    if (!st.writer) {
      char name[32];
      std::snprintf(name, sizeof(name), "/space-%02x.sst", space);
      st.path = staging_ + name;
      st.writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options_);
      rocksdb::Status s = st.writer->Open(st.path);
      if (!s.ok()) return Fail(FromRocks(s, st.path, "creating"));
    }
    rocksdb::Status s = st.writer->Put(rocksdb::Slice(key.data(), key.size()),
                                       rocksdb::Slice(value.data(), value.size()));
    if (!s.ok()) return Fail(FromRocks(s, st.path, "writing"));
    st.last.assign(key);
    return Status::OK();
  }

  Status Commit() override {
    if (failed_) return Status::IOError(dir_ + ": writer already failed");
    if (update_ && !held_.empty()) {
      return Fail(Status::InvalidArgument(final_ + ": keys out of order in an update (" +
                                          held_.begin()->first + ")"));
    }
    std::vector<std::string> files;
    for (auto& [space, st] : streams_) {
      if (!st.writer) continue;
      rocksdb::Status s = st.writer->Finish();
      if (!s.ok()) return Fail(FromRocks(s, st.path, "finishing"));
      files.push_back(st.path);
    }
    streams_.clear();
    if (!db_) {
      rocksdb::Options o = options_;
      o.create_if_missing = true;
      o.error_if_exists = true;
      rocksdb::Status s = rocksdb::DB::Open(o, dir_, &db_);
      if (!s.ok()) return Fail(FromRocks(s, dir_, "creating the store"));
    }
    if (!files.empty()) {
      rocksdb::IngestExternalFileOptions ifo;
      ifo.move_files = true;  // hard links: no copy
      rocksdb::Status s = db_->IngestExternalFile(files, ifo);
      if (!s.ok()) return Fail(FromRocks(s, dir_, "ingesting"));
    }
    if (!held_.empty()) {
      rocksdb::WriteBatch batch;
      for (const auto& [k, v] : held_) batch.Put(k, v);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      rocksdb::Status s = db_->Write(wo, &batch);
      if (s.ok()) s = db_->Flush(rocksdb::FlushOptions());
      if (!s.ok()) return Fail(FromRocks(s, dir_, "writing"));
      held_.clear();
    }
    rocksdb::Status s = db_->SyncWAL();
    if (!s.ok() && !s.IsNotSupported()) return Fail(FromRocks(s, dir_, "syncing"));
    CloseDb();
    std::error_code ec;
    fs::remove_all(staging_, ec);
    // A fresh store goes to its final path (replacing, with --force, the store checked there).
    if (!update_) DSFS_RETURN_IF_ERROR(Fail(MoveStoreIntoPlace(dir_, dest_)));
    tmp_lock_.reset();  // the store now: no temporary to hold
    committed_ = true;
    return Status::OK();
  }

 private:
  struct Stream {
    std::unique_ptr<rocksdb::SstFileWriter> writer;
    std::string path;
    std::string last;
  };

  Status Fail(Status s) {
    if (!s.ok()) failed_ = true;
    return s;
  }
  void CloseDb() {
    if (!db_) return;
    db_->Close().PermitUncheckedError();
    delete db_;
    db_ = nullptr;
  }

  StoreDestination dest_;
  std::string final_, dir_, staging_;
  bool update_;
  UniqueFd tmp_lock_;  // LockTemporary of dir_ (a fresh store's)
  rocksdb::DB* db_ = nullptr;
  rocksdb::Options options_;
  std::map<unsigned char, Stream> streams_;
  std::map<std::string, std::string> held_;
  bool failed_ = false, committed_ = false;
};

// What RocksDB's "No such file" error at open is about. A missing table file NNNNNN.sst is
// reported under its legacy name NNNNNN.ldb (the last name RocksDB tried): name the real one.
std::string MissingFile(const std::string& path, const rocksdb::Status& s) {
  std::string text = s.ToString();
  size_t ldb = text.find(".ldb");
  if (ldb == std::string::npos) return text;
  size_t begin = ldb;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
  std::string number = text.substr(begin, ldb - begin);
  struct stat st;
  if (number.empty() || ::stat((path + "/" + number + ".ldb").c_str(), &st) == 0 ||
      ::stat((path + "/" + number + ".sst").c_str(), &st) == 0) {
    return text;
  }
  return "table file " + number + ".sst is missing";
}

}  // namespace

bool LooksLikeRocksdb(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return ::stat((path + "/CURRENT").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Status OpenRocksdbReader(const std::string& path, const KvReaderOptions& options,
                         std::unique_ptr<KvReader>* reader) {
  if (!LooksLikeRocksdb(path)) return Status::InvalidArgument(path + ": not a dsfs store");
  rocksdb::Options o = TableOptions();
  // Reads with pread(2), not through a memory map: a block is copied once into RocksDB's
  // memory, where its checksum is checked and it is parsed, so a table file truncated or
  // rewritten under the reader fails the reads it spoils (checksums, short reads) instead of
  // killing the process (SIGBUS) or changing under RocksDB's parser between the check and the
  // parse (docs/hardening.md). The price, measured on 20,000 small files read in random order
  // with the page cache hot: through a RAM cache (as a mount reads), first touch 200k -> 189k
  // files/s; without one (dsfs verify, cat), where every read fetches its group's block three
  // times (the key, the value, the group before), 10.5k -> 7.8k files/s.
  o.allow_mmap_reads = false;
  o.advise_random_on_open = options.random_access;
  o.max_open_files = -1;  // every file opened (and held) at open: see the header
  o.skip_stats_update_on_db_open = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, path, &db);
  if (!s.ok()) {
    // A missing file may come as an IOError or as a Corruption (of the MANIFEST naming it).
    if ((s.IsIOError() || s.IsCorruption()) &&
        s.ToString().find("No such file") != std::string::npos) {
      return Status::Corruption(path + ": store is incomplete (" + MissingFile(path, s) + ")");
    }
    if (s.IsCorruption())
      return Status::Corruption(path + ": corrupt store (" + s.ToString() + ")");
    return FromRocks(s, path, "opening");
  }
  auto r = std::make_unique<RocksdbReader>(db, path);
  r->WatchTables();
  *reader = std::move(r);
  return Status::OK();
}

Status NewRocksdbWriter(const std::string& path, const KvWriterOptions& options,
                        std::unique_ptr<KvWriter>* writer) {
  StoreDestination dest;
  DSFS_RETURN_IF_ERROR(CheckReplaceable(path, options, &dest));
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  auto w = std::make_unique<RocksdbWriter>(std::move(dest), tmp, nullptr, options.rocksdb);
  DSFS_RETURN_IF_ERROR(w->Prepare());
  *writer = std::move(w);
  return Status::OK();
}

Status NewRocksdbUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer) {
  if (!LooksLikeRocksdb(path)) return Status::InvalidArgument(path + ": not a dsfs store");
  rocksdb::Options o = TableOptions();
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, path, &db);
  if (!s.ok()) return FromRocks(s, path, "opening for writing");
  StoreDestination dest;
  dest.path = path;  // updated in place: never moved
  auto w = std::make_unique<RocksdbWriter>(std::move(dest), path, db);
  DSFS_RETURN_IF_ERROR(w->Prepare());
  *writer = std::move(w);
  return Status::OK();
}

}  // namespace dsfs
