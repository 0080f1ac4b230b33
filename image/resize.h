// Resized images: the size torchvision.transforms.Resize(n) gives an image, PIL's bilinear
// resampling of 8-bit RGB pixels, and a JPEG encoder for the result (the resized views,
// MOUNT/.dsfs/bmp-N/ and MOUNT/.dsfs/jpeg-N/).
//
// "PIL's resampling" is the contract: for an RGB image decoded by DecodeImage (image/image.h),
// ResizedSize + ResizeRgb give the same array, byte for byte, as
// torchvision.transforms.Resize(n)(Image.open(f).convert("RGB")) with Pillow's bilinear filter
// (the torchvision default), as Debian 12 ships them (Pillow 9.4, torchvision 0.14). The
// arithmetic is Pillow's libImaging/Resample.c: coefficients computed in double and stored as
// fixed point, a horizontal pass into 8-bit rows, then a vertical pass (tests/unit/resize_test.cc
// checks it against the real Pillow).
//
// Thread safety: every function may be called from any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// Smallest and largest N the resized views accept.
inline constexpr uint32_t kMinResize = 16, kMaxResize = 4096;

// The size torchvision.transforms.Resize(n) gives a w x h image: the shorter side becomes n, the
// longer int(n * long / short) as Python computes it (exact for every n * long below 2^53, so
// for every size the views use); w <= h decides which side is the short one, as in torchvision.
// A side already equal to n gives back the image's own size. Images whose shorter side is at most
// n are served unchanged by the views: that is the caller's decision, not this function's (it
// returns the upscaled size torchvision would give). A zero w, h or n gives 0 x 0; a longer side
// beyond UINT32_MAX saturates.
void ResizedSize(uint32_t w, uint32_t h, uint32_t n, uint32_t* out_w, uint32_t* out_h);

// PIL's Image.resize((out_w, out_h), Image.BILINEAR) of an 8-bit RGB image, pixel-identical to
// Pillow's: a triangle filter whose support widens with the reduction (antialiased), a pass
// skipped where that dimension does not change (the same size copies the image). `rgb` is
// `height` rows of width * 3 bytes, top row first; *out receives out_h rows of out_w * 3 bytes.
// InvalidArgument (and *out untouched) for a zero size, a side above kMaxImageSide, more than
// kMaxImagePixels pixels in or out, or `rgb` of the wrong length.
[[nodiscard]] Status ResizeRgb(uint32_t width, uint32_t height, std::string_view rgb,
                               uint32_t out_w, uint32_t out_h, std::string* out);

// ResizeRgb with the portable passes whatever the CPU (ResizeRgb uses AVX2 where the CPU has it):
// the same bytes, slower; for the tests that compare the two.
[[nodiscard]] Status ResizeRgbPortable(uint32_t width, uint32_t height, std::string_view rgb,
                                       uint32_t out_w, uint32_t out_h, std::string* out);

// A baseline JFIF JPEG of an RGB image (4:2:0 chroma subsampling, libjpeg's quality scaling of
// the standard tables at `quality` 1..100, the accurate integer DCT), as libjpeg-turbo writes it:
// what PIL's save(f, "JPEG", quality=q) does, though not necessarily byte for byte. `rgb` as for
// ResizeRgb. InvalidArgument for a bad size, quality or `rgb` length (JPEG's own limit is 65500
// per side); IOError if the encoder fails. *out is replaced only on success.
[[nodiscard]] Status EncodeJpeg(uint32_t width, uint32_t height, std::string_view rgb, int quality,
                                std::string* out);

}  // namespace dsfs
