// Packing from archives (PackArchive) gives the same tree as packing the directory.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "pack/packer.h"
#include "store/format.h"
#include "store/store.h"
#include "tests/support/fakes/mem_store.h"
#include "tests/support/test_util.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

using testing::kSanitized;
using testing::RandomBytes;
using testing::RunCommand;
using testing::TempDir;
using testing::TextBytes;
using testing::WriteFile;

// Everything a store shows, path -> "mode size mtime contents-or-target".
std::map<std::string, std::string> Snapshot(const Store& store) {
  std::map<std::string, std::string> out;
  std::function<void(uint32_t, const std::string&)> walk = [&](uint32_t dir,
                                                               const std::string& prefix) {
    InodeRecord d;
    uint32_t first, count;
    EXPECT_TRUE(store.GetInode(dir, &d).ok());
    EXPECT_TRUE(store.DirEntries(dir, d, &first, &count).ok());
    for (uint32_t i = 0; i < count; ++i) {
      InodeRecord r;
      std::string_view name;
      EXPECT_TRUE(store.GetInode(first + i, &r).ok());
      EXPECT_TRUE(store.GetName(r, &name).ok());
      EXPECT_EQ(r.parent, dir);
      std::string path = prefix + "/" + std::string(name);
      std::string v = std::to_string(r.mode) + " " + std::to_string(r.mtime_s) + " ";
      if (IsReg(r)) {
        ReadBuffer buf;
        std::string_view data;
        EXPECT_TRUE(store.Read(r, 0, r.size, &buf, &data).ok()) << path;
        v += std::string(data);
      } else if (IsLink(r)) {
        std::string_view t;
        EXPECT_TRUE(store.ReadLink(r, &t).ok());
        v += "-> " + std::string(t);
      } else {
        walk(first + i, path);
      }
      out[path] = v;
    }
  };
  walk(Store::kRootIno, "");
  return out;
}

Status PackWith(const std::function<Status(KvWriter*)>& pack, std::unique_ptr<Store>* store,
                std::shared_ptr<MemTable>* table) {
  *table = std::make_shared<MemTable>();
  auto w = NewMemWriter(*table);
  DSFS_RETURN_IF_ERROR(pack(w.get()));
  return Store::Open(NewMemReader(*table), store);
}

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/cls_a/1.jpg", TextBytes(900, 1));
    WriteFile(dir_ / "src/cls_a/2.jpg", RandomBytes(3000, 2), 0600);
    WriteFile(dir_ / "src/cls_b/big.bin", RandomBytes(300000, 3));
    WriteFile(dir_ / "src/cls_b/empty", "");
    WriteFile(dir_ / "src/deep/er/est/x", "x");
    ::mkdir((dir_ / "src/void").c_str(), 0700);
    for (int i = 0; i < 200; ++i)
      WriteFile(dir_ / ("src/many/" + std::to_string(i)), TextBytes(300, i));
    ASSERT_EQ(::symlink("../cls_a/1.jpg", (dir_ / "src/cls_b/link").c_str()), 0);
    options_.chunk_bytes = 64 << 10;
    options_.dict_bytes = 4096;
  }
  // Packs the archive at `path` into a store in memory.
  Status PackFile(const std::string& path, std::unique_ptr<Store>* store) {
    return PackWith([&](KvWriter* w) { return PackArchive(path, options_, w, nullptr, nullptr); },
                    store, &table_);
  }
  TempDir dir_;
  PackOptions options_;
  std::shared_ptr<MemTable> table_;
};

