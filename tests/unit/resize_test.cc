// The resized images (image/resize.h) against the real Pillow and torchvision: the corpus and
// its reference pixels come from tests/support/resize_reference.py, run with Debian's
// /usr/bin/python3.
#include "image/resize.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "image/image.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::CommandResult;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, with Pillow and torchvision
const std::string kReference = std::string(DSFS_TESTS_DIR) + "/support/resize_reference.py";

// Smooth content with mild deterministic noise (what JPEG is made for).
std::string Photo(uint32_t w, uint32_t h, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 1;
  return testing::RgbPixels(w, h, [&](uint32_t x, uint32_t y, char* p) {
    state = state * 1664525u + 1013904223u;
    const int n = static_cast<int>((state >> 24) % 9) - 4;
    const int v[3] = {static_cast<int>(x * 255 / std::max(w - 1, 1u)),
                      static_cast<int>(y * 255 / std::max(h - 1, 1u)),
                      static_cast<int>((x + y) * 127 / std::max(w + h - 2, 1u)) + 64};
    for (int c = 0; c < 3; ++c) p[c] = static_cast<char>(std::clamp(v[c] + n, 0, 255));
  });
}

// The first index at which two pixel arrays differ, as "(x, y) channel c: a vs b".
std::string FirstDifference(const std::string& a, const std::string& b, uint32_t w) {
  if (a.size() != b.size()) {
    return std::to_string(a.size()) + " bytes vs " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      const size_t px = i / 3;
      return "(" + std::to_string(px % w) + ", " + std::to_string(px / w) + ") channel " +
             std::to_string(i % 3) + ": " + std::to_string(static_cast<uint8_t>(a[i])) + " vs " +
             std::to_string(static_cast<uint8_t>(b[i]));
    }
  }
  return "none";
}

// The reference corpus, made once for all the tests that use it.
class ResizeReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    if (access(kPython, X_OK) != 0) {
      skip_ = std::string("no ") + kPython;
      return;
    }
    CommandResult r = RunCommand({kPython, kReference, dir_->path()}, 300);
    if (r.exit_code == 77) {
      skip_ = "no Pillow/torchvision for " + std::string(kPython) + ": " + r.err;
    } else if (r.exit_code != 0) {
      error_ = "resize_reference.py failed: " + testing::Describe(r);
    }
  }
  static void TearDownTestSuite() {
    delete dir_;  // removes the corpus
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  // The manifest's lines of `kind`, split into words.
  static std::vector<std::vector<std::string>> Lines(const std::string& kind) {
    std::vector<std::vector<std::string>> lines;
    std::istringstream in(ReadFile(*dir_ / "manifest.txt"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string s; words >> s;) w.push_back(s);
      if (!w.empty() && w[0] == kind) lines.push_back(w);
    }
    return lines;
  }

  // The source image `name`, decoded as the views decode it (cached).
  const DecodedImage& Source(const std::string& name) {
    auto it = decoded_.find(name);
    if (it == decoded_.end()) {
      DecodedImage img;
      Status s = DecodeImage(ReadFile(*dir_ / name), &img);
      EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
      it = decoded_.emplace(name, std::move(img)).first;
    }
    return it->second;
  }

  static std::string Pixels(const std::string& name) { return ReadFile(*dir_ / name); }

  // ResizeRgb (the SIMD passes, where the CPU has them) and ResizeRgbPortable both give `want`.
  static void ExpectPixels(const DecodedImage& src, uint32_t w, uint32_t h, const std::string& want,
                           const std::string& what) {
    for (bool portable : {false, true}) {
      std::string out;
      Status s = portable ? ResizeRgbPortable(src.width, src.height, src.rgb, w, h, &out)
                          : ResizeRgb(src.width, src.height, src.rgb, w, h, &out);
      ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
      EXPECT_TRUE(out == want) << what << " " << src.width << "x" << src.height << " -> " << w
                               << "x" << h << (portable ? " (portable)" : "")
                               << ": first difference " << FirstDifference(out, want, w);
    }
  }

  static TempDir* dir_;
  static std::string skip_, error_;
  std::map<std::string, DecodedImage> decoded_;
};

TempDir* ResizeReferenceTest::dir_ = nullptr;
std::string ResizeReferenceTest::skip_, ResizeReferenceTest::error_;

