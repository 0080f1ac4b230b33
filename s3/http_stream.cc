#include "s3/http_stream.h"

#include <curl/curl.h>

#include <memory>

namespace dsfs {
namespace {

struct Transfer {
  const std::function<bool(std::string_view)>* sink;
  bool stopped = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (!(*t->sink)(std::string_view(data, size * n))) {
    t->stopped = true;
    return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  }
  return size * n;
}

struct CurlInit {
  CurlInit() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

struct EasyCloser {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

}  // namespace

bool IsHttpUrl(std::string_view s) {
  return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0;
}

std::string HttpUrlForMessages(std::string_view url) {
  std::string u(url.substr(0, url.find_first_of("?#")));
  size_t scheme = u.find("://");
  if (scheme != std::string::npos) {
    size_t host = scheme + 3;
    size_t at = u.find('@', host), slash = u.find('/', host);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      u.erase(host, at + 1 - host);
    }
  }
  return u;
}

Status HttpGetStream(const std::string& url, const HttpStreamOptions& options,
                     const std::function<bool(std::string_view)>& sink) {
  const std::string name = HttpUrlForMessages(url);
  if (!IsHttpUrl(url)) return Status::InvalidArgument(name + ": not an http:// or https:// URL");
  static CurlInit init;
  std::unique_ptr<CURL, EasyCloser> c(curl_easy_init());
  if (!c) return Status::IOError(name + ": cannot start a transfer");
  Transfer t{&sink};
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.get(), CURLOPT_MAXREDIRS, static_cast<long>(options.max_redirects));
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connect_timeout_ms));
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.low_speed_timeout_s));
  curl_easy_setopt(c.get(), CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &t);
  if (!options.ca_bundle.empty())
    curl_easy_setopt(c.get(), CURLOPT_CAINFO, options.ca_bundle.c_str());
  CURLcode rc = curl_easy_perform(c.get());
  if (t.stopped) return Status::OK();
  if (rc == CURLE_OK) return Status::OK();
  long status = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_HTTP_RETURNED_ERROR) {
    std::string text = name + ": HTTP " + std::to_string(status);
    return status == 404 ? Status::NotFound(text) : Status::IOError(text);
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return Status::IOError(name + ": the server stalled (under 1 KiB/s for " +
                           std::to_string(options.low_speed_timeout_s) + " s)");
  }
  std::string why = error[0] ? std::string(error) : curl_easy_strerror(rc);
  while (!why.empty() && why.back() == '\n') why.pop_back();
  return Status::IOError(name + ": " + why);
}

}  // namespace dsfs
