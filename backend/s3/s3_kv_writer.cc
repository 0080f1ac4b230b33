// The S3 store's writer (`dsfs push`): values in key order into data objects of
// ~object_bytes, uploaded by parts on several threads, the index last (backend/s3/s3_kv.h).
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend/kv_open.h"
#include "backend/s3/s3_kv.h"
#include "backend/s3/s3_kv_index.h"
#include "backend/s3/s3_kv_objects.h"
#include "common/log.h"

namespace dsfs {
namespace {

using s3kv::DataKey;
using s3kv::Hex64;
using s3kv::Join;
using s3kv::kCompressFromBytes;
using s3kv::RunPieces;

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

}  // namespace

Status NewS3Writer(const std::string& url_text, const KvWriterOptions& options,
                   const S3WriterOptions& s3_options, std::unique_ptr<KvWriter>* writer) {
  S3Url url;
  DSFS_RETURN_IF_ERROR(ParseS3Url(url_text, &url));
  AwsSettings settings;
  DSFS_RETURN_IF_ERROR(LoadAwsSettings(&settings));
  auto w = std::make_unique<S3Writer>(
      std::make_unique<S3Client>(settings, S3Client::RetryPolicy::For(0, 0)), url, options,
      s3_options);
  DSFS_RETURN_IF_ERROR(w->Begin());
  *writer = std::move(w);
  return Status::OK();
}

}  // namespace dsfs
