#include "s3/credential_providers.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/path.h"
#include "common/system.h"
#include "s3/credential_http.h"
#include "s3/url.h"

namespace dsfs {
namespace {

std::string HomeFile(const char* env, const char* rel) {
  std::string p = GetEnv(env);
  if (!p.empty()) return p;
  std::string home = GetEnv("HOME");
  return (home.empty() ? std::string("/root") : home) + "/" + rel;
}

// A web identity token is at most 20,000 characters (STS's limit), an authorization token
// far less; a profile file of a megabyte is thousands of profiles.
constexpr size_t kMaxTokenFileBytes = 64 << 10;
constexpr size_t kMaxProfileFileBytes = 1 << 20;

}  // namespace

Status ReadCredentialFile(const std::string& path, size_t max_bytes, const std::string& what,
                          std::string* out) {
  const std::string name = what + " " + PrintableName(path);
  if (ReadSmallRegularFile(path, out, max_bytes + 1, /*follow_link=*/true)) {
    if (out->size() <= max_bytes) return Status::OK();
    out->clear();
    return Status::IOError(name + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  const int err = errno;
  if (err == ENOENT) return Status::NotFound(name + ": no such file");
  return Status::IOError(
      name + ": " +
      (err == EINVAL ? std::string("not a regular file") : std::string(std::strerror(err))));
}

namespace {

std::string TrimBlank(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

// A form body's values: the same percent-encoding as SigV4's (s3/url.h).
std::string FormEncode(std::string_view s) { return UriEncode(s, false); }

std::string StsEndpoint(const std::string& region) {
  std::string e = GetEnv("AWS_ENDPOINT_URL_STS");
  if (e.empty()) e = "https://sts." + region + ".amazonaws.com";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e + "/";
}

std::string SessionName(std::string configured) {
  if (!configured.empty()) return configured;
  return "dsfs-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
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
  AwsCredentials c;
  Status s = ParseStsCredentials(body, &c);  // names an <Error>'s Code, whatever the status
  if (s.ok() && status != 200) s = Status::IOError("credentials in an answer that is not 200 OK");
  if (!s.ok()) {
    return Status::IOError(what + ": HTTP " + std::to_string(status) + ": " + s.message());
  }
  *out = std::move(c);
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
    c.access_key_id = GetEnv("AWS_ACCESS_KEY_ID");
    c.secret_access_key = GetEnv("AWS_SECRET_ACCESS_KEY");
    c.session_token = GetEnv("AWS_SESSION_TOKEN");
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
    Status s = ReadCredentialFile(token_file_, kMaxTokenFileBytes, "the token file", &token);
    if (!s.ok()) return Status::IOError("S3 credentials (" + Name() + "): " + s.message());
    token = TrimBlank(token);
    if (token.empty()) {
      return Status::IOError("S3 credentials (" + Name() + "): the token file " +
                             PrintableName(token_file_) + " is empty");
    }
    const std::string form = "Action=AssumeRoleWithWebIdentity&RoleArn=" + FormEncode(role_arn_) +
                             "&RoleSessionName=" + FormEncode(session_name_) +
                             "&Version=2011-06-15&WebIdentityToken=" + FormEncode(token);
    return StsCall(opt_, form, nullptr, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override { return "web identity, role " + PrintableName(role_arn_); }

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
    form += "&RoleArn=" + FormEncode(role_arn_) + "&RoleSessionName=" + FormEncode(session_name_) +
            "&Version=2011-06-15";
    return StsCall(opt_, form, &source, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override {
    return "profile " + PrintableName(profile_) + ", role " + PrintableName(role_arn_) + " from " +
           source_->Name();
  }

 private:
  CredentialChainOptions opt_;
  std::unique_ptr<CredentialProvider> source_;
  std::string profile_, role_arn_, session_name_, external_id_, duration_s_;
};

// In the child of fork(): only async-signal-safe calls. The command leads a process group of
// its own (killed whole once it has answered or timed out), reads /dev/null, writes `out_fd`, and
// inherits no other descriptor of ours (the daemon's sockets, its FUSE device) nor our blocked
// signals.
[[noreturn]] void ExecCommand(const char* command, int out_fd) {
  ::setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (out_fd == 1) {
    ::fcntl(1, F_SETFD, 0);
  } else {
    ::dup2(out_fd, 1);
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, 0);
  if (::close_range(3, ~0U, 0) != 0) {
    for (long fd = 3, n = ::sysconf(_SC_OPEN_MAX); fd < n; ++fd) ::close(static_cast<int>(fd));
  }
  ::execl("/bin/sh", "sh", "-c", command, static_cast<char*>(nullptr));
  ::_exit(127);
}

// Whether `pid` has exited, leaving it a zombie (its PID, and so its process group, stay ours
// until it is reaped).
bool Exited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

// Reads what `fd` has now, waiting at most `wait_ms` for it: false at EOF (or error).
bool ReadSome(int fd, int wait_ms, std::string* out) {
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, wait_ms);
  if (r <= 0) return true;  // nothing yet (or EINTR: the caller loops)
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  out->append(buf, static_cast<size_t>(n));
  return true;
}

}  // namespace

// As the AWS CLI does on POSIX systems; its stderr is ours (the user's own tool speaking).
// The deadline covers the whole run: reading stdout and waiting for the command to exit. Once
// it has exited, what is already on the pipe is its answer: a background child still holding
// the pipe open is not waited for.
Status RunCredentialProcess(const std::string& command, int timeout_ms, std::string* out,
                            int* status) {
  out->clear();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::IOError("fork failed");
  }
  if (pid == 0) ExecCommand(command.c_str(), fds[1]);
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool open = true, exited = false, timed_out = false, too_long = false;
  while (!exited && !too_long) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int wait_ms = static_cast<int>(std::min<int64_t>(left, open ? 50 : 10));
    if (open) {
      open = ReadSome(fds[0], wait_ms, out);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));  // stdout closed
    }
    too_long = out->size() > kMaxCredentialBodyBytes;
    exited = Exited(pid);
  }
  // Exited: what its writes left on the pipe, without waiting for more.
  while (exited && open && !too_long) {
    const size_t had = out->size();
    open = ReadSome(fds[0], 0, out) && out->size() > had;
    too_long = out->size() > kMaxCredentialBodyBytes;
  }
  ::close(fds[0]);
  // The group ends with the command, answered or not: what it left running in the background
  // would otherwise pile up, one more at each refresh. (The PID is still ours, not reaped, so
  // the group is the command's; a child that left it with setsid is beyond reach.)
  ::kill(-pid, SIGKILL);
  if (timed_out || too_long) ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::IOError("no answer within " + std::to_string(timeout_ms / 1000) +
                           " s (the command's process group was killed)");
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
                             (WIFEXITED(st)
                                  ? "exited with status " + std::to_string(WEXITSTATUS(st))
                                  : std::string("was killed by a signal")));
    }
    return ParseCredentialsJson(text, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override {
    return "profile " + PrintableName(profile_) + ", credential_process";
  }

 private:
  std::string profile_, command_;
};

}  // namespace

