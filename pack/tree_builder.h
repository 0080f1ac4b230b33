// Internal to pack/: the tree of a store as it is being built, for sources whose entries come
// in any order (an archive) or that merge into an existing tree (dsfs add). Entries are nodes;
// inode numbers are given only at the end, by Build (breadth-first, names sorted, as for a
// directory walk; see store/format.h).
//
// Thread safety: none; one thread builds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "pack/packer.h"
#include "store/format.h"

namespace dsfs {

class TreeBuilder {
 public:
  struct Node {
    std::string name;
    uint32_t parent = 0;
    uint32_t mode = 0;
    int64_t mtime_s = 0;
    uint32_t mtime_ns = 0;
    uint64_t size = 0;
    uint64_t data = 0;               // first payload id, or symlink target offset (AddTarget)
    std::vector<uint32_t> children;  // directories only
    uint8_t image = 0;               // InodeRecord's image fields
    uint32_t width = 0, height = 0;
    uint64_t pixels = 0;

    void SetTimes(uint32_t new_mode, int64_t new_mtime_s, uint32_t new_mtime_ns) {
      mode = new_mode;
      mtime_s = new_mtime_s;
      mtime_ns = new_mtime_ns;
    }
    // The contents of a regular file (size, first payload, image fields), from or as the
    // fields of an inode record (the others zero).
    void SetContents(const InodeRecord& r);
    InodeRecord Contents() const;
  };

  // A tree holding only its root (node 0): a directory, mode 0755, made now.
  TreeBuilder();

  // Normalizes an archive path: no leading "/" or "./", no empty or "." parts. Refuses ".."
  // (an archive must not place files outside its own tree) and names longer than the kernel
  // takes (kMaxNameBytes). `what` says where the path comes from, for the message.
  static Status Normalize(std::string_view in, std::string_view what, std::string* out);
  // A path for a message: long ones are cut in the middle.
  static std::string Shorten(std::string_view path);
  // The path of entry `name` of the directory at `parent` ("" = the root).
  static std::string ChildPath(std::string_view parent, std::string_view name) {
    return parent.empty() ? std::string(name) : std::string(parent) + "/" + std::string(name);
  }

  // The directory node at `path`, created (with its parents) if it does not exist yet.
  uint32_t Dir(const std::string& path, int64_t mtime_s);
  // A non-directory entry at `path` (its parent directories are created as needed).
  uint32_t Leaf(const std::string& path, int64_t mtime_s);
  Node& node(uint32_t id) { return nodes_[id]; }
  // Adds `n` as an entry of node `parent` (dsfs add builds the store's tree this way).
  uint32_t AddChild(uint32_t parent, Node n);
  // Same for a directory, which Dir() finds at `path` from then on.
  uint32_t AddDir(uint32_t parent, Node n, const std::string& path);
  // The directory at `path`: the existing one (its attributes kept), or a new one (with its
  // parents) with these attributes.
  uint32_t DirFor(const std::string& path, uint32_t mode, int64_t mtime_s, uint32_t mtime_ns);
  // Stores a symlink target; returns its offset (Node::data of the symlink).
  uint64_t AddTarget(std::string_view target);
  // The regular file the tree holds at normalized `path` so far (the latest entry of that
  // name), or UINT32_MAX.
  uint32_t FileSoFar(const std::string& path);
  // Node `node` is a hard link of node `source`: one file, so it gets source's contents (and
  // those of whatever source links to in turn) when the tree is built.
  void Link(uint32_t node, uint32_t source) { link_source_[node] = source; }
  // Room for `n` nodes: a tree of millions grows without reallocating (and copying) them all.
  void Reserve(size_t n) { nodes_.reserve(n); }

  // Numbers the tree breadth-first (entries sorted by name; of two entries with one name the
  // later added wins: counted in st->replaced, what was below it in st->dropped) and produces
  // the inode records and name pool. *st is reset, then counts the tree's entries.
  // InvalidArgument for a tree deeper than kMaxTreeDepth, a cycle of hard links or more than
  // 4 billion entries.
  Status Build(std::vector<InodeRecord>* inodes, std::string* names, PackStats* st);

 private:
  void SortChildren(PackStats* st);
  Status ResolveLinks();
  // Counts what the later entry `by` of the same path drops: `old` and everything below it;
  // logs it (the first few) where it is more than an older version of the same kind of entry.
  void Dropped(uint32_t old, uint32_t by, PackStats* st);
  // The path of node `id` (for messages).
  std::string PathOf(uint32_t id) const;
  static std::string EntryKey(uint32_t parent, std::string_view name);
  // The latest entry of its name in its directory (a later one of the same name wins).
  void Index(uint32_t id) { latest_[EntryKey(nodes_[id].parent, nodes_[id].name)] = id; }
  uint32_t Add(Node n);

  std::vector<Node> nodes_;
  std::unordered_map<std::string, uint32_t> dirs_;
  std::string targets_;
  std::unordered_map<uint32_t, uint32_t> link_source_;  // hard link node -> its source node
  bool indexed_ = false;                                // latest_ is made (FileSoFar)
  std::unordered_map<std::string, uint32_t> latest_;    // EntryKey -> latest node of that name
  uint64_t drop_warnings_ = 0;
};

}  // namespace dsfs
