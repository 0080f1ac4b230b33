// How an S3 request names its bucket: path style (https://HOST/BUCKET/KEY, what Ceph RGW and
// MinIO expect) or virtual-hosted style (https://BUCKET.HOST/KEY, what AWS prefers and the
// only style of buckets created since 2020 in some regions).
//
// auto (the default): virtual-hosted on AWS endpoints (a host ending in .amazonaws.com or
// .amazonaws.com.cn) when the bucket name is DNS-compatible (no '.' with https, whose
// certificate would not match; no "--" or leading/trailing '-'), path style everywhere else.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

enum class S3Addressing { kAuto, kPath, kVirtual };

// "auto", "path" or "virtual"; InvalidArgument otherwise.
[[nodiscard]] Status ParseS3Addressing(std::string_view text, S3Addressing* out);

// True if a request for `bucket` at `endpoint` ("http(s)://host[:port]") goes virtual-hosted.
bool UseVirtualHost(std::string_view endpoint, std::string_view bucket, S3Addressing addressing);

// The URL of a request: `encoded_bucket` and `encoded_key` already percent-encoded (key empty
// for a bucket request), `query` without '?' (may be empty).
std::string S3RequestUrl(std::string_view endpoint, std::string_view encoded_bucket,
                         std::string_view encoded_key, std::string_view query,
                         S3Addressing addressing);

}  // namespace dsfs
