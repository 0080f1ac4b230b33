// Packing from archives (PackArchive) gives the same tree as packing the directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "backend/mem_store.h"
#include "store/packer.h"
#include "store/store.h"
#include "tests/test_util.h"

namespace dsfs {
namespace {

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
  TempDir dir_;
  PackOptions options_;
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
  std::string cmd = "tar cf - -C " + (dir_ / "src") + " . | " + testing::DsfsBinary() +
                    " pack -q - " + (dir_ / "s.db");
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

}  // namespace
}  // namespace dsfs
