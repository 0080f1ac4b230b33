// Where an S3 client finds its endpoint, region and keys: the AWS way, so the tools people
// already use (aws, s3cmd, rclone) and dsfs read the same settings.
//
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   keys (all from the environment
//                                                               or all from the profile)
//   AWS_REGION (or AWS_DEFAULT_REGION)                           region; default us-east-1
//   AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL                      endpoint; default AWS's
//   AWS_PROFILE (default "default")                              profile of the files below
//   AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials)     [PROFILE] aws_access_key_id,
//                                                               aws_secret_access_key,
//                                                               aws_session_token
//   AWS_CONFIG_FILE (default ~/.aws/config)                      [profile PROFILE] region,
//                                                               endpoint_url
//   AWS_CA_BUNDLE (or the profile's ca_bundle)                  PEM file of the CAs for https
// Where the keys come from is the AWS default credential chain (s3/credential_providers.h:
// environment, web identity, profile incl. role_arn and credential_process, container, EC2
// instance metadata), kept fresh by a CredentialHolder (s3/credential_holder.h).
// Keys are never taken from the command line (they would show in `ps`), and nothing here logs
// them: messages name the variable or file, never its value.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "s3/addressing.h"
#include "s3/credential_holder.h"

namespace dsfs {

struct AwsSettings {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
  std::string region = "us-east-1";
  std::string endpoint;  // "http(s)://host[:port]" without a trailing slash
  // What requests are signed with; null: a fixed holder of the three fields above. If the
  // fields no longer match the holder's initial() keys (a caller set its own), the fields win.
  std::shared_ptr<CredentialHolder> credentials;
  std::string ca_bundle;  // PEM file for https; empty: the system's CAs
  S3Addressing addressing = S3Addressing::kAuto;
};

struct AwsLoadOptions {
  bool anonymous = false;  // no credentials: unsigned requests (a public bucket)
  S3Addressing addressing = S3Addressing::kAuto;
};

// Fills *settings from the environment and the profile files, resolving the credential chain
// (the first keys fetched are also copied into the three key fields). InvalidArgument (one
// line naming where it looked) if no keys are found, or only half of a key pair; the failing
// source's error if a configured source fails.
[[nodiscard]] Status LoadAwsSettings(AwsSettings* settings, const AwsLoadOptions& options = {});

}  // namespace dsfs
