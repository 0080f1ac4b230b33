#include "backend/kv.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

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
