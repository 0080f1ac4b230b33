// PackDirectory, and the walk and reading of a source directory that it shares with dsfs add.
#include "pack/dir_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "common/log.h"
#include "image/image.h"
#include "pack/compressor.h"

namespace dsfs {
namespace {

uint32_t AddName(DirTree* t, std::string_view name, uint64_t* off) {
  *off = t->names.size();
  t->names.append(name);
  return static_cast<uint32_t>(name.size());
}

InodeRecord RecordFromStat(const struct stat& st) {
  InodeRecord r{};
  r.mode = st.st_mode;
  r.mtime_s = st.st_mtim.tv_sec;
  r.mtime_ns = static_cast<uint32_t>(st.st_mtim.tv_nsec);
  return r;
}

// The store being written (PackOptions::store_path), found by its directory and name, so that
// a walk over a tree that holds it leaves it and its temporaries out.
struct StoreToSkip {
  bool any = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;

  explicit StoreToSkip(const std::string& store_path) {
    if (store_path.empty()) return;
    std::string path = store_path;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    name = slash == std::string::npos ? path : path.substr(slash + 1);
    struct stat st;
    if (name.empty() || ::stat(dir.c_str(), &st) != 0) return;
    any = true;
    dev = st.st_dev;
    ino = st.st_ino;
  }
  // For the entries of the directory open at `dfd`: whether to skip `entry`.
  bool InDir(int dfd) const {
    struct stat st;
    return any && ::fstat(dfd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
  }
  bool Skips(const std::string& entry) const {
    return entry == name || entry.rfind(name + ".tmp-", 0) == 0;
  }
};

// open(2) of a path that may be longer than PATH_MAX (a tree a few thousand directories deep,
// which the store takes): opened a piece under PATH_MAX at a time, each piece relative to the
// directory before it. The same as open(path, flags) otherwise.
int OpenLongPath(const std::string& path, int flags) {
  if (path.size() < PATH_MAX) return ::open(path.c_str(), flags);
  int dir = AT_FDCWD;
  size_t pos = 0;
  while (path.size() - pos >= PATH_MAX) {
    size_t cut = path.rfind('/', pos + PATH_MAX - 1);
    if (cut == std::string::npos || cut <= pos) {
      if (dir != AT_FDCWD) ::close(dir);
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = ::openat(dir, path.substr(pos, cut - pos).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    if (dir != AT_FDCWD) ::close(dir);
    if (fd < 0) {
      errno = err;
      return -1;
    }
    dir = fd;
    pos = cut + 1;
  }
  int fd = ::openat(dir, path.c_str() + pos, flags);
  int err = errno;
  if (dir != AT_FDCWD) ::close(dir);
  errno = err;
  return fd;
}

// Where entry `ino` of the walk is in the source: its directory's path and its name.
std::string SourcePath(const DirTree& t, uint32_t ino) {
  const InodeRecord& r = t.inodes[ino - 1];
  return t.dir_paths.at(r.parent) + "/" + std::string(t.NameOf(r));
}

// Reads [offset, offset + len) of a source file, insisting it still has `size` bytes.
Status ReadSource(const std::string& path, uint64_t size, uint64_t offset, uint64_t len,
                  std::string* out) {
  int fd = OpenLongPath(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot read " + path);
  out->resize(len);
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, out->data() + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "cannot read " + path);
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  struct stat st;
  bool changed = ::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != size;
  ::close(fd);
  if (done != len || changed) return Status::IOError(path + ": file changed while packing");
  return Status::OK();
}

}  // namespace

Status Walk(const std::string& src, const std::string& store_path, const std::atomic<bool>* cancel,
            DirTree* tree, const std::function<void(uint64_t)>& tick) {
  const StoreToSkip store(store_path);
  struct stat st;
  // SRC itself may be a symlink to the tree (as tar and mksquashfs take it); links inside it
  // are stored as links.
  std::string root_path = src;
  if (::lstat(src.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(src.c_str(), nullptr), &std::free);
    if (!real) return Status::FromErrno(errno, src);
    root_path = real.get();
  }
  if (::stat(root_path.c_str(), &st) != 0) return Status::FromErrno(errno, src);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(src + ": not a directory");
  InodeRecord root = RecordFromStat(st);
  root.parent = 1;
  tree->inodes.push_back(root);
  tree->dir_paths[1] = root_path;
  std::deque<std::pair<uint32_t, uint32_t>> queue{{1, 0}};  // directory inode, level
  std::vector<std::string> entries;
  while (!queue.empty()) {
    DSFS_RETURN_IF_ERROR(CheckCancelled(cancel));
    auto [dir_ino, level] = queue.front();
    queue.pop_front();
    const std::string path = tree->dir_paths[dir_ino];  // kept: its files are read later
    int dfd = OpenLongPath(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return Status::FromErrno(errno, "cannot open directory " + path);
    DIR* d = ::fdopendir(dfd);
    if (!d) {
      int err = errno;
      ::close(dfd);
      return Status::FromErrno(err, "cannot read directory " + path);
    }
    entries.clear();
    const bool store_here = store.InDir(dfd);
    errno = 0;
    while (struct dirent* de = ::readdir(d)) {
      if (std::strcmp(de->d_name, ".") == 0 || std::strcmp(de->d_name, "..") == 0) continue;
      if (store_here && store.Skips(de->d_name)) {
        Log()->info("skipping {}/{}: the store being written", path, de->d_name);
        continue;
      }
      entries.emplace_back(de->d_name);
    }
    if (errno != 0) {
      int err = errno;
      ::closedir(d);
      return Status::FromErrno(err, "cannot read directory " + path);
    }
    std::sort(entries.begin(), entries.end());
    uint64_t first = tree->inodes.size() + 1;
    uint64_t count = 0;
    for (const std::string& name : entries) {
      if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int err = errno;
        ::closedir(d);
        return Status::FromErrno(err, "cannot stat " + path + "/" + name);
      }
      InodeRecord r = RecordFromStat(st);
      if (S_ISREG(st.st_mode)) {
        r.size = static_cast<uint64_t>(st.st_size);
      } else if (S_ISLNK(st.st_mode)) {
        // st_size is only a hint (procfs says 0; a link may change after lstat): a target
        // that fills the buffer may be cut, so read again with a larger one.
        std::string target(std::max<size_t>(static_cast<size_t>(st.st_size) + 1, 256), '\0');
        ssize_t n;
        while ((n = ::readlinkat(dfd, name.c_str(), target.data(), target.size())) >= 0 &&
               static_cast<size_t>(n) == target.size() && target.size() <= PATH_MAX) {
          target.resize(target.size() * 2);
        }
        if (n < 0 || static_cast<size_t>(n) == target.size()) {
          int err = n < 0 ? errno : ENAMETOOLONG;
          ::closedir(d);
          return Status::FromErrno(err, "cannot read symlink " + path + "/" + name);
        }
        target.resize(static_cast<size_t>(n));
        r.size = target.size();
        AddName(tree, target, &r.data);
      } else if (!S_ISDIR(st.st_mode)) {
        Log()->warn("skipping {}/{}: not a regular file, directory or symlink", path, name);
        ++tree->skipped;
        continue;
      }
      if (tree->inodes.size() >= UINT32_MAX - 1) {
        ::closedir(d);
        return Status::InvalidArgument("too many entries for one store (over 4 billion)");
      }
      r.parent = dir_ino;
      r.name_len = AddName(tree, name, &r.name_off);
      tree->inodes.push_back(r);
      uint32_t ino = static_cast<uint32_t>(tree->inodes.size());
      if (S_ISDIR(st.st_mode)) {
        if (level + 1 > kMaxTreeDepth) {
          ::closedir(d);
          return Status::InvalidArgument("tree too deep: " + path + "/" + name + " is " +
                                         std::to_string(level + 1) + " directories down (at most " +
                                         std::to_string(kMaxTreeDepth) + ")");
        }
        tree->dir_paths[ino] = path + "/" + name;
        queue.push_back({ino, level + 1});
      }
      ++count;
    }
    ::closedir(d);
    InodeRecord& dr = tree->inodes[dir_ino - 1];
    dr.size = count;
    dr.data = count ? first : 0;
    if (tick) tick(tree->inodes.size());
  }
  return Status::OK();
}

std::vector<uint32_t> AssignPayloadIds(DirTree* tree, uint32_t chunk_bytes, uint64_t first_id,
                                       PackStats* st) {
  std::vector<uint32_t> files;
  uint64_t next_id = first_id;
  for (uint32_t i = 0; i < tree->inodes.size(); ++i) {
    InodeRecord& r = tree->inodes[i];
    if ((r.mode & S_IFMT) == S_IFREG) {
      ++st->files;
      st->bytes_in += r.size;
      if (r.size > 0) {
        r.data = next_id;
        next_id += (r.size + chunk_bytes - 1) / chunk_bytes;
        files.push_back(i + 1);
      }
    } else if ((r.mode & S_IFMT) == S_IFDIR) {
      ++st->dirs;
    } else {
      ++st->symlinks;
    }
  }
  st->skipped = tree->skipped;
  return files;
}

Status CompressFiles(PackRun* run, DirTree* tree, const std::vector<uint32_t>& files,
                     const PackOptions& options, std::shared_ptr<const Dictionary> dict) {
  const uint64_t first_id = run->next_payload_id();
  return run->Compress(
      dict,
      [&](OrderedCompressor* comp) -> Status {
        uint64_t id = first_id;
        Batch b;
        for (uint32_t ino : files) {
          const uint64_t size = tree->inodes[ino - 1].size;
          std::string path = SourcePath(*tree, ino);
          bool image = false;
          size_t first_raw = b.raws.size();
          for (uint64_t off = 0; off < size; off += options.chunk_bytes) {
            if (b.raws.empty()) b.first_id = id;
            std::string raw;
            Status s = ReadSource(path, size, off,
                                  std::min<uint64_t>(options.chunk_bytes, size - off), &raw);
            if (!s.ok()) {
              b.status = s;
              comp->Submit(std::move(b));
              return Status::OK();  // the error reaches the writer in order, after earlier batches
            }
            if (off == 0) {
              image = size <= kMaxImageFileBytes && SniffImage(raw) != ImageKind::kNone;
            }
            b.Add(std::move(raw), size <= kDictMaxFileBytes);
            ++id;
            // An image's chunks stay in one batch: the worker decodes it whole.
            if (b.full() && !image) {
              if (!comp->Submit(std::move(b))) return Status::OK();
              b = Batch();
            }
          }
          if (image) b.images.push_back({ino, first_raw, b.raws.size() - first_raw, path});
          ++b.files_completed;
          if (b.full()) {
            if (!comp->Submit(std::move(b))) return Status::OK();
            b = Batch();
          }
        }
        if (!b.raws.empty() || b.files_completed) comp->Submit(std::move(b));
        return Status::OK();
      },
      [&](const ImageResult& r, uint64_t pixels) {
        // The producer reads only the size and names of records: these fields are the writer's.
        InodeRecord& rec = tree->inodes[r.handle - 1];
        rec.image = static_cast<uint8_t>(r.kind);
        rec.width = r.width;
        rec.height = r.height;
        rec.pixels = pixels;
      });
}

Status TrainOnSamples(const DirTree& tree, const std::vector<uint32_t>& files, uint32_t dict_bytes,
                      std::string* dict) {
  dict->clear();
  if (dict_bytes == 0) return Status::OK();
  std::vector<uint32_t> small;
  uint64_t small_bytes = 0;
  for (uint32_t ino : files) {
    uint64_t size = tree.inodes[ino - 1].size;
    if (size <= kDictMaxFileBytes) {
      small.push_back(ino);
      small_bytes += size;
    }
  }
  if (small.empty()) return Status::OK();
  // Every k-th small file, evenly over the tree, up to SampleBytes.
  uint64_t want = SampleBytes(dict_bytes);
  size_t stride = std::max<uint64_t>(1, small_bytes / std::max<uint64_t>(want, 1));
  std::vector<std::string> samples;
  uint64_t got = 0;
  for (size_t i = 0; i < small.size() && got < want; i += stride) {
    const InodeRecord& r = tree.inodes[small[i] - 1];
    std::string data;
    DSFS_RETURN_IF_ERROR(ReadSource(SourcePath(tree, small[i]), r.size, 0, r.size, &data));
    got += data.size();
    samples.push_back(std::move(data));
  }
  return TrainDictionary(samples, dict_bytes, dict);
}

Status Scan(PackRun* run, const std::string& src, const PackOptions& options, DirTree* tree) {
  run->progress().phase = "scanning";
  DSFS_RETURN_IF_ERROR(Walk(src, options.store_path, options.cancel, tree, [&](uint64_t n) {
    run->progress().files_total = n;
    run->Report(false);
  }));
  run->LogPhase("scanning");
  return Status::OK();
}

Status PackDirectory(const std::string& src_in, const PackOptions& options, KvWriter* writer,
                     const std::function<void(const PackProgress&)>& progress, PackStats* stats) {
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  std::string src = StripSlashes(src_in);
  PackRun run(options, writer, progress);
  PackProgress& prog = run.progress();

  DirTree tree;
  DSFS_RETURN_IF_ERROR(Scan(&run, src, options, &tree));

  PackStats st;
  std::vector<uint32_t> files = AssignPayloadIds(&tree, options.chunk_bytes, 0, &st);
  prog.files_total = st.files;
  prog.files_done = st.files - files.size();  // empty files need no work
  prog.bytes_total = st.bytes_in;

  prog.phase = "training";
  run.Report(true);
  std::string dict_bytes;
  DSFS_RETURN_IF_ERROR(TrainOnSamples(tree, files, options.dict_bytes, &dict_bytes));
  std::shared_ptr<Dictionary> dict;
  DSFS_RETURN_IF_ERROR(Dictionary::Create(dict_bytes, options.zstd_level, &dict));
  run.LogPhase("dictionary training");

  DSFS_RETURN_IF_ERROR(CompressFiles(&run, &tree, files, options, dict));
  run.LogPhase("compressing");
  DSFS_RETURN_IF_ERROR(run.Finish(tree.inodes, tree.names, dict_bytes, &st));
  if (stats) *stats = st;
  return Status::OK();
}

}  // namespace dsfs
