// Images: recognising JPEG and PNG files by their content, decoding them to the RGB pixels PIL
// gives for them, and the uncompressed formats the views serve (BMP, NumPy .npy).
//
// "The pixels PIL gives" is the contract of the views: for every image this decoder accepts,
// Image.open(original).convert("RGB") and the decoded pixels are the same array. Anything the
// decoder cannot promise that for (CMYK JPEG, 16-bit PNG, damaged data) is refused, and the
// views then serve the original bytes.
//
// Thread safety: every function may be called from any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// What an inode holds, as recorded at pack time (InodeRecord::image).
enum class ImageKind : uint8_t {
  kNone = 0,         // not an image (or a format the views do not decode)
  kJpeg = 1,         // a JPEG the views decode
  kPng = 2,          // a PNG the views decode
  kUnsupported = 3,  // looks like a JPEG or PNG but cannot be reproduced exactly: served as is
};

// Largest image the views decode, per side and in pixels (larger ones are served as is).
inline constexpr uint32_t kMaxImageSide = 65535;
inline constexpr uint64_t kMaxImagePixels = 64ull << 20;
// JPEG and PNG files up to this size are decoded (at pack time, and by the views); larger ones
// are served as is.
inline constexpr uint64_t kMaxImageFileBytes = 32 << 20;

// JPEG or PNG by signature, else kNone.
ImageKind SniffImage(std::string_view data);

struct DecodedImage {
  uint32_t width = 0, height = 0;
  std::string rgb;  // height rows of width * 3 bytes, top row first
};

// Decodes a JPEG or PNG to 8-bit RGB. NotSupported for images that cannot be reproduced exactly
// (CMYK/YCCK JPEG, 16-bit PNG, too large), Corruption for damaged data (including data a
// decoder only warns about), InvalidArgument if `data` is neither format.
Status DecodeImage(std::string_view data, DecodedImage* out);

// Uncompressed 24-bit BMP of a width x height RGB image: its size, and the file itself.
uint64_t BmpBytes(uint32_t width, uint32_t height);
void RenderBmp(uint32_t width, uint32_t height, std::string_view rgb, std::string* out);

// A NumPy .npy (format 1.0) header for a C-order array of `dtype` (e.g. "|u1", "<i8") and
// `shape`, padded so the data starts at a multiple of 64 bytes.
std::string NpyHeader(std::string_view dtype, std::initializer_list<uint64_t> shape);

}  // namespace dsfs
