// The image codecs and the views, without FUSE (the pixel-for-pixel comparison with PIL over a
// real mount is tests/e2e/views_test.py).
#include "fs/views.h"

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/path.h"
#include "fs/filesystem.h"
#include "fs/prefetcher.h"
#include "image/image.h"
#include "pack/packer.h"
#include "tests/support/fakes/mem_store.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::PackToMemory;
using testing::TempDir;
using testing::WriteFile;

std::string Gradient(uint32_t w, uint32_t h, int seed) {
  return testing::RgbPixels(w, h, [&](uint32_t x, uint32_t y, char* p) {
    p[0] = static_cast<char>(x * 7 + seed);
    p[1] = static_cast<char>(y * 5 + seed * 3);
    p[2] = static_cast<char>((x ^ y) * 3);
  });
}

std::string Jpeg(uint32_t w, uint32_t h, int seed) {
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  std::string rgb = Gradient(w, h, seed);
  EXPECT_EQ(tjCompress2(t, reinterpret_cast<const unsigned char*>(rgb.data()), static_cast<int>(w),
                        0, static_cast<int>(h), TJPF_RGB, &out, &size, TJSAMP_420, 90, 0),
            0);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(t);
  return jpeg;
}

// format: PNG_FORMAT_RGB (8-bit) or PNG_FORMAT_LINEAR_Y (16-bit gray).
std::string Png(uint32_t w, uint32_t h, uint32_t format) {
  std::string png = testing::EncodePng(w, h, format, Gradient(w, h, 1));
  EXPECT_FALSE(png.empty());
  return png;
}

TEST(ImageTest, DecodesJpegAndPngAndRefusesWhatPilWouldSeeDifferently) {
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(Jpeg(17, 9, 3), &img).ok());
  EXPECT_EQ(img.width, 17u);
  EXPECT_EQ(img.height, 9u);
  EXPECT_EQ(img.rgb.size(), 17u * 9 * 3);
  ASSERT_TRUE(DecodeImage(Png(5, 4, PNG_FORMAT_RGB), &img).ok());
  EXPECT_EQ(img.rgb, Gradient(5, 4, 1));  // PNG is lossless: the very pixels
  EXPECT_EQ(DecodeImage(Png(5, 4, PNG_FORMAT_LINEAR_Y), &img).code(), Status::Code::kNotSupported);
  std::string jpeg = Jpeg(16, 16, 1);
  EXPECT_TRUE(DecodeImage(jpeg.substr(0, jpeg.size() / 2), &img).IsCorruption());
  // A failure leaves the thread's decoder usable for the next image.
  ASSERT_TRUE(DecodeImage(jpeg, &img).ok());
  EXPECT_EQ(img.width, 16u);
  EXPECT_TRUE(DecodeImage(std::string("\x89PNG\r\n\x1a\n", 8) + "junk", &img).IsCorruption());
  EXPECT_EQ(DecodeImage("hello", &img).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(SniffImage(jpeg), ImageKind::kJpeg);
  EXPECT_EQ(SniffImage("BM...."), ImageKind::kNone);
}

// A PNG assembled chunk by chunk: `chunks` (each a type and a body) go between IHDR and IEND.
std::string PngChunk(std::string_view type, std::string_view body, bool good_crc = true) {
  std::string c;
  auto be32 = [&c](uint32_t v) {
    for (int i = 3; i >= 0; --i) c.push_back(static_cast<char>(v >> (8 * i)));
  };
  be32(static_cast<uint32_t>(body.size()));
  c.append(type);
  c.append(body);
  uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(c.data() + 4), static_cast<uInt>(body.size() + 4)));
  be32(good_crc ? crc : crc ^ 1);
  return c;
}

std::string Zlib(std::string_view raw) {
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(z.data()), &size,
                     reinterpret_cast<const Bytef*>(raw.data()), raw.size()),
            Z_OK);
  z.resize(size);
  return z;
}

// An 8-bit palette PNG, one row of `indices`, with `palette` (RGB triples) and `extra` chunks
// between the palette and the image data.
std::string PalettePng(std::string_view indices, std::string_view palette,
                       const std::string& extra = "") {
  std::string ihdr("\0\0\0\0\0\0\0\1\x08\x03\0\0\0", 13);
  ihdr[3] = static_cast<char>(indices.size());
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) + PngChunk("PLTE", palette) +
         extra + PngChunk("IDAT", Zlib(std::string(1, '\0') + std::string(indices))) +
         PngChunk("IEND", "");
}

