#include "pack/remote_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <vector>

#include "common/path.h"
#include "s3/client.h"
#include "s3/credentials.h"
#include "s3/http_stream.h"
#include "s3/url.h"

namespace dsfs {

struct RemoteStream::Aws {
  S3Url url;
  std::unique_ptr<S3Client> client;
};

namespace {

// A key as messages show it: at most 80 bytes (the error line escapes what it prints).
std::string Short(const std::string& key) {
  if (key.size() <= 80) return key;
  return key.substr(0, 40) + "..." + key.substr(key.size() - 37);
}

// LastModified ("2026-12-07T16:00:00.000Z") in seconds since the epoch; 0 if unreadable.
int64_t ParseIsoTime(const std::string& text) {
  struct tm tm;
  std::memset(&tm, 0, sizeof(tm));
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return 0;
  return static_cast<int64_t>(::timegm(&tm));
}

// The path a listed key names below `prefix`: "" for the prefix's own marker and directory
// markers (a key ending in '/'), which carry no file. InvalidArgument for a key that is no
// safe relative path ('..', a NUL).
Status KeyPath(const std::string& src, const std::string& prefix, const std::string& key,
               std::string* path) {
  path->clear();
  if (key.size() < prefix.size() || key.compare(0, prefix.size(), prefix) != 0) {
    return Status::IOError(src + ": the listing gave a key outside the prefix: " + Short(key));
  }
  std::string rel = key.substr(prefix.size());
  if (rel.empty() || rel.back() == '/') return Status::OK();
  if (rel.find('\0') != std::string::npos) {
    return Status::InvalidArgument(src + ": key with a NUL byte: " + Short(key));
  }
  for (std::string_view part : PathParts(rel)) {
    if (part == "..") {
      return Status::InvalidArgument(src + ": unsafe key (with '..'): " + Short(key) +
                                     "; nothing packed");
    }
  }
  *path = std::move(rel);
  return Status::OK();
}

la_ssize_t WriteToStream(struct archive*, void* client, const void* buf, size_t n);

}  // namespace

struct RemoteStreamAccess {
  static bool Send(RemoteStream* s, std::string_view d) { return s->Send(d); }
};

namespace {

la_ssize_t WriteToStream(struct archive* a, void* client, const void* buf, size_t n) {
  if (!RemoteStreamAccess::Send(static_cast<RemoteStream*>(client),
                                std::string_view(static_cast<const char*>(buf), n))) {
    archive_set_error(a, EPIPE, "the reader is gone");
    return -1;
  }
  return static_cast<la_ssize_t>(n);
}

struct WriterCloser {
  void operator()(struct archive* a) const { archive_write_free(a); }
};

}  // namespace

// Fetches the small objects of a listing page ahead of the stream, on kThreads threads, at
// most kAheadBytes and kAhead objects ahead of the one being written: a prefix of many small
// objects is bound by the round trip of one GET per object, not by the bandwidth.
class PageFetcher {
 public:
  static constexpr int kThreads = 16;
  static constexpr size_t kAhead = 64;
  static constexpr uint64_t kAheadBytes = 32 << 20;

  PageFetcher(S3Client* client, std::string bucket) : client_(client), bucket_(std::move(bucket)) {
    for (int i = 0; i < kThreads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~PageFetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Starts a page: objects of at most `small` bytes are fetched ahead, the others are left to
  // the caller (Take says so). REQUIRES: nothing of the previous page is still fetching
  // (every object taken).
  void StartPage(const std::vector<S3Client::ListedObject>* page, uint64_t small) {
    std::lock_guard<std::mutex> lock(mu_);
    page_ = page;
    small_ = small;
    slots_.assign(page->size(), Slot{});
    next_ = 0;
    taken_ = 0;
    ahead_bytes_ = 0;
    Launch();
  }

  // Drops what is queued and waits for the GETs under way: the page may go after it.
  void Abandon() {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.clear();
    done_cv_.wait(lock, [&] { return running_ == 0; });
  }

  // Waits for object `i` of the page (taken in order): true with its bytes in *data, or
  // false for one the caller fetches itself (larger than `small`). *s: the GET's error.
  bool Take(size_t i, std::string* data, Status* s) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[i];
    if (!slot.queued) return false;
    done_cv_.wait(lock, [&] { return slot.done; });
    *data = std::move(slot.data);
    *s = slot.status;
    ahead_bytes_ -= (*page_)[i].size;
    taken_ = i + 1;
    Launch();
    return true;
  }

 private:
  struct Slot {
    bool queued = false, done = false;
    std::string data;
    Status status;
  };

  // Queues what the window allows. REQUIRES: mu_ held.
  void Launch() {
    while (next_ < page_->size() && next_ < taken_ + kAhead) {
      const uint64_t size = (*page_)[next_].size;
      if (size <= small_) {
        if (ahead_bytes_ + size > kAheadBytes && ahead_bytes_ > 0) break;
        ahead_bytes_ += size;
        slots_[next_].queued = true;
        queue_.push_back(next_);
      }
      ++next_;
    }
    cv_.notify_all();
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      const size_t i = queue_.front();
      queue_.pop_front();
      ++running_;
      const S3Client::ListedObject& o = (*page_)[i];
      lock.unlock();
      std::string data;
      Status s = o.size == 0 ? Status::OK() : client_->Get(bucket_, o.key, &data, 0, o.size);
      lock.lock();
      slots_[i].data = std::move(data);
      slots_[i].status = s;
      slots_[i].done = true;
      --running_;
      done_cv_.notify_all();
    }
  }

