#include "s3/addressing.h"

#include <cctype>

namespace dsfs {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view Host(std::string_view endpoint) {
  size_t scheme = endpoint.find("://");
  std::string_view rest = scheme == std::string_view::npos ? endpoint : endpoint.substr(scheme + 3);
  rest = rest.substr(0, rest.find('/'));
  if (!rest.empty() && rest[0] == '[') return rest;  // an IPv6 literal: never AWS
  return rest.substr(0, rest.find(':'));
}

}  // namespace

Status ParseS3Addressing(std::string_view text, S3Addressing* out) {
  if (text == "auto") {
    *out = S3Addressing::kAuto;
  } else if (text == "path") {
    *out = S3Addressing::kPath;
  } else if (text == "virtual") {
    *out = S3Addressing::kVirtual;
  } else {
    return Status::InvalidArgument("s3_addressing: '" + std::string(text.substr(0, 40)) +
                                   "' is not auto, path or virtual");
  }
  return Status::OK();
}

bool UseVirtualHost(std::string_view endpoint, std::string_view bucket, S3Addressing addressing) {
  if (bucket.empty() || addressing == S3Addressing::kPath) return false;
  if (addressing == S3Addressing::kVirtual) return true;
  std::string host(Host(endpoint));
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!EndsWith(host, ".amazonaws.com") && !EndsWith(host, ".amazonaws.com.cn")) return false;
  const bool https = endpoint.rfind("https://", 0) == 0;
  if (bucket.size() < 3 || bucket.size() > 63 || bucket.front() == '-' || bucket.back() == '-' ||
      bucket.find("--") != std::string_view::npos) {
    return false;
  }
  for (char c : bucket) {
    if (c == '.' && https) return false;
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

std::string S3RequestUrl(std::string_view endpoint, std::string_view encoded_bucket,
                         std::string_view encoded_key, std::string_view query,
                         S3Addressing addressing) {
  std::string url;
  if (UseVirtualHost(endpoint, encoded_bucket, addressing)) {
    size_t scheme = endpoint.find("://");
    size_t host_at = scheme == std::string_view::npos ? 0 : scheme + 3;
    url = std::string(endpoint.substr(0, host_at)) + std::string(encoded_bucket) + "." +
          std::string(endpoint.substr(host_at)) + "/" + std::string(encoded_key);
  } else {
    url = std::string(endpoint) + "/" + std::string(encoded_bucket);
    if (!encoded_key.empty()) url += "/" + std::string(encoded_key);
  }
  if (!query.empty()) url += "?" + std::string(query);
  return url;
}

}  // namespace dsfs
