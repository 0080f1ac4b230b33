// Views: other presentations of the same store, mounted side by side with the original tree.
//
//   bmp     every image under its own name, as an uncompressed 24-bit BMP of its pixels (what
//           PIL's convert("RGB") gives for the original), so an unmodified ImageFolder script
//           reads pixels that need no decoding
//   npy     every image as NAME.npy (NAME is the full original name, "cat.jpg.npy"): a NumPy
//           array height x width x 3, uint8, C order
//   tensor  the original tree plus, in every directory, images.npy (N x H x W x 3 uint8, every
//           image below it in ImageFolder's order), labels.npy (int64, ImageFolder's class
//           indices), classes.txt and files.txt, when all those images share one size
//   bmp-N   (N from 16 to 4096) the bmp view of every image resized as
//           torchvision.transforms.Resize(N) resizes it (shorter side N, bilinear with
//           antialiasing, PIL's pixels exactly: image/resize.h); an image whose shorter side is
//           already N or less is shown as in the bmp view
//   jpeg-N  the same resized pixels re-encoded as a JPEG of quality kResizedJpegQuality (4:2:0),
//           for trees too large for the page cache as pixels; images at or below N as in bmp
//
// A script that applies Resize(N) itself gets the same tensor from a resized view as from the
// original: Resize(N) leaves an image whose shorter side is N as it is, and upscales a smaller
// one from the same pixels the bmp view shows.
//
// Non-image files (and images the views cannot reproduce exactly) appear unchanged in every
// view. This file holds what does not depend on FUSE: the view names and the tensor index.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace dsfs {

// A view: its kind and, for the resized views, the shorter side N. A value type.
struct View {
  enum Kind : uint8_t { kOriginal = 0, kBmp = 1, kNpy = 2, kTensor = 3, kJpeg = 4 };
  Kind kind = kOriginal;
  uint32_t side = 0;  // bmp-N, jpeg-N: N (kMinResize..kMaxResize); 0: images at their size

  constexpr View() = default;
  constexpr View(Kind k, uint32_t n = 0) : kind(k), side(n) {}  // NOLINT: View::kBmp is a view
  bool resized() const { return side != 0; }
  friend bool operator==(View a, View b) { return a.kind == b.kind && a.side == b.side; }
  friend bool operator!=(View a, View b) { return !(a == b); }
};
// The views of fixed names; MOUNT/.dsfs lists each but the one mounted as the root (the resized
// ones are there too, found by name: MOUNT/.dsfs/bmp-256).
inline constexpr View kViews[] = {View::kOriginal, View::kBmp, View::kNpy, View::kTensor};
// Quality of the jpeg-N views' files.
inline constexpr int kResizedJpegQuality = 90;

std::string ViewName(View v);  // "original", "bmp", "npy", "tensor", "bmp-256", "jpeg-224"
// InvalidArgument naming the choices for an unknown name. Resized views are named by N in
// decimal without leading zeros, so each has one name.
Status ParseView(std::string_view name, View* v);

// True if view `v` shows regular file `rec` rendered (bmp, npy: a decodable image whose
// rendered bytes, the BMP or the pixels, are at most `max_render_bytes`); otherwise the view
// shows the original bytes. The mount sets the limit to what its RAM cache holds per entry, so
// that every image is decoded once and then served from the cache, and a file's size (decided
// here, from the recorded dimensions) never depends on what is cached.
//
// A resized view renders an image whose decoded pixels are at most `max_render_bytes` (they are
// held while it is resized) and whose rendered file is too.
bool ViewRenders(View v, const InodeRecord& rec, uint64_t max_render_bytes);
// True if view `v` renders `rec` as a JPEG it encodes (jpeg-N, an image whose shorter side is
// above N): the file's size is known only once it is encoded (the Filesystem does that).
bool ViewEncodes(View v, const InodeRecord& rec, uint64_t max_render_bytes);
// The size `rec`'s image has in resized view `v` (its own if its shorter side is at most N).
void ViewImageSize(View v, const InodeRecord& rec, uint32_t* width, uint32_t* height);
// Size of the file a view shows for regular file `rec` (rendered, or the original), computed
// from the recorded dimensions. REQUIRES: !ViewEncodes(v, rec, max_render_bytes).
uint64_t ViewFileBytes(View v, const InodeRecord& rec, uint64_t max_render_bytes);
// The .npy header of an image's array (its size is part of ViewFileBytes).
std::string ImageNpyHeader(const InodeRecord& rec);

// True for names ImageFolder accepts (torchvision's IMG_EXTENSIONS, any case).
bool HasImageExtension(std::string_view name);

// Who may read an aggregate view file (one made of many stored files): never more than could
// read its members one by one. The read bits, per class (owner, group, others), that survive
// AND-ing each member file's read bits and, for every directory from the root down to it, its
// read bits (listing: an aggregate names or counts its members) and its search bits (shown as
// read bits). The store keeps no owner per file (every entry shows the mount's uid and gid), so
// these bits alone decide. Every aggregate view takes its mode from one of these.
class ReadAccess {
 public:
  void AddDir(uint32_t mode) { bits_ &= (mode & 0444) & ((mode & 0111) << 2); }
  void AddFile(uint32_t mode) { bits_ &= mode & 0444; }
  void Add(const ReadAccess& other) { bits_ &= other.bits_; }
  uint32_t bits() const { return bits_; }  // some of 0444

 private:
  uint32_t bits_ = 0444;
};

// The generated files of a tensor view directory.
enum class TensorFile : uint8_t { kImages = 0, kLabels = 1, kClasses = 2, kFiles = 3 };
inline constexpr std::string_view kTensorFileNames[] = {"images.npy", "labels.npy", "classes.txt",
                                                        "files.txt"};

// What `ImageFolder(dir)` would list, resolved to store inodes: classes are the sorted
// subdirectories, each class's images are found as sorted(os.walk(class)) finds them (then
// sorted names), keeping names with an image extension. A directory without subdirectories is
// one class, named after the directory, holding its own images.
struct TensorIndex {
  bool available = false;
  std::string why;  // when !available: one line saying why the tensor view is absent
  uint32_t width = 0, height = 0;
  std::vector<std::string> classes;
  std::vector<uint32_t> images;  // store inode of each sample, in order
  std::vector<uint32_t> labels;  // class index of each sample
  uint64_t files_txt_bytes = 0;
  // Who may read the generated files (all four: they reveal the same members).
  ReadAccess access;

  uint64_t ImageBytes() const { return uint64_t{width} * height * 3; }
  std::string ImagesHeader() const;
  std::string LabelsHeader() const;
  uint64_t FileBytes(TensorFile f) const;
};

// Builds the index of directory `dir`. Errors are the store's (damaged metadata); a tree the
// view cannot serve is an available == false index, not an error: also one whose images decode
// to more than `max_image_bytes` each (the mount's RAM cache holds no larger entry, and
// images.npy would decode them again on every read).
Status BuildTensorIndex(const Store& store, uint32_t dir, TensorIndex* index,
                        uint64_t max_image_bytes = UINT64_MAX);

// files.txt (paths relative to the directory, one per line) and classes.txt (one per line).
Status TensorFilesText(const Store& store, uint32_t dir, const TensorIndex& index,
                       std::string* out);
std::string TensorClassesText(const TensorIndex& index);

}  // namespace dsfs
