// The resized views bmp-N and jpeg-N (fs/views.h) through the Filesystem, without FUSE: their
// names, sizes, listings and bytes. That the pixels are PIL's Resize(N) exactly is
// tests/unit/resize_test.cc's (the resampling) and tests/e2e/views_test.py's (over a real mount).
#include <gtest/gtest.h>
#include <png.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "common/path.h"
#include "fs/filesystem.h"
#include "fs/views.h"
#include "image/image.h"
#include "image/resize.h"
#include "pack/packer.h"
#include "tests/support/fakes/mem_store.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::PackToMemory;
using testing::TempDir;
using testing::WriteFile;

std::string Pixels(uint32_t w, uint32_t h, int seed) {
  return testing::RgbPixels(w, h, [&](uint32_t x, uint32_t y, char* p) {
    p[0] = static_cast<char>(x * 7 + seed);
    p[1] = static_cast<char>(y * 5 + seed * 3);
    p[2] = static_cast<char>((x ^ y) * 3 + (x * y) % 11);
  });
}

std::string Png(uint32_t w, uint32_t h, int seed) {
  return testing::EncodePng(w, h, PNG_FORMAT_RGB, Pixels(w, h, seed));
}

// The BMP a resized view serves for a w x h image of Pixels(w, h, seed), computed here from the
// image layer's functions.
std::string ResizedBmp(uint32_t w, uint32_t h, int seed, uint32_t n) {
  uint32_t ow = w, oh = h;
  std::string px = Pixels(w, h, seed);
  if (std::min(w, h) > n) {
    ResizedSize(w, h, n, &ow, &oh);
    std::string out;
    EXPECT_TRUE(ResizeRgb(w, h, px, ow, oh, &out).ok());
    px = out;
  }
  std::string bmp;
  RenderBmp(ow, oh, px, &bmp);
  return bmp;
}

uint64_t StatOf(const Filesystem& fs, const char* key) {
  auto j = fs.StatsObject();
  return j["views"][key].get<uint64_t>();
}

class ResizedViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/cat/wide.png", Png(40, 30, 1));   // resized: 21 x 16 at N = 16
    WriteFile(dir_ / "src/cat/tall.png", Png(17, 50, 2));   // 16 x 47
    WriteFile(dir_ / "src/cat/small.png", Png(12, 9, 3));   // at or below 16: as in bmp
    WriteFile(dir_ / "src/cat/exact.png", Png(16, 20, 4));  // short side 16: as in bmp
    WriteFile(dir_ / "src/cat/notes.txt", "text");
    WriteFile(dir_ / "src/dog/one.png", Png(64, 64, 5));
  }

  std::unique_ptr<Filesystem> Mount(View root = View::kOriginal) {
    std::shared_ptr<MemTable> t;
    std::unique_ptr<Store> store;
    EXPECT_TRUE(PackToMemory(dir_ / "src", PackOptions{}, &t, &store).ok());
    auto cache = std::make_shared<ByteCache>(64 << 20);
    EXPECT_TRUE(Store::Open(NewMemReader(t), &store, cache).ok());
    FsOptions o;
    o.view = root;
    o.max_render_bytes = cache->max_value_bytes();
    return std::make_unique<Filesystem>(std::move(store), o, cache);
  }

  static uint64_t Walk(Filesystem* fs, const std::string& path, struct stat* st = nullptr) {
    uint64_t ino = 1;
    struct stat s;
    for (std::string_view part : PathParts(path)) {
      if (!fs->Lookup(ino, part, &s).ok()) return 0;
      ino = s.st_ino;
    }
    if (st) *st = s;
    return ino;
  }

  static std::string ReadAll(Filesystem* fs, uint64_t ino, Status* status = nullptr) {
    struct stat st;
    EXPECT_TRUE(fs->GetAttr(ino, &st).ok());
    std::string all;
    ReadBuffer buf;
    for (uint64_t off = 0;; off += 999) {  // odd-sized reads: any range is served
      std::string_view out;
      Status s = fs->Read(ino, off, 999, &buf, &out);
      if (!s.ok()) {
        if (status) *status = s;
        return "";
      }
      if (out.empty()) break;
      all.append(out);
    }
    EXPECT_EQ(all.size(), static_cast<uint64_t>(st.st_size));
    return all;
  }

  static std::map<std::string, struct stat> List(Filesystem* fs, uint64_t dir) {
    std::map<std::string, struct stat> entries;
    EXPECT_TRUE(fs->ReadDir(dir, 2, [&](std::string_view n, const struct stat& st, uint64_t) {
                    entries[std::string(n)] = st;
                    return true;
                  }).ok());
    return entries;
  }

  TempDir dir_;
};

