#include "image/image.h"

#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <csetjmp>
#include <cstring>
#include <vector>

namespace dsfs {
namespace {

Status CheckSize(uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return Status::Corruption("image has no pixels");
  if (width > kMaxImageSide || height > kMaxImageSide || width * height > kMaxImagePixels) {
    return Status::NotSupported("image too large to decode (" + std::to_string(width) + "x" +
                                std::to_string(height) + ")");
  }
  return Status::OK();
}

// One TurboJPEG decompressor per thread (a handle is not thread-safe).
class JpegHandle {
 public:
  JpegHandle() : h_(tjInitDecompress()) {}
  ~JpegHandle() {
    if (h_) tjDestroy(h_);
  }
  tjhandle get() const { return h_; }
  // After a failure the decompressor may be left mid-image: start over with a fresh one.
  void Reset() {
    if (h_) tjDestroy(h_);
    h_ = tjInitDecompress();
  }

 private:
  tjhandle h_;
};

Status DecodeJpeg(std::string_view data, DecodedImage* out) {
  thread_local JpegHandle handle;
  tjhandle h = handle.get();
  if (!h) return Status::IOError("cannot create a JPEG decoder");
  auto* src = reinterpret_cast<const unsigned char*>(data.data());
  int w = 0, hgt = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, src, data.size(), &w, &hgt, &subsamp, &colorspace) != 0) {
    Status s = Status::Corruption(std::string("JPEG header: ") + tjGetErrorStr2(h));
    handle.Reset();
    return s;
  }
  // PIL converts CMYK to RGB its own way (no colour management, Adobe inversion): not ours.
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    return Status::NotSupported("CMYK JPEG");
  }
  DSFS_RETURN_IF_ERROR(CheckSize(static_cast<uint32_t>(w), static_cast<uint32_t>(hgt)));
  out->width = static_cast<uint32_t>(w);
  out->height = static_cast<uint32_t>(hgt);
  out->rgb.resize(static_cast<size_t>(w) * hgt * 3);
  // Flags 0: the accurate integer IDCT and fancy upsampling, libjpeg's defaults, as PIL uses.
  // A warning (damaged data the decoder got past) fails too: PIL may see it differently.
  if (tjDecompress2(h, src, data.size(), reinterpret_cast<unsigned char*>(out->rgb.data()), w, 0,
                    hgt, TJPF_RGB, 0) != 0) {
    Status s = Status::Corruption(std::string("JPEG data: ") + tjGetErrorStr2(h));
    handle.Reset();
    return s;
  }
  return Status::OK();
}

struct PngSource {
  const unsigned char* p;
  size_t left;
  std::string error;
};

void PngRead(png_structp png, png_bytep dst, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->left) png_error(png, "PNG data ends early");
  std::memcpy(dst, src->p, n);
  src->p += n;
  src->left -= n;
}

void PngError(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  src->error = msg;
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}  // e.g. profile remarks: PIL ignores them too

// Everything touched after setjmp lives in this struct, outside the jumping function's locals.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<png_bytep> rows;
  std::vector<unsigned char> indices;  // of a palette image
  ~PngState() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

uint32_t Be32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// Bytes that zlib data `z` inflates to, counting no further than `cap` + 1 (a zlib error ends
// the count: PIL then drops the chunk, as libpng does).
uint64_t InflatedBytes(std::string_view z, uint64_t cap) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return 0;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z.data()));
  zs.avail_in = static_cast<uInt>(z.size());
  unsigned char scratch[16384];
  uint64_t total = 0;
  int rc = Z_OK;
  while (rc == Z_OK && total <= cap) {
    zs.next_out = scratch;
    zs.avail_out = sizeof(scratch);
    rc = inflate(&zs, Z_NO_FLUSH);
    total += sizeof(scratch) - zs.avail_out;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // the stream ends early
  }
  inflateEnd(&zs);
  return total;
}