TEST_F(ArchiveTest, TarGivesTheSameTreeAsTheDirectory) {
  std::shared_ptr<MemTable> t1, t2, t3;
  std::unique_ptr<Store> from_dir, from_tar, from_tgz;
  ASSERT_TRUE(
      PackWith(
          [&](KvWriter* w) { return PackDirectory(dir_ / "src", options_, w, nullptr, nullptr); },
          &from_dir, &t1)
          .ok());
  ASSERT_EQ(RunCommand({"tar", "cf", dir_ / "a.tar", "-C", dir_ / "src", "."}).exit_code, 0);
  ASSERT_EQ(RunCommand({"tar", "czf", dir_ / "a.tgz", "-C", dir_ / "src", "."}).exit_code, 0);
  PackStats st;
  ASSERT_TRUE(
      PackWith([&](KvWriter* w) { return PackArchive(dir_ / "a.tar", options_, w, nullptr, &st); },
               &from_tar, &t2)
          .ok());
  EXPECT_EQ(st.files, 205u);
  EXPECT_EQ(st.symlinks, 1u);
  ASSERT_TRUE(
      PackWith(
          [&](KvWriter* w) { return PackArchive(dir_ / "a.tgz", options_, w, nullptr, nullptr); },
          &from_tgz, &t3)
          .ok());
  auto expected = Snapshot(*from_dir);
  EXPECT_EQ(expected.size(), 213u);
  EXPECT_EQ(Snapshot(*from_tar), expected);
  EXPECT_EQ(Snapshot(*from_tgz), expected);
  EXPECT_EQ(from_tar->header().inode_count, from_dir->header().inode_count);
}

TEST_F(ArchiveTest, ImplicitDirectoriesDuplicatesAndHardLinks) {
  // Only files, no directory entries; one path twice; a hard link.
  ASSERT_EQ(::link((dir_ / "src/cls_a/1.jpg").c_str(), (dir_ / "src/cls_a/hard").c_str()), 0);
  ASSERT_EQ(RunCommand({"tar", "cf", dir_ / "f.tar", "-C", dir_ / "src", "--no-recursion",
                        "cls_a/1.jpg", "cls_a/hard", "deep/er/est/x"})
                .exit_code,
            0);
  WriteFile(dir_ / "other/deep/er/est/x", "newer");
  ASSERT_EQ(
      RunCommand({"tar", "rf", dir_ / "f.tar", "-C", dir_ / "other", "deep/er/est/x"}).exit_code,
      0);
  std::shared_ptr<MemTable> t;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(
      PackWith(
          [&](KvWriter* w) { return PackArchive(dir_ / "f.tar", options_, w, nullptr, nullptr); },
          &store, &t)
          .ok());
  auto snap = Snapshot(*store);
  ASSERT_EQ(snap.count("/deep/er/est/x"), 1u);
  EXPECT_EQ(snap["/deep/er/est/x"].substr(snap["/deep/er/est/x"].rfind(' ') + 1), "newer");
  EXPECT_EQ(snap["/cls_a/hard"].substr(
                snap["/cls_a/hard"].find(' ', snap["/cls_a/hard"].find(' ') + 1) + 1),
            TextBytes(900, 1));
  uint32_t a, b;
  InodeRecord ra, rb;
  ASSERT_TRUE(store->LookupPath("cls_a/1.jpg", &a, &ra).ok());
  ASSERT_TRUE(store->LookupPath("cls_a/hard", &b, &rb).ok());
  EXPECT_EQ(ra.data, rb.data);  // one payload for both names
  ASSERT_TRUE(store->LookupPath("deep/er", &a, &ra).ok());
  EXPECT_TRUE(IsDir(ra));
}

