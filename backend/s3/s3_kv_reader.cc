// The S3 store's reader: the index fetched at open, values by ranged GETs of whole blocks
// (adjacent values coalesced), kept in the disk cache (backend/s3/s3_kv_cache.h) and, for the
// values read last, in memory.
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
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/s3/s3_cache_dir.h"
#include "backend/s3/s3_kv.h"
#include "backend/s3/s3_kv_cache.h"
#include "backend/s3/s3_kv_index.h"
#include "backend/s3/s3_kv_objects.h"
#include "common/log.h"
#include "common/memory_limit.h"

namespace dsfs {
namespace {

using s3kv::DataKey;
using s3kv::Hex64;
using s3kv::Join;
using s3kv::RunPieces;

// The reader's memory that no guard can shed is sized from the memory limit
// (common/memory_limit.h): the values read last (RecentValues: a few payload groups per
// thread) and the fetches in flight (FetchBudget).

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

// The bytes of fetches in flight at once (each GET's buffer and the value taken from it): a
// fetch that would pass the budget waits for others to end; one larger than the whole budget
// runs when no other does. Without it 16 fetch threads held 16 spans of blocks at once, and an
// S3 mount in a 48 MB cgroup was OOM-killed with its RAM cache shed to the floor.
class FetchBudget {
 public:
  explicit FetchBudget(uint64_t budget) : budget_(budget) {}
  class Hold {
   public:
    Hold(FetchBudget* b, uint64_t n) : b_(b), n_(n) { b_->Acquire(n_); }
    ~Hold() { b_->Release(n_); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    FetchBudget* const b_;
    const uint64_t n_;
  };

 private:
  void Acquire(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ == 0 || used_ + n <= budget_; });
    used_ += n;
  }
  void Release(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      used_ -= n;
    }
    cv_.notify_all();
  }

  const uint64_t budget_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t used_ = 0;  // guarded by mu_
};

class S3Reader : public KvReader {
 public:
  ~S3Reader() override {
    // The cache's last use, for `dsfs cache gc --keep-days`.
    if (root_ && !meta_.id.empty()) WriteS3CacheMeta(root_->fd(), meta_);
  }