TEST(ImageTest, PngsPilRefusesOrReadsDifferentlyAreRefused) {
  const std::string idx("\0\1\2\3", 4);
  const std::string four("\xc8\x0a\x0a\x0a\xc8\x0a\x01\x02\x03\x04\x05\x06", 12);
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(PalettePng(idx, four), &img).ok());
  EXPECT_EQ(img.rgb, four);  // each index looked up
  // Indices past a 2-entry palette: libpng gives black, PIL a gray level.
  EXPECT_EQ(DecodeImage(PalettePng(idx, four.substr(0, 6)), &img).code(),
            Status::Code::kNotSupported);
  // PIL checks every chunk's checksum before the image data, ancillary ones included.
  EXPECT_TRUE(
      DecodeImage(PalettePng(idx, four, PngChunk("tEXt", std::string("k\0v", 3), false)), &img)
          .IsCorruption());
  // Text: PIL inflates up to 1 MiB and fails past it, and on unknown compression methods.
  const std::string big = Zlib(std::string(2 << 20, 'a')), small = Zlib("hello");
  auto text = [&](std::string_view type, std::string_view head, const std::string& z) {
    return DecodeImage(PalettePng(idx, four, PngChunk(type, std::string(head) + z)), &img);
  };
  EXPECT_TRUE(text("zTXt", std::string("k\0\0", 3), small).ok());
  EXPECT_EQ(text("zTXt", std::string("k\0\0", 3), big).code(), Status::Code::kNotSupported);
  EXPECT_EQ(text("zTXt", std::string("k\0\1", 3), small).code(), Status::Code::kNotSupported);
  EXPECT_EQ(text("iCCP", std::string("p\0\0", 3), big).code(), Status::Code::kNotSupported);
  EXPECT_TRUE(text("iTXt", std::string("k\0\1\0en\0k\0", 9), small).ok());
  EXPECT_EQ(text("iTXt", std::string("k\0\1\0en\0k\0", 9), big).code(),
            Status::Code::kNotSupported);
  // Transparency and palette chunks of the wrong length.
  EXPECT_FALSE(
      DecodeImage(PalettePng(idx, four, PngChunk("tRNS", std::string(5, '\0'))), &img).ok());
  EXPECT_FALSE(DecodeImage(PalettePng(idx, four + "x"), &img).ok());
  EXPECT_TRUE(
      DecodeImage(PalettePng(idx, four, PngChunk("tRNS", std::string(2, '\0'))), &img).ok());
}

TEST(ImageTest, BmpAndNpyLayouts) {
  std::string rgb = Gradient(3, 2, 0), bmp;
  RenderBmp(3, 2, rgb, &bmp);
  ASSERT_EQ(bmp.size(), BmpBytes(3, 2));
  EXPECT_EQ(bmp.size(), 54u + 12 * 2);  // rows of 9 bytes padded to 12
  EXPECT_EQ(bmp.substr(0, 2), "BM");
  int32_t height;
  std::memcpy(&height, bmp.data() + 22, 4);
  EXPECT_EQ(height, -2);  // top-down rows
  // First pixel, BGR.
  EXPECT_EQ(bmp[54], rgb[2]);
  EXPECT_EQ(bmp[56], rgb[0]);
  // Second row starts after the padding.
  EXPECT_EQ(bmp[54 + 12 + 2], rgb[9]);

  std::string h = NpyHeader("|u1", {28, 28, 3});
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(h.find("'shape': (28, 28, 3)"), std::string::npos);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_NE(NpyHeader("<i8", {5}).find("'shape': (5,)"), std::string::npos);
}

TEST(ViewsTest, ImageFolderExtensions) {
  for (const char* yes : {"a.jpg", "b.JPEG", "c.png", "d.Webp", "e.tiff", "f.PGM"}) {
    EXPECT_TRUE(HasImageExtension(yes)) << yes;
  }
  for (const char* no : {"a.jpg.txt", "jpg", "b.gif", "c.npy", ""}) {
    EXPECT_FALSE(HasImageExtension(no)) << no;
  }
}

class FilesystemViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ImageFolder order within a class: directories sorted as paths ("x" < "x-y" < "x/z"),
    // then names.
    WriteFile(dir_ / "src/b_class/2.jpg", Jpeg(8, 8, 2));
    WriteFile(dir_ / "src/b_class/1.png", Png(8, 8, PNG_FORMAT_RGB));
    WriteFile(dir_ / "src/b_class/x/z.jpg", Jpeg(8, 8, 3));
    WriteFile(dir_ / "src/b_class/x-y/w.jpg", Jpeg(8, 8, 4));
    WriteFile(dir_ / "src/a_class/0.jpg", Jpeg(8, 8, 5));
    WriteFile(dir_ / "src/a_class/notes.txt", "text");
    WriteFile(dir_ / "src/a_class/deep16.png", Png(8, 8, PNG_FORMAT_LINEAR_Y));
    WriteFile(dir_ / "src/mixed/m/big.jpg", Jpeg(16, 8, 6));
    WriteFile(dir_ / "src/mixed/m/small.jpg", Jpeg(8, 8, 7));
    // os.walk's directories sorted as strings: "k/x" < "k/x-y" < "k/x/sub".
    WriteFile(dir_ / "src/c/k/x/1.jpg", Jpeg(8, 8, 8));
    WriteFile(dir_ / "src/c/k/x-y/2.jpg", Jpeg(8, 8, 9));
    WriteFile(dir_ / "src/c/k/x/sub/3.jpg", Jpeg(8, 8, 10));
  }

  std::unique_ptr<Filesystem> Mount(bool predecode, std::shared_ptr<MemTable>* table = nullptr) {
    PackOptions o;
    o.predecode = predecode;
    std::shared_ptr<MemTable> t;
    std::unique_ptr<Store> store;
    EXPECT_TRUE(PackToMemory(dir_ / "src", o, &t, &store).ok());
    if (table) *table = t;
    return std::make_unique<Filesystem>(std::move(store), FsOptions{});
  }

  static uint64_t Walk(Filesystem* fs, const std::string& path) {
    uint64_t ino = 1;
    struct stat st;
    for (std::string_view part : PathParts(path)) {
      Status s = fs->Lookup(ino, part, &st);
      if (!s.ok()) return 0;
      ino = st.st_ino;
    }
    return ino;
  }

  static std::string ReadAll(Filesystem* fs, uint64_t ino, Status* status = nullptr) {
    struct stat st;
    EXPECT_TRUE(fs->GetAttr(ino, &st).ok());
    std::string all;
    ReadBuffer buf;
    // Odd-sized reads: every view must serve any range.
    for (uint64_t off = 0;; off += 1000) {
      std::string_view out;
      Status s = fs->Read(ino, off, 1000, &buf, &out);
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

  TempDir dir_;
};

TEST_F(FilesystemViewsTest, SizesMatchAndEachViewServesItsFormat) {
  for (bool predecode : {false, true}) {
    auto fs = Mount(predecode);
    Status rs;
    std::string bmp = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp/b_class/2.jpg"), &rs);
    EXPECT_TRUE(rs.ok()) << rs.ToString();
    EXPECT_EQ(bmp.substr(0, 2), "BM");
    EXPECT_EQ(bmp.size(), BmpBytes(8, 8));
    std::string npy = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/b_class/1.png.npy"));
    std::string header = NpyHeader("|u1", {8, 8, 3});
    EXPECT_EQ(npy, header + Gradient(8, 8, 1));
    // Images only under their .npy name there; other files as they are everywhere.
    EXPECT_EQ(Walk(fs.get(), ".dsfs/npy/b_class/1.png"), 0u);
    for (const char* view : {"bmp", "npy", "tensor"}) {
      std::string p = std::string(".dsfs/") + view + "/a_class/notes.txt";
      EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), p)), "text") << p;
      // A 16-bit PNG is served as it is (and not renamed in npy).
      std::string deep = std::string(".dsfs/") + view + "/a_class/deep16.png";
      EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), deep)), Png(8, 8, PNG_FORMAT_LINEAR_Y)) << deep;
    }
    // Stored pixels and decoding give the same bytes.
    auto other = Mount(!predecode);
    EXPECT_EQ(bmp, ReadAll(other.get(), Walk(other.get(), ".dsfs/bmp/b_class/2.jpg")));
  }
}

// "X.npy" must fit in 255 bytes: a longer image name keeps its name and bytes in the npy view.
TEST_F(FilesystemViewsTest, ImagesWhoseNpyNameWouldBeTooLongKeepTheirNameInTheNpyView) {
  const std::string fits = std::string(251 - 4, 'f') + ".jpg";      // 251 + 4 = 255 bytes
  const std::string too_long = std::string(252 - 4, 'l') + ".jpg";  // 252 + 4 = 256 bytes
  WriteFile(dir_ / ("src/long/" + fits), Jpeg(8, 8, 11));
  WriteFile(dir_ / ("src/long/" + too_long), Jpeg(8, 8, 12));
  auto fs = Mount(false);
  std::vector<std::string> names;
  ASSERT_TRUE(fs->ReadDir(Walk(fs.get(), ".dsfs/npy/long"), 0,
                          [&](std::string_view n, const struct stat&, uint64_t) {
                            names.emplace_back(n);
                            return true;
                          })
                  .ok());
  EXPECT_EQ(names, (std::vector<std::string>{".", "..", fits + ".npy", too_long}));
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/long/" + too_long)), Jpeg(8, 8, 12));
  EXPECT_EQ(Walk(fs.get(), ".dsfs/npy/long/" + too_long + ".npy"), 0u);
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/long/" + fits + ".npy")).substr(0, 6),
            "\x93NUMPY");
}

