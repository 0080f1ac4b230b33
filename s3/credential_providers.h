// The AWS default credential chain, in the AWS SDKs' order:
//   1. environment        AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//   2. web identity       AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME):
//                         STS AssumeRoleWithWebIdentity (unsigned), the token file read anew at
//                         every fetch (Kubernetes rotates it)
//   3. shared files       profile AWS_PROFILE (default "default") of AWS_CONFIG_FILE
//                         (~/.aws/config) and AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials):
//                         static keys; role_arn with source_profile, credential_source or
//                         web_identity_token_file (STS AssumeRole, signed with the source's
//                         keys); credential_process (JSON Version 1 on its stdout)
//   4. container          AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on 169.254.170.2) or
//                         AWS_CONTAINER_CREDENTIALS_FULL_URI, with the Authorization header
//                         from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN
//   5. EC2 metadata       IMDSv2 (a PUT for a session token first) at
//                         AWS_EC2_METADATA_SERVICE_ENDPOINT (default http://169.254.169.254);
//                         one try with a 1 s connect timeout; never if
//                         AWS_EC2_METADATA_DISABLED=true
// The first source that is configured is the one used: if it then fails, that is the error
// (naming the source), the chain does not silently fall through to another identity. STS is
// at AWS_ENDPOINT_URL_STS if set, else https://sts.REGION.amazonaws.com.
//
// Secrets (keys, session tokens, web identity tokens, authorization tokens) never appear in a
// message or a log line here: messages name the variable, file or URL (without its query).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "s3/credential_parse.h"

namespace dsfs {

class CredentialProvider {
 public:
  virtual ~CredentialProvider() = default;
  // Fresh credentials from the source. Called by one thread at a time.
  [[nodiscard]] virtual Status Fetch(AwsCredentials* out) = 0;
  // The source in words, for messages: "environment", "profile ml (credential_process)", ...
  virtual std::string Name() const = 0;
};

// What the chain needs besides the environment.
struct CredentialChainOptions {
  std::string region = "us-east-1";  // STS's region
  std::string ca_bundle;             // for https requests (STS, a FULL_URI); empty: system's
};

// The merged settings of one profile: the config file's [profile NAME] ([default] for
// "default") overlaid with the credentials file's [NAME]. `found` is false if neither file has
// the section.
struct AwsProfile {
  std::string name;
  std::map<std::string, std::string> values;
  bool found = false;
};
// An error names the file (neither existing is no error: found stays false).
[[nodiscard]] Status LoadAwsProfile(const std::string& name, AwsProfile* profile);
// AWS_PROFILE, else "default".
std::string AwsProfileName();

// The URL the container source asks (source 4): RELATIVE_URI on the container agent
// (http://169.254.170.2), which the SDKs take before FULL_URI; empty if neither is set.
std::string ContainerCredentialsUrl();

// Whether the container source may ask `url` (AWS_CONTAINER_CREDENTIALS_FULL_URI, or a
// profile's credential_source = EcsContainer): https anywhere; plain http only on the
// link-local container agents or this host, so that the authorization token does not travel
// in clear elsewhere. *use is the URL to ask. InvalidArgument naming the variable if refused.
[[nodiscard]] Status CheckContainerUrl(const std::string& url, std::string* use);

// Runs a credential_process `command` with /bin/sh, its stdout (at most 1 MiB) in *out and
// its wait(2) status in *wait_status; IOError if it does not finish within `timeout_ms`.
[[nodiscard]] Status RunCredentialProcess(const std::string& command, int timeout_ms,
                                          std::string* out, int* wait_status);

// Picks the first configured source (see the file comment), fetches from it once and returns
// the provider (for refreshes) and what it gave. InvalidArgument "S3 credentials: none found
// (...)" if no source is configured; the source's error, naming it, if it fails.
[[nodiscard]] Status ResolveCredentialChain(const CredentialChainOptions& options,
                                            std::unique_ptr<CredentialProvider>* provider,
                                            AwsCredentials* first);

}  // namespace dsfs