// One test, so that the corpus is made once (ctest runs each test in its own process).
//
// torchvision.transforms.Resize(N)(Image.open(f).convert("RGB")) for every image of the corpus
// and every N: ResizedSize gives its size in every case (enlargements included); where the short
// side is above N (what the views resize) ResizeRgb gives its pixels byte for byte, and so it
// does wherever the reference wrote the pixels of an enlargement or an unchanged image; and
// ResizeRgbPortable gives the same.
//
// Image.resize((w, h), BILINEAR) beyond what Resize(N) asks: reductions by large factors
// (4000 -> 16, 4000x300 -> 1x1), enlargements (17x23 -> 170x230, 1x1 -> 5x7), one dimension
// only, sizes off by one, and 40 random sizes both ways from a 613x457 image.
TEST_F(ResizeReferenceTest, MatchesTorchvisionAndPillowOnTheCorpus) {
  {
    SCOPED_TRACE("torchvision Resize(N)");
    auto lines = Lines("resize");
    ASSERT_GE(lines.size(), 200u);
    int sizes = 0, reductions = 0, others = 0;
    std::map<std::string, int> per_source;
    for (const auto& w : lines) {
      ASSERT_EQ(w.size(), 6u);
      const std::string& name = w[1];
      const uint32_t n = std::stoul(w[2]), tw = std::stoul(w[3]), th = std::stoul(w[4]);
      const DecodedImage& src = Source(name);
      ASSERT_GT(src.width, 0u) << name;
      uint32_t rw = 0, rh = 0;
      ResizedSize(src.width, src.height, n, &rw, &rh);
      EXPECT_EQ(rw, tw) << name << " at " << n;
      EXPECT_EQ(rh, th) << name << " at " << n;
      ++sizes;
      const bool reduced = std::min(src.width, src.height) > n;
      if (reduced) {
        ASSERT_NE(w[5], "-") << name << " at " << n << ": a reduction without pixels";
      }
      if (w[5] == "-") continue;
      ExpectPixels(src, tw, th, Pixels(w[5]), name + " at " + w[2]);
      ++(reduced ? reductions : others);
      ++per_source[name];
    }
    std::cout << "torchvision Resize(N): " << sizes << " sizes checked over " << per_source.size()
              << " images, pixels byte-equal on " << reductions << " reductions and " << others
              << " enlargements/unchanged" << (HasFailure() ? " EXCEPT THE FAILURES ABOVE" : "")
              << "\n";
    EXPECT_GE(reductions, 90);
  }
  {
    SCOPED_TRACE("Image.resize");
    auto lines = Lines("scale");
    ASSERT_GE(lines.size(), 56u);
    for (const auto& w : lines) {
      ASSERT_EQ(w.size(), 5u);
      const DecodedImage& src = Source(w[1]);
      const uint32_t tw = std::stoul(w[2]), th = std::stoul(w[3]);
      ExpectPixels(src, tw, th, Pixels(w[4]), w[1]);
    }
    std::cout << "Image.resize: " << lines.size() << " resizes byte-equal"
              << (HasFailure() ? " EXCEPT THE FAILURES ABOVE" : "") << "\n";
  }
}

TEST(ResizeTest, ResizedSizeFollowsTorchvision) {
  struct Case {
    uint32_t w, h, n, want_w, want_h;
  } cases[] = {
      {500, 375, 256, 341, 256},  // int(256 * 500 / 375) = int(341.33)
      {375, 500, 256, 256, 341},
      {640, 480, 224, 298, 224},  // int(298.67)
      {300, 300, 224, 224, 224},  // square: w <= h, both n
      {256, 300, 256, 256, 300},  // short side already n: the image's own size
      {300, 256, 256, 300, 256},
      {3, 10, 16, 16, 53},  // an enlargement: int(53.33)
      {4097, 3, 16, 21850, 16},
      {1, 1, 4096, 4096, 4096},
      {65535, 1, 4096, 268431360, 4096},      // n * long far below 2^53: exact
      {4294967295u, 1, 16, 4294967295u, 16},  // saturates
      {0, 5, 16, 0, 0},
      {5, 5, 0, 0, 0},
  };
  for (const Case& c : cases) {
    uint32_t w = 1, h = 1;
    ResizedSize(c.w, c.h, c.n, &w, &h);
    EXPECT_EQ(w, c.want_w) << c.w << "x" << c.h << " at " << c.n;
    EXPECT_EQ(h, c.want_h) << c.w << "x" << c.h << " at " << c.n;
  }
}

