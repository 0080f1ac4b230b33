#include "tests/support/hostile_s3.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "s3/credentials.h"
#include "s3/client.h"

namespace dsfs::testing {

HostileS3::HostileS3(int relay_port) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    error_ = "pipe: " + ErrnoName(errno);
    return;
  }
  const std::string script = std::string(DSFS_SOURCE_DIR) + "/tests/support/hostile_s3.py";
  const std::string parent = std::to_string(::getpid());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    const std::string relay = std::to_string(relay_port);
    ::execl("/usr/bin/python3", "python3", script.c_str(), state_.path().c_str(), parent.c_str(),
            relay_port > 0 ? relay.c_str() : nullptr, nullptr);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    error_ = "fork: " + ErrnoName(errno);
    return;
  }
  pid_ = pid;
  std::string line;
  char c;
  while (::read(pipe_fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(pipe_fds[0]);
  if (line.rfind("endpoint=", 0) != 0) {
    error_ = "tests/support/hostile_s3.py did not start (needs /usr/bin/python3)";
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return;
  }
  endpoint_ = line.substr(9);
  auto set = [&](const char* name, const char* value) {
    const char* old = std::getenv(name);
    if (old) {
      saved_env_.emplace_back(name, old);
    } else {
      unset_env_.push_back(name);
    }
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  };
  set("AWS_ENDPOINT_URL", endpoint_.c_str());
  set("DSFS_S3_ATTEMPTS", "2");
  set("DSFS_S3_TIMEOUT_S", "2");
  if (relay_port > 0) return;
  set("AWS_ACCESS_KEY_ID", "hostile-key");
  set("AWS_SECRET_ACCESS_KEY", "hostile-secret");
  set("AWS_SESSION_TOKEN", nullptr);
  set("AWS_PROFILE", nullptr);
}

HostileS3::~HostileS3() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  for (const auto& [name, value] : saved_env_) ::setenv(name.c_str(), value.c_str(), 1);
  for (const auto& name : unset_env_) ::unsetenv(name.c_str());
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
  WriteFile(state_ / "mode.tmp", mode + "\n");
  ::rename((state_ / "mode.tmp").c_str(), (state_ / "mode").c_str());
}

int HostileS3::HostileRequests() const {
  std::ifstream in(state_ / "requests");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace dsfs::testing