TEST(ResizedViewNamesTest, EveryNFrom16To4096HasOneName) {
  View v;
  for (std::string name : {"bmp-16", "bmp-256", "bmp-4096", "jpeg-16", "jpeg-224", "jpeg-4096"}) {
    ASSERT_TRUE(ParseView(name, &v).ok()) << name;
    EXPECT_TRUE(v.resized());
    EXPECT_EQ(ViewName(v), name);
    View back;
    ASSERT_TRUE(InodeSpace::ViewOfKind(InodeSpace::KindOf(v), &back));
    EXPECT_EQ(back, v) << name;
  }
  ASSERT_TRUE(ParseView("jpeg-224", &v).ok());
  EXPECT_EQ(v, View(View::kJpeg, 224));
  for (const char* bad : {"bmp-15", "bmp-4097", "bmp-0256", "bmp-", "bmp-256x", "bmp--1", "bmp-+16",
                          "jpeg", "jpeg-0", "npy-32", "bmp-99999999999", "BMP-32"}) {
    Status s = ParseView(bad, &v);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
  EXPECT_NE(ParseView("bmp-8", &v).message().find("16 to 4096"), std::string::npos);
  // Kinds no view has are not taken for one.
  for (uint32_t kind : {4u, 8u, 9u, InodeSpace::kResized, InodeSpace::kResized | 2u << 13 | 32}) {
    EXPECT_FALSE(InodeSpace::ViewOfKind(kind, &v)) << kind;
  }
}

TEST_F(ResizedViewsTest, BmpNServesResizeOfEveryImageWithSizesKnownWithoutDecoding) {
  auto fs = Mount();
  struct stat st;
  // Sizes from the recorded dimensions: no image is decoded by lookups and listings.
  const std::map<std::string, std::pair<uint32_t, uint32_t>> dims = {{"wide.png", {21, 16}},
                                                                     {"tall.png", {16, 47}},
                                                                     {"small.png", {12, 9}},
                                                                     {"exact.png", {16, 20}}};
  for (const auto& [name, wh] : dims) {
    ASSERT_NE(Walk(fs.get(), ".dsfs/bmp-16/cat/" + name, &st), 0u) << name;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), BmpBytes(wh.first, wh.second)) << name;
  }
  auto listed = List(fs.get(), Walk(fs.get(), ".dsfs/bmp-16/cat"));
  ASSERT_EQ(listed.size(), 5u);  // the same names as the original directory
  for (const auto& [name, wh] : dims) {
    EXPECT_FALSE(Filesystem::AttrsUnknown(listed[name])) << name;
    EXPECT_EQ(static_cast<uint64_t>(listed[name].st_size), BmpBytes(wh.first, wh.second));
  }
  EXPECT_EQ(StatOf(*fs, "images_decoded"), 0u);
  // The bytes.
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp-16/cat/wide.png")),
            ResizedBmp(40, 30, 1, 16));
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp-16/cat/tall.png")),
            ResizedBmp(17, 50, 2, 16));
  // At or below N: the bmp view's file.
  for (const char* name : {"small.png", "exact.png"}) {
    EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), std::string(".dsfs/bmp-16/cat/") + name)),
              ReadAll(fs.get(), Walk(fs.get(), std::string(".dsfs/bmp/cat/") + name)))
        << name;
  }
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp-16/cat/notes.txt")), "text");
  EXPECT_EQ(StatOf(*fs, "images_resized"), 2u);
  // Rendered once, then served from the cache; another N is another file.
  ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp-16/cat/wide.png"));
  EXPECT_EQ(StatOf(*fs, "images_resized"), 2u);
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp-20/cat/wide.png")),
            ResizedBmp(40, 30, 1, 20));
  EXPECT_EQ(StatOf(*fs, "images_resized"), 3u);
  // The views' inode numbers differ per N, and from the bmp view's.
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp-16/cat/wide.png"),
            Walk(fs.get(), ".dsfs/bmp-20/cat/wide.png"));
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp-16/cat/wide.png"), Walk(fs.get(), ".dsfs/bmp/cat/wide.png"));
  // Found by name, not listed in /.dsfs; names outside 16..4096 are not views.
  auto control = List(fs.get(), Walk(fs.get(), ".dsfs"));
  EXPECT_EQ(control.count("bmp-16"), 0u);
  EXPECT_EQ(Walk(fs.get(), ".dsfs/bmp-15"), 0u);
  EXPECT_EQ(Walk(fs.get(), ".dsfs/bmp-016"), 0u);
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp-4096/dog/one.png"), 0u);
}

