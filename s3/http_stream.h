// One GET of an http:// or https:// URL whose body is handed on as it arrives (dsfs pack of an
// archive at a URL): never held whole, however large. libcurl here, as everywhere in dsfs.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

struct HttpStreamOptions {
  int connect_timeout_ms = 10000;
  // A transfer under 1 KiB/s this long fails: a server that stalls or drips ends the GET.
  int low_speed_timeout_s = 10;
  int max_redirects = 5;  // only to http:// or https:// URLs
  std::string ca_bundle;  // PEM file for https; empty: the system's CAs
};

// True for "http://..." and "https://...".
bool IsHttpUrl(std::string_view s);

// GETs `url`, giving `sink` each piece of the body in order. `sink` returns false to stop
// (then Status OK, nothing more is read). IOError naming the URL (without its query, which may
// carry a signature) for an answer other than 2xx, a transfer failure or a stall.
[[nodiscard]] Status HttpGetStream(const std::string& url, const HttpStreamOptions& options,
                                   const std::function<bool(std::string_view)>& sink);

// `url` as messages may show it: without its query string and user info.
std::string HttpUrlForMessages(std::string_view url);

}  // namespace dsfs
