#include "fs/filesystem.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/log.h"
#include "common/path.h"
#include "common/units.h"
#include "image/image.h"

namespace dsfs {

Filesystem::Filesystem(std::unique_ptr<Store> store, const FsOptions& options)
    : store_(std::move(store)),
      options_(options),
      root_(Make(static_cast<uint32_t>(options.view), Store::kRootIno)) {}

void Filesystem::FillStat(uint64_t ino, const InodeRecord& rec, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = Out(ino);
  st->st_mode = rec.mode & ~(options_.umask & 07777);
  // Directories report one link, as btrfs does: tools then make no assumption from it.
  st->st_nlink = 1;
  st->st_uid = options_.uid;
  st->st_gid = options_.gid;
  st->st_size = static_cast<off_t>(IsDir(rec) ? 0 : rec.size);
  st->st_blksize = 4096;
  st->st_blocks = static_cast<blkcnt_t>((rec.size + 511) / 512);
  if (IsDir(rec)) st->st_blocks = 0;
  st->st_mtim.tv_sec = rec.mtime_s;
  st->st_mtim.tv_nsec = rec.mtime_ns;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

void Filesystem::FillViewStat(View v, uint32_t ino, const InodeRecord& rec, struct stat* st) const {
  FillStat(Make(static_cast<uint32_t>(v), ino), rec, st);
  if (IsReg(rec) && v != View::kOriginal) {
    uint64_t size = ViewFileBytes(v, rec, options_.max_render_bytes);
    st->st_size = static_cast<off_t>(size);
    st->st_blocks = static_cast<blkcnt_t>((size + 511) / 512);
  }
}

namespace {
constexpr std::string_view kDotDsfs = ".dsfs";
constexpr std::string_view kStatsName = "stats";
// RAM cache keys of what the views make (payload records are keyed by their id, far below).
constexpr uint64_t kPixelsKey = uint64_t{0x8} << 60;
constexpr uint64_t kBmpKey = uint64_t{0x9} << 60;
constexpr uint64_t kFilesTxtKey = uint64_t{0xA} << 60;

// Copies bytes [offset, offset + size) of the concatenation of `parts` into *out.
void AppendRange(std::string_view part, uint64_t part_begin, uint64_t offset, uint64_t end,
                 std::string* out) {
  uint64_t b = std::max(offset, part_begin), e = std::min(end, part_begin + part.size());
  if (b < e) out->append(part.substr(b - part_begin, e - b));
}
}  // namespace

Status Filesystem::ForEachFile(uint64_t fuse_dir,
                               const std::function<bool(uint64_t ino, uint64_t size)>& file) const {
  const uint64_t dir = In(fuse_dir);
  const uint32_t kind = Kind(dir);
  if (kind > static_cast<uint32_t>(View::kTensor)) return Status::InvalidArgument("not listed");
  InodeRecord d;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(dir), &d));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(store_->DirEntries(Number(dir), d, &first, &count));
  for (uint32_t i = 0; i < count; ++i) {
    InodeRecord rec;
    DSFS_RETURN_IF_ERROR(store_->GetInode(first + i, &rec));
    if (!IsReg(rec)) continue;
    uint64_t size = ViewFileBytes(static_cast<View>(kind), rec, options_.max_render_bytes);
    if (!file(Out(Make(kind, first + i)), size)) break;
  }
  return Status::OK();
}

Status Filesystem::ControlAttr(uint64_t ino, struct stat* st) const {
  InodeRecord root;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Store::kRootIno, &root));
  if (ino == kDotDsfsIno) {
    root.mode = S_IFDIR | 0555;
    FillStat(ino, root, st);
    return Status::OK();
  }
  if (ino == kStatsIno) {
    root.mode = S_IFREG | 0444;
    root.size = kStatsBytes;
    FillStat(ino, root, st);
    // A new mtime on every getattr: with attributes never cached, the kernel drops its cached
    // pages of the file before each read (FUSE auto_inval_data) and so reads fresh counters.
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    st->st_mtim = now;
    return Status::OK();
  }
  return Status::NotFound("no such inode");
}

