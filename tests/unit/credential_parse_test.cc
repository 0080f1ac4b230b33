// The credential chain's parts that need no server: the INI, STS XML and JSON parsers, ISO
// 8601 times, the refresh rule, the refreshing holder (a fake provider and clock), and the S3
// addressing rule. (The providers against real protocol servers: tests/s3/s3_credentials_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "s3/addressing.h"
#include "s3/credential_holder.h"
#include "s3/credential_parse.h"
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
  EXPECT_FALSE(ParseStsCredentials("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", &c)
                   .ok());
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
  ASSERT_TRUE(
      ParseCredentialsJson(R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "S"})", "p",
                           &c)
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
            *now_ + 40};
    return Status::OK();
  }
  std::string Name() const override { return "fake"; }

 private:
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
  auto holder = CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
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

TEST(CredentialHolderTest, RefreshNowFetchesOnceForManyCallers) {
  std::atomic<int64_t> now{1000};
  std::atomic<bool> fail{false};
  std::atomic<int> fetches{0};
  auto provider = std::make_unique<FakeProvider>(&now, &fail, &fetches);
  AwsCredentials first;
  ASSERT_TRUE(provider->Fetch(&first).ok());
  auto holder = CredentialHolder::Refreshing(std::move(provider), first, [&] { return now.load(); });
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

}  // namespace
}  // namespace dsfs::testing
