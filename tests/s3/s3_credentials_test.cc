// The AWS credential chain against servers that speak the documented protocols
// (tests/support/aws_services.py on 127.0.0.1): each provider's keys sign requests that an S3
// checking SigV4 accepts; temporary keys expire during the test and are refreshed (or, when
// the server revokes them first, refreshed on ExpiredToken and the request sent again); a
// failed refresh keeps the old keys; anonymous requests; https with AWS_CA_BUNDLE;
// virtual-hosted addressing; a mount whose keys come from web identity reads every file and its
// trace-level log holds no secret. No test reaches AWS or 169.254.169.254.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "s3/client.h"
#include "s3/credentials.h"
#include "tests/support/aws_services.h"
#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

constexpr const char* kRootKey = "AKIDROOTDSFS";
constexpr const char* kRootSecret = "rootsecretDSFS";
constexpr const char* kRole = "arn:aws:iam::123456789012:role/dsfs-test";
constexpr std::chrono::milliseconds kWait{60000};

class S3CredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new AwsServices();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << server_->error();
    for (const char* name : {"lifetime", "web_token", "container_token", "sts_fail", "revoke_early",
                             "expiration", "sts_status", "imds_role"}) {
      server_->Remove(name);
    }
    // Nothing of the machine's own AWS setup: only what each test sets.
    for (const char* v : {"AWS_ACCESS_KEY_ID",
                          "AWS_SECRET_ACCESS_KEY",
                          "AWS_SESSION_TOKEN",
                          "AWS_PROFILE",
                          "AWS_WEB_IDENTITY_TOKEN_FILE",
                          "AWS_ROLE_ARN",
                          "AWS_ROLE_SESSION_NAME",
                          "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                          "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                          "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                          "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                          "AWS_CA_BUNDLE",
                          "AWS_ENDPOINT_URL_S3",
                          "AWS_REGION",
                          "AWS_DEFAULT_REGION",
                          "http_proxy",
                          "https_proxy",
                          "HTTPS_PROXY",
                          "all_proxy",
                          "ALL_PROXY",
                          "no_proxy",
                          "NO_PROXY"}) {
      env_.Set(v, nullptr);
    }
    env_.Set("AWS_EC2_METADATA_DISABLED", "true");
    env_.Set("AWS_ENDPOINT_URL", server_->endpoint().c_str());
    env_.Set("AWS_ENDPOINT_URL_STS", server_->endpoint().c_str());
    env_.Set("AWS_CONFIG_FILE", (*dir_ / "none-config").c_str());
    env_.Set("AWS_SHARED_CREDENTIALS_FILE", (*dir_ / "none-credentials").c_str());
    env_.Set("DSFS_S3_ATTEMPTS", "2");
    env_.Set("DSFS_S3_TIMEOUT_S", "5");
  }

  static S3Client::RetryPolicy Policy() {
    S3Client::RetryPolicy p;
    p.attempts = 2;
    p.first_backoff_ms = 10;
    return p;
  }

  // A new bucket with one object (made with the root key); its name in *bucket.
  void MakeBucket(const std::string& prefix, std::string* bucket) {
    static int n = 0;
    *bucket = prefix + std::to_string(::getpid()) + "-" + std::to_string(n++);
    AwsSettings s;
    s.endpoint = server_->endpoint();
    s.access_key_id = kRootKey;
    s.secret_access_key = kRootSecret;
    S3Client root(s, Policy());
    ASSERT_TRUE(root.CreateBucket(*bucket).ok());
    ASSERT_TRUE(root.Put(*bucket, "dir/obj one", "payload of " + *bucket).ok());
  }

  // Loads the settings (the chain) and reads the bucket's object with them.
  void ReadWithChain(const AwsLoadOptions& options, std::string* source) {
    std::string bucket;
    ASSERT_NO_FATAL_FAILURE(MakeBucket("b", &bucket));
    AwsSettings s;
    Status st = LoadAwsSettings(&s, options);
    ASSERT_TRUE(st.ok()) << st.ToString();
    S3Client client(s, Policy());
    std::string got;
    st = client.Get(bucket, "dir/obj one", &got);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(got, "payload of " + bucket);
    *source = s.credentials->source();
  }

  void WebIdentityEnv() {
    server_->Set("web_token", "eyJ-web-identity-token");
    WriteFile(*dir_ / "web_token", "eyJ-web-identity-token\n");
    env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", (*dir_ / "web_token").c_str());
    env_.Set("AWS_ROLE_ARN", kRole);
  }

  static TempDir* dir_;
  static AwsServices* server_;
  ScopedEnv env_;
};
TempDir* S3CredentialsTest::dir_ = nullptr;
AwsServices* S3CredentialsTest::server_ = nullptr;

