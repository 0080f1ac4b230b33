#include "backend/s3_store.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/s3_disk_cache.h"
#include "backend/s3_index.h"
#include "common/log.h"

namespace dsfs {
namespace {

// Values of at least this size (the metadata tables: names and inode records are stored raw in
// the format) are stored zstd-compressed when that saves a tenth: less to fetch at mount.
constexpr size_t kCompressFromBytes = 1 << 20;
// The reader's cache of values read last (RecentValues): a few payload groups per thread.
constexpr uint64_t kRecentValueBytes = 8 << 20;

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

std::string DataKey(const std::string& prefix, uint64_t id, uint64_t object) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06llu", static_cast<unsigned long long>(object));
  return Join(prefix, "data/" + Hex64(id) + "/" + buf);
}

// The retry budget: the mount's options (s3_attempts=, s3_timeout=) where given, else the
// environment's (for tools and tests), else the client's defaults.
S3Client::RetryPolicy RetryPolicyFor(int attempts, int timeout_s) {
  S3Client::RetryPolicy p;
  if (const char* v = std::getenv("DSFS_S3_ATTEMPTS")) p.attempts = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("DSFS_S3_TIMEOUT_S")) {
    p.low_speed_timeout_s = std::max(1, std::atoi(v));
  }
  if (attempts > 0) p.attempts = attempts;
  if (timeout_s > 0) p.low_speed_timeout_s = timeout_s;
  return p;
}

// Runs piece(0) .. piece(pieces - 1) on up to `threads` threads; the first failure (an error,
// or an exception such as bad_alloc, which would otherwise end the process from a thread) stops
// the pieces not yet started and is returned.
Status RunPieces(uint64_t pieces, uint64_t threads, const std::function<Status(uint64_t)>& piece) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (uint64_t i; (i = next.fetch_add(1)) < pieces;) {
      Status s;
      try {
        s = piece(i);
      } catch (const std::bad_alloc&) {
        s = Status::IOError("out of memory");
      } catch (const std::exception& e) {
        s = Status::IOError(e.what());
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = s;
        next.store(pieces);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t t = 1; t < std::min(pieces, threads); ++t) pool.emplace_back(work);
  work();  // this thread is one of them
  for (auto& t : pool) t.join();
  return first_error;
}

// ---------------------------------------------------------------------------------------
// Writer.

class S3Writer : public KvWriter {
 public:
  S3Writer(std::unique_ptr<S3Client> client, S3Url url, KvWriterOptions options, S3WriterOptions s3)
      : client_(std::move(client)), url_(std::move(url)), options_(options), s3_(std::move(s3)) {}

  Status Put(std::string_view key, std::string_view value) override {
    if (!failed_.ok()) return failed_;
    if (index_.entries() > 0) {
      if (key <= std::string_view(last_key_)) {
        return Status::InvalidArgument("S3 store: keys must be put in ascending order");
      }
    }
    if (value.size() > kS3MaxValueBytes) {
      return Status::InvalidArgument("S3 store: a value of " + std::to_string(value.size()) +
                                     " bytes (at most " + std::to_string(kS3MaxValueBytes) + ")");
    }
    if (index_.entries() == 0) id_ = XXH3_64bits(value.data(), value.size());  // the header record
    last_key_.assign(key);
    std::string z;
    uint64_t raw_length = 0;  // 0: stored as is
    if (value.size() >= kCompressFromBytes) {
      z.resize(ZSTD_compressBound(value.size()));
      size_t n = ZSTD_compress(z.data(), z.size(), value.data(), value.size(), 3);
      if (!ZSTD_isError(n) && n < value.size() - value.size() / 10) {
        z.resize(n);
        raw_length = value.size();
        value = z;
      }
    }
    index_.Add(key, object_sizes_.size(), buffer_.size(), value.size(), raw_length,
               XXH3_64bits(value.data(), value.size()));
    buffer_.append(value);
    if (buffer_.size() >= s3_.object_bytes) return Flush();
    return Status::OK();
  }

