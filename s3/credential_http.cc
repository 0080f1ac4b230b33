#include "s3/credential_http.h"

#include <curl/curl.h>

#include <cstdlib>

namespace dsfs {
namespace {

struct Sink {
  std::string* body;
  bool overflow = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  if (s->body->size() + size * n > kMaxCredentialBodyBytes) {
    s->overflow = true;
    return 0;
  }
  s->body->append(data, size * n);
  return size * n;
}

struct CurlInit {
  CurlInit() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

// The agents on this host or its link (the container endpoints, instance metadata) are asked
// directly: a proxy from http_proxy cannot reach them and must not see their tokens. The
// user's no_proxy still applies to the rest (CURLOPT_NOPROXY replaces it, so it is appended).
std::string NoProxyList() {
  std::string list =
      "localhost,127.0.0.0/8,::1,169.254.170.2,169.254.170.23,fd00:ec2::23,169.254.169.254,"
      "fd00:ec2::254";
  for (const char* name : {"no_proxy", "NO_PROXY"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      list += ',';
      list += v;
    }
  }
  return list;
}

}  // namespace

Status CredentialHttp(const CredentialHttpRequest& req, long* status, std::string* body) {
  static CurlInit init;
  *status = 0;
  body->clear();
  CURL* h = curl_easy_init();
  if (h == nullptr) return Status::IOError("cannot create a curl handle");
  curl_slist* headers = nullptr;
  for (const auto& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
  std::string userpwd, sigv4;
  if (req.sign_with != nullptr) {
    userpwd = req.sign_with->access_key_id + ":" + req.sign_with->secret_access_key;
    sigv4 = "aws:amz:" + req.sigv4_region + ":sts";
    if (!req.sign_with->session_token.empty()) {
      headers = curl_slist_append(
          headers, ("X-Amz-Security-Token: " + req.sign_with->session_token).c_str());
    }
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
  }
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout_ms));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout_ms));
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  const std::string no_proxy = NoProxyList();
  curl_easy_setopt(h, CURLOPT_NOPROXY, no_proxy.c_str());
  if (!req.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, req.ca_bundle.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  Sink sink{body};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  if (req.method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    if (!req.body.empty()) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    }
  }
  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  // Only the scheme, host and path: a query may carry a token (AssumeRoleWithWebIdentity).
  std::string where = req.url.substr(0, req.url.find('?'));
  if (sink.overflow) {
    return Status::IOError(req.method + " " + where + ": answer longer than " +
                           std::to_string(kMaxCredentialBodyBytes) + " bytes");
  }
  if (rc != CURLE_OK) {
    return Status::IOError(req.method + " " + where + ": " + curl_easy_strerror(rc));
  }
  return Status::OK();
}

}  // namespace dsfs