TEST_F(S3CredentialsTest, EnvironmentKeysSignAndAWrongSecretIsRefusedWithoutShowingIt) {
  env_.Set("AWS_ACCESS_KEY_ID", kRootKey);
  env_.Set("AWS_SECRET_ACCESS_KEY", kRootSecret);
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_EQ(source, "environment");
  env_.Set("AWS_SECRET_ACCESS_KEY", "wrong-secret-XYZZY");
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  S3Client client(s, Policy());
  std::string got;
  Status st = client.Get("bucket", "k", &got);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("SignatureDoesNotMatch"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.ToString().find("XYZZY"), std::string::npos) << st.ToString();
}

TEST_F(S3CredentialsTest, WebIdentityAssumesTheRoleThroughSts) {
  WebIdentityEnv();
  const int before = server_->Issued("web-identity");
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_EQ(source, std::string("web identity, role ") + kRole);
  EXPECT_EQ(server_->Issued("web-identity"), before + 1);
  // A token STS refuses: one line naming the source, not the token.
  WriteFile(*dir_ / "web_token", "eyJ-stale-token-QWERTY");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("AccessDenied"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("web identity"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.ToString().find("QWERTY"), std::string::npos) << st.ToString();
}

TEST_F(S3CredentialsTest, ProfileStaticKeysRoleFromSourceProfileAndCredentialProcess) {
  WriteFile(*dir_ / "credentials", std::string("[base]\naws_access_key_id = ") + kRootKey +
                                       "\naws_secret_access_key = " + kRootSecret + "\n");
  const std::string script = *dir_ / "creds.sh";
  WriteFile(script,
            std::string("#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"") + kRootKey +
                "\", \"SecretAccessKey\": \"" + kRootSecret +
                "\", \"Expiration\": \"2099-01-01T00:00:00Z\"}'\n",
            0755);
  WriteFile(*dir_ / "config",
            std::string("[profile role]\nrole_arn = ") + kRole +
                "\nsource_profile = base\n[profile sso]\ncredential_process = " + script +
                "\n[profile broken]\ncredential_process = " + dir_->path() + "/no-such-tool\n");
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", (*dir_ / "credentials").c_str());
  env_.Set("AWS_CONFIG_FILE", (*dir_ / "config").c_str());
  std::string source;
  env_.Set("AWS_PROFILE", "base");
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_EQ(source, "profile base");
  env_.Set("AWS_PROFILE", "role");
  const int before = server_->Issued("assume-role");
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_EQ(server_->Issued("assume-role"), before + 1);  // signed AssumeRole accepted
  EXPECT_NE(source.find("role " + std::string(kRole)), std::string::npos) << source;
  env_.Set("AWS_PROFILE", "sso");
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_EQ(source, "profile sso, credential_process");
  env_.Set("AWS_PROFILE", "broken");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("credential_process"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("exited with status 127"), std::string::npos) << st.ToString();
}

TEST_F(S3CredentialsTest, ContainerEndpointWithTheAuthorizationTokenFile) {
  server_->Set("container_token", "container-auth-secret");
  WriteFile(*dir_ / "container_token", "container-auth-secret\n");
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI",
           ("http://127.0.0.1:" + std::to_string(server_->port()) + "/container/creds").c_str());
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (*dir_ / "container_token").c_str());
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_NE(source.find("container endpoint"), std::string::npos) << source;
  // Without the token: refused (401), said as such.
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", nullptr);
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_NE(st.ToString().find("HTTP 401"), std::string::npos) << st.ToString();
  // Plain http elsewhere than the container agents or this host is refused before any request.
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds");
  st = LoadAwsSettings(&s);
  EXPECT_NE(st.ToString().find("FULL_URI must be https"), std::string::npos) << st.ToString();
}