TEST_F(FilesystemViewsTest, ViewsAreHiddenAndMirrorTheTree) {
  auto fs = Mount(false);
  std::vector<std::string> root, view;
  auto collect = [](std::vector<std::string>* names) {
    return [names](std::string_view n, const struct stat&, uint64_t) {
      names->emplace_back(n);
      return true;
    };
  };
  ASSERT_TRUE(fs->ReadDir(1, 0, collect(&root)).ok());
  ASSERT_TRUE(fs->ReadDir(Walk(fs.get(), ".dsfs/bmp"), 0, collect(&view)).ok());
  EXPECT_EQ(std::count(root.begin(), root.end(), ".dsfs"), 0);
  EXPECT_EQ(root, view);
  std::vector<std::string> npy;
  ASSERT_TRUE(fs->ReadDir(Walk(fs.get(), ".dsfs/npy/b_class"), 0, collect(&npy)).ok());
  EXPECT_EQ(npy, (std::vector<std::string>{".", "..", "1.png.npy", "2.jpg.npy", "x", "x-y"}));
  // Distinct inode numbers per view.
  EXPECT_NE(Walk(fs.get(), "b_class/2.jpg"), Walk(fs.get(), ".dsfs/bmp/b_class/2.jpg"));
}

TEST_F(FilesystemViewsTest, TensorViewFollowsImageFolderOrder) {
  auto fs = Mount(false);
  TensorIndex t;
  uint32_t root;
  InodeRecord rec;
  ASSERT_TRUE(fs->store().LookupPath("", &root, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), root, &t).ok());
  EXPECT_FALSE(t.available);  // a_class holds a 16-bit PNG
  EXPECT_NE(t.why.find("deep16.png"), std::string::npos) << t.why;

  uint32_t b;
  ASSERT_TRUE(fs->store().LookupPath("b_class", &b, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), b, &t).ok());
  ASSERT_TRUE(t.available) << t.why;  // a leaf-less class: x and x-y are its classes
  std::string files;
  ASSERT_TRUE(TensorFilesText(fs->store(), b, t, &files).ok());
  EXPECT_EQ(files, "x/z.jpg\nx-y/w.jpg\n");
  EXPECT_EQ(t.labels, (std::vector<uint32_t>{0, 1}));

  uint32_t c;
  ASSERT_TRUE(fs->store().LookupPath("c", &c, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), c, &t).ok());
  ASSERT_TRUE(t.available) << t.why;
  ASSERT_TRUE(TensorFilesText(fs->store(), c, t, &files).ok());
  EXPECT_EQ(files, "k/x/1.jpg\nk/x-y/2.jpg\nk/x/sub/3.jpg\n");

  uint32_t m;
  ASSERT_TRUE(fs->store().LookupPath("mixed", &m, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), m, &t).ok());
  EXPECT_FALSE(t.available);
  EXPECT_NE(t.why.find("differ in size"), std::string::npos) << t.why;

  // Through the filesystem: images.npy is the header and the images in order.
  std::string images = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/tensor/b_class/images.npy"));
  std::string z = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/b_class/x/z.jpg.npy"));
  std::string w = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/b_class/x-y/w.jpg.npy"));
  std::string one = NpyHeader("|u1", {8, 8, 3});
  EXPECT_EQ(images, NpyHeader("|u1", {2, 8, 8, 3}) + z.substr(one.size()) + w.substr(one.size()));
  std::string labels = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/tensor/b_class/labels.npy"));
  EXPECT_EQ(labels.size(), NpyHeader("<i8", {2}).size() + 16);
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/tensor/b_class/classes.txt")), "x\nx-y\n");
  EXPECT_EQ(Walk(fs.get(), ".dsfs/tensor/mixed/images.npy"), 0u);
  EXPECT_NE(Walk(fs.get(), ".dsfs/tensor/mixed/m"), 0u);
}

