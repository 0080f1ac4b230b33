// The credential chain's parts that need no server: the INI, STS XML and JSON parsers, ISO
// 8601 times, the refresh rule, the refreshing holder (a fake provider and clock), and the S3
// addressing rule. (The providers against real protocol servers: tests/s3/s3_credentials_test.cc.)
#include "s3/credential_parse.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/system.h"
#include "s3/addressing.h"
#include "s3/credential_holder.h"
#include "s3/credential_providers.h"
#include "s3/xml.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

// Generous: the refresher wakes once a second, and the CI box may be loaded.
constexpr std::chrono::milliseconds kWait{60000};

TEST(CredentialParseTest, IniSectionsKeysAndComments) {
  auto s = ParseIni(
      "# comment\nkey_outside = x\n[default]\nAWS_Access_Key_Id = AK \r\n; c\n"
      "aws_secret_access_key=se=cret # note\n[profile  ml ]\nrole_arn = arn:aws:iam::1:role/r\n"
      "no equals sign\n[broken\nregion = eu-west-3\n");
  ASSERT_EQ(s.count("default"), 1u);
  EXPECT_EQ(s["default"]["aws_access_key_id"], "AK");
  EXPECT_EQ(s["default"]["aws_secret_access_key"], "se=cret");
  EXPECT_EQ(s["profile  ml"]["role_arn"], "arn:aws:iam::1:role/r");
  EXPECT_EQ(s["profile  ml"].count("region"), 0u);  // after "[broken": no section
  EXPECT_EQ(s.size(), 2u);
}

TEST(CredentialParseTest, Iso8601) {
  int64_t t = 0;
  ASSERT_TRUE(ParseIso8601("2026-12-04T10:11:16Z", &t).ok());
  EXPECT_EQ(t, 1796379076);
  ASSERT_TRUE(ParseIso8601("1970-01-01T00:00:00.123+00:00", &t).ok());
  EXPECT_EQ(t, 0);
  for (const char* bad : {"", "2026-12-04", "2026-12-04T10:11:16", "2026-13-04T10:11:16Z",
                          "2026-12-04T10:11:16+02:00", "2026-12-04T10:11:1xZ", "yesterday"}) {
    EXPECT_FALSE(ParseIso8601(bad, &t).ok()) << bad;
  }
}

// Days that do not exist and years before Unix time are no time (an answer's Expiration of
// 0000-01-01 or 2026-02-31 is a broken answer, not keys that expired long ago).
TEST(CredentialParseTest, Iso8601DaysOfEachMonthAndSaneYears) {
  int64_t t = 0;
  for (const char* good : {"2024-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2026-01-31T00:00:00Z",
                           "2026-04-30T23:59:59Z", "2026-12-31T23:59:60Z"}) {
    EXPECT_TRUE(ParseIso8601(good, &t).ok()) << good;
  }
  ASSERT_TRUE(ParseIso8601("2024-02-29T00:00:00Z", &t).ok());
  EXPECT_EQ(t, 1709164800);
  for (const char* bad : {"2026-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2026-02-30T00:00:00Z",
                          "2026-04-31T00:00:00Z", "2026-06-31T00:00:00Z", "2026-09-31T00:00:00Z",
                          "2026-11-31T00:00:00Z", "0000-01-01T00:00:00Z", "1969-12-31T23:59:59Z",
                          "2026-00-10T00:00:00Z", "2026-01-00T00:00:00Z"}) {
    EXPECT_FALSE(ParseIso8601(bad, &t).ok()) << bad;
  }
}

// Control characters a server or a command puts in its answer never reach a message raw.
TEST(CredentialParseTest, ServerWordsInMessagesArePrintable) {
  AwsCredentials c;
  Status s = ParseCredentialsJson(
      "{\"Code\": \"Bad\\n2026-01-01 forged log line\\u001b[2J\", \"AccessKeyId\": \"A\", "
      "\"SecretAccessKey\": \"S\"}",
      "container", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.ToString().find_first_of("\n\x1b"), std::string::npos) << Printable(s.ToString());
  EXPECT_NE(s.ToString().find("forged"), std::string::npos) << Printable(s.ToString());
  s = ParseCredentialsJson(
      "{\"AccessKeyId\": \"A\", \"SecretAccessKey\": \"S\", "
      "\"Expiration\": \"\\u001b]0;title\\u0007\\nnext\"}",
      "process", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.ToString().find_first_of("\n\x1b\x07"), std::string::npos) << Printable(s.ToString());
  int64_t t;
  s = ParseIso8601("\x1b[31m\r\n", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.ToString().find_first_of("\r\n\x1b"), std::string::npos) << Printable(s.ToString());
}

