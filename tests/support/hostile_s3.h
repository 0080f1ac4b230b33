// A hostile S3 server for the fault tests (tests/support/hostile_s3.py): objects in memory, no
// signature check, and a mode (HostileS3::SetMode) that makes matching requests misbehave.
// Started by the test on 127.0.0.1, stopped (by its PID) when the object goes; it also exits
// by itself when the test process is gone.
#pragma once

#include <string>

#include "tests/support/script_server.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {

class HostileS3 {
 public:
  // Starts the server and points this process's AWS_* variables (and so every dsfs it runs)
  // at it, with a short retry budget (DSFS_S3_ATTEMPTS=2, DSFS_S3_TIMEOUT_S=2); the old values
  // come back on destruction. ok() is false, with error() saying why, if it did not start.
  HostileS3() : HostileS3(0) {}
  // With `relay_port`, a hostile TCP relay to a real gateway at 127.0.0.1:relay_port instead:
  // only AWS_ENDPOINT_URL changes (the keys stay the gateway's). SetMode's drip, stall and
  // reset then apply to the gateway's answers.
  explicit HostileS3(int relay_port);

  bool ok() const { return server_.ok(); }
  const std::string& error() const { return server_.error(); }
  const std::string& endpoint() const { return server_.endpoint(); }
  // A new bucket (created on the server).
  std::string NewBucket();
  // Packs `src` into an LMDB store at `store` and pushes it to PREFIX s of a new bucket; the
  // store's URL in *url. A fatal failure if either fails (call with ASSERT_NO_FATAL_FAILURE).
  void PackAndPush(const std::string& src, const std::string& store, std::string* url);
  // The mode of every later request (see tests/support/hostile_s3.py): "normal", "drip 2 /data/",
  // "endless /data/", "oversize", "error 500 TEXT", "stall", "reset".
  void SetMode(const std::string& mode);
  // How many requests misbehaved so far.
  int HostileRequests() const;

 private:
  ScopedEnv env_;  // declared first: the server stops before the variables come back
  ScriptServer server_;
};

}  // namespace dsfs::testing
