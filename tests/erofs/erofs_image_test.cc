// EROFS images synthesized from trees (erofs/image.h). Each image is streamed to a file through
// Image::Read and checked by erofs-utils' fsck.erofs (extracting the tree and comparing it) and,
// as root where the kernel has EROFS, loop-mounted and compared with its source: names, types,
// modes, owners, mtimes, sizes, nlinks, bytes, link targets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "erofs/image.h"
#include "tests/support/erofs_test_util.h"

namespace dsfs::erofs {
namespace {

using namespace dsfs::erofs::testing;  // NOLINT

// ---- The trees -----------------------------------------------------------------------------

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

// What -o kernel uses (inline_file_tails off): only files that fit whole after their inode
// are inline; a larger file's tail stays in a data block, so its metadata block holds none of
// its bytes and a failing read of it leaves every inode readable.
TEST(ErofsImageTest, WholeFilesOnlyKeepLargerFilesOutOfTheMetadata) {
  const Node root = Dir("", {File("a_tiny", Bytes(900, 1)), File("b_big", Bytes(10000, 2)),
                             File("c_tiny", Bytes(1200, 3))});
  for (bool tails : {true, false}) {
    SCOPED_TRACE(tails ? "tails" : "whole files only");
    FakeTree tree(&root);
    tree.FailReadOf(2);  // b_big
    ImageOptions o;
    o.inline_file_tails = tails;
    std::unique_ptr<Image> image;
    ASSERT_TRUE(Image::Build(&tree, o, &image).ok());
    std::string meta(uint64_t{image->meta_blocks()} * 4096, '\0');
    Status s = image->Read(0, meta.size(), meta.data());
    // Its tail (10000 % 4096 bytes) is inline only with tails, and then its inode's block fails.
    EXPECT_EQ(s.ok(), !tails) << s.ToString();
    // Data blocks: b_big's two whole blocks, and with whole files only its tail's block.
    EXPECT_EQ(image->size_bytes() / 4096 - image->meta_blocks(), tails ? 2u : 3u);
  }
  ImageOptions o;
  o.inline_file_tails = false;
  CheckFake(OddTree(), o);
}

// The readahead's ranges: a byte of a child's inode (its inline data with it) serves the
// child's directory, and the children's inodes lie in whole metadata blocks ChildrenMeta names.
TEST(ErofsImageTest, InodeBytesServeTheirDirectoryAndChildrenMetaHoldsThem) {
  std::vector<Node> files;
  for (int i = 0; i < 40; i++) files.push_back(File("f" + std::to_string(100 + i), Bytes(1000, i)));
  const Node root = Dir("", {Dir("cls", std::move(files)), File("top", "top")});
  FakeTree tree(&root);
  std::unique_ptr<Image> image;
  ASSERT_TRUE(Image::Build(&tree, ImageOptions{}, &image).ok());
  // Breadth first: 0 root, 1 cls, 2 top, 3.. cls's files.
  uint32_t dir = 99;
  ASSERT_TRUE(image->DirOfByte(image->nid(10) * 32 + 40, &dir));  // inside f107's inline data
  EXPECT_EQ(dir, 1u);
  ASSERT_TRUE(image->DirOfByte(image->nid(2) * 32, &dir));
  EXPECT_EQ(dir, 0u);
  ASSERT_TRUE(image->DirOfByte(100, &dir));  // the superblock: the root's
  EXPECT_EQ(dir, 0u);
  uint64_t off = 0, len = 0;
  image->ChildrenMeta(1, &off, &len);
  EXPECT_EQ(off % 4096, 0u);
  EXPECT_EQ(len % 4096, 0u);
  EXPECT_LE(off, image->nid(3) * 32);
  EXPECT_GE(off + len, image->nid(42) * 32 + 32 + 1000);
  EXPECT_LE(off + len, uint64_t{image->meta_blocks()} * 4096);
  EXPECT_GE(len, 40u * 1000);          // all 40 files are inline: their bytes are in there
  image->ChildrenMeta(2, &off, &len);  // a file: none
  EXPECT_EQ(len, 0u);
}

// A compressed image: the files up to 64 KiB are fragments of a packed inode of zstd frames
// (as a format 5 store's groups), the rest plain; fsck.erofs 1.9 extracts it as its source
// and the kernel reads it the same. Any offsets read the same bytes as the whole image.
TEST(ErofsImageTest, CompressedImageChecksAndMountsAsItsSource) {
  const Node root = OddTree();
  FakeTree tree(&root);
  for (uint64_t extent : {uint64_t{8192}, uint64_t{128} << 10}) {
    SCOPED_TRACE("extents of " + std::to_string(extent));
    FakePacked packed(tree, 64 << 10, extent);
    ImageOptions o;
    o.packed = &packed;
    o.inline_file_tails = false;
    std::unique_ptr<Image> image;
    Status s = Image::Build(&tree, o, &image);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(image->compressed());
    EXPECT_GT(image->packed_bytes(), 300u * 900);
    std::string whole(image->size_bytes(), '\0');
    ASSERT_TRUE(image->Read(0, whole.size(), whole.data()).ok());
    std::mt19937_64 rng(extent);
    for (int i = 0; i < 300; i++) {
      const uint64_t off = rng() % whole.size();
      const size_t len = std::min<uint64_t>(rng() % 20000 + 1, whole.size() - off);
      std::string part(len, '\x5a');
      ASSERT_TRUE(image->Read(off, len, part.data()).ok());
      ASSERT_TRUE(part == whole.substr(off, len)) << off << " +" << len;
    }
    CheckFake(root, o);
  }
}

// Extents EROFS cannot take as pclusters (two starting in one 4 KiB of the packed inode) make
// Build say NotSupported, so that -o kernel builds the uncompressed image instead.
TEST(ErofsImageTest, CompressedImageOfTooSmallExtentsIsNotSupported) {
  std::vector<Node> files;
  for (int i = 0; i < 20; i++) files.push_back(File("f" + std::to_string(10 + i), Bytes(300, i)));
  const Node root = Dir("", std::move(files));
  FakeTree tree(&root);
  FakePacked packed(tree, 64 << 10, 1000);  // about 1 KB each
  ImageOptions o;
  o.packed = &packed;
  std::unique_ptr<Image> image;
  Status s = Image::Build(&tree, o, &image);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("too small"), std::string::npos) << s.ToString();
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