TEST_F(ResizedViewsTest, JpegNFilesAreSizedWhenLookedUpAndListedWithoutAttributes) {
  auto fs = Mount();
  const uint64_t dir = Walk(fs.get(), ".dsfs/jpeg-16/cat");
  auto listed = List(fs.get(), dir);
  ASSERT_EQ(listed.size(), 5u);
  // Images above N are listed by name and number only (their size needs an encode).
  for (const char* name : {"wide.png", "tall.png"}) {
    EXPECT_TRUE(Filesystem::AttrsUnknown(listed[name])) << name;
    EXPECT_TRUE(S_ISREG(listed[name].st_mode)) << name;
    EXPECT_NE(listed[name].st_ino, 0u) << name;
  }
  for (const char* name : {"small.png", "exact.png", "notes.txt"}) {
    EXPECT_FALSE(Filesystem::AttrsUnknown(listed[name])) << name;
  }
  EXPECT_EQ(StatOf(*fs, "images_decoded"), 0u);
  // The FUSE layer hands the lookup (and getattr, open) to a decode worker while it would
  // encode: never for the other views' files or once it is cached.
  EXPECT_TRUE(fs->LookupRenders(dir, "wide.png"));
  EXPECT_FALSE(fs->LookupRenders(dir, "small.png"));
  EXPECT_FALSE(fs->LookupRenders(dir, "notes.txt"));
  EXPECT_FALSE(fs->LookupRenders(dir, "missing.png"));
  EXPECT_FALSE(fs->LookupRenders(Walk(fs.get(), ".dsfs/bmp-16/cat"), "wide.png"));
  EXPECT_TRUE(fs->AttrRenders(listed["wide.png"].st_ino));
  EXPECT_FALSE(fs->AttrRenders(listed["small.png"].st_ino));
  // The lookup encodes it, and the read serves what it encoded.
  struct stat st;
  const uint64_t wide = Walk(fs.get(), ".dsfs/jpeg-16/cat/wide.png", &st);
  EXPECT_EQ(wide, listed["wide.png"].st_ino);
  EXPECT_EQ(StatOf(*fs, "images_resized"), 1u);
  EXPECT_FALSE(fs->LookupRenders(dir, "wide.png"));
  EXPECT_FALSE(fs->AttrRenders(wide));
  std::string jpeg = ReadAll(fs.get(), wide);
  EXPECT_EQ(jpeg.size(), static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(StatOf(*fs, "images_resized"), 1u);
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(jpeg, &img).ok());
  EXPECT_EQ(img.width, 21u);
  EXPECT_EQ(img.height, 16u);
  // Close to the resized pixels (a JPEG of quality 90), and exactly what EncodeJpeg makes.
  std::string resized;
  ASSERT_TRUE(ResizeRgb(40, 30, Pixels(40, 30, 1), 21, 16, &resized).ok());
  std::string expect;
  ASSERT_TRUE(EncodeJpeg(21, 16, resized, kResizedJpegQuality, &expect).ok());
  EXPECT_EQ(jpeg, expect);
  // At or below N: the bmp view's file, with its size in the listing.
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/jpeg-16/cat/small.png")),
            ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp/cat/small.png")));
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/jpeg-16/cat/notes.txt")), "text");
  // A fresh mount (nothing cached) gives the same size and bytes: encoding is deterministic.
  auto again = Mount();
  struct stat st2;
  Walk(again.get(), ".dsfs/jpeg-16/cat/wide.png", &st2);
  EXPECT_EQ(st2.st_size, st.st_size);
}

