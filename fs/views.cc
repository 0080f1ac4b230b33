#include "fs/views.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/path.h"
#include "common/units.h"
#include "image/image.h"
#include "image/resize.h"
#include "store/format.h"

namespace dsfs {

std::string ViewName(View v) {
  switch (v.kind) {
    case View::kOriginal:
      return "original";
    case View::kBmp:
      return v.resized() ? "bmp-" + std::to_string(v.side) : "bmp";
    case View::kNpy:
      return "npy";
    case View::kTensor:
      return "tensor";
    case View::kJpeg:
      return "jpeg-" + std::to_string(v.side);
  }
  return "?";
}

Status ParseView(std::string_view name, View* v) {
  for (View c : kViews) {
    if (name == ViewName(c)) {
      *v = c;
      return Status::OK();
    }
  }
  for (View::Kind kind : {View::kBmp, View::kJpeg}) {
    std::string_view prefix = kind == View::kBmp ? "bmp-" : "jpeg-";
    if (name.substr(0, prefix.size()) != prefix) continue;
    std::string_view digits = name.substr(prefix.size());
    uint32_t n = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && digits[0] != '0' &&
        n >= kMinResize && n <= kMaxResize) {
      *v = View(kind, n);
      return Status::OK();
    }
    return Status::InvalidArgument(
        "unknown view '" + std::string(name) + "' (" + std::string(prefix) + "N takes N from " +
        std::to_string(kMinResize) + " to " + std::to_string(kMaxResize) +
        ", in decimal without leading zeros)");
  }
  return Status::InvalidArgument("unknown view '" + std::string(name) +
                                 "' (choose original, bmp, npy, tensor, bmp-N or jpeg-N)");
}

std::string ImageNpyHeader(const InodeRecord& rec) {
  return NpyHeader("|u1", {rec.height, rec.width, 3});
}

void ViewImageSize(View v, const InodeRecord& rec, uint32_t* width, uint32_t* height) {
  *width = rec.width;
  *height = rec.height;
  if (v.resized() && std::min(rec.width, rec.height) > v.side) {
    ResizedSize(rec.width, rec.height, v.side, width, height);
  }
}

bool ViewEncodes(View v, const InodeRecord& rec, uint64_t max_render_bytes) {
  return v.kind == View::kJpeg && std::min(rec.width, rec.height) > v.side &&
         ViewRenders(v, rec, max_render_bytes);
}

uint64_t ViewFileBytes(View v, const InodeRecord& rec, uint64_t max_render_bytes) {
  if (!ViewRenders(v, rec, max_render_bytes)) return rec.size;
  if (v.kind == View::kNpy)
    return ImageNpyHeader(rec).size() + uint64_t{rec.width} * rec.height * 3;
  uint32_t w, h;
  ViewImageSize(v, rec, &w, &h);
  return BmpBytes(w, h);  // bmp, bmp-N, and jpeg-N's images at or below N
}

bool ViewRenders(View v, const InodeRecord& rec, uint64_t max_render_bytes) {
  if (v.kind == View::kOriginal || v.kind == View::kTensor || !IsDecodableImage(rec)) return false;
  // An image whose .npy name would pass what the kernel takes keeps its own name and bytes there
  // (so the npy view's tree, classic or EROFS, holds only names a reader can open).
  if (v.kind == View::kNpy && rec.name_len + 4 > kMaxNameBytes) return false;
  // What the cache holds for it: the BMP, or the pixels (the .npy header is made per read). A
  // resized view holds the decoded pixels (less than their BMP) while it resizes them, then
  // keeps a smaller BMP or a JPEG: the bmp view's bound covers it.
  const uint64_t pixels = uint64_t{rec.width} * rec.height * 3;
  return (v.kind == View::kNpy ? pixels : BmpBytes(rec.width, rec.height)) <= max_render_bytes;
}