// The one XML reader of s3/ (S3 listings and errors, STS answers): raw contents, so an outer
// element can be searched again; entities only where text is taken.
TEST(CredentialParseTest, XmlElementsAndEntities) {
  const std::string_view xml =
      "<R><Key>a&amp;b</Key><Key></Key><Key>&lt;c&gt; &quot;&apos; &amp;amp; &bogus;</Key>"
      "<Key>unclosed</R>";
  std::vector<std::string_view> keys = XmlElements(xml, "Key");
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0], "a&amp;b");
  EXPECT_EQ(keys[1], "");
  EXPECT_EQ(XmlUnescape(keys[0]), "a&b");
  EXPECT_EQ(XmlUnescape(keys[2]), "<c> \"' &amp; &bogus;");
  std::string_view r;
  ASSERT_TRUE(XmlElement(xml, "R", &r));
  EXPECT_EQ(XmlElements(r, "Key").size(), 3u);
  EXPECT_FALSE(XmlElement(xml, "Missing", &r));
  EXPECT_FALSE(XmlElement("<A>open only", "A", &r));
  EXPECT_TRUE(XmlElements("", "Key").empty());
}

TEST(CredentialParseTest, StsAnswersAndErrors) {
  AwsCredentials c;
  const std::string ok =
      "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
      "<SessionToken>to&amp;ken</SessionToken><SecretAccessKey>sec</SecretAccessKey>"
      "<Expiration>2026-12-04T10:11:16Z</Expiration><AccessKeyId>ASIA1</AccessKeyId>"
      "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
  ASSERT_TRUE(ParseStsCredentials(ok, &c).ok());
  EXPECT_EQ(c.access_key_id, "ASIA1");
  EXPECT_EQ(c.secret_access_key, "sec");
  EXPECT_EQ(c.session_token, "to&ken");
  EXPECT_EQ(c.expiration_s, 1796379076);
  Status s = ParseStsCredentials(
      "<ErrorResponse><Error><Code>AccessDenied</Code><Message>no</Message></Error>"
      "</ErrorResponse>",
      &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("AccessDenied"), std::string::npos) << s.ToString();
  // The server's words reach a log printable: no newline or terminal control.
  s = ParseStsCredentials(
      "<Error><Code>Bad\nCode\x1b[2J</Code><Message>line1\nline2</Message></Error>", &c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find_first_of("\n\x1b"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("line1"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ParseStsCredentials("<html>proxy</html>", &c).ok());
  EXPECT_FALSE(
      ParseStsCredentials("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", &c).ok());
  // A secret never appears in a message, even when the answer is broken around it.
  s = ParseStsCredentials(
      "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>TOPSECRET</SecretAccessKey>"
      "<SessionToken>T</SessionToken><Expiration>soon</Expiration></Credentials>",
      &c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString().find("TOPSECRET"), std::string::npos) << s.ToString();
}

TEST(CredentialParseTest, JsonFromProcessContainerAndImds) {
  AwsCredentials c;
  ASSERT_TRUE(ParseCredentialsJson(R"({"Version": 1, "AccessKeyId": "AK",
      "SecretAccessKey": "S", "SessionToken": "T", "Expiration": "2026-12-04T10:11:16Z"})",
                                   "p", &c)
                  .ok());
  EXPECT_EQ(c, (AwsCredentials{"AK", "S", "T", 1796379076}));
  ASSERT_TRUE(ParseCredentialsJson(R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "S"})",
                                   "p", &c)
                  .ok());
  EXPECT_EQ(c, (AwsCredentials{"AK", "S", "", 0}));
  ASSERT_TRUE(ParseCredentialsJson(R"({"Code": "Success", "AccessKeyId": "AK",
      "SecretAccessKey": "S", "Token": "T", "Expiration": "2026-12-04T10:11:16Z"})",
                                   "imds", &c)
                  .ok());
  EXPECT_EQ(c.session_token, "T");
  for (const char* bad :
       {"", "[]", "{", R"({"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "S"})",
        R"({"AccessKeyId": "A"})", R"({"AccessKeyId": 5, "SecretAccessKey": "S"})",
        R"({"Code": "Failure", "AccessKeyId": "A", "SecretAccessKey": "S"})",
        R"({"AccessKeyId": "A", "SecretAccessKey": "TOPSECRET", "Expiration": "x"})"}) {
    Status s = ParseCredentialsJson(bad, "what", &c);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.ToString().find("TOPSECRET"), std::string::npos) << s.ToString();
  }
}

