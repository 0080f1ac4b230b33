// Internal to pack/: a source directory as input of a pack or add. Walk numbers the tree as it
// is stored (breadth-first, each directory's entries sorted by name, so no renumbering is
// needed); the files' contents are read when they are compressed (CompressFiles).
//
// Thread safety: none; CompressFiles reads the files on the run's producer thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "pack/pack_run.h"
#include "pack/packer.h"
#include "store/codec.h"
#include "store/format.h"

namespace dsfs {

// The tree of a walk: records in inode order plus what is needed to find each file's source
// again (the path of every directory).
struct DirTree {
  std::vector<InodeRecord> inodes;  // index = inode number - 1
  std::string names;
  std::unordered_map<uint32_t, std::string> dir_paths;  // directory inode -> source path
  uint64_t skipped = 0;                                 // special files left out

  // Name of the entry `r` (a record of this tree).
  std::string_view NameOf(const InodeRecord& r) const {
    return std::string_view(names).substr(r.name_off, r.name_len);
  }
};

// Walks `src` (never following symlinks inside it; storing them as symlinks; `src` itself may
// be a symlink to the tree) into *tree, breadth-first: each directory's entries get
// consecutive inode numbers, sorted by name. Special files (devices, fifos, sockets) are
// skipped with a warning; the store at `store_path` and its temporaries are left out (see
// PackOptions::store_path). `tick` (may be empty) gets the entry count after each directory.
// InvalidArgument for a tree deeper than kMaxTreeDepth directories; "interrupted" once
// *cancel is set (checked between directories); errors name the path involved.
Status Walk(const std::string& src, const std::string& store_path, const std::atomic<bool>* cancel,
            DirTree* tree, const std::function<void(uint64_t)>& tick);

// Walk, as a phase of `run` ("scanning", with progress and the time it took logged).
Status Scan(PackRun* run, const std::string& src, const PackOptions& options, DirTree* tree);

// Gives the regular files of `tree` consecutive payload ids from `first_id`, in inode order (so
// a directory's files are adjacent in the store), and counts the tree's entries into *st.
// Returns the files that have contents, in that order.
std::vector<uint32_t> AssignPayloadIds(DirTree* tree, uint32_t chunk_bytes, uint64_t first_id,
                                       PackStats* st);

// Trains a `dict_bytes` dictionary (0: none, *dict empty) on small files among `files`,
// spread evenly over the tree.
Status TrainOnSamples(const DirTree& tree, const std::vector<uint32_t>& files, uint32_t dict_bytes,
                      std::string* dict);

// Reads, compresses (with `dict`) and writes the contents of `files` of `tree`, whose payload
// ids (AssignPayloadIds) continue from where `run` is, and records what became of each image
// in its inode record. A file that changed since the walk is IOError naming it.
Status CompressFiles(PackRun* run, DirTree* tree, const std::vector<uint32_t>& files,
                     const PackOptions& options, std::shared_ptr<const Dictionary> dict);

}  // namespace dsfs
