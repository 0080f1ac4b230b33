// The formats the AWS credential chain reads, parsed without any I/O (unit-tested in
// tests/unit/credential_parse_test.cc):
//   - the shared config and credentials files (INI: "[default]", "[profile NAME]" in config,
//     "[NAME]" in credentials; "key = value"; '#' and ';' comments)
//   - STS answers (AssumeRole, AssumeRoleWithWebIdentity: XML <Credentials> element)
//   - JSON credentials: credential_process output (Version 1), the container endpoint's and
//     EC2 instance metadata's answers (Token instead of SessionToken; IMDS adds Code)
//   - ISO 8601 UTC times ("2026-12-04T10:11:16Z", fractions of a second allowed)
// Nothing here logs; error messages name the field, never a value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// One set of AWS keys. expiration_s: Unix seconds after which they are no longer valid; 0 if
// they never expire (long-term keys).
struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
  int64_t expiration_s = 0;
  bool operator==(const AwsCredentials&) const = default;
};

using IniSection = std::map<std::string, std::string>;
// Every section of an INI text by its name as written between the brackets (trimmed, inner
// runs of blanks kept: "profile ml"). Keys are trimmed and lower-cased; a key outside any
// section and lines without '=' are ignored; a later duplicate key wins.
std::map<std::string, IniSection> ParseIni(std::string_view text);

// Unix seconds of an ISO 8601 UTC time ("YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00)"): a day that
// exists (leap years counted), a year from 1970 on.
[[nodiscard]] Status ParseIso8601(std::string_view text, int64_t* unix_s);
// "2026-12-04T10:11:16Z".
std::string FormatIso8601(int64_t unix_s);

// Keys that expire less than this many seconds after they arrive are no keys: the source's
// clock and this host's disagree (or the source is broken), and using them would only fetch
// again at once.
inline constexpr int64_t kMinCredentialLifetimeS = 2;
// OK unless `c` expires within kMinCredentialLifetimeS of `now_s` (Unix seconds, this host's
// clock); the error says when, and names the clocks. Keys without an Expiration are OK.
[[nodiscard]] Status CheckCredentialLifetime(const AwsCredentials& c, int64_t now_s);

// The <Credentials> of an STS AssumeRole or AssumeRoleWithWebIdentity answer. An <Error>
// document becomes an IOError naming its <Code> and <Message>.
[[nodiscard]] Status ParseStsCredentials(std::string_view xml, AwsCredentials* out);

// Credentials in JSON: credential_process (Version 1; AccessKeyId, SecretAccessKey, optional
// SessionToken and Expiration), the container endpoint and IMDS (Token; IMDS's Code must be
// "Success" when present). `what` names the source in messages.
[[nodiscard]] Status ParseCredentialsJson(std::string_view json, std::string_view what,
                                          AwsCredentials* out);

}  // namespace dsfs
