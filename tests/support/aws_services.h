// AWS's credential services and an S3 that checks SigV4 signatures (tests/support/aws_services.py)
// on 127.0.0.1, for the credential chain's tests. Started by the test, stopped (by its PID) when
// the object goes; it also exits by itself when the test process is gone. It changes no
// environment variable: the tests point the chain at endpoint() themselves.
#pragma once

#include <string>

#include "tests/support/script_server.h"

namespace dsfs::testing {

class AwsServices {
 public:
  // With `tls_cert`/`tls_key` (PEM files), it speaks https.
  explicit AwsServices(const std::string& tls_cert = "", const std::string& tls_key = "");

  bool ok() const { return server_.ok(); }
  const std::string& error() const { return server_.error(); }
  // "http(s)://127.0.0.1:PORT"
  const std::string& endpoint() const { return server_.endpoint(); }
  int port() const;
  // A file of the server's state (STATE/NAME: lifetime, web_token, container_token, sts_fail,
  // revoke_early; issued, secrets and s3 are written by the server).
  void Set(const std::string& name, const std::string& text);
  void Remove(const std::string& name);
  std::string Read(const std::string& name) const;
  // Lines of STATE/issued whose source (first word) is `source`.
  int Issued(const std::string& source) const;

 private:
  ScriptServer server_;
};

}  // namespace dsfs::testing