Status Filesystem::Attr(uint64_t ino, struct stat* st) const {
  uint32_t kind = Kind(ino);
  if (kind == kControl) return ControlAttr(ino, st);
  if (kind > kControl) return Status::NotFound("no such inode");
  InodeRecord rec;
  if (kind >= kTensorFileKind) {
    std::shared_ptr<const TensorIndex> t;
    DSFS_RETURN_IF_ERROR(Tensor(Number(ino), &t));
    if (!t->available) return Status::NotFound("no tensor view here: " + t->why);
    DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
    // Never more readable than its members one by one (fs/views.h, ReadAccess).
    rec.mode = S_IFREG | t->access.bits();
    rec.size = t->FileBytes(static_cast<TensorFile>(kind - kTensorFileKind));
    FillStat(ino, rec, st);
    return Status::OK();
  }
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  FillViewStat(static_cast<View>(kind), Number(ino), rec, st);
  return Status::OK();
}

Status Filesystem::LookupIn(uint64_t parent, std::string_view name, uint64_t* ino) const {
  if (parent == root_ && name == kDotDsfs) {
    *ino = kDotDsfsIno;
    return Status::OK();
  }
  if (parent == kDotDsfsIno) {
    *ino = 0;
    if (name == kStatsName) *ino = kStatsIno;
    if (name == ".") *ino = kDotDsfsIno;
    if (name == "..") *ino = root_;
    for (View v : kViews) {
      // A view mounted as the root is not shown again inside itself.
      if (name == ViewName(v) && Make(static_cast<uint32_t>(v), 1) != root_) {
        *ino = Make(static_cast<uint32_t>(v), 1);
      }
    }
    return *ino ? Status::OK() : Status::NotFound("no such file or directory");
  }
  uint32_t kind = Kind(parent);
  if (kind == kControl) return Status::NotFound("no such file or directory");
  if (kind > static_cast<uint32_t>(View::kTensor))
    return Status::InvalidArgument("not a directory");
  const View v = static_cast<View>(kind);
  const uint32_t dir = Number(parent);
  InodeRecord rec;
  uint32_t found;
  if (name == "." || name == "..") {
    DSFS_RETURN_IF_ERROR(store_->GetInode(dir, &rec));
    if (!IsDir(rec)) return Status::InvalidArgument("not a directory");
    *ino = Make(kind, name == "." ? dir : rec.parent);
    return Status::OK();
  }
  if (v == View::kTensor) {
    for (uint32_t f = 0; f < 4; ++f) {
      if (name != kTensorFileNames[f]) continue;
      std::shared_ptr<const TensorIndex> t;
      DSFS_RETURN_IF_ERROR(Tensor(dir, &t));
      if (t->available) {
        *ino = Make(kTensorFileKind + f, dir);
        return Status::OK();
      }
    }
  }
  if (v == View::kNpy) {
    Status s = NpyViewImage(dir, name, &found);
    if (s.ok()) {
      *ino = Make(kind, found);
      return Status::OK();
    }
    if (!s.IsNotFound()) return s;
  }
  DSFS_RETURN_IF_ERROR(store_->Lookup(dir, name, &found, &rec));
  // The npy view shows images only under their .npy names.
  if (v == View::kNpy && Renders(v, rec)) return Status::NotFound("no such file");
  *ino = Make(kind, found);
  return Status::OK();
}

Status Filesystem::Lookup(uint64_t parent, std::string_view name, struct stat* st) const {
  counters_.lookup.fetch_add(1, std::memory_order_relaxed);
  uint64_t ino;
  DSFS_RETURN_IF_ERROR(LookupIn(In(parent), name, &ino));
  return Attr(ino, st);
}