// A text or ICC profile chunk, as PIL reads it: it inflates a compressed one up to 1 MiB and
// fails past that or on an unknown compression method, and fails once a file's text passes
// 64 MiB (`text` counts it). Anything unclear is refused: serving the original is never wrong.
Status CheckPngText(std::string_view type, std::string_view body, uint64_t* text) {
  constexpr uint64_t kMaxTextChunk = 1 << 20;    // PIL's MAX_TEXT_CHUNK
  constexpr uint64_t kMaxTextMemory = 64 << 20;  // PIL's MAX_TEXT_MEMORY
  const size_t nul = body.find('\0');
  const std::string_view rest = nul == std::string_view::npos ? "" : body.substr(nul + 1);
  uint64_t bytes = rest.size();
  std::string_view compressed;
  bool is_compressed = false;
  if (type == "zTXt" || type == "iCCP") {
    if (rest.empty() || rest[0] != 0) {
      return Status::NotSupported("PNG: unknown compression in " + std::string(type));
    }
    compressed = rest.substr(1);
    is_compressed = true;
  } else if (type == "iTXt" && rest.size() >= 2 && rest[0] != 0 && rest[1] == 0) {
    // Compressed iTXt: the text follows a language tag and a translated keyword.
    size_t lang = rest.find('\0', 2);
    size_t key = lang == std::string_view::npos ? lang : rest.find('\0', lang + 1);
    if (key != std::string_view::npos) {
      compressed = rest.substr(key + 1);
      is_compressed = true;
    }
  }
  if (is_compressed) {
    bytes = InflatedBytes(compressed, kMaxTextChunk);
    if (bytes > kMaxTextChunk) {
      return Status::NotSupported("PNG: " + std::string(type) + " chunk inflates past 1 MiB");
    }
  }
  if (type != "iCCP") *text += bytes;
  if (*text > kMaxTextMemory) return Status::NotSupported("PNG: more than 64 MiB of text");
  return Status::OK();
}

// PIL reads the chunks of a PNG itself (libpng only decodes the pixels for it), and refuses
// files libpng accepts: a bad checksum on any chunk before the image data, a text or ICC
// chunk that inflates to more than 1 MiB or with an unknown compression method, more than
// 64 MiB of text, transparency or palette chunks of the wrong length. Such files are refused
// here, before decoding, so the views serve them as they are.
Status CheckPngChunks(std::string_view data) {
  auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t pos = 8, palette_entries = 0;
  uint64_t text = 0;
  int color = -1;
  for (bool first = true;; first = false) {
    if (data.size() - pos < 12) return Status::Corruption("PNG: chunk cut short");
    const uint32_t len = Be32(p + pos);
    if (len > data.size() - pos - 12) return Status::Corruption("PNG: chunk cut short");
    const std::string_view type(data.data() + pos + 4, 4);
    const std::string_view body(data.data() + pos + 8, len);
    if (crc32(0, p + pos + 4, len + 4) != Be32(p + pos + 8 + len)) {
      return Status::Corruption("PNG: bad checksum in chunk " + std::string(type));
    }
    pos += 12 + size_t{len};
    if (first != (type == "IHDR")) return Status::Corruption("PNG: IHDR is not the first chunk");
    if (type == "IHDR") {
      if (len != 13) return Status::Corruption("PNG: IHDR of the wrong size");
      color = static_cast<unsigned char>(body[9]);
    } else if (type == "PLTE") {
      if (len == 0 || len % 3 != 0 || len > 768) return Status::Corruption("PNG: bad PLTE size");
      palette_entries = len / 3;
    } else if (type == "tRNS") {
      bool ok = color == PNG_COLOR_TYPE_GRAY      ? len == 2
                : color == PNG_COLOR_TYPE_RGB     ? len == 6
                : color == PNG_COLOR_TYPE_PALETTE ? len <= palette_entries
                                                  : false;
      if (!ok) return Status::Corruption("PNG: bad tRNS chunk");
    } else if (type == "tEXt" || type == "zTXt" || type == "iTXt" || type == "iCCP") {
      DSFS_RETURN_IF_ERROR(CheckPngText(type, body, &text));
    } else if (type == "IEND") {
      return Status::OK();
    }
  }
}

