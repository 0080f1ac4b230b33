// The control directory /.dsfs of every mount (fs/control_dir.h): its lookups, listing and
// attributes, and the bytes of its stats file.
#include "fs/control_dir.h"

#include <algorithm>
#include <ctime>
#include <utility>
#include <vector>

#include "fs/filesystem.h"

namespace dsfs {

bool Filesystem::LookupControl(uint64_t parent, std::string_view name, uint64_t* ino,
                               Status* s) const {
  *s = Status::OK();
  if (parent == space_.root() && name == kControlDirName) {
    *ino = kDotDsfsIno;
    return true;
  }
  if (parent == kDotDsfsIno) {
    *ino = 0;
    if (name == kStatsFileName) *ino = kStatsIno;
    if (name == ".") *ino = kDotDsfsIno;
    if (name == "..") *ino = space_.root();
    // Every view by its name, the resized ones too (bmp-N and jpeg-N for any N, found by name,
    // not listed); a view mounted as the root is not shown again inside itself.
    View v;
    if (*ino == 0 && ParseView(name, &v).ok() && InodeSpace::Make(v, 1) != space_.root()) {
      *ino = InodeSpace::Make(v, 1);
    }
    if (*ino == 0) *s = Status::NotFound("no such file or directory");
    return true;
  }
  if (Kind(parent) == kControl) {
    *s = Status::NotFound("no such file or directory");
    return true;
  }
  return false;
}

Status Filesystem::ControlAttr(uint64_t ino, struct stat* st) const {
  InodeRecord root;
  DSFS_RETURN_IF_ERROR(store_->GetInode(Store::kRootIno, &root));
  if (ino == kDotDsfsIno) {
    root.mode = S_IFDIR | 0555;
    FillStat(ino, root, st);
    return Status::OK();
  }
  if (ino == kStatsIno) {
    root.mode = S_IFREG | 0444;
    root.size = kStatsBytes;
    FillStat(ino, root, st);
    // A new mtime on every getattr: with attributes never cached, the kernel drops its cached
    // pages of the file before each read (FUSE auto_inval_data) and so reads fresh counters.
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    st->st_mtim = now;
    return Status::OK();
  }
  return Status::NotFound("no such inode");
}

Status Filesystem::ReadDirControl(uint64_t offset, const DirFiller& fill) const {
  std::vector<std::pair<std::string, uint64_t>> entries = {
      {".", kDotDsfsIno}, {"..", space_.root()}, {std::string(kStatsFileName), kStatsIno}};
  for (View v : kViews) {
    uint64_t ino = InodeSpace::Make(v, 1);
    if (ino != space_.root()) entries.emplace_back(ViewName(v), ino);
  }
  struct stat st;
  for (uint64_t i = offset; i < entries.size(); ++i) {
    DSFS_RETURN_IF_ERROR(Attr(entries[i].second, &st));
    if (!fill(entries[i].first, st, i + 1)) break;
  }
  return Status::OK();
}

Status Filesystem::ReadStats(uint64_t offset, uint64_t size, ReadBuffer* buf,
                             std::string_view* out) const {
  buf->pin.reset();
  buf->bytes = StatsJson();
  buf->bytes.resize(kStatsBytes - 1, ' ');
  buf->bytes += '\n';
  *out = std::string_view(buf->bytes).substr(std::min<uint64_t>(offset, kStatsBytes));
  *out = out->substr(0, size);
  return Status::OK();
}

}  // namespace dsfs