  Status Commit() override {
    DSFS_RETURN_IF_ERROR(failed_);
    if (!buffer_.empty() || object_sizes_.empty()) DSFS_RETURN_IF_ERROR(Flush());
    // The previous push's objects, removed once the new index is in place.
    std::string old_id;
    std::string old_index;
    const std::string index_key = Join(url_.prefix, std::string(kS3IndexName));
    Status s = client_->Get(url_.bucket, index_key, &old_index, 0, 0, kS3MaxIndexBytes);
    uint64_t old_raw_id;
    if (s.ok() && S3IndexId(old_index, &old_raw_id)) old_id = Hex64(old_raw_id);
    std::string index;
    DSFS_RETURN_IF_ERROR(index_.Finish(id_, object_sizes_, &index));
    DSFS_RETURN_IF_ERROR(client_->Put(url_.bucket, index_key, index));
    if (!old_id.empty() && old_id != Hex64(id_)) {
      std::vector<std::string> keys;
      const std::string old_prefix = Join(url_.prefix, "data/" + old_id + "/");
      if (client_->List(url_.bucket, old_prefix, &keys).ok()) {
        for (const auto& k : keys) (void)client_->Delete(url_.bucket, k);
      }
    }
    if (s3_.progress) s3_.progress(bytes_done_, object_sizes_.size(), skipped_);
    return Status::OK();
  }

  Status Begin() {
    uint64_t size;
    Status s = client_->Head(url_.bucket, Join(url_.prefix, std::string(kS3IndexName)), &size);
    if (s.ok() && !options_.overwrite) {
      return Status::Exists(url_.ToString() +
                            ": a store is already there (use --force to replace it)");
    }
    if (!s.ok() && !s.IsNotFound()) return s;
    return Status::OK();
  }

 private:
  Status Flush() {
    const uint64_t object = object_sizes_.size();
    const std::string key = DataKey(url_.prefix, id_, object);
    const std::string sum = Hex64(XXH3_64bits(buffer_.data(), buffer_.size()));
    // A resumed push: the object a previous run of the same store completed is kept.
    uint64_t size = 0;
    std::map<std::string, std::string> meta;
    bool done = client_->Head(url_.bucket, key, &size, &meta).ok() && size == buffer_.size() &&
                meta["xxh3"] == sum;
    if (done) {
      ++skipped_;
    } else if (buffer_.size() <= s3_.part_bytes) {
      failed_ = client_->Put(url_.bucket, key, buffer_, {{"xxh3", sum}});
    } else {
      failed_ = UploadMultipart(key, sum);
    }
    DSFS_RETURN_IF_ERROR(failed_);
    bytes_done_ += buffer_.size();
    object_sizes_.push_back(buffer_.size());
    buffer_.clear();
    if (s3_.progress) s3_.progress(bytes_done_, object_sizes_.size(), skipped_);
    return Status::OK();
  }

  Status UploadMultipart(const std::string& key, const std::string& sum) {
    std::string upload_id;
    DSFS_RETURN_IF_ERROR(client_->StartMultipart(url_.bucket, key, {{"xxh3", sum}}, &upload_id));
    const size_t parts = (buffer_.size() + s3_.part_bytes - 1) / s3_.part_bytes;
    std::vector<std::string> etags(parts);
    Status first_error = RunPieces(parts, std::max(1, s3_.threads), [&](uint64_t i) {
      std::string_view part = std::string_view(buffer_).substr(i * s3_.part_bytes, s3_.part_bytes);
      return client_->UploadPart(url_.bucket, key, upload_id, static_cast<int>(i + 1), part,
                                 &etags[i]);
    });
    if (first_error.ok())
      first_error = client_->CompleteMultipart(url_.bucket, key, upload_id, etags);
    if (!first_error.ok()) (void)client_->AbortMultipart(url_.bucket, key, upload_id);
    return first_error;
  }

  std::unique_ptr<S3Client> client_;
  S3Url url_;
  KvWriterOptions options_;
  S3WriterOptions s3_;
  Status failed_;
  uint64_t id_ = 0, bytes_done_ = 0, skipped_ = 0;
  std::string last_key_, buffer_;
  S3IndexBuilder index_;
  std::vector<uint64_t> object_sizes_;
};

// ---------------------------------------------------------------------------------------
// Reader.

using Entry = S3IndexEntry;

struct StringPin : PinnedValue::Pin {
  std::string bytes;
};

// Keeps a value of the recent-values cache alive as long as a PinnedValue points into it.
struct SharedPin : PinnedValue::Pin {
  std::shared_ptr<const std::string> bytes;
};

