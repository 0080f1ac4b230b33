#include "backend/kv_store.h"

#include <sys/stat.h>

#include <cerrno>

#include "backend/lmdb_store.h"

namespace dsfs {

Status OpenKvReader(const std::string& path, const KvReaderOptions& options,
                    std::unique_ptr<KvReader>* reader) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  // LMDB is the only backend so far: its reader checks the file's magic itself.
  if (S_ISREG(st.st_mode)) return OpenLmdbReader(path, options, reader);
  return Status::InvalidArgument(path + ": not a dsfs store");
}

}  // namespace dsfs
