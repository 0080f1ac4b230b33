#include "backend/s3/s3_cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "common/unique_fd.h"

namespace dsfs {
namespace {

constexpr size_t kMaxMetaBytes = 64 << 10;

bool IsHex16(std::string_view s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}
bool IsCacheName(std::string_view s) {
  return s.size() == 19 && s.substr(0, 3) == "s3-" && IsHex16(s.substr(3));
}
bool IsObjectFileName(std::string_view s) {
  return s.size() == 6 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
// The other names a cache directory of dsfs's holds (S3CacheRoot's and this file's).
bool IsCacheFileName(std::string_view s) {
  return s == "index" || s == kS3CacheMetaName || s.rfind("index.tmp-", 0) == 0 ||
         s.rfind("meta.tmp-", 0) == 0;
}

// A subdirectory `name` of `dir_fd` that is this user's, opened without following a symlink;
// none otherwise.
UniqueFd OpenOwnDir(int dir_fd, const std::string& name, struct stat* st) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd && (::fstat(fd.get(), st) != 0 || !S_ISDIR(st->st_mode) || st->st_uid != ::geteuid())) {
    fd.reset();
  }
  return fd;
}

// lstat of `name` in `dir_fd`: a regular file of this user's.
bool OwnRegularFile(int dir_fd, const std::string& name, struct stat* st) {
  return ::fstatat(dir_fd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode) &&
         st->st_uid == ::geteuid();
}

uint64_t Allocated(const struct stat& st) { return static_cast<uint64_t>(st.st_blocks) * 512; }
// What unlinking the file would free: nothing while another hard link keeps its blocks.
uint64_t Freeable(const struct stat& st) { return st.st_nlink == 1 ? Allocated(st) : 0; }

// Bytes the store directory `id_fd` takes (its NNNNNN files), and what removing them would free.
void StoreBytes(int id_fd, uint64_t* bytes, uint64_t* freeable) {
  for (const auto& f : CacheDirEntries(id_fd)) {
    struct stat st;
    if (IsObjectFileName(f) && OwnRegularFile(id_fd, f, &st)) {
      *bytes += Allocated(st);
      *freeable += Freeable(st);
    }
  }
}

// Unlinks `name` of `dir_fd` if it is a regular file of this user's; the bytes that freed: its
// blocks if that was its last link (as the inode says after the unlink), else nothing.
uint64_t UnlinkOwnFile(int dir_fd, const std::string& name) {
  const UniqueFd fd(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return 0;
  struct stat st;
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      ::unlinkat(dir_fd, name.c_str(), 0) == 0 && ::fstat(fd.get(), &st) == 0 && st.st_nlink == 0) {
    return Allocated(st);
  }
  return 0;
}

// Removes the store directory `id` of `dir_fd` (its NNNNNN files of this user's, then the
// directory if that left it empty); the bytes freed.
uint64_t RemoveStore(int dir_fd, const std::string& id) {
  struct stat st;
  uint64_t freed = 0;
  {
    const UniqueFd id_fd = OpenOwnDir(dir_fd, id, &st);
    if (!id_fd) return 0;
    for (const auto& f : CacheDirEntries(id_fd.get())) {
      if (IsObjectFileName(f)) freed += UnlinkOwnFile(id_fd.get(), f);
    }
  }
  ::unlinkat(dir_fd, id.c_str(), AT_REMOVEDIR);  // fails, and leaves it, if anything else is in it
  return freed;
}

bool ReadMeta(int dir_fd, S3CacheMeta* meta, time_t* mtime) {
  const UniqueFd fd(
      ::openat(dir_fd, kS3CacheMetaName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return false;
  struct stat st;
  std::string text;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      static_cast<uint64_t>(st.st_size) > kMaxMetaBytes) {
    return false;
  }
  text.resize(static_cast<size_t>(st.st_size));
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), 0);
  if (n < 0) return false;
  text.resize(static_cast<size_t>(n));
  *mtime = st.st_mtime;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    // Shown on a terminal: nothing that could drive it.
    for (char& c : line) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "url") meta->url = value;
    if (key == "endpoint") meta->endpoint = value;
    if (key == "id" && IsHex16(value)) meta->id = value;
  }
  return true;
}