// The values read last, verified, within a byte budget (least recently used out first): a
// payload group holds ~100 small files, and reading them one after another would otherwise
// read and check the whole group from the disk cache once per file.
class RecentValues {
 public:
  explicit RecentValues(uint64_t budget) : budget_(budget) {}
  std::shared_ptr<const std::string> Get(uint64_t entry) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = where_.find(entry);
    if (it == where_.end()) return nullptr;
    lru_.splice(lru_.end(), lru_, it->second);
    return it->second->second;
  }
  void Put(uint64_t entry, std::shared_ptr<const std::string> v) {
    if (v->size() > budget_ / 4) return;  // large chunks are read once
    std::lock_guard<std::mutex> lock(mu_);
    if (where_.count(entry)) return;
    bytes_ += v->size();
    lru_.emplace_back(entry, std::move(v));
    where_[entry] = std::prev(lru_.end());
    while (bytes_ > budget_ && !lru_.empty()) {
      bytes_ -= lru_.front().second->size();
      where_.erase(lru_.front().first);
      lru_.pop_front();
    }
  }

 private:
  const uint64_t budget_;
  std::mutex mu_;  // guards everything below
  uint64_t bytes_ = 0;
  std::list<std::pair<uint64_t, std::shared_ptr<const std::string>>> lru_;
  std::unordered_map<uint64_t,
                     std::list<std::pair<uint64_t, std::shared_ptr<const std::string>>>::iterator>
      where_;
};

class S3Reader : public KvReader {
 public:
  Status Open(const std::string& url_text, const KvReaderOptions& options) {
    DSFS_RETURN_IF_ERROR(ParseS3Url(url_text, &url_));
    AwsSettings settings;
    DSFS_RETURN_IF_ERROR(LoadAwsSettings(&settings));
    const std::string endpoint = settings.endpoint;
    client_ = std::make_unique<S3Client>(
        settings, RetryPolicyFor(options.remote_attempts, options.remote_timeout_s));
    std::unique_ptr<S3CacheRoot> root;
    if (!options.cache_dir.empty() && options.cache_disk_bytes > 0) {
      const std::string ident = endpoint + " " + url_.ToString();
      root = std::make_unique<S3CacheRoot>();
      DSFS_RETURN_IF_ERROR(
          root->Open(options.cache_dir, "s3-" + Hex64(XXH3_64bits(ident.data(), ident.size()))));
    }
    const std::string name = url_.ToString();
    std::string bytes;
    Status s = client_->Get(url_.bucket, Join(url_.prefix, std::string(kS3IndexName)), &bytes, 0, 0,
                            kS3MaxIndexBytes);
    bool from_cache = false;
    if (s.IsNotFound()) {
      return Status::NotFound(name + ": no dsfs store there (no " + std::string(kS3IndexName) +
                              " object; push one with dsfs push)");
    }
    if (!s.ok()) {
      // An outage: the index an earlier mount kept serves what the disk cache holds.
      std::string cached;
      if (!root || s.message().find("access denied") != std::string::npos ||
          !root->ReadIndex(&cached)) {
        return s;
      }
      bytes = std::move(cached);
      from_cache = true;
    }
    Status parsed = ParseS3Index(name, bytes, &index_);
    if (!parsed.ok()) {
      if (!from_cache) return parsed;
      return Status::IOError(s.message() + "; the disk cache's copy of the index (" + root->path() +
                             "/index) cannot stand in: " + parsed.message());
    }
    if (from_cache) {
      Log()->warn("{}: object store unreachable ({}); serving from the disk cache only", name,
                  s.message());
    }
    if (root) {
      const std::string id = Hex64(index_.id);
      // A store pushed again over this URL: the old one's cached blocks can never be served.
      root->RemoveOtherStores(id);
      if (!from_cache) root->WriteIndex(bytes);
      disk_ = std::make_unique<S3DiskCache>();
      DSFS_RETURN_IF_ERROR(disk_->Open(*root, id, index_.object_sizes, options.cache_disk_bytes));
    }
    return Status::OK();
  }

  Status Get(std::string_view key, PinnedValue* value) override {
    auto it = Find(key);
    if (it == index_.entries.end() || index_.Key(*it) != key)
      return Status::NotFound("no such key");
    return Load(*it, value);
  }

  Status Seek(std::string_view key, std::string* found_key, PinnedValue* value) override {
    auto it = Find(key);
    if (it == index_.entries.end()) return Status::NotFound("no key at or after");
    *found_key = std::string(index_.Key(*it));
    return Load(*it, value);
  }

  Status SeekKey(std::string_view key, std::string* found_key) override {
    auto it = Find(key);
    if (it == index_.entries.end()) return Status::NotFound("no key at or after");
    *found_key = std::string(index_.Key(*it));
    return Status::OK();
  }

  std::string_view Name() const override { return "s3"; }
  bool remote() const override { return true; }

