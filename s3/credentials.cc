#include "s3/credentials.h"

#include <cstdlib>
#include <fstream>
#include <map>

namespace dsfs {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The keys of section `section` of the INI file at `path` (empty if the file or section is
// missing).
std::map<std::string, std::string> ReadSection(const std::string& path,
                                               const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      inside = Trim(t.substr(1, t.size() - 2)) == section;
      continue;
    }
    if (!inside) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    out[Trim(t.substr(0, eq))] = Trim(t.substr(eq + 1));
  }
  return out;
}

std::string HomeFile(const char* env, const char* rel) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  std::string home = Env("HOME");
  return (home.empty() ? std::string("/root") : home) + "/" + rel;
}

}  // namespace

Status LoadAwsSettings(AwsSettings* s) {
  std::string profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string cred_file = HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_file = HomeFile("AWS_CONFIG_FILE", ".aws/config");
  auto config = ReadSection(config_file, profile == "default" ? "default" : "profile " + profile);

  s->access_key_id = Env("AWS_ACCESS_KEY_ID");
  s->secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  s->session_token = Env("AWS_SESSION_TOKEN");
  if (s->access_key_id.empty() != s->secret_access_key.empty()) {
    return Status::InvalidArgument(
        "S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
  }
  if (s->access_key_id.empty()) {
    auto creds = ReadSection(cred_file, profile);
    s->access_key_id = creds["aws_access_key_id"];
    s->secret_access_key = creds["aws_secret_access_key"];
    s->session_token = creds["aws_session_token"];
    if (s->access_key_id.empty() || s->secret_access_key.empty()) {
      return Status::InvalidArgument(
          "S3 credentials: none found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
          "aws_access_key_id and aws_secret_access_key in profile [" +
          profile + "] of " + cred_file + ")");
    }
  }
  std::string region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) region = config["region"];
  if (!region.empty()) s->region = region;
  std::string endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = config["endpoint_url"];
  if (endpoint.empty()) endpoint = "https://s3." + s->region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("S3 endpoint " + endpoint +
                                   ": not an http:// or https:// URL (AWS_ENDPOINT_URL)");
  }
  s->endpoint = endpoint;
  return Status::OK();
}

}  // namespace dsfs