// A damaged solid group fails its images in every view (EIO, never wrong pixels); images of
// other groups are unharmed.
TEST_F(FilesystemViewsTest, DamagedImageFailsOnlyItsGroupInEveryView) {
  PackOptions o;
  o.group_bytes = 1024;  // the 13 small files make several groups
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> packed;
  ASSERT_TRUE(PackToMemory(dir_ / "src", o, &table, &packed).ok());
  uint32_t ino;
  InodeRecord victim;
  ASSERT_TRUE(packed->LookupPath("b_class/2.jpg", &ino, &victim).ok());
  std::shared_ptr<MemTable> damaged;
  uint64_t first, last;
  ASSERT_TRUE(testing::DamagePayload(*table, victim.data, &damaged, &first, &last).ok());
  auto in_group = [&](const char* rel) {
    InodeRecord r;
    EXPECT_TRUE(packed->LookupPath(rel, &ino, &r).ok()) << rel;
    return r.data >= first && r.data <= last;
  };
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(damaged), &store).ok());
  Filesystem dfs(std::move(store), FsOptions{});
  for (const char* p : {"b_class/2.jpg", ".dsfs/bmp/b_class/2.jpg", ".dsfs/npy/b_class/2.jpg.npy",
                        ".dsfs/tensor/b_class/x/z.jpg"}) {
    Status s;
    std::string got = ReadAll(&dfs, Walk(&dfs, p), &s);
    if (std::string(p).find("z.jpg") != std::string::npos) {
      EXPECT_EQ(s.ok(), !in_group("b_class/x/z.jpg")) << p;  // another image
    } else {
      EXPECT_TRUE(s.IsCorruption()) << p << ": " << s.ToString();
    }
  }
  Status s;
  ReadAll(&dfs, Walk(&dfs, ".dsfs/tensor/b_class/images.npy"), &s);
  // 2.jpg is not below b_class's classes x and x-y.
  EXPECT_EQ(s.ok(), !in_group("b_class/x/z.jpg") && !in_group("b_class/x-y/w.jpg"));
  s = Status::OK();
  std::string bmp = ReadAll(&dfs, Walk(&dfs, ".dsfs/bmp/b_class/1.png"), &s);
  EXPECT_EQ(s.ok(), !in_group("b_class/1.png"));
  if (s.ok()) EXPECT_EQ(bmp.substr(0, 2), "BM");
  // Some image is outside the damaged group, and reads in every view.
  int unharmed = 0;
  for (const char* rel : {"a_class/0.jpg", "mixed/m/big.jpg", "mixed/m/small.jpg", "c/k/x/1.jpg",
                          "c/k/x/sub/3.jpg"}) {
    if (in_group(rel)) continue;
    ++unharmed;
    for (const std::string& p : {std::string(rel), ".dsfs/bmp/" + std::string(rel),
                                 ".dsfs/npy/" + std::string(rel) + ".npy"}) {
      Status us;
      ReadAll(&dfs, Walk(&dfs, p), &us);
      EXPECT_TRUE(us.ok()) << p << ": " << us.ToString();
    }
  }
  EXPECT_GT(unharmed, 0);
}

TEST_F(FilesystemViewsTest, ListedViewDirectoriesArePushedAsTheViewShowsThem) {
  // After readdirplus of a view directory, the push worker renders its files (decoding on its
  // own thread) into the kernel's page cache under the view's inode numbers.
  auto fs = Mount(false);
  std::mutex mu;
  std::map<uint64_t, std::string> kernel;
  Prefetcher::Options o;
  o.push_budget_bytes = 1 << 30;
  Prefetcher p(
      &fs->store(), nullptr, fs->inode_space(), o,
      [&](uint64_t ino, uint64_t off, std::string_view data) {
        std::lock_guard lock(mu);
        std::string& f = kernel[ino];
        if (f.size() < off + data.size()) f.resize(off + data.size());
        f.replace(off, data.size(), data);
        return 0;
      },
      fs.get());
  p.DirectoryListed(Walk(fs.get(), ".dsfs/bmp/b_class"));
  p.DirectoryListed(Walk(fs.get(), ".dsfs/npy/b_class"));
  p.DirectoryListed(Walk(fs.get(), ".dsfs"));  // the control directory: nothing to push
  p.WaitIdle();
  for (const char* path :
       {".dsfs/bmp/b_class/2.jpg", ".dsfs/bmp/b_class/1.png", ".dsfs/npy/b_class/2.jpg.npy"}) {
    uint64_t ino = Walk(fs.get(), path);
    ASSERT_EQ(kernel.count(ino), 1u) << path;
    EXPECT_EQ(kernel[ino], ReadAll(fs.get(), ino)) << path;
  }
  EXPECT_EQ(kernel.size(), 4u);  // two images in each of the two directories
  // Only ReadAll's reads (two per file: the bytes, then end of file) count as requests.
  EXPECT_EQ(fs->counters().read.load(), 6u);
}

TEST_F(FilesystemViewsTest, ViewAsRoot) {
  PackOptions o;
  std::shared_ptr<MemTable> t;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir_ / "src", o, &t, &store).ok());
  FsOptions fo;
  fo.view = View::kBmp;
  Filesystem fs(std::move(store), fo);
  EXPECT_EQ(ReadAll(&fs, Walk(&fs, "b_class/2.jpg")).substr(0, 2), "BM");
  EXPECT_NE(Walk(&fs, ".dsfs/npy"), 0u);
  EXPECT_EQ(Walk(&fs, ".dsfs/bmp"), 0u);  // not shown again inside itself
  struct stat st;
  ASSERT_TRUE(fs.GetAttr(1, &st).ok());
  EXPECT_EQ(st.st_ino, 1u);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // The original tree is there too, under a number of its own (FUSE's 1 is the view's root).
  uint64_t original = Walk(&fs, ".dsfs/original");
  EXPECT_NE(original, 0u);
  EXPECT_NE(original, 1u);
  ASSERT_TRUE(fs.GetAttr(original, &st).ok());
  EXPECT_EQ(st.st_ino, original);
  EXPECT_EQ(ReadAll(&fs, Walk(&fs, ".dsfs/original/b_class/2.jpg")), Jpeg(8, 8, 2));
  std::vector<std::string> names;
  ASSERT_TRUE(
      fs.ReadDir(Walk(&fs, ".dsfs"), 0, [&](std::string_view n, const struct stat&, uint64_t) {
          names.emplace_back(n);
          return true;
        }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{".", "..", "stats", "original", "npy", "tensor"}));
}