  std::vector<std::pair<std::string, uint64_t>> Counters() const override {
    const auto& c = client_->counters();
    return {{"remote_gets", c.gets.load()},
            {"remote_get_bytes", c.get_bytes.load()},
            {"remote_retries", c.retries.load()},
            {"remote_failures", c.failures.load()},
            {"recent_value_hits", recent_hits_.load()},
            {"disk_cache_hits", disk_hits_.load()},
            {"disk_cache_misses", disk_misses_.load()},
            {"disk_cache_evicted_blocks", disk_ ? disk_->evicted() : 0}};
  }

  S3ReaderStats Stats() const {
    S3ReaderStats st;
    st.gets = client_->counters().gets.load();
    st.get_bytes = client_->counters().get_bytes.load();
    st.disk_hits = disk_hits_.load();
    st.disk_misses = disk_misses_.load();
    st.evicted_blocks = disk_ ? disk_->evicted() : 0;
    return st;
  }

 private:
  std::vector<Entry>::const_iterator Find(std::string_view key) const {
    return std::lower_bound(index_.entries.begin(), index_.entries.end(), key,
                            [&](const Entry& e, std::string_view k) { return index_.Key(e) < k; });
  }

  Status Load(const Entry& e, PinnedValue* value) {
    const uint64_t n = static_cast<uint64_t>(&e - index_.entries.data());
    if (auto v = recent_.Get(n)) {
      recent_hits_.fetch_add(1, std::memory_order_relaxed);
      auto shared = std::make_unique<SharedPin>();
      shared->bytes = std::move(v);
      std::string_view data = *shared->bytes;
      value->Set(data, std::move(shared));
      return Status::OK();
    }
    auto pin = std::make_unique<StringPin>();
    if (disk_ && disk_->Read(e.object, e.offset, e.length, e.sum, &pin->bytes)) {
      disk_hits_.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (disk_) disk_misses_.fetch_add(1, std::memory_order_relaxed);
      DSFS_RETURN_IF_ERROR(Fetch(e, &pin->bytes));
    }
    if (e.raw_length != 0) {
      if (ZSTD_getFrameContentSize(pin->bytes.data(), pin->bytes.size()) != e.raw_length) {
        return Status::Corruption(url_.ToString() +
                                  ": a compressed value is not the size its index says");
      }
      std::string raw(e.raw_length, '\0');
      size_t n = ZSTD_decompress(raw.data(), raw.size(), pin->bytes.data(), pin->bytes.size());
      if (ZSTD_isError(n) || n != raw.size()) {
        return Status::Corruption(url_.ToString() + ": a compressed value does not decompress");
      }
      pin->bytes = std::move(raw);
    }
    auto shared = std::make_unique<SharedPin>();
    shared->bytes = std::make_shared<const std::string>(std::move(pin->bytes));
    recent_.Put(n, shared->bytes);
    std::string_view data = *shared->bytes;
    value->Set(data, std::move(shared));
    return Status::OK();
  }

