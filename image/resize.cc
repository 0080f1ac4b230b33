#include "image/resize.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "image/image.h"

// On x86-64 the passes also have AVX2 versions, chosen at run time (the CPU's support, once).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSFS_RESIZE_AVX2 1
#endif

// Exactness with Pillow rests on doing its floating-point steps in the same order, each rounded
// to double: this file is compiled with -ffp-contract=off (CMakeLists.txt), so that no
// multiply-add is fused where Pillow's build (no FMA) rounds twice.

namespace dsfs {
namespace {

// Pillow's fixed point for 8-bit images: 22 fraction bits leave 8 bits for the value and 2 for
// filters whose sums overshoot (none for the triangle filter, whose weights are all >= 0).
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kRoundingBias = 1 << (kPrecisionBits - 1);

// The taps of one pass (one dimension): output i reads count[i] inputs from first[i] on, with
// weights k[i * ksize ...] in fixed point.
struct Taps {
  int ksize = 0;
  std::vector<int32_t> first, count;
  std::vector<int32_t> k;
};

// Pillow's BILINEAR filter: a triangle of support 1.
double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The taps Pillow's precompute_coeffs + normalize_coeffs_8bpc give resampling in_size pixels to
// out_size over the whole image (the box (0, in_size), in float as Pillow holds it).
void ComputeTaps(uint32_t in_size, uint32_t out_size, Taps* t) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  // Reducing widens the filter by the reduction (antialiasing); enlarging keeps support 1.
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  const double ss = 1.0 / filterscale;
  t->ksize = ksize;
  t->first.resize(out_size);
  t->count.resize(out_size);
  t->k.assign(static_cast<size_t>(out_size) * ksize, 0);
  std::vector<double> w(ksize);
  const int in = static_cast<int>(in_size);
  for (uint32_t i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // The window [center - support, center + support), its ends rounded half up (by truncation
    // after adding 0.5, as Pillow does: the same for the clamped negative start).
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in) hi = in;
    const int n = hi - lo;
    double sum = 0.0;
    for (int x = 0; x < n; ++x) {
      // Sample at the centre of input pixel lo + x, in the order Pillow evaluates it.
      w[x] = Triangle((x + lo - center + 0.5) * ss);
      sum += w[x];
    }
    int32_t* k = &t->k[static_cast<size_t>(i) * ksize];
    for (int x = 0; x < n; ++x) {
      const double v = sum != 0.0 ? w[x] / sum : w[x];
      const double f = v * (1 << kPrecisionBits);
      // Rounded half away from zero, by truncation.
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + f : 0.5 + f);
    }
    t->first[i] = lo;
    t->count[i] = n;
  }
}

inline uint8_t Clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// A horizontal pass: rows [row0, row0 + rows) of `src` (in_w pixels wide),
// resampled to t.count.size() pixels, into `dst` (rows of out_w * 3 bytes).
using HorizontalPass = void (*)(const uint8_t* src, uint32_t in_w, uint32_t row0, uint32_t rows,
                                const Taps& t, uint8_t* dst);