bool HasImageExtension(std::string_view name) {
  static constexpr std::string_view kExt[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                              ".pgm", ".tif",  ".tiff", ".webp"};
  for (std::string_view e : kExt) {
    if (name.size() < e.size()) continue;
    std::string_view tail = name.substr(name.size() - e.size());
    bool eq = std::equal(tail.begin(), tail.end(), e.begin(), [](char a, char b) {
      return std::tolower(static_cast<unsigned char>(a)) == b;
    });
    if (eq) return true;
  }
  return false;
}

std::string TensorIndex::ImagesHeader() const {
  return NpyHeader("|u1", {images.size(), height, width, 3});
}

std::string TensorIndex::LabelsHeader() const { return NpyHeader("<i8", {labels.size()}); }

uint64_t TensorIndex::FileBytes(TensorFile f) const {
  switch (f) {
    case TensorFile::kImages:
      return ImagesHeader().size() + images.size() * ImageBytes();
    case TensorFile::kLabels:
      return LabelsHeader().size() + labels.size() * 8;
    case TensorFile::kClasses:
      return TensorClassesText(*this).size();
    case TensorFile::kFiles:
      return files_txt_bytes;
  }
  return 0;
}

namespace {

constexpr uint64_t kMaxTensorPathBytes = 4096;        // PATH_MAX
constexpr uint64_t kMaxTensorIndexBytes = 256 << 20;  // all directory paths of one index

struct Entry {
  uint32_t ino;
  InodeRecord rec;
  std::string name;  // a copy: a store's name views do not outlive many more lookups
};

Status Entries(const Store& store, uint32_t dir, std::vector<Entry>* out) {
  out->clear();
  Status name_status;
  DSFS_RETURN_IF_ERROR(store.ForEachEntry(dir, [&](uint32_t ino, const InodeRecord& rec) {
    Entry e{ino, rec, {}};
    std::string_view name;
    name_status = store.GetName(rec, &name);
    e.name = name;
    if (!name_status.ok()) return false;
    out->push_back(e);
    return true;
  }));
  return name_status;
}

// The key Python sorts a file name by: its code points after os.fsdecode (UTF-8, each byte
// that does not decode becoming U+DC00 + byte). For valid UTF-8 that is the byte order the
// store keeps; names that do not decode sort differently ("\xff" before U+1F600).
std::u32string PythonOrderKey(std::string_view name) {
  std::u32string key;
  key.reserve(name.size());
  while (!name.empty()) {
    char32_t cp = 0;
    size_t n = Utf8CodePoint(name, &cp);
    if (n == 0) {
      cp = 0xDC00 + static_cast<unsigned char>(name[0]);
      n = 1;
    }
    key.push_back(cp);
    name.remove_prefix(n);
  }
  return key;
}

bool IsUtf8(std::string_view name) {
  while (!name.empty()) {
    char32_t cp;
    size_t n = Utf8CodePoint(name, &cp);
    if (n == 0) return false;
    name.remove_prefix(n);
  }
  return true;
}

// Sorts `items` as Python's sorted() sorts their names (`name(item)` gives one); they come in
// the store's byte order, which is already that unless a name is not UTF-8.
template <typename T, typename Name>
void SortAsPython(std::vector<T>* items, Name name) {
  if (std::all_of(items->begin(), items->end(), [&](const T& t) { return IsUtf8(name(t)); })) {
    return;
  }
  std::vector<std::pair<std::u32string, T>> keyed;
  keyed.reserve(items->size());
  for (T& t : *items) keyed.emplace_back(PythonOrderKey(name(t)), std::move(t));
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < keyed.size(); ++i) (*items)[i] = std::move(keyed[i].second);
}

