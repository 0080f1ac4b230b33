#include "backend/s3_store.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <list>
#include <map>
#include <tuple>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"

namespace dsfs {
namespace {

constexpr char kIndexMagic[8] = {'D', 'S', 'F', 'S', 'S', '3', 'I', 'X'};
constexpr uint32_t kIndexVersion = 2;
// Values of at least this size (the metadata tables: names and inode records are stored raw in
// the format) are stored zstd-compressed when that saves a tenth: less to fetch at mount.
constexpr size_t kCompressFromBytes = 1 << 20;
constexpr size_t kIndexHeaderBytes = 8 + 4 + 4 + 8 * 5;
// The reader's cache of values read last (RecentValues): a few payload groups per thread.
constexpr uint64_t kRecentValueBytes = 8 << 20;

void PutU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
void PutU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void PutVarint(std::string* s, uint64_t v) {
  while (v >= 0x80) {
    s->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  s->push_back(static_cast<char>(v));
}
bool GetVarint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

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

// ---------------------------------------------------------------------------------------
// Writer.

class S3Writer : public KvWriter {
 public:
  S3Writer(std::unique_ptr<S3Client> client, S3Url url, KvWriterOptions options,
           S3WriterOptions s3)
      : client_(std::move(client)), url_(std::move(url)), options_(options), s3_(std::move(s3)) {}

  Status Put(std::string_view key, std::string_view value) override {
    if (!failed_.ok()) return failed_;
    if (!last_key_.empty() || entries_ > 0) {
      if (key <= std::string_view(last_key_)) {
        return Status::InvalidArgument("S3 store: keys must be put in ascending order");
      }
    }
    if (entries_ == 0) id_ = XXH3_64bits(value.data(), value.size());  // the header record
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
    PutVarint(&list_, key.size());
    list_.append(key);
    PutVarint(&list_, object_sizes_.size());
    PutVarint(&list_, buffer_.size());
    PutVarint(&list_, value.size());
    PutVarint(&list_, raw_length);
    PutU64(&list_, XXH3_64bits(value.data(), value.size()));
    ++entries_;
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
    Status s = client_->Get(url_.bucket, index_key, &old_index);
    if (s.ok() && old_index.size() >= kIndexHeaderBytes &&
        std::memcmp(old_index.data(), kIndexMagic, 8) == 0) {
      old_id = Hex64(GetU64(old_index.data() + 16));
    }
    std::string index(kIndexMagic, 8);
    PutU32(&index, kIndexVersion);
    PutU32(&index, 0);
    PutU64(&index, id_);
    PutU64(&index, object_sizes_.size());
    PutU64(&index, entries_);
    PutU64(&index, list_.size());
    std::string body;
    for (uint64_t n : object_sizes_) PutU64(&body, n);
    std::string z(ZSTD_compressBound(list_.size()), '\0');
    size_t zn = ZSTD_compress(z.data(), z.size(), list_.data(), list_.size(), 3);
    if (ZSTD_isError(zn)) return Status::IOError("S3 index: zstd failed");
    z.resize(zn);
    body += z;
    PutU64(&index, XXH3_64bits(body.data(), body.size()));
    index += body;
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
      return Status::Exists(url_.ToString() + ": a store is already there (use --force to replace it)");
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
    std::atomic<size_t> next{0};
    std::mutex mu;
    Status first_error;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < parts;) {
        std::string_view part = std::string_view(buffer_).substr(i * s3_.part_bytes, s3_.part_bytes);
        Status s = client_->UploadPart(url_.bucket, key, upload_id, static_cast<int>(i + 1), part,
                                       &etags[i]);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = s;
          next.store(parts);
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::max(1, s3_.threads); ++t) threads.emplace_back(work);
    for (auto& t : threads) t.join();
    if (first_error.ok()) first_error = client_->CompleteMultipart(url_.bucket, key, upload_id, etags);
    if (!first_error.ok()) (void)client_->AbortMultipart(url_.bucket, key, upload_id);
    return first_error;
  }

  std::unique_ptr<S3Client> client_;
  S3Url url_;
  KvWriterOptions options_;
  S3WriterOptions s3_;
  Status failed_;
  uint64_t id_ = 0, entries_ = 0, bytes_done_ = 0, skipped_ = 0;
  std::string last_key_, list_, buffer_;
  std::vector<uint64_t> object_sizes_;
};

// ---------------------------------------------------------------------------------------
// Reader.

struct Entry {
  uint64_t key_off;
  uint32_t key_len;
  uint32_t object;
  uint64_t offset;
  uint64_t length;
  uint64_t raw_length;  // 0: stored as is; else zstd-compressed from this many bytes
  uint64_t sum;         // of the stored bytes
};

struct Index {
  uint64_t id = 0;
  std::vector<uint64_t> object_sizes;
  std::string keys;
  std::vector<Entry> entries;
  std::string_view Key(const Entry& e) const { return std::string_view(keys).substr(e.key_off, e.key_len); }
};

Status ParseIndex(const std::string& name, std::string_view bytes, Index* index) {
  auto bad = [&](const std::string& why) { return Status::Corruption(name + ": damaged S3 index (" + why + ")"); };
  if (bytes.size() < kIndexHeaderBytes || std::memcmp(bytes.data(), kIndexMagic, 8) != 0) {
    return Status::InvalidArgument(name + ": not a dsfs store (no dsfs index object)");
  }
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  if (version != kIndexVersion) {
    return Status::NotSupported(name + ": S3 index version " + std::to_string(version) +
                                " (this dsfs reads version " + std::to_string(kIndexVersion) + ")");
  }
  index->id = GetU64(bytes.data() + 16);
  uint64_t objects = GetU64(bytes.data() + 24), entries = GetU64(bytes.data() + 32);
  uint64_t raw = GetU64(bytes.data() + 40), sum = GetU64(bytes.data() + 48);
  std::string_view body = bytes.substr(kIndexHeaderBytes);
  if (XXH3_64bits(body.data(), body.size()) != sum) return bad("checksum");
  if (objects > body.size() / 8 || raw > (uint64_t{1} << 36)) return bad("sizes");
  for (uint64_t i = 0; i < objects; ++i) index->object_sizes.push_back(GetU64(body.data() + 8 * i));
  body.remove_prefix(8 * objects);
  std::string list(raw, '\0');
  size_t n = ZSTD_decompress(list.data(), list.size(), body.data(), body.size());
  if (ZSTD_isError(n) || n != raw) return bad("entry list");
  std::string_view in(list);
  index->entries.reserve(entries);
  std::string_view prev;
  for (uint64_t i = 0; i < entries; ++i) {
    uint64_t klen, obj, off, len;
    if (!GetVarint(&in, &klen) || klen > in.size()) return bad("entry");
    Entry e;
    e.key_off = index->keys.size();
    e.key_len = static_cast<uint32_t>(klen);
    index->keys.append(in.substr(0, klen));
    in.remove_prefix(klen);
    uint64_t raw_len;
    if (!GetVarint(&in, &obj) || !GetVarint(&in, &off) || !GetVarint(&in, &len) ||
        !GetVarint(&in, &raw_len) || in.size() < 8 || raw_len > (uint64_t{1} << 36)) {
      return bad("entry");
    }
    e.sum = GetU64(in.data());
    in.remove_prefix(8);
    if (obj >= objects || off > index->object_sizes[obj] || len > index->object_sizes[obj] - off) {
      return bad("entry out of its object");
    }
    e.object = static_cast<uint32_t>(obj);
    e.offset = off;
    e.length = len;
    e.raw_length = raw_len;
    index->entries.push_back(e);
  }
  for (size_t i = 1; i < index->entries.size(); ++i) {
    if (index->Key(index->entries[i - 1]) >= index->Key(index->entries[i])) return bad("key order");
  }
  (void)prev;
  return Status::OK();
}

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
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, std::shared_ptr<const std::string>>>::iterator> where_;
};

// The disk cache of one store: sparse files mirroring its data objects, and an LRU of the
// blocks they hold, evicted (hole punched) beyond the budget.
class DiskCache {
 public:
  Status Open(const std::string& dir, const Index& index, uint64_t budget_bytes) {
    dir_ = dir;
    budget_ = budget_bytes;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError(dir + ": cannot create the S3 disk cache: " + ec.message());
    // Files are opened when first used (a store of 1 TB has ~16,000 data objects), but what
    // earlier mounts left is found now: every allocated block joins the LRU (oldest first).
    fds_ = std::make_unique<std::atomic<int>[]>(index.object_sizes.size());
    objects_ = index.object_sizes.size();
    // One descriptor per cache file in use: room for all of them beside the daemon's own.
    struct rlimit rl;
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < objects_ + 1024) {
      rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, objects_ + 1024);
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    for (size_t i = 0; i < objects_; ++i) fds_[i].store(-1);
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      char* end = nullptr;
      const std::string name = e.path().filename().string();
      unsigned long long i = std::strtoull(name.c_str(), &end, 10);
      if (name.size() != 6 || *end != '\0' || i >= objects_) continue;
      int fd = Fd(i);
      if (fd < 0) continue;
      off_t size = static_cast<off_t>(index.object_sizes[i]);
      for (off_t pos = 0; pos < size;) {
        off_t data = ::lseek(fd, pos, SEEK_DATA);
        if (data < 0 || data >= size) break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0) hole = size;
        for (uint64_t b = static_cast<uint64_t>(data) / kS3BlockBytes;
             b * kS3BlockBytes < static_cast<uint64_t>(hole); ++b) {
          Touch(Block(i, b));
        }
        pos = hole;
      }
    }
    return Status::OK();
  }
  ~DiskCache() {
    for (size_t i = 0; i < objects_; ++i) {
      if (fds_[i] >= 0) ::close(fds_[i]);
    }
  }

  // The value at [offset, offset + length) of `object` if the file holds it verified.
  bool Read(uint32_t object, uint64_t offset, uint64_t length, uint64_t sum, std::string* out) {
    out->resize(length);
    int fd = Fd(object);
    if (fd < 0 || !PreadAll(fd, out->data(), length, offset)) return false;
    if (XXH3_64bits(out->data(), out->size()) != sum) return false;
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t b = offset / kS3BlockBytes; b * kS3BlockBytes < offset + length; ++b) {
      auto it = where_.find(Block(object, b));
      if (it != where_.end()) lru_.splice(lru_.end(), lru_, it->second);
    }
    return true;
  }

  // Keeps `bytes`, fetched from `offset` of `object` (whole blocks, the last maybe short).
  void Write(uint32_t object, uint64_t offset, std::string_view bytes) {
    if (budget_ < kS3BlockBytes) return;
    int fd = Fd(object);
    if (fd < 0) return;
    ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n != static_cast<ssize_t>(bytes.size())) return;  // disk full: a fetch next time
    std::vector<uint64_t> evict;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t b = offset / kS3BlockBytes; b * kS3BlockBytes < offset + bytes.size(); ++b) {
        Touch(Block(object, b));
      }
      while (where_.size() * kS3BlockBytes > budget_ && !lru_.empty()) {
        evict.push_back(lru_.front());
        where_.erase(lru_.front());
        lru_.pop_front();
      }
    }
    for (uint64_t blk : evict) {
      ::fallocate(Fd(blk >> 32), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>((blk & 0xffffffffu) * kS3BlockBytes), kS3BlockBytes);
      evicted_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  static uint64_t Block(uint64_t object, uint64_t block) { return object << 32 | block; }
  // The cache file of `object`, opened (created) on first use; -1 if it cannot be (the value
  // is then fetched, not cached: a full or read-only cache disk is no read error).
  int Fd(uint64_t object) {
    int fd = fds_[object].load(std::memory_order_acquire);
    if (fd >= 0) return fd;
    char name[32];
    std::snprintf(name, sizeof(name), "/%06llu", static_cast<unsigned long long>(object));
    fd = ::open((dir_ + name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::call_once(warned_, [&] {
        Log()->warn("{}: S3 disk cache unusable ({}); fetching without it", dir_,
                    std::strerror(errno));
      });
      return -1;
    }
    int expected = -1;
    if (!fds_[object].compare_exchange_strong(expected, fd)) {
      ::close(fd);  // another thread opened it first
      return expected;
    }
    return fd;
  }
  // REQUIRES: mu_ held (or the constructor).
  void Touch(uint64_t blk) {
    auto it = where_.find(blk);
    if (it != where_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
    } else {
      lru_.push_back(blk);
      where_[blk] = std::prev(lru_.end());
    }
  }
  static bool PreadAll(int fd, char* dst, uint64_t n, uint64_t off) {
    while (n > 0) {
      ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      dst += r;
      n -= static_cast<uint64_t>(r);
      off += static_cast<uint64_t>(r);
    }
    return true;
  }

  std::string dir_;
  uint64_t budget_ = 0;
  std::unique_ptr<std::atomic<int>[]> fds_;
  size_t objects_ = 0;
  std::once_flag warned_;
  std::mutex mu_;  // guards lru_ and where_
  std::list<uint64_t> lru_;  // blocks, least recently used first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
  std::atomic<uint64_t> evicted_{0};
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
    std::string cache_root;
    if (!options.cache_dir.empty() && options.cache_disk_bytes > 0) {
      const std::string ident = endpoint + " " + url_.ToString();
      cache_root = options.cache_dir + "/s3-" + Hex64(XXH3_64bits(ident.data(), ident.size()));
    }
    const std::string name = url_.ToString();
    std::string bytes;
    Status s = client_->Get(url_.bucket, Join(url_.prefix, std::string(kS3IndexName)), &bytes);
    bool from_cache = false;
    if (s.IsNotFound()) {
      return Status::NotFound(name + ": no dsfs store there (no " + std::string(kS3IndexName) +
                              " object; push one with dsfs push)");
    }
    if (!s.ok()) {
      // An outage: the index an earlier mount kept serves what the disk cache holds.
      std::string cached;
      if (cache_root.empty() || s.message().find("access denied") != std::string::npos ||
          !ReadFile(cache_root + "/index", &cached)) {
        return s;
      }
      Log()->warn("{}: object store unreachable ({}); serving from the disk cache only", name,
                  s.message());
      bytes = std::move(cached);
      from_cache = true;
    }
    DSFS_RETURN_IF_ERROR(ParseIndex(name, bytes, &index_));
    if (!cache_root.empty()) {
      const std::string id = Hex64(index_.id);
      std::error_code ec;
      std::filesystem::create_directories(cache_root, ec);
      // A store pushed again over this URL: the old one's cached blocks can never be served.
      for (const auto& e : std::filesystem::directory_iterator(cache_root, ec)) {
        if (e.is_directory() && e.path().filename() != id) std::filesystem::remove_all(e.path(), ec);
      }
      if (!from_cache) WriteFileAtomic(cache_root + "/index", bytes);
      disk_ = std::make_unique<DiskCache>();
      DSFS_RETURN_IF_ERROR(disk_->Open(cache_root + "/" + id, index_, options.cache_disk_bytes));
    }
    return Status::OK();
  }

  Status Get(std::string_view key, PinnedValue* value) override {
    auto it = Find(key);
    if (it == index_.entries.end() || index_.Key(*it) != key) return Status::NotFound("no such key");
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
    if (leader) {
      flight->status = FetchSpan(e.object, begin, end, &flight->bytes);
      if (flight->status.ok() && disk_) disk_->Write(e.object, begin, flight->bytes);
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
    *out = flight->bytes.substr(e.offset - begin, e.length);
    if (XXH3_64bits(out->data(), out->size()) != e.sum) {
      return Status::Corruption(url_.ToString() + ": data object " +
                                DataKey(url_.prefix, index_.id, e.object) +
                                " does not match its index (checksum)");
    }
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
      std::atomic<uint64_t> next{0};
      std::mutex mu;
      Status first_error;
      auto work = [&] {
        std::string piece;
        for (uint64_t i; (i = next.fetch_add(1)) < pieces;) {
          uint64_t off = i * kPieceBytes, len = std::min(kPieceBytes, n - off);
          Status s = client_->Get(url_.bucket, key, &piece, begin + off, len);
          if (s.ok() && piece.size() != len) s = Status::IOError(key + ": short answer");
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.ok()) first_error = s;
            next.store(pieces);
            return;
          }
          std::memcpy(bytes->data() + off, piece.data(), len);
        }
      };
      std::vector<std::thread> threads;
      for (uint64_t t = 0; t < std::min<uint64_t>(pieces, kMaxThreads); ++t) threads.emplace_back(work);
      for (auto& t : threads) t.join();
      DSFS_RETURN_IF_ERROR(first_error);
    }
    if (bytes->size() != n) {
      return Status::IOError(url_.ToString() + ": data object " + key +
                             " is shorter than its index says");
    }
    return Status::OK();
  }

  static bool ReadFile(const std::string& path, std::string* out) {
    std::error_code ec;
    uint64_t n = std::filesystem::file_size(path, ec);
    if (ec) return false;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    out->resize(n);
    bool ok = ::pread(fd, out->data(), n, 0) == static_cast<ssize_t>(n);
    ::close(fd);
    return ok;
  }
  static void WriteFileAtomic(const std::string& path, const std::string& bytes) {
    std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
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
  Index index_;
  std::mutex flights_mu_;  // guards flights_
  std::map<FlightKey, std::shared_ptr<Flight>> flights_;
  std::unique_ptr<DiskCache> disk_;
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
  auto w = std::make_unique<S3Writer>(std::make_unique<S3Client>(settings, RetryPolicyFor(0, 0)), url,
                                      options, s3_options);
  DSFS_RETURN_IF_ERROR(w->Begin());
  *writer = std::move(w);
  return Status::OK();
}

Status OpenS3Reader(const std::string& url, const KvReaderOptions& options,
                    std::unique_ptr<KvReader>* reader) {
  auto r = std::make_unique<S3Reader>();
  DSFS_RETURN_IF_ERROR(r->Open(url, options));
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