Status Filesystem::GetAttr(uint64_t ino, struct stat* st) const {
  counters_.getattr.fetch_add(1, std::memory_order_relaxed);
  return Attr(In(ino), st);
}

Status Filesystem::ReadDirControl(uint64_t offset, const DirFiller& fill) const {
  std::vector<std::pair<std::string_view, uint64_t>> entries = {
      {".", kDotDsfsIno}, {"..", root_}, {kStatsName, kStatsIno}};
  for (View v : kViews) {
    uint64_t ino = Make(static_cast<uint32_t>(v), 1);
    if (ino != root_) entries.emplace_back(ViewName(v), ino);
  }
  struct stat st;
  for (uint64_t i = offset; i < entries.size(); ++i) {
    DSFS_RETURN_IF_ERROR(Attr(entries[i].second, &st));
    if (!fill(entries[i].first, st, i + 1)) break;
  }
  return Status::OK();
}

Status Filesystem::NpyViewImage(uint32_t dir, std::string_view name, uint32_t* image) const {
  constexpr std::string_view kNpyExt = ".npy";
  if (name.size() <= kNpyExt.size() || name.substr(name.size() - kNpyExt.size()) != kNpyExt) {
    return Status::NotFound("not an .npy name");
  }
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(
      store_->Lookup(dir, name.substr(0, name.size() - kNpyExt.size()), image, &rec));
  return Renders(View::kNpy, rec) ? Status::OK() : Status::NotFound("not an image it renders");
}

Status Filesystem::ReadDir(uint64_t fuse_ino, uint64_t offset, const DirFiller& fill) const {
  counters_.readdir.fetch_add(1, std::memory_order_relaxed);
  const uint64_t ino = In(fuse_ino);
  if (ino == kDotDsfsIno) return ReadDirControl(offset, fill);
  uint32_t kind = Kind(ino);
  if (kind > kControl) return Status::NotFound("no such inode");
  if (kind > static_cast<uint32_t>(View::kTensor))
    return Status::InvalidArgument("not a directory");
  const View v = static_cast<View>(kind);
  const uint32_t dir_ino = Number(ino);
  InodeRecord dir;
  DSFS_RETURN_IF_ERROR(store_->GetInode(dir_ino, &dir));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(store_->DirEntries(dir_ino, dir, &first, &count));
  std::shared_ptr<const TensorIndex> tensor;
  if (v == View::kTensor) DSFS_RETURN_IF_ERROR(Tensor(dir_ino, &tensor));
  const bool has_tensor = tensor && tensor->available;
  struct stat st;
  if (offset == 0) {
    FillViewStat(v, dir_ino, dir, &st);
    if (!fill(".", st, 1)) return Status::OK();
    offset = 1;
  }
  if (offset == 1) {
    InodeRecord parent;
    DSFS_RETURN_IF_ERROR(store_->GetInode(dir.parent, &parent));
    FillViewStat(v, dir.parent, parent, &st);
    if (!fill("..", st, 2)) return Status::OK();
    offset = 2;
  }
  std::string npy_name;
  for (uint64_t i = offset - 2; i < count; ++i) {
    InodeRecord rec;
    std::string_view name;
    uint32_t ino_i = first + static_cast<uint32_t>(i);
    DSFS_RETURN_IF_ERROR(store_->GetInode(ino_i, &rec));
    DSFS_RETURN_IF_ERROR(store_->GetName(rec, &name));
    // Names a generated entry takes are not listed twice (lookups find the generated one).
    if (ino == root_ && name == kDotDsfs) continue;  // dsfs's own .dsfs
    if (has_tensor && std::find(std::begin(kTensorFileNames), std::end(kTensorFileNames), name) !=
                          std::end(kTensorFileNames)) {
      continue;  // the tensor view's file of that name
    }
    if (v == View::kNpy && !Renders(v, rec)) {
      uint32_t image;
      Status s = NpyViewImage(dir_ino, name, &image);
      if (s.ok()) continue;  // the npy view's file of image X takes the name "X.npy"
      if (!s.IsNotFound()) return s;
    }
    if (v == View::kNpy && Renders(v, rec)) {
      npy_name.assign(name);
      npy_name += ".npy";
      name = npy_name;
    }
    FillViewStat(v, ino_i, rec, &st);
    if (!fill(name, st, i + 3)) return Status::OK();
  }
  if (has_tensor) {
    for (uint64_t i = std::max<uint64_t>(offset - 2, count); i < count + 4; ++i) {
      uint32_t f = static_cast<uint32_t>(i - count);
      DSFS_RETURN_IF_ERROR(Attr(Make(kTensorFileKind + f, dir_ino), &st));
      if (!fill(kTensorFileNames[f], st, i + 3)) break;
    }
  }
  return Status::OK();
}