std::vector<std::string> List(Filesystem* fs, uint64_t ino) {
  std::vector<std::string> names;
  EXPECT_TRUE(fs->ReadDir(ino, 0, [&](std::string_view n, const struct stat&, uint64_t) {
                  names.emplace_back(n);
                  return true;
                }).ok());
  return names;
}

// Names a view generates win over source files of the same name, in lookups and listings
// alike; the source's own .dsfs directory stays reachable inside the views.
TEST_F(FilesystemViewsTest, GeneratedNamesWinOverSourceNamesConsistently) {
  WriteFile(dir_ / "src/.dsfs/user.txt", "mine");
  WriteFile(dir_ / "src/n/a.jpg", Jpeg(8, 8, 11));
  WriteFile(dir_ / "src/n/a.jpg.npy", "user data");
  WriteFile(dir_ / "src/n/b.txt.npy", "kept");
  auto fs = Mount(false);
  std::vector<std::string> root = List(fs.get(), 1);
  EXPECT_EQ(std::count(root.begin(), root.end(), ".dsfs"), 0);
  EXPECT_NE(Walk(fs.get(), ".dsfs/bmp"), 0u);  // lookups find dsfs's own .dsfs, before or after
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp/.dsfs/user.txt")), "mine");
  EXPECT_EQ(List(fs.get(), Walk(fs.get(), ".dsfs/npy/n")),
            (std::vector<std::string>{".", "..", "a.jpg.npy", "b.txt.npy"}));
  std::string npy = ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/n/a.jpg.npy"));
  EXPECT_EQ(npy.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/npy/n/b.txt.npy")), "kept");
}

// ImageFolder sorts names as Python strings: undecodable bytes become U+DC80..U+DCFF, which
// sort before U+E000 and emoji although their bytes (0x80..0xFF) sort after every lead byte.
TEST_F(FilesystemViewsTest, TensorViewSortsNamesAsPythonDoes) {
  const std::string e_acute = "\xc3\xa9", bad = "\xff", smile = "\xf0\x9f\x98\x80";
  for (const std::string& n : {e_acute, bad, smile}) {
    WriteFile(dir_ / ("src/u/c/" + n + ".jpg"), Jpeg(8, 8, 12));
    WriteFile(dir_ / ("src/v/" + n + "_cls/1.jpg"), Jpeg(8, 8, 13));
  }
  auto fs = Mount(false);
  InodeRecord rec;
  TensorIndex t;
  std::string files;
  uint32_t u, v;
  ASSERT_TRUE(fs->store().LookupPath("u", &u, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), u, &t).ok());
  ASSERT_TRUE(t.available) << t.why;
  ASSERT_TRUE(TensorFilesText(fs->store(), u, t, &files).ok());
  EXPECT_EQ(files, "c/" + e_acute + ".jpg\nc/" + bad + ".jpg\nc/" + smile + ".jpg\n");
  ASSERT_TRUE(fs->store().LookupPath("v", &v, &rec).ok());
  ASSERT_TRUE(BuildTensorIndex(fs->store(), v, &t).ok());
  ASSERT_TRUE(t.available) << t.why;
  EXPECT_EQ(t.classes, (std::vector<std::string>{e_acute + "_cls", bad + "_cls", smile + "_cls"}));
}

// ImageFolder follows symbolic links (a linked class directory is a class); the tensor view
// cannot, so any link below makes it absent, saying which.
TEST_F(FilesystemViewsTest, TensorViewIsAbsentWhereLinksAre) {
  WriteFile(dir_ / "src/l/real/1.jpg", Jpeg(8, 8, 14));
  ASSERT_EQ(symlink("real", (dir_ / "src/l/alias").c_str()), 0);
  WriteFile(dir_ / "src/l2/c/1.jpg", Jpeg(8, 8, 15));
  ASSERT_EQ(symlink("../../l/real", (dir_ / "src/l2/c/sub").c_str()), 0);
  WriteFile(dir_ / "src/l3/1.jpg", Jpeg(8, 8, 16));
  ASSERT_EQ(symlink("1.jpg", (dir_ / "src/l3/notes").c_str()), 0);
  auto fs = Mount(false);
  for (auto [dir, link] : {std::pair{"l", "alias"}, {"l2", "c/sub"}, {"l3", "notes"}}) {
    uint32_t d;
    InodeRecord rec;
    TensorIndex t;
    ASSERT_TRUE(fs->store().LookupPath(dir, &d, &rec).ok());
    ASSERT_TRUE(BuildTensorIndex(fs->store(), d, &t).ok());
    EXPECT_FALSE(t.available) << dir;
    EXPECT_EQ(t.why.find(std::string(link) + " is a symbolic link"), 0u) << t.why;
  }
}

