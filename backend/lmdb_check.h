// The LMDB backend's two halves share these: its errors as a Status, and the structural check
// of a store opened read-only (lmdb_check.cc; what it walks and why: the comment there).
#pragma once

#include <lmdb.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs::lmdb {

// An LMDB return code as a Status naming `path` and what was being done.
Status LmdbError(int rc, std::string_view what, const std::string& path);

// Runs the check on the open environment `env` (its main database `dbi`) of the store file
// `path` (`st`: its stat). `timeout`: how long the walk may take before it is killed.
Status CheckTree(MDB_env* env, MDB_dbi dbi, const std::string& path, const struct stat& st,
                 std::chrono::milliseconds timeout);

// The bound on a check: generous, since a legitimate walk reads only the branch and leaf pages
// (a few per thousand of a store's pages), but a store on a stalled disk must not hang a mount.
std::chrono::milliseconds DefaultCheckTimeout(MDB_env* env);

}  // namespace dsfs::lmdb
