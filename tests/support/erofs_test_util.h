// Helpers for the EROFS tests: an in-memory ImageTree, listings of trees for comparison, image
// files, fsck.erofs and kernel mounts that are always undone.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "erofs/image.h"
#include "tests/support/test_util.h"

namespace dsfs::erofs::testing {

using dsfs::testing::RunCommand;
using dsfs::testing::TempDir;

// ---- An in-memory tree -------------------------------------------------------------------

constexpr uint32_t kDir = 0040000, kReg = 0100000, kLink = 0120000;

struct Node {
  std::string name;
  uint32_t mode = kReg | 0644;
  uint32_t uid = 0, gid = 0;
  int64_t mtime_s = 1700000000;
  uint32_t mtime_ns = 0;
  std::string data;          // file contents or symlink target
  uint64_t sparse_size = 0;  // a file this big of SparseByte()s, never held in memory
  std::vector<Node> children;
};

// Zero but for 64 bytes at every GiB and at the very end.
constexpr uint64_t kGiB = uint64_t{1} << 30;
inline char SparseByte(uint64_t o, uint64_t size) {
  const bool marked = o % kGiB < 64 || o + 64 >= size;
  return marked ? static_cast<char>(1 + (o * 131 + o / kGiB) % 251) : 0;
}

inline Node Dir(std::string name, std::vector<Node> children, uint32_t perm = 0755) {
  Node n;
  n.name = std::move(name);
  n.mode = kDir | perm;
  n.children = std::move(children);
  return n;
}
inline Node File(std::string name, std::string data, uint32_t perm = 0644) {
  Node n;
  n.name = std::move(name);
  n.mode = kReg | perm;
  n.data = std::move(data);
  return n;
}
inline Node Link(std::string name, std::string target) {
  Node n;
  n.name = std::move(name);
  n.mode = kLink | 0777;
  n.data = std::move(target);
  return n;
}

// The tree numbered as the store numbers it: breadth first, each directory's children
// consecutive and sorted bytewise. Optionally fails ReadData of one inode.
class FakeTree : public ImageTree {
 public:
  explicit FakeTree(const Node* root) {
    std::deque<const Node*> queue{root};
    flat_.push_back({root});
    for (size_t i = 0; i < flat_.size(); i++) {
      const Node* n = flat_[i].node;
      if ((n->mode & 0170000) != kDir) continue;
      std::vector<const Node*> kids;
      for (const Node& c : n->children) kids.push_back(&c);
      std::sort(kids.begin(), kids.end(),
                [](const Node* a, const Node* b) { return a->name < b->name; });
      flat_[i].first = static_cast<uint32_t>(flat_.size());
      flat_[i].count = static_cast<uint32_t>(kids.size());
      for (const Node* k : kids) flat_.push_back({k});
    }
  }
  void FailReadOf(uint32_t ino) { fail_ino_ = ino; }
  const Node* node(uint32_t ino) const { return flat_[ino].node; }

  uint32_t inode_count() const override { return static_cast<uint32_t>(flat_.size()); }
  Status GetInode(uint32_t ino, ImageInode* inode) const override {
    if (ino >= flat_.size()) return Status::NotFound("no such inode");
    const Flat& f = flat_[ino];
    *inode = ImageInode{};
    inode->mode = f.node->mode;
    inode->uid = f.node->uid;
    inode->gid = f.node->gid;
    inode->mtime_s = f.node->mtime_s;
    inode->mtime_ns = f.node->mtime_ns;
    inode->size = f.node->sparse_size ? f.node->sparse_size : f.node->data.size();
    inode->name_len = static_cast<uint32_t>(f.node->name.size());
    inode->first_child = f.first;
    inode->child_count = f.count;
    return Status::OK();
  }
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override {
    *name = flat_[ino].node->name;
    return Status::OK();
  }
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override {
    if (ino == fail_ino_) return Status::Corruption("injected: damaged record");
    const Node* n = flat_[ino].node;
    if (n->sparse_size) {
      EXPECT_LE(offset + len, n->sparse_size);
      std::memset(dst, 0, len);
      // Only the marked bytes, found without touching each byte.
      for (uint64_t g = offset / kGiB * kGiB; g < offset + len; g += kGiB) {
        for (uint64_t o = std::max(g, offset); o < std::min(g + 64, offset + len); o++) {
          dst[o - offset] = SparseByte(o, n->sparse_size);
        }
      }
      const uint64_t tail = n->sparse_size - 64;
      for (uint64_t o = std::max(tail, offset); o < offset + len; o++) {
        dst[o - offset] = SparseByte(o, n->sparse_size);
      }
      return Status::OK();
    }
    EXPECT_LE(offset + len, n->data.size()) << n->name;
    if (offset + len > n->data.size()) return Status::InvalidArgument("read past end");
    std::memcpy(dst, n->data.data() + offset, len);
    return Status::OK();
  }

