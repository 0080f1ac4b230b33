// One HTTP request for the credential providers (STS, the container endpoint, EC2 instance
// metadata), over libcurl: no retries (a provider's caller decides), a connect timeout and a
// total deadline, an answer bounded at kMaxBodyBytes. libcurl stays inside the S3 code.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "s3/credential_parse.h"

namespace dsfs {

struct CredentialHttpRequest {
  std::string method = "GET";  // GET, PUT or POST
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // POST/PUT body
  int connect_timeout_ms = 2000;
  int timeout_ms = 10000;
  std::string ca_bundle;  // PEM file for https; empty: the system's
  // Set: the request is signed with SigV4 for service sts in `sigv4_region` with these keys
  // (AssumeRole); the session token, if any, goes in X-Amz-Security-Token.
  const AwsCredentials* sign_with = nullptr;
  std::string sigv4_region;
};

inline constexpr size_t kMaxCredentialBodyBytes = 1 << 20;

// Sends `req`; *status is the HTTP status (0 if none came) and *body the answer. IOError for a
// transport failure (naming the URL, never a header's value); any HTTP status is OK here.
[[nodiscard]] Status CredentialHttp(const CredentialHttpRequest& req, long* status,
                                    std::string* body);

}  // namespace dsfs
