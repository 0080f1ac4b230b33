#include "s3/credentials.h"

#include <unistd.h>

#include <cstdlib>

#include "common/log.h"
#include "s3/credential_providers.h"

namespace dsfs {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

Status LoadAwsSettings(AwsSettings* s, const AwsLoadOptions& options) {
  AwsProfile profile;
  DSFS_RETURN_IF_ERROR(LoadAwsProfile(AwsProfileName(), &profile));
  auto config = [&](const char* key) {
    auto it = profile.values.find(key);
    return it == profile.values.end() ? std::string() : it->second;
  };
  std::string region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) region = config("region");
  if (!region.empty()) s->region = region;
  std::string endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = config("endpoint_url");
  if (endpoint.empty()) endpoint = "https://s3." + s->region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("S3 endpoint " + endpoint +
                                   ": not an http:// or https:// URL (AWS_ENDPOINT_URL)");
  }
  s->endpoint = endpoint;
  s->addressing = options.addressing;
  s->ca_bundle = Env("AWS_CA_BUNDLE");
  if (s->ca_bundle.empty()) s->ca_bundle = config("ca_bundle");
  if (!s->ca_bundle.empty() && ::access(s->ca_bundle.c_str(), R_OK) != 0) {
    return Status::InvalidArgument("S3 CA bundle " + s->ca_bundle +
                                   ": cannot be read (AWS_CA_BUNDLE or the profile's ca_bundle)");
  }
  if (options.anonymous) {
    s->access_key_id.clear();
    s->secret_access_key.clear();
    s->session_token.clear();
    s->credentials = CredentialHolder::Anonymous();
    return Status::OK();
  }
  CredentialChainOptions chain;
  chain.region = s->region;
  chain.ca_bundle = s->ca_bundle;
  std::unique_ptr<CredentialProvider> provider;
  AwsCredentials first;
  DSFS_RETURN_IF_ERROR(ResolveCredentialChain(chain, &provider, &first));
  s->access_key_id = first.access_key_id;
  s->secret_access_key = first.secret_access_key;
  s->session_token = first.session_token;
  s->credentials = CredentialHolder::Refreshing(std::move(provider), std::move(first));
  Log()->debug("S3 credentials from {}", s->credentials->source());
  return Status::OK();
}

}  // namespace dsfs