TEST(ResizeTest, RejectsBadInputWithoutTouchingTheOutput) {
  const std::string rgb = Photo(10, 8, 1);
  const std::string kept = "kept";
  std::string out = kept;
  EXPECT_EQ(ResizeRgb(0, 8, "", 5, 4, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 0, "", 5, 4, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb, 0, 4, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb, 5, 0, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb, kMaxImageSide + 1, 4, &out).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb, 4, kMaxImageSide + 1, &out).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb, 20000, 20000, &out).code(),  // past kMaxImagePixels
            Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb.substr(1), 5, 4, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ResizeRgb(10, 8, rgb + "x", 5, 4, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(
      ResizeRgb(kMaxImageSide + 1, 1, std::string((kMaxImageSide + 1) * 3, 'a'), 5, 1, &out).code(),
      Status::Code::kInvalidArgument);
  EXPECT_EQ(out, kept);
  ASSERT_TRUE(ResizeRgb(10, 8, rgb, 5, 4, &out).ok());
  EXPECT_EQ(out.size(), 5u * 4 * 3);
}

TEST(ResizeTest, SameSizeIsACopyAndConstantStaysConstant) {
  const std::string rgb = Photo(33, 17, 2);
  std::string out;
  ASSERT_TRUE(ResizeRgb(33, 17, rgb, 33, 17, &out).ok());
  EXPECT_EQ(out, rgb);
  // Normalised weights: a flat image stays flat through any resize.
  const std::string flat = testing::RgbPixels(97, 61, [](uint32_t, uint32_t, char* p) {
    p[0] = static_cast<char>(200), p[1] = 7, p[2] = static_cast<char>(255);
  });
  for (auto [w, h] : {std::pair{1u, 1u}, {16u, 10u}, {97u, 200u}, {500u, 3u}, {96u, 61u}}) {
    ASSERT_TRUE(ResizeRgb(97, 61, flat, w, h, &out).ok());
    ASSERT_EQ(out.size(), size_t{w} * h * 3);
    for (size_t i = 0; i < out.size(); i += 3) {
      ASSERT_EQ(static_cast<uint8_t>(out[i]), 200) << w << "x" << h;
      ASSERT_EQ(out[i + 1], 7) << w << "x" << h;
      ASSERT_EQ(static_cast<uint8_t>(out[i + 2]), 255) << w << "x" << h;
    }
  }
}

// The SIMD passes against the portable ones on many small random sizes: rows shorter than a
// vector, blocks of fewer than eight rows, every tail.
TEST(ResizeTest, SimdAndPortablePassesAgreeOnRandomSizes) {
  uint32_t state = 12345;
  auto next = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return 1 + (state >> 8) % n;
  };
  for (int i = 0; i < 300; ++i) {
    const uint32_t w = next(70), h = next(70), ow = next(140), oh = next(140);
    const std::string rgb = testing::RandomBytes(size_t{w} * h * 3, i);
    std::string fast, portable;
    ASSERT_TRUE(ResizeRgb(w, h, rgb, ow, oh, &fast).ok());
    ASSERT_TRUE(ResizeRgbPortable(w, h, rgb, ow, oh, &portable).ok());
    ASSERT_TRUE(fast == portable) << w << "x" << h << " -> " << ow << "x" << oh
                                  << ": first difference " << FirstDifference(fast, portable, ow);
  }
}

TEST(ResizeTest, ConcurrentCallsAgree) {
  const std::string rgb = Photo(500, 375, 3);
  std::string want;
  ASSERT_TRUE(ResizeRgb(500, 375, rgb, 341, 256, &want).ok());
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(ResizeRgb(500, 375, rgb, 341, 256, &g).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_TRUE(g == want);
}

// Microbenchmark: the views' typical case, ImageNet-like 500x375 to Resize(256), and the
// encoding of the result. Figures printed; the bounds only catch a gross regression.
TEST(ResizeTest, SpeedOfResizeAndEncode) {
  const std::string rgb = Photo(500, 375, 4);
  std::string out, jpeg;
  // CPU time of this thread, best of several runs: the figure on a shared machine.
  auto cpu_us = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
  };
  auto best_of = [&](int runs, const std::function<void()>& f) {
    double best = 1e9;
    for (int r = 0; r < runs; ++r) {
      const double t0 = cpu_us();
      for (int i = 0; i < 5; ++i) f();
      best = std::min(best, (cpu_us() - t0) / 5);
    }
    return best;
  };
  const double resize_us =
      best_of(40, [&] { ASSERT_TRUE(ResizeRgb(500, 375, rgb, 341, 256, &out).ok()); });
  const double encode_us =
      best_of(40, [&] { ASSERT_TRUE(EncodeJpeg(341, 256, out, 90, &jpeg).ok()); });
  const double portable_us =
      best_of(10, [&] { ASSERT_TRUE(ResizeRgbPortable(500, 375, rgb, 341, 256, &out).ok()); });
  std::cout << "CPU time per image: ResizeRgb 500x375 -> 341x256 " << resize_us
            << " us (portable passes " << portable_us << " us); EncodeJpeg 341x256 q90 "
            << encode_us << " us (" << jpeg.size() << " bytes)\n";
  if (!testing::kSanitized) {
    EXPECT_LT(resize_us, 5000);
    EXPECT_LT(encode_us, 20000);
  }
}