// An aggregate file (the tensor view's) shows no more than its members could show one by one:
// its read bits are those every member file and every directory on the way to it allow (search
// and read); the per-image views keep each file's own mode, their directories the originals'.
TEST_F(FilesystemViewsTest, TensorFilesAreNoMoreReadableThanTheirMembers) {
  WriteFile(dir_ / "src/p/pub/1.jpg", Jpeg(8, 8, 17), 0644);
  WriteFile(dir_ / "src/p/priv/2.jpg", Jpeg(8, 8, 18), 0600);
  WriteFile(dir_ / "src/q/open/3.jpg", Jpeg(8, 8, 19), 0644);
  WriteFile(dir_ / "src/q/open/4.jpg", Jpeg(8, 8, 20), 0640);
  WriteFile(dir_ / "src/r/listonly/5.jpg", Jpeg(8, 8, 21), 0644);
  WriteFile(dir_ / "src/r/listonly/sub/6.jpg", Jpeg(8, 8, 22), 0644);
  ASSERT_EQ(::chmod((dir_ / "src").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ / "src/p/priv").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((dir_ / "src/r/listonly").c_str(), 0754), 0);  // others: no search
  auto fs = Mount(false);
  struct stat st;
  auto mode = [&](const std::string& path) -> uint32_t {
    uint64_t ino = Walk(fs.get(), path);
    EXPECT_NE(ino, 0u) << path;
    EXPECT_TRUE(fs->GetAttr(ino, &st).ok()) << path;
    return st.st_mode & 07777;
  };
  for (std::string_view f : kTensorFileNames) {
    std::string name(f);
    EXPECT_EQ(mode(".dsfs/tensor/p/" + name), 0400u) << name;  // priv: owner only
    EXPECT_EQ(mode(".dsfs/tensor/q/" + name), 0440u) << name;  // 4.jpg: no others
    EXPECT_EQ(mode(".dsfs/tensor/r/" + name), 0440u) << name;  // listonly: no search for others
    EXPECT_EQ(mode(".dsfs/tensor/q/open/" + name), 0440u) << name;
    EXPECT_EQ(mode(".dsfs/tensor/p/pub/" + name), 0444u) << name;
    // Below a private directory, the generated files are private too.
    EXPECT_EQ(mode(".dsfs/tensor/p/priv/" + name), 0400u) << name;
  }
  EXPECT_EQ(mode(".dsfs/bmp/p/priv/2.jpg"), 0600u);
  EXPECT_EQ(mode(".dsfs/npy/p/priv/2.jpg.npy"), 0600u);
  for (const char* view : {"", ".dsfs/bmp/", ".dsfs/npy/", ".dsfs/tensor/"}) {
    EXPECT_EQ(mode(std::string(view) + "p/priv"), 0700u) << view;
    EXPECT_EQ(mode(std::string(view) + "r/listonly"), 0754u) << view;
  }
}

// files.txt and classes.txt hold one path per line: a newline in a name below makes the tensor
// view absent (saying why, on one line) instead of adding a line.
TEST_F(FilesystemViewsTest, TensorViewIsAbsentWhereANameHasANewline) {
  WriteFile(dir_ / "src/nl/c/a\nb.jpg", Jpeg(8, 8, 23));
  WriteFile(dir_ / "src/nl/c/ok.jpg", Jpeg(8, 8, 24));
  WriteFile(dir_ / "src/nl2/c\nd/1.jpg", Jpeg(8, 8, 25));
  WriteFile(dir_ / "src/nl2/e/2.jpg", Jpeg(8, 8, 26));
  auto fs = Mount(false);
  for (auto [dir, why] : {std::pair{"nl", "c/a\\nb.jpg has a newline"},
                          {"nl/c", "a\\nb.jpg has a newline"},
                          {"nl2", "c\\nd/1.jpg has a newline"}}) {
    uint32_t d;
    InodeRecord rec;
    TensorIndex t;
    ASSERT_TRUE(fs->store().LookupPath(dir, &d, &rec).ok());
    ASSERT_TRUE(BuildTensorIndex(fs->store(), d, &t).ok());
    EXPECT_FALSE(t.available) << dir;
    EXPECT_EQ(t.why.find(why), 0u) << t.why;
    EXPECT_EQ(t.why.find('\n'), std::string::npos) << t.why;
    EXPECT_EQ(Walk(fs.get(), std::string(".dsfs/tensor/") + dir + "/files.txt"), 0u) << dir;
  }
  EXPECT_NE(Walk(fs.get(), ".dsfs/tensor/nl2/e/files.txt"), 0u);
}