Status Filesystem::Open(uint64_t ino, int flags) const {
  counters_.open.fetch_add(1, std::memory_order_relaxed);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT | O_APPEND))) {
    return Status::ReadOnly("read-only file system");
  }
  struct stat st;
  DSFS_RETURN_IF_ERROR(Attr(In(ino), &st));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument("is a directory");
  return Status::OK();
}

Status Filesystem::Read(uint64_t fuse_ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                        std::string_view* out) const {
  counters_.read.fetch_add(1, std::memory_order_relaxed);
  Status s = ReadFile(fuse_ino, offset, size, buf, out);
  if (!s.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  counters_.bytes_read.fetch_add(out->size(), std::memory_order_relaxed);
  const uint64_t ino = In(fuse_ino);
  InodeRecord rec;
  if (prefetcher_ && Kind(ino) == 0 && store_->GetInode(Number(ino), &rec).ok()) {
    prefetcher_->ReadServed(Number(ino), rec, offset, out->size());
  }
  return Status::OK();
}

Status Filesystem::ReadFile(uint64_t fuse_ino, uint64_t offset, uint64_t size, ReadBuffer* buf,
                            std::string_view* out) const {
  const uint64_t ino = In(fuse_ino);
  if (ino == kStatsIno) {
    buf->pin.reset();
    buf->bytes = StatsJson();
    buf->bytes.resize(kStatsBytes - 1, ' ');
    buf->bytes += '\n';
    *out = std::string_view(buf->bytes).substr(std::min<uint64_t>(offset, kStatsBytes));
    *out = out->substr(0, size);
    return Status::OK();
  }
  const uint32_t kind = Kind(ino);
  if (kind == kControl) return Status::InvalidArgument("is a directory");
  if (kind > kControl) return Status::NotFound("no such inode");
  if (kind >= kTensorFileKind) {
    return ReadTensorFile(static_cast<TensorFile>(kind - kTensorFileKind), Number(ino), offset,
                          size, buf, out);
  }
  const View v = static_cast<View>(kind);
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  if (Renders(v, rec)) return ReadImageView(v, Number(ino), rec, offset, size, buf, out);
  if (v != View::kOriginal && IsReg(rec) && rec.image == 3) NoteServedAsIs(Number(ino));
  if ((v == View::kBmp || v == View::kNpy) && IsDecodableImage(rec)) {
    NoteTooLargeToRender(Number(ino), rec);
  }
  return store_->Read(rec, offset, size, buf, out);
}

bool Filesystem::ReadDecodes(uint64_t fuse_ino, uint64_t offset, uint64_t size) const {
  const uint64_t ino = In(fuse_ino);
  const uint32_t kind = Kind(ino);
  ByteCache* cache = store_->cache();
  auto cached = [&](uint64_t key) { return cache && cache->Contains(key); };
  InodeRecord rec;
  if (kind == static_cast<uint32_t>(View::kBmp) || kind == static_cast<uint32_t>(View::kNpy)) {
    const View v = static_cast<View>(kind);
    if (!store_->GetInode(Number(ino), &rec).ok() || !Renders(v, rec)) return false;
    return !cached((v == View::kBmp ? kBmpKey : kPixelsKey) | Number(ino));
  }
  if (kind != kTensorFileKind + static_cast<uint32_t>(TensorFile::kImages)) return false;
  std::shared_ptr<const TensorIndex> t;
  if (!Tensor(Number(ino), &t).ok() || !t->available) return false;
  const uint64_t header = t->ImagesHeader().size(), image_bytes = t->ImageBytes();
  const uint64_t end = std::min(t->FileBytes(TensorFile::kImages), offset + size);
  for (uint64_t i = (std::max(offset, header) - header) / image_bytes;
       i < t->images.size() && header + i * image_bytes < end; ++i) {
    if (!cached(kPixelsKey | t->images[i])) return true;
  }
  return false;
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
    images_decoded_.fetch_add(1, std::memory_order_relaxed);
    image_decode_ns_.fetch_add(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count()),
        std::memory_order_relaxed);
    *px_out = std::move(px);
    return Status::OK();
  };
  ByteCache* cache = store_->cache();
  // Kept: decoded once however many readers want it at the same time (their requests wait for
  // that one decode), then served from the cache.
  if (keep && cache) return cache->GetOrLoad(kPixelsKey | ino, decode, out);
  return decode(out);
}