void HorizontalScalar(const uint8_t* src, uint32_t in_w, uint32_t row0, uint32_t rows,
                      const Taps& t, uint8_t* dst) {
  const size_t in_stride = static_cast<size_t>(in_w) * 3;
  const uint32_t out_w = static_cast<uint32_t>(t.count.size());
  for (uint32_t y = 0; y < rows; ++y) {
    const uint8_t* row = src + (row0 + y) * in_stride;
    uint8_t* out = dst + static_cast<size_t>(y) * out_w * 3;
    for (uint32_t i = 0; i < out_w; ++i) {
      const uint8_t* p = row + static_cast<size_t>(t.first[i]) * 3;
      const int32_t* k = &t.k[static_cast<size_t>(i) * t.ksize];
      const int n = t.count[i];
      int32_t s0 = kRoundingBias, s1 = kRoundingBias, s2 = kRoundingBias;
      for (int x = 0; x < n; ++x, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      out[i * 3 + 0] = Clip8(s0);
      out[i * 3 + 1] = Clip8(s1);
      out[i * 3 + 2] = Clip8(s2);
    }
  }
}

#ifdef DSFS_RESIZE_AVX2
// Eight rows of 16 bytes (rows[r] + j) transposed into 16 groups of 8 bytes at `out`: byte b of
// row r goes to out[b * 8 + r].
__attribute__((target("avx2"))) inline void Transpose8x16(const uint8_t* const rows[8], size_t j,
                                                          uint8_t* out) {
  __m128i a[8], b[8], c[8];
  for (int r = 0; r < 8; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + j));
  for (int r = 0; r < 8; r += 2) {
    b[r] = _mm_unpacklo_epi8(a[r], a[r + 1]);      // bytes 0..7 of rows r, r + 1
    b[r + 1] = _mm_unpackhi_epi8(a[r], a[r + 1]);  // bytes 8..15
  }
  for (int h = 0; h < 8; h += 4) {                      // rows h..h + 3
    c[h + 0] = _mm_unpacklo_epi16(b[h], b[h + 2]);      // bytes 0..3
    c[h + 1] = _mm_unpackhi_epi16(b[h], b[h + 2]);      // 4..7
    c[h + 2] = _mm_unpacklo_epi16(b[h + 1], b[h + 3]);  // 8..11
    c[h + 3] = _mm_unpackhi_epi16(b[h + 1], b[h + 3]);  // 12..15
  }
  for (int q = 0; q < 4; ++q) {  // bytes 4q..4q + 3 of all eight rows
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + q * 32), _mm_unpacklo_epi32(c[q], c[q + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + q * 32 + 16),
                     _mm_unpackhi_epi32(c[q], c[q + 4]));
  }
}

// The inverse of Transpose8x16: 16 groups of 8 bytes at `in` (byte b of row r at in[b * 8 + r])
// put back as 16 bytes of each of the first `block` rows (rows[r] + j).
__attribute__((target("avx2"))) inline void Untranspose16x8(const uint8_t* in,
                                                            uint8_t* const rows[8], uint32_t block,
                                                            size_t j) {
  __m128i e[8], f[8], h[8];
  for (int k = 0; k < 8; ++k) {  // bytes 2k, 2k + 1 of the eight rows, row by row
    e[k] = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + k * 16)),
                             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + k * 16 + 8)));
  }
  for (int k = 0; k < 8; k += 2) {  // bytes 2k..2k + 3: rows 0..3, then rows 4..7
    f[k] = _mm_unpacklo_epi16(e[k], e[k + 1]);
    f[k + 1] = _mm_unpackhi_epi16(e[k], e[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {                      // bytes 4k..4k + 7 (k = 0) or 8..15 (k = 4)
    h[k + 0] = _mm_unpacklo_epi32(f[k], f[k + 2]);      // rows 0, 1
    h[k + 1] = _mm_unpackhi_epi32(f[k], f[k + 2]);      // rows 2, 3
    h[k + 2] = _mm_unpacklo_epi32(f[k + 1], f[k + 3]);  // rows 4, 5
    h[k + 3] = _mm_unpackhi_epi32(f[k + 1], f[k + 3]);  // rows 6, 7
  }
  for (uint32_t r = 0; r < block; ++r) {
    const __m128i lo = h[r / 2], hi = h[4 + r / 2];
    const __m128i row = (r % 2 == 0) ? _mm_unpacklo_epi64(lo, hi) : _mm_unpackhi_epi64(lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rows[r] + j), row);
  }
}

// The same sums with AVX2, eight rows at a time: the rows transposed so that each input byte
// of the eight rows is one group of 8 (one 32-bit lane per row), then each output pixel's
// channels summed like the vertical pass sums rows, and the eight results put back in their
// rows. Exact integer products and sums, as the scalar pass.
__attribute__((target("avx2"))) void HorizontalAvx2(const uint8_t* src, uint32_t in_w,
                                                    uint32_t row0, uint32_t rows, const Taps& t,
                                                    uint8_t* dst) {
  const size_t in_stride = static_cast<size_t>(in_w) * 3;
  const uint32_t out_w = static_cast<uint32_t>(t.count.size());
  const size_t out_stride = static_cast<size_t>(out_w) * 3;
  std::vector<uint8_t> tr(in_stride * 8), tr_out(out_stride * 8 + 8);
  const __m256i bias = _mm256_set1_epi32(kRoundingBias);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint32_t y0 = 0; y0 < rows; y0 += 8) {
    const uint32_t block = std::min<uint32_t>(8, rows - y0);
    const uint8_t* in[8];
    // A last block of fewer rows repeats its first row (computed, not written).
    for (uint32_t r = 0; r < 8; ++r) in[r] = src + (row0 + y0 + (r < block ? r : 0)) * in_stride;
    size_t j = 0;
    for (; j + 16 <= in_stride; j += 16) Transpose8x16(in, j, &tr[j * 8]);
    for (; j < in_stride; ++j) {
      for (int r = 0; r < 8; ++r) tr[j * 8 + r] = in[r][j];
    }
    for (uint32_t i = 0; i < out_w; ++i) {
      const uint8_t* col = &tr[static_cast<size_t>(t.first[i]) * 24];
      const int32_t* k = &t.k[static_cast<size_t>(i) * t.ksize];
      const int n = t.count[i];
      __m256i r = bias, g = bias, b = bias;
      for (int x = 0; x < n; ++x, col += 24) {
        const __m256i kx = _mm256_set1_epi32(k[x]);
        r = _mm256_add_epi32(
            r,
            _mm256_mullo_epi32(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(col))), kx));
        g = _mm256_add_epi32(
            g, _mm256_mullo_epi32(
                   _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(col + 8))),
                   kx));
        b = _mm256_add_epi32(b, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                       reinterpret_cast<const __m128i*>(col + 16))),
                                                   kx));
      }
      // Per 128-bit half (rows 0..3, then 4..7): R R R R G G G G B B B B 0 0 0 0, saturated to
      // 0..255 as Clip8; then R0..7 G0..7 B0..7: the pixel's three bytes of the eight rows, in
      // the transposed layout (8 bytes past them are overwritten by the next pixel's).
      const __m256i rg = _mm256_packs_epi32(_mm256_srai_epi32(r, kPrecisionBits),
                                            _mm256_srai_epi32(g, kPrecisionBits));
      const __m256i b0 =
          _mm256_packs_epi32(_mm256_srai_epi32(b, kPrecisionBits), _mm256_setzero_si256());
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(rg, b0), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&tr_out[static_cast<size_t>(i) * 24]), bytes);
    }
    uint8_t* out[8];
    for (uint32_t r = 0; r < 8; ++r) {
      out[r] = dst + static_cast<size_t>(y0 + (r < block ? r : 0)) * out_stride;
    }
    for (j = 0; j + 16 <= out_stride; j += 16) Untranspose16x8(&tr_out[j * 8], out, block, j);
    for (; j < out_stride; ++j) {
      for (uint32_t r = 0; r < block; ++r) out[r][j] = tr_out[j * 8 + r];
    }
  }
}
#endif