TEST(CredentialHolderTest, RefreshRule) {
  // A quarter of the lifetime before expiry, at most 5 minutes, at least 1 s.
  EXPECT_EQ(CredentialHolder::RefreshAt(1000, 1000 + 3600), 1000 + 3600 - 300);
  EXPECT_EQ(CredentialHolder::RefreshAt(1000, 1030), 1030 - 7);
  EXPECT_EQ(CredentialHolder::RefreshAt(1000, 1002), 1001);
  EXPECT_EQ(CredentialHolder::RefreshAt(1000, 990), 1000);  // already expired: now
}

// A provider whose answers the test controls: each fetch gives a new key expiring `life_s`
// after the fake clock's now, or fails.
class FakeProvider : public CredentialProvider {
 public:
  FakeProvider(std::atomic<int64_t>* now, std::atomic<bool>* fail, std::atomic<int>* fetches)
      : now_(now), fail_(fail), fetches_(fetches) {}
  Status Fetch(AwsCredentials* out) override {
    int n = ++*fetches_;
    if (*fail_) return Status::IOError("fake source down");
    *out = {"KEY" + std::to_string(n), "SECRET" + std::to_string(n), "TOKEN" + std::to_string(n),
            *now_ + life_};
    return Status::OK();
  }
  std::string Name() const override { return "fake"; }
  void set_life(int64_t s) { life_ = s; }

 private:
  std::atomic<int64_t> life_{40};
  std::atomic<int64_t>* now_;
  std::atomic<bool>* fail_;
  std::atomic<int>* fetches_;
};

TEST(CredentialHolderTest, RefreshesBeforeExpiryAndKeepsOldOnFailure) {
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder =
      CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
  EXPECT_EQ(holder->Get()->access_key_id, "KEY1");
  // Readers always see one fetch's triple, whatever the refresher does meanwhile.
  std::atomic<bool> stop{false}, torn{false};
  std::thread reader([&] {
    while (!stop) {
      auto c = holder->Get();
      const std::string n = c->access_key_id.substr(3);
      if (c->secret_access_key != "SECRET" + n || c->session_token != "TOKEN" + n) torn = true;
    }
  });
  now = 1031;  // past 1040 - 10
  EXPECT_TRUE(WaitUntil([&] { return holder->Get()->access_key_id == "KEY2"; }, kWait));
  EXPECT_EQ(holder->refreshes(), 1u);
  // The source fails: the current keys stay, failures are counted, then it recovers.
  fail = true;
  now = 1031 + 31;
  EXPECT_TRUE(WaitUntil([&] { return holder->failed_refreshes() >= 1; }, kWait));
  EXPECT_EQ(holder->Get()->access_key_id, "KEY2");
  fail = false;
  now = now + 6;  // the retry after a failure
  EXPECT_TRUE(WaitUntil([&] { return holder->Get()->access_key_id != "KEY2"; }, kWait));
  stop = true;
  reader.join();
  EXPECT_FALSE(torn);
}

// A source that answers with keys already expired (or about to: a clock ahead of the
// source's): a failed refresh, retried after the back-off, not a refresh loop; the keys in use
// stay. RefreshNow (a request refused as ExpiredToken) keeps to the back-off too.
TEST(CredentialHolderTest, KeysThatArriveExpiredAreAFailedRefresh) {
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  FakeProvider* fake = provider.get();
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder =
      CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
  for (int64_t life : {-3600, 0, 1}) {
    fake->set_life(life);
    const int before = fetches.load();
    const uint64_t failed = holder->failed_refreshes();
    now = now + 40;  // past the refresh time of whatever is current
    ASSERT_TRUE(WaitUntil([&] { return holder->failed_refreshes() > failed; }, kWait)) << life;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a loop would spin here
    auto used = holder->Get();
    for (int i = 0; i < 50; ++i) EXPECT_EQ(holder->RefreshNow(used), used);
    EXPECT_LE(fetches.load() - before, 2) << "life " << life;
    EXPECT_EQ(holder->refreshes(), 0u) << life;
    EXPECT_EQ(holder->Get()->access_key_id, "KEY1");
  }
  // Keys with a life again: the next retry takes them.
  fake->set_life(40);
  now = now + 6;
  EXPECT_TRUE(WaitUntil([&] { return holder->refreshes() == 1; }, kWait));
  EXPECT_NE(holder->Get()->access_key_id, "KEY1");
}

