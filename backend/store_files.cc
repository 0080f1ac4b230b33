#include "backend/store_files.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "backend/lmdb_kv.h"
#include "backend/rocksdb_kv.h"
#include "common/log.h"
#include "common/system.h"
#include "common/unique_fd.h"

namespace dsfs {

UniqueFd LockTemporary(const std::string& tmp) {
  struct stat st;
  if (::stat(tmp.c_str(), &st) != 0) return UniqueFd();
  // Read-write where it can be: NFS emulates flock with a write lock, which needs it.
  UniqueFd fd(
      ::open(tmp.c_str(), (S_ISDIR(st.st_mode) ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC));
  if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) fd.reset();
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
    const UniqueFd lock = LockTemporary(tmp);
    if (!lock) continue;
    if (lmdb) {
      ::unlink(tmp.c_str());
    } else {
      std::filesystem::remove_all(e.path(), ec);
    }
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
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) ::fsync(fd.get());
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

}  // namespace dsfs
