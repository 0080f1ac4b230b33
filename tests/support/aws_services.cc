#include "tests/support/aws_services.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

namespace dsfs::testing {

AwsServices::AwsServices(const std::string& tls_cert, const std::string& tls_key)
    : server_("aws_services.py", tls_cert.empty()
                                     ? std::vector<std::string>{}
                                     : std::vector<std::string>{"--tls", tls_cert, tls_key}) {}

int AwsServices::port() const { return std::stoi(endpoint().substr(endpoint().rfind(':') + 1)); }

void AwsServices::Set(const std::string& name, const std::string& text) {
  WriteFile(server_.state() / name, text);
}

void AwsServices::Remove(const std::string& name) { std::remove((server_.state() / name).c_str()); }

std::string AwsServices::Read(const std::string& name) const {
  if (::access((server_.state() / name).c_str(), F_OK) != 0) return "";
  return ReadFile(server_.state() / name);
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