Status Filesystem::ReadImageView(View v, uint32_t ino, const InodeRecord& rec, uint64_t offset,
                                 uint64_t size, ReadBuffer* buf, std::string_view* out) const {
  buf->pin.reset();
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
    ByteCache* cache = store_->cache();
    ByteCache::Value bmp;
    DSFS_RETURN_IF_ERROR(cache ? cache->GetOrLoad(kBmpKey | ino, render, &bmp) : render(&bmp));
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
      ByteCache* cache = store_->cache();
      ByteCache::Value text;
      DSFS_RETURN_IF_ERROR(cache ? cache->GetOrLoad(kFilesTxtKey | dir, make, &text) : make(&text));
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
  std::string path;
  for (uint32_t cur = ino; cur != Store::kRootIno;) {
    InodeRecord r;
    std::string_view name;
    if (!store_->GetInode(cur, &r).ok() || !store_->GetName(r, &name).ok() || r.parent >= cur) {
      break;
    }
    path = "/" + std::string(name) + path;
    cur = r.parent;
  }
  return path;
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

Status Filesystem::ReadLink(uint64_t fuse_ino, std::string_view* target) const {
  counters_.readlink.fetch_add(1, std::memory_order_relaxed);
  const uint64_t ino = In(fuse_ino);
  if (Kind(ino) > static_cast<uint32_t>(View::kTensor)) {
    return Status::InvalidArgument("not a symbolic link");
  }
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Number(ino), &rec));
  return store_->ReadLink(rec, target);
}

Status Filesystem::StatFs(struct statvfs* st) const {
  counters_.statfs.fetch_add(1, std::memory_order_relaxed);
  std::memset(st, 0, sizeof(*st));
  const StoreHeader& h = store_->header();
  st->f_bsize = 4096;
  st->f_frsize = 4096;
  st->f_blocks = (h.file_bytes + 4095) / 4096;
  st->f_files = h.inode_count;
  st->f_namemax = 255;
  st->f_flag = ST_RDONLY;
  return Status::OK();
}

}  // namespace dsfs

