// RocksDB backend: a store is a RocksDB directory (CURRENT, MANIFEST-*, *.sst).
//
// Writing never goes through the memtable: records are streamed into sorted SST files (one
// per leading key byte, so the files never overlap) and ingested in one IngestExternalFile
// call, which is atomic. Serving opens the directory with DB::OpenForReadOnly, which takes no
// lock and writes nothing, and reads the files through a memory map: uncompressed blocks are
// then returned in place (zero copy), as LMDB does.
#pragma once

#include <memory>
#include <string>

#include "backend/kv_open.h"

namespace dsfs {

// Opens a RocksDB store read-only. The instance keeps the version of the store it opened (a
// snapshot): files ingested later by NewRocksdbUpdater are not seen, and every file it needs
// is opened at open time (max_open_files = -1), so nothing can disappear under it.
Status OpenRocksdbReader(const std::string& path, const KvReaderOptions& options,
                         std::unique_ptr<KvReader>* reader);

// Creates a writer for a new RocksDB store at `path` (a directory). The store is built in
// `path`.tmp-PID and renamed into place by Commit(). Exists if `path` exists and
// !options.overwrite.
Status NewRocksdbWriter(const std::string& path, const KvWriterOptions& options,
                        std::unique_ptr<KvWriter>* writer);

// Creates a writer that adds to (or replaces keys of) the existing RocksDB store at `path`:
// Commit() ingests everything put, all at once or not at all. Keys must arrive ascending
// within each leading byte (InvalidArgument at Commit otherwise). A second updater of the
// same store fails (RocksDB's LOCK file) while one is open.
Status NewRocksdbUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer);

// True if `path` is a directory holding a RocksDB database (a CURRENT file).
bool LooksLikeRocksdb(const std::string& path);

}  // namespace dsfs
