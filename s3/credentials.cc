#include "s3/credentials.h"

#include <unistd.h>

#include <cstdlib>

#include "common/log.h"
#include "common/path.h"
#include "common/system.h"
#include "s3/credential_providers.h"

namespace dsfs {
namespace {

// A system's whole bundle is about 200 kB.
constexpr size_t kMaxCaBundleBytes = 16 << 20;

}  // namespace

Status LoadAwsSettings(AwsSettings* s, const AwsLoadOptions& options) {
  AwsProfile profile;
  DSFS_RETURN_IF_ERROR(LoadAwsProfile(AwsProfileName(), &profile));
  auto config = [&](const char* key) {
    auto it = profile.values.find(key);
    return it == profile.values.end() ? std::string() : it->second;
  };
  std::string region = GetEnv("AWS_REGION");
  if (region.empty()) region = GetEnv("AWS_DEFAULT_REGION");
  if (region.empty()) region = config("region");
  if (!region.empty()) s->region = region;
  std::string endpoint = GetEnv("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = GetEnv("AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = config("endpoint_url");
  if (endpoint.empty()) endpoint = "https://s3." + s->region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("S3 endpoint " + PrintableName(endpoint) +
                                   ": not an http:// or https:// URL (AWS_ENDPOINT_URL)");
  }
  s->endpoint = endpoint;
  s->addressing = options.addressing;
  s->ca_bundle = GetEnv("AWS_CA_BUNDLE");
  if (s->ca_bundle.empty()) s->ca_bundle = config("ca_bundle");
  if (!s->ca_bundle.empty()) {
    // Checked as the chain's files are (curl would block on a FIFO, read /dev/zero, and name
    // no file when it fails): a bounded regular file holding PEM certificates.
    std::string pem;
    Status st = ReadCredentialFile(s->ca_bundle, kMaxCaBundleBytes, "S3 CA bundle", &pem);
    if (!st.ok()) {
      return Status::InvalidArgument(st.message() + " (AWS_CA_BUNDLE or the profile's ca_bundle)");
    }
    if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Status::InvalidArgument("S3 CA bundle " + PrintableName(s->ca_bundle) +
                                     ": holds no PEM certificate (AWS_CA_BUNDLE or the "
                                     "profile's ca_bundle)");
    }
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