TEST(CredentialHolderTest, RefreshNowFetchesOnceForManyCallers) {
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder =
      CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
  auto used = holder->Get();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { EXPECT_EQ(holder->RefreshNow(used)->access_key_id, "KEY2"); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fetches.load(), 2);  // the first, and one refresh for the eight callers
  EXPECT_EQ(CredentialHolder::Anonymous()->Get(), nullptr);
  EXPECT_EQ(CredentialHolder::Fixed({"A", "S", "", 0})->Get()->access_key_id, "A");
}

// S3 refuses even the keys just fetched (its clock ahead of ours, a revoked session): every
// failed read calls RefreshNow with them, and the source is asked again only every
// kForcedRefreshEveryS, not once per read (208 STS calls in 20 s before).
TEST(CredentialHolderTest, KeysS3RefusesAtOnceAreFetchedAgainOnlyEveryFewSeconds) {
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder =
      CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
  auto used = holder->Get();
  used = holder->RefreshNow(used);  // the first refusal: fetched at once
  EXPECT_EQ(used->access_key_id, "KEY2");
  for (int i = 0; i < 100; ++i) EXPECT_EQ(holder->RefreshNow(used), used);  // refused again
  EXPECT_EQ(fetches.load(), 2);
  now = now + CredentialHolder::kForcedRefreshEveryS - 1;
  EXPECT_EQ(holder->RefreshNow(used), used);
  EXPECT_EQ(fetches.load(), 2);
  now = now + 1;
  EXPECT_EQ(holder->RefreshNow(used)->access_key_id, "KEY3");
  EXPECT_EQ(fetches.load(), 3);
}

// A source whose keys live a few seconds (a clock ahead of it): refreshed every few seconds,
// which the log says once at warn, naming the clock.
TEST(CredentialHolderTest, ShortLivedKeysAreLoggedOnceNamingTheClock) {
  TempDir dir;
  const std::string log = dir / "log";
  ASSERT_TRUE(LogToFile(log).ok());
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  FakeProvider* fake = provider.get();
  fake->set_life(5);
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder =
      CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
  for (int i = 1; i <= 3; ++i) {
    now = now + 5;
    ASSERT_TRUE(WaitUntil([&] { return holder->refreshes() == static_cast<uint64_t>(i); }, kWait));
  }
  holder.reset();
  LogToStderr();
  const std::string text = ReadFile(log);
  EXPECT_EQ(LinesWith(text, "live only").size(), 1u) << text;
  EXPECT_NE(text.find("clock"), std::string::npos) << text;
}

TEST(S3AddressingTest, AutoIsVirtualOnAwsOnlyForDnsNames) {
  S3Addressing a;
  ASSERT_TRUE(ParseS3Addressing("auto", &a).ok());
  EXPECT_EQ(a, S3Addressing::kAuto);
  ASSERT_TRUE(ParseS3Addressing("virtual", &a).ok());
  EXPECT_EQ(a, S3Addressing::kVirtual);
  EXPECT_FALSE(ParseS3Addressing("vhost", &a).ok());
  const std::string aws = "https://s3.eu-west-1.amazonaws.com";
  EXPECT_TRUE(UseVirtualHost(aws, "my-data", S3Addressing::kAuto));
  EXPECT_FALSE(UseVirtualHost(aws, "my.data", S3Addressing::kAuto));  // TLS name mismatch
  EXPECT_FALSE(UseVirtualHost(aws, "my--data", S3Addressing::kAuto));
  EXPECT_FALSE(UseVirtualHost(aws, "my-data", S3Addressing::kPath));
  EXPECT_FALSE(UseVirtualHost("http://rgw:7480", "my-data", S3Addressing::kAuto));
  EXPECT_FALSE(UseVirtualHost("https://evil-amazonaws.com", "my-data", S3Addressing::kAuto));
  EXPECT_TRUE(UseVirtualHost("http://localhost:9000", "my-data", S3Addressing::kVirtual));
  EXPECT_EQ(S3RequestUrl(aws, "my-data", "a/b%20c", "x=1", S3Addressing::kAuto),
            "https://my-data.s3.eu-west-1.amazonaws.com/a/b%20c?x=1");
  EXPECT_EQ(S3RequestUrl(aws, "my-data", "", "list-type=2", S3Addressing::kAuto),
            "https://my-data.s3.eu-west-1.amazonaws.com/?list-type=2");
  EXPECT_EQ(S3RequestUrl("http://rgw:7480", "b", "k", "", S3Addressing::kAuto),
            "http://rgw:7480/b/k");
  EXPECT_EQ(S3RequestUrl("http://rgw:7480", "b", "", "", S3Addressing::kAuto), "http://rgw:7480/b");
}