// A vertical pass: `src` (rows of `bytes_per_row` bytes, starting at input row `row0`)
// resampled to t.count.size() rows into `dst`.
using VerticalPass = void (*)(const uint8_t* src, size_t bytes_per_row, uint32_t row0,
                              const Taps& t, uint8_t* dst);

// Byte b of an output row sums byte b of its input rows: Pillow's per-pixel loop, a row of
// accumulators at a time (the same integer sums, read row by row).
void VerticalScalar(const uint8_t* src, size_t bytes_per_row, uint32_t row0, const Taps& t,
                    uint8_t* dst) {
  std::vector<int32_t> acc(bytes_per_row);
  const uint32_t out_h = static_cast<uint32_t>(t.count.size());
  for (uint32_t i = 0; i < out_h; ++i) {
    std::fill(acc.begin(), acc.end(), kRoundingBias);
    const int32_t* k = &t.k[static_cast<size_t>(i) * t.ksize];
    const uint8_t* rows = src + (t.first[i] - row0) * bytes_per_row;
    for (int y = 0; y < t.count[i]; ++y) {
      const uint8_t* row = rows + y * bytes_per_row;
      for (size_t b = 0; b < bytes_per_row; ++b) acc[b] += row[b] * k[y];
    }
    uint8_t* out = dst + static_cast<size_t>(i) * bytes_per_row;
    for (size_t b = 0; b < bytes_per_row; ++b) out[b] = Clip8(acc[b]);
  }
}

