// dsfs pack's sources that are not on the local disk, read as a stream (no local copy, memory
// bounded by one range of an object, kRangeBytes):
//   s3://BUCKET/KEY            an archive (tar, zip, ... as for a local file) in object storage,
//                              read front to back in ranged GETs of kRangeBytes
//   s3://BUCKET/PREFIX/        the objects under PREFIX (the trailing '/' says so), each a
//                              file at its key less PREFIX, listed page by page and turned
//                              into a tar stream (pax) as they are fetched
//   http://URL, https://URL    an archive at a URL, one GET (s3/http_stream.h); https trusts
//                              the system's CAs, or those of $AWS_CA_BUNDLE as S3 endpoints do
// S3 requests use the AWS settings and credential chain (s3/credentials.h), with the S3
// client's retries and deadlines; a stalled server ends the pack within them.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace dsfs {

bool IsRemotePackSource(const std::string& src);

// The bytes of a remote source, fetched by a thread of its own into a socket that fd() reads
// (as a pipe: EOF at the end, or where the fetch failed).
class RemoteStream {
 public:
  static constexpr uint64_t kRangeBytes = 4 << 20;

  // Starts fetching `src` (IsRemotePackSource): InvalidArgument for a malformed URL, the AWS
  // settings' error; anything the fetch meets later comes from Finish.
  static Status Open(const std::string& src, std::unique_ptr<RemoteStream>* out);
  ~RemoteStream();  // Finish()
  RemoteStream(const RemoteStream&) = delete;
  RemoteStream& operator=(const RemoteStream&) = delete;

  // The source as messages name it (an http(s) URL without its query).
  const std::string& name() const { return src_; }
  // The read end (owned here: dup it to hand it on).
  int fd() const { return read_fd_; }
  // Ends the stream (a fetch still under way stops at its next write) and returns the fetch's
  // error: what failed (a GET, a listing, an unsafe key) rather than the reader's "truncated".
  // OK if it had sent everything. Idempotent.
  Status Finish();

 private:
  RemoteStream() = default;
  // Sends all of `data` to the reader; false once the reader is gone (Finish).
  bool Send(std::string_view data);
  Status FetchObject(const std::string& bucket, const std::string& key);
  Status FetchPrefix(const std::string& bucket, const std::string& prefix);
  Status FetchUrl(const std::string& url);
  friend struct RemoteStreamAccess;

  std::string src_;
  int read_fd_ = -1, write_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  Status status_;  // the fetch's, set by the thread before it ends
  bool finished_ = false;
  struct Aws;
  std::unique_ptr<Aws> aws_;
};

}  // namespace dsfs
