// PackArchive: a tar, cpio, zip or 7z archive (compressed or not) as the source of a pack,
// read once front to back through libarchive (gzip through zlib, which checks its CRCs).
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "image/image.h"
#include "pack/compressor.h"
#include "pack/pack_run.h"
#include "pack/packer.h"
#include "pack/remote_source.h"
#include "pack/tree_builder.h"

namespace dsfs {
namespace {

struct ArchiveCloser {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

// The archive's bytes, through zlib: gzip data is inflated with its checksums checked (the
// gzip filter of libarchive 3.6 ignores a bad CRC and would pack wrong bytes), anything else
// passes through as it is for libarchive's own filters (bzip2, xz, zstd, ...) and formats.
struct GzInput {
  gzFile gz = nullptr;
  std::string buf = std::string(1 << 20, '\0');
  ~GzInput() {
    if (gz) gzclose(gz);
  }
};

la_ssize_t GzRead(struct archive* a, void* client, const void** out) {
  auto* in = static_cast<GzInput*>(client);
  int n = gzread(in->gz, in->buf.data(), static_cast<unsigned>(in->buf.size()));
  if (n < 0) {
    int err = 0;
    std::string msg = gzerror(in->gz, &err);
    // zlib names the input "<fd:N>: " first: the caller names the file.
    if (msg.rfind("<fd:", 0) == 0 && msg.find(": ") != std::string::npos) {
      msg = msg.substr(msg.find(": ") + 2);
    }
    archive_set_error(a, err == Z_ERRNO ? errno : EIO, "%s",
                      err == Z_ERRNO ? std::strerror(errno) : ("gzip data: " + msg).c_str());
    return -1;
  }
  *out = in->buf.data();
  return n;
}

Status ArchiveError(struct archive* a, const std::string& src) {
  const char* msg = archive_error_string(a);
  int err = archive_errno(a);
  std::string text = src + ": " + (msg ? msg : "cannot read archive");
  if (err == ENOENT) return Status::NotFound(text);
  return Status::IOError(text);
}

// Opens `src` (a path, "-" for stdin, or the stream `remote` is) as the input of `a`.
Status OpenArchiveInput(struct archive* a, const std::string& src, GzInput* in,
                        const RemoteStream* remote) {
  int fd = remote       ? ::fcntl(remote->fd(), F_DUPFD_CLOEXEC, 0)
           : src == "-" ? ::dup(0)
                        : ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string text = (src == "-" ? "stdin" : src) + ": " + std::strerror(errno);
    return errno == ENOENT ? Status::NotFound(text) : Status::IOError(text);
  }
  in->gz = gzdopen(fd, "rb");
  if (!in->gz) {
    ::close(fd);
    return Status::IOError(src + ": cannot read");
  }
  gzbuffer(in->gz, 1 << 20);
  if (archive_read_open(a, in, nullptr, GzRead, nullptr) != ARCHIVE_OK) {
    return ArchiveError(a, src == "-" ? "stdin" : src);
  }
  return Status::OK();
}

// Reads an archive's entries, one at a time, into a tree; file contents become chunks of the
// batch being filled (payload ids counted from 0, in archive order).
class EntryReader {
 public:
  EntryReader(struct archive* a, std::string name, const PackOptions& options, TreeBuilder* tree,
              PackProgress* prog)
      : a_(a),
        name_(std::move(name)),
        options_(options),
        tree_(tree),
        prog_(prog),
        read_buf_(options.chunk_bytes, '\0') {}

  bool at_end() const { return at_end_; }

  // Reads the next entry into the tree; a file's chunks are added to *b, which goes to
  // held->Flush whenever it is full. Sets at_end() after the last entry.
  Status Next(Batch* b, HeldTraining* held) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a_, &e);
    if (r == ARCHIVE_EOF) {
      at_end_ = true;
      return Status::OK();
    }
    if (r < ARCHIVE_WARN) return ArchiveError(a_, name_);
    const char* raw_path = archive_entry_pathname(e);
    if (!raw_path) return Status::InvalidArgument(name_ + ": archive entry without a name");
    DSFS_RETURN_IF_ERROR(TreeBuilder::Normalize(raw_path, "path in archive", &path_));
    mtime_s_ = archive_entry_mtime(e);
    mtime_ns_ = static_cast<uint32_t>(archive_entry_mtime_nsec(e));
    mode_ = archive_entry_mode(e);
    // A hard link names a file stored before it. It is that file from then on (a later entry
    // of the target's name does not change it, as when tar extracts). A link that carries data
    // (cpio's newc format puts a file's data on its last link) is the file's contents, for the
    // earlier names too.
    uint32_t link_source = UINT32_MAX;
    if (const char* link = archive_entry_hardlink(e)) {
      const bool has_data = archive_entry_size_is_set(e) && archive_entry_size(e) > 0;
      bool done = false;
      DSFS_RETURN_IF_ERROR(HardLink(link, has_data, &link_source, &done));
      if (done) return Status::OK();
    }
    switch (link_source != UINT32_MAX ? AE_IFREG : archive_entry_filetype(e)) {
      case AE_IFDIR:
        tree_->node(tree_->Dir(path_, mtime_s_))
            .SetTimes(S_IFDIR | (mode_ & 07777), mtime_s_, mtime_ns_);
        return Status::OK();
      case AE_IFLNK:
        return Symlink(archive_entry_symlink(e));
      case AE_IFREG:
        return File(e, link_source, b, held);
      default:
        Log()->warn("skipping {}: not a regular file, directory or symlink", path_);
        return Status::OK();
    }
  }