TEST_F(S3CredentialsTest, Ec2InstanceMetadataV2AndItsOffSwitch) {
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", server_->endpoint().c_str());
  env_.Set("AWS_EC2_METADATA_DISABLED", nullptr);
  const int before = server_->Issued("imds");
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_NE(source.find("EC2 instance metadata"), std::string::npos) << source;
  EXPECT_EQ(server_->Issued("imds"), before + 1);
  env_.Set("AWS_EC2_METADATA_DISABLED", "true");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_NE(st.ToString().find("none found"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("s3_anonymous"), std::string::npos) << st.ToString();
  EXPECT_EQ(server_->Issued("imds"), before + 1);
}

// The container endpoint and instance metadata are on this host or its link: asked directly,
// never through http_proxy (a proxy cannot reach them and must not see their tokens). The proxy
// here is a closed port: a request sent to it fails.
TEST_F(S3CredentialsTest, LocalCredentialEndpointsBypassTheProxy) {
  env_.Set("http_proxy", "http://127.0.0.1:1");
  env_.Set("ALL_PROXY", "http://127.0.0.1:1");
  env_.Set("no_proxy", "127.0.0.1");  // the S3 requests (theirs to decide): to 127.0.0.1
  server_->Set("container_token", "container-auth-secret");
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI",
           ("http://localhost:" + std::to_string(server_->port()) + "/container/creds").c_str());
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-auth-secret");
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain({}, &source));
  EXPECT_NE(source.find("container endpoint"), std::string::npos) << source;
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr);
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", nullptr);
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT",
           ("http://localhost:" + std::to_string(server_->port())).c_str());
  env_.Set("AWS_EC2_METADATA_DISABLED", nullptr);
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(s.credentials->source().find("EC2 instance metadata"), std::string::npos);
}

// STS's answer is taken only with HTTP 200: a 500 that carries <Credentials> is a failure.
TEST_F(S3CredentialsTest, StsCredentialsOnlyFromHttp200) {
  WebIdentityEnv();
  server_->Set("sts_status", "500");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("HTTP 500"), std::string::npos) << st.ToString();
}

// Keys that arrive already expired (the source's clock behind ours, or ours ahead): the chain
// says so in one line naming the clock, instead of handing out keys every request refuses.
TEST_F(S3CredentialsTest, KeysThatArriveExpiredNameTheClock) {
  WebIdentityEnv();
  server_->Set("expiration", "2001-01-01T00:00:00Z");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("clock"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("2001-01-01T00:00:00Z"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.ToString().find('\n'), std::string::npos) << st.ToString();
}

// What IMDS says is printed printable: a role name with a newline and an escape sequence
// (that the endpoint then does not know) forges no log line and sends the terminal nothing.
TEST_F(S3CredentialsTest, ImdsRoleNameInAMessageIsPrintable) {
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", server_->endpoint().c_str());
  env_.Set("AWS_EC2_METADATA_DISABLED", nullptr);
  server_->Set("imds_role", "evil\x1b[2Jrole\r forged");
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("HTTP 404"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.ToString().find_first_of("\r\n\x1b"), std::string::npos) << Printable(st.ToString());
  EXPECT_NE(st.ToString().find("evil\\033[2Jrole"), std::string::npos) << st.ToString();
}

// Keys living 3 s: reads go on for 4 s, across a refresh, and none fails.
TEST_F(S3CredentialsTest, ShortLivedKeysAreRefreshedDuringReads) {
  WebIdentityEnv();
  server_->Set("lifetime", "3");
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("r", &bucket));
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  S3Client client(s, Policy());
  const int before = server_->Issued("web-identity");
  int failures = 0, reads = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < end) {
    std::string got;
    Status st = client.Get(bucket, "dir/obj one", &got);
    ++reads;
    if (!st.ok() || got != "payload of " + bucket) {
      ++failures;
      ADD_FAILURE() << st.ToString();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(failures, 0) << reads << " reads";
  EXPECT_GE(server_->Issued("web-identity") - before, 1);
  EXPECT_GE(s.credentials->refreshes(), 1u);
}

// Keys the server revokes long before their Expiration: a read answered ExpiredToken makes the
// holder fetch new keys, and the read is sent again and succeeds.
TEST_F(S3CredentialsTest, ExpiredTokenFetchesNewKeysAndResendsOnce) {
  WebIdentityEnv();
  server_->Set("lifetime", "3600");
  server_->Set("revoke_early", "3599");
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("x", &bucket));
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  S3Client client(s, Policy());
  const std::string first_key = s.access_key_id;
  // The server stops honouring them 1 s after the issue.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  server_->Remove("revoke_early");
  std::string got;
  Status st = client.Get(bucket, "dir/obj one", &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, "payload of " + bucket);
  EXPECT_NE(s.credentials->Get()->access_key_id, first_key);
  EXPECT_NE(server_->Read("s3").find(first_key + " 400"), std::string::npos);
}

