// dsfs ls, cat, info, verify: reading a store without mounting it.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/memory_limit.h"
#include "common/path.h"
#include "common/units.h"
#include "common/version.h"
#include "fs/stats.h"
#include "fs/views.h"
#include "kernel/kernel_mount.h"
#include "store/store.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsfs {
namespace {

Status OpenStore(const std::string& path, std::unique_ptr<Store>* store) {
  return Store::Open(path, StoreOptions{}, store);
}

std::string ModeString(uint32_t mode) {
  std::string s = S_ISDIR(mode) ? "d" : S_ISLNK(mode) ? "l" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400 >> i)) ? rwx[i] : '-';
  // As ls(1) shows them: setuid and setgid in the x of owner and group, sticky in other's.
  auto special = [&](size_t at, uint32_t bit, char with_x, char without_x) {
    if (mode & bit) s[at] = s[at] == 'x' ? with_x : without_x;
  };
  special(3, S_ISUID, 's', 'S');
  special(6, S_ISGID, 's', 'S');
  special(9, S_ISVTX, 't', 'T');
  return s;
}

// "0444": permission bits in octal, as chmod takes them.
std::string ModeText(uint32_t bits) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", bits & 07777);
  return buf;
}

// UTC date and time; a time outside years 0-9999 (a crafted archive's) as its raw number of
// seconds, which is what the store holds.
std::string TimeString(int64_t t) {
  time_t tt = static_cast<time_t>(t);
  struct tm tm;
  if (gmtime_r(&tt, &tm) == nullptr || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900) {
    return std::to_string(t);
  }
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// Visits the entries of `dir` in listing order with their names and paths (prefix + "/" +
// name), and, when `recursive`, everything below them depth-first.
using Visitor =
    std::function<Status(const InodeRecord&, std::string_view name, const std::string& path)>;
// Deeper trees are refused as damaged: the walk recurses once per level.
constexpr int kMaxWalkDepth = 4096;

// One path buffer for the whole walk (appended to and cut back), so a deep tree costs one path,
// not a copy of its prefix per level.
Status WalkFrom(const Store& store, uint32_t dir, std::string* path, bool recursive, int depth,
                const Visitor& visit) {
  if (depth > kMaxWalkDepth) {
    return Status::Corruption("tree deeper than " + std::to_string(kMaxWalkDepth) + " levels");
  }
  InodeRecord d;
  DSFS_RETURN_IF_ERROR(store.GetInode(dir, &d));
  uint32_t first, count;
  DSFS_RETURN_IF_ERROR(store.DirEntries(dir, d, &first, &count));
  const size_t base = path->size();
  for (uint32_t i = 0; i < count; ++i) {
    InodeRecord r;
    std::string_view name;
    DSFS_RETURN_IF_ERROR(store.GetInode(first + i, &r));
    DSFS_RETURN_IF_ERROR(store.GetName(r, &name));
    path->resize(base);
    *path += '/';
    *path += name;
    DSFS_RETURN_IF_ERROR(visit(r, name, *path));
    if (recursive && IsDir(r)) {
      DSFS_RETURN_IF_ERROR(WalkFrom(store, first + i, path, true, depth + 1, visit));
    }
  }
  path->resize(base);
  return Status::OK();
}

Status Walk(const Store& store, uint32_t dir, const std::string& prefix, bool recursive,
            const Visitor& visit) {
  std::string path = prefix;
  return WalkFrom(store, dir, &path, recursive, 1, visit);
}

// Opens the store at `store_path` and finds `path` in it.
Status OpenAt(const std::string& store_path, const std::string& path, std::unique_ptr<Store>* store,
              uint32_t* ino, InodeRecord* rec) {
  DSFS_RETURN_IF_ERROR(OpenStore(store_path, store));
  return (*store)->LookupPath(path, ino, rec).WithContext(path);
}

}  // namespace