 private:
  // The entry is a hard link to `link`: *source is the file it names. Without data of its
  // own the entry is that file, and *done.
  Status HardLink(const char* link, bool has_data, uint32_t* source, bool* done) {
    if (path_.empty()) return Status::InvalidArgument(name_ + ": hard link without a name");
    std::string target;
    DSFS_RETURN_IF_ERROR(TreeBuilder::Normalize(link, "hard link target in archive", &target));
    *source = tree_->FileSoFar(target);
    if (*source == UINT32_MAX) {
      return Status::InvalidArgument(name_ + ": " + path_ + " is a hard link to " + link +
                                     ", which is not a regular file stored before it");
    }
    if (has_data) return Status::OK();
    uint32_t id = tree_->Leaf(path_, mtime_s_);
    tree_->node(id).SetTimes(S_IFREG | (mode_ & 07777), mtime_s_, mtime_ns_);
    tree_->Link(id, *source);
    *done = true;
    return Status::OK();
  }

  Status Symlink(const char* target) {
    if (path_.empty()) return Status::InvalidArgument(name_ + ": symlink without a name");
    if (target && std::strlen(target) >= PATH_MAX) {
      Log()->warn("skipping {}: a symlink target longer than any path ({} bytes)", path_,
                  std::strlen(target));
      return Status::OK();
    }
    uint32_t id = tree_->Leaf(path_, mtime_s_);
    TreeBuilder::Node& n = tree_->node(id);
    n.SetTimes(S_IFLNK | 0777, mtime_s_, mtime_ns_);
    n.size = target ? std::strlen(target) : 0;
    n.data = tree_->AddTarget(target ? target : "");
    return Status::OK();
  }

  // Up to `len` bytes of the entry's data at `done` bytes into it; 0 at its end.
  la_ssize_t ReadData(char* dst, size_t len, uint64_t done) {
    la_ssize_t n = data_end_ ? 0 : archive_read_data(a_, dst, len);
    data_end_ = data_end_ || n == 0;
    if (n == 0 && done < declared_) {
      n = static_cast<la_ssize_t>(std::min<uint64_t>(len, declared_ - done));
      std::memset(dst, 0, static_cast<size_t>(n));
    }
    return n;
  }

  // A regular file (or a hard link with the data of `link_source`): its contents, chunk by
  // chunk, into *b.
  Status File(struct archive_entry* e, uint32_t link_source, Batch* b, HeldTraining* held) {
    if (path_.empty()) return Status::InvalidArgument(name_ + ": file without a name");
    uint32_t id = tree_->Leaf(path_, mtime_s_);
    uint64_t first = next_id_;
    uint64_t size = 0;
    bool small = archive_entry_size_is_set(e) &&
                 static_cast<uint64_t>(archive_entry_size(e)) <= kDictMaxFileBytes;
    bool image = false;
    size_t first_raw = b->raws.size();
    // libarchive gives a sparse file's data with its holes filled, except a hole at the end
    // (all of a file that is one hole): that is filled here, up to the recorded size.
    declared_ = archive_entry_sparse_count(e) > 0 && archive_entry_size_is_set(e)
                    ? static_cast<uint64_t>(archive_entry_size(e))
                    : 0;
    data_end_ = false;  // libarchive said so: not asked again
    for (;;) {
      size_t got = 0;
      while (got < read_buf_.size()) {
        la_ssize_t n = ReadData(read_buf_.data() + got, read_buf_.size() - got, size + got);
        if (n < 0) return ArchiveError(a_, name_ + ": " + path_);
        if (n == 0) break;
        got += static_cast<size_t>(n);
      }
      if (got == 0) break;
      // A copy of exactly its size: batches hold thousands of small chunks.
      std::string chunk(read_buf_.data(), got);
      if (size == 0) image = SniffImage(chunk) != ImageKind::kNone;
      size += got;
      if (b->raws.empty()) b->first_id = next_id_;
      b->Add(std::move(chunk), small);
      ++next_id_;
      // An image's chunks stay in one batch (the worker decodes it whole), up to a limit.
      if (image && size > kMaxImageFileBytes) image = false;
      if (b->full() && !image) DSFS_RETURN_IF_ERROR(held->Flush(b));
      if (b->raws.empty()) first_raw = 0;
      if (got < options_.chunk_bytes) break;
    }
    if (image) b->images.push_back({id, first_raw, b->raws.size() - first_raw, path_});
    TreeBuilder::Node& n = tree_->node(id);
    n.SetTimes(S_IFREG | (mode_ & 07777), mtime_s_, mtime_ns_);
    n.size = size;
    n.data = size ? first : 0;
    if (link_source != UINT32_MAX) tree_->Link(link_source, id);
    ++b->files_completed;
    prog_->bytes_total += size;
    ++prog_->files_total;
    if (b->full()) DSFS_RETURN_IF_ERROR(held->Flush(b));
    return Status::OK();
  }