std::string SizeText(uint32_t w, uint32_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// The path, relative to the indexed directory, of entry `name` of directory `rel` ("" or
// "/a/b") of class `prefix` ("" for a leaf directory's own entries).
std::string EntryPath(const std::string& prefix, const std::string& rel, std::string_view name) {
  std::string path = prefix + rel + "/" + std::string(name);
  if (prefix.empty()) path.erase(0, 1);
  return path;
}

// Why a newline in a path makes the tensor view absent: files.txt and classes.txt hold one per
// line. (Escaping it would give files.txt lines that are not the paths.)
std::string NewlineReason(std::string path) {
  for (size_t at; (at = path.find('\n')) != std::string::npos;) path.replace(at, 1, "\\n");
  return path + " has a newline in its name (files.txt and classes.txt hold one name per line)";
}

// Why a symbolic link makes the tensor view absent: ImageFolder follows links (to a class
// directory, to images), which the view cannot do inside a store.
std::string LinkReason(const std::string& path) {
  return path + " is a symbolic link (ImageFolder follows links; the tensor view does not)";
}

// Adds the images of class directory `cls` (label `label`) in the order sorted(os.walk(cls))
// yields directories: by path, where "a/b" sorts after "a-b" ('/' after '-'), then by name.
// `prefix` is the class's path relative to the indexed directory; `access` covers the
// directories from the root down to the class, itself included.
Status AddClass(const Store& store, uint32_t cls, const std::string& prefix, uint32_t label,
                const ReadAccess& access, TensorIndex* index) {
  // Every directory below the class, with its path relative to it ("" for the class itself;
  // "/a", "/a/b" below) and the access its path needs, then sorted as os.walk's root strings
  // sort.
  struct Dir {
    std::string rel;
    uint32_t ino;
    ReadAccess access;
  };
  std::vector<Dir> dirs{{"", cls, access}};
  std::vector<Entry> entries;
  uint64_t path_bytes = 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    DSFS_RETURN_IF_ERROR(Entries(store, dirs[i].ino, &entries));
    for (const Entry& e : entries) {
      if (IsLink(e.rec)) {
        index->why = LinkReason(EntryPath(prefix, dirs[i].rel, e.name));
        return Status::OK();
      }
      if (!IsDir(e.rec)) continue;
      // Paths no program could open, or more path bytes than any real tree has, mean a
      // damaged or crafted store: the view is refused instead of holding them all in memory.
      std::string rel = dirs[i].rel + "/" + std::string(e.name);
      path_bytes += rel.size();
      if (prefix.size() + rel.size() >= kMaxTensorPathBytes || path_bytes > kMaxTensorIndexBytes) {
        index->why = prefix + rel.substr(0, 64) + "...: paths too long or too many";
        return Status::OK();
      }
      ReadAccess below = dirs[i].access;
      below.AddDir(e.rec.mode);
      dirs.push_back({std::move(rel), e.ino, below});
    }
  }
  std::sort(dirs.begin(), dirs.end(), [](const Dir& a, const Dir& b) { return a.rel < b.rel; });
  SortAsPython(&dirs, [](const Dir& d) -> std::string_view { return d.rel; });
  for (const Dir& d : dirs) {
    DSFS_RETURN_IF_ERROR(Entries(store, d.ino, &entries));
    SortAsPython(&entries, [](const Entry& e) -> std::string_view { return e.name; });
    for (const Entry& e : entries) {
      if (IsDir(e.rec) || !HasImageExtension(e.name)) continue;
      std::string path = EntryPath(prefix, d.rel, e.name);
      if (path.find('\n') != std::string::npos) {
        index->why = NewlineReason(path);
        return Status::OK();
      }
      if (!IsDecodableImage(e.rec)) {
        index->why = path + " is not an image the views can decode";
        return Status::OK();
      }
      if (index->images.empty()) {
        index->width = e.rec.width;
        index->height = e.rec.height;
      } else if (e.rec.width != index->width || e.rec.height != index->height) {
        index->why = "images differ in size (" + SizeText(index->width, index->height) + " and " +
                     SizeText(e.rec.width, e.rec.height) + ": " + path + ")";
        return Status::OK();
      }
      index->images.push_back(e.ino);
      index->labels.push_back(label);
      index->files_txt_bytes += path.size() + 1;
      index->access.Add(d.access);
      index->access.AddFile(e.rec.mode);
    }
  }
  return Status::OK();
}

