#include "backend/kv_store.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/lmdb_store.h"
#include "backend/rocksdb_store.h"
#include "backend/s3_store.h"
#include "common/log.h"
#include "common/system.h"

namespace dsfs {

void WillNeedMapped(std::string_view range) {
  uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(range.data()) + range.size();
  constexpr uintptr_t kStep = 128 << 10;  // the default readahead window
  for (uintptr_t p = begin; p < end; p += kStep) {
    ::madvise(reinterpret_cast<void*>(p), std::min(kStep, end - p), MADV_WILLNEED);
  }
}

void WillNeedFile(int fd, uint64_t offset, uint64_t length) {
  constexpr uint64_t kStep = 128 << 10;  // see WillNeedMapped
  for (uint64_t off = offset; off < offset + length; off += kStep) {
    ::posix_fadvise(fd, static_cast<off_t>(off),
                    static_cast<off_t>(std::min(kStep, offset + length - off)),
                    POSIX_FADV_WILLNEED);
  }
}

bool IsRemoteStore(std::string_view source) { return IsS3Url(source); }

Status DetectBackend(const std::string& path, std::string* backend) {
  if (IsS3Url(path)) {
    *backend = "s3";
    return Status::OK();
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  if (S_ISREG(st.st_mode) && LooksLikeLmdb(path)) {
    *backend = "lmdb";
  } else if (S_ISDIR(st.st_mode) && LooksLikeRocksdb(path)) {
    *backend = "rocksdb";
  } else {
    return Status::InvalidArgument(path + ": not a dsfs store");
  }
  return Status::OK();
}

Status OpenKvReader(const std::string& path, const KvReaderOptions& options,
                    std::unique_ptr<KvReader>* reader) {
  std::string backend;
  DSFS_RETURN_IF_ERROR(DetectBackend(path, &backend));
  if (backend == "s3") return OpenS3Reader(path, options, reader);
  if (backend == "rocksdb") return OpenRocksdbReader(path, options, reader);
  return OpenLmdbReader(path, options, reader);
}

Status CheckKvStructure(const std::string& path, std::optional<std::chrono::milliseconds> timeout) {
  std::string backend;
  DSFS_RETURN_IF_ERROR(DetectBackend(path, &backend));
  if (backend != "lmdb") return Status::OK();
  return CheckLmdbTree(path, timeout);
}

int LockTemporary(const std::string& tmp) {
  struct stat st;
  if (::stat(tmp.c_str(), &st) != 0) return -1;
  // Read-write where it can be: NFS emulates flock with a write lock, which needs it.
  int fd = ::open(tmp.c_str(), (S_ISDIR(st.st_mode) ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

namespace {

// A directory a RocksDB writer left: the database, or a writer's staging area before it.
bool LooksLikeRocksdbTemporary(const std::string& dir) {
  if (LooksLikeRocksdb(dir)) return true;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("dsfs-staging-", 0) == 0 && e.is_directory(ec)) return true;
  }
  return false;
}

}  // namespace

void RemoveDeadTemporaries(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  std::string stem = p.filename().string() + ".tmp-";
  for (const auto& e :
       std::filesystem::directory_iterator(p.parent_path().empty() ? "." : p.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + stem.size(), &end, 10);
    // A writer that is alive still writes it (an exited one whose parent has not waited yet,
    // a zombie, writes nothing: common/system.h's one rule).
    if (pid <= 0 || *end != '\0' || ProcessAlive(static_cast<pid_t>(pid))) continue;
    const std::string tmp = e.path().string();
    struct stat st;
    if (::lstat(tmp.c_str(), &st) != 0) continue;
    // An LMDB writer killed before its first page leaves an empty file: nothing to lose.
    const bool lmdb = S_ISREG(st.st_mode) && (st.st_size == 0 || LooksLikeLmdb(tmp));
    if (!lmdb && !(S_ISDIR(st.st_mode) && LooksLikeRocksdbTemporary(tmp))) continue;
    // Held while removed: a writer elsewhere that holds it is alive; one that cannot be
    // locked (no flock here) is left too.
    int lock = LockTemporary(tmp);
    if (lock < 0) continue;
    if (lmdb) {
      ::unlink(tmp.c_str());
    } else {
      std::filesystem::remove_all(e.path(), ec);
    }
    ::close(lock);
  }
}

Status CheckReplaceable(const std::string& path, const KvWriterOptions& options,
                        StoreDestination* dest) {
  dest->path = path;
  dest->found = {};
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno(errno, path);
  }
  if (!options.overwrite) {
    return Status::Exists(path + ": already exists (use --force to overwrite)");
  }
  // --force replaces a store, never what a user keeps there: name what is there instead.
  std::string what;
  std::error_code ec;
  bool empty_dir = false;
  if (S_ISLNK(st.st_mode)) {
    what = "a symlink";
  } else if (S_ISDIR(st.st_mode)) {
    if (std::filesystem::is_empty(path, ec) && !ec) {
      empty_dir = true;
    } else if (!LooksLikeRocksdb(path) || (options.is_store && !options.is_store(path))) {
      what = "a directory that is not a dsfs store";
    }
  } else if (!S_ISREG(st.st_mode)) {
    what = "a special file";
  } else if (!LooksLikeLmdb(path) || (options.is_store && !options.is_store(path))) {
    what = "a file that is not a dsfs store";
  }
  if (!what.empty()) {
    return Status::InvalidArgument(path + ": " + what +
                                   " is there (--force replaces only a dsfs store or an empty "
                                   "directory)");
  }
  dest->found = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                 static_cast<uint32_t>(st.st_mode), empty_dir};
  return Status::OK();
}

namespace {

void SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Gives `to` the owner, group, permission bits and extended attributes (ACLs are
// system.posix_acl_* attributes) of `from`, of the same file type; for a directory its files
// get the owner too. An owner or mode that cannot be kept is an error (the new version would
// be readable by others, or no longer by its group); an attribute the filesystem refuses is
// logged.
Status CopyAttributes(const std::string& from, const std::string& to) {
  struct stat old, now;
  if (::lstat(from.c_str(), &old) != 0) return Status::FromErrno(errno, from);
  if (::lstat(to.c_str(), &now) != 0) return Status::FromErrno(errno, to);
  if ((old.st_mode & S_IFMT) != (now.st_mode & S_IFMT)) return Status::OK();
  if (old.st_uid != now.st_uid || old.st_gid != now.st_gid) {
    if (S_ISDIR(old.st_mode)) {
      std::error_code ec;
      for (const auto& e : std::filesystem::recursive_directory_iterator(to, ec)) {
        if (::lchown(e.path().c_str(), old.st_uid, old.st_gid) != 0) {
          return Status::FromErrno(errno,
                                   "cannot give " + e.path().string() + " the owner of " + from);
        }
      }
    }
    if (::lchown(to.c_str(), old.st_uid, old.st_gid) != 0) {
      return Status::FromErrno(errno, "cannot give the new version of " + from + " its owner (" +
                                          std::to_string(old.st_uid) + ":" +
                                          std::to_string(old.st_gid) + ")");
    }
  }
  // After chown, which clears set-id bits.
  if (::chmod(to.c_str(), old.st_mode & 07777) != 0) {
    return Status::FromErrno(errno, "cannot give the new version of " + from + " its mode");
  }
  ssize_t len = ::llistxattr(from.c_str(), nullptr, 0);
  if (len <= 0) return Status::OK();
  std::string names(static_cast<size_t>(len), '\0');
  len = ::llistxattr(from.c_str(), names.data(), names.size());
  if (len < 0) return Status::OK();
  names.resize(static_cast<size_t>(len));
  for (size_t pos = 0; pos < names.size();) {
    std::string name = names.c_str() + pos;
    pos += name.size() + 1;
    ssize_t n = ::lgetxattr(from.c_str(), name.c_str(), nullptr, 0);
    if (n < 0) continue;
    std::string value(static_cast<size_t>(n), '\0');
    n = ::lgetxattr(from.c_str(), name.c_str(), value.data(), value.size());
    if (n < 0) continue;
    value.resize(static_cast<size_t>(n));
    if (::lsetxattr(to.c_str(), name.c_str(), value.data(), value.size(), 0) != 0) {
      Log()->warn("{}: extended attribute {} not kept by the new version: {}", from, name,
                  std::strerror(errno));
    }
  }
  return Status::OK();
}

}  // namespace

Status MoveStoreIntoPlace(const std::string& tmp, const StoreDestination& dest) {
  const std::string& path = dest.path;
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  // A directory's entries first (a file was synced by its writer).
  if (std::filesystem::is_directory(tmp)) SyncDir(tmp);
  struct stat st;
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return Status::FromErrno(errno, path);
  if (exists && (dest.found.ino == 0 || static_cast<uint64_t>(st.st_dev) != dest.found.dev ||
                 static_cast<uint64_t>(st.st_ino) != dest.found.ino)) {
    return Status::Exists(path +
                          ": appeared or changed while the store was written; left as it "
                          "is (nothing replaced)");
  }
  if (!exists) {
    int rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      // A filesystem without RENAME_NOREPLACE: checked just above, which leaves a short race.
      rc = ::rename(tmp.c_str(), path.c_str());
    }
    if (rc != 0) return Status::FromErrno(errno, "renaming " + tmp + " to " + path);
  } else if (dest.found.empty_dir) {
    // Never swapped and removed whole: what was put in it while the store was written stays.
    // A directory replaces an empty one atomically (rename refuses a non-empty one); a file
    // takes its place once rmdir, which refuses a non-empty one too, removed it.
    DSFS_RETURN_IF_ERROR(CopyAttributes(path, tmp));
    const bool tmp_is_dir = std::filesystem::is_directory(tmp);
    int rc = tmp_is_dir ? ::rename(tmp.c_str(), path.c_str()) : ::rmdir(path.c_str());
    if (rc != 0 && (errno == ENOTEMPTY || errno == EEXIST)) {
      return Status::Exists(path +
                            ": files were put in this empty directory while the store was "
                            "written; left as it is (nothing replaced)");
    }
    if (rc != 0) return Status::FromErrno(errno, "replacing " + path);
    if (!tmp_is_dir) {
      rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
      if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) rc = ::rename(tmp.c_str(), path.c_str());
      if (rc != 0) {
        int err = errno;
        ::mkdir(path.c_str(), st.st_mode & 07777);  // the empty directory back
        return Status::FromErrno(err, "renaming " + tmp + " to " + path);
      }
    }
  } else {
    DSFS_RETURN_IF_ERROR(CopyAttributes(path, tmp));
    if (!S_ISDIR(st.st_mode) && !S_ISDIR(dest.found.mode) &&
        std::filesystem::is_regular_file(tmp)) {
      // File over file: one rename.
      if (::rename(tmp.c_str(), path.c_str()) != 0) {
        return Status::FromErrno(errno, "renaming " + tmp + " to " + path);
      }
    } else {
      // A directory on either side: swapped atomically (the path always holds a complete
      // store), then the old one, now at `tmp`, is removed.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) {
        return Status::FromErrno(errno, "replacing " + path);
      }
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
    }
  }
  SyncDir(parent);
  return Status::OK();
}