// A tar written entry by entry (libarchive): {name, contents, hard link target or "", whether
// it is a directory}.
struct TarEntry {
  std::string name, data, link;
  bool dir = false;
};
void WriteTar(const std::string& path, const std::vector<TarEntry>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const TarEntry& t : entries) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, t.name.c_str());
    archive_entry_set_filetype(e, t.dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, t.dir ? 0755 : 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(t.data.size()));
    if (!t.link.empty()) archive_entry_set_hardlink(e, t.link.c_str());
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
    if (!t.data.empty()) archive_write_data(a, t.data.data(), t.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// One file of a cpio "newc" archive (a link of inode `ino`, one of `nlink`).
std::string Newc(const std::string& name, uint32_t ino, uint32_t nlink, const std::string& data) {
  char h[111];
  std::snprintf(h, sizeof(h), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ino,
                name == "TRAILER!!!" ? 0u : 0100644u, 0u, 0u, nlink, 1600000000u,
                static_cast<unsigned>(data.size()), 0u, 0u, 0u, 0u,
                static_cast<unsigned>(name.size() + 1), 0u);
  std::string out = h + name + '\0';
  out.resize((out.size() + 3) / 4 * 4, '\0');
  out += data;
  out.resize((out.size() + 3) / 4 * 4, '\0');
  return out;
}

// Images are analysed on the writer's thread while the reader's thread still adds entries to
// the tree: what is learnt of each (kind, size) must reach its own inode. (Written into the
// growing tree from the writer's thread, it raced with the tree's growth: a crash one pack in
// three of a 1M-file stream, and a race ThreadSanitizer reports here.)
TEST_F(ArchiveTest, ImagesOfALongStreamAreRecordedOnTheirOwnInodes) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 3000; ++i) {
    const uint32_t w = 2 + i % 7, h = 2 + i % 5;
    std::string rgb(size_t{w} * h * 3, static_cast<char>(i));
    entries.push_back({"c" + std::to_string(i % 10) + "/" + std::to_string(i) + ".png",
                       testing::EncodePng(w, h, PNG_FORMAT_RGB, rgb), ""});
  }
  WriteTar(dir_ / "images.tar", entries);
  options_.chunk_bytes = 4096;  // many small batches, each with its images' results
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackFile(dir_ / "images.tar", &store).ok());
  for (int i = 0; i < 3000; i += 37) {
    uint32_t ino;
    InodeRecord rec;
    const std::string path = "c" + std::to_string(i % 10) + "/" + std::to_string(i) + ".png";
    ASSERT_TRUE(store->LookupPath(path, &ino, &rec).ok()) << path;
    EXPECT_TRUE(IsDecodableImage(rec)) << path;
    EXPECT_EQ(rec.width, 2u + i % 7) << path;
    EXPECT_EQ(rec.height, 2u + i % 5) << path;
  }
}

TEST_F(ArchiveTest, HardLinksAreTheFileTheyNameWhenTheyAreRead) {
  std::unique_ptr<Store> store;
  auto pack = [&](const std::string& path) { return PackFile(path, &store); };
  auto contents = [&](const std::string& path) {
    uint32_t ino;
    InodeRecord r;
    EXPECT_TRUE(store->LookupPath(path, &ino, &r).ok()) << path;
    ReadBuffer buf;
    std::string_view data;
    EXPECT_TRUE(store->Read(r, 0, r.size, &buf, &data).ok());
    return std::string(data);
  };
  // a is replaced after b links to it: b keeps the first a, as tar extracts it.
  WriteTar(dir_ / "over.tar", {{"a", "first", ""}, {"b", "", "a"}, {"a", "second", ""}});
  ASSERT_TRUE(pack(dir_ / "over.tar").ok());
  EXPECT_EQ(contents("a"), "second");
  EXPECT_EQ(contents("b"), "first");
  // Links to a file stored later, or to themselves: an error naming them, not empty files.
  WriteTar(dir_ / "fwd.tar", {{"c", "", "b"}, {"b", "", "a"}, {"a", "abcd", ""}});
  Status s = pack(dir_ / "fwd.tar");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("c is a hard link to b"), std::string::npos) << s.message();
  WriteTar(dir_ / "self.tar", {{"h", "", "h"}});
  EXPECT_FALSE(pack(dir_ / "self.tar").ok());
  // cpio newc stores a file's data with its last link only: every link gets it.
  std::string cpio = Newc("x", 7, 3, "") + Newc("y", 7, 3, "") + Newc("z", 7, 3, "LINKDATA") +
                     Newc("plain", 8, 1, "plain") + Newc("TRAILER!!!", 0, 1, "");
  WriteFile(dir_ / "h.cpio", cpio);
  ASSERT_TRUE(pack(dir_ / "h.cpio").ok());
  for (const char* n : {"x", "y", "z"}) EXPECT_EQ(contents(n), "LINKDATA") << n;
  EXPECT_EQ(contents("plain"), "plain");
}

