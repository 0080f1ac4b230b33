#include "backend/kv_open.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/lmdb_kv.h"
#include "backend/rocksdb_kv.h"
#include "backend/s3/s3_kv.h"
#include "backend/store_files.h"
#include "common/path.h"
#include "s3/url.h"

namespace dsfs {

bool IsRemoteStore(std::string_view source) { return IsS3Url(source); }

Status CheckUrlScheme(const std::string& path, std::string_view accepted) {
  const size_t sep = path.find("://");
  if (sep == std::string::npos || sep == 0 || IsRemoteStore(path)) return Status::OK();
  const std::string scheme = path.substr(0, sep);
  const bool is_scheme =
      std::isalpha(static_cast<unsigned char>(scheme[0])) &&
      std::all_of(scheme.begin(), scheme.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
      });
  struct stat st;
  if (!is_scheme || ::lstat(path.c_str(), &st) == 0) return Status::OK();  // a local path
  return Status::InvalidArgument(PrintableName(path) + ": URL scheme '" + PrintableName(scheme) +
                                 "' is not supported: " + std::string(accepted));
}

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

ValueSizing BackendValueSizing(std::string_view backend) {
  return backend == "lmdb" ? LmdbValueSizing() : ValueSizing{};
}

Status NewKvWriter(const std::string& path, std::string_view backend,
                   const KvWriterOptions& options, std::unique_ptr<KvWriter>* writer) {
  if (IsS3Url(path) || backend == "s3") {
    if (!IsS3Url(path) || backend != "s3") {
      return Status::InvalidArgument(path +
                                     ": the s3 backend writes to s3://BUCKET/PREFIX, and an s3:// "
                                     "destination takes only the s3 backend");
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
    return Status::NotSupported(
        path_in +
        ": a store in S3 is not updated in place (add to the local store, then push it again)");
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

}  // namespace dsfs
