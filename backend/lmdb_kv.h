// LMDB backend: one file (MDB_NOSUBDIR), served read-only with MDB_RDONLY | MDB_NOLOCK so a store
// on read-only media needs no lock file. Values are returned straight from the memory map.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "backend/kv_open.h"

namespace dsfs {

// Opens an LMDB store read-only. Checks that the file is not shorter than LMDB's own metadata
// says (a truncated store is refused here rather than faulting on first access), and checks its
// B-tree (CheckLmdbTree): a damaged one is refused with a Corruption status of one line.
Status OpenLmdbReader(const std::string& path, const KvReaderOptions& options,
                      std::unique_ptr<KvReader>* reader);

// The structural check of every read-only open (docs/hardening.md): a child process walks the
// whole main database with LMDB (every key with a cursor, each one looked up again, every key
// and value inside the file), so a damaged B-tree, which makes LMDB itself fault, kills the
// child and not this process. Corruption (one line) if the tree is damaged; IOError if the
// walk did not end within `timeout` (by default a generous bound from the number of pages to
// read) and was killed.
Status CheckLmdbTree(const std::string& path,
                     std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// Creates a writer for an LMDB store at `path` (one file). What may be at `path` already: see
// CheckReplaceable.
Status NewLmdbWriter(const std::string& path, const KvWriterOptions& options,
                     std::unique_ptr<KvWriter>* writer);

// An updater for the LMDB store at `path` (see NewKvUpdater): the new version is written to a
// copy of the store, renamed over it at Commit.
Status NewLmdbUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer);

// How LMDB lays out values (KvWriter::value_sizing): every value over ~2 KB takes whole
// 4 KiB pages, so payload groups fill their last page.
ValueSizing LmdbValueSizing();

// True if the file at `path` starts like an LMDB data file.
bool LooksLikeLmdb(const std::string& path);

}  // namespace dsfs
