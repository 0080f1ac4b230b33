// AddDirectory (dsfs add): a source directory merged into an existing store. The store's tree
// is read into a TreeBuilder, the source is walked and compressed as a pack does (its records
// numbered after the store's), and the merged tree is renumbered and written with a new header;
// the store's payload and pixel records stay as they are.
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "pack/dir_source.h"
#include "pack/pack_run.h"
#include "pack/packer.h"
#include "pack/tree_builder.h"
#include "store/store.h"

namespace dsfs {
namespace {

// Reads the tree of `base` into *merged, as nodes that are renumbered once the new entries
// are in (its directories findable by their paths).
Status LoadStoreTree(const Store& base, TreeBuilder* merged) {
  const StoreHeader& h = base.header();
  // All of its metadata is read: ask for it in large requests rather than a page fault at a
  // time.
  base.WillNeedMetadata(UINT64_MAX);
  merged->Reserve(h.inode_count + h.inode_count / 50 + 1024);
  {
    InodeRecord root;
    DSFS_RETURN_IF_ERROR(base.GetInode(Store::kRootIno, &root));
    merged->node(0).SetTimes(root.mode, root.mtime_s, root.mtime_ns);
  }
  // Breadth-first order: a directory's node exists before its entries are read.
  std::vector<uint32_t> node_of(h.inode_count + 1, 0);
  std::vector<std::string> dir_path(h.inode_count + 1);
  for (uint32_t ino = 1; ino <= h.inode_count; ++ino) {
    InodeRecord r;
    DSFS_RETURN_IF_ERROR(base.GetInode(ino, &r));
    if (!IsDir(r)) continue;
    uint32_t first, count;
    DSFS_RETURN_IF_ERROR(base.DirEntries(ino, r, &first, &count));
    for (uint32_t e = first; e < first + count; ++e) {
      InodeRecord c;
      std::string_view name;
      DSFS_RETURN_IF_ERROR(base.GetInode(e, &c));
      DSFS_RETURN_IF_ERROR(base.GetName(c, &name));
      TreeBuilder::Node n;
      n.name = std::string(name);
      n.SetTimes(c.mode, c.mtime_s, c.mtime_ns);
      if (IsLink(c)) {
        std::string_view target;
        DSFS_RETURN_IF_ERROR(base.ReadLink(c, &target));
        n.size = target.size();
        n.data = merged->AddTarget(target);
      } else if (IsReg(c)) {
        n.SetContents(c);
      }
      if (IsDir(c)) {
        std::string path = TreeBuilder::ChildPath(dir_path[ino], n.name);
        node_of[e] = merged->AddDir(node_of[ino], std::move(n), path);
        dir_path[e] = std::move(path);
      } else {
        node_of[e] = merged->AddChild(node_of[ino], std::move(n));
      }
    }
  }
  return Status::OK();
}

// The path in the store of every entry of `tree` (by inode number; the source directory
// itself is `prefix`), each checked before anything is written: an existing directory takes
// new entries; any other existing name is Exists unless `replace`.
Status PlaceNewEntries(const Store& base, const DirTree& tree, const std::string& prefix,
                       bool replace, std::vector<std::string>* rel_out) {
  std::vector<std::string>& rel = *rel_out;
  rel.assign(tree.inodes.size() + 1, std::string());
  rel[1] = prefix;
  for (uint32_t ino = 2; ino <= tree.inodes.size(); ++ino) {
    const InodeRecord& r = tree.inodes[ino - 1];
    rel[ino] = TreeBuilder::ChildPath(rel[r.parent], tree.NameOf(r));
  }
  for (uint32_t ino = 1; ino <= tree.inodes.size(); ++ino) {
    if (rel[ino].empty()) continue;
    uint32_t found;
    InodeRecord old;
    Status s = base.LookupPath(rel[ino], &found, &old);
    if (s.IsNotFound()) continue;
    if (s.code() == Status::Code::kInvalidArgument) {
      // A parent is a file or symlink in the store.
      if (replace) continue;
      return Status::Exists(rel[ino] + ": a parent of it is not a directory in the store");
    }
    DSFS_RETURN_IF_ERROR(s);
    bool dir = S_ISDIR(tree.inodes[ino - 1].mode);
    if (dir && IsDir(old)) continue;
    if (!replace) {
      return Status::Exists(rel[ino] + ": already exists in the store (use --replace)");
    }
  }
  return Status::OK();
}

// The new entries join the tree; a replaced name's old entry is dropped by Build (the later
// of two equal names wins), its payloads stay unreferenced in the store.
void MergeNewEntries(const DirTree& tree, const std::vector<std::string>& rel,
                     TreeBuilder* merged) {
  std::vector<uint32_t> new_node(tree.inodes.size() + 1, 0);
  for (uint32_t ino = 1; ino <= tree.inodes.size(); ++ino) {
    const InodeRecord& r = tree.inodes[ino - 1];
    if (S_ISDIR(r.mode)) {
      new_node[ino] = merged->DirFor(rel[ino], r.mode, r.mtime_s, r.mtime_ns);
      continue;
    }
    TreeBuilder::Node n;
    n.name = std::string(tree.NameOf(r));
    n.SetTimes(r.mode, r.mtime_s, r.mtime_ns);
    if (S_ISLNK(r.mode)) {
      n.size = r.size;
      n.data = merged->AddTarget(std::string_view(tree.names.data() + r.data, r.size));
    } else {
      n.SetContents(r);
      if (!r.size) n.data = 0;
    }
    merged->AddChild(new_node[r.parent], std::move(n));
  }
}

}  // namespace

Status AddDirectory(const Store& base, const std::string& src_in, const AddOptions& add,
                    KvWriter* writer, const std::function<void(const PackProgress&)>& progress,
                    PackStats* stats) {
  const StoreHeader& h = base.header();
  // The new files are stored as the old ones are: same chunking (readers split files by the
  // header's chunk size), level and dictionary, and predecoded if the store is.
  PackOptions options;
  options.zstd_level = h.zstd_level;
  options.chunk_bytes = h.chunk_bytes;
  options.segment_bytes = h.segment_bytes;
  if (h.version >= kSolidFormatVersion) options.group_bytes = h.group_bytes;
  options.dict_bytes = 0;  // nothing is trained: the store's own dictionary is used as it is
  options.threads = add.threads;
  options.predecode = h.pixel_count > 0;
  options.watch_root_names = add.watch_root_names;
  options.store_path = add.store_path;
  options.cancel = add.cancel;
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  std::string prefix;
  DSFS_RETURN_IF_ERROR(TreeBuilder::Normalize(add.prefix, "--prefix", &prefix));
  std::string src = StripSlashes(src_in);
  PackRun run(options, writer, progress);
  run.ContinueFrom(h);
  PackProgress& prog = run.progress();

  TreeBuilder merged;
  prog.phase = "reading the store";
  DSFS_RETURN_IF_ERROR(LoadStoreTree(base, &merged));
  run.LogPhase("reading the store");

  DirTree tree;
  DSFS_RETURN_IF_ERROR(Scan(&run, src, options, &tree));
  std::vector<std::string> rel;
  DSFS_RETURN_IF_ERROR(PlaceNewEntries(base, tree, prefix, add.replace, &rel));

  PackStats added;
  std::vector<uint32_t> files =
      AssignPayloadIds(&tree, options.chunk_bytes, h.payload_count, &added);
  --added.dirs;  // the source directory itself is the prefix, not a new entry
  prog.files_total = added.files;
  prog.files_done = added.files - files.size();
  prog.bytes_total = added.bytes_in;
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(base.dictionary_bytes(), h.zstd_level, &dict));
  DSFS_RETURN_IF_ERROR(CompressFiles(&run, &tree, files, options, dict));
  run.LogPhase("compressing");
  MergeNewEntries(tree, rel, &merged);

  std::vector<InodeRecord> inodes;
  std::string names;
  PackStats st;
  DSFS_RETURN_IF_ERROR(merged.Build(&inodes, &names, &st));
  DSFS_RETURN_IF_ERROR(run.Finish(inodes, names, std::string(base.dictionary_bytes()), &st));
  added.seconds = st.seconds;
  added.root_names_found = st.root_names_found;  // of the whole new tree
  added.payload_bytes = st.payload_bytes - h.payload_bytes;
  added.images = st.images - h.image_count;
  added.images_as_is = st.images_as_is;
  added.dict_bytes = st.dict_bytes;
  added.replaced = st.replaced;
  added.dropped = st.dropped;
  if (stats) *stats = added;
  return Status::OK();
}

}  // namespace dsfs
