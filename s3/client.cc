#include "s3/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/path.h"
#include "s3/url.h"
#include "s3/xml.h"

namespace dsfs {

namespace {

// A query string as curl 7.88's signer needs it: sorted by name, values encoded, "name=".
std::string Query(std::vector<std::pair<std::string, std::string>> params) {
  std::sort(params.begin(), params.end());
  std::string q;
  for (const auto& [k, v] : params) {
    if (!q.empty()) q += '&';
    q += UriEncode(k, false) + "=" + UriEncode(v, false);
  }
  return q;
}

// The character text of the first <tag> in `xml`; empty if there is none.
std::string XmlFirst(std::string_view xml, std::string_view tag) {
  std::string_view e;
  return XmlElement(xml, tag, &e) ? XmlUnescape(e) : std::string();
}

// The <Code> of an error answer as it may be printed: the server's text escaped (no newline or
// terminal control reaches a terminal or a log) and cut to a sane length.
std::string ErrorCode(std::string_view xml) {
  std::string code = XmlFirst(xml, "Code");
  constexpr size_t kMaxCodeBytes = 64;
  bool cut = code.size() > kMaxCodeBytes;
  if (cut) code.resize(kMaxCodeBytes);
  return PrintableName(code) + (cut ? "..." : "");
}

// Where a response body goes: at most `limit` bytes of it, the limit known once the status is
// (a range answered 206 may bring what was asked, one answered 200 the object up to the end of
// the range, an error a short document). More than that ends the transfer: a server that sends
// an endless or oversized body costs a bounded buffer, never unbounded memory.
struct BodySink {
  std::string* out;
  CURL* handle;
  uint64_t range_offset = 0, range_length = 0;  // 0, 0: the whole object was asked for
  uint64_t whole_limit = 0;                     // the most a whole-object answer may bring
  bool overflow = false;
  uint64_t Limit() const {
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) return kErrorBodyBytes;
    if (range_length == 0) return whole_limit;
    return status == 206 ? range_length : range_offset + range_length;
  }
  static constexpr uint64_t kErrorBodyBytes = 64 << 10;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  const size_t bytes = size * n;
  if (sink->out->size() + bytes > sink->Limit()) {
    sink->overflow = true;
    return 0;  // CURLE_WRITE_ERROR: the transfer ends here
  }
  sink->out->append(data, bytes);
  return bytes;
}

// The deadline of one attempt: the time the low-speed guard allows to get going, then the bytes
// at kMinRateBytesPerS at least (whichever of the sizes asked or announced is the larger). A
// transfer that trickles just above the low-speed limit ends here.
struct Deadline {
  std::chrono::steady_clock::time_point start;
  double base_s = 0;
  uint64_t expected_bytes = 0;
  uint64_t min_rate = 0;
  bool whole_object = false;
  bool expired = false;
};

int OnProgress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
               curl_off_t ulnow) {
  auto* d = static_cast<Deadline*>(user);
  // What was asked (a range, an upload) or, for a whole object, what arrived: a size the server
  // only announces (Content-Length) buys no time, and a body that trickles must keep up the
  // rate on average. Endless bodies end at their byte limit (BodySink).
  uint64_t bytes = d->expected_bytes;
  if (d->whole_object) bytes = std::max<uint64_t>(bytes, std::max<curl_off_t>(0, dlnow));
  double allowed_s = d->base_s + static_cast<double>(bytes) / static_cast<double>(d->min_rate);
  double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - d->start).count();
  if (elapsed_s <= allowed_s) return 0;
  d->expired = true;
  return 1;  // CURLE_ABORTED_BY_CALLBACK
}

struct Upload {
  std::string_view data;
  size_t pos = 0;
};

size_t OnRead(char* buf, size_t size, size_t n, void* user) {
  auto* u = static_cast<Upload*>(user);
  size_t k = std::min(size * n, u->data.size() - u->pos);
  std::memcpy(buf, u->data.data() + u->pos, k);
  u->pos += k;
  return k;
}

struct CurlInit {
  CurlInit() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

}  // namespace

