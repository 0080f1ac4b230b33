#include "s3/credential_providers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "s3/credential_http.h"
#include "s3/url.h"

namespace dsfs {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string HomeFile(const char* env, const char* rel) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  std::string home = Env("HOME");
  return (home.empty() ? std::string("/root") : home) + "/" + rel;
}

bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::string TrimBlank(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// A form body's values: the same percent-encoding as SigV4's (s3/url.h).
std::string FormEncode(std::string_view s) { return UriEncode(s, false); }

std::string StsEndpoint(const std::string& region) {
  std::string e = Env("AWS_ENDPOINT_URL_STS");
  if (e.empty()) e = "https://sts." + region + ".amazonaws.com";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e + "/";
}

std::string SessionName(std::string configured) {
  if (!configured.empty()) return configured;
  return "dsfs-" + std::to_string(
                       std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
}

// POSTs an STS action and parses its <Credentials>.
Status StsCall(const CredentialChainOptions& opt, const std::string& form,
               const AwsCredentials* sign_with, const std::string& what, AwsCredentials* out) {
  CredentialHttpRequest req;
  req.method = "POST";
  req.url = StsEndpoint(opt.region);
  req.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
                 "Accept: application/xml"};
  req.body = form;
  req.ca_bundle = opt.ca_bundle;
  req.sign_with = sign_with;
  req.sigv4_region = opt.region;
  long status = 0;
  std::string body;
  DSFS_RETURN_IF_ERROR(CredentialHttp(req, &status, &body).WithContext(what));
  Status s = ParseStsCredentials(body, out);
  if (!s.ok()) {
    return Status::IOError(what + ": HTTP " + std::to_string(status) + ": " + s.message());
  }
  return Status::OK();
}

class StaticProvider : public CredentialProvider {
 public:
  StaticProvider(AwsCredentials c, std::string name) : c_(std::move(c)), name_(std::move(name)) {}
  Status Fetch(AwsCredentials* out) override {
    *out = c_;
    return Status::OK();
  }
  std::string Name() const override { return name_; }

 private:
  AwsCredentials c_;
  std::string name_;
};

class EnvironmentProvider : public CredentialProvider {
 public:
  Status Fetch(AwsCredentials* out) override {
    AwsCredentials c;
    c.access_key_id = Env("AWS_ACCESS_KEY_ID");
    c.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
    c.session_token = Env("AWS_SESSION_TOKEN");
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      return Status::InvalidArgument(
          "S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    }
    *out = std::move(c);
    return Status::OK();
  }
  std::string Name() const override { return "environment"; }
};

class WebIdentityProvider : public CredentialProvider {
 public:
  WebIdentityProvider(CredentialChainOptions opt, std::string token_file, std::string role_arn,
                      std::string session_name)
      : opt_(std::move(opt)),
        token_file_(std::move(token_file)),
        role_arn_(std::move(role_arn)),
        session_name_(SessionName(std::move(session_name))) {}
  Status Fetch(AwsCredentials* out) override {
    std::string token;
    if (!ReadWhole(token_file_, &token)) {
      return Status::IOError("S3 credentials (" + Name() + "): cannot read the token file " +
                             token_file_);
    }
    token = TrimBlank(token);
    if (token.empty()) {
      return Status::IOError("S3 credentials (" + Name() + "): the token file " + token_file_ +
                             " is empty");
    }
    const std::string form = "Action=AssumeRoleWithWebIdentity&RoleArn=" + FormEncode(role_arn_) +
                             "&RoleSessionName=" + FormEncode(session_name_) +
                             "&Version=2011-06-15&WebIdentityToken=" + FormEncode(token);
    return StsCall(opt_, form, nullptr, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override { return "web identity, role " + role_arn_; }

 private:
  CredentialChainOptions opt_;
  std::string token_file_, role_arn_, session_name_;
};

class AssumeRoleProvider : public CredentialProvider {
 public:
  AssumeRoleProvider(CredentialChainOptions opt, std::unique_ptr<CredentialProvider> source,
                     std::string profile, const AwsProfile& p)
      : opt_(std::move(opt)), source_(std::move(source)), profile_(std::move(profile)) {
    auto get = [&](const char* k) {
      auto it = p.values.find(k);
      return it == p.values.end() ? std::string() : it->second;
    };
    role_arn_ = get("role_arn");
    session_name_ = SessionName(get("role_session_name"));
    external_id_ = get("external_id");
    duration_s_ = get("duration_seconds");
  }
  Status Fetch(AwsCredentials* out) override {
    AwsCredentials source;
    DSFS_RETURN_IF_ERROR(source_->Fetch(&source));
    std::string form = "Action=AssumeRole";
    if (!duration_s_.empty()) form += "&DurationSeconds=" + FormEncode(duration_s_);
    if (!external_id_.empty()) form += "&ExternalId=" + FormEncode(external_id_);
    form += "&RoleArn=" + FormEncode(role_arn_) + "&RoleSessionName=" +
            FormEncode(session_name_) + "&Version=2011-06-15";
    return StsCall(opt_, form, &source, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override {
    return "profile " + profile_ + ", role " + role_arn_ + " from " + source_->Name();
  }

 private:
  CredentialChainOptions opt_;
  std::unique_ptr<CredentialProvider> source_;
  std::string profile_, role_arn_, session_name_, external_id_, duration_s_;
};

}  // namespace

// As the AWS CLI does on POSIX systems; its stderr is ours (the user's own tool speaking).
Status RunCredentialProcess(const std::string& command, int timeout_ms, std::string* out,
                            int* status) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::IOError("fork failed");
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false, too_long = false;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxCredentialBodyBytes) {
      too_long = true;
      break;
    }
  }
  ::close(fds[0]);
  if (timed_out || too_long) ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::IOError("no answer within " + std::to_string(timeout_ms / 1000) + " s");
  }
  if (too_long) return Status::IOError("more than 1 MiB on its stdout");
  *status = st;
  return Status::OK();
}

namespace {

class ProcessProvider : public CredentialProvider {
 public:
  ProcessProvider(std::string profile, std::string command)
      : profile_(std::move(profile)), command_(std::move(command)) {}
  Status Fetch(AwsCredentials* out) override {
    std::string text;
    int st = 0;
    Status s = RunCredentialProcess(command_, 60000, &text, &st);
    if (!s.ok()) return Status::IOError("S3 credentials (" + Name() + "): " + s.message());
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      return Status::IOError("S3 credentials (" + Name() + "): the command " +
                             (WIFEXITED(st) ? "exited with status " +
                                                  std::to_string(WEXITSTATUS(st))
                                            : std::string("was killed by a signal")));
    }
    return ParseCredentialsJson(text, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override { return "profile " + profile_ + ", credential_process"; }

 private:
  std::string profile_, command_;
};

}  // namespace

static bool IsAllowedContainerHost(const std::string& url) {
  // Plain http only to the link-local ECS/EKS agents or this host (the SDKs' rule): a token
  // must not travel in clear elsewhere.
  if (url.rfind("https://", 0) == 0) return true;
  for (const char* p : {"http://169.254.170.2", "http://169.254.170.23", "http://127.",
                        "http://localhost", "http://[::1]", "http://[fd00:ec2::23]"}) {
    if (url.rfind(p, 0) == 0) {
      char next = url.size() > std::strlen(p) ? url[std::strlen(p)] : '/';
      if (std::string(p).back() == '.' || next == '/' || next == ':') return true;
    }
  }
  return false;
}

Status CheckContainerUrl(const std::string& url, std::string* use) {
  if (!IsAllowedContainerHost(url)) {
    return Status::InvalidArgument(
        "S3 credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http on "
        "169.254.170.2, 169.254.170.23 or this host");
  }
  *use = url;
  return Status::OK();
}

namespace {

class ContainerProvider : public CredentialProvider {
 public:
  ContainerProvider(CredentialChainOptions opt, std::string url)
      : opt_(std::move(opt)), url_(std::move(url)) {}
  Status Fetch(AwsCredentials* out) override {
    CredentialHttpRequest req;
    req.url = url_;
    req.ca_bundle = opt_.ca_bundle;
    req.connect_timeout_ms = 2000;
    req.timeout_ms = 5000;
    std::string token_file = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    std::string token;
    if (!token_file.empty()) {
      if (!ReadWhole(token_file, &token)) {
        return Status::IOError("S3 credentials (" + Name() +
                               "): cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " +
                               token_file);
      }
      token = TrimBlank(token);
    } else {
      token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Status::IOError("S3 credentials (" + Name() +
                             "): the authorization token holds a line break");
    }
    if (!token.empty()) req.headers.push_back("Authorization: " + token);
    long status = 0;
    std::string body;
    DSFS_RETURN_IF_ERROR(CredentialHttp(req, &status, &body).WithContext("S3 credentials (" +
                                                                          Name() + ")"));
    if (status != 200) {
      return Status::IOError("S3 credentials (" + Name() + "): HTTP " + std::to_string(status));
    }
    return ParseCredentialsJson(body, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override { return "container endpoint " + url_.substr(0, url_.find('?')); }

 private:
  CredentialChainOptions opt_;
  std::string url_;
};

class ImdsProvider : public CredentialProvider {
 public:
  ImdsProvider(CredentialChainOptions opt, std::string endpoint)
      : opt_(std::move(opt)), endpoint_(std::move(endpoint)) {}
  Status Fetch(AwsCredentials* out) override {
    const std::string what = "S3 credentials (" + Name() + ")";
    CredentialHttpRequest req;
    req.connect_timeout_ms = 1000;
    req.timeout_ms = 3000;
    req.ca_bundle = opt_.ca_bundle;
    req.method = "PUT";
    req.url = endpoint_ + "/latest/api/token";
    req.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
    long status = 0;
    std::string token;
    DSFS_RETURN_IF_ERROR(CredentialHttp(req, &status, &token).WithContext(what));
    if (status != 200 || token.empty()) {
      return Status::IOError(what + ": no IMDSv2 session token (HTTP " + std::to_string(status) +
                             ")");
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Status::IOError(what + ": the IMDSv2 token holds a line break");
    }
    req.method = "GET";
    req.headers = {"X-aws-ec2-metadata-token: " + token};
    req.url = endpoint_ + "/latest/meta-data/iam/security-credentials/";
    std::string role;
    DSFS_RETURN_IF_ERROR(CredentialHttp(req, &status, &role).WithContext(what));
    role = TrimBlank(role.substr(0, role.find('\n')));
    if (status != 200 || role.empty()) {
      return Status::IOError(what + ": no instance role (HTTP " + std::to_string(status) + ")");
    }
    req.url += FormEncode(role);
    std::string body;
    DSFS_RETURN_IF_ERROR(CredentialHttp(req, &status, &body).WithContext(what));
    if (status != 200) {
      return Status::IOError(what + ": HTTP " + std::to_string(status) + " for role " + role);
    }
    return ParseCredentialsJson(body, what, out);
  }
  std::string Name() const override { return "EC2 instance metadata " + endpoint_; }

 private:
  CredentialChainOptions opt_;
  std::string endpoint_;
};

std::string Get(const AwsProfile& p, const char* key) {
  auto it = p.values.find(key);
  return it == p.values.end() ? std::string() : it->second;
}

}  // namespace

std::string ContainerCredentialsUrl() {
  std::string rel = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!rel.empty()) return "http://169.254.170.2" + (rel[0] == '/' ? rel : "/" + rel);
  return Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
}

namespace {

std::string ImdsEndpoint() {
  std::string e = Env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (e.empty()) e = "http://169.254.169.254";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

bool ImdsDisabled() {
  std::string v = Env("AWS_EC2_METADATA_DISABLED");
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "true" || v == "1";
}

// The provider of profile `name`; nullptr (and OK) if the profile configures no credentials.
Status ProfileProvider(const CredentialChainOptions& opt, const std::string& name, int depth,
                       std::unique_ptr<CredentialProvider>* out) {
  out->reset();
  if (depth > 5) {
    return Status::InvalidArgument("S3 credentials: profile " + name +
                                   ": source_profile chain longer than 5 (a loop?)");
  }
  AwsProfile p = LoadAwsProfile(name);
  if (!p.found) return Status::OK();
  const std::string role = Get(p, "role_arn");
  const std::string key = Get(p, "aws_access_key_id"), secret = Get(p, "aws_secret_access_key");
  if (!role.empty()) {
    std::unique_ptr<CredentialProvider> source;
    const std::string source_profile = Get(p, "source_profile");
    const std::string credential_source = Get(p, "credential_source");
    const std::string token_file = Get(p, "web_identity_token_file");
    if (!token_file.empty()) {
      *out = std::make_unique<WebIdentityProvider>(opt, token_file, role,
                                                   Get(p, "role_session_name"));
      return Status::OK();
    }
    if (!source_profile.empty()) {
      if (source_profile == name && !key.empty()) {
        AwsCredentials c{key, secret, Get(p, "aws_session_token"), 0};
        source = std::make_unique<StaticProvider>(c, "profile " + name + " (static keys)");
      } else {
        DSFS_RETURN_IF_ERROR(ProfileProvider(opt, source_profile, depth + 1, &source));
      }
      if (!source) {
        return Status::InvalidArgument("S3 credentials: profile " + name + ": source_profile " +
                                       source_profile + " has no credentials");
      }
    } else if (credential_source == "Environment") {
      source = std::make_unique<EnvironmentProvider>();
    } else if (credential_source == "EcsContainer") {
      source = std::make_unique<ContainerProvider>(opt, ContainerCredentialsUrl());
    } else if (credential_source == "Ec2InstanceMetadata") {
      source = std::make_unique<ImdsProvider>(opt, ImdsEndpoint());
    } else {
      return Status::InvalidArgument(
          "S3 credentials: profile " + name +
          ": role_arn needs source_profile, credential_source or web_identity_token_file");
    }
    *out = std::make_unique<AssumeRoleProvider>(opt, std::move(source), name, p);
    return Status::OK();
  }
  if (!key.empty() || !secret.empty()) {
    if (key.empty() || secret.empty()) {
      return Status::InvalidArgument("S3 credentials: profile " + name +
                                     " has only one of aws_access_key_id and "
                                     "aws_secret_access_key");
    }
    AwsCredentials c{key, secret, Get(p, "aws_session_token"), 0};
    *out = std::make_unique<StaticProvider>(c, "profile " + name);
    return Status::OK();
  }
  const std::string process = Get(p, "credential_process");
  if (!process.empty()) {
    *out = std::make_unique<ProcessProvider>(name, process);
  }
  return Status::OK();
}

}  // namespace

std::string AwsProfileName() {
  std::string profile = Env("AWS_PROFILE");
  return profile.empty() ? "default" : profile;
}

AwsProfile LoadAwsProfile(const std::string& name) {
  AwsProfile p;
  p.name = name;
  std::string text;
  if (ReadWhole(HomeFile("AWS_CONFIG_FILE", ".aws/config"), &text)) {
    auto sections = ParseIni(text);
    auto it = sections.find(name == "default" ? "default" : "profile " + name);
    if (it == sections.end() && name == "default") it = sections.find("profile default");
    if (it != sections.end()) {
      p.values = it->second;
      p.found = true;
    }
  }
  text.clear();
  if (ReadWhole(HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"), &text)) {
    auto sections = ParseIni(text);
    auto it = sections.find(name);
    if (it != sections.end()) {
      for (const auto& [k, v] : it->second) p.values[k] = v;
      p.found = true;
    }
  }
  return p;
}

Status ResolveCredentialChain(const CredentialChainOptions& opt,
                              std::unique_ptr<CredentialProvider>* provider,
                              AwsCredentials* first) {
  std::unique_ptr<CredentialProvider> p;
  if (!Env("AWS_ACCESS_KEY_ID").empty() || !Env("AWS_SECRET_ACCESS_KEY").empty()) {
    p = std::make_unique<EnvironmentProvider>();
  } else if (!Env("AWS_WEB_IDENTITY_TOKEN_FILE").empty() && !Env("AWS_ROLE_ARN").empty()) {
    p = std::make_unique<WebIdentityProvider>(opt, Env("AWS_WEB_IDENTITY_TOKEN_FILE"),
                                              Env("AWS_ROLE_ARN"), Env("AWS_ROLE_SESSION_NAME"));
  } else {
    const std::string profile = AwsProfileName();
    DSFS_RETURN_IF_ERROR(ProfileProvider(opt, profile, 0, &p));
    if (!p && !ContainerCredentialsUrl().empty()) {
      const std::string url = ContainerCredentialsUrl();
      if (!IsAllowedContainerHost(url)) {
        return Status::InvalidArgument(
            "S3 credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http on "
            "169.254.170.2, 169.254.170.23 or this host");
      }
      p = std::make_unique<ContainerProvider>(opt, url);
    }
    if (!p && !ImdsDisabled()) {
      auto imds = std::make_unique<ImdsProvider>(opt, ImdsEndpoint());
      Status s = imds->Fetch(first);
      if (s.ok()) {
        *provider = std::move(imds);
        return Status::OK();
      }
      return Status::InvalidArgument(
          "S3 credentials: none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no "
          "AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, no credentials in profile [" +
          profile + "] of " + HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") +
          " or " + HomeFile("AWS_CONFIG_FILE", ".aws/config") +
          ", no AWS_CONTAINER_CREDENTIALS_*_URI, and EC2 instance metadata: " + s.message() +
          "); for a public bucket, -o s3_anonymous");
    }
    if (!p) {
      return Status::InvalidArgument(
          "S3 credentials: none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no "
          "AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, no credentials in profile [" +
          profile + "] of " + HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") +
          " or " + HomeFile("AWS_CONFIG_FILE", ".aws/config") +
          ", no AWS_CONTAINER_CREDENTIALS_*_URI, EC2 instance metadata disabled); for a public "
          "bucket, -o s3_anonymous");
    }
  }
  DSFS_RETURN_IF_ERROR(p->Fetch(first));
  *provider = std::move(p);
  return Status::OK();
}

}  // namespace dsfs
