// Packing a directory tree or an archive into a store, and adding a tree to a store: the
// writer side of dsfs (pack/). The implementation is split by subject:
//   tree_builder  the in-memory tree of entries, numbered into inode records at the end
//   dir_source    the walk of a source directory and the reading of its files
//   archive_source  tar/cpio/zip/7z input through libarchive (gzip through zlib)
//   compressor    batches of chunks, image analysis, the ordered compression pipeline
//   pack_run      grouping records into backend values, the metadata, header and commit
//   add           dsfs add: a tree merged into an existing store
//
// Thread safety: each call runs on the calling thread (and threads of its own, joined before
// it returns); calls on different writers may run concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/kv_open.h"
#include "common/status.h"
#include "store/store.h"

namespace dsfs {

struct PackOptions {
  int zstd_level = 9;
  uint32_t dict_bytes = 112640;        // zstd's customary 110 KiB; 0 = none; else 1 KiB-16 MiB
  uint32_t chunk_bytes = 256 << 10;    // large files are split into independently read chunks
  uint32_t segment_bytes = 128 << 10;  // metadata segment size (raw; each stored compressed)
  // Raw bytes of small files compressed together in one solid group (store/format.h): larger
  // groups compress better, smaller ones cost less to read one file from; squashfs's 128 KiB.
  uint32_t group_bytes = 128 << 10;
  int threads = 0;  // compression threads; 0 = one per core
  // Also store every image's decoded pixels (compressed), so the views never decode.
  bool predecode = false;
  // The store being written, where it may lie inside the source directory: it and its
  // temporaries (PATH.tmp-PID) are not packed. Empty: none.
  std::string store_path;
  // Cancellation: once *cancel is true (it may be set from a signal handler: the flag is
  // lock-free), the run fails with IOError "interrupted" at its next check (between
  // directories while scanning, between batches while compressing) and, as on any error,
  // commits nothing, so the writer leaves no store and no temporary behind. Null: never
  // cancelled. The flag must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
  // Names the caller wants to hear of if the tree's root holds them (dsfs pack asks for the
  // name of the mount's control directory, which hides such an entry): the ones found are in
  // PackStats::root_names_found.
  std::vector<std::string> watch_root_names;
};

struct PackProgress {
  uint64_t files_done = 0;
  uint64_t files_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_stored = 0;
  const char* phase = "";  // "scanning", "training", "compressing", "finishing"
};

// Images the views cannot decode are logged one by one, up to this many per pack or add.
inline constexpr uint64_t kImageWarnings = 20;

struct PackStats {
  uint64_t files = 0, dirs = 0, symlinks = 0, skipped = 0;
  // Entries a later entry of the same path replaced (archives; dsfs add --replace), and the
  // entries below replaced directories, dropped with them.
  uint64_t replaced = 0, dropped = 0;
  uint64_t bytes_in = 0;       // sum of regular file sizes
  uint64_t payload_bytes = 0;  // stored payload records
  uint64_t images = 0;         // JPEG/PNG files the views decode
  uint64_t images_as_is = 0;   // JPEG/PNG files the views serve as they are (see image.h)
  uint64_t pixel_bytes = 0;    // stored pixel records (predecode)
  uint32_t dict_bytes = 0;
  // The metadata tables: raw bytes, and as stored (compressed segments and their index).
  uint64_t metadata_raw_bytes = 0, metadata_bytes = 0;
  double seconds = 0;
  // Which of PackOptions::watch_root_names (AddOptions::) the stored root holds.
  std::vector<std::string> root_names_found;
};

// Walks `src` (never following symlinks; storing them as symlinks), compresses file contents on
// `options.threads` threads (and decodes every JPEG and PNG up to kMaxImageFileBytes, to record
// whether and at what size the views can serve it decoded) and writes a complete store to `writer`,
// then commits it. Special files (devices, fifos, sockets) are skipped with a warning. Errors name
// the path involved; on error nothing is committed. `progress` (may be empty) is called from the
// calling thread a few times a second.
Status PackDirectory(const std::string& src, const PackOptions& options, KvWriter* writer,
                     const std::function<void(const PackProgress&)>& progress, PackStats* stats);

// Same, from a tar (any variant), cpio, zip or 7z archive, compressed or not, at
// `src`, or from standard input when `src` is "-". The archive is read once, front to back, so
// a stream works: nothing is extracted to disk. Paths are normalized ("./a", "/a" -> "a");
// entries with ".." are refused; missing parent directories are created (mode 0755); a hard
// link is the file it names as stored before it (one that names no earlier file is an error);
// of two entries with the same path the later wins (counted in stats->replaced, and whatever
// was below a replaced directory in stats->dropped; a change of type is logged). Names longer
// than kMaxNameBytes and trees deeper than kMaxTreeDepth directories are InvalidArgument.
Status PackArchive(const std::string& src, const PackOptions& options, KvWriter* writer,
                   const std::function<void(const PackProgress&)>& progress, PackStats* stats);

struct AddOptions {
  std::string prefix;      // where in the store the source directory goes ("" = the root)
  bool replace = false;    // a name that exists is replaced instead of being an error
  int threads = 0;         // compression threads; 0 = one per core
  std::string store_path;  // as PackOptions::store_path
  const std::atomic<bool>* cancel = nullptr;  // as PackOptions::cancel
  std::vector<std::string> watch_root_names;  // as PackOptions:: (of the whole new tree)
};

// dsfs add: adds the tree at `src` to the store `base` under `options.prefix` (created if
// missing). `writer` must be an updater of that store (NewKvUpdater). Directories that exist
// take the new entries; any other name that exists is Exists, before anything is written,
// unless options.replace (the old entry is dropped; its payloads stay in the store, unused).
// Every existing payload and pixel record stays as it is: the new files are compressed with
// the store's dictionary, level and chunk size into records numbered after the store's last
// ones (decoded like pack does, and predecoded if the store is), and only the metadata tables
// and the header are rewritten. Commits through `writer`; *stats counts the new entries, and
// in `replaced` and `dropped` the entries of the store they replaced (see PackArchive).
Status AddDirectory(const Store& base, const std::string& src, const AddOptions& options,
                    KvWriter* writer, const std::function<void(const PackProgress&)>& progress,
                    PackStats* stats);

}  // namespace dsfs