// The access that directory `dir` and every directory above it require.
Status AccessFromRoot(const Store& store, uint32_t dir, ReadAccess* access) {
  // A damaged parent field ends the walk (what it reached so far counts).
  bool reached;
  return store.WalkUp(
      dir, Store::kRootIno,
      [&](uint32_t, const InodeRecord& r) {
        access->AddDir(r.mode);
        return Status::OK();
      },
      &reached);
}

}  // namespace

Status BuildTensorIndex(const Store& store, uint32_t dir, TensorIndex* index,
                        uint64_t max_image_bytes) {
  *index = TensorIndex();
  InodeRecord d;
  DSFS_RETURN_IF_ERROR(store.GetInode(dir, &d));
  if (!IsDir(d)) return Status::InvalidArgument("not a directory");
  std::vector<Entry> entries;
  DSFS_RETURN_IF_ERROR(Entries(store, dir, &entries));
  std::vector<Entry> classes;
  for (const Entry& e : entries) {
    if (IsLink(e.rec)) {
      index->why = LinkReason(std::string(e.name));
      break;
    }
    if (IsDir(e.rec)) classes.push_back(e);
  }
  SortAsPython(&classes, [](const Entry& e) -> std::string_view { return e.name; });
  ReadAccess above;
  DSFS_RETURN_IF_ERROR(AccessFromRoot(store, dir, &above));
  if (index->why.empty() && classes.empty()) {
    // A leaf directory: one class, itself.
    std::string_view name;
    DSFS_RETURN_IF_ERROR(store.GetName(d, &name));
    index->classes.emplace_back(name.empty() ? "." : name);
    if (name.find('\n') != std::string_view::npos) {
      index->why = NewlineReason(std::string(name));
    } else {
      DSFS_RETURN_IF_ERROR(AddClass(store, dir, "", 0, above, index));
    }
  } else if (index->why.empty()) {
    for (const Entry& c : classes) {
      uint32_t label = static_cast<uint32_t>(index->classes.size());
      index->classes.emplace_back(c.name);
      size_t before = index->images.size();
      ReadAccess access = above;
      access.AddDir(c.rec.mode);
      DSFS_RETURN_IF_ERROR(AddClass(store, c.ino, std::string(c.name), label, access, index));
      if (!index->why.empty()) break;
      if (index->images.size() == before) {
        index->why = "class " + std::string(c.name) + " has no images (ImageFolder refuses it)";
        break;
      }
    }
  }
  if (index->why.empty() && index->images.empty()) index->why = "no images below";
  if (index->why.empty() && index->ImageBytes() > max_image_bytes) {
    index->why = "its images decode to " + FormatBytes(index->ImageBytes()) +
                 " each, more than the RAM cache holds per entry (" + FormatBytes(max_image_bytes) +
                 ", a 16th of -o cache_size)";
  }
  index->available = index->why.empty();
  if (!index->available) {
    index->images.clear();
    index->labels.clear();
    index->images.shrink_to_fit();
    index->labels.shrink_to_fit();
  }
  return Status::OK();
}

Status TensorFilesText(const Store& store, uint32_t dir, const TensorIndex& index,
                       std::string* out) {
  out->clear();
  out->reserve(index.files_txt_bytes);
  std::string path;
  for (uint32_t ino : index.images) {
    Status s = store.PathOf(ino, dir, &path);
    if (s.IsNotFound()) return Status::Corruption("image is not below its directory");
    DSFS_RETURN_IF_ERROR(s);
    out->append(path);
    out->push_back('\n');
  }
  if (out->size() != index.files_txt_bytes) return Status::Corruption("files.txt changed size");
  return Status::OK();
}

std::string TensorClassesText(const TensorIndex& index) {
  std::string out;
  for (const std::string& c : index.classes) out += c + "\n";
  return out;
}

}  // namespace dsfs