  // GETs the whole blocks around the value (its neighbours come along: one request for a
  // directory's files), keeps them on disk and returns the value, checked. Threads missing the
  // same blocks at once share one fetch; a span of many blocks (the metadata tables at mount,
  // large chunks) is fetched in pieces of kPieceBytes, several at once.
  Status Fetch(const Entry& e, std::string* out) {
    const uint64_t object_size = index_.object_sizes[e.object];
    const uint64_t begin = e.offset / kS3BlockBytes * kS3BlockBytes;
    const uint64_t end = std::min(
        object_size, (e.offset + e.length + kS3BlockBytes - 1) / kS3BlockBytes * kS3BlockBytes);
    const FlightKey fk{e.object, begin, end};
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
      std::lock_guard<std::mutex> lock(flights_mu_);
      auto& slot = flights_[fk];
      if (!slot) {
        slot = std::make_shared<Flight>();
        leader = true;
      }
      flight = slot;
    }
    // The value checks out in the span (FetchSpan made sure the span is whole): the leader
    // learns it before keeping the span on disk, a follower after the flight.
    auto matches = [&] {
      return XXH3_64bits(flight->bytes.data() + (e.offset - begin), e.length) == e.sum;
    };
    bool checked = false;
    if (leader) {
      // Whatever happens here (an error, bad_alloc, any exception), the flight completes: the
      // threads waiting on it must never wait for good.
      try {
        flight->status = FetchSpan(e.object, begin, end, &flight->bytes);
        // Kept on disk only if the value it was fetched for checks out (a server answering
        // other bytes fills no cache).
        checked = flight->status.ok() && matches();
        if (checked && disk_) disk_->Write(e.object, begin, flight->bytes);
      } catch (const std::bad_alloc&) {
        flight->status = Status::IOError(url_.ToString() + ": out of memory fetching " +
                                         std::to_string(end - begin) + " bytes");
      } catch (const std::exception& ex) {
        flight->status = Status::IOError(url_.ToString() + ": fetch failed: " + ex.what());
      }
      if (!flight->status.ok()) std::string().swap(flight->bytes);
      {
        std::lock_guard<std::mutex> lock(flights_mu_);
        flights_.erase(fk);
      }
      std::lock_guard<std::mutex> lock(flight->mu);
      flight->done = true;
      flight->cv.notify_all();
    } else {
      std::unique_lock<std::mutex> lock(flight->mu);
      flight->cv.wait(lock, [&] { return flight->done; });
    }
    DSFS_RETURN_IF_ERROR(flight->status);
    if (!checked && !matches()) {
      return Status::Corruption(url_.ToString() + ": data object " +
                                DataKey(url_.prefix, index_.id, e.object) +
                                " does not match its index (checksum)");
    }
    *out = flight->bytes.substr(e.offset - begin, e.length);
    return Status::OK();
  }

  Status FetchSpan(uint32_t object, uint64_t begin, uint64_t end, std::string* bytes) {
    const std::string key = DataKey(url_.prefix, index_.id, object);
    const uint64_t n = end - begin;
    constexpr uint64_t kPieceBytes = 8 << 20;
    constexpr int kMaxThreads = 8;
    if (n <= kPieceBytes) {
      if (n > 0) DSFS_RETURN_IF_ERROR(client_->Get(url_.bucket, key, bytes, begin, n));
    } else {
      bytes->assign(n, '\0');
      const uint64_t pieces = (n + kPieceBytes - 1) / kPieceBytes;
      DSFS_RETURN_IF_ERROR(RunPieces(pieces, kMaxThreads, [&](uint64_t i) {
        std::string piece;
        uint64_t off = i * kPieceBytes, len = std::min(kPieceBytes, n - off);
        DSFS_RETURN_IF_ERROR(client_->Get(url_.bucket, key, &piece, begin + off, len));
        if (piece.size() != len) return Status::IOError(key + ": short answer");
        std::memcpy(bytes->data() + off, piece.data(), len);
        return Status::OK();
      }));
    }
    if (bytes->size() != n) {
      return Status::IOError(url_.ToString() + ": data object " + key +
                             " is shorter than its index says");
    }
    return Status::OK();
  }

  struct FlightKey {
    uint64_t object, begin, end;
    bool operator<(const FlightKey& o) const {
      return std::tie(object, begin, end) < std::tie(o.object, o.begin, o.end);
    }
  };
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;  // guarded by mu; status and bytes are set before it, read after
    Status status;
    std::string bytes;
  };

  S3Url url_;
  std::unique_ptr<S3Client> client_;
  S3Index index_;
  std::mutex flights_mu_;  // guards flights_
  std::map<FlightKey, std::shared_ptr<Flight>> flights_;
  std::unique_ptr<S3DiskCache> disk_;
  std::atomic<uint64_t> disk_hits_{0}, disk_misses_{0}, recent_hits_{0};
  RecentValues recent_{kRecentValueBytes};
};

}  // namespace

Status NewS3Writer(const std::string& url_text, const KvWriterOptions& options,
                   const S3WriterOptions& s3_options, std::unique_ptr<KvWriter>* writer) {
  S3Url url;
  DSFS_RETURN_IF_ERROR(ParseS3Url(url_text, &url));
  AwsSettings settings;
  DSFS_RETURN_IF_ERROR(LoadAwsSettings(&settings));
  auto w = std::make_unique<S3Writer>(std::make_unique<S3Client>(settings, RetryPolicyFor(0, 0)),
                                      url, options, s3_options);
  DSFS_RETURN_IF_ERROR(w->Begin());
  *writer = std::move(w);
  return Status::OK();
}

Status OpenS3Reader(const std::string& url, const KvReaderOptions& options,
                    std::unique_ptr<KvReader>* reader) {
  auto r = std::make_unique<S3Reader>();
  try {
    DSFS_RETURN_IF_ERROR(r->Open(url, options));
  } catch (const std::bad_alloc&) {
    return Status::IOError(url + ": out of memory reading the S3 index");
  }
  *reader = std::move(r);
  return Status::OK();
}

bool GetS3ReaderStats(KvReader* reader, S3ReaderStats* stats) {
  auto* r = dynamic_cast<S3Reader*>(reader);
  if (!r) return false;
  *stats = r->Stats();
  return true;
}

}  // namespace dsfs