struct S3Client::Request {
  std::string method = "GET";
  std::string bucket, key, query;
  std::vector<std::string> headers;
  std::string_view body;
  std::string what;  // for messages: "GET s3://b/k"
  // What the answer may bring (see BodySink): a range, or the most a whole object may hold.
  uint64_t range_offset = 0, range_length = 0;
  uint64_t max_body_bytes = kMaxListBodyBytes;
  static constexpr uint64_t kMaxListBodyBytes = 16 << 20;  // a page of a listing: ~1,000 keys
};

struct S3Client::Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower case
};

namespace {
size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string line(data, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    size_t b = value.find_first_not_of(" \t");
    size_t e = value.find_last_not_of(" \t\r\n");
    (*headers)[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  } else if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();  // a new response (after 100 Continue or a redirect)
  }
  return size * n;
}
}  // namespace

S3Client::S3Client(AwsSettings settings, RetryPolicy policy)
    : settings_(std::move(settings)), policy_(policy) {
  static CurlInit init;
  sigv4_ = "aws:amz:" + settings_.region + ":s3";
  // Key fields changed after LoadAwsSettings filled them (a caller's own keys): those are used.
  const auto& initial = settings_.credentials ? settings_.credentials->initial() : nullptr;
  const bool fields_changed =
      initial && (initial->access_key_id != settings_.access_key_id ||
                  initial->secret_access_key != settings_.secret_access_key ||
                  initial->session_token != settings_.session_token);
  if (!settings_.credentials || fields_changed) {
    settings_.credentials = CredentialHolder::Fixed(
        {settings_.access_key_id, settings_.secret_access_key, settings_.session_token, 0});
  }
}