namespace dsfs {

std::string Filesystem::StatsJson() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  std::string j = "{";
  // Starts member `key`: the caller appends its value.
  auto key = [&](std::string_view k) {
    if (j.back() != '{') j += ", ";
    j += "\"";
    j += k;
    j += "\": ";
  };
  auto field = [&](std::string_view k, uint64_t v) {
    key(k);
    j += std::to_string(v);
  };
  auto seconds = [&](std::string_view k, double s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f", s);
    key(k);
    j += buf;
  };
  auto open_obj = [&](std::string_view k) {
    key(k);
    j += "{";
  };
  // A JSON string: the transport's description is the only one, and has no control characters.
  auto text = [&](std::string_view k, std::string_view v) {
    key(k);
    j += "\"";
    for (char ch : v) {
      if (ch == '"' || ch == '\\') j += '\\';
      j += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
    }
    j += "\"";
  };
  seconds("uptime_s",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  if (transport_stats_) {
    TransportStats ts = transport_stats_();
    open_obj("transport");
    text("serving", ts.description);
    field("ring_requests", ts.ring_requests);
    field("classic_requests", ts.classic_requests);
    open_obj("queue_requests");
    for (size_t q = 0; q < ts.per_queue_requests.size(); ++q) {
      field(std::to_string(q), ts.per_queue_requests[q]);
    }
    j += "}}";
  }
  open_obj("requests");
  field("lookup", n(c.lookup));
  field("getattr", n(c.getattr));
  field("readdir", n(c.readdir));
  field("open", n(c.open));
  field("read", n(c.read));
  field("readlink", n(c.readlink));
  field("statfs", n(c.statfs));
  j += "}";
  field("bytes_served", n(c.bytes_read));
  field("read_errors", n(c.errors));
  open_obj("cache");
  if (ByteCache* cache = store_->cache()) {
    ByteCache::Stats cs = cache->stats();
    field("hits", cs.hits);
    field("misses", cs.misses);
    field("bytes", cs.bytes);
    field("capacity_bytes", cs.capacity_bytes);
    field("entries", cs.entries);
    field("evictions", cs.evictions);
  }
  j += "}";
  open_obj("decompress");
  field("chunks", store_->decoded_chunks());
  seconds("seconds", static_cast<double>(store_->decode_ns()) / 1e9);
  j += "}";
  if (prefetcher_) {
    Prefetcher::Stats ps = prefetcher_->stats();
    open_obj("push");
    field("files", ps.pushed_files);
    field("bytes", ps.pushed_bytes);
    field("budget_bytes", ps.push_budget_bytes);
    field("retries", ps.push_retries);
    field("failures", ps.push_failures);
    j += "}";
    open_obj("readahead");
    field("files", ps.readahead_files);
    field("chunks", ps.readahead_chunks);
    j += "}";
    open_obj("preload");
    field("files", ps.preload_files);
    field("bytes", ps.preload_bytes);
    field("total_files", ps.preload_total_files);
    field("done", ps.preload_done ? 1 : 0);
    j += "}";
    field("queued_jobs", ps.queued_jobs);
  }
  open_obj("views");
  field("images_decoded", n(images_decoded_));
  seconds("decode_seconds", static_cast<double>(n(image_decode_ns_)) / 1e9);
  {
    std::lock_guard lock(mu_);
    field("tensor_indexes", tensors_.size());
  }
  j += "}";
  const StoreHeader& h = store_->header();
  open_obj("store");
  field("files", h.file_count);
  field("directories", h.dir_count);
  field("file_bytes", h.file_bytes);
  j += "}}";
  return j;
}

std::string Filesystem::StatusLine() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  uint64_t requests = n(c.lookup) + n(c.getattr) + n(c.readdir) + n(c.open) + n(c.read) +
                      n(c.readlink) + n(c.statfs);
  std::string line = "serving: " + std::to_string(requests) + " requests, " +
                     FormatBytes(n(c.bytes_read)) + " read, " + std::to_string(n(c.errors)) +
                     " errors; ";
  if (ByteCache* cache = store_->cache()) {
    ByteCache::Stats cs = cache->stats();
    uint64_t lookups = cs.hits + cs.misses;
    line += "cache " + FormatBytes(cs.bytes) + " of " + FormatBytes(cs.capacity_bytes) + ", " +
            std::to_string(lookups == 0 ? 0 : cs.hits * 100 / lookups) + "% hits";
  } else {
    line += "no cache";
  }
  if (transport_stats_) line += "; transport " + transport_stats_().description;
  return line;
}

}  // namespace dsfs