  Status Open(const std::string& url_text, const KvReaderOptions& options) {
    DSFS_RETURN_IF_ERROR(ParseS3Url(url_text, &url_));
    AwsSettings settings;
    DSFS_RETURN_IF_ERROR(LoadAwsSettings(&settings, options.s3));
    const std::string endpoint = settings.endpoint;
    client_ = std::make_unique<S3Client>(
        settings, S3Client::RetryPolicy::For(options.remote_attempts, options.remote_timeout_s));
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
      // cache_disk bounds the whole directory: the index and `meta` (a block each) too.
      const uint64_t reserve = (bytes.size() + 4095) / 4096 * 4096 + 4096;
      const uint64_t budget =
          options.cache_disk_bytes > reserve ? options.cache_disk_bytes - reserve : 0;
      DSFS_RETURN_IF_ERROR(disk_->Open(*root, id, index_.object_sizes, budget));
      meta_ = S3CacheMeta{name, endpoint, id};
      WriteS3CacheMeta(root->fd(), meta_);
      root_ = std::move(root);  // its lock held as long as the reader lives
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
  // directory's files), keeps them on disk and returns the value, checked. Blocks at either
  // end of the span that the disk cache holds already are not fetched again (a value that
  // straddles a block boundary, read after its first block's neighbours, fetches only the
  // block it lacks): each block is fetched once. Threads missing the same blocks at once
  // share one fetch; a span of many blocks (the metadata tables at mount, large chunks) is
  // fetched in pieces of kPieceBytes, several at once. `attempt` > 0: after a value that did
  // not check out with cached blocks (evicted meanwhile), the whole span, from S3.
  Status Fetch(const Entry& e, std::string* out, int attempt = 0) {
    const uint64_t object_size = index_.object_sizes[e.object];
    const uint64_t begin = e.offset / kS3BlockBytes * kS3BlockBytes;
    const uint64_t end = std::min(
        object_size, (e.offset + e.length + kS3BlockBytes - 1) / kS3BlockBytes * kS3BlockBytes);
    uint64_t fbegin = begin, fend = end;  // what is fetched
    if (disk_ && attempt == 0) {
      while (fbegin < fend && disk_->Has(e.object, fbegin / kS3BlockBytes)) fbegin += kS3BlockBytes;
      while (fend > fbegin && disk_->Has(e.object, (fend - 1) / kS3BlockBytes)) {
        fend = (fend - 1) / kS3BlockBytes * kS3BlockBytes;
      }
      // Every block there, yet the value did not check out: all of it fetched again.
      if (fbegin >= fend) {
        fbegin = begin;
        fend = end;
      }
    }
    const FlightKey fk{e.object, fbegin, fend};
    std::shared_ptr<Flight> flight, other;
    bool leader = false;
    {
      std::lock_guard<std::mutex> lock(flights_mu_);
      if (disk_ && attempt == 0) other = OverlappingFlight(fk);
      if (!other) {
        auto& slot = flights_[fk];
        if (!slot) {
          slot = std::make_shared<Flight>();
          leader = true;
        }
        flight = slot;
      }
    }
    if (other) {
      // Another thread fetches some of these blocks for a span not this one (a value within a
      // block beside one that straddles it): once it has them on disk, the value is read there,
      // or only the blocks still missing are fetched.
      {
        std::unique_lock<std::mutex> lock(other->mu);
        other->cv.wait(lock, [&] { return other->done; });
      }
      if (disk_->Read(e.object, e.offset, e.length, e.sum, out)) return Status::OK();
      return Fetch(e, out, attempt);
    }
    // The value: what the flight fetched, and the cached blocks around it; true if it checks
    // out (a block evicted meanwhile reads as zeros and fails it).
    auto assemble = [&] {
      out->assign(e.length, '\0');
      const uint64_t vb = e.offset, ve = e.offset + e.length;
      const uint64_t mb = std::max(vb, fbegin), me = std::min(ve, fend);
      if (mb < me)
        std::memcpy(out->data() + (mb - vb), flight->bytes.data() + (mb - fbegin), me - mb);
      if (vb < std::min(ve, fbegin) &&
          !disk_->ReadRaw(e.object, vb, std::min(ve, fbegin) - vb, out->data())) {
        return false;
      }
      if (std::max(vb, fend) < ve &&
          !disk_->ReadRaw(e.object, std::max(vb, fend), ve - std::max(vb, fend),
                          out->data() + (std::max(vb, fend) - vb))) {
        return false;
      }
      return XXH3_64bits(out->data(), out->size()) == e.sum;
    };
    bool checked = false;
    if (leader) {
      // Whatever happens here (an error, bad_alloc, any exception), the flight completes: the
      // threads waiting on it must never wait for good.
      try {
        // A flight for these blocks may have ended between this thread's miss on disk and
        // now (it wrote them there, then left flights_): read them there instead of a second
        // GET of the same blocks (a warm-up's threads meet at their runs' edges).
        if (disk_ && attempt == 0 && disk_->Read(e.object, e.offset, e.length, e.sum, out)) {
          flight->on_disk = true;
          {
            std::lock_guard<std::mutex> lock(flights_mu_);
            flights_.erase(fk);
          }
          std::lock_guard<std::mutex> lock(flight->mu);
          flight->done = true;
          flight->cv.notify_all();
          return Status::OK();
        }
        Log()->debug("{}: fetching object {} bytes {}-{}", url_.ToString(), e.object, fbegin, fend);
        {
          // The span's buffer and the value's, until the flight hands them over.
          FetchBudget::Hold hold(&fetch_budget_, fend - fbegin + e.length);
          flight->status = FetchSpan(e.object, fbegin, fend, &flight->bytes);
          // Kept on disk only if the value it was fetched for checks out (a server answering
          // other bytes fills no cache).
          checked = flight->status.ok() && assemble();
          if (checked && disk_) disk_->Write(e.object, fbegin, flight->bytes);
        }  // the waiters take their values from the buffer as soon as the flight is done
      } catch (const std::bad_alloc&) {
        flight->status = Status::IOError(url_.ToString() + ": out of memory fetching " +
                                         std::to_string(fend - fbegin) + " bytes");
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
      if (flight->on_disk) {
        lock.unlock();
        if (disk_->Read(e.object, e.offset, e.length, e.sum, out)) return Status::OK();
        return Fetch(e, out, attempt + 1);  // evicted meanwhile: fetched after all
      }
    }
    DSFS_RETURN_IF_ERROR(flight->status);
    if (!checked && !assemble()) {
      // Cached blocks around the fetched ones that were evicted meanwhile: the whole span.
      if (fbegin != begin || fend != end) return Fetch(e, out, attempt + 1);
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
    // Each piece is held twice until it is copied in: no more at once than the fetch budget
    // allows beside the span (one, in a small limit).
    const int max_threads = static_cast<int>(
        std::clamp<uint64_t>(DefaultBudgets().remote_fetch_bytes / kPieceBytes, 1, 8));
    if (n <= kPieceBytes) {
      if (n > 0) DSFS_RETURN_IF_ERROR(client_->Get(url_.bucket, key, bytes, begin, n));
    } else {
      bytes->assign(n, '\0');
      const uint64_t pieces = (n + kPieceBytes - 1) / kPieceBytes;
      DSFS_RETURN_IF_ERROR(RunPieces(pieces, max_threads, [&](uint64_t i) {
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
    bool done = false;     // guarded by mu; status and bytes are set before it, read after
    bool on_disk = false;  // the blocks were on disk after all: read them there
    Status status;
    std::string bytes;
  };

  // A flight over some of the blocks of `fk` but not over exactly them; nullptr if none.
  // Called with flights_mu_ held; the flights are few (one per fetching thread).
  std::shared_ptr<Flight> OverlappingFlight(const FlightKey& fk) const {
    for (auto it = flights_.lower_bound(FlightKey{fk.object, 0, 0});
         it != flights_.end() && it->first.object == fk.object; ++it) {
      const FlightKey& k = it->first;
      if (k.begin < fk.end && fk.begin < k.end && !(k.begin == fk.begin && k.end == fk.end)) {
        return it->second;
      }
    }
    return nullptr;
  }

  S3Url url_;
  std::unique_ptr<S3Client> client_;
  S3Index index_;
  std::mutex flights_mu_;  // guards flights_
  std::map<FlightKey, std::shared_ptr<Flight>> flights_;
  std::unique_ptr<S3CacheRoot> root_;
  S3CacheMeta meta_;
  std::unique_ptr<S3DiskCache> disk_;
  std::atomic<uint64_t> disk_hits_{0}, disk_misses_{0}, recent_hits_{0};
  RecentValues recent_{DefaultBudgets().remote_recent_bytes};
  FetchBudget fetch_budget_{DefaultBudgets().remote_fetch_bytes};
};

}  // namespace

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
