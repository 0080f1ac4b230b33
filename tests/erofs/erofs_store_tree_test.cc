// StoreTree (erofs/store_tree.h): images of real packed stores, checked by fsck.erofs and the
// kernel against the packed source directory; store errors surface as Read errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "erofs/image.h"
#include "erofs/store_tree.h"
#include "tests/support/erofs_test_util.h"

namespace dsfs::erofs {
namespace {

using namespace dsfs::erofs::testing;  // NOLINT

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
  for (int layout = 0; layout < 3; layout++) {
    SCOPED_TRACE(layout == 0 ? "inline" : layout == 1 ? "plain" : "inline whole files only");
    ImageOptions options;
    options.inline_data = layout != 1;
    options.inline_file_tails = layout == 0;  // 2: what -o kernel mounts
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

}  // namespace
}  // namespace dsfs::erofs
