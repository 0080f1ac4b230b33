#include "pack/tree_builder.h"

#include <sys/stat.h>

#include <algorithm>
#include <ctime>

#include "common/log.h"
#include "common/path.h"

namespace dsfs {

void TreeBuilder::Node::SetContents(const InodeRecord& r) {
  size = r.size;
  data = r.data;
  image = r.image;
  width = r.width;
  height = r.height;
  pixels = r.pixels;
}

InodeRecord TreeBuilder::Node::Contents() const {
  InodeRecord r{};
  r.size = size;
  r.data = data;
  r.image = image;
  r.width = width;
  r.height = height;
  r.pixels = pixels;
  return r;
}

TreeBuilder::TreeBuilder() {
  Node root;
  root.mode = S_IFDIR | 0755;
  root.mtime_s = std::time(nullptr);
  nodes_.push_back(root);
  dirs_[""] = 0;
}

Status TreeBuilder::Normalize(std::string_view in, std::string_view what, std::string* out) {
  out->clear();
  // More parts than the deepest tree holds (its directories and a leaf) are refused here,
  // before the tree's directories are made (one per level, each named by its whole path).
  size_t parts = 0;
  for (std::string_view part : PathParts(in)) {
    if (++parts > size_t{kMaxTreeDepth} + 1) {
      return Status::InvalidArgument("tree too deep: " + std::string(what) + " " + Shorten(in) +
                                     " is more than " + std::to_string(kMaxTreeDepth) +
                                     " directories down");
    }
    if (part == "..") {
      return Status::InvalidArgument("unsafe " + std::string(what) +
                                     " (with '..'): " + Shorten(in));
    }
    if (part.size() > kMaxNameBytes) {
      return Status::InvalidArgument(
          "name longer than " + std::to_string(kMaxNameBytes) + " bytes in " + std::string(what) +
          ": " + std::string(part.substr(0, 32)) + "... (" + std::to_string(part.size()) +
          " bytes" + (part.size() == in.size() ? std::string() : ", in " + Shorten(in)) + ")");
    }
    if (!out->empty()) *out += '/';
    *out += part;
  }
  return Status::OK();
}

std::string TreeBuilder::Shorten(std::string_view path) {
  if (path.size() <= 80) return std::string(path);
  return std::string(path.substr(0, 40)) + "..." + std::string(path.substr(path.size() - 37));
}

uint32_t TreeBuilder::Dir(const std::string& path, int64_t mtime_s) {
  auto it = dirs_.find(path);
  if (it != dirs_.end()) return it->second;
  size_t slash = path.rfind('/');
  uint32_t parent = Dir(slash == std::string::npos ? "" : path.substr(0, slash), mtime_s);
  Node n;
  n.name = slash == std::string::npos ? path : path.substr(slash + 1);
  n.parent = parent;
  n.mode = S_IFDIR | 0755;
  n.mtime_s = mtime_s;
  uint32_t id = Add(std::move(n));
  dirs_[path] = id;
  return id;
}

uint32_t TreeBuilder::Leaf(const std::string& path, int64_t mtime_s) {
  size_t slash = path.rfind('/');
  Node n;
  n.parent = Dir(slash == std::string::npos ? "" : path.substr(0, slash), mtime_s);
  n.name = slash == std::string::npos ? path : path.substr(slash + 1);
  return Add(std::move(n));
}

uint32_t TreeBuilder::AddChild(uint32_t parent, Node n) {
  n.parent = parent;
  return Add(std::move(n));
}

uint32_t TreeBuilder::AddDir(uint32_t parent, Node n, const std::string& path) {
  uint32_t id = AddChild(parent, std::move(n));
  dirs_[path] = id;
  return id;
}

uint32_t TreeBuilder::DirFor(const std::string& path, uint32_t mode, int64_t mtime_s,
                             uint32_t mtime_ns) {
  auto it = dirs_.find(path);
  if (it != dirs_.end()) return it->second;
  uint32_t id = Dir(path, mtime_s);
  nodes_[id].SetTimes(mode, mtime_s, mtime_ns);
  return id;
}

uint64_t TreeBuilder::AddTarget(std::string_view target) {
  uint64_t off = targets_.size();
  targets_.append(target);
  return off;
}

uint32_t TreeBuilder::FileSoFar(const std::string& path) {
  size_t slash = path.rfind('/');
  auto dir = dirs_.find(slash == std::string::npos ? "" : path.substr(0, slash));
  if (dir == dirs_.end()) return UINT32_MAX;
  std::string_view name =
      slash == std::string::npos ? path : std::string_view(path).substr(slash + 1);
  // Found through an index of every entry by directory and name, made at the first hard
  // link (archives without any need none): scanning the directory, a large one with many
  // links took quadratic time.
  if (!indexed_) {
    indexed_ = true;
    for (uint32_t id = 1; id < nodes_.size(); ++id) Index(id);
  }
  auto it = latest_.find(EntryKey(dir->second, name));
  if (it == latest_.end()) return UINT32_MAX;
  return S_ISREG(nodes_[it->second].mode) ? it->second : UINT32_MAX;
}

void TreeBuilder::SortChildren(PackStats* st) {
  auto before = [&](uint32_t a, uint32_t b) { return nodes_[a].name < nodes_[b].name; };
  for (Node& n : nodes_) {
    if (n.children.empty()) continue;
    // A store's directories come back sorted and unique (the common case of `dsfs add`).
    if (std::adjacent_find(n.children.begin(), n.children.end(), [&](uint32_t a, uint32_t b) {
          return !before(a, b);
        }) == n.children.end()) {
      continue;
    }
    std::stable_sort(n.children.begin(), n.children.end(), before);
    // Keep the last of equal names (stable sort keeps the order of addition among them).
    std::vector<uint32_t> unique;
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (i + 1 < n.children.size() &&
          nodes_[n.children[i]].name == nodes_[n.children[i + 1]].name) {
        Dropped(n.children[i], n.children[i + 1], st);
        continue;
      }
      unique.push_back(n.children[i]);
    }
    n.children.swap(unique);
  }
}

