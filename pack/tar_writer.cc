#include "pack/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

namespace dsfs {

struct TarWriter::Impl {
  Sink sink;
  Status failed;  // what the sink returned, once it failed
  struct archive* a = nullptr;
  struct archive_entry* entry = nullptr;
  bool open = false;
};

namespace {

la_ssize_t WriteCallback(struct archive* a, void* client, const void* buf, size_t n) {
  auto* impl = static_cast<TarWriter::Impl*>(client);
  if (!impl->failed.ok()) return -1;
  Status s = impl->sink(buf, n);
  if (!s.ok()) {
    impl->failed = s;
    archive_set_error(a, EIO, "%s", s.message().c_str());
    return -1;
  }
  return static_cast<la_ssize_t>(n);
}

}  // namespace

TarWriter::TarWriter(Sink sink) : impl_(std::make_unique<Impl>()) { impl_->sink = std::move(sink); }

TarWriter::~TarWriter() {
  if (impl_->entry) archive_entry_free(impl_->entry);
  if (impl_->a) archive_write_free(impl_->a);  // closes without a sink's error mattering
}

Status TarWriter::Check(int rc) {
  if (rc >= ARCHIVE_WARN) return Status::OK();
  if (!impl_->failed.ok()) return impl_->failed;
  const char* why = archive_error_string(impl_->a);
  return Status::IOError(std::string("writing the tar stream: ") + (why ? why : "failed"));
}

Status TarWriter::Open() {
  impl_->a = archive_write_new();
  impl_->entry = archive_entry_new();
  if (!impl_->a || !impl_->entry) return Status::IOError("writing the tar stream: out of memory");
  DSFS_RETURN_IF_ERROR(Check(archive_write_set_format_pax(impl_->a)));
  // Blocks of 64 KiB to the sink, the last one only as long as the data.
  DSFS_RETURN_IF_ERROR(Check(archive_write_set_bytes_per_block(impl_->a, 64 << 10)));
  DSFS_RETURN_IF_ERROR(Check(archive_write_set_bytes_in_last_block(impl_->a, 1)));
  DSFS_RETURN_IF_ERROR(
      Check(archive_write_open2(impl_->a, impl_.get(), nullptr, WriteCallback, nullptr, nullptr)));
  impl_->open = true;
  return Status::OK();
}

Status TarWriter::Header(const std::string& path, uint32_t mode, uint64_t size,
                         const struct timespec& mtime, const std::string_view* link) {
  struct archive_entry* e = impl_->entry;
  archive_entry_clear(e);
  archive_entry_copy_pathname(e, path.c_str());
  archive_entry_set_mode(e, mode);
  archive_entry_set_size(e, static_cast<la_int64_t>(size));
  archive_entry_set_mtime(e, mtime.tv_sec, mtime.tv_nsec);
  archive_entry_set_uid(e, 0);
  archive_entry_set_gid(e, 0);
  if (link) archive_entry_copy_symlink(e, std::string(*link).c_str());
  return Check(archive_write_header(impl_->a, e));
}

Status TarWriter::AddDirectory(const std::string& path, uint32_t mode,
                               const struct timespec& mtime) {
  return Header(path + "/", (mode & 07777) | S_IFDIR, 0, mtime, nullptr);
}

Status TarWriter::AddSymlink(const std::string& path, std::string_view target, uint32_t mode,
                             const struct timespec& mtime) {
  return Header(path, (mode & 07777) | S_IFLNK, 0, mtime, &target);
}

Status TarWriter::BeginFile(const std::string& path, uint64_t size, uint32_t mode,
                            const struct timespec& mtime) {
  return Header(path, (mode & 07777) | S_IFREG, size, mtime, nullptr);
}

Status TarWriter::Write(std::string_view data) {
  while (!data.empty()) {
    la_ssize_t n = archive_write_data(impl_->a, data.data(), data.size());
    if (n <= 0) return Check(ARCHIVE_FATAL);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

Status TarWriter::Close() {
  if (!impl_->open) return Status::OK();
  impl_->open = false;
  return Check(archive_write_close(impl_->a));
}

}  // namespace dsfs