 private:
  struct Flat {
    const Node* node;
    uint32_t first = 0, count = 0;
  };
  std::vector<Flat> flat_;
  uint32_t fail_ino_ = UINT32_MAX;
};

// ---- Listings: what a tree shows, for comparison ------------------------------------------

struct Compare {
  bool owner = true, mode = true, mtime = true, root = true;
  // fsck.erofs 1.5 extracting: it chowns after chmod, which clears setuid/setgid, and a
  // symlink's own mode cannot be set on Linux.
  bool extracted = false;
};

// Files over this size are compared by SparseByte() markers, not read whole.
constexpr uint64_t kSparseThreshold = uint64_t{1} << 31;

// `adjust` (may be null) changes what lstat says before it is listed.
using Adjust = std::function<void(struct stat*)>;

// Every path of a tree ("" = the root) with its type, attributes (as `c` says), nlink and
// contents or link target.
std::map<std::string, std::string> ListFake(const Node& root, const Compare& c);
std::map<std::string, std::string> ListDisk(const std::string& dir, const Compare& c,
                                            const Adjust& adjust = nullptr);
// Reports the first few differences between two listings.
void ExpectSameListing(const std::map<std::string, std::string>& want,
                       const std::map<std::string, std::string>& got, const std::string& what);

// ---- Image files, fsck.erofs and the kernel ------------------------------------------------

// Streams the whole image to `path` in 1 MiB reads; all-zero stretches are left as holes.
void WriteImage(const Image& image, const std::string& path);
// fsck.erofs-1.9 where installed (/usr/local/bin), else Debian's fsck.erofs.
const std::string& FsckBinary();
// Whether FsckBinary() knows compressed images (fragments, zstd): erofs-utils 1.9.
bool FsckKnowsCompressed();
bool HaveFsck();
// FsckBinary() IMG, extracting into `extract` unless it is empty.
void Fsck(const std::string& image, const std::string& extract = "");
// Why the kernel cannot be tried here ("" if it can).
std::string KernelUnavailable();

// A read-only loop device over an image file with EROFS mounted on it; unmounted and detached
// on destruction, whatever happened.
class KernelMount {
 public:
  ~KernelMount() {
    if (!dir_.empty()) {
      auto r = RunCommand({"umount", dir_});
      if (r.exit_code != 0) RunCommand({"umount", "-l", dir_});
    }
    if (!loop_.empty()) RunCommand({"losetup", "-d", loop_});
  }
  // "" when mounted; otherwise what failed. *skip: the loop device, not EROFS, failed.
  std::string Mount(const std::string& image, const std::string& dir, bool* skip) {
    *skip = false;
    auto r = RunCommand({"losetup", "--find", "--show", "--read-only", image});
    if (r.exit_code != 0) {
      *skip = true;
      return "no loop device: " + r.err;
    }
    loop_ = r.out.substr(0, r.out.find('\n'));
    r = RunCommand({"mount", "-t", "erofs", "-o", "ro", loop_, dir});
    if (r.exit_code != 0) {
      auto dmesg = RunCommand({"sh", "-c", "dmesg | grep -i erofs | tail -5"});
      return "mount -t erofs failed: " + r.err + dmesg.out;
    }
    dir_ = dir;
    return "";
  }

 private:
  std::string loop_, dir_;
};

// Builds the image of `tree`, streams it, runs fsck.erofs (extracting and comparing with
// `extracted_want` if given) and mounts it to compare with `mounted_want`. `check_mount` runs
// more checks on the mounted directory. Says plainly what it skipped.
void CheckImage(const ImageTree& tree, const ImageOptions& options,
                const std::map<std::string, std::string>* extracted_want, const Compare& extracted,
                const std::map<std::string, std::string>& mounted_want, const Compare& mounted,
                const std::function<void(const std::string&)>& check_mount = nullptr);
// CheckImage of a FakeTree of `root`, compared with `root` itself.
void CheckFake(const Node& root, const ImageOptions& options,
               const std::function<void(const std::string&)>& check_mount = nullptr,
               bool extract = true);

inline std::string Bytes(size_t n, uint32_t seed) { return dsfs::testing::RandomBytes(n, seed); }

// The packed inode of a compressed image of a FakeTree, made as a format 5 store makes its
// groups (PayloadEncoder::EncodeKernelGroup's frames): the bytes of its regular files of 1 to
// `max_file` bytes in inode order, cut between files into extents of `extent_bytes` or more
// (the last one joins the one before when smaller).
class FakePacked : public PackedData {
 public:
  FakePacked(const FakeTree& tree, uint64_t max_file, uint64_t extent_bytes);
  Status ForEachExtent(
      const std::function<Status(uint64_t decoded, uint32_t frame)>& fn) const override;
  Status ReadFrame(uint64_t e, uint64_t offset, size_t len, char* dst) const override;
  Status FragmentOf(uint32_t ino, uint64_t* e, uint64_t* offset) const override;

 private:
  std::vector<std::string> frames_;
  std::vector<uint64_t> decoded_;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> where_;  // ino -> (extent, offset)
};

}  // namespace dsfs::erofs::testing