Status DecodePng(std::string_view data, DecodedImage* out) {
  DSFS_RETURN_IF_ERROR(CheckPngChunks(data));
  PngSource src{reinterpret_cast<const unsigned char*>(data.data()), data.size(), {}};
  PngState st;
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, PngError, PngWarning);
  if (!st.png) return Status::IOError("cannot create a PNG decoder");
  st.info = png_create_info_struct(st.png);
  if (!st.info) return Status::IOError("cannot create a PNG decoder");
  png_set_read_fn(st.png, &src, PngRead);
  if (setjmp(png_jmpbuf(st.png))) return Status::Corruption("PNG: " + src.error);
  png_read_info(st.png, st.info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(st.png, st.info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  if (depth == 16) return Status::NotSupported("16-bit PNG");
  DSFS_RETURN_IF_ERROR(CheckSize(w, h));
  // What PIL's convert("RGB") does: palette entries looked up, gray replicated, alpha and
  // tRNS transparency dropped, low bit depths scaled to 0..255, no gamma applied.
  const bool palette = color == PNG_COLOR_TYPE_PALETTE;
  if (palette) png_set_packing(st.png);  // one index per byte; looked up below
  if ((color & PNG_COLOR_MASK_COLOR) == 0) {
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(st.png);
    png_set_gray_to_rgb(st.png);
  }
  if ((color & PNG_COLOR_MASK_ALPHA) ||
      (!palette && png_get_valid(st.png, st.info, PNG_INFO_tRNS))) {
    png_set_strip_alpha(st.png);
  }
  png_set_interlace_handling(st.png);
  png_read_update_info(st.png, st.info);
  const size_t row_bytes = static_cast<size_t>(w) * (palette ? 1 : 3);
  if (png_get_rowbytes(st.png, st.info) != row_bytes) {
    png_error(st.png, "unexpected row size after conversion");
  }
  out->width = w;
  out->height = h;
  out->rgb.resize(static_cast<size_t>(w) * h * 3);
  auto* dst = reinterpret_cast<png_bytep>(out->rgb.data());
  if (palette) {
    st.indices.resize(static_cast<size_t>(w) * h);
    dst = st.indices.data();
  }
  st.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) st.rows[y] = dst + static_cast<size_t>(y) * row_bytes;
  png_read_image(st.png, st.rows.data());
  png_read_end(st.png, nullptr);
  if (palette) {
    png_colorp entries = nullptr;
    int count = 0;
    png_get_PLTE(st.png, st.info, &entries, &count);
    // An index past the palette: libpng gives black, PIL a gray level, newer PILs may differ.
    for (size_t i = 0; i < st.indices.size(); ++i) {
      const unsigned idx = st.indices[i];
      if (static_cast<int>(idx) >= count) {
        return Status::NotSupported("PNG: palette index past the palette");
      }
      out->rgb[3 * i] = static_cast<char>(entries[idx].red);
      out->rgb[3 * i + 1] = static_cast<char>(entries[idx].green);
      out->rgb[3 * i + 2] = static_cast<char>(entries[idx].blue);
    }
  }
  return Status::OK();
}

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

constexpr uint64_t kBmpHeaderBytes = 54;
uint64_t BmpStride(uint32_t width) { return (uint64_t{width} * 3 + 3) & ~uint64_t{3}; }

}  // namespace

ImageKind SniffImage(std::string_view d) {
  if (d.size() >= 3 && d.compare(0, 3, "\xff\xd8\xff") == 0) return ImageKind::kJpeg;
  if (d.size() >= 8 && d.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0) return ImageKind::kPng;
  return ImageKind::kNone;
}

Status DecodeImage(std::string_view data, DecodedImage* out) {
  switch (SniffImage(data)) {
    case ImageKind::kJpeg:
      return DecodeJpeg(data, out);
    case ImageKind::kPng:
      return DecodePng(data, out);
    default:
      return Status::InvalidArgument("not a JPEG or PNG image");
  }
}

uint64_t BmpBytes(uint32_t width, uint32_t height) {
  return kBmpHeaderBytes + BmpStride(width) * height;
}

void RenderBmp(uint32_t width, uint32_t height, std::string_view rgb, std::string* out) {
  const uint64_t stride = BmpStride(width);
  out->clear();
  out->reserve(BmpBytes(width, height));
  out->append("BM");
  PutLe(out, BmpBytes(width, height), 4);
  PutLe(out, 0, 4);
  PutLe(out, kBmpHeaderBytes, 4);  // pixel data offset
  PutLe(out, 40, 4);               // BITMAPINFOHEADER
  PutLe(out, width, 4);
  // A negative height stores rows top-down: the decoded rows go out in their own order.
  PutLe(out, static_cast<uint32_t>(-static_cast<int32_t>(height)), 4);
  PutLe(out, 1, 2);   // planes
  PutLe(out, 24, 2);  // bits per pixel
  PutLe(out, 0, 4);   // BI_RGB
  PutLe(out, stride * height, 4);
  PutLe(out, 2835, 4);  // 72 dpi
  PutLe(out, 2835, 4);
  PutLe(out, 0, 4);
  PutLe(out, 0, 4);
  size_t base = out->size();
  out->resize(base + stride * height, '\0');
  char* dst = out->data() + base;
  const char* src = rgb.data();
  for (uint32_t y = 0; y < height; ++y, dst += stride) {
    for (uint32_t x = 0; x < width; ++x, src += 3) {
      dst[3 * x] = src[2];  // BMP pixels are BGR
      dst[3 * x + 1] = src[1];
      dst[3 * x + 2] = src[0];
    }
  }
}

std::string NpyHeader(std::string_view dtype, std::initializer_list<uint64_t> shape) {
  std::string dims;
  for (uint64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  if (shape.size() == 1) dims += ",";  // "(5,)": a one-element tuple
  std::string dict =
      "{'descr': '" + std::string(dtype) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n', a multiple of 64.
  size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.resize(total - 10 - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  PutLe(&out, dict.size(), 2);
  return out + dict;
}

}  // namespace dsfs
