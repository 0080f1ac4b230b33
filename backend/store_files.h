// Store files on disk: where a new store may be written (CheckReplaceable), putting the
// finished one there atomically (MoveStoreIntoPlace), and the temporaries of killed writers
// (RemoveDeadTemporaries, LockTemporary). For the local backends' writers and `dsfs pack`.
#pragma once

#include <cstdint>
#include <string>

#include "backend/kv_open.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace dsfs {

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

// Removes what writers of a store at `path` left behind when they were killed: a `path`.tmp-PID
// that is dsfs's (an LMDB file, or an empty file, or a directory holding a RocksDB database or
// a writer's dsfs-staging-PID), whose process is gone here and which no writer holds locked
// (LockTemporary): a PID names no process of another PID namespace (a container) or machine
// (a shared directory), a lock does. Anything else of that name (a file, a directory of
// files) is not dsfs's and stays. Writers call it before they start.
void RemoveDeadTemporaries(const std::string& path);

// An exclusive flock(2) on a writer's temporary (a file or a directory), for the writer to hold
// until the temporary is renamed or removed. None if it cannot be had (a filesystem without
// flock): the temporary is then told alive by its PID alone.
UniqueFd LockTemporary(const std::string& tmp);

}  // namespace dsfs
