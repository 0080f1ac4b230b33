// ViewTree (kernel/view_tree.h): each view of a packed store as an EROFS image, extracted by
// fsck.erofs and compared with what Filesystem serves for that view, byte for byte. No mount.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "kernel/view_tree.h"
#include "tests/support/erofs_test_util.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using dsfs::testing::Jpeg;
using dsfs::testing::TempDir;
using dsfs::testing::WriteFile;

// What Filesystem serves below directory `ino`, in TreeListing's form.
void FsListing(const Filesystem& fs, uint64_t ino, const std::string& prefix,
               std::map<std::string, std::string>* out) {
  std::vector<std::pair<std::string, struct stat>> entries;
  ASSERT_TRUE(fs.ReadDir(ino, 2, [&](std::string_view name, const struct stat& st, uint64_t) {
                  entries.emplace_back(std::string(name), st);
                  return true;
                }).ok());
  for (const auto& [name, st] : entries) {
    const std::string path = prefix + name;
    if (S_ISDIR(st.st_mode)) {
      (*out)[path] = "<dir>";
      FsListing(fs, st.st_ino, path + "/", out);
    } else if (S_ISLNK(st.st_mode)) {
      std::string_view target;
      ASSERT_TRUE(fs.ReadLink(st.st_ino, &target).ok());
      (*out)[path] = "->" + std::string(target);
    } else {
      ReadBuffer buf;
      std::string data;
      while (data.size() < static_cast<size_t>(st.st_size)) {
        std::string_view piece;
        ASSERT_TRUE(fs.Read(st.st_ino, data.size(), st.st_size - data.size(), &buf, &piece).ok());
        ASSERT_FALSE(piece.empty());
        data.append(piece);
      }
      (*out)[path] = data;
    }
  }
}

TEST(ViewTreeTest, EveryViewExtractsAsFilesystemServesIt) {
  if (!erofs::testing::HaveFsck()) GTEST_SKIP() << "SKIPPED: fsck.erofs is not installed";
  TempDir tmp;
  const std::string src = tmp / "src";
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 12; ++i) {
      WriteFile(src + "/c" + std::to_string(c) + "/i" + std::to_string(i) + ".jpg",
                Jpeg(16, 8, c * 50 + i));
    }
  }
  WriteFile(src + "/c1/readme.txt", "text\n");
  WriteFile(src + "/c2/i3.jpg.npy", "a source file the npy view's name takes\n");
  ASSERT_EQ(::symlink("c0/i1.jpg", (src + "/link").c_str()), 0);
  for (View view : {View::kBmp, View::kNpy, View::kTensor}) {
    SCOPED_TRACE(std::string(ViewName(view)));
    PackOptions pack;
    pack.threads = 1;
    std::shared_ptr<MemTable> table;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(dsfs::testing::PackToMemory(src, pack, &table, &store).ok());
    FsOptions fo;
    fo.view = view;
    Filesystem fs(std::move(store), fo);
    std::unique_ptr<ViewTree> tree;
    Status s = ViewTree::Build(&fs, view, &tree);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(tree->identity(), view == View::kBmp) << "bmp keeps the store's numbering";
    for (bool inline_data : {true, false}) {
      erofs::ImageOptions io;
      io.inline_data = inline_data;
      std::unique_ptr<erofs::Image> image;
      s = erofs::Image::Build(tree.get(), io, &image);
      ASSERT_TRUE(s.ok()) << s.ToString();
      const std::string img = tmp / "view.img", out = tmp / "extracted";
      std::filesystem::remove_all(out);
      erofs::testing::WriteImage(*image, img);
      ASSERT_NO_FATAL_FAILURE(erofs::testing::Fsck(img, out));
      std::map<std::string, std::string> want;
      ASSERT_NO_FATAL_FAILURE(FsListing(fs, 1, "", &want));
      if (view == View::kTensor) {
        EXPECT_TRUE(want.count("c0/images.npy"));
      }
      if (view == View::kNpy) {
        EXPECT_TRUE(want.count("c0/i1.jpg.npy"));
      }
      EXPECT_TRUE(want == dsfs::testing::TreeListing(out))
          << want.size() << " entries served, " << dsfs::testing::TreeListing(out).size()
          << " extracted";
    }
  }
}

}  // namespace
}  // namespace dsfs
