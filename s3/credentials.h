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
// Keys are never taken from the command line (they would show in `ps`), and nothing here logs
// them: messages name the variable or file, never its value.
#pragma once

#include <string>

#include "common/status.h"

namespace dsfs {

struct AwsSettings {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
  std::string region = "us-east-1";
  std::string endpoint;  // "http(s)://host[:port]" without a trailing slash
};

// Fills *settings from the environment and the profile files. InvalidArgument (one line naming
// where it looked) if no keys are found, or only half of a key pair.
[[nodiscard]] Status LoadAwsSettings(AwsSettings* settings);

}  // namespace dsfs