// One entry of `dsfs ls --json`: {"path", "type", "mode", "size", "mtime_unix_s", "mtime_ns"}
// and, for a symlink, "target" (docs/usage.md, "JSON output").
Status LsJson(const Store& store, const InodeRecord& r, const std::string& path,
              std::ostream& out) {
  nlohmann::ordered_json j = {{"path", path},
                              {"type", IsDir(r)    ? "directory"
                                       : IsLink(r) ? "symlink"
                                                   : "file"},
                              {"mode", ModeText(r.mode)},
                              {"size", IsDir(r) ? 0 : r.size},
                              {"mtime_unix_s", r.mtime_s},
                              {"mtime_ns", r.mtime_ns}};
  if (IsLink(r)) {
    std::string_view target;
    DSFS_RETURN_IF_ERROR(store.ReadLink(r, &target));
    j["target"] = std::string(target);
  }
  out << OneLineJson(j) << "\n";
  return Status::OK();
}

Status RunLs(const std::string& store_path, const std::string& path, bool long_format,
             bool recursive, std::ostream& out, bool json) {
  std::unique_ptr<Store> store;
  uint32_t ino;
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(OpenAt(store_path, path, &store, &ino, &rec));
  if (json) {
    // Paths from the root, whatever was listed: each line stands alone.
    const std::string base = path == "/" ? "" : (path[0] == '/' ? path : "/" + path);
    if (!IsDir(rec)) return LsJson(*store, rec, base, out);
    return Walk(*store, ino, base, recursive,
                [&](const InodeRecord& r, std::string_view, const std::string& p) {
                  return LsJson(*store, r, p, out);
                });
  }
  auto print = [&](const InodeRecord& r, const std::string& name) -> Status {
    if (long_format) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s %12llu %s ", ModeString(r.mode).c_str(),
                    static_cast<unsigned long long>(IsDir(r) ? 0 : r.size),
                    TimeString(r.mtime_s).c_str());
      out << buf;
    }
    out << PrintableName(name);
    if (long_format && IsLink(r)) {
      std::string_view target;
      DSFS_RETURN_IF_ERROR(store->ReadLink(r, &target));
      out << " -> " << PrintableName(target);
    }
    out << "\n";
    return Status::OK();
  };
  if (!IsDir(rec)) return print(rec, path);
  // -R prints paths from the listed directory down; a plain listing prints names.
  return Walk(*store, ino, path == "/" ? "" : path, recursive,
              [&](const InodeRecord& r, std::string_view name, const std::string& p) {
                return print(r, recursive ? p : std::string(name));
              });
}

Status RunCat(const std::string& store_path, const std::string& path, std::ostream& out) {
  std::unique_ptr<Store> store;
  uint32_t ino;
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(OpenAt(store_path, path, &store, &ino, &rec));
  if (!IsReg(rec)) return Status::InvalidArgument(path + ": not a regular file");
  ReadBuffer buf;
  const uint64_t step = store->header().chunk_bytes;
  for (uint64_t off = 0; off < rec.size; off += step) {
    std::string_view data;
    Status s = store->Read(rec, off, step, &buf, &data);
    if (!s.ok()) return s.WithContext(path);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) break;
  }
  // A full disk or a closed pipe: say so (coreutils' cat fails too) instead of a short file.
  errno = 0;
  out.flush();
  if (!out) {
    return Status::IOError(std::string("writing ") + path + ": " +
                           (errno ? std::strerror(errno) : "write error"));
  }
  return Status::OK();
}

