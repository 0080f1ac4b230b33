// Reads of the views' files (fs/views.h): images rendered as BMPs or .npy arrays, and the
// generated files of the tensor view. What they render is kept in the RAM cache the mount gave
// the Filesystem, in a namespace per kind (pixels, BMPs, files.txt) keyed by store inode.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "common/path.h"
#include "common/units.h"
#include "fs/filesystem.h"
#include "image/image.h"
#include "image/resize.h"

namespace dsfs {
namespace {

// Copies bytes [offset, end) of a concatenation, of which `part` starts at `part_begin`, into
// *out.
void AppendRange(std::string_view part, uint64_t part_begin, uint64_t offset, uint64_t end,
                 std::string* out) {
  uint64_t b = std::max(offset, part_begin), e = std::min(end, part_begin + part.size());
  if (b < e) out->append(part.substr(b - part_begin, e - b));
}

// One more image rendered, and the time since `t0` it took (statistics: relaxed).
void CountSince(std::chrono::steady_clock::time_point t0, std::atomic<uint64_t>* images,
                std::atomic<uint64_t>* ns) {
  images->fetch_add(1, std::memory_order_relaxed);
  ns->fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - t0)
                                          .count()),
                std::memory_order_relaxed);
}

}  // namespace

bool Filesystem::ReadDecodes(uint64_t fuse_ino, uint64_t offset, uint64_t size) const {
  const uint64_t ino = In(fuse_ino);
  const uint32_t kind = Kind(ino);
  InodeRecord rec;
  View v;
  if (InodeSpace::ViewOfKind(kind, &v) && v.kind != View::kOriginal && v.kind != View::kTensor) {
    if (!store_->GetInode(Number(ino), &rec).ok() || !Renders(v, rec)) return false;
    return !RenderCached(v, Number(ino));
  }
  if (kind != kTensorFileKind + static_cast<uint32_t>(TensorFile::kImages)) return false;
  std::shared_ptr<const TensorIndex> t;
  if (!Tensor(Number(ino), &t).ok() || !t->available) return false;
  const uint64_t header = t->ImagesHeader().size(), image_bytes = t->ImageBytes();
  const uint64_t end = std::min(t->FileBytes(TensorFile::kImages), offset + size);
  for (uint64_t i = (std::max(offset, header) - header) / image_bytes;
       i < t->images.size() && header + i * image_bytes < end; ++i) {
    if (!(cache_ && cache_->Contains(pixels_id_, t->images[i]))) return true;
  }
  return false;
}

bool Filesystem::RenderCached(View v, uint32_t ino) const {
  if (!cache_) return false;
  if (v.resized()) return cache_->Contains(ResizedId(v), ino);
  return cache_->Contains(v == View::kBmp ? bmp_id_ : pixels_id_, ino);
}

bool Filesystem::AttrRenders(uint64_t fuse_ino) const {
  const uint64_t ino = In(fuse_ino);
  View v;
  InodeRecord rec;
  if (!InodeSpace::ViewOfKind(Kind(ino), &v) || v.kind != View::kJpeg) return false;
  if (!store_->GetInode(Number(ino), &rec).ok()) return false;
  if (!ViewEncodes(v, rec, options_.max_render_bytes)) return false;
  return !(cache_ && cache_->Contains(ResizedId(v), Number(ino)));
}

bool Filesystem::LookupRenders(uint64_t fuse_parent, std::string_view name) const {
  const uint64_t parent = In(fuse_parent);
  View v;
  uint32_t found;
  InodeRecord rec;
  if (!InodeSpace::ViewOfKind(Kind(parent), &v) || v.kind != View::kJpeg) return false;
  if (!store_->Lookup(Number(parent), name, &found, &rec).ok()) return false;
  if (!ViewEncodes(v, rec, options_.max_render_bytes)) return false;
  return !(cache_ && cache_->Contains(ResizedId(v), found));
}

Status Filesystem::Pixels(uint32_t ino, const InodeRecord& rec, bool keep,
                          ByteCache::Value* out) const {
  auto decode = [&](ByteCache::Value* px_out) -> Status {
    auto px = std::make_shared<std::string>();
    auto t0 = std::chrono::steady_clock::now();
    if (rec.pixels != 0) {
      DSFS_RETURN_IF_ERROR(store_->ReadPixels(rec, px.get()));
    } else {
      ReadBuffer b;
      std::string_view data;
      DSFS_RETURN_IF_ERROR(store_->Read(rec, 0, rec.size, &b, &data));
      DecodedImage img;
      Status s = DecodeImage(data, &img);
      if (!s.ok()) {
        return Status::Corruption("image decoded at pack time fails now: " + s.message());
      }
      if (img.width != rec.width || img.height != rec.height) {
        return Status::Corruption("image size differs from the one recorded at pack time");
      }
      *px = std::move(img.rgb);
    }
    CountSince(t0, &images_decoded_, &image_decode_ns_);
    *px_out = std::move(px);
    return Status::OK();
  };
  // Kept: decoded once however many readers want it at the same time (their requests wait for
  // that one decode), then served from the cache.
  if (keep && cache_) return cache_->GetOrLoad(pixels_id_, ino, decode, out);
  return decode(out);
}