// Source 4's URL: RELATIVE_URI is a path on the container agent (ECS), and wins over FULL_URI
// as in the SDKs; FULL_URI alone is taken as it is; neither: the source is not configured.
TEST(ContainerCredentialsTest, RelativeUriIsOnTheAgentAndComesFirst) {
  ScopedEnv env;
  env.Set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", nullptr);
  env.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr);
  EXPECT_EQ(ContainerCredentialsUrl(), "");
  env.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds");
  EXPECT_EQ(ContainerCredentialsUrl(), "http://127.0.0.1:9/creds");
  env.Set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc");
  EXPECT_EQ(ContainerCredentialsUrl(), "http://169.254.170.2/v2/credentials/abc");
  env.Set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "v2/credentials/abc");
  EXPECT_EQ(ContainerCredentialsUrl(), "http://169.254.170.2/v2/credentials/abc");
}

// The allowed hosts of AWS_CONTAINER_CREDENTIALS_FULL_URI are matched on the URL as curl
// parses it: exactly, never as a prefix, never with userinfo in front of another host.
TEST(ContainerCredentialsTest, FullUriHostIsMatchedExactly) {
  for (const char* good :
       {"http://127.0.0.1:9/creds", "http://127.0.0.1/", "http://127.1.2.3:80/x",
        "http://localhost/c", "http://LOCALHOST:8/c", "http://169.254.170.2/v2/credentials",
        "http://169.254.170.23/v1/credentials", "http://[::1]:9/c", "http://[fd00:ec2::23]/c",
        "https://creds.example.com/c", "HTTP://127.0.0.1/"}) {
    std::string use;
    Status s = CheckContainerUrl(good, &use);
    EXPECT_TRUE(s.ok()) << good << ": " << s.ToString();
  }
  // Numeric forms curl reads as 127.0.0.1 are taken as curl reads them, and asked so.
  for (const char* loop :
       {"http://0x7f.1/c", "http://2130706433/c", "http://127.1/c", "http://%31%32%37.0.0.1/c"}) {
    std::string use;
    ASSERT_TRUE(CheckContainerUrl(loop, &use).ok()) << loop;
    EXPECT_EQ(use, "http://127.0.0.1/c") << loop;
  }
  std::string use;
  ASSERT_TRUE(CheckContainerUrl("http://127.0.0.1#@evil.example/", &use).ok());
  EXPECT_EQ(use.rfind("http://127.0.0.1/", 0), 0u) << use;
  for (const char* bad : {"http://127.evil.example:1/",
                          "http://127.0.0.1@other.example/",
                          "http://localhost:1@other.example/",
                          "http://169.254.170.2:@other.example/",
                          "http://169.254.170.2.evil.example/",
                          "http://localhost.evil.example/",
                          "http://localhost./",
                          "http://127.0.0.1%2eevil.example/",
                          "http://127.0.0.1\\@evil/",
                          "https://user:pw@creds.example.com/",
                          "http://@127.0.0.1/",
                          "http://[::1]@evil/",
                          "http://[fd00:ec2::24]/",
                          "http://192.0.2.1/creds",
                          "http://169.254.169.254/",
                          "ftp://127.0.0.1/",
                          "file:///etc/passwd",
                          "http://[::1%25lo]/",
                          "127.0.0.1/creds",
                          "http://[::ffff:192.0.2.1]/",
                          "http://[::ffff:127.0.0.1]/",
                          "http://localhost%2e/",
                          "http://%6cocalhost.evil.example/",
                          "http://127.0.0.1./",
                          "http://LOCALHOST./",
                          "http://169.254.170.2%40evil.example/",
                          "http://127.0.0.1:80@evil.example/",
                          "http://[::1]%2f@evil.example/",
                          "http://localhost%00.evil.example/",
                          "http://127.0.0.1%0a.evil.example/",
                          "http://xn--localhost-/",
                          "http://*.localhost/",
                          "http://a.localhost/",
                          "http://0.0.0.0/",
                          "http://[::]/",
                          "http://169.254.170.3/",
                          ""}) {
    std::string use;
    Status s = CheckContainerUrl(bad, &use);
    EXPECT_FALSE(s.ok()) << bad << " accepted as " << use;
    EXPECT_NE(s.ToString().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos)
        << s.ToString();
  }
}