Status RunInfo(const std::string& store_path, const std::string& path, bool json,
               std::ostream& out) {
  // The tensor view of `path` (there, or why not), before anything is written: a bad path is
  // an error line and no output.
  std::unique_ptr<Store> store;
  uint32_t dir;
  InodeRecord rec;
  DSFS_RETURN_IF_ERROR(OpenAt(store_path, path, &store, &dir, &rec));
  if (!IsDir(rec)) return Status::InvalidArgument(path + ": not a directory");
  TensorIndex t;
  DSFS_RETURN_IF_ERROR(BuildTensorIndex(*store, dir, &t));
  const StoreHeader& h = store->header();
  uint64_t store_bytes = StoreBytes(store_path);
  double ratio =
      h.file_bytes ? static_cast<double>(store_bytes) / static_cast<double>(h.file_bytes) : 0;
  const Store::MetadataSize meta = store->metadata_size();
  std::string kernel_why;  // which EROFS image `dsfs mount -o kernel` makes here
  const bool kernel_compressed = KernelImageCompressed(*store, &kernel_why);
  if (json) {
    // Key order as written, one line as the stats file (fs/stats.h: bytes that are not UTF-8,
    // which a store path may hold, become U+FFFD rather than an invalid document).
    nlohmann::ordered_json j = {
        {"store", store_path},
        {"backend", store->backend_name()},
        {"format_version", h.version},
        {"created_unix_s", h.created_unix_s},
        {"entries", h.inode_count},
        {"files", h.file_count},
        {"directories", h.dir_count},
        {"symlinks", h.symlink_count},
        {"file_bytes", h.file_bytes},
        {"payload_records", h.payload_count},
        {"payload_bytes", h.payload_bytes},
        {"store_bytes", store_bytes},
        {"ratio", std::round(ratio * 1e4) / 1e4},
        {"zstd_level", h.zstd_level},
        {"dictionary_bytes", h.dict_bytes},
        {"chunk_bytes", h.chunk_bytes},
        {"group_bytes", h.version >= kSolidFormatVersion ? h.group_bytes : 0},
        {"images", h.image_count},
        {"pixel_records", h.pixel_count},
        {"pixel_bytes", h.pixel_bytes},
        {"metadata_bytes", meta.stored_bytes},
        {"metadata_raw_bytes", meta.inode_bytes + meta.name_bytes},
        {"metadata_segments", meta.segments},
        {"memory_limit_bytes", ProcessMemoryLimit().bytes},
        {"memory_limit_source", ProcessMemoryLimit().source},
        {"page_cache_footprint_bytes", store->PageCacheFootprintBytes()},
        {"mount_cache_bytes", DefaultMountCacheBytes(*store)},
        {"kernel_image", kernel_compressed ? "compressed" : "uncompressed"},
        {"kernel_image_why", kernel_why},
        {"dsfs_version", DsfsVersion()}};
    nlohmann::ordered_json& tensor = j["tensor"];
    tensor = {{"path", path}, {"available", t.available}};
    if (t.available) {
      tensor["images"] = t.images.size();
      tensor["classes"] = t.classes.size();
      tensor["height"] = t.height;
      tensor["width"] = t.width;
      tensor["mode"] = ModeText(t.access.bits());
    } else {
      tensor["why"] = t.why;
    }
    out << OneLineJson(j) << "\n";
    return Status::OK();
  }
  char buf[2048];
  std::snprintf(
      buf, sizeof(buf),
      "store:        %s (%s)\n"
      "format:       %u, created %s UTC; read by dsfs %s\n"
      "entries:      %llu (%llu files, %llu directories, %llu symlinks)\n"
      "file bytes:   %s\n"
      "store bytes:  %s (ratio %.3f; payloads %s in %llu records)\n"
      "metadata:     %s (%s raw; %s)\n"
      "compression:  zstd level %d, dictionary %s, chunks of %s, %s\n"
      "images:       %llu decodable by the views; decoded pixels stored: %s\n",
      store_path.c_str(), std::string(store->backend_name()).c_str(), h.version,
      TimeString(static_cast<int64_t>(h.created_unix_s)).c_str(), DsfsVersion(),
      static_cast<unsigned long long>(h.inode_count), static_cast<unsigned long long>(h.file_count),
      static_cast<unsigned long long>(h.dir_count),
      static_cast<unsigned long long>(h.symlink_count), FormatBytes(h.file_bytes).c_str(),
      FormatBytes(store_bytes).c_str(), ratio, FormatBytes(h.payload_bytes).c_str(),
      static_cast<unsigned long long>(h.payload_count), FormatBytes(meta.stored_bytes).c_str(),
      FormatBytes(meta.inode_bytes + meta.name_bytes).c_str(),
      meta.segments ? (std::to_string(meta.segments) + " compressed segments").c_str()
                    : "stored raw",
      h.zstd_level, h.dict_bytes ? FormatBytes(h.dict_bytes).c_str() : "none",
      FormatBytes(h.chunk_bytes).c_str(),
      h.version >= kSolidFormatVersion ? ("solid groups of " + FormatBytes(h.group_bytes)).c_str()
                                       : "each file compressed alone",
      static_cast<unsigned long long>(h.image_count),
      h.pixel_count ? FormatBytes(h.pixel_bytes).c_str() : "no");
  out << buf;
  out << "-o kernel:    " << (kernel_compressed ? "a compressed image" : "an uncompressed image")
      << " (" << kernel_why << ")\n";
  // What a mount here would size its defaults from (common/memory_limit.h).
  out << "memory limit: " << ProcessMemoryLimit().ToString() << "; a mount's cache "
      << FormatBytes(DefaultMountCacheBytes(*store)) << " (the files fill "
      << FormatBytes(store->PageCacheFootprintBytes()) << " of page cache)\n";
  if (t.available) {
    // Its files are no more readable than its members (fs/views.h, ReadAccess).
    out << "tensor view:  " << path << ": " << t.images.size() << " images of " << t.width << "x"
        << t.height << " in " << t.classes.size() << " classes, files mode "
        << ModeText(t.access.bits()) << "\n";
  } else {
    out << "tensor view:  " << path << ": absent: " << PrintableName(t.why, false) << "\n";
  }
  return Status::OK();
}

