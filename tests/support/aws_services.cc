#include "tests/support/aws_services.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

namespace dsfs::testing {

AwsServices::AwsServices(const std::string& tls_cert, const std::string& tls_key) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    error_ = "pipe: " + ErrnoName(errno);
    return;
  }
  const std::string script = std::string(DSFS_SOURCE_DIR) + "/tests/support/aws_services.py";
  const std::string parent = std::to_string(::getpid());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    if (tls_cert.empty()) {
      ::execl("/usr/bin/python3", "python3", script.c_str(), state_.path().c_str(),
              parent.c_str(), nullptr);
    } else {
      ::execl("/usr/bin/python3", "python3", script.c_str(), state_.path().c_str(),
              parent.c_str(), "--tls", tls_cert.c_str(), tls_key.c_str(), nullptr);
    }
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
    error_ = "tests/support/aws_services.py did not start (needs /usr/bin/python3)";
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return;
  }
  endpoint_ = line.substr(9);
}

AwsServices::~AwsServices() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

int AwsServices::port() const { return std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)); }

void AwsServices::Set(const std::string& name, const std::string& text) {
  WriteFile(state_ / name, text);
}

void AwsServices::Remove(const std::string& name) { std::remove((state_ / name).c_str()); }

std::string AwsServices::Read(const std::string& name) const {
  if (::access((state_ / name).c_str(), F_OK) != 0) return "";
  return ReadFile(state_ / name);
}

int AwsServices::Issued(const std::string& source) const {
  std::istringstream in(Read("issued"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.rfind(source + " ", 0) == 0) ++n;
  }
  return n;
}

}  // namespace dsfs::testing