TEST(ResizeJpegTest, RoundTripsCloselyAsBaseline420Jfif) {
  const uint32_t w = 341, h = 256;
  const std::string rgb = Photo(w, h, 5);
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(w, h, rgb, 90, &jpeg).ok());
  ASSERT_GT(jpeg.size(), 100u);
  EXPECT_EQ(jpeg.compare(0, 4, "\xff\xd8\xff\xe0"), 0);  // SOI, then the JFIF APP0
  EXPECT_EQ(jpeg.compare(6, 5, std::string("JFIF\0", 5)), 0);
  EXPECT_NE(jpeg.find("\xff\xc0"), std::string::npos);  // SOF0: baseline
  EXPECT_EQ(jpeg.find("\xff\xc2"), std::string::npos);  // not progressive
  EXPECT_EQ(SniffImage(jpeg), ImageKind::kJpeg);
  tjhandle t = tjInitDecompress();
  int jw = 0, jh = 0, subsamp = -1, colorspace = -1;
  ASSERT_EQ(tjDecompressHeader3(t, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(),
                                &jw, &jh, &subsamp, &colorspace),
            0);
  tjDestroy(t);
  EXPECT_EQ(subsamp, TJSAMP_420);
  EXPECT_EQ(colorspace, TJCS_YCbCr);

  DecodedImage img;
  ASSERT_TRUE(DecodeImage(jpeg, &img).ok());
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  ASSERT_EQ(img.rgb.size(), rgb.size());
  double err = 0;
  for (size_t i = 0; i < rgb.size(); ++i) {
    err += std::abs(static_cast<uint8_t>(rgb[i]) - static_cast<uint8_t>(img.rgb[i]));
  }
  const double mean = err / rgb.size();
  EXPECT_LT(mean, 3.0);
  // Lower quality: smaller and further.
  std::string low;
  ASSERT_TRUE(EncodeJpeg(w, h, rgb, 10, &low).ok());
  EXPECT_LT(low.size(), jpeg.size());
  std::cout << "EncodeJpeg q90: " << jpeg.size() << " bytes, mean abs error " << mean
            << "; q10: " << low.size() << " bytes\n";
  // Odd sizes and quality bounds encode too.
  for (auto [ow, oh] : {std::pair{1u, 1u}, {17u, 3u}, {3u, 1000u}}) {
    std::string o;
    for (int q : {1, 100}) {
      ASSERT_TRUE(EncodeJpeg(ow, oh, Photo(ow, oh, 6), q, &o).ok()) << ow << "x" << oh;
      ASSERT_TRUE(DecodeImage(o, &img).ok());
      EXPECT_EQ(img.width, ow);
      EXPECT_EQ(img.height, oh);
    }
  }
}

TEST(ResizeJpegTest, PilOpensTheFileAndSeesTheSamePixels) {
  TempDir dir;
  std::string jpeg;
  ASSERT_TRUE(EncodeJpeg(341, 256, Photo(341, 256, 7), 90, &jpeg).ok());
  testing::WriteFile(dir / "x.jpg", jpeg);
  if (access(kPython, X_OK) != 0) GTEST_SKIP() << "no " << kPython;
  CommandResult r =
      RunCommand({kPython, kReference, "--check-jpeg", dir / "x.jpg", "341", "256", dir / "x.rgb"});
  if (r.exit_code == 77) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
  // And PIL sees the pixels DecodeImage gives (what the views promise of every JPEG).
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(jpeg, &img).ok());
  EXPECT_TRUE(ReadFile(dir / "x.rgb") == img.rgb);
}

TEST(ResizeJpegTest, RejectsBadInputWithoutTouchingTheOutput) {
  const std::string rgb = Photo(10, 8, 1);
  std::string out = "kept";
  EXPECT_EQ(EncodeJpeg(10, 8, rgb, 0, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(10, 8, rgb, 101, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(0, 8, "", 90, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(10, 8, rgb.substr(3), 90, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(65501, 1, std::string(65501 * 3, 'a'), 90, &out).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(out, "kept");
}

}  // namespace
}  // namespace dsfs