  S3Client* const client_;
  const std::string bucket_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<size_t> queue_;
  std::vector<Slot> slots_;
  const std::vector<S3Client::ListedObject>* page_ = nullptr;
  uint64_t small_ = 0, ahead_bytes_ = 0;
  size_t next_ = 0, taken_ = 0;
  int running_ = 0;  // GETs under way
  bool quit_ = false;
  std::vector<std::thread> threads_;
};

bool IsRemotePackSource(const std::string& src) { return IsS3Url(src) || IsHttpUrl(src); }

Status RemoteStream::Open(const std::string& src, std::unique_ptr<RemoteStream>* out) {
  std::unique_ptr<RemoteStream> rs(new RemoteStream);
  rs->src_ = IsHttpUrl(src) ? HttpUrlForMessages(src) : src;
  std::string object;  // the key of an archive object; prefix listing if empty
  bool prefix = false;
  if (IsS3Url(src)) {
    rs->aws_ = std::make_unique<Aws>();
    DSFS_RETURN_IF_ERROR(ParseS3Url(src, &rs->aws_->url));
    prefix = src.back() == '/' || rs->aws_->url.prefix.empty();
    if (prefix && !rs->aws_->url.prefix.empty()) rs->aws_->url.prefix += '/';
    AwsSettings settings;
    DSFS_RETURN_IF_ERROR(LoadAwsSettings(&settings));
    // The retry budget of every S3 command: $DSFS_S3_ATTEMPTS, $DSFS_S3_TIMEOUT_S, else 5, 10 s.
    rs->aws_->client = std::make_unique<S3Client>(settings, S3Client::RetryPolicy::For(0, 0));
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::FromErrno(errno, "socketpair");
  }
  rs->read_fd_ = fds[0];
  rs->write_fd_ = fds[1];
  RemoteStream* self = rs.get();
  rs->thread_ = std::thread([self, src, prefix] {
    Status s;
    if (!self->aws_) {
      s = self->FetchUrl(src);
    } else if (prefix) {
      s = self->FetchPrefix(self->aws_->url.bucket, self->aws_->url.prefix);
    } else {
      s = self->FetchObject(self->aws_->url.bucket, self->aws_->url.prefix);
    }
    self->status_ = s;
    ::close(self->write_fd_);  // the reader's EOF
  });
  *out = std::move(rs);
  return Status::OK();
}

RemoteStream::~RemoteStream() {
  (void)Finish();
  if (read_fd_ >= 0) ::close(read_fd_);
}

Status RemoteStream::Finish() {
  if (!finished_) {
    finished_ = true;
    stopping_.store(true);
    // Every descriptor of the read end (the reader's dup too): a send blocked on a full
    // socket fails now.
    ::shutdown(read_fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
  }
  return status_;
}

bool RemoteStream::Send(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(write_fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The reader stopped first (it failed, or needed no more): not the fetch's error.
#define DSFS_SEND_OR_STOP(data)           \
  do {                                    \
    if (!Send(data)) return Status::OK(); \
  } while (0)

Status RemoteStream::FetchObject(const std::string& bucket, const std::string& key) {
  S3Client& c = *aws_->client;
  uint64_t size = 0;
  Status hs = c.Head(bucket, key, &size);
  if (hs.code() == Status::Code::kNotFound) {
    return Status::NotFound(src_ + ": no such object (a prefix of objects to pack ends with '/')");
  }
  DSFS_RETURN_IF_ERROR(hs);
  std::string buf;
  for (uint64_t off = 0; off < size && !stopping_.load(); off += kRangeBytes) {
    const uint64_t len = std::min<uint64_t>(kRangeBytes, size - off);
    DSFS_RETURN_IF_ERROR(c.Get(bucket, key, &buf, off, len));
    if (buf.size() != len) {
      return Status::IOError(src_ + ": the object changed while it was read (" +
                             std::to_string(off + buf.size()) + " of " + std::to_string(size) +
                             " bytes)");
    }
    DSFS_SEND_OR_STOP(buf);
    buf = std::string();  // not held while the next range arrives
  }
  return Status::OK();
}

Status RemoteStream::FetchPrefix(const std::string& bucket, const std::string& prefix) {
  S3Client& c = *aws_->client;
  std::unique_ptr<struct archive, WriterCloser> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open(a.get(), this, nullptr, WriteToStream, nullptr) != ARCHIVE_OK) {
    return Status::IOError(src_ + ": " + archive_error_string(a.get()));
  }
  std::unique_ptr<struct archive_entry, decltype(&archive_entry_free)> e(archive_entry_new(),
                                                                         archive_entry_free);
  std::string path, buf;
  bool gone = false;  // the reader stopped
  uint64_t files = 0;
  PageFetcher ahead(&c, bucket);
  Status ls = c.ListEach(bucket, prefix, [&](std::vector<S3Client::ListedObject>& page) -> Status {
    // Every key of the page checked before any of it is fetched.
    std::vector<std::string> paths(page.size());
    for (size_t i = 0; i < page.size(); ++i) {
      DSFS_RETURN_IF_ERROR(KeyPath(src_, prefix, page[i].key, &paths[i]));
    }
    ahead.StartPage(&page, kRangeBytes);
    struct AbandonAtExit {
      PageFetcher* f;
      ~AbandonAtExit() { f->Abandon(); }
    } abandon{&ahead};
    for (size_t i = 0; i < page.size(); ++i) {
      const S3Client::ListedObject& o = page[i];
      Status fs;
      const bool fetched = ahead.Take(i, &buf, &fs);
      if (stopping_.load()) {
        gone = true;
        return Status::IOError("stopped");
      }
      DSFS_RETURN_IF_ERROR(fs);
      if (paths[i].empty()) continue;
      if (fetched && buf.size() != o.size) {
        return Status::IOError(src_ + ": object " + Short(o.key) + " changed while it was read");
      }
      archive_entry_clear(e.get());
      archive_entry_copy_pathname(e.get(), paths[i].c_str());
      archive_entry_set_filetype(e.get(), AE_IFREG);
      archive_entry_set_perm(e.get(), 0644);
      archive_entry_set_size(e.get(), static_cast<la_int64_t>(o.size));
      archive_entry_set_mtime(e.get(), ParseIsoTime(o.last_modified), 0);
      if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) {
        gone = stopping_.load();
        return Status::IOError(src_ + ": " + Short(o.key) + ": " + archive_error_string(a.get()));
      }
      for (uint64_t off = 0; off < o.size; off += kRangeBytes) {
        const uint64_t len = std::min<uint64_t>(kRangeBytes, o.size - off);
        if (!fetched) {
          DSFS_RETURN_IF_ERROR(c.Get(bucket, o.key, &buf, off, len));
          if (buf.size() != len) {
            return Status::IOError(src_ + ": object " + Short(o.key) +
                                   " changed while it was read");
          }
        }
        if (archive_write_data(a.get(), buf.data(), buf.size()) !=
            static_cast<la_ssize_t>(buf.size())) {
          gone = true;
          return Status::IOError("stopped");
        }
        buf = std::string();
      }
      ++files;
    }
    return Status::OK();
  });
  if (gone) return Status::OK();
  DSFS_RETURN_IF_ERROR(ls);
  if (files == 0) return Status::NotFound(src_ + ": no objects under this prefix");
  if (archive_write_close(a.get()) != ARCHIVE_OK && !stopping_.load()) {
    return Status::IOError(src_ + ": " + archive_error_string(a.get()));
  }
  return Status::OK();
}

Status RemoteStream::FetchUrl(const std::string& url) {
  HttpStreamOptions options;
  options.low_speed_timeout_s = S3Client::RetryPolicy::For(0, 0).low_speed_timeout_s;
  // The CAs of https as for S3 endpoints (s3/credentials.h); else the system's.
  if (const char* ca = std::getenv("AWS_CA_BUNDLE"); ca && *ca) options.ca_bundle = ca;
  bool gone = false;
  Status s = HttpGetStream(url, options, [&](std::string_view data) {
    if (!Send(data)) gone = true;
    return !gone;
  });
  return gone ? Status::OK() : s;
}

}  // namespace dsfs