Status Filesystem::DecodedPixels(uint64_t fuse_ino, bool keep, bool* decoded, uint32_t* width,
                                 uint32_t* height, ByteCache::Value* px) const {
  *decoded = false;
  const uint64_t ino = In(fuse_ino);
  if (Kind(ino) != 0 || ino == kStatsIno) return Status::OK();
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  if (!IsDecodableImage(rec)) return Status::OK();
  DSFS_RETURN_IF_ERROR(Pixels(Number(ino), rec, keep, px));
  *decoded = true;
  *width = rec.width;
  *height = rec.height;
  return Status::OK();
}

ByteCache::Id Filesystem::ResizedId(View v) const {
  std::lock_guard lock(mu_);
  auto [it, made] = resized_ids_.try_emplace(InodeSpace::KindOf(v), 0);
  if (made && cache_) it->second = cache_->NewId();
  return it->second;
}

Status Filesystem::ResizedFile(View v, uint32_t ino, const InodeRecord& rec,
                               ByteCache::Value* out) const {
  auto render = [&](ByteCache::Value* file_out) -> Status {
    ByteCache::Value px;
    DSFS_RETURN_IF_ERROR(Pixels(ino, rec, false, &px));
    uint32_t w, h;
    ViewImageSize(v, rec, &w, &h);
    auto file = std::make_shared<std::string>();
    if (w == rec.width && h == rec.height) {
      RenderBmp(w, h, *px, file.get());  // at or below N: as in the bmp view
    } else {
      auto t0 = std::chrono::steady_clock::now();
      std::string resized;
      DSFS_RETURN_IF_ERROR(ResizeRgb(rec.width, rec.height, *px, w, h, &resized));
      px.reset();
      if (v.kind == View::kJpeg) {
        DSFS_RETURN_IF_ERROR(EncodeJpeg(w, h, resized, kResizedJpegQuality, file.get()));
      } else {
        RenderBmp(w, h, resized, file.get());
      }
      CountSince(t0, &images_resized_, &image_resize_ns_);
    }
    *file_out = std::move(file);
    return Status::OK();
  };
  // Rendered once however many readers (and lookups: a jpeg-N file's size) want it at once.
  return cache_ ? cache_->GetOrLoad(ResizedId(v), ino, render, out) : render(out);
}

Status Filesystem::ReadImageView(View v, uint32_t ino, const InodeRecord& rec, uint64_t offset,
                                 uint64_t size, ReadBuffer* buf, std::string_view* out) const {
  buf->pin.reset();
  if (v.resized()) {
    ByteCache::Value file;
    DSFS_RETURN_IF_ERROR(ResizedFile(v, ino, rec, &file));
    *out = std::string_view(*file).substr(std::min<uint64_t>(offset, file->size()), size);
    buf->pin = std::move(file);
    return Status::OK();
  }
  if (v == View::kBmp) {
    // The BMP is what is kept (the pixels are needed only to render it).
    auto render = [&](ByteCache::Value* bmp_out) -> Status {
      ByteCache::Value px;
      DSFS_RETURN_IF_ERROR(Pixels(ino, rec, false, &px));
      auto rendered = std::make_shared<std::string>();
      RenderBmp(rec.width, rec.height, *px, rendered.get());
      *bmp_out = std::move(rendered);
      return Status::OK();
    };
    ByteCache::Value bmp;
    DSFS_RETURN_IF_ERROR(cache_ ? cache_->GetOrLoad(bmp_id_, ino, render, &bmp) : render(&bmp));
    *out = std::string_view(*bmp).substr(std::min<uint64_t>(offset, bmp->size()), size);
    buf->pin = std::move(bmp);
    return Status::OK();
  }
  // npy: a header, then the pixels as they are.
  const std::string header = ImageNpyHeader(rec);
  ByteCache::Value px;
  DSFS_RETURN_IF_ERROR(Pixels(ino, rec, true, &px));
  if (offset >= header.size()) {
    *out =
        std::string_view(*px).substr(std::min<uint64_t>(offset - header.size(), px->size()), size);
    buf->pin = std::move(px);
    return Status::OK();
  }
  uint64_t end = std::min<uint64_t>(offset + size, header.size() + px->size());
  buf->bytes.clear();
  AppendRange(header, 0, offset, end, &buf->bytes);
  AppendRange(*px, header.size(), offset, end, &buf->bytes);
  *out = buf->bytes;
  return Status::OK();
}