// Whether a mount holds the cache's lock. With `keep_fd`, a lock not held is taken
// exclusively and its descriptor kept there (none if there is no lock file: an older dsfs
// made the cache, or it is being made; then it is not known to be in use).
bool HeldByMount(int dir_fd, UniqueFd* keep_fd) {
  UniqueFd fd(::openat(dir_fd, kS3CacheLockName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return false;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return true;  // EWOULDBLOCK: a mount has it
  if (keep_fd) *keep_fd = std::move(fd);
  return false;
}

Status OpenCacheDir(const std::string& cache_dir, UniqueFd* fd) {
  fd->reset(::open(cache_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd->valid()) return Status::OK();
  const int err = errno;
  if (err == ENOENT) return Status::NotFound(cache_dir + ": no such cache directory");
  return Status::IOError(cache_dir + ": cannot open the cache directory: " + std::strerror(err));
}

S3CacheEntry Describe(int dir_fd, const std::string& name, const struct stat& dir_st) {
  S3CacheEntry e;
  e.name = name;
  e.last_use = dir_st.st_mtime;
  time_t meta_mtime = 0;
  if (ReadMeta(dir_fd, &e.meta, &meta_mtime)) e.last_use = meta_mtime;
  for (const auto& f : CacheDirEntries(dir_fd)) {
    struct stat st;
    if (IsHex16(f)) {
      const UniqueFd id_fd = OpenOwnDir(dir_fd, f, &st);
      if (!id_fd) continue;
      StoreBytes(id_fd.get(), &e.bytes, &e.freeable_bytes);
      if (!e.meta.id.empty() && f != e.meta.id) e.stale.push_back(f);
    } else if ((IsCacheFileName(f) || f == kS3CacheLockName) && OwnRegularFile(dir_fd, f, &st)) {
      e.bytes += Allocated(st);
      e.freeable_bytes += Freeable(st);
    }
  }
  e.mounted = HeldByMount(dir_fd, nullptr);
  return e;
}

}  // namespace

std::vector<std::string> CacheDirEntries(int dir_fd) {
  std::vector<std::string> names;
  UniqueFd fd(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!fd) return names;
  DIR* d = ::fdopendir(fd.get());
  if (d == nullptr) return names;
  fd.release();  // closedir closes it
  ::rewinddir(d);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Status LockS3CacheForMount(int dir_fd, const std::string& dir_path, int* lock_fd) {
  *lock_fd = -1;
  UniqueFd fd(::openat(dir_fd, kS3CacheLockName,
                       O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd && errno == ENOENT) return Status::Busy(dir_path + ": removed while mounting");
  if (!fd) {
    return Status::IOError(dir_path + "/" + kS3CacheLockName +
                           ": cannot open the S3 disk cache's lock: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::IOError(dir_path + "/" + kS3CacheLockName + ": not a regular file (remove it)");
  }
  // A gc holds it only while it removes the cache: short.
  while (::flock(fd.get(), LOCK_SH) != 0) {
    if (errno != EINTR) {
      const int err = errno;
      return Status::IOError(dir_path + "/" + kS3CacheLockName +
                             ": cannot lock the S3 disk cache: " + std::strerror(err));
    }
  }
  struct stat dir_st;
  if (::fstat(fd.get(), &st) != 0 || st.st_nlink == 0 || ::fstat(dir_fd, &dir_st) != 0 ||
      dir_st.st_nlink == 0) {
    return Status::Busy(dir_path + ": removed by dsfs cache gc while mounting");
  }
  *lock_fd = fd.release();
  return Status::OK();
}

void WriteS3CacheMeta(int dir_fd, const S3CacheMeta& meta) {
  const std::string tmp = std::string("meta.tmp-") + std::to_string(::getpid());
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  UniqueFd fd(
      ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  auto clean = [](std::string v) {
    for (char& c : v) {
      if (c == '\n' || c == '\r') c = '?';
    }
    return v;
  };
  const std::string text = "url=" + clean(meta.url) + "\nendpoint=" + clean(meta.endpoint) +
                           "\nid=" + clean(meta.id) + "\n";
  const bool ok = ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd.reset();
  if (!ok || ::renameat(dir_fd, tmp.c_str(), dir_fd, kS3CacheMetaName) != 0) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
  }
}

Status ListS3Caches(const std::string& cache_dir, std::vector<S3CacheEntry>* out) {
  out->clear();
  UniqueFd root;
  DSFS_RETURN_IF_ERROR(OpenCacheDir(cache_dir, &root));
  for (const auto& name : CacheDirEntries(root.get())) {
    if (!IsCacheName(name)) continue;
    struct stat st;
    const UniqueFd fd = OpenOwnDir(root.get(), name, &st);
    if (fd) out->push_back(Describe(fd.get(), name, st));
  }
  return Status::OK();
}

namespace {

// What removing the stale stores `stale` of cache directory `fd` frees, or would.
uint64_t RemoveStaleStores(int fd, const std::vector<std::string>& stale, bool dry_run) {
  uint64_t freed = 0;
  for (const auto& id : stale) {
    if (!dry_run) {
      freed += RemoveStore(fd, id);
      continue;
    }
    struct stat st;
    const UniqueFd id_fd = OpenOwnDir(fd, id, &st);
    uint64_t bytes = 0;
    if (id_fd) StoreBytes(id_fd.get(), &bytes, &freed);
  }
  return freed;
}

// Removes the dsfs files of cache directory `name` (open at `fd`) of `root`, then the
// directory; the bytes freed.
uint64_t RemoveCache(int root, const std::string& name, int fd, S3CacheGcResult* r) {
  uint64_t freed = 0;
  for (const auto& f : CacheDirEntries(fd)) {
    if (IsHex16(f)) {
      freed += RemoveStore(fd, f);
    } else if (IsCacheFileName(f)) {
      freed += UnlinkOwnFile(fd, f);
    }
  }
  freed += UnlinkOwnFile(fd, kS3CacheLockName);
  if (::unlinkat(root, name.c_str(), AT_REMOVEDIR) != 0) {
    r->action = "left";
    r->why += "; its dsfs files removed, but it holds other files (not dsfs's): kept";
  }
  return freed;
}

// gc of the cache directory `name` of `root` (open at `fd`, `st` its attributes) at `now`.
S3CacheGcResult GcCache(int root, const std::string& name, int fd, const struct stat& st,
                        const S3CacheGcOptions& options, time_t now) {
  S3CacheGcResult r;
  r.name = name;
  UniqueFd lock;
  if (HeldByMount(fd, options.dry_run ? nullptr : &lock)) {
    r.action = "in use";
    r.why = "mounted now";
    return r;
  }
  // From here on the lock (if the cache has one) is this process's: no mount starts using
  // the cache until it is released (a mount waiting for it finds the directory gone).
  const S3CacheEntry e = Describe(fd, name, st);
  const int64_t age_days = (now - e.last_use) / 86400;
  if (now - e.last_use > int64_t{options.keep_days} * 86400) {
    r.action = options.dry_run ? "would remove" : "removed";
    r.why = "unused for " + std::to_string(age_days) + " days";
    r.freed_bytes = options.dry_run ? e.freeable_bytes : RemoveCache(root, name, fd, &r);
  } else if (!e.stale.empty()) {
    r.action = options.dry_run ? "would remove stale stores" : "removed stale stores";
    r.why = std::to_string(e.stale.size()) + " store(s) pushed over " +
            (e.meta.url.empty() ? std::string("the URL") : e.meta.url) + " since";
    r.freed_bytes = RemoveStaleStores(fd, e.stale, options.dry_run);
  } else {
    r.action = "kept";
    r.why = "used " + std::to_string(age_days) + " days ago";
  }
  return r;
}

}  // namespace

Status GcS3Caches(const std::string& cache_dir, const S3CacheGcOptions& options,
                  std::vector<S3CacheGcResult>* out) {
  out->clear();
  if (options.keep_days < 0) return Status::InvalidArgument("--keep-days must be 0 or more");
  UniqueFd root;
  DSFS_RETURN_IF_ERROR(OpenCacheDir(cache_dir, &root));
  const time_t now = ::time(nullptr);
  for (const auto& name : CacheDirEntries(root.get())) {
    if (!IsCacheName(name)) continue;
    struct stat st;
    const UniqueFd fd = OpenOwnDir(root.get(), name, &st);
    if (fd) out->push_back(GcCache(root.get(), name, fd.get(), st, options, now));
  }
  return Status::OK();
}

}  // namespace dsfs