uint64_t ImagesDecoded(const Filesystem& fs) {
  std::string j = fs.StatsJson();
  size_t at = j.find("\"images_decoded\": ");
  return at == std::string::npos ? UINT64_MAX : std::stoull(j.substr(at + 18));
}

// The views decode an image once and serve it from the RAM cache: an image whose rendered form
// cannot fit one cache entry is served as its original bytes (its size says so from the start),
// and concurrent readers of one image share one decode.
TEST_F(FilesystemViewsTest, ImagesAreDecodedOnceAndThoseTooLargeForTheCacheServedAsTheyAre) {
  const std::string large = Png(200, 200, PNG_FORMAT_RGB), medium = Png(400, 400, PNG_FORMAT_RGB);
  WriteFile(dir_ / "src/big/c/large.png", large);
  WriteFile(dir_ / "src/big/d/small.png", Png(8, 8, PNG_FORMAT_RGB));
  WriteFile(dir_ / "src/mid/c/medium.png", medium);
  auto open = [&](uint64_t cache_bytes) {
    std::shared_ptr<MemTable> t;
    std::unique_ptr<Store> store;
    EXPECT_TRUE(PackToMemory(dir_ / "src", PackOptions{}, &t, &store).ok());
    auto cache = std::make_shared<ByteCache>(cache_bytes);
    EXPECT_TRUE(Store::Open(NewMemReader(t), &store, cache).ok());
    FsOptions o;
    o.max_render_bytes = cache->max_value_bytes();
    return std::make_unique<Filesystem>(std::move(store), o, cache);
  };
  {
    auto fs = open(16 * 64 * 1024);  // 64 KiB per entry: the 200x200 image (120 KB) is too large
    for (const char* p : {".dsfs/bmp/big/c/large.png", ".dsfs/npy/big/c/large.png"}) {
      uint64_t ino = Walk(fs.get(), p);
      ASSERT_NE(ino, 0u) << p;
      struct stat st;
      ASSERT_TRUE(fs->GetAttr(ino, &st).ok());
      EXPECT_EQ(static_cast<uint64_t>(st.st_size), large.size()) << p;
      EXPECT_TRUE(ReadAll(fs.get(), ino) == large) << p;
    }
    EXPECT_EQ(Walk(fs.get(), ".dsfs/npy/big/c/large.png.npy"), 0u);
    EXPECT_EQ(List(fs.get(), Walk(fs.get(), ".dsfs/npy/big/c")),
              (std::vector<std::string>{".", "..", "large.png"}));
    EXPECT_EQ(Walk(fs.get(), ".dsfs/tensor/big/c/images.npy"), 0u);
    EXPECT_EQ(ImagesDecoded(*fs), 0u);
    // A small one renders, decoded once for all of the 1000-byte reads.
    EXPECT_EQ(ReadAll(fs.get(), Walk(fs.get(), ".dsfs/bmp/big/d/small.png")).substr(0, 2), "BM");
    EXPECT_EQ(ImagesDecoded(*fs), 1u);
  }
  {
    // 4 MiB per entry: the 400x400 image fits; eight readers at once decode it once.
    auto fs = open(64 << 20);
    for (const char* view : {".dsfs/bmp/mid/c/medium.png", ".dsfs/npy/mid/c/medium.png.npy",
                             ".dsfs/tensor/mid/c/images.npy"}) {
      uint64_t before = ImagesDecoded(*fs);
      uint64_t ino = Walk(fs.get(), view);
      ASSERT_NE(ino, 0u) << view;
      std::vector<std::thread> readers;
      std::atomic<int> ready{0};
      std::vector<std::string> got(8);
      for (int i = 0; i < 8; ++i) {
        readers.emplace_back([&, i] {
          ++ready;
          while (ready.load() < 8) {
          }
          ReadBuffer buf;
          std::string_view out;
          EXPECT_TRUE(fs->Read(ino, 0, 4096, &buf, &out).ok());
          got[i] = std::string(out);
        });
      }
      for (auto& t : readers) t.join();
      // bmp keeps the BMP, npy and tensor share the pixels: the tensor view decodes nothing.
      bool shares = std::string(view).find("tensor") != std::string::npos;
      EXPECT_EQ(ImagesDecoded(*fs) - before, shares ? 0u : 1u) << view;
      for (const std::string& g : got) EXPECT_EQ(g, got[0]) << view;
    }
  }
}

}  // namespace
}  // namespace dsfs
