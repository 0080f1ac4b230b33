#include "backend/s3/s3_kv_cache.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "backend/s3/s3_cache_dir.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace dsfs {
namespace {

bool AllDigits(std::string_view s, size_t n) {
  return s.size() == n &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool IsStoreId(std::string_view s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool PreadAll(int fd, char* dst, uint64_t n, uint64_t off) {
  while (n > 0) {
    ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    dst += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t w = ::write(fd, bytes.data(), bytes.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}

std::string UidName(uid_t uid) { return "uid " + std::to_string(uid); }

// Whether a directory may hold what the cache trusts: its owner is this user or root, and no
// one else may replace its entries (not writable by group or others, or sticky).
bool TrustedDirectory(const struct stat& st, uid_t me) {
  return S_ISDIR(st.st_mode) && (st.st_uid == me || st.st_uid == 0) &&
         (!(st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_mode & S_ISVTX));
}

// Checks the path to a cache directory: a symlink on the way must be this user's or root's and
// sit in a trusted directory, and every directory the path resolves to on the way down must be
// trusted, so no other user can swap what the path names between this check and its use. The
// directories that do not exist yet are not checked (this user creates them). An empty string
// if the path is safe; else what is wrong.
std::string UntrustedOnTheWay(const std::string& path, uid_t me) {
  std::filesystem::path abs = std::filesystem::absolute(path);
  std::filesystem::path prefix = abs.root_path();
  std::error_code ec;
  for (const auto& part : abs.relative_path()) {
    if (part.empty() || part == ".") continue;
    std::filesystem::path next = prefix / part;
    struct stat lst, parent;
    if (::lstat(next.c_str(), &lst) != 0) break;  // from here on, created by this user
    if (S_ISLNK(lst.st_mode)) {
      if ((lst.st_uid != me && lst.st_uid != 0) || ::stat(prefix.c_str(), &parent) != 0 ||
          !TrustedDirectory(parent, me) ||
          ((parent.st_mode & (S_IWGRP | S_IWOTH)) && parent.st_uid != me && parent.st_uid != 0)) {
        return next.string() + " is a symlink another user could have made or replaced";
      }
    }
    std::filesystem::path real = std::filesystem::canonical(next, ec);
    if (ec) break;
    // Every directory the real path passes through.
    std::filesystem::path walk = real.root_path();
    for (const auto& r : real.relative_path()) {
      walk /= r;
      struct stat st;
      if (::stat(walk.c_str(), &st) != 0) break;
      // The cache directory itself is checked by Open (its own rules); all above it here.
      if (S_ISDIR(st.st_mode) && !TrustedDirectory(st, me) && !(walk == real && next == abs)) {
        return walk.string() +
               " belongs to another user or is writable by others (they could replace what is "
               "below)";
      }
    }
    prefix = next;
  }
  return "";
}

}  // namespace

Status S3CacheRoot::Open(const std::string& cache_dir, const std::string& name) {
  const std::string fix = ": choose another cache_dir= (or cache_disk=0 for none)";
  const uid_t me = ::geteuid();
  if (std::string why = UntrustedOnTheWay(cache_dir, me); !why.empty()) {
    return Status::InvalidArgument(cache_dir + ": not a safe S3 disk cache directory: " + why +
                                   fix);
  }
  std::error_code ec;
  if (!std::filesystem::exists(cache_dir, ec)) {
    std::filesystem::path p(cache_dir);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (::mkdir(cache_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::IOError(
          cache_dir + ": cannot create the S3 disk cache directory: " + std::strerror(errno));
    }
  }
  const UniqueFd dir(::open(cache_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    return Status::IOError(cache_dir +
                           ": cannot open the S3 disk cache directory: " + std::strerror(errno));
  }
  struct stat st = {};
  if (::fstat(dir.get(), &st) != 0 || (st.st_uid != me && st.st_uid != 0)) {
    return Status::InvalidArgument(cache_dir + ": the S3 disk cache directory belongs to " +
                                   UidName(st.st_uid) + ", not to this user" + fix);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
    return Status::InvalidArgument(cache_dir +
                                   ": the S3 disk cache directory is writable by other users "
                                   "and not sticky (anyone could replace what is in it)" +
                                   fix);
  }
  path_ = cache_dir + "/" + name;
  // A `dsfs cache gc` that removed the directory while this waited for its lock: made again.
  for (int attempt = 0;; ++attempt) {
    Status s = OpenAndLock(dir.get(), name, me, fix);
    if (s.code() != Status::Code::kBusy || attempt == 2) return s;
    fd_.reset();
  }
}

Status S3CacheRoot::OpenAndLock(int dir, const std::string& name, uid_t me,
                                const std::string& fix) {
  struct stat st = {};
  if (::mkdirat(dir, name.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    return Status::IOError(path_ + ": cannot create the S3 disk cache: " + std::strerror(err));
  }
  fd_.reset(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  int err = errno;
  if (!fd_) {
    if (err == ELOOP || err == ENOTDIR) {
      return Status::InvalidArgument(path_ +
                                     ": is a symlink or not a directory, not a dsfs disk cache "
                                     "(remove it)" +
                                     fix);
    }
    return Status::IOError(path_ + ": cannot open the S3 disk cache: " + std::strerror(err));
  }
  if (::fstat(fd_.get(), &st) != 0 || st.st_uid != me) {
    return Status::InvalidArgument(path_ + ": belongs to " + UidName(st.st_uid) +
                                   ", not to this user (remove it)" + fix);
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return Status::InvalidArgument(path_ + ": writable by other users (remove it)" + fix);
  }
  // Held for the mount's life: `dsfs cache gc` never removes a cache in use.
  int lock = -1;
  Status s = LockS3CacheForMount(fd_.get(), path_, &lock);
  lock_fd_.reset(lock);
  return s;
}

bool S3CacheRoot::ReadIndex(std::string* bytes) const {
  const UniqueFd fd(::openat(fd_.get(), "index", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return false;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kS3MaxIndexBytes) {
    return false;
  }
  bytes->resize(static_cast<size_t>(st.st_size));
  return PreadAll(fd.get(), bytes->data(), bytes->size(), 0);
}

void S3CacheRoot::WriteIndex(std::string_view bytes) const {
  const std::string tmp = "index.tmp-" + std::to_string(::getpid());
  const int dir = fd_.get();
  ::unlinkat(dir, tmp.c_str(), 0);
  UniqueFd fd(
      ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const bool ok = WriteAll(fd.get(), bytes);
  fd.reset();
  if (!ok || ::renameat(dir, tmp.c_str(), dir, "index") != 0) ::unlinkat(dir, tmp.c_str(), 0);
}

void S3CacheRoot::RemoveOtherStores(const std::string& keep_id) const {
  const int dir = fd_.get();
  for (const std::string& name : CacheDirEntries(dir)) {
    struct stat st;
    if (!IsStoreId(name) || name == keep_id) continue;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      continue;
    }
    {
      const UniqueFd sub(
          ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) continue;
      for (const std::string& file : CacheDirEntries(sub.get())) {
        struct stat fst;
        if (AllDigits(file, 6) &&
            ::fstatat(sub.get(), file.c_str(), &fst, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(fst.st_mode)) {
          ::unlinkat(sub.get(), file.c_str(), 0);
        }
      }
    }
    ::unlinkat(dir, name.c_str(), AT_REMOVEDIR);  // fails, and leaves it, if anything else is in it
  }
}

S3DiskCache::~S3DiskCache() {
  for (size_t i = 0; i < object_sizes_.size(); ++i) {
    if (fds_[i] >= 0) ::close(fds_[i]);
  }
}

Status S3DiskCache::Open(const S3CacheRoot& root, const std::string& id,
                         const std::vector<uint64_t>& object_sizes, uint64_t budget_bytes) {
  dir_ = root.path() + "/" + id;
  budget_ = budget_bytes;
  object_sizes_ = object_sizes;
  if (::mkdirat(root.fd(), id.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError(dir_ + ": cannot create the S3 disk cache: " + std::strerror(errno));
  }
  dir_fd_.reset(::openat(root.fd(), id.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd_) {
    return Status::IOError(dir_ + ": cannot open the S3 disk cache: " + std::strerror(errno));
  }
  const size_t objects = object_sizes_.size();
  fds_ = std::make_unique<std::atomic<int>[]>(objects);
  for (size_t i = 0; i < objects; ++i) fds_[i].store(-1);
  // One descriptor per cache file in use: room for all of them beside the daemon's own.
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < objects + 1024) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, objects + 1024);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Files are opened when first used (a store of 1 TB has ~16,000 data objects), but what
  // earlier mounts left is found now: every allocated block joins the LRU.
  for (const std::string& name : CacheDirEntries(dir_fd_.get())) {
    if (!AllDigits(name, 6)) continue;
    const uint64_t i = std::stoull(name);
    if (i >= objects) continue;
    int fd = Fd(i);
    if (fd < 0) continue;
    const off_t size = static_cast<off_t>(object_sizes_[i]);
    for (off_t pos = 0; pos < size;) {
      off_t data = ::lseek(fd, pos, SEEK_DATA);
      if (data < 0 || data >= size) break;
      off_t hole = ::lseek(fd, data, SEEK_HOLE);
      if (hole < 0 || hole > size) hole = size;
      for (uint64_t b = static_cast<uint64_t>(data) / kS3BlockBytes;
           b * kS3BlockBytes < static_cast<uint64_t>(hole); ++b) {
        Touch(BlockId{static_cast<uint32_t>(i), static_cast<uint32_t>(b)});
      }
      pos = hole;
    }
  }
  return Status::OK();
}

bool S3DiskCache::Read(uint32_t object, uint64_t offset, uint64_t length, uint64_t sum,
                       std::string* out) {
  if (object >= object_sizes_.size() || offset > object_sizes_[object] ||
      length > object_sizes_[object] - offset) {
    return false;
  }
  int fd = Fd(object);
  if (fd < 0) return false;
  out->resize(length);
  if (!PreadAll(fd, out->data(), length, offset)) return false;
  if (XXH3_64bits(out->data(), out->size()) != sum) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t b = offset / kS3BlockBytes; b * kS3BlockBytes < offset + length; ++b) {
    auto it = where_.find(BlockId{object, static_cast<uint32_t>(b)});
    if (it != where_.end()) lru_.splice(lru_.end(), lru_, it->second);
  }
  return true;
}

bool S3DiskCache::Has(uint32_t object, uint64_t block) {
  if (block > UINT32_MAX) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return where_.count(BlockId{object, static_cast<uint32_t>(block)}) != 0;
}

bool S3DiskCache::ReadRaw(uint32_t object, uint64_t offset, uint64_t length, char* dst) {
  if (object >= object_sizes_.size() || offset > object_sizes_[object] ||
      length > object_sizes_[object] - offset) {
    return false;
  }
  int fd = Fd(object);
  return fd >= 0 && PreadAll(fd, dst, length, offset);
}

void S3DiskCache::Write(uint32_t object, uint64_t offset, std::string_view bytes) {
  if (budget_ < kS3BlockBytes || object >= object_sizes_.size() || offset > object_sizes_[object] ||
      bytes.size() > object_sizes_[object] - offset) {
    return;
  }
  int fd = Fd(object);
  if (fd < 0) return;
  ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
  if (n != static_cast<ssize_t>(bytes.size())) return;  // disk full: a fetch next time
  // Written back now, not in 30 s: dirty pages are charged to the mount's memory cgroup and
  // cannot be reclaimed until they are written, and a cgroup v1 does not throttle its writers
  // (a first pass over an S3 store in a 48 MB cgroup left tens of MB dirty and the daemon was
  // OOM-killed). Asynchronous: the fetch does not wait for the disk.
  ::sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes.size()),
                    SYNC_FILE_RANGE_WRITE);
  std::vector<BlockId> evict;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t b = offset / kS3BlockBytes; b * kS3BlockBytes < offset + bytes.size(); ++b) {
      Touch(BlockId{object, static_cast<uint32_t>(b)});
    }
    while (where_.size() * kS3BlockBytes > budget_ && !lru_.empty()) {
      evict.push_back(lru_.front());
      where_.erase(lru_.front());
      lru_.pop_front();
    }
  }
  for (BlockId blk : evict) {
    int efd = Fd(blk.object);
    if (efd < 0) continue;
    ::fallocate(efd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(uint64_t{blk.block} * kS3BlockBytes),
                static_cast<off_t>(kS3BlockBytes));
    evicted_.fetch_add(1, std::memory_order_relaxed);
  }
}

int S3DiskCache::Fd(uint64_t object) {
  if (object >= object_sizes_.size()) return -1;
  int fd = fds_[object].load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  char name[32];
  std::snprintf(name, sizeof(name), "%06llu", static_cast<unsigned long long>(object));
  // Never through a symlink, never anything but a regular file (a FIFO would block the open).
  fd = ::openat(dir_fd_.get(), name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  struct stat st;
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(fd);
    fd = -1;
    errno = EINVAL;
  }
  if (fd < 0) {
    const int err = errno;
    std::call_once(warned_, [&] {
      Log()->warn("{}/{}: S3 disk cache unusable ({}); fetching without it", dir_, name,
                  err == ELOOP ? "a symlink, not followed" : std::strerror(err));
    });
    return -1;
  }
  int expected = -1;
  if (!fds_[object].compare_exchange_strong(expected, fd)) {
    ::close(fd);  // another thread opened it first
    return expected;
  }
  return fd;
}

void S3DiskCache::Touch(BlockId blk) {
  auto it = where_.find(blk);
  if (it != where_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
  } else {
    lru_.push_back(blk);
    where_[blk] = std::prev(lru_.end());
  }
}

}  // namespace dsfs
