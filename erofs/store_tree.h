// StoreTree: a packed dsfs Store seen as an ImageTree, so an EROFS image of the store's tree can
// be synthesized (erofs/image.h). Tree inode i is store inode i + 1 (the store's root is 1 and
// numbers its inodes breadth first, each directory's entries contiguous and sorted, which is
// what ImageTree asks: no copy, no per-inode state).
//
// Thread safety: as the Store, every method may be called from any number of threads.
#pragma once

#include <sys/types.h>

#include "erofs/image.h"
#include "store/store.h"

namespace dsfs::erofs {

struct StoreTreeOptions {
  // The store keeps no owner: every inode gets these (a mount's -o uid=/gid=).
  uint32_t uid = 0, gid = 0;
  mode_t umask = 0;  // permission bits cleared from every stored mode (a mount's -o umask=)
};

class StoreTree : public ImageTree {
 public:
  // REQUIRES: `store` outlives the StoreTree.
  StoreTree(const Store* store, const StoreTreeOptions& options)
      : store_(store), options_(options) {}

  uint32_t inode_count() const override;
  Status GetInode(uint32_t ino, ImageInode* inode) const override;
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override;
  // File contents through Store::Read (checksummed: a damaged record fails with Corruption),
  // symlink targets through Store::ReadLink.
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override;

 private:
  const Store* store_;
  StoreTreeOptions options_;
};

// The packed inode of a format 5 store's compressed image: its payload groups, each group's
// zstd frame one pcluster, served as stored. Build reads every group's header once.
class StorePacked : public PackedData {
 public:
  // NotSupported where the store keeps no such groups (format 4 and older, object storage).
  static Status Open(const Store* store, std::unique_ptr<StorePacked>* out);
  Status ForEachExtent(
      const std::function<Status(uint64_t decoded, uint32_t frame)>& fn) const override;
  Status ReadFrame(uint64_t e, uint64_t offset, size_t len, char* dst) const override;
  Status FragmentOf(uint32_t ino, uint64_t* e, uint64_t* offset) const override;
  uint64_t memory_bytes() const { return groups_.capacity() * sizeof(Store::KernelGroup); }

 private:
  explicit StorePacked(const Store* store) : store_(store) {}
  const Store* store_;
  std::vector<Store::KernelGroup> groups_;  // by last_id
};

}  // namespace dsfs::erofs