#ifdef DSFS_RESIZE_AVX2
// The same sums with AVX2, 16 bytes of a row at a time in two registers of eight 32-bit lanes.
__attribute__((target("avx2"))) void VerticalAvx2(const uint8_t* src, size_t bytes_per_row,
                                                  uint32_t row0, const Taps& t, uint8_t* dst) {
  const uint32_t out_h = static_cast<uint32_t>(t.count.size());
  const __m256i bias = _mm256_set1_epi32(kRoundingBias);
  for (uint32_t i = 0; i < out_h; ++i) {
    const int32_t* k = &t.k[static_cast<size_t>(i) * t.ksize];
    const int n = t.count[i];
    const uint8_t* rows = src + (t.first[i] - row0) * bytes_per_row;
    uint8_t* out = dst + static_cast<size_t>(i) * bytes_per_row;
    size_t b = 0;
    for (; b + 16 <= bytes_per_row; b += 16) {
      __m256i lo = bias, hi = bias;
      for (int y = 0; y < n; ++y) {
        const __m128i px =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + y * bytes_per_row + b));
        const __m256i ky = _mm256_set1_epi32(k[y]);
        lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), ky));
        hi = _mm256_add_epi32(hi,
                              _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(px, 8)), ky));
      }
      // Shifted, then packed with saturation (clamped to 0..255, as Clip8) back in byte order.
      __m256i w = _mm256_packs_epi32(_mm256_srai_epi32(lo, kPrecisionBits),
                                     _mm256_srai_epi32(hi, kPrecisionBits));
      w = _mm256_permute4x64_epi64(w, 0xD8);
      const __m128i bytes =
          _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b), bytes);
    }
    for (; b < bytes_per_row; ++b) {
      int32_t s = kRoundingBias;
      for (int y = 0; y < n; ++y) s += rows[y * bytes_per_row + b] * k[y];
      out[b] = Clip8(s);
    }
  }
}
#endif

// The AVX2 passes where the CPU has AVX2, else the scalar ones; decided once.
struct Passes {
  HorizontalPass horizontal = HorizontalScalar;
  VerticalPass vertical = VerticalScalar;
};

const Passes& PickPasses() {
  static const Passes passes = [] {
    Passes p;
#ifdef DSFS_RESIZE_AVX2
    if (__builtin_cpu_supports("avx2")) p = {HorizontalAvx2, VerticalAvx2};
#endif
    return p;
  }();
  return passes;
}

Status CheckImage(const char* what, uint32_t w, uint32_t h) {
  if (w == 0 || h == 0 || w > kMaxImageSide || h > kMaxImageSide ||
      static_cast<uint64_t>(w) * h > kMaxImagePixels) {
    return Status::InvalidArgument(std::string(what) + " size " + std::to_string(w) + "x" +
                                   std::to_string(h) + " out of range");
  }
  return Status::OK();
}

Status CheckPixels(uint32_t w, uint32_t h, std::string_view rgb) {
  if (rgb.size() != static_cast<uint64_t>(w) * h * 3) {
    return Status::InvalidArgument("RGB data of " + std::to_string(rgb.size()) + " bytes for a " +
                                   std::to_string(w) + "x" + std::to_string(h) + " image");
  }
  return Status::OK();
}

// One TurboJPEG compressor per thread (a handle is not thread-safe).
class JpegEncoder {
 public:
  JpegEncoder() : h_(tjInitCompress()) {}
  ~JpegEncoder() {
    if (h_) tjDestroy(h_);
  }
  JpegEncoder(const JpegEncoder&) = delete;
  JpegEncoder& operator=(const JpegEncoder&) = delete;
  tjhandle get() const { return h_; }
  // After a failure the compressor may be left mid-image: start over with a fresh one.
  void Reset() {
    if (h_) tjDestroy(h_);
    h_ = tjInitCompress();
  }

 private:
  tjhandle h_;
};

// libjpeg's JPEG_MAX_DIMENSION.
constexpr uint32_t kMaxJpegSide = 65500;

}  // namespace

void ResizedSize(uint32_t w, uint32_t h, uint32_t n, uint32_t* out_w, uint32_t* out_h) {
  if (w == 0 || h == 0 || n == 0) {
    *out_w = *out_h = 0;
    return;
  }
  const bool portrait = w <= h;  // torchvision: the width is the short side when w <= h
  const uint32_t short_side = portrait ? w : h;
  const uint32_t long_side = portrait ? h : w;
  // Python's int(n * long / short): the product is an exact int, the true division rounds the
  // exact quotient once to double, int() truncates. In double the product is exact below 2^53,
  // so one IEEE division rounds the same quotient the same way.
  const double q = static_cast<double>(static_cast<uint64_t>(n) * long_side) / short_side;
  const uint32_t new_long =
      q >= 4294967295.0 ? std::numeric_limits<uint32_t>::max() : static_cast<uint32_t>(q);
  *out_w = portrait ? n : new_long;
  *out_h = portrait ? new_long : n;
}