ValueSizing BackendValueSizing(std::string_view backend) {
  return backend == "lmdb" ? LmdbValueSizing() : ValueSizing{};
}

Status NewKvWriter(const std::string& path, std::string_view backend,
                   const KvWriterOptions& options, std::unique_ptr<KvWriter>* writer) {
  if (IsS3Url(path) || backend == "s3") {
    if (!IsS3Url(path) || backend != "s3") {
      return Status::InvalidArgument(path + ": the s3 backend writes to s3://BUCKET/PREFIX, and an s3:// destination takes only the s3 backend");
    }
    return NewS3Writer(path, options, S3WriterOptions{}, writer);
  }
  const std::string name = std::filesystem::path(path).filename().string();
  if (name.empty() || name == "." || name == "..") {
    return Status::InvalidArgument("'" + path + "': a store needs a file name (as in data.dsfs)");
  }
  // The store is built beside `path` and renamed into place: name a missing directory as the
  // user wrote it, not by the temporary name.
  std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat st;
  if (!dir.empty() && ::stat(dir.c_str(), &st) != 0) {
    return Status::IOError(dir + ": " + std::strerror(errno) + " (the store's directory)");
  }
  if (!dir.empty() && !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": not a directory (the store's directory)");
  }
  // Built as PATH.tmp-PID: a directory it cannot be made in is named as such, not by that name.
  const std::string in = dir.empty() ? "." : dir;
  if (::faccessat(AT_FDCWD, in.c_str(), W_OK | X_OK, AT_EACCESS) != 0 && errno != ENOSYS) {
    return Status::FromErrno(errno, in + ": cannot create the store " + path + " there");
  }
  RemoveDeadTemporaries(path);
  if (backend == "lmdb") return NewLmdbWriter(path, options, writer);
  if (backend == "rocksdb") return NewRocksdbWriter(path, options, writer);
  return Status::InvalidArgument("unknown backend '" + std::string(backend) +
                                 "' (known: lmdb, rocksdb, s3)");
}

