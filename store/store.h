// Store: read access to a packed dsfs store (metadata and file contents), independent of FUSE.
//
// Thread safety: after Open, every const method may be called from any number of threads.
// Everything returned as a string_view points into the store (the memory map) and stays valid
// while the Store lives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/kv_store.h"
#include "store/codec.h"
#include "store/format.h"

namespace dsfs {

struct StoreOptions {
  bool random_access = true;  // see KvReaderOptions
};

class Store {
 public:
  static constexpr uint32_t kRootIno = 1;

  // Opens the store at `path`, detecting its backend. Errors name the path and say what is
  // wrong in one line (missing, not a dsfs store, unsupported version, corrupt, truncated).
  static Status Open(const std::string& path, const StoreOptions& options,
                     std::unique_ptr<Store>* store);
  // Same, over an already opened key-value reader (tests use memory and fault-injecting ones).
  static Status Open(std::unique_ptr<KvReader> kv, std::unique_ptr<Store>* store);

  const StoreHeader& header() const { return header_; }
  std::string_view backend_name() const { return kv_->Name(); }
  uint64_t inode_count() const { return header_.inode_count; }

  // Copies out the record of inode `ino`. NotFound if no such inode; Corruption if its
  // metadata fails its checksum.
  Status GetInode(uint32_t ino, InodeRecord* rec) const;
  Status GetName(const InodeRecord& rec, std::string_view* name) const;
  // Symlink target. InvalidArgument if `rec` is not a symlink.
  Status ReadLink(const InodeRecord& rec, std::string_view* target) const;
  // Finds `name` among the entries of directory `dir` (binary search). NotFound if absent,
  // InvalidArgument if `dir` is not a directory.
  Status Lookup(uint32_t dir, std::string_view name, uint32_t* ino, InodeRecord* rec) const;
  // Resolves a path relative to the root ("a/b", "/a/b", "" = root); symlinks are not followed.
  Status LookupPath(std::string_view path, uint32_t* ino, InodeRecord* rec) const;
  // Range of a directory's entries: inode numbers [*first, *first + *count).
  Status DirEntries(uint32_t dir, const InodeRecord& rec, uint32_t* first, uint32_t* count) const;

  // Reads up to `size` bytes at `offset` of regular file `rec`. The result is in *out, which
  // points either into the store (uncompressed single-chunk reads, zero copy) or into *buf.
  // Corruption (logged) if a payload fails its checksum: never returns wrong bytes.
  Status Read(const InodeRecord& rec, uint64_t offset, uint64_t size, std::string* buf,
              std::string_view* out) const;

  // Verifies the metadata tables completely (mounting checks them lazily, on first access).
  Status VerifyMetadata() const;
  // Reads and checks every chunk of regular file `rec`.
  Status VerifyFile(const InodeRecord& rec) const;

 private:
  Store() = default;
  Status Init();
  // Decompressed chunk `index` of `rec` into *buf (or a zero-copy view for raw chunks).
  Status ReadChunk(const InodeRecord& rec, uint64_t index, std::string* buf,
                   std::string_view* out) const;

  std::unique_ptr<KvReader> kv_;
  StoreHeader header_{};
  PinnedValue layout_value_, inode_value_, inode_sums_, name_value_, name_sums_, dict_value_;
  InodeLayout layout_;
  CheckedTable inodes_, names_;
  std::shared_ptr<Dictionary> dict_;
};

// True for the file types a store holds.
inline bool IsDir(const InodeRecord& r) { return (r.mode & 0170000) == 0040000; }
inline bool IsReg(const InodeRecord& r) { return (r.mode & 0170000) == 0100000; }
inline bool IsLink(const InodeRecord& r) { return (r.mode & 0170000) == 0120000; }

}  // namespace dsfs