// A chain with nothing but what a test sets: no profile files, no real metadata service, STS
// on a port nothing listens on.
class ChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v :
         {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
          "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
          "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
          "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
          "AWS_EC2_METADATA_SERVICE_ENDPOINT"}) {
      env_.Set(v, nullptr);
    }
    env_.Set("AWS_EC2_METADATA_DISABLED", "true");
    env_.Set("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:1");
    env_.Set("AWS_CONFIG_FILE", (dir_ / "none-config").c_str());
    env_.Set("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "none-credentials").c_str());
  }
  // The chain's answer, given within 20 s; a chain still stuck on `fifo` then is released
  // (a writer opens it) and fails the test.
  Status Resolve(const std::string& fifo = "") {
    auto done = std::async(std::launch::async, [] {
      std::unique_ptr<CredentialProvider> p;
      AwsCredentials c;
      return ResolveCredentialChain({}, &p, &c);
    });
    if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready && !fifo.empty()) {
      ADD_FAILURE() << "the chain hangs on " << fifo;
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    return done.get();
  }
  std::string Fifo(const std::string& name) {
    const std::string p = dir_ / name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }

  TempDir dir_;
  ScopedEnv env_;
};

// Every file the chain reads (token files, the config and credentials files) is a regular
// file of bounded size, or an error naming it: a FIFO does not hang the chain, a device or an
// 80 MB token is not read whole (nor sent). A link to a regular file is followed (Kubernetes
// projects its token files as links).
TEST_F(ChainTest, TokenAndConfigFilesAreBoundedRegularFiles) {
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::1:role/r");
  const std::string fifo = Fifo("token-fifo");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", fifo.c_str());
  Status s = Resolve(fifo);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(fifo), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("not a regular file"), std::string::npos) << s.ToString();
  const std::string big = dir_ / "big-token";
  WriteFile(big, std::string(3 << 20, 'e'));
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", big.c_str());
  s = Resolve();
  EXPECT_NE(s.ToString().find(big), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("larger than"), std::string::npos) << s.ToString();
  const std::string zero = dir_ / "zero-link";
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", zero.c_str());
  s = Resolve();
  EXPECT_NE(s.ToString().find("not a regular file"), std::string::npos) << s.ToString();
  // A link to a token that is fine: read, then sent to STS (where nothing listens).
  WriteFile(dir_ / "..data/token", "eyJ-token\n");
  ASSERT_EQ(::symlink("..data/token", (dir_ / "token").c_str()), 0);
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", (dir_ / "token").c_str());
  s = Resolve();
  EXPECT_NE(s.ToString().find("127.0.0.1:1"), std::string::npos) << s.ToString();
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", nullptr);
  env_.Set("AWS_ROLE_ARN", nullptr);

  // The container source's authorization token file.
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/creds");
  const std::string fifo2 = Fifo("auth-fifo");
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", fifo2.c_str());
  s = Resolve(fifo2);
  EXPECT_NE(s.ToString().find(fifo2), std::string::npos) << s.ToString();
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", big.c_str());
  s = Resolve();
  EXPECT_NE(s.ToString().find("larger than"), std::string::npos) << s.ToString();
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", nullptr);
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr);

  // The config and credentials files.
  for (const char* var : {"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
    const std::string f = Fifo(std::string(var) + "-fifo");
    env_.Set(var, f.c_str());
    s = Resolve(f);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find(f), std::string::npos) << s.ToString();
    env_.Set(var, big.c_str());
    s = Resolve();
    EXPECT_NE(s.ToString().find("larger than"), std::string::npos) << s.ToString();
    env_.Set(var, (dir_ / "none").c_str());
  }
}

