#include "backend/kv_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/lmdb_store.h"
#include "backend/rocksdb_store.h"

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

Status DetectBackend(const std::string& path, std::string* backend) {
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
  if (backend == "rocksdb") return OpenRocksdbReader(path, options, reader);
  return OpenLmdbReader(path, options, reader);
}

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
    if (pid > 0 && *end == '\0' && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
}

Status NewKvWriter(const std::string& path, std::string_view backend,
                   const KvWriterOptions& options, std::unique_ptr<KvWriter>* writer) {
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
  RemoveDeadTemporaries(path);
  if (backend == "lmdb") return NewLmdbWriter(path, options, writer);
  if (backend == "rocksdb") return NewRocksdbWriter(path, options, writer);
  return Status::InvalidArgument("unknown backend '" + std::string(backend) +
                                 "' (known: lmdb, rocksdb)");
}

Status NewKvUpdater(const std::string& path, std::unique_ptr<KvWriter>* writer) {
  std::string backend;
  DSFS_RETURN_IF_ERROR(DetectBackend(path, &backend));
  if (backend == "rocksdb") return NewRocksdbUpdater(path, writer);
  return NewLmdbUpdater(path, writer);
}

uint64_t StoreBytes(const std::string& path) {
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
