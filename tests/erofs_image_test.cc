// EROFS images synthesized from trees (erofs/image.h, erofs/store_tree.h). Each image is
// streamed to a file through Image::Read and checked by erofs-utils' fsck.erofs (extracting the
// tree and comparing it) and, as root where the kernel has EROFS, loop-mounted and compared
// with its source: names, types, modes, owners, mtimes, sizes, nlinks, bytes, link targets.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "erofs/image.h"
#include "erofs/store_tree.h"
#include "tests/test_util.h"

namespace dsfs::erofs {
namespace {

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
char SparseByte(uint64_t o, uint64_t size) {
  const bool marked = o % kGiB < 64 || o + 64 >= size;
  return marked ? static_cast<char>(1 + (o * 131 + o / kGiB) % 251) : 0;
}

Node Dir(std::string name, std::vector<Node> children, uint32_t perm = 0755) {
  Node n;
  n.name = std::move(name);
  n.mode = kDir | perm;
  n.children = std::move(children);
  return n;
}
Node File(std::string name, std::string data, uint32_t perm = 0644) {
  Node n;
  n.name = std::move(name);
  n.mode = kReg | perm;
  n.data = std::move(data);
  return n;
}
Node Link(std::string name, std::string target) {
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

std::string ContentKey(std::string_view bytes) {
  if (bytes.size() <= 256) return std::string(bytes);
  return "#" + std::to_string(bytes.size()) + ":" +
         std::to_string(std::hash<std::string_view>()(bytes));
}

std::string Describe(const Compare& c, uint32_t mode, uint32_t uid, uint32_t gid, int64_t ms,
                     uint32_t mns, uint64_t size, uint64_t nlink, const std::string& content) {
  char buf[160];
  const uint32_t type = mode & 0170000;
  std::snprintf(buf, sizeof(buf), "%s", type == kDir ? "dir" : type == kLink ? "link" : "file");
  std::string s = buf;
  if (c.mode && !(c.extracted && type == kLink)) {
    s += " mode=" + std::to_string(mode & (c.extracted ? 01777 : 07777));
  }
  if (c.owner) s += " uid=" + std::to_string(uid) + " gid=" + std::to_string(gid);
  if (c.mtime) s += " mtime=" + std::to_string(ms) + "." + std::to_string(mns);
  if (type != kDir) s += " size=" + std::to_string(size);
  s += " nlink=" + std::to_string(nlink);
  return s + " " + content;
}

void ListNode(const Node& n, const std::string& path, const Compare& c,
              std::map<std::string, std::string>* out) {
  const uint32_t type = n.mode & 0170000;
  uint64_t nlink = 1;
  if (type == kDir) {
    nlink = 2;
    for (const Node& k : n.children) nlink += (k.mode & 0170000) == kDir;
  }
  const uint64_t size = n.sparse_size ? n.sparse_size : n.data.size();
  const std::string content = type == kDir ? "" : n.sparse_size ? "sparse" : ContentKey(n.data);
  if (!path.empty() || c.root) {
    (*out)[path] = Describe(c, n.mode, n.uid, n.gid, n.mtime_s, n.mtime_ns, size, nlink, content);
  }
  for (const Node& k : n.children) ListNode(k, path.empty() ? k.name : path + "/" + k.name, c, out);
}

std::map<std::string, std::string> ListFake(const Node& root, const Compare& c) {
  std::map<std::string, std::string> out;
  ListNode(root, "", c, &out);
  return out;
}

// Files over this size are compared by SparseByte() markers, not read whole.
constexpr uint64_t kSparseThreshold = uint64_t{1} << 31;

// `adjust` (may be null) changes what lstat says before it is listed.
using Adjust = std::function<void(struct stat*)>;

void ListDisk(const std::string& base, const std::string& rel, const Compare& c,
              const Adjust& adjust, std::map<std::string, std::string>* out) {
  const std::string full = rel.empty() ? base : base + "/" + rel;
  struct stat st;
  ASSERT_EQ(::lstat(full.c_str(), &st), 0) << full << ": " << std::strerror(errno);
  if (adjust) adjust(&st);
  std::string content;
  const uint32_t type = st.st_mode & 0170000;
  if (type == kLink) {
    std::string target(st.st_size + 1, '\0');
    ssize_t n = ::readlink(full.c_str(), target.data(), target.size());
    ASSERT_EQ(n, st.st_size) << full;
    target.resize(n);
    content = ContentKey(target);
  } else if (type == kReg) {
    if (static_cast<uint64_t>(st.st_size) > kSparseThreshold) {
      content = "sparse";
    } else {
      content = ContentKey(dsfs::testing::ReadFile(full));
    }
  }
  if (!rel.empty() || c.root) {
    (*out)[rel] =
        Describe(c, st.st_mode, st.st_uid, st.st_gid, st.st_mtim.tv_sec,
                 static_cast<uint32_t>(st.st_mtim.tv_nsec), st.st_size, st.st_nlink, content);
  }
  if (type != kDir) return;
  std::vector<std::string> names;
  {
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(full.c_str()), ::closedir);
    ASSERT_TRUE(d) << full;
    while (dirent* e = ::readdir(d.get())) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    ListDisk(base, rel.empty() ? name : rel + "/" + name, c, adjust, out);
  }
}

std::map<std::string, std::string> ListDisk(const std::string& dir, const Compare& c,
                                            const Adjust& adjust = nullptr) {
  std::map<std::string, std::string> out;
  ListDisk(dir, "", c, adjust, &out);
  return out;
}

// Reports the first few differences between two listings.
void ExpectSameListing(const std::map<std::string, std::string>& want,
                       const std::map<std::string, std::string>& got, const std::string& what) {
  EXPECT_EQ(want.size(), got.size()) << what;
  int shown = 0;
  for (const auto& [path, desc] : want) {
    auto it = got.find(path);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": missing " << path;
    } else if (it->second != desc) {
      ADD_FAILURE() << what << ": " << path << "\n  want " << desc << "\n  got  " << it->second;
    } else {
      continue;
    }
    if (++shown == 10) return;
  }
  for (const auto& [path, desc] : got) {
    if (!want.count(path) && shown++ < 10) ADD_FAILURE() << what << ": extra " << path;
  }
}

// ---- Image files, fsck.erofs and the kernel ------------------------------------------------

// Streams the whole image to `path` in 1 MiB reads; all-zero stretches are left as holes.
void WriteImage(const Image& image, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < image.size_bytes(); off += buf.size()) {
    const size_t n = std::min<uint64_t>(buf.size(), image.size_bytes() - off);
    Status s = image.Read(off, n, buf.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    const bool zero = std::all_of(buf.begin(), buf.begin() + n, [](char ch) { return ch == 0; });
    if (!zero) {
      ASSERT_EQ(::pwrite(fd, buf.data(), n, off), static_cast<ssize_t>(n));
    }
  }
  ASSERT_EQ(::ftruncate(fd, image.size_bytes()), 0);
  ::close(fd);
}

bool HaveFsck() { return RunCommand({"fsck.erofs", "-V"}).exit_code == 0; }

// fsck.erofs IMG, extracting into `extract` unless it is empty.
void Fsck(const std::string& image, const std::string& extract = "") {
  std::vector<std::string> argv{"fsck.erofs"};
  if (!extract.empty()) argv.push_back("--extract=" + extract);
  argv.push_back(image);
  auto r = RunCommand(argv, 300);
  EXPECT_EQ(r.exit_code, 0) << "fsck.erofs " << image << "\n" << r.out << r.err;
}

// Why the kernel cannot be tried here ("" if it can).
std::string KernelUnavailable() {
  if (::geteuid() != 0) return "not root";
  std::ifstream f("/proc/filesystems");
  std::string line;
  while (std::getline(f, line)) {
    if (line.find("erofs") != std::string::npos) return "";
  }
  return "the kernel has no EROFS (/proc/filesystems)";
}

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
// more checks on the mounted directory.
void CheckImage(const ImageTree& tree, const ImageOptions& options,
                const std::map<std::string, std::string>* extracted_want, const Compare& extracted,
                const std::map<std::string, std::string>& mounted_want, const Compare& mounted,
                const std::function<void(const std::string&)>& check_mount = nullptr) {
  std::unique_ptr<Image> image;
  Status s = Image::Build(&tree, options, &image);
  ASSERT_TRUE(s.ok()) << s.ToString();
  TempDir tmp;
  const std::string img = tmp / "image.erofs";
  ASSERT_NO_FATAL_FAILURE(WriteImage(*image, img));
  if (HaveFsck()) {
    if (extracted_want) {
      const std::string out = tmp / "extracted";
      Fsck(img, out);
      ExpectSameListing(*extracted_want, ListDisk(out, extracted), "fsck.erofs --extract");
    } else {
      Fsck(img);
    }
  } else {
    std::cout << "[  NOTE    ] fsck.erofs not installed (tools/setup.sh): fsck check SKIPPED\n";
  }
  const std::string why = KernelUnavailable();
  if (!why.empty()) {
    std::cout << "[  NOTE    ] kernel mount SKIPPED: " << why << "\n";
    return;
  }
  const std::string mnt = tmp / "mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  KernelMount m;
  bool skip;
  const std::string err = m.Mount(img, mnt, &skip);
  if (skip) {
    std::cout << "[  NOTE    ] kernel mount SKIPPED: " << err << "\n";
    return;
  }
  ASSERT_EQ(err, "");
  ExpectSameListing(mounted_want, ListDisk(mnt, mounted), "kernel mount");
  if (check_mount) check_mount(mnt);
}

void CheckFake(const Node& root, const ImageOptions& options,
               const std::function<void(const std::string&)>& check_mount = nullptr,
               bool extract = true) {
  FakeTree tree(&root);
  // fsck.erofs 1.5 extracts names, types, bytes, modes and owners (as root), not mtimes.
  Compare ex;
  ex.mtime = false;
  ex.root = false;
  ex.extracted = true;
  ex.owner = ex.mode = ::geteuid() == 0;
  const auto extracted_want = ListFake(root, ex);
  CheckImage(tree, options, extract ? &extracted_want : nullptr, ex, ListFake(root, Compare{}),
             Compare{}, check_mount);
}

// ---- The trees -----------------------------------------------------------------------------

std::string Bytes(size_t n, uint32_t seed) { return dsfs::testing::RandomBytes(n, seed); }

Node OddTree() {
  std::vector<Node> top;
  top.push_back(File("empty", ""));
  top.push_back(Dir("emptydir", {}));
  top.push_back(File(std::string(255, 'n'), "longest name"));
  top.push_back(Dir(std::string(254, 'd') + "x", {File(std::string(255, 'f'), "x")}));
  // Names that sort around "." and "..": '-' and '!' before '.', ".-x" between them.
  for (const char* name : {"-dash", "!bang", ".-x", "..a", ".hidden", "...", "\xc3\xa9t\xc3\xa9",
                           "\xff", "UPPER", "lower", "a b", "0"}) {
    top.push_back(File(name, name));
  }
  top.push_back(Link("l1", "x"));
  top.push_back(Link("lshort", "../some/where"));
  top.push_back(Link("llong", std::string(4000, 'L')));
  top.push_back(Link("lmax", std::string(4095, 'M')));
  top.push_back(Link("ldangling", "/nonexistent/target"));
  // Sizes around the block and the inline rules (64-byte inode + 4032 bytes = one block).
  uint32_t seed = 1;
  std::vector<Node> sizes;
  for (size_t n : {1, 31, 32, 33, 1000, 2049, 4031, 4032, 4033, 4064, 4095, 4096, 4097, 8191, 8192,
                   8193, 12000, 65536, 1048576 + 17}) {
    sizes.push_back(File("s" + std::to_string(n), Bytes(n, seed++)));
  }
  top.push_back(Dir("sizes", std::move(sizes)));
  // Odd modes.
  std::vector<Node> modes;
  modes.push_back(File("setuid", "su", 04755));
  modes.push_back(File("setgid", "sg", 02755));
  modes.push_back(File("none", "no permission", 0));
  modes.push_back(File("all", "all", 07777));
  modes.push_back(Dir("sticky", {File("f", "in sticky")}, 01777));
  modes.push_back(Dir("noperm", {}, 0));
  top.push_back(Dir("modes", std::move(modes)));
  // Owners: 16-bit, 32-bit (extended inodes).
  std::vector<Node> owners;
  for (uint32_t id : {0u, 1u, 65535u, 65536u, 1000000u, 4000000000u}) {
    Node f = File("u" + std::to_string(id), "owned");
    f.uid = id;
    f.gid = id ? id - 1 : 0;
    owners.push_back(f);
  }
  top.push_back(Dir("owners", std::move(owners)));
  // Many mtimes, some equal to the root's (compact inodes), with nanoseconds.
  std::vector<Node> times;
  for (int i = 0; i < 200; i++) {
    Node f = File("t" + std::to_string(i), std::to_string(i));
    f.mtime_s = i % 3 == 0 ? 1700000000 : 1000000000 + int64_t{i} * 86400 * 37;
    f.mtime_ns = i % 3 == 0 ? 0 : static_cast<uint32_t>(i * 4999999) % 1000000000;
    times.push_back(f);
  }
  Node t0 = File("epoch", "0");
  t0.mtime_s = 0;
  times.push_back(t0);
  Node t1 = File("y2100", "2100");
  t1.mtime_s = 4102444800;
  t1.mtime_ns = 999999999;
  times.push_back(t1);
  top.push_back(Dir("times", std::move(times)));
  // Deep nesting.
  Node deep = Dir("d", {File("leaf", "bottom")});
  for (int i = 0; i < 60; i++) deep = Dir("d" + std::to_string(i % 7), {deep, File("x", "x")});
  top.push_back(deep);
  // Many tiny files, several per metadata block when inlined.
  std::vector<Node> tiny;
  for (int i = 0; i < 300; i++)
    tiny.push_back(File("img" + std::to_string(i) + ".jpg", Bytes(900 + i * 3, 1000 + i)));
  top.push_back(Dir("class", std::move(tiny)));
  return Dir("", std::move(top));
}

class ErofsOptionsTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  ImageOptions Options() const {
    ImageOptions o;
    o.inline_data = std::get<0>(GetParam());
    o.compact_inodes = std::get<1>(GetParam());
    o.volume_name = "dsfs-test";
    return o;
  }
};