namespace {

// One part of a parsed URL; false if it has none.
bool UrlPart(CURLU* u, CURLUPart part, std::string* out) {
  char* v = nullptr;
  const bool has = curl_url_get(u, part, &v, 0) == CURLUE_OK;
  *out = has && v != nullptr ? v : "";
  curl_free(v);
  return has;
}

// A host (as curl gives it: IPv4 normalized, IPv6 in brackets) that plain http may reach with
// an authorization token: this host (127.0.0.0/8, ::1, localhost) or the container agents
// (169.254.170.2 of ECS, 169.254.170.23 and fd00:ec2::23 of EKS Pod Identity). Literals and
// the one name only: nothing that a resolver answers.
bool IsContainerAgentOrLoopback(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    in6_addr a{}, agent{};
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a) != 1) return false;
    ::inet_pton(AF_INET6, "fd00:ec2::23", &agent);
    return IN6_IS_ADDR_LOOPBACK(&a) || std::memcmp(&a, &agent, sizeof a) == 0;
  }
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    const uint32_t ip = ntohl(a4.s_addr);
    return ip >> 24 == 127 || ip == 0xA9FEAA02 || ip == 0xA9FEAA17;  // 169.254.170.2, .23
  }
  std::string lower = host;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "localhost";
}

}  // namespace