Status NewKvUpdater(const std::string& path_in, std::unique_ptr<KvWriter>* writer) {
  if (IsS3Url(path_in)) {
    return Status::NotSupported(path_in + ": a store in S3 is not updated in place (add to the local store, then push it again)");
  }
  // Through a symlink, the store it names is updated (an LMDB update renames its new version
  // over the store: over the link, it would replace the link and leave the store as it was).
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path_in.c_str(), nullptr),
                                                   &std::free);
  const std::string path = real ? std::string(real.get()) : path_in;
  std::string backend;
  DSFS_RETURN_IF_ERROR(DetectBackend(path, &backend));
  if (backend == "rocksdb") return NewRocksdbUpdater(path, writer);
  return NewLmdbUpdater(path, writer);
}

uint64_t StoreBytes(const std::string& path) {
  if (IsS3Url(path)) return 0;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    uint64_t n = fs::file_size(path, ec);
    return ec ? 0 : n;
  }
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

Status ForEachRecord(KvReader* reader, std::string_view from,
                     const std::function<Status(std::string_view, std::string_view)>& fn) {
  std::string key(from), found;
  for (;;) {
    PinnedValue v;
    Status s = reader->Seek(key, &found, &v);
    if (s.IsNotFound()) return Status::OK();
    DSFS_RETURN_IF_ERROR(s);
    DSFS_RETURN_IF_ERROR(fn(found, v.data()));
    // The smallest key after `found`.
    key = found;
    key.push_back('\0');
  }
}

}  // namespace dsfs