Status Filesystem::ReadTensorFile(TensorFile f, uint32_t dir, uint64_t offset, uint64_t size,
                                  ReadBuffer* buf, std::string_view* out) const {
  std::shared_ptr<const TensorIndex> t;
  DSFS_RETURN_IF_ERROR(Tensor(dir, &t));
  if (!t->available) return Status::NotFound("no tensor view here: " + t->why);
  buf->pin.reset();
  buf->bytes.clear();
  const uint64_t total = t->FileBytes(f);
  const uint64_t end = std::min(total, offset + size);
  *out = {};
  if (offset >= end) return Status::OK();
  switch (f) {
    case TensorFile::kImages: {
      const std::string header = t->ImagesHeader();
      const uint64_t image_bytes = t->ImageBytes();
      AppendRange(header, 0, offset, end, &buf->bytes);
      for (uint64_t pos = std::max<uint64_t>(offset, header.size()); pos < end;) {
        uint64_t i = (pos - header.size()) / image_bytes;
        uint64_t begin = header.size() + i * image_bytes;
        InodeRecord rec;
        DSFS_RETURN_IF_ERROR(store_->GetInode(t->images[i], &rec));
        ByteCache::Value px;
        DSFS_RETURN_IF_ERROR(Pixels(t->images[i], rec, true, &px));
        if (px->size() != image_bytes) return Status::Corruption("image changed size");
        AppendRange(*px, begin, pos, end, &buf->bytes);
        pos = begin + image_bytes;
      }
      break;
    }
    case TensorFile::kLabels: {
      const std::string header = t->LabelsHeader();
      AppendRange(header, 0, offset, end, &buf->bytes);
      uint64_t first = offset > header.size() ? (offset - header.size()) / 8 : 0;
      for (uint64_t i = first; header.size() + i * 8 < end; ++i) {
        int64_t label = t->labels[i];
        char le[8];
        std::memcpy(le, &label, 8);  // the store is little-endian only (format.h)
        AppendRange(std::string_view(le, 8), header.size() + i * 8, offset, end, &buf->bytes);
      }
      break;
    }
    case TensorFile::kClasses:
      AppendRange(TensorClassesText(*t), 0, offset, end, &buf->bytes);
      break;
    case TensorFile::kFiles: {
      auto make = [&](ByteCache::Value* text_out) -> Status {
        auto fresh = std::make_shared<std::string>();
        DSFS_RETURN_IF_ERROR(TensorFilesText(*store_, dir, *t, fresh.get()));
        *text_out = std::move(fresh);
        return Status::OK();
      };
      ByteCache::Value text;
      DSFS_RETURN_IF_ERROR(cache_ ? cache_->GetOrLoad(files_txt_id_, dir, make, &text)
                                  : make(&text));
      *out = std::string_view(*text).substr(offset, end - offset);
      buf->pin = std::move(text);
      return Status::OK();
    }
  }
  *out = buf->bytes;
  return Status::OK();
}

Status Filesystem::Tensor(uint32_t dir, std::shared_ptr<const TensorIndex>* out) const {
  {
    std::lock_guard lock(mu_);
    auto it = tensors_.find(dir);
    if (it != tensors_.end()) {
      *out = it->second;
      return Status::OK();
    }
  }
  // Built outside the lock (a big tree takes a while); two threads may both build it once.
  auto index = std::make_shared<TensorIndex>();
  DSFS_RETURN_IF_ERROR(BuildTensorIndex(*store_, dir, index.get(), options_.max_render_bytes));
  std::lock_guard lock(mu_);
  *out = tensors_.emplace(dir, std::move(index)).first->second;
  return Status::OK();
}

std::string Filesystem::PathOf(uint32_t ino) const {
  // For a log line: a damaged tree gives the part of the path found.
  std::string path;
  (void)store_->PathOf(ino, Store::kRootIno, &path);
  return path.empty() ? path : "/" + path;
}

void Filesystem::NoteServedAsIs(uint32_t ino) const {
  {
    std::lock_guard lock(mu_);
    if (!logged_as_is_.insert(ino).second) return;
  }
  Log()->info("{}: an image the views cannot reproduce exactly: served as it is",
              PrintableName(PathOf(ino)));
}

void Filesystem::NoteTooLargeToRender(uint32_t ino, const InodeRecord& rec) const {
  if (logged_too_large_.exchange(true, std::memory_order_relaxed)) return;
  Log()->warn(
      "{} ({}x{}) and every image whose decoded pixels exceed {} (what the RAM cache holds per "
      "entry, a 16th of -o cache_size) are served as their original bytes in the bmp and npy "
      "views and have no tensor view; raise cache_size to decode them",
      PrintableName(PathOf(ino)), rec.width, rec.height, FormatBytes(options_.max_render_bytes));
}

}  // namespace dsfs