TEST_F(ResizedViewsTest, ListedDirectoriesPushOnlyFilesWhoseSizeIsKnown) {
  auto fs = Mount();
  std::map<uint64_t, uint64_t> files;
  auto collect = [&](uint64_t ino, uint64_t size) {
    files[ino] = size;
    return true;
  };
  ASSERT_TRUE(fs->ForEachFile(Walk(fs.get(), ".dsfs/bmp-16/cat"), collect).ok());
  EXPECT_EQ(files.size(), 5u);
  EXPECT_EQ(files[Walk(fs.get(), ".dsfs/bmp-16/cat/wide.png")], BmpBytes(21, 16));
  files.clear();
  ASSERT_TRUE(fs->ForEachFile(Walk(fs.get(), ".dsfs/jpeg-16/cat"), collect).ok());
  EXPECT_EQ(files.size(), 3u);  // small.png, exact.png, notes.txt
  EXPECT_EQ(StatOf(*fs, "images_resized"), 0u);
}

TEST_F(ResizedViewsTest, ResizedViewAsRoot) {
  View v;
  ASSERT_TRUE(ParseView("bmp-16", &v).ok());
  auto fs = Mount(v);
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), "cat/wide.png")), ResizedBmp(40, 30, 1, 16));
  EXPECT_EQ(Walk(fs.get(), ".dsfs/bmp-16"), 0u);  // not shown again inside itself
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp-17"), 0u);
  EXPECT_NE(Walk(fs.get(), ".dsfs/jpeg-16"), 0u);
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp"), 0u);
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/original/cat/notes.txt")), "text");
  struct stat st;
  ASSERT_TRUE(fs->GetAttr(1, &st).ok());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(ResizedViewsTest, DamagedImageFailsOnlyItsGroup) {
  // Groups of 1 KiB: wide.png and tall.png in different ones.
  PackOptions o;
  o.group_bytes = 1024;
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir_ / "src", o, &table, &store).ok());
  uint32_t ino;
  InodeRecord victim, other;
  ASSERT_TRUE(store->LookupPath("cat/wide.png", &ino, &victim).ok());
  ASSERT_TRUE(store->LookupPath("cat/tall.png", &ino, &other).ok());
  std::shared_ptr<MemTable> damaged;
  uint64_t first, last;
  ASSERT_TRUE(testing::DamagePayload(*table, victim.data, &damaged, &first, &last).ok());
  ASSERT_FALSE(other.data >= first && other.data <= last) << "tall.png shares wide.png's group";
  ASSERT_TRUE(Store::Open(NewMemReader(damaged), &store).ok());
  Filesystem fs(std::move(store), FsOptions{});
  Status s;
  ReadAll(&fs, Walk(&fs, ".dsfs/bmp-16/cat/wide.png"), &s);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  // jpeg-N: its size needs the encode, so its lookup fails (EIO at the FUSE edge).
  const uint64_t dir = Walk(&fs, ".dsfs/jpeg-16/cat");
  struct stat st;
  EXPECT_TRUE(fs.Lookup(dir, "wide.png", &st).IsCorruption());
  // The others are unharmed.
  s = Status::OK();
  EXPECT_EQ(ReadAll(&fs, Walk(&fs, ".dsfs/bmp-16/cat/tall.png"), &s), ResizedBmp(17, 50, 2, 16));
  EXPECT_TRUE(s.ok());
  ASSERT_TRUE(fs.Lookup(dir, "tall.png", &st).ok());
}

}  // namespace
}  // namespace dsfs