S3Client::~S3Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* S3Client::TakeHandle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Client::GiveBack(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

std::string S3Client::Url(const std::string& bucket, const std::string& key,
                          const std::string& query) const {
  return S3RequestUrl(settings_.endpoint, UriEncode(bucket, false),
                      key.empty() ? std::string() : UriEncode(key, true), query,
                      settings_.addressing);
}

Status S3Client::Perform(const Request& req, Response* resp) {
  const std::string url = Url(req.bucket, req.key, req.query);
  std::mt19937 rng(std::random_device{}());
  int backoff_ms = policy_.first_backoff_ms;
  std::string last_error;
  CredentialHolder& holder = *settings_.credentials;
  std::shared_ptr<const AwsCredentials> creds = holder.Get();
  bool resent_after_expiry = false;
  for (int attempt = 1;; ++attempt) {
    // Key, secret and token of one fetch, for this try (s3/credential_holder.h).
    if (!resent_after_expiry) creds = holder.Get();
    const std::string userpwd =
        creds ? creds->access_key_id + ":" + creds->secret_access_key : std::string();
    CURL* h = static_cast<CURL*>(TakeHandle());
    if (h == nullptr) return Status::IOError(req.what + ": cannot create a curl handle");
    curl_easy_reset(h);  // keeps the connection cache
    resp->status = 0;
    resp->body.clear();
    resp->headers.clear();
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (creds && !creds->session_token.empty()) {
      headers =
          curl_slist_append(headers, ("x-amz-security-token: " + creds->session_token).c_str());
    }
    for (const auto& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(policy_.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(kLowSpeedBytesPerS));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(policy_.low_speed_timeout_s));
    Deadline deadline;
    deadline.start = std::chrono::steady_clock::now();
    deadline.base_s = policy_.connect_timeout_ms / 1000.0 + policy_.low_speed_timeout_s;
    deadline.expected_bytes = std::max<uint64_t>(req.range_length, req.body.size());
    deadline.min_rate = kMinRateBytesPerS;
    deadline.whole_object = req.method == "GET" && req.range_length == 0;
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &deadline);
    // The key is sent as it is: curl would otherwise collapse "/./" and "/../" into another key.
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (creds) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    }
    if (!settings_.ca_bundle.empty()) {
      curl_easy_setopt(h, CURLOPT_CAINFO, settings_.ca_bundle.c_str());
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    BodySink sink{&resp->body, h, req.range_offset, req.range_length, req.max_body_bytes};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &resp->headers);
    Upload upload{req.body, 0};
    if (req.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, OnRead);
      curl_easy_setopt(h, CURLOPT_READDATA, &upload);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    } else if (req.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    } else if (req.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_slist_free_all(headers);
    // A range answered with the whole object (200) was cut at the end of the range: what was
    // asked is here.
    const bool have_range = rc == CURLE_WRITE_ERROR && sink.overflow && resp->status == 200 &&
                            req.range_length != 0 &&
                            resp->body.size() >= req.range_offset + req.range_length;
    if (have_range) rc = CURLE_OK;
    // An error document longer than 64 KiB: the status is what counts, the text was cut.
    if (rc == CURLE_WRITE_ERROR && sink.overflow && resp->status >= 300) rc = CURLE_OK;
    if (rc == CURLE_OK && !have_range) {
      GiveBack(h);
    } else {
      curl_easy_cleanup(h);  // a broken (or cut) connection is not reused
    }
    bool retry = false;
    if (rc != CURLE_OK) {
      if (sink.overflow) {
        last_error =
            "the answer was longer than asked (" + std::to_string(resp->body.size()) + "+ bytes)";
      } else if (deadline.expired) {
        last_error = "no answer within the deadline (" +
                     std::to_string(static_cast<int>(deadline.base_s +
                                                     static_cast<double>(deadline.expected_bytes) /
                                                         kMinRateBytesPerS)) +
                     " s for " + std::to_string(deadline.expected_bytes) + " bytes)";
      } else {
        last_error = curl_easy_strerror(rc);
      }
      retry = true;  // refused, reset, timed out, name lookup: the endpoint may come back
    } else if (resp->status >= 500 || resp->status == 429) {
      last_error = "HTTP " + std::to_string(resp->status);
      std::string code = ErrorCode(resp->body);
      if (!code.empty()) last_error += " " + code;
      retry = true;
    } else if (resp->status >= 300) {
      std::string code = ErrorCode(resp->body);
      std::string detail =
          "HTTP " + std::to_string(resp->status) + (code.empty() ? "" : " " + code);
      const std::string name = "s3://" + req.bucket + (req.key.empty() ? "" : "/" + req.key);
      counters_.failures.fetch_add(1, std::memory_order_relaxed);
      if (resp->status == 404) return Status::NotFound(name + ": not found (" + detail + ")");
      const bool expired_code = code == "ExpiredToken" || code == "ExpiredTokenException" ||
                                code == "TokenRefreshRequired";
      // A HEAD's answer has no body: past the keys' Expiration, its 400/403 is taken as theirs.
      const bool past_expiration =
          creds && creds->expiration_s != 0 &&
          std::chrono::system_clock::now() >=
              std::chrono::system_clock::time_point(std::chrono::seconds(creds->expiration_s));
      if ((resp->status == 403 || resp->status == 400) && creds && !resent_after_expiry &&
          (expired_code || (code.empty() && past_expiration))) {
        // Temporary keys expired under this request: new ones, and one resend (not a try).
        counters_.failures.fetch_sub(1, std::memory_order_relaxed);
        creds = holder.RefreshNow(creds);
        resent_after_expiry = true;
        --attempt;
        continue;
      }
      if (resp->status == 403) {
        return Status::IOError(name + ": access denied (" + detail +
                               "): check the credentials and the bucket's permissions");
      }
      return Status::IOError(req.what + ": " + detail);
    } else {
      return Status::OK();
    }
    if (retry && attempt >= policy_.attempts) {
      counters_.failures.fetch_add(1, std::memory_order_relaxed);
      return Status::IOError(req.what + " at " + settings_.endpoint + ": " + last_error +
                             " (gave up after " + std::to_string(attempt) + " tries)");
    }
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    int sleep_ms = std::uniform_int_distribution<int>(backoff_ms / 2, backoff_ms)(rng);
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    backoff_ms = std::min(backoff_ms * 2, policy_.max_backoff_ms);
  }
}

