// A cgroup v1 memory cgroup that a test makes, runs commands in and removes (the real-cgroup
// tests of tests/unit/memory_limit_test.cc and tests/mount/mount_memory_limit_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace dsfs::testing {

// The v1 memory controller's mountpoint, from /proc/self/mountinfo ("" if none, as on a
// cgroup v2 only machine).
inline std::string V1MemoryMount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, dev, root, mp, f, type, source, super;
    ls >> id >> parent >> dev >> root >> mp;
    while (ls >> f && f != "-") {
    }
    if (ls >> type >> source >> super && type == "cgroup" &&
        ("," + super + ",").find(",memory,") != std::string::npos && root == "/") {
      return mp;
    }
  }
  return "";
}

// A memory cgroup `mount`/dsfs-test-PID-NAME made for the test. On destruction the processes
// still in it move back to the controller's root and it is removed, whatever happened; so
// destroy whatever runs in it (a MountGuard) first: declare the TestCgroup before it.
class TestCgroup {
 public:
  TestCgroup(const std::string& mount, const std::string& name) : mount_(mount) {
    path_ = mount + "/dsfs-test-" + std::to_string(::getpid()) + "-" + name;
    made_ = ::mkdir(path_.c_str(), 0755) == 0;
    if (!made_) error_ = "mkdir " + path_ + ": " + std::strerror(errno);
  }
  ~TestCgroup() {
    if (!made_) return;
    // A process that has just exited may still be listed for a moment: moved again, and the
    // removal retried, until it is gone.
    bool removed = WaitUntil(
        [&] {
          std::ifstream procs(path_ + "/cgroup.procs");
          std::string pid;
          while (procs >> pid) std::ofstream(mount_ + "/cgroup.procs") << pid << std::endl;
          return ::rmdir(path_.c_str()) == 0 || errno == ENOENT;
        },
        std::chrono::seconds(10));
    if (!removed) ADD_FAILURE() << "cannot remove " << path_ << ": " << std::strerror(errno);
  }
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;

  bool made() const { return made_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }
  bool SetLimit(uint64_t bytes) {
    std::ofstream f(path_ + "/memory.limit_in_bytes");
    f << bytes << std::endl;
    return static_cast<bool>(f);
  }
  // The OOM kills in the cgroup so far (memory.oom_control's oom_kill; 0 if unreadable).
  uint64_t OomKills() const {
    std::ifstream f(path_ + "/memory.oom_control");
    std::string key;
    uint64_t v;
    while (f >> key >> v) {
      if (key == "oom_kill") return v;
    }
    return 0;
  }
  // argv run by a shell that first moves itself into the cgroup (no argument may hold a ').
  std::vector<std::string> Inside(const std::vector<std::string>& argv) const {
    std::string cmd = "echo $$ > '" + path_ + "/cgroup.procs' && exec";
    for (const std::string& a : argv) cmd += " '" + a + "'";
    return {"sh", "-c", cmd};
  }

 private:
  std::string mount_, path_, error_;
  bool made_ = false;
};

}  // namespace dsfs::testing
