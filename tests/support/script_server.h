// A test server written in Python (tests/support/NAME.py), on 127.0.0.1: started with its state
// directory and this process's PID as its first arguments (it exits by itself when the test
// process is gone), it prints "endpoint=URL" once it listens. Stopped, by its PID, when the
// object goes. tests/support/hostile_s3.h and aws_services.h are built on it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace dsfs::testing {

class ScriptServer {
 public:
  // `script`: a file name under tests/support/; `args` follow the state directory and the PID.
  ScriptServer(const std::string& script, const std::vector<std::string>& args);
  ~ScriptServer();
  ScriptServer(const ScriptServer&) = delete;
  ScriptServer& operator=(const ScriptServer&) = delete;

  // False, with error() saying why, if it did not start.
  bool ok() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  // What the server printed after "endpoint=".
  const std::string& endpoint() const { return endpoint_; }
  // Its state directory: files the test and the server both read and write.
  const TempDir& state() const { return state_; }

 private:
  TempDir state_;
  pid_t pid_ = -1;
  std::string endpoint_, error_;
};

}  // namespace dsfs::testing