Status S3Client::Get(const std::string& bucket, const std::string& key, std::string* out,
                     uint64_t offset, uint64_t length, uint64_t max_bytes) {
  Request req;
  req.bucket = bucket;
  req.key = key;
  req.what = "GET s3://" + bucket + "/" + key;
  if (length == 0 && offset != 0)
    return Status::InvalidArgument(req.what + ": a range needs a length");
  if (length != 0) {
    req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                          std::to_string(offset + length - 1));
    req.range_offset = offset;
    req.range_length = length;
  }
  req.max_body_bytes = max_bytes;
  Response resp;
  counters_.gets.fetch_add(1, std::memory_order_relaxed);
  Status s = Perform(req, &resp);
  if (!s.ok()) return s;
  if (length != 0 && resp.status != 206) {
    // A server that ignored the range sent the whole object (cut at the range's end).
    if (resp.status == 200 && offset < resp.body.size()) {
      resp.body = resp.body.substr(offset, length);
    } else {
      return Status::IOError(req.what + ": range not served (HTTP " + std::to_string(resp.status) +
                             ")");
    }
  }
  counters_.get_bytes.fetch_add(resp.body.size(), std::memory_order_relaxed);
  *out = std::move(resp.body);
  return Status::OK();
}

Status S3Client::Head(const std::string& bucket, const std::string& key, uint64_t* size,
                      std::map<std::string, std::string>* meta) {
  Request req;
  req.method = "HEAD";
  req.bucket = bucket;
  req.key = key;
  req.what = "HEAD s3://" + bucket + "/" + key;
  Response resp;
  DSFS_RETURN_IF_ERROR(Perform(req, &resp));
  *size = std::strtoull(resp.headers["content-length"].c_str(), nullptr, 10);
  if (meta) {
    meta->clear();
    for (const auto& [k, v] : resp.headers) {
      if (k.rfind("x-amz-meta-", 0) == 0) (*meta)[k.substr(11)] = v;
    }
  }
  return Status::OK();
}

Status S3Client::Put(const std::string& bucket, const std::string& key, std::string_view data,
                     const std::map<std::string, std::string>& meta) {
  Request req;
  req.method = "PUT";
  req.bucket = bucket;
  req.key = key;
  req.body = data;
  req.what = "PUT s3://" + bucket + "/" + key;
  for (const auto& [k, v] : meta) req.headers.push_back("x-amz-meta-" + k + ": " + v);
  Response resp;
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  DSFS_RETURN_IF_ERROR(Perform(req, &resp));
  counters_.put_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status S3Client::Delete(const std::string& bucket, const std::string& key) {
  Request req;
  req.method = "DELETE";
  req.bucket = bucket;
  req.key = key;
  req.what = "DELETE s3://" + bucket + "/" + key;
  Response resp;
  return Perform(req, &resp);
}

Status S3Client::CreateBucket(const std::string& bucket) {
  Request req;
  req.method = "PUT";
  req.bucket = bucket;
  req.what = "PUT s3://" + bucket;
  Response resp;
  return Perform(req, &resp);
}

Status S3Client::List(const std::string& bucket, const std::string& prefix,
                      std::vector<std::string>* keys) {
  keys->clear();
  return ListEach(bucket, prefix, [keys](std::vector<ListedObject>& page) {
    for (ListedObject& o : page) keys->push_back(std::move(o.key));
    return Status::OK();
  });
}

Status S3Client::ListEach(const std::string& bucket, const std::string& prefix,
                          const std::function<Status(std::vector<ListedObject>&)>& page) {
  std::string token;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> params = {{"list-type", "2"},
                                                               {"prefix", prefix}};
    if (!token.empty()) params.emplace_back("continuation-token", token);
    Request req;
    req.bucket = bucket;
    req.query = Query(params);
    req.what = "LIST s3://" + bucket + "/" + prefix;
    Response resp;
    DSFS_RETURN_IF_ERROR(Perform(req, &resp));
    std::vector<ListedObject> objects;
    for (std::string_view c : XmlElements(resp.body, "Contents")) {
      ListedObject o;
      std::string_view key, size;
      if (!XmlElement(c, "Key", &key) || !XmlElement(c, "Size", &size)) {
        return Status::IOError(req.what + ": a listed object without a Key or a Size");
      }
      o.key = XmlUnescape(key);
      auto [ptr, ec] = std::from_chars(size.data(), size.data() + size.size(), o.size);
      if (ec != std::errc() || ptr != size.data() + size.size()) {
        return Status::IOError(req.what + ": object " + o.key + ": a Size that is no number");
      }
      o.last_modified = XmlFirst(c, "LastModified");
      objects.push_back(std::move(o));
    }
    DSFS_RETURN_IF_ERROR(page(objects));
    if (XmlFirst(resp.body, "IsTruncated") != "true") break;
    token = XmlFirst(resp.body, "NextContinuationToken");
    if (token.empty()) break;
  }
  return Status::OK();
}

