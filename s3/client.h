// A small S3 client over libcurl: what dsfs needs of object storage (ranged GET, PUT,
// multipart upload, HEAD, DELETE, listing), path-style or virtual-hosted URLs
// (s3/addressing.h).
//
// Requests are signed with SigV4 by libcurl itself (CURLOPT_AWS_SIGV4, curl >= 7.75); the
// payload is sent unsigned (x-amz-content-sha256: UNSIGNED-PAYLOAD, which RGW requires and
// curl 7.88 does not add). curl 7.88 signs the query string as written, so every query built
// here has its parameters sorted, their values encoded and an '=' after each name.
//
// Connections: a pool of curl easy handles, one taken per request and given back after, so a
// thread issuing requests one after another keeps reusing one connection (keep-alive) and
// threads issuing them at once each have their own. Every request has a connect timeout, a
// low-speed timeout (under kLowSpeedBytesPerS for low_speed_timeout_s) and a deadline
// proportional to its size (connect + low-speed time, then kMinRateBytesPerS): no endpoint,
// gone, stalled or dripping, holds a caller longer than that per try. Every answer's body is
// bounded by what was asked (the range; for a whole object, max_bytes; an error document,
// 64 KiB): more ends the transfer as a failure. 5xx, 429 and
// transport failures (refused, reset, timed out) are retried with exponential backoff and
// jitter until RetryPolicy::attempts, then IOError. 404 is NotFound, 403 an IOError saying
// access was denied; neither is retried, but a 403 ExpiredToken makes the credential holder
// fetch new keys (s3/credential_holder.h) and the request is sent once more with them. Each try
// signs with one snapshot of the holder (key, secret and token of one fetch); an anonymous
// holder sends requests unsigned. AwsSettings::ca_bundle is given to libcurl for https.
//
// Thread safety: every method may be called from any number of threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "s3/credentials.h"
#include "s3/url.h"

namespace dsfs {

class S3Client {
 public:
  struct RetryPolicy {
    int attempts = 5;  // tries per request, the first included
    int first_backoff_ms = 100;
    int max_backoff_ms = 2000;
    int connect_timeout_ms = 3000;
    int low_speed_timeout_s = 10;  // a transfer under kLowSpeedBytesPerS this long is dropped

    // The retry budget of a command or a mount: `attempts` and `timeout_s` (-o s3_attempts=,
    // s3_timeout=) where above 0, else $DSFS_S3_ATTEMPTS and $DSFS_S3_TIMEOUT_S, else the
    // defaults above.
    static RetryPolicy For(int attempts, int timeout_s);
  };
  static constexpr uint64_t kLowSpeedBytesPerS = 1024;
  static constexpr uint64_t kMinRateBytesPerS = 128 << 10;
  // The most a whole-object GET brings unless told otherwise.
  static constexpr uint64_t kDefaultMaxObjectBytes = 64 << 20;
  // Requests made, bytes received in GET bodies and sent in PUT bodies, retries.
  struct Counters {
    std::atomic<uint64_t> gets{0}, get_bytes{0}, puts{0}, put_bytes{0}, retries{0}, failures{0};
  };

  S3Client(AwsSettings settings, RetryPolicy policy);
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;
  ~S3Client();

  // `length` bytes from `offset`, or (length 0) the whole object if it holds at most
  // `max_bytes` (a larger one is an IOError). A shorter answer than asked (the object ends) is
  // returned as is; a longer one is an IOError.
  [[nodiscard]] Status Get(const std::string& bucket, const std::string& key, std::string* out,
                           uint64_t offset = 0, uint64_t length = 0,
                           uint64_t max_bytes = kDefaultMaxObjectBytes);
  // Size and the user metadata (x-amz-meta-NAME, names lower case without the prefix).
  [[nodiscard]] Status Head(const std::string& bucket, const std::string& key, uint64_t* size,
                            std::map<std::string, std::string>* meta = nullptr);
  [[nodiscard]] Status Put(const std::string& bucket, const std::string& key, std::string_view data,
                           const std::map<std::string, std::string>& meta = {});
  [[nodiscard]] Status Delete(const std::string& bucket, const std::string& key);
  [[nodiscard]] Status CreateBucket(const std::string& bucket);
  // Keys under `prefix`, in order.
  [[nodiscard]] Status List(const std::string& bucket, const std::string& prefix,
                            std::vector<std::string>* keys);

  // One object of a listing: its key, size and LastModified as the server wrote it.
  struct ListedObject {
    std::string key;
    uint64_t size = 0;
    std::string last_modified;  // ISO 8601, e.g. "2026-12-07T16:00:00.000Z"; may be empty
  };
  // The objects under `prefix`, in order, one page (at most 1000) at a time: memory stays
  // that of a page whatever the number of keys. IOError for an entry without a Key or a
  // Size; `page`'s error stops the listing and is returned.
  [[nodiscard]] Status ListEach(const std::string& bucket, const std::string& prefix,
                                const std::function<Status(std::vector<ListedObject>&)>& page);

  // Multipart upload: Start, UploadPart (1-based numbers, any order, any threads; every part
  // but the last >= 5 MiB), Complete with the parts' ETags in order, or Abort.
  [[nodiscard]] Status StartMultipart(const std::string& bucket, const std::string& key,
                                      const std::map<std::string, std::string>& meta,
                                      std::string* upload_id);
  [[nodiscard]] Status UploadPart(const std::string& bucket, const std::string& key,
                                  const std::string& upload_id, int part, std::string_view data,
                                  std::string* etag);
  [[nodiscard]] Status CompleteMultipart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id,
                                         const std::vector<std::string>& etags);
  Status AbortMultipart(const std::string& bucket, const std::string& key,
                        const std::string& upload_id);

  const Counters& counters() const { return counters_; }
  const std::string& endpoint() const { return settings_.endpoint; }

 private:
  struct Request;
  struct Response;
  // Sends `req` with retries. Fills *resp (status, body, headers) for any HTTP answer below 300;
  // turns the others and transport failures into a Status naming `what`.
  Status Perform(const Request& req, Response* resp);
  void* TakeHandle();
  void GiveBack(void* handle);
  std::string Url(const std::string& bucket, const std::string& key,
                  const std::string& query) const;

  AwsSettings settings_;
  RetryPolicy policy_;
  std::string sigv4_;  // "aws:amz:REGION:s3"
  std::mutex mu_;      // guards idle_
  std::vector<void*> idle_;
  Counters counters_;
};

}  // namespace dsfs