// STS down at refresh time: the old keys stay in use (and are counted as a failed refresh);
// once STS is back, the next refresh succeeds.
TEST_F(S3CredentialsTest, AFailedRefreshKeepsTheOldKeys) {
  WebIdentityEnv();
  server_->Set("lifetime", "4");
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("f", &bucket));
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  server_->Set("sts_fail", "1");
  S3Client client(s, Policy());
  ASSERT_TRUE(WaitUntil([&] { return s.credentials->failed_refreshes() >= 1; }, kWait));
  EXPECT_EQ(s.credentials->Get()->access_key_id, s.access_key_id);
  server_->Remove("sts_fail");
  ASSERT_TRUE(WaitUntil([&] { return s.credentials->refreshes() >= 1; }, kWait));
  std::string got;
  Status st = client.Get(bucket, "dir/obj one", &got);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_F(S3CredentialsTest, AnonymousRequestsAreUnsigned) {
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("public-", &bucket));
  AwsLoadOptions anonymous;
  anonymous.anonymous = true;
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s, anonymous).ok());  // no keys anywhere: fine
  EXPECT_TRUE(s.credentials->anonymous());
  S3Client client(s, Policy());
  std::string got;
  Status st = client.Get(bucket, "dir/obj one", &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(server_->Read("s3").find("/" + bucket + "/dir/obj%20one anonymous 200"),
            std::string::npos)
      << server_->Read("s3");
  std::string private_bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("p", &private_bucket));
  st = client.Get(private_bucket, "dir/obj one", &got);
  EXPECT_NE(st.ToString().find("access denied"), std::string::npos) << st.ToString();
}

TEST_F(S3CredentialsTest, VirtualHostedAddressing) {
  env_.Set("AWS_ACCESS_KEY_ID", kRootKey);
  env_.Set("AWS_SECRET_ACCESS_KEY", kRootSecret);
  // curl takes every *.localhost name for this host: BUCKET.localhost:PORT reaches the server.
  env_.Set("AWS_ENDPOINT_URL", ("http://localhost:" + std::to_string(server_->port())).c_str());
  AwsLoadOptions virt;
  virt.addressing = S3Addressing::kVirtual;
  std::string source;
  ASSERT_NO_FATAL_FAILURE(ReadWithChain(virt, &source));
  EXPECT_NE(server_->Read("s3").find("obj%20one " + std::string(kRootKey) + " 200 virtual"),
            std::string::npos)
      << server_->Read("s3");
}

// https with a certificate of a CA the system does not know: refused, then accepted with
// AWS_CA_BUNDLE naming it (for S3 and STS alike).
TEST_F(S3CredentialsTest, CaBundleForHttps) {
  const std::string key = *dir_ / "tls.key", cert = *dir_ / "tls.pem";
  CommandResult r = RunCommand({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                                "-keyout", key, "-out", cert, "-days", "2", "-subj",
                                "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  AwsServices tls(cert, key);
  ASSERT_TRUE(tls.ok()) << tls.error();
  ASSERT_EQ(tls.endpoint().rfind("https://", 0), 0u);
  tls.Set("web_token", "eyJ-web-identity-token");
  WebIdentityEnv();
  env_.Set("AWS_ENDPOINT_URL", tls.endpoint().c_str());
  env_.Set("AWS_ENDPOINT_URL_STS", tls.endpoint().c_str());
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("certificate"), std::string::npos) << st.ToString();
  env_.Set("AWS_CA_BUNDLE", cert.c_str());
  st = LoadAwsSettings(&s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.ca_bundle, cert);
  S3Client client(s, Policy());
  ASSERT_TRUE(client.CreateBucket("tls-bucket").ok());
  ASSERT_TRUE(client.Put("tls-bucket", "k", "over https").ok());
  std::string got;
  st = client.Get("tls-bucket", "k", &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, "over https");
  env_.Set("AWS_CA_BUNDLE", (*dir_ / "no-such.pem").c_str());
  st = LoadAwsSettings(&s);
  EXPECT_NE(st.ToString().find("AWS_CA_BUNDLE"), std::string::npos) << st.ToString();
  // A bundle that is a FIFO (curl blocked on it for ever), a device, a directory or no PEM:
  // one line naming the file, at once, before any request.
  const std::string fifo = *dir_ / "bundle.fifo", empty = *dir_ / "bundle.txt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  WriteFile(empty, "not a certificate\n");
  for (const std::string& bad : {fifo, std::string("/dev/zero"), dir_->path(), empty}) {
    env_.Set("AWS_CA_BUNDLE", bad.c_str());
    st = LoadAwsSettings(&s);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.ToString().find("CA bundle " + bad), std::string::npos) << st.ToString();
    EXPECT_EQ(st.ToString().find('\n'), std::string::npos) << st.ToString();
  }
}

