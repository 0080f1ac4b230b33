// S3 URLs: s3://BUCKET/PREFIX as dsfs names a store, and the percent-encoding SigV4's canonical
// form wants (one encoder for paths, queries and form bodies).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// "s3://BUCKET/PREFIX": PREFIX may be empty; a trailing '/' is dropped.
struct S3Url {
  std::string bucket;
  std::string prefix;
  std::string ToString() const { return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix); }
};
inline bool IsS3Url(std::string_view s) { return s.rfind("s3://", 0) == 0; }
// InvalidArgument for anything that is not s3://BUCKET[/PREFIX] with a valid bucket name.
[[nodiscard]] Status ParseS3Url(std::string_view s, S3Url* url);

// Percent-encodes everything but RFC 3986's unreserved characters (and '/' if keep_slash), as
// SigV4's canonical form wants it.
std::string UriEncode(std::string_view s, bool keep_slash);

}  // namespace dsfs