Status S3Client::StartMultipart(const std::string& bucket, const std::string& key,
                                const std::map<std::string, std::string>& meta,
                                std::string* upload_id) {
  Request req;
  req.method = "POST";
  req.bucket = bucket;
  req.key = key;
  req.query = Query({{"uploads", ""}});
  req.what = "multipart start s3://" + bucket + "/" + key;
  for (const auto& [k, v] : meta) req.headers.push_back("x-amz-meta-" + k + ": " + v);
  Response resp;
  DSFS_RETURN_IF_ERROR(Perform(req, &resp));
  *upload_id = XmlFirst(resp.body, "UploadId");
  if (upload_id->empty()) return Status::IOError(req.what + ": no UploadId in the answer");
  return Status::OK();
}

Status S3Client::UploadPart(const std::string& bucket, const std::string& key,
                            const std::string& upload_id, int part, std::string_view data,
                            std::string* etag) {
  Request req;
  req.method = "PUT";
  req.bucket = bucket;
  req.key = key;
  req.body = data;
  req.query = Query({{"partNumber", std::to_string(part)}, {"uploadId", upload_id}});
  req.what = "multipart part " + std::to_string(part) + " of s3://" + bucket + "/" + key;
  Response resp;
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  DSFS_RETURN_IF_ERROR(Perform(req, &resp));
  counters_.put_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  *etag = resp.headers["etag"];
  if (etag->empty()) return Status::IOError(req.what + ": no ETag in the answer");
  return Status::OK();
}

Status S3Client::CompleteMultipart(const std::string& bucket, const std::string& key,
                                   const std::string& upload_id,
                                   const std::vector<std::string>& etags) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] +
           "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Request req;
  req.method = "POST";
  req.bucket = bucket;
  req.key = key;
  req.body = xml;
  req.query = Query({{"uploadId", upload_id}});
  req.what = "multipart complete s3://" + bucket + "/" + key;
  Response resp;
  DSFS_RETURN_IF_ERROR(Perform(req, &resp));
  // The answer to a complete can be 200 with an error inside.
  if (resp.body.find("<Error>") != std::string::npos) {
    return Status::IOError(req.what + ": " + ErrorCode(resp.body));
  }
  return Status::OK();
}

Status S3Client::AbortMultipart(const std::string& bucket, const std::string& key,
                                const std::string& upload_id) {
  Request req;
  req.method = "DELETE";
  req.bucket = bucket;
  req.key = key;
  req.query = Query({{"uploadId", upload_id}});
  req.what = "multipart abort s3://" + bucket + "/" + key;
  Response resp;
  return Perform(req, &resp);
}

S3Client::RetryPolicy S3Client::RetryPolicy::For(int attempts, int timeout_s) {
  S3Client::RetryPolicy p;
  if (const char* v = std::getenv("DSFS_S3_ATTEMPTS")) p.attempts = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("DSFS_S3_TIMEOUT_S")) {
    p.low_speed_timeout_s = std::max(1, std::atoi(v));
  }
  if (attempts > 0) p.attempts = attempts;
  if (timeout_s > 0) p.low_speed_timeout_s = timeout_s;
  return p;
}

}  // namespace dsfs
