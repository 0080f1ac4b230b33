#include "tests/support/hostile_s3.h"

#include <unistd.h>

#include <atomic>
#include <fstream>

#include "s3/client.h"
#include "s3/credentials.h"

namespace dsfs::testing {

HostileS3::HostileS3(int relay_port)
    : server_("hostile_s3.py", relay_port > 0 ? std::vector<std::string>{std::to_string(relay_port)}
                                              : std::vector<std::string>{}) {
  if (!server_.ok()) return;
  env_.Set("AWS_ENDPOINT_URL", endpoint().c_str());
  env_.Set("DSFS_S3_ATTEMPTS", "2");
  env_.Set("DSFS_S3_TIMEOUT_S", "2");
  if (relay_port > 0) return;
  env_.Set("AWS_ACCESS_KEY_ID", "hostile-key");
  env_.Set("AWS_SECRET_ACCESS_KEY", "hostile-secret");
  env_.Set("AWS_SESSION_TOKEN", nullptr);
  env_.Set("AWS_PROFILE", nullptr);
}

std::string HostileS3::NewBucket() {
  static std::atomic<int> n{0};
  std::string b = "h" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  AwsSettings s;
  Status st = LoadAwsSettings(&s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  S3Client client(s, S3Client::RetryPolicy{});
  st = client.CreateBucket(b);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return b;
}

void HostileS3::PackAndPush(const std::string& src, const std::string& store, std::string* url) {
  CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src, store});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  *url = "s3://" + NewBucket() + "/s";
  r = Dsfs({"push", "-q", store, *url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
}

void HostileS3::SetMode(const std::string& mode) {
  WriteFile(server_.state() / "mode.tmp", mode + "\n");
  ::rename((server_.state() / "mode.tmp").c_str(), (server_.state() / "mode").c_str());
}

int HostileS3::HostileRequests() const {
  std::ifstream in(server_.state() / "requests");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace dsfs::testing
