// TarWriter: a pax tar stream written entry by entry (libarchive, which only pack/ links), for
// `dsfs extract STORE -`. Names are written as given, bytes of any value (pax's hdrcharset=BINARY
// where they are not UTF-8); the bytes go to a callback, so the caller decides where.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

class TarWriter {
 public:
  // Receives the stream's bytes in order; a non-OK status ends the stream (every later call
  // returns it).
  using Sink = std::function<Status(const void* data, size_t size)>;
  explicit TarWriter(Sink sink);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  Status Open();
  // `path` relative, "/"-separated, without a trailing slash; `mode` holds type and permission
  // bits as st_mode does.
  Status AddDirectory(const std::string& path, uint32_t mode, const struct timespec& mtime);
  Status AddSymlink(const std::string& path, std::string_view target, uint32_t mode,
                    const struct timespec& mtime);
  // A regular file of `size` bytes: its header, then Write calls adding up to exactly `size`.
  Status BeginFile(const std::string& path, uint64_t size, uint32_t mode,
                   const struct timespec& mtime);
  Status Write(std::string_view data);
  // Ends the stream (the two zero blocks); the sink has every byte once it returns OK.
  Status Close();

  struct Impl;  // libarchive's state (public for its callback only)

 private:
  Status Header(const std::string& path, uint32_t mode, uint64_t size, const struct timespec& mtime,
                const std::string_view* link);
  Status Check(int rc);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dsfs