Status CheckContainerUrl(const std::string& url, std::string* use) {
  auto refused = [](const std::string& why) {
    return Status::InvalidArgument(
        "S3 credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http on "
        "169.254.170.2, 169.254.170.23, [fd00:ec2::23] or this host (127.0.0.0/8, [::1], "
        "localhost), with no user name: " +
        why);
  };
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), curl_url_cleanup);
  if (!u) return Status::IOError("S3 credentials: out of memory parsing a URL");
  if (curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    return refused("not a URL");
  }
  std::string scheme, host, ignored;
  UrlPart(u.get(), CURLUPART_SCHEME, &scheme);
  UrlPart(u.get(), CURLUPART_HOST, &host);
  if (scheme != "http" && scheme != "https") return refused("scheme " + PrintableName(scheme));
  if (UrlPart(u.get(), CURLUPART_USER, &ignored) ||
      UrlPart(u.get(), CURLUPART_PASSWORD, &ignored) ||
      UrlPart(u.get(), CURLUPART_OPTIONS, &ignored)) {
    return refused("it has user info before the host " + PrintableName(host));
  }
  if (UrlPart(u.get(), CURLUPART_ZONEID, &ignored)) return refused("it names a zone");
  if (scheme == "http" && !IsContainerAgentOrLoopback(host)) {
    return refused("http on " + PrintableName(host));
  }
  // The URL as curl parsed it, which is what curl will then ask: no second parser's reading.
  if (!UrlPart(u.get(), CURLUPART_URL, use)) return refused("not a URL");
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
    std::string token_file = GetEnv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    std::string token;
    if (!token_file.empty()) {
      Status s = ReadCredentialFile(token_file, kMaxTokenFileBytes,
                                    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token);
      if (!s.ok()) return Status::IOError("S3 credentials (" + Name() + "): " + s.message());
      token = TrimBlank(token);
    } else {
      token = GetEnv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Status::IOError("S3 credentials (" + Name() +
                             "): the authorization token holds a line break");
    }
    if (!token.empty()) req.headers.push_back("Authorization: " + token);
    long status = 0;
    std::string body;
    DSFS_RETURN_IF_ERROR(
        CredentialHttp(req, &status, &body).WithContext("S3 credentials (" + Name() + ")"));
    if (status != 200) {
      return Status::IOError("S3 credentials (" + Name() + "): HTTP " + std::to_string(status));
    }
    return ParseCredentialsJson(body, "S3 credentials (" + Name() + ")", out);
  }
  std::string Name() const override {
    return "container endpoint " + PrintableName(url_.substr(0, url_.find('?')));
  }

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
      return Status::IOError(what + ": HTTP " + std::to_string(status) + " for role " +
                             PrintableName(role));
    }
    return ParseCredentialsJson(body, what, out);
  }
  std::string Name() const override { return "EC2 instance metadata " + PrintableName(endpoint_); }

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
  std::string rel = GetEnv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!rel.empty()) return "http://169.254.170.2" + (rel[0] == '/' ? rel : "/" + rel);
  return GetEnv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
}