// The whole way: a store pushed with long-term keys, mounted with keys from web identity that
// live 3 s; every file read (twice, across refreshes); the mount's trace-level log, its stats
// and its command line hold none of the secrets involved.
TEST_F(S3CredentialsTest, MountWithWebIdentityReadsEverythingAndLogsNoSecret) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string src = *dir_ / "src";
  for (int i = 0; i < 20; ++i) {
    WriteFile(src + "/d" + std::to_string(i % 3) + "/f" + std::to_string(i),
              RandomBytes(3000 + i * 997, i));
  }
  const std::string store = *dir_ / "store.db";
  ASSERT_EQ(Dsfs({"pack", "-q", "--backend", "lmdb", src, store}).exit_code, 0);
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("m", &bucket));
  const std::string url = "s3://" + bucket + "/s";
  {
    ScopedEnv root;
    root.Set("AWS_ACCESS_KEY_ID", kRootKey);
    root.Set("AWS_SECRET_ACCESS_KEY", kRootSecret);
    CommandResult r = Dsfs({"push", "-q", store, url});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  WebIdentityEnv();
  server_->Set("lifetime", "3");
  const std::string mp = *dir_ / "mnt", log = *dir_ / "mount.log";
  MakeDir(mp);
  MountGuard g(mp);
  CommandResult r =
      g.MountBackground(url, {"-o", "cache_disk=0,cache_size=0,log_level=trace,log_file=" + log});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 20; ++i) {
      const std::string rel = "/d" + std::to_string(i % 3) + "/f" + std::to_string(i);
      EXPECT_EQ(ReadFile(mp + rel), ReadFile(src + rel)) << rel;
    }
    if (pass == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  }
  CommandResult stats = Dsfs({"stats", mp});
  std::string cmdline;
  if (!g.daemons().empty())
    cmdline = ReadFile("/proc/" + std::to_string(g.daemons().front()) + "/cmdline");
  g.Release();
  const std::string text = ReadFile(log) + stats.out + stats.err + cmdline;
  EXPECT_FALSE(text.empty());
  std::vector<std::string> secrets = {kRootSecret, "eyJ-web-identity-token"};
  std::istringstream in(server_->Read("secrets"));
  for (std::string line; std::getline(in, line);) secrets.push_back(line);
  for (const auto& secret : secrets) {
    EXPECT_EQ(text.find(secret), std::string::npos) << "a secret in the log or stats";
  }
}

// -o s3_anonymous mounts a public bucket with no credentials anywhere (unsigned requests);
// -o s3_addressing= takes auto, path or virtual; anything else is one line and a failure.
TEST_F(S3CredentialsTest, MountOptionsS3AnonymousAndS3Addressing) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string src = *dir_ / "src-anon";
  for (int i = 0; i < 5; ++i) WriteFile(src + "/f" + std::to_string(i), RandomBytes(5000, 40 + i));
  const std::string store = *dir_ / "anon.db";
  ASSERT_EQ(Dsfs({"pack", "-q", "--backend", "lmdb", src, store}).exit_code, 0);
  std::string bucket;
  ASSERT_NO_FATAL_FAILURE(MakeBucket("public-", &bucket));
  const std::string url = "s3://" + bucket + "/s";
  {
    ScopedEnv root;
    root.Set("AWS_ACCESS_KEY_ID", kRootKey);
    root.Set("AWS_SECRET_ACCESS_KEY", kRootSecret);
    CommandResult r = Dsfs({"push", "-q", store, url});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  const std::string mp = *dir_ / "mnt-anon";
  MakeDir(mp);
  {
    CommandResult r = Dsfs({"mount", "-o", "s3_addressing=sideways", url, mp});
    EXPECT_NE(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.err.find("s3_addressing: 'sideways' is not auto, path or virtual"),
              std::string::npos)
        << Describe(r);
    // No keys and no s3_anonymous: one line saying none were found.
    r = Dsfs({"mount", url, mp});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("S3 credentials: none found"), std::string::npos) << Describe(r);
  }
  MountGuard g(mp);
  CommandResult r = g.MountBackground(url, {"-o", "s3_anonymous,s3_addressing=path,cache_disk=0"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ReadFile(mp + "/f" + std::to_string(i)), ReadFile(src + "/f" + std::to_string(i)));
  }
  g.Release();
  EXPECT_NE(server_->Read("s3").find("/" + bucket + "/s/dsfs-index anonymous 200"),
            std::string::npos);
}

}  // namespace
}  // namespace dsfs::testing