namespace {

Status Resize(const Passes& passes, uint32_t width, uint32_t height, std::string_view rgb,
              uint32_t out_w, uint32_t out_h, std::string* out) {
  DSFS_RETURN_IF_ERROR(CheckImage("input", width, height));
  DSFS_RETURN_IF_ERROR(CheckImage("output", out_w, out_h));
  DSFS_RETURN_IF_ERROR(CheckPixels(width, height, rgb));
  const bool horizontal = out_w != width;
  const bool vertical = out_h != height;
  if (!horizontal && !vertical) {  // Pillow: the same size is a copy
    out->assign(rgb);
    return Status::OK();
  }
  const auto* src = reinterpret_cast<const uint8_t*>(rgb.data());
  if (!horizontal) {
    Taps tv;
    ComputeTaps(height, out_h, &tv);
    std::string result(static_cast<size_t>(out_w) * out_h * 3, '\0');
    passes.vertical(src, static_cast<size_t>(width) * 3, 0, tv,
                    reinterpret_cast<uint8_t*>(result.data()));
    *out = std::move(result);
    return Status::OK();
  }
  Taps th;
  ComputeTaps(width, out_w, &th);
  std::string result(static_cast<size_t>(out_w) * out_h * 3, '\0');
  auto* dst = reinterpret_cast<uint8_t*>(result.data());
  if (!vertical) {
    passes.horizontal(src, width, 0, height, th, dst);
  } else {
    Taps tv;
    ComputeTaps(height, out_h, &tv);
    // Only the input rows the vertical pass reads are resampled horizontally (as Pillow does:
    // the same pixels, less work when a box or rounding leaves rows unused).
    const uint32_t row0 = static_cast<uint32_t>(tv.first.front());
    const uint32_t row_end = static_cast<uint32_t>(tv.first.back() + tv.count.back());
    std::vector<uint8_t> temp(static_cast<size_t>(out_w) * 3 * (row_end - row0));
    passes.horizontal(src, width, row0, row_end - row0, th, temp.data());
    passes.vertical(temp.data(), static_cast<size_t>(out_w) * 3, row0, tv, dst);
  }
  *out = std::move(result);
  return Status::OK();
}

}  // namespace

Status ResizeRgb(uint32_t width, uint32_t height, std::string_view rgb, uint32_t out_w,
                 uint32_t out_h, std::string* out) {
  return Resize(PickPasses(), width, height, rgb, out_w, out_h, out);
}

Status ResizeRgbPortable(uint32_t width, uint32_t height, std::string_view rgb, uint32_t out_w,
                         uint32_t out_h, std::string* out) {
  return Resize(Passes{}, width, height, rgb, out_w, out_h, out);
}

Status EncodeJpeg(uint32_t width, uint32_t height, std::string_view rgb, int quality,
                  std::string* out) {
  DSFS_RETURN_IF_ERROR(CheckImage("JPEG", width, height));
  if (width > kMaxJpegSide || height > kMaxJpegSide) {
    return Status::InvalidArgument("JPEG sides are at most 65500 pixels");
  }
  DSFS_RETURN_IF_ERROR(CheckPixels(width, height, rgb));
  if (quality < 1 || quality > 100) {
    return Status::InvalidArgument("JPEG quality " + std::to_string(quality) + " not in 1..100");
  }
  thread_local JpegEncoder encoder;
  tjhandle h = encoder.get();
  if (!h) return Status::IOError("cannot create a JPEG encoder");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  // The accurate integer DCT, as PIL's save uses it (libjpeg's default): TurboJPEG takes the
  // fast one below quality 96 unless told, and its pixels then differ from PIL's file by a few
  // levels. Baseline Huffman tables; TurboJPEG allocates the output buffer.
  if (tjCompress2(h, reinterpret_cast<const unsigned char*>(rgb.data()), static_cast<int>(width), 0,
                  static_cast<int>(height), TJPF_RGB, &buf, &size, TJSAMP_420, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    Status s = Status::IOError(std::string("JPEG encode: ") + tjGetErrorStr2(h));
    tjFree(buf);
    encoder.Reset();
    return s;
  }
  out->assign(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  return Status::OK();
}

}  // namespace dsfs