  struct archive* const a_;
  const std::string name_;  // the archive, for messages
  const PackOptions& options_;
  TreeBuilder* const tree_;
  PackProgress* const prog_;
  std::string read_buf_;  // one chunk as it is read
  uint64_t next_id_ = 0;
  bool at_end_ = false;
  // The entry being read.
  std::string path_;
  int64_t mtime_s_ = 0;
  uint32_t mtime_ns_ = 0;
  mode_t mode_ = 0;
  uint64_t declared_ = 0;  // sparse files: the size the holes are filled up to
  bool data_end_ = false;
};

}  // namespace

namespace {

// PackArchive of `src`, read from `remote` where it is not local (null: a file or stdin).
Status PackArchiveFrom(const std::string& src, RemoteStream* remote, const PackOptions& options,
                       KvWriter* writer, const std::function<void(const PackProgress&)>& progress,
                       PackStats* stats) {
  GzInput input;  // outlives the archive reader (declared first, destroyed last)
  std::unique_ptr<struct archive, ArchiveCloser> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  // Real archive formats only: "all" would also take any text file for an mtree spec.
  archive_read_support_format_tar(a.get());
  archive_read_support_format_cpio(a.get());
  archive_read_support_format_zip(a.get());
  archive_read_support_format_7zip(a.get());
  DSFS_RETURN_IF_ERROR(OpenArchiveInput(a.get(), src, &input, remote));
  std::string name = src == "-" ? "stdin" : src;

  PackRun run(options, writer, progress);
  TreeBuilder tree;
  EntryReader reader(a.get(), name, options, &tree, &run.progress());

  // The dictionary is trained on the first small files of the stream (HeldTraining).
  std::string dict_bytes;
  // What the writer's thread learns of each image, kept apart from the tree: the reader's
  // thread is still adding nodes to it (its vector moves), so they are set once both are done.
  struct ImageAttrs {
    uint32_t handle;
    uint8_t kind;
    uint32_t width, height;
    uint64_t pixels;
  };
  std::vector<ImageAttrs> images;
  run.progress().phase = "training";
  DSFS_RETURN_IF_ERROR(run.Compress(
      nullptr,
      [&](OrderedCompressor* comp) -> Status {
        HeldTraining held(comp, options.dict_bytes, options.zstd_level);
        Batch b;
        while (!reader.at_end()) {
          Status s = reader.Next(&b, &held);
          if (held.aborted()) return Status::OK();  // the writer failed; it reports why
          if (!s.ok()) return s;
          run.Report(false);
        }
        if (!b.raws.empty() || b.files_completed) DSFS_RETURN_IF_ERROR(held.Flush(&b));
        DSFS_RETURN_IF_ERROR(held.Finish());
        dict_bytes = held.dictionary();
        return Status::OK();
      },
      [&](const ImageResult& r, uint64_t pixels) {
        images.push_back({r.handle, static_cast<uint8_t>(r.kind), r.width, r.height, pixels});
      }));
  run.LogPhase("reading, training and compressing");
  for (const ImageAttrs& i : images) {
    TreeBuilder::Node& n = tree.node(i.handle);
    n.image = i.kind;
    n.width = i.width;
    n.height = i.height;
    n.pixels = i.pixels;
  }
  images = {};
  if (archive_read_close(a.get()) != ARCHIVE_OK) return ArchiveError(a.get(), name);
  // A stream that ended early at an entry's end reads as a shorter archive: the fetch says.
  if (remote) DSFS_RETURN_IF_ERROR(remote->Finish());

  std::vector<InodeRecord> inodes;
  std::string names;
  PackStats st;
  DSFS_RETURN_IF_ERROR(tree.Build(&inodes, &names, &st));
  DSFS_RETURN_IF_ERROR(run.Finish(inodes, names, dict_bytes, &st));
  if (stats) *stats = st;
  return Status::OK();
}

}  // namespace

Status PackArchive(const std::string& src, const PackOptions& options, KvWriter* writer,
                   const std::function<void(const PackProgress&)>& progress, PackStats* stats) {
  DSFS_RETURN_IF_ERROR(CheckOptions(options));
  if (!IsRemotePackSource(src)) {
    return PackArchiveFrom(src, nullptr, options, writer, progress, stats);
  }
  std::unique_ptr<RemoteStream> remote;
  DSFS_RETURN_IF_ERROR(RemoteStream::Open(src, &remote));
  Status s = PackArchiveFrom(remote->name(), remote.get(), options, writer, progress, stats);
  // What failed first: a fetch that broke off (the archive then reads as truncated).
  if (!s.ok()) {
    Status fetch = remote->Finish();
    if (!fetch.ok()) return fetch;
  }
  return s;
}

}  // namespace dsfs
