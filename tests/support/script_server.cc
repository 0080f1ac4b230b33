#include "tests/support/script_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dsfs::testing {

ScriptServer::ScriptServer(const std::string& script, const std::vector<std::string>& args) {
  const std::string path = std::string(DSFS_SOURCE_DIR) + "/tests/support/" + script;
  std::vector<std::string> argv = {"python3", path, state_.path(), std::to_string(::getpid())};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    error_ = "pipe: " + ErrnoName(errno);
    return;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::execv("/usr/bin/python3", c_argv.data());
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
  const std::string kPrefix = "endpoint=";
  if (line.rfind(kPrefix, 0) != 0) {
    error_ = "tests/support/" + script + " did not start (needs /usr/bin/python3)";
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return;
  }
  endpoint_ = line.substr(kPrefix.size());
}

ScriptServer::~ScriptServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

}  // namespace dsfs::testing