namespace {

std::string ImdsEndpoint() {
  std::string e = GetEnv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (e.empty()) e = "http://169.254.169.254";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// The container source at ContainerCredentialsUrl(), if the URL is allowed; `how` says what
// asked for it (in the message if no URL is set).
Status MakeContainerProvider(const CredentialChainOptions& opt, const std::string& how,
                             std::unique_ptr<CredentialProvider>* out) {
  const std::string url = ContainerCredentialsUrl();
  if (url.empty()) {
    return Status::InvalidArgument("S3 credentials: " + how +
                                   ", but neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor "
                                   "AWS_CONTAINER_CREDENTIALS_FULL_URI is set");
  }
  std::string use;
  DSFS_RETURN_IF_ERROR(CheckContainerUrl(url, &use));
  *out = std::make_unique<ContainerProvider>(opt, use);
  return Status::OK();
}

bool ImdsDisabled() {
  std::string v = GetEnv("AWS_EC2_METADATA_DISABLED");
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
  AwsProfile p;
  DSFS_RETURN_IF_ERROR(LoadAwsProfile(name, &p));
  if (!p.found) return Status::OK();
  const std::string role = Get(p, "role_arn");
  const std::string key = Get(p, "aws_access_key_id"), secret = Get(p, "aws_secret_access_key");
  if (!role.empty()) {
    std::unique_ptr<CredentialProvider> source;
    const std::string source_profile = Get(p, "source_profile");
    const std::string credential_source = Get(p, "credential_source");
    const std::string token_file = Get(p, "web_identity_token_file");
    if (!token_file.empty()) {
      *out =
          std::make_unique<WebIdentityProvider>(opt, token_file, role, Get(p, "role_session_name"));
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
      DSFS_RETURN_IF_ERROR(MakeContainerProvider(
          opt, "profile " + PrintableName(name) + ": credential_source = EcsContainer", &source));
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
  std::string profile = GetEnv("AWS_PROFILE");
  return profile.empty() ? "default" : profile;
}

namespace {

// The sections of the profile file named by `env` (default ~/`rel`); none if it does not exist.
Status ReadProfileFile(const char* env, const char* rel, std::map<std::string, IniSection>* out) {
  std::string text;
  Status s = ReadCredentialFile(HomeFile(env, rel), kMaxProfileFileBytes,
                                std::string("S3 credentials: ") + env, &text);
  if (s.IsNotFound()) return Status::OK();
  DSFS_RETURN_IF_ERROR(s);
  *out = ParseIni(text);
  return Status::OK();
}

}  // namespace

Status LoadAwsProfile(const std::string& name, AwsProfile* p) {
  *p = AwsProfile();
  p->name = name;
  std::map<std::string, IniSection> sections;
  DSFS_RETURN_IF_ERROR(ReadProfileFile("AWS_CONFIG_FILE", ".aws/config", &sections));
  auto it = sections.find(name == "default" ? "default" : "profile " + name);
  if (it == sections.end() && name == "default") it = sections.find("profile default");
  if (it != sections.end()) {
    p->values = it->second;
    p->found = true;
  }
  sections.clear();
  DSFS_RETURN_IF_ERROR(
      ReadProfileFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", &sections));
  it = sections.find(name);
  if (it != sections.end()) {
    for (const auto& [k, v] : it->second) p->values[k] = v;
    p->found = true;
  }
  return Status::OK();
}

namespace {

// Keys that arrive expired are an error of their source (CheckCredentialLifetime).
Status CheckFirst(const CredentialProvider& p, const AwsCredentials& c) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  Status s = CheckCredentialLifetime(c, now);
  if (!s.ok()) return Status::IOError("S3 credentials (" + p.Name() + "): " + s.message());
  return Status::OK();
}

}  // namespace

Status ResolveCredentialChain(const CredentialChainOptions& opt,
                              std::unique_ptr<CredentialProvider>* provider,
                              AwsCredentials* first) {
  std::unique_ptr<CredentialProvider> p;
  if (!GetEnv("AWS_ACCESS_KEY_ID").empty() || !GetEnv("AWS_SECRET_ACCESS_KEY").empty()) {
    p = std::make_unique<EnvironmentProvider>();
  } else if (!GetEnv("AWS_WEB_IDENTITY_TOKEN_FILE").empty() && !GetEnv("AWS_ROLE_ARN").empty()) {
    p = std::make_unique<WebIdentityProvider>(opt, GetEnv("AWS_WEB_IDENTITY_TOKEN_FILE"),
                                              GetEnv("AWS_ROLE_ARN"),
                                              GetEnv("AWS_ROLE_SESSION_NAME"));
  } else {
    const std::string profile = AwsProfileName();
    DSFS_RETURN_IF_ERROR(ProfileProvider(opt, profile, 0, &p));
    if (!p && !ContainerCredentialsUrl().empty()) {
      DSFS_RETURN_IF_ERROR(MakeContainerProvider(opt, "the container source", &p));
    }
    if (!p && !ImdsDisabled()) {
      auto imds = std::make_unique<ImdsProvider>(opt, ImdsEndpoint());
      Status s = imds->Fetch(first);
      if (s.ok()) {
        *provider = std::move(imds);
        return CheckFirst(**provider, *first);
      }
      return Status::InvalidArgument(
          "S3 credentials: none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no "
          "AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, no credentials in profile [" +
          profile + "] of " + HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") + " or " +
          HomeFile("AWS_CONFIG_FILE", ".aws/config") +
          ", no AWS_CONTAINER_CREDENTIALS_*_URI, and EC2 instance metadata: " + s.message() +
          "); for a public bucket, -o s3_anonymous");
    }
    if (!p) {
      return Status::InvalidArgument(
          "S3 credentials: none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no "
          "AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, no credentials in profile [" +
          profile + "] of " + HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") + " or " +
          HomeFile("AWS_CONFIG_FILE", ".aws/config") +
          ", no AWS_CONTAINER_CREDENTIALS_*_URI, EC2 instance metadata disabled); for a public "
          "bucket, -o s3_anonymous");
    }
  }
  DSFS_RETURN_IF_ERROR(p->Fetch(first));
  *provider = std::move(p);
  return CheckFirst(**provider, *first);
}

}  // namespace dsfs