Status TreeBuilder::ResolveLinks() {
  // Each link's file: the end of its chain of links, found once per link (a chain of links
  // to links, each to the one before, would otherwise be walked once per link: quadratic).
  std::unordered_map<uint32_t, uint32_t> file_of;
  std::vector<uint32_t> chain;
  for (const auto& [id, first] : link_source_) {
    uint32_t src = first;
    chain.assign(1, id);
    for (size_t steps = 0;;) {
      if (auto done = file_of.find(src); done != file_of.end()) {
        src = done->second;
        break;
      }
      auto next = link_source_.find(src);
      if (next == link_source_.end()) break;
      if (++steps > link_source_.size()) {
        return Status::InvalidArgument("archive hard links form a cycle: " + nodes_[id].name);
      }
      chain.push_back(src);
      src = next->second;
    }
    for (uint32_t c : chain) file_of[c] = src;
    nodes_[id].SetContents(nodes_[src].Contents());
  }
  return Status::OK();
}

Status TreeBuilder::Build(std::vector<InodeRecord>* inodes, std::string* names, PackStats* st) {
  *st = PackStats{};
  inodes->reserve(inodes->size() + nodes_.size());
  SortChildren(st);
  DSFS_RETURN_IF_ERROR(ResolveLinks());
  std::vector<uint32_t> order{0};  // node ids in inode order
  std::vector<uint32_t> ino_of(nodes_.size(), 0);
  ino_of[0] = 1;
  if (nodes_.size() >= UINT32_MAX - 1) {
    return Status::InvalidArgument("too many entries for one store (over 4 billion)");
  }
  inodes->clear();
  names->clear();
  // Breadth-first: order[i] is `level` directories down the tree while i < level_end.
  size_t level_end = 1;
  uint32_t level = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == level_end) {
      ++level;
      level_end = order.size();
    }
    const Node& n = nodes_[order[i]];
    if (S_ISDIR(n.mode) && level > kMaxTreeDepth) {
      return Status::InvalidArgument("tree too deep: " + Shorten(PathOf(order[i])) + " is " +
                                     std::to_string(level) + " directories down (at most " +
                                     std::to_string(kMaxTreeDepth) + ")");
    }
    const bool file = !S_ISDIR(n.mode) && !S_ISLNK(n.mode);
    InodeRecord r = file ? n.Contents() : InodeRecord{};
    r.mode = n.mode;
    r.mtime_s = n.mtime_s;
    r.mtime_ns = n.mtime_ns;
    r.parent = ino_of[n.parent];
    r.name_off = names->size();
    r.name_len = static_cast<uint32_t>(n.name.size());
    names->append(n.name);
    if (S_ISDIR(n.mode)) {
      ++st->dirs;
      r.size = n.children.size();
      r.data = n.children.empty() ? 0 : order.size() + 1;
      for (uint32_t c : n.children) {
        ino_of[c] = static_cast<uint32_t>(order.size() + 1);
        order.push_back(c);
      }
    } else if (S_ISLNK(n.mode)) {
      ++st->symlinks;
      r.size = n.size;
      r.data = names->size();
      names->append(targets_, n.data, n.size);
    } else {
      ++st->files;
      st->bytes_in += n.size;
    }
    inodes->push_back(r);
  }
  return Status::OK();
}

void TreeBuilder::Dropped(uint32_t old, uint32_t by, PackStats* st) {
  constexpr uint64_t kDropWarnings = 20;
  ++st->replaced;
  uint64_t below = 0;
  std::vector<uint32_t> stack = nodes_[old].children;
  while (!stack.empty()) {
    uint32_t c = stack.back();
    stack.pop_back();
    ++below;
    stack.insert(stack.end(), nodes_[c].children.begin(), nodes_[c].children.end());
  }
  st->dropped += below;
  auto kind = [&](uint32_t id) {
    uint32_t type = nodes_[id].mode & S_IFMT;
    return type == S_IFDIR ? "directory" : type == S_IFLNK ? "symlink" : "file";
  };
  if (below == 0 && (nodes_[old].mode & S_IFMT) == (nodes_[by].mode & S_IFMT)) return;
  if (++drop_warnings_ <= kDropWarnings) {
    Log()->warn("{}: a {} replaced by a later {} of the same path{}", Shorten(PathOf(old)),
                kind(old), kind(by),
                below ? " (" + std::to_string(below) + " entries below it dropped)" : "");
  } else if (drop_warnings_ == kDropWarnings + 1) {
    Log()->warn("more entries replaced: not logged one by one (counted in the summary)");
  }
}

std::string TreeBuilder::PathOf(uint32_t id) const {
  std::vector<std::string_view> parts;
  for (; id != 0; id = nodes_[id].parent) parts.push_back(nodes_[id].name);
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += *it;
  }
  return path;
}

std::string TreeBuilder::EntryKey(uint32_t parent, std::string_view name) {
  std::string key(reinterpret_cast<const char*>(&parent), sizeof(parent));
  key.append(name);
  return key;
}

uint32_t TreeBuilder::Add(Node n) {
  uint32_t id = static_cast<uint32_t>(nodes_.size());
  nodes_[n.parent].children.push_back(id);
  nodes_.push_back(std::move(n));
  if (indexed_) Index(id);
  return id;
}

}  // namespace dsfs