TEST_F(ArchiveTest, SparseFilesAndGzipChecksums) {
  std::unique_ptr<Store> store;
  auto pack = [&](const std::string& path) { return PackFile(path, &store); };
  // A file that is one hole, and one with data then a hole, in a sparse tar.
  WriteFile(dir_ / "sp/hole", "");
  ASSERT_EQ(::truncate((dir_ / "sp/hole").c_str(), 300000), 0);
  WriteFile(dir_ / "sp/part", "abc");
  ASSERT_EQ(::truncate((dir_ / "sp/part").c_str(), 200000), 0);
  ASSERT_EQ(RunCommand({"tar", "cSf", dir_ / "sp.tar", "-C", dir_ / "sp", "."}).exit_code, 0);
  ASSERT_TRUE(pack(dir_ / "sp.tar").ok());
  auto snap = Snapshot(*store);
  std::string hole = snap["/hole"], part = snap["/part"];
  EXPECT_EQ(hole.substr(hole.find(' ', hole.find(' ') + 1) + 1), std::string(300000, '\0'));
  EXPECT_EQ(part.substr(part.find(' ', part.find(' ') + 1) + 1),
            "abc" + std::string(200000 - 3, '\0'));
  // A .tar.gz whose gzip checksum is wrong (the data inflates fine): refused.
  ASSERT_EQ(RunCommand({"tar", "czf", dir_ / "a.tgz", "-C", dir_ / "src", "."}).exit_code, 0);
  std::string tgz = testing::ReadFile(dir_ / "a.tgz");
  tgz[tgz.size() - 8] ^= 1;  // the CRC32 in the trailer
  WriteFile(dir_ / "a.tgz", tgz);
  Status s = pack(dir_ / "a.tgz");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gzip data"), std::string::npos) << s.message();
}

TEST_F(ArchiveTest, BadArchivesAreCleanErrors) {
  std::shared_ptr<MemTable> t;
  std::unique_ptr<Store> store;
  Status s = PackWith(
      [&](KvWriter* w) { return PackArchive(dir_ / "missing.tar", options_, w, nullptr, nullptr); },
      &store, &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing.tar"), std::string::npos);
  WriteFile(dir_ / "junk.tar", RandomBytes(10000, 9));
  s = PackWith(
      [&](KvWriter* w) { return PackArchive(dir_ / "junk.tar", options_, w, nullptr, nullptr); },
      &store, &t);
  EXPECT_FALSE(s.ok());
  // A path escaping the tree.
  ASSERT_EQ(RunCommand({"tar", "cf", dir_ / "evil.tar", "-C", dir_ / "src", "-P",
                        "--transform=s,^,../,", "cls_a/1.jpg"})
                .exit_code,
            0);
  s = PackWith(
      [&](KvWriter* w) { return PackArchive(dir_ / "evil.tar", options_, w, nullptr, nullptr); },
      &store, &t);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("unsafe path"), std::string::npos);
  // A truncated archive.
  ASSERT_EQ(RunCommand({"tar", "cf", dir_ / "a.tar", "-C", dir_ / "src", "."}).exit_code, 0);
  ASSERT_EQ(::truncate((dir_ / "a.tar").c_str(), 200000), 0);
  s = PackWith(
      [&](KvWriter* w) { return PackArchive(dir_ / "a.tar", options_, w, nullptr, nullptr); },
      &store, &t);
  EXPECT_FALSE(s.ok());
}

TEST_F(ArchiveTest, CliPacksFromStdin) {
  std::string cmd = "tar cf - -C " + (dir_ / "src") + " . | " + testing::DsfsBinary() + " pack - " +
                    (dir_ / "s.db");
  auto r = RunCommand({"sh", "-c", cmd});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("packed 205 files"), std::string::npos) << r.out;
  r = RunCommand({testing::DsfsBinary(), "cat", dir_ / "s.db", "cls_b/big.bin"});
  EXPECT_EQ(r.out, RandomBytes(300000, 3));
  r = RunCommand(
      {"sh", "-c", "echo garbage | " + testing::DsfsBinary() + " pack -q - " + (dir_ / "t.db")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "t.db"));
}