// A profile's credential_source = EcsContainer asks the container endpoint under the same
// host rule as the container source itself.
TEST_F(ChainTest, EcsContainerCredentialSourceChecksTheHostToo) {
  WriteFile(dir_ / "config",
            "[profile ecs]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = EcsContainer\n");
  env_.Set("AWS_CONFIG_FILE", (dir_ / "config").c_str());
  env_.Set("AWS_PROFILE", "ecs");
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1@other.example/creds");
  Status s = Resolve();
  EXPECT_NE(s.ToString().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos)
      << s.ToString();
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", nullptr);
  s = Resolve();
  EXPECT_NE(s.ToString().find("EcsContainer"), std::string::npos) << s.ToString();
}

// credential_process: the deadline covers the whole run, the command's process group is
// killed whole on timeout, the command's background children do not hold a complete answer,
// and it inherits no descriptor of ours.
class CredentialProcessTest : public ::testing::Test {
 protected:
  ~CredentialProcessTest() override {
    for (pid_t pid : pids_) {
      if (ProcessAlive(pid)) ::kill(pid, SIGKILL);
    }
  }
  // The PID the command wrote to `file`.
  pid_t PidIn(const std::string& file) {
    pid_t pid = static_cast<pid_t>(std::atoi(ReadFile(file).c_str()));
    if (pid > 0) pids_.push_back(pid);
    return pid;
  }
  static constexpr const char* kJson =
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "S"})";
  TempDir dir_;
  std::vector<pid_t> pids_;
};

TEST_F(CredentialProcessTest, StdoutClosedThenSleepingIsCutAtTheDeadline) {
  const std::string pidfile = dir_ / "pid";
  std::string out;
  int st = 0;
  const auto start = std::chrono::steady_clock::now();
  Status s = RunCredentialProcess(
      std::string("echo '") + kJson + "'; exec >&-; echo $$ > " + pidfile + "; exec sleep 30", 1000,
      &out, &st);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("within"), std::string::npos) << s.ToString();
  EXPECT_LT(took, std::chrono::seconds(10));  // not the 30 s of the sleep
  const pid_t pid = PidIn(pidfile);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(pid); }, std::chrono::seconds(5)));
}

TEST_F(CredentialProcessTest, TimeoutKillsTheWholeProcessGroup) {
  const std::string pidfile = dir_ / "pid";
  std::string out;
  int st = 0;
  Status s =
      RunCredentialProcess("sleep 30 & echo $! > " + pidfile + "; sleep 30", 1000, &out, &st);
  EXPECT_FALSE(s.ok());
  const pid_t child = PidIn(pidfile);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(child); }, std::chrono::seconds(5)))
      << "the command's child " << child << " outlived the timeout";
}

TEST_F(CredentialProcessTest, ABackgroundChildHoldingStdoutDoesNotHoldTheAnswer) {
  const std::string pidfile = dir_ / "pid";
  std::string out;
  int st = 0;
  Status s = RunCredentialProcess(
      std::string("sleep 30 & echo $! > ") + pidfile + "; echo '" + kJson + "'", 8000, &out, &st);
  const pid_t child = PidIn(pidfile);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  AwsCredentials c;
  EXPECT_TRUE(ParseCredentialsJson(out, "p", &c).ok()) << out;
  // Answered: the background child (of its process group) ends with it, not one per refresh.
  ASSERT_GT(child, 0);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(child); }, std::chrono::seconds(5)))
      << "the command's background child " << child << " outlived its answer";
}

TEST_F(CredentialProcessTest, InheritsNoDescriptorAboveStderr) {
  const int fd = ::open("/dev/null", O_RDONLY);  // without O_CLOEXEC, as a library might
  ASSERT_GT(fd, 2);
  std::string out;
  int st = 0;
  Status s = RunCredentialProcess("ls /proc/self/fd", 5000, &out, &st);
  ::close(fd);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // ls's own: 0, 1, 2 and the directory it lists.
  std::istringstream in(out);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  EXPECT_LE(n, 4) << out;
}

}  // namespace
}  // namespace dsfs::testing