namespace {

// `dsfs verify --json`: {"store", "ok", "metadata_ok", "metadata_error" (when not), "files",
// "bytes", "damaged", "damaged_files": [{"path", "error"}] (the first 100)}.
void VerifyJson(const std::string& store_path, const std::string& metadata_error, uint64_t files,
                uint64_t bytes, uint64_t bad, const nlohmann::ordered_json& listed,
                std::ostream& out) {
  nlohmann::ordered_json j = {{"store", store_path},
                              {"ok", metadata_error.empty() && bad == 0},
                              {"metadata_ok", metadata_error.empty()}};
  if (!metadata_error.empty()) j["metadata_error"] = metadata_error;
  j["files"] = files;
  j["bytes"] = bytes;
  j["damaged"] = bad;
  j["damaged_files"] = listed;
  out << OneLineJson(j) << "\n";
}

}  // namespace

Status RunVerify(const std::string& store_path, bool quiet, std::ostream& out, std::ostream& err,
                 bool json) {
  constexpr uint64_t kMaxBadListed = 100;
  std::unique_ptr<Store> store;
  DSFS_RETURN_IF_ERROR(OpenStore(store_path, &store));
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  Status meta = store->VerifyMetadata();
  if (!meta.ok()) {
    if (json) {
      VerifyJson(store_path, meta.message(), 0, 0, 0, listed, out);
    } else {
      out << "BAD metadata: " << meta.message() << "\n";
    }
    return Status::Corruption(store_path + ": metadata is damaged");
  }
  uint64_t files = 0, bytes = 0, bad = 0;
  // On a terminal: "verifying N/TOTAL files ..." redrawn a few times a second.
  ProgressLine bar(err, !quiet && ::isatty(STDERR_FILENO));
  PackProgress progress;
  progress.phase = "verifying";
  progress.files_total = store->header().file_count;
  Status s = Walk(*store, Store::kRootIno, "", true,
                  [&](const InodeRecord& r, std::string_view, const std::string& path) -> Status {
                    if (!IsReg(r)) return Status::OK();
                    ++files;
                    bytes += r.size;
                    Status fs = store->VerifyFile(r);
                    if (!fs.ok()) {
                      // Every damaged file counts; the first ones are named.
                      if (++bad <= kMaxBadListed && json) {
                        listed.push_back({{"path", path}, {"error", fs.message()}});
                      } else if (bad <= kMaxBadListed) {
                        bar.Clear();
                        out << "BAD " << path << ": " << fs.message() << "\n" << std::flush;
                      }
                    }
                    if (bar.Due()) {
                      progress.files_done = files;
                      progress.bytes_done = bytes;
                      bar.Update(progress);
                    }
                    return Status::OK();
                  });
  bar.Clear();
  if (json) {
    VerifyJson(store_path, s.ok() ? "" : s.message(), files, bytes, bad, listed, out);
  } else if (!s.ok()) {
    out << "BAD metadata: " << s.message() << "\n";
  }
  if (!s.ok()) return Status::Corruption(store_path + ": metadata is damaged");
  if (bad && json) {
    return Status::Corruption(store_path + ": " + std::to_string(bad) + " of " +
                              std::to_string(files) + " files are damaged");
  }
  if (json) return Status::OK();
  if (bad > kMaxBadListed) out << "... and " << (bad - kMaxBadListed) << " more damaged files\n";
  if (bad) {
    return Status::Corruption(store_path + ": " + std::to_string(bad) + " of " +
                              std::to_string(files) + " files are damaged");
  }
  if (!quiet) out << "verified " << files << " files (" << FormatBytes(bytes) << "): all OK\n";
  return Status::OK();
}

}  // namespace dsfs