// Names the kernel cannot take (over 255 bytes) are refused, naming the entry; 255 is fine.
TEST_F(ArchiveTest, NamesLongerThanTheKernelTakesAreRefused) {
  std::unique_ptr<Store> store;
  WriteTar(dir_ / "long.tar", {{"good.txt", "good", ""}, {std::string(4096, 'N'), "long", ""}});
  Status s = PackFile(dir_ / "long.tar", &store);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("longer than 255 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NNNN"), std::string::npos) << s.message();
  EXPECT_LT(s.message().size(), 300u) << "the name is cut for display";
  WriteTar(dir_ / "deep.tar", {{"d/" + std::string(256, 'M') + "/f", "x", ""}});
  EXPECT_EQ(PackFile(dir_ / "deep.tar", &store).code(), Status::Code::kInvalidArgument);
  WriteTar(dir_ / "ok.tar", {{"good.txt", "good", ""}, {std::string(255, 'N'), "ok", ""}});
  ASSERT_TRUE(PackFile(dir_ / "ok.tar", &store).ok());
  EXPECT_EQ(Snapshot(*store).size(), 2u);
}

// A hostile archive of links each naming the one before (f1 -> f0, f2 -> f1, ...): every link
// is the first file, found in time linear in the links (walking each chain from its start
// took minutes for 60,000 of them).
TEST_F(ArchiveTest, HardLinksAreFoundInLinearTime) {
  constexpr int kLinks = 60000;
  std::vector<TarEntry> entries{{"f0", "data", ""}};
  for (int i = 1; i <= kLinks; ++i) {
    entries.push_back({"f" + std::to_string(i), "", "f" + std::to_string(i - 1)});
  }
  WriteTar(dir_ / "chain.tar", entries);
  std::unique_ptr<Store> store;
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(PackFile(dir_ / "chain.tar", &store).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  for (int i : {1, kLinks / 2, kLinks}) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath("f" + std::to_string(i), &ino, &r).ok()) << i;
    ReadBuffer buf;
    std::string_view data;
    ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &data).ok());
    EXPECT_EQ(data, "data") << i;
  }
  // A large directory whose files are then linked to its first one (deduplicated datasets):
  // each link is found without scanning the directory (that took 38 s for 50,000 of each).
  entries.clear();
  for (int i = 0; i < 50000; ++i) entries.push_back({"d/f" + std::to_string(i), "x", ""});
  for (int i = 0; i < 50000; ++i) entries.push_back({"d/l" + std::to_string(i), "", "d/f0"});
  entries.push_back({"d/f0", "replaced", ""});
  entries.push_back({"d/last", "", "d/f0"});
  WriteTar(dir_ / "links.tar", entries);
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(PackFile(dir_ / "links.tar", &store).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  for (const char* path : {"d/l49999", "d/f0", "d/last"}) {
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath(path, &ino, &r).ok()) << path;
    ReadBuffer buf;
    std::string_view data;
    ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &data).ok());
    EXPECT_EQ(data, std::string(path) == "d/l49999" ? "x" : "replaced") << path;
  }
}

// Pack makes no tree that `dsfs verify` and `ls -R` would call damaged: directories nest at
// most kMaxTreeDepth levels below the root.
TEST_F(ArchiveTest, TreesDeeperThanVerifyTakesAreRefused) {
  auto nested = [](uint32_t dirs) {
    std::string path;
    for (uint32_t i = 0; i < dirs; ++i) path += "d/";
    return path + "f";
  };
  WriteTar(dir_ / "max.tar", {{nested(kMaxTreeDepth), "deepest", ""}});
  std::unique_ptr<KvWriter> w;
  ASSERT_TRUE(NewKvWriter(dir_ / "max.db", "lmdb", {}, &w).ok());
  ASSERT_TRUE(PackArchive(dir_ / "max.tar", options_, w.get(), nullptr, nullptr).ok());
  w.reset();
  std::ostringstream out;
  Status s = RunVerify(dir_ / "max.db", /*quiet=*/false, out, std::cerr);
  EXPECT_TRUE(s.ok()) << s.ToString() << out.str();
  std::unique_ptr<Store> store;
  // 100,000 levels in one entry's path (200 KB, a pax header): refused, not a crash.
  for (uint32_t dirs : {kMaxTreeDepth + 1, 5000u, 100000u}) {
    WriteTar(dir_ / "deep.tar", {{nested(dirs), "too deep", ""}});
    s = PackFile(dir_ / "deep.tar", &store);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << dirs;
    EXPECT_NE(s.message().find("tree too deep"), std::string::npos) << s.message();
  }
}

