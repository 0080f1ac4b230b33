// The S3 layer's parts that need no server: settings from the environment and the profile
// files, s3:// URLs, the retry budget against an endpoint where nothing listens. (What needs a
// real S3 server is tests/s3/s3_test.cc, against Ceph's RADOS Gateway.)
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/kv_open.h"
#include "backend/s3/s3_kv.h"
#include "s3/client.h"
#include "s3/credentials.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

TEST(AwsSettingsTest, EnvironmentFirstThenTheProfileFiles) {
  TempDir dir;
  WriteFile(dir / "credentials",
            "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
            "[ml]\naws_access_key_id=MLKEY\naws_secret_access_key=mlsecret\n"
            "aws_session_token = tok\n");
  WriteFile(dir / "config", "[profile ml]\nregion = eu-west-3\nendpoint_url = http://rgw:7480/\n");
  ScopedEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").c_str());
  env.Set("AWS_CONFIG_FILE", (dir / "config").c_str());
  for (const char* v :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"}) {
    env.Set(v, nullptr);
  }
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  EXPECT_EQ(s.access_key_id, "DEFKEY");
  EXPECT_EQ(s.secret_access_key, "defsecret");
  EXPECT_EQ(s.region, "us-east-1");
  EXPECT_EQ(s.endpoint, "https://s3.us-east-1.amazonaws.com");
  env.Set("AWS_PROFILE", "ml");
  s = {};
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  EXPECT_EQ(s.access_key_id, "MLKEY");
  EXPECT_EQ(s.session_token, "tok");
  EXPECT_EQ(s.region, "eu-west-3");
  EXPECT_EQ(s.endpoint, "http://rgw:7480");
  env.Set("AWS_ACCESS_KEY_ID", "ENVKEY");
  env.Set("AWS_SECRET_ACCESS_KEY", "envsecret");
  env.Set("AWS_REGION", "ap-south-1");
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:9000");
  s = {};
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  EXPECT_EQ(s.access_key_id, "ENVKEY");
  EXPECT_EQ(s.session_token, "");
  EXPECT_EQ(s.region, "ap-south-1");
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9000");
  // Half a key pair, no keys at all, a bad endpoint: one line that names no secret.
  env.Set("AWS_SECRET_ACCESS_KEY", nullptr);
  Status st = LoadAwsSettings(&s);
  EXPECT_NE(st.message().find("set together"), std::string::npos) << st.ToString();
  env.Set("AWS_ACCESS_KEY_ID", nullptr);
  env.Set("AWS_PROFILE", "nobody");
  st = LoadAwsSettings(&s);
  EXPECT_NE(st.message().find("none found"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("mlsecret"), std::string::npos);
  env.Set("AWS_PROFILE", "ml");
  env.Set("AWS_ENDPOINT_URL", "ftp://x");
  st = LoadAwsSettings(&s);
  EXPECT_NE(st.message().find("not an http"), std::string::npos) << st.ToString();
}

TEST(S3UrlTest, BucketAndPrefix) {
  S3Url u;
  ASSERT_TRUE(ParseS3Url("s3://my-bucket.1/a/b/", &u).ok());
  EXPECT_EQ(u.bucket, "my-bucket.1");
  EXPECT_EQ(u.prefix, "a/b");
  EXPECT_EQ(u.ToString(), "s3://my-bucket.1/a/b");
  ASSERT_TRUE(ParseS3Url("s3://abc", &u).ok());
  EXPECT_EQ(u.prefix, "");
  for (const char* bad :
       {"s3://", "s3://ab", "s3://Upper/x", "s3://a_b/x", "s3://abc/x//y", "/x"}) {
    EXPECT_FALSE(ParseS3Url(bad, &u).ok()) << bad;
  }
}

TEST(S3RetryTest, UnreachableEndpointFailsAfterTheRetryBudget) {
  AwsSettings s;
  s.access_key_id = "k";
  s.secret_access_key = "s";
  s.region = "us-east-1";
  s.endpoint = "http://127.0.0.1:1";  // nothing listens there
  S3Client::RetryPolicy p;
  p.attempts = 3;
  p.first_backoff_ms = 10;
  S3Client c(s, p);
  std::string got;
  Status st = c.Get("bucket", "x", &got);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gave up after 3 tries"), std::string::npos) << st.ToString();
  EXPECT_EQ(c.counters().retries.load(), 2u);
}

// The retry budget as mount options (s3_attempts=, s3_timeout=): they win over the
// environment (DSFS_S3_ATTEMPTS=3 here), which stays the default.
TEST(S3RetryTest, RetryBudgetOptionsOverrideTheEnvironment) {
  ScopedEnv env;
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:1");  // nothing listens there
  env.Set("AWS_ACCESS_KEY_ID", "k");
  env.Set("AWS_SECRET_ACCESS_KEY", "s");
  env.Set("DSFS_S3_ATTEMPTS", "3");
  std::unique_ptr<KvReader> kv;
  KvReaderOptions ko;
  ko.remote_attempts = 2;
  ko.remote_timeout_s = 1;
  Status s = OpenKvReader("s3://bucket/x", ko, &kv);
  EXPECT_NE(s.message().find("gave up after 2 tries"), std::string::npos) << s.ToString();
  s = OpenKvReader("s3://bucket/x", KvReaderOptions{}, &kv);
  EXPECT_NE(s.message().find("gave up after 3 tries"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace dsfs::testing