TEST_P(ErofsOptionsTest, OddTreeChecksAndMountsAsItsSource) {
  const Node root = OddTree();
  CheckFake(root, Options(), [&](const std::string& mnt) {
    // Lookups by path go through the kernel's binary search over directory blocks.
    struct stat st;
    EXPECT_EQ(::lstat((mnt + "/" + std::string(255, 'n')).c_str(), &st), 0);
    EXPECT_EQ(::lstat((mnt + "/.-x").c_str(), &st), 0);
    EXPECT_EQ(::lstat((mnt + "/..a").c_str(), &st), 0);
    EXPECT_NE(::lstat((mnt + "/nope").c_str(), &st), 0);
    // ".." of a nested directory is its parent.
    struct stat a, b;
    ASSERT_EQ(::stat((mnt + "/modes/sticky/..").c_str(), &a), 0);
    ASSERT_EQ(::stat((mnt + "/modes").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, ErofsOptionsTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Inline" : "Plain") +
                                  (std::get<1>(info.param) ? "Compact" : "Extended");
                         });

// The inode format does not change how directories are split: only inline on and off.
class ErofsInlineTest : public ::testing::TestWithParam<bool> {};

TEST_P(ErofsInlineTest, HundredThousandEntryDirectory) {
  std::vector<Node> files;
  files.reserve(100000);
  for (int i = 0; i < 100000; i++) {
    char name[32];
    std::snprintf(name, sizeof(name), "n%06d_%x.jpg", i, i * 2654435761u);
    // Mostly empty: the directory is under test (a data block per file makes the
    // plain layout's kernel listing take 10 s here).
    files.push_back(File(name, i % 100 ? "" : std::string(1, static_cast<char>(i))));
  }
  files.push_back(Dir("sub", {}));
  Node root = Dir("", {Dir("big", std::move(files))});
  ImageOptions options;
  options.inline_data = GetParam();
  CheckFake(
      root, options,
      [](const std::string& mnt) {
        struct stat st;
        for (int i : {0, 1, 4999, 50000, 99998, 99999}) {
          char name[32];
          std::snprintf(name, sizeof(name), "n%06d_%x.jpg", i, i * 2654435761u);
          EXPECT_EQ(::lstat((mnt + "/big/" + name).c_str(), &st), 0) << name;
        }
        EXPECT_NE(::lstat((mnt + "/big/n100000.jpg").c_str(), &st), 0);
        ASSERT_EQ(::lstat((mnt + "/big").c_str(), &st), 0);
        EXPECT_EQ(st.st_nlink, 3u);
      },
      /*extract=*/false);  // fsck.erofs 1.5 takes 8 s to extract 100,000 files
}

INSTANTIATE_TEST_SUITE_P(Layouts, ErofsInlineTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Inline" : "Plain"; });

// Tail packing puts tiny files in the metadata blocks, several per block; compact inodes take
// 32 bytes where the mtime is the root's.
TEST(ErofsImageTest, InlineAndCompactLayouts) {
  std::vector<Node> files;
  for (int i = 0; i < 300; i++)
    files.push_back(File("f" + std::to_string(1000 + i), Bytes(1000, i)));
  for (int i = 0; i < 100; i++) files.push_back(File("z" + std::to_string(1000 + i), ""));
  const Node root = Dir("", std::move(files));
  FakeTree tree(&root);
  std::unique_ptr<Image> inl, plain, ext;
  ImageOptions o;
  ASSERT_TRUE(Image::Build(&tree, o, &inl).ok());
  o.inline_data = false;
  ASSERT_TRUE(Image::Build(&tree, o, &plain).ok());
  o.compact_inodes = false;
  ASSERT_TRUE(Image::Build(&tree, o, &ext).ok());
  // Inline: three 1,000-byte files and their 64-byte inodes per block; the one data block is
  // the root directory's first (its tail is inline).
  EXPECT_EQ(inl->size_bytes(), (inl->meta_blocks() + uint64_t{1}) * 4096);
  EXPECT_LE(inl->meta_blocks(), 300 / 3 + 3);
  // Plain: one data block per file.
  EXPECT_GE(plain->size_bytes(), (300 + uint64_t{plain->meta_blocks()}) * 4096);
  // The root is nid 36, right after the superblock, as mkfs.erofs puts it.
  EXPECT_EQ(inl->nid(0), 36u);
  // The empty files (last 100 inodes) share the root's mtime: 32-byte compact inodes...
  EXPECT_EQ(plain->nid(400) - plain->nid(399), 1u);
  // ...or 64-byte extended ones when asked.
  EXPECT_EQ(ext->nid(400) - ext->nid(399), 2u);
  EXPECT_GT(inl->memory_bytes(), 0u);
}

TEST(ErofsImageTest, RootOnly) {
  Node root = Dir("", {}, 0700);
  root.uid = 70000;
  root.mtime_ns = 123;
  CheckFake(root, ImageOptions{});
}

TEST(ErofsImageTest, FileOver4GiBIsSparseAndReadable) {
  const uint64_t size = 4 * kGiB + 12345;
  Node big;
  big.name = "big";
  big.sparse_size = size;
  Node root = Dir("", {big, File("after", "after the big one")});
  ImageOptions options;
  // No extraction: fsck.erofs would write 4 GiB out. It still reads every block of it.
  CheckFake(
      root, options,
      [&](const std::string& mnt) {
        int fd = ::open((mnt + "/big").c_str(), O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        for (uint64_t at : {uint64_t{0}, kGiB - 10, 4 * kGiB, size - 100, uint64_t{12345678}}) {
          char buf[100];
          ASSERT_EQ(::pread(fd, buf, sizeof(buf), at), 100) << at;
          for (int i = 0; i < 100; i++) ASSERT_EQ(buf[i], SparseByte(at + i, size)) << at + i;
        }
        ::close(fd);
      },
      /*extract=*/false);
}

// The same image whether read whole or at any offsets, in any lengths, from many threads.
TEST(ErofsImageTest, ReadsAtAnyOffsetMatchTheWholeImage) {
  const Node root = OddTree();
  FakeTree tree(&root);
  for (bool inline_data : {true, false}) {
    ImageOptions options;
    options.inline_data = inline_data;
    std::unique_ptr<Image> image;
    ASSERT_TRUE(Image::Build(&tree, options, &image).ok());
    std::string whole(image->size_bytes(), '\0');
    ASSERT_TRUE(image->Read(0, whole.size(), whole.data()).ok());
    std::string stitched;
    for (uint64_t off = 0; off < whole.size();) {  // block-sized reads, stitched
      const size_t n = std::min<uint64_t>(4096, whole.size() - off);
      std::string part(n, '\0');
      ASSERT_TRUE(image->Read(off, n, part.data()).ok());
      stitched += part;
      off += n;
    }
    ASSERT_TRUE(stitched == whole);
    auto check = [&](uint32_t seed, int rounds) {
      std::mt19937_64 rng(seed);
      for (int i = 0; i < rounds; i++) {
        const uint64_t off = rng() % whole.size();
        const uint64_t max_len = rng() % 4 == 0 ? (2 << 20) : 9000;
        const size_t len = std::min<uint64_t>(rng() % max_len + 1, whole.size() - off);
        std::string part(len, '\x5a');
        Status s = image->Read(off, len, part.data());
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_TRUE(part == whole.substr(off, len)) << "offset " << off << " length " << len;
      }
    };
    check(7, 400);
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < 4; t++) threads.emplace_back(check, 100 + t, 100);
    for (auto& t : threads) t.join();
    char c;
    EXPECT_TRUE(image->Read(whole.size(), 0, &c).ok());
    EXPECT_EQ(image->Read(whole.size(), 1, &c).code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(image->Read(whole.size() - 1, 2, &c).code(), Status::Code::kInvalidArgument);
  }
}

// A ReadData error fails the Read of a range that holds that inode's data, not other reads.
TEST(ErofsImageTest, ReadDataErrorFailsTheRead) {
  const Node root = Dir("", {File("tiny", "inline bytes"), File("block", Bytes(10000, 3)),
                             File("zother", Bytes(9000, 4))});
  for (bool inline_data : {true, false}) {
    for (const char* victim : {"tiny", "block"}) {
      FakeTree tree(&root);
      uint32_t ino = 0;
      for (uint32_t i = 1; i < tree.inode_count(); i++) {
        if (tree.node(i)->name == victim) ino = i;
      }
      tree.FailReadOf(ino);
      ImageOptions options;
      options.inline_data = inline_data;
      std::unique_ptr<Image> image;
      ASSERT_TRUE(Image::Build(&tree, options, &image).ok());  // Build reads no data
      std::string whole(image->size_bytes(), '\0');
      Status s = image->Read(0, whole.size(), whole.data());
      EXPECT_TRUE(s.IsCorruption()) << s.ToString();
      EXPECT_NE(s.message().find("injected"), std::string::npos);
      // The last block belongs to "zother" (data in inode order): still readable.
      EXPECT_TRUE(image->Read(whole.size() - 4096, 4096, whole.data()).ok());
    }
  }
}

TEST(ErofsImageTest, RejectsTreesThatBreakTheRules) {
  std::unique_ptr<Image> image;
  {
    Node root = Dir("", {File(".", "dot")});
    FakeTree tree(&root);
    EXPECT_EQ(Image::Build(&tree, {}, &image).code(), Status::Code::kInvalidArgument);
  }
  {
    Node root = Dir("", {File("..", "dotdot")});
    FakeTree tree(&root);
    EXPECT_EQ(Image::Build(&tree, {}, &image).code(), Status::Code::kInvalidArgument);
  }
  {
    Node root = Dir("", {File(std::string(256, 'x'), "too long")});
    FakeTree tree(&root);
    EXPECT_EQ(Image::Build(&tree, {}, &image).code(), Status::Code::kInvalidArgument);
  }
  {
    Node fifo = File("fifo", "");
    fifo.mode = 0010644;
    Node root = Dir("", {fifo});
    FakeTree tree(&root);
    EXPECT_EQ(Image::Build(&tree, {}, &image).code(), Status::Code::kNotSupported);
  }
  {
    // Two directories claiming the same child.
    class Overlap : public FakeTree {
     public:
      using FakeTree::FakeTree;
      Status GetInode(uint32_t ino, ImageInode* inode) const override {
        DSFS_RETURN_IF_ERROR(FakeTree::GetInode(ino, inode));
        if (ino == 2) inode->first_child = 3, inode->child_count = 1;
        if (ino == 1) inode->first_child = 3, inode->child_count = 1;
        return Status::OK();
      }
    };
    Node root = Dir("", {Dir("a", {File("x", "")}), Dir("b", {File("y", "")})});
    Overlap tree(&root);
    EXPECT_EQ(Image::Build(&tree, {}, &image).code(), Status::Code::kInvalidArgument);
  }
  {
    ImageOptions o;
    o.volume_name = std::string(17, 'v');
    Node root = Dir("", {});
    FakeTree tree(&root);
    EXPECT_EQ(Image::Build(&tree, o, &image).code(), Status::Code::kInvalidArgument);
  }
}

// ---- Real packed stores ------------------------------------------------------------------

void MakeSourceTree(const std::string& src) {
  using dsfs::testing::WriteFile;
  WriteFile(src + "/cat/a.jpg", Bytes(1100, 1));
  WriteFile(src + "/cat/b.jpg", Bytes(700, 2));
  WriteFile(src + "/cat/c.jpg", Bytes(5000, 3));
  WriteFile(src + "/dog/z.jpg", Bytes(300000, 4));
  WriteFile(src + "/dog/empty", "");
  WriteFile(src + "/dog/exec.sh", "#!/bin/sh\n", 04751);
  WriteFile(src + "/.hidden/-x", "dash");
  WriteFile(src + "/deep/1/2/3/4/5/6/7/8/leaf", "leaf");
  ASSERT_EQ(::mkdir((src + "/emptydir").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("cat/a.jpg", (src + "/link").c_str()), 0);
  ASSERT_EQ(::symlink(std::string(3000, 'T').c_str(), (src + "/longlink").c_str()), 0);
  for (int i = 0; i < 600; i++) {
    WriteFile(src + "/many/f" + std::to_string(i), std::to_string(i * i));
  }
  ASSERT_EQ(::chmod((src + "/many").c_str(), 01777), 0);
}

TEST(ErofsStoreTreeTest, PackedStoreImageMatchesTheSource) {
  TempDir tmp;
  const std::string src = tmp / "src";
  ASSERT_NO_FATAL_FAILURE(MakeSourceTree(src));
  PackOptions pack;
  pack.threads = 1;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  Status s = dsfs::testing::PackToMemory(src, pack, &table, &store);
  ASSERT_TRUE(s.ok()) << s.ToString();

  StoreTreeOptions to;
  to.uid = 1234;
  to.gid = 5678;
  to.umask = 022;
  StoreTree tree(store.get(), to);
  // Expected: the source tree as the store keeps it (modes, mtimes, bytes), owned by uid/gid
  // with the umask applied, the root included; extracted by fsck.erofs: the same without the
  // root and mtimes (and modes and owners unless root).
  const Adjust adjust = [](struct stat* st) {
    st->st_uid = 1234;
    st->st_gid = 5678;
    st->st_mode &= ~022;
  };
  Compare all;
  const auto want = ListDisk(src, all, adjust);
  Compare ex;
  ex.mtime = false;
  ex.root = false;
  ex.extracted = true;
  ex.owner = ex.mode = ::geteuid() == 0;
  const auto ex_want = ListDisk(src, ex, adjust);
  for (bool inline_data : {true, false}) {
    SCOPED_TRACE(inline_data ? "inline" : "plain");
    ImageOptions options;
    options.inline_data = inline_data;
    CheckImage(tree, options, &ex_want, ex, want, all);
  }
}

// A damaged record in the store fails the image reads that need it, with Corruption.
TEST(ErofsStoreTreeTest, DamagedRecordFailsTheRead) {
  TempDir tmp;
  const std::string src = tmp / "src";
  dsfs::testing::WriteFile(src + "/a", Bytes(20000, 9));
  PackOptions pack;
  pack.threads = 1;
  pack.dict_bytes = 0;
  std::shared_ptr<MemTable> table, damaged;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(dsfs::testing::PackToMemory(src, pack, &table, &store).ok());
  InodeRecord rec;
  uint32_t ino;
  ASSERT_TRUE(store->LookupPath("a", &ino, &rec).ok());
  ASSERT_TRUE(dsfs::testing::DamagePayload(*table, rec.data, &damaged).ok());
  std::unique_ptr<Store> bad;
  ASSERT_TRUE(Store::Open(NewMemReader(damaged), &bad).ok());
  StoreTree tree(bad.get(), {});
  std::unique_ptr<Image> image;
  ASSERT_TRUE(Image::Build(&tree, {}, &image).ok());
  std::string whole(image->size_bytes(), '\0');
  Status s = image->Read(0, whole.size(), whole.data());
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  // The metadata block (superblock, inodes, the directory) is still fine.
  EXPECT_TRUE(image->Read(0, 4096, whole.data()).ok());
}

// ---- Scale ---------------------------------------------------------------------------------

// Synthetic: a root of `dirs` class directories of `per_dir` 1,000-byte files each, every
// attribute computed, nothing stored.
class SyntheticTree : public ImageTree {
 public:
  SyntheticTree(uint32_t dirs, uint32_t per_dir) : dirs_(dirs), per_dir_(per_dir) {}
  uint32_t inode_count() const override { return 1 + dirs_ + dirs_ * per_dir_; }
  Status GetInode(uint32_t ino, ImageInode* inode) const override {
    *inode = ImageInode{};
    inode->mtime_s = 1700000000 + ino;
    if (ino == 0) {
      inode->mode = kDir | 0755;
      inode->first_child = 1;
      inode->child_count = dirs_;
    } else if (ino <= dirs_) {
      inode->mode = kDir | 0755;
      inode->name_len = 5;  // "c0000"
      inode->first_child = 1 + dirs_ + (ino - 1) * per_dir_;
      inode->child_count = per_dir_;
    } else {
      inode->mode = kReg | 0644;
      inode->size = 900 + ino % 200;
      inode->name_len = 12;  // "f0000000.jpg"
    }
    return Status::OK();
  }
  Status GetName(uint32_t ino, std::string* scratch, std::string_view* name) const override {
    char buf[16];
    if (ino <= dirs_) {
      std::snprintf(buf, sizeof(buf), "c%04u", ino - 1);
    } else {
      std::snprintf(buf, sizeof(buf), "f%07u.jpg", (ino - 1 - dirs_) % per_dir_);
    }
    *scratch = buf;
    *name = *scratch;
    return Status::OK();
  }
  Status ReadData(uint32_t ino, uint64_t offset, size_t len, char* dst) const override {
    std::memset(dst, static_cast<char>(ino), len);
    return Status::OK();
  }

 private:
  uint32_t dirs_, per_dir_;
};

// Run with --gtest_also_run_disabled_tests: lays out 10M inodes and prints time and memory.
TEST(ErofsScaleTest, DISABLED_Layout10MInodes) {
  for (bool inline_data : {true, false}) {
    SyntheticTree tree(1000, 10000);
    ImageOptions options;
    options.inline_data = inline_data;
    std::unique_ptr<Image> image;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = Image::Build(&tree, options, &image);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::printf(
        "[  SCALE   ] %s: %u inodes laid out in %.3f s, %.2f bytes/inode, image %.2f GiB"
        " (%u metadata blocks)\n",
        inline_data ? "inline" : "plain", tree.inode_count(), secs,
        double(image->memory_bytes()) / tree.inode_count(), double(image->size_bytes()) / kGiB,
        image->meta_blocks());
    std::vector<char> buf(1 << 20);
    const auto t1 = std::chrono::steady_clock::now();
    uint64_t done = 0;
    for (uint64_t off = 0; off + buf.size() <= image->size_bytes() && done < (256u << 20);
         off += buf.size() * 97, done += buf.size()) {
      ASSERT_TRUE(image->Read(off, buf.size(), buf.data()).ok());
    }
    const double rs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("[  SCALE   ] %s: 1 MiB reads across the image: %.0f MiB/s\n",
                inline_data ? "inline" : "plain", done / rs / (1 << 20));
  }
}

}  // namespace
}  // namespace dsfs::erofs