// Makes `levels` nested directories "d" under the directory `fd` (closed), and in the deepest
// a file "f" holding `data`: paths far over PATH_MAX, so made relative to each level.
void MakeDeepTree(int fd, uint32_t levels, const std::string& data) {
  for (uint32_t i = 0; i < levels; ++i) {
    ASSERT_EQ(::mkdirat(fd, "d", 0755), 0);
    int next = ::openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(fd);
    ASSERT_GE(next, 0);
    fd = next;
  }
  int f = ::openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(f, 0);
  ASSERT_EQ(::write(f, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::close(f);
  ::close(fd);
}

// Removes what MakeDeepTree made below `fd` (std::filesystem cannot: its paths are too long).
void RemoveDeepTree(int fd) {
  ::unlinkat(fd, "f", 0);
  int next = ::openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (next >= 0) {
    RemoveDeepTree(next);
    ::unlinkat(fd, "d", AT_REMOVEDIR);
  }
  ::close(fd);
}

// A directory tree as deep as the store takes (its paths far over PATH_MAX) packs from a
// directory as from an archive; one level more is refused as too deep.
TEST_F(ArchiveTest, DirectoryTreesAsDeepAsTheStoreTakesPack) {
  for (uint32_t levels : {kMaxTreeDepth, kMaxTreeDepth + 1}) {
    const std::string src = dir_ / ("deep" + std::to_string(levels));
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    MakeDeepTree(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), levels,
                 "deepest " + std::to_string(levels));
    const std::string db = src + ".db";
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(db, "lmdb", {}, &w).ok());
    Status s = PackDirectory(src, options_, w.get(), nullptr, nullptr);
    w.reset();
    RemoveDeepTree(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (levels > kMaxTreeDepth) {
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString().substr(0, 200);
      EXPECT_NE(s.message().find("tree too deep"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(s.ok()) << levels << ": " << s.ToString().substr(0, 200);
    std::ostringstream out;
    s = RunVerify(db, /*quiet=*/false, out, std::cerr);
    EXPECT_TRUE(s.ok()) << s.ToString().substr(0, 200) << out.str();
    std::unique_ptr<Store> store;
    ASSERT_TRUE(Store::Open(db, StoreOptions{}, &store).ok());
    std::string path;
    for (uint32_t i = 0; i < levels; ++i) path += "d/";
    uint32_t ino;
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath(path + "f", &ino, &r).ok()) << levels;
    ReadBuffer buf;
    std::string_view data;
    ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &data).ok());
    EXPECT_EQ(data, "deepest " + std::to_string(levels));
  }
}

// Of two entries with one path the later wins; what that drops (an older entry, the entries
// below a replaced directory) is counted; paths with "./" and "//" parts are the same paths.
TEST_F(ArchiveTest, ReplacedEntriesAreCounted) {
  struct Case {
    std::vector<TarEntry> entries;
    std::vector<std::string> paths;  // what the store holds
    uint64_t replaced, dropped;
  };
  for (const Case& c : std::vector<Case>{
           {{{"x", "", "", true}, {"x/y", "y", ""}, {"x", "file", ""}}, {"/x"}, 1, 1},
           {{{"x", "file", ""}, {"x/y", "y", ""}}, {"/x", "/x/y"}, 1, 0},
           {{{"dir/", "", "", true}, {"dir", "file", ""}, {"dir/x", "x", ""}}, {"/dir"}, 1, 1},
           {{{"a", "one", ""}, {"a", "two", ""}}, {"/a"}, 1, 0},
           {{{"./././a", "a", ""}, {"b//c", "c", ""}}, {"/a", "/b", "/b/c"}, 0, 0}}) {
    WriteTar(dir_ / "dup.tar", c.entries);
    PackStats st;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(
        PackWith(
            [&](KvWriter* w) { return PackArchive(dir_ / "dup.tar", options_, w, nullptr, &st); },
            &store, &table_)
            .ok());
    std::vector<std::string> paths;
    for (const auto& [path, v] : Snapshot(*store)) paths.push_back(path);
    EXPECT_EQ(paths, c.paths) << c.entries[0].name;
    EXPECT_EQ(st.replaced, c.replaced) << c.entries[0].name;
    EXPECT_EQ(st.dropped, c.dropped) << c.entries[0].name;
  }
  // The summary says so.
  WriteTar(dir_ / "dup.tar", {{"x", "", "", true}, {"x/y", "y", ""}, {"x", "file", ""}});
  auto r = RunCommand({testing::DsfsBinary(), "pack", dir_ / "dup.tar", dir_ / "dup.db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 archive entries replaced by later ones of the same path, 1 entries "
                       "below them dropped"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("x: a directory replaced by a later file"), std::string::npos) << r.err;
}

// Runs dsfs with `args` and returns its peak RSS in bytes (ru_maxrss). Past `limit_bytes` it is
// killed (0 returned), so a pack that grows without bound fails the test, not the machine.
uint64_t PeakRss(const std::vector<std::string>& args, uint64_t limit_bytes, int* status) {
  std::vector<std::string> argv = {testing::DsfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  struct rusage ru {};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    if (::wait4(pid, status, WNOHANG, &ru) == pid) break;
    std::ifstream proc("/proc/" + std::to_string(pid) + "/status");
    uint64_t rss_kb = 0;
    for (std::string line; std::getline(proc, line);) {
      if (line.rfind("VmRSS:", 0) == 0) rss_kb = std::stoull(line.substr(6));
    }
    if (rss_kb * 1024 > limit_bytes || std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, status, 0, &ru);
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// Pack's memory is bounded by its batch and dictionary settings whatever the archive holds: a
// hundred thousand tiny files, or one large entry first.
TEST_F(ArchiveTest, PackMemoryIsBoundedWhateverTheArchive) {
  // ASan's shadow memory and quarantine (256 MiB by default) are in the RSS of a sanitized dsfs.
  if (kSanitized) GTEST_SKIP() << "peak RSS is not dsfs's own in a sanitizer build";
  constexpr uint64_t kLimit = 200 << 20;
  auto write_tgz = [](const std::string& path, const std::function<void(struct archive*)>& fill) {
    struct archive* a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter_gzip(a);
    archive_write_set_filter_option(a, "gzip", "compression-level", "1");
    ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
    fill(a);
    archive_write_close(a);
    archive_write_free(a);
  };
  auto file = [](struct archive* a, const std::string& name, uint64_t size,
                 const std::string& piece) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(size));
    archive_write_header(a, e);
    for (uint64_t done = 0; done < size; done += piece.size()) {
      archive_write_data(a, piece.data(), std::min<uint64_t>(piece.size(), size - done));
    }
    archive_entry_free(e);
  };
  write_tgz(dir_ / "tiny.tgz", [&](struct archive* a) {
    for (int i = 0; i < 100000; ++i) {
      std::string line = "line " + std::to_string(i) + "\n";
      file(a, "d" + std::to_string(i / 1000) + "/f" + std::to_string(i), line.size(), line);
    }
  });
  write_tgz(dir_ / "large.tgz", [&](struct archive* a) {
    file(a, "large.bin", 256ull << 20, std::string(1 << 20, '\0'));
    for (int i = 0; i < 100; ++i) file(a, "small" + std::to_string(i), 5, "small");
  });
  for (const char* archive : {"tiny.tgz", "large.tgz"}) {
    int status = 0;
    uint64_t peak = PeakRss(
        {"pack", "-q", "-j", "2", "-l", "1", dir_ / archive, dir_ / (std::string(archive) + ".db")},
        kLimit, &status);
    EXPECT_GT(peak, 0u) << archive << ": killed past " << kLimit << " bytes";
    EXPECT_LT(peak, kLimit) << archive;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << archive;
    std::cout << archive << ": peak RSS " << (peak >> 20) << " MiB\n";
  }
}

}  // namespace
}  // namespace dsfs
