#include "s3/url.h"

#include <algorithm>
#include <cctype>

namespace dsfs {

Status ParseS3Url(std::string_view s, S3Url* url) {
  if (!IsS3Url(s))
    return Status::InvalidArgument(std::string(s) + ": not an s3://BUCKET/PREFIX URL");
  std::string_view rest = s.substr(5);
  size_t slash = rest.find('/');
  std::string bucket(rest.substr(0, slash));
  std::string prefix(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  bool ok = bucket.size() >= 3 && bucket.size() <= 63;
  for (char c : bucket) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      ok = false;
    }
  }
  if (!ok) {
    return Status::InvalidArgument(std::string(s) +
                                   ": bad bucket name (3 to 63 characters: a-z, 0-9, '-', '.')");
  }
  if (prefix.find("//") != std::string::npos) {
    return Status::InvalidArgument(std::string(s) + ": empty component in the prefix");
  }
  // "." and ".." would name another prefix once a URL is normalized (curl collapses them; a
  // push --force there would replace another store): refused, not interpreted.
  for (size_t pos = 0; pos <= prefix.size();) {
    size_t end = std::min(prefix.find('/', pos), prefix.size());
    std::string_view part = std::string_view(prefix).substr(pos, end - pos);
    if (part == "." || part == "..") {
      return Status::InvalidArgument(std::string(s) + ": '" + std::string(part) +
                                     "' in the prefix (name the store's prefix itself)");
    }
    pos = end + 1;
  }
  url->bucket = bucket;
  url->prefix = prefix;
  return Status::OK();
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace dsfs
