// The opener: creates the reader, writer or updater of a store by backend (detected from what
// is at the path, or named for a new store). Nothing above backend/ includes a backend's own
// header: this is the one way in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/kv.h"
#include "common/status.h"
#include "s3/credentials.h"

namespace dsfs {

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
  // A store in S3: unsigned requests (-o s3_anonymous) and the URL style (-o s3_addressing).
  AwsLoadOptions s3;
};

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

// The backend of the store at `path` ("lmdb", "rocksdb"). NotFound if nothing is there;
// InvalidArgument ("not a dsfs store") otherwise.
Status DetectBackend(const std::string& path, std::string* backend);

// Bytes the store at `path` takes on disk (a file's size, or a directory's files' sizes).
uint64_t StoreBytes(const std::string& path);

// True if `source` names a store in object storage ("s3://BUCKET/PREFIX") rather than a path:
// such a source is opened and written like a path, but is not a file (no stat, no absolute
// form).
bool IsRemoteStore(std::string_view source);

// OK unless `path` is a URL (SCHEME://...) of another scheme than s3:// and no local path of
// that name exists: then InvalidArgument "PATH: URL scheme 'SCHEME' is not supported: " +
// `accepted` (what the caller takes), rather than a file looked for and not found.
Status CheckUrlScheme(const std::string& path, std::string_view accepted);
inline constexpr std::string_view kStoreSources = "a store is a local path or s3://BUCKET/PREFIX";

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

// A store in S3 (`dsfs push`): the layout is backend/s3/s3_kv.h's.
struct S3WriterOptions {
  uint64_t object_bytes = 64 << 20;  // data objects close after this many bytes
  uint64_t part_bytes = 16 << 20;    // multipart part size (objects above it are multipart)
  int threads = 4;                   // parts uploaded at once
  // Called after each data object and at the end: bytes uploaded (or found already there) so
  // far, objects done, objects skipped because a previous push left them complete.
  std::function<void(uint64_t bytes, uint64_t objects, uint64_t skipped)> progress;
};

// A writer of a store at `url` (s3://BUCKET/PREFIX). Without options.overwrite, an index
// already there is Exists. Settings from LoadAwsSettings.
[[nodiscard]] Status NewS3Writer(const std::string& url, const KvWriterOptions& options,
                                 const S3WriterOptions& s3_options,
                                 std::unique_ptr<KvWriter>* writer);

}  // namespace dsfs
