// The systemd units and what `cmake --install` puts where: systemd-analyze verify on the unit
// configured for this build, the hardening it documents, and an install into a staging
// directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::CommandResult;
using testing::Describe;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

const std::string kBuildDir = DSFS_BUILD_DIR;
const std::string kUnit = kBuildDir + "/systemd/dsfs@.service";
// For a store in S3: the same unit with the network (CMakeLists.txt, configure_dsfs_units).
const std::string kS3Unit = kBuildDir + "/systemd/dsfs-s3@.service";
const std::vector<std::string> kUnits = {kUnit, kS3Unit};

// The unit's settings (KEY=VALUE lines, comments and sections dropped), in order.
std::vector<std::pair<std::string, std::string>> Settings(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::string Get(const std::string& text, const std::string& key) {
  for (const auto& [k, v] : Settings(text)) {
    if (k == key) return v;
  }
  return "";
}

bool HaveSystemdAnalyze() {
  return RunCommand({"systemd-analyze", "--version"}, 30).exit_code == 0;
}

TEST(SystemdUnitTest, VerifyReportsNothing) {
  if (!HaveSystemdAnalyze()) {
    GTEST_SKIP() << "SKIPPED: systemd-analyze is not installed (scripts/setup.sh installs systemd)";
  }
  // A template is verified through an instance; the instance name is an escaped mountpoint.
  TempDir dir;
  std::filesystem::copy_file(kUnit, dir / "dsfs@.service");
  std::filesystem::copy_file(kS3Unit, dir / "dsfs-s3@.service");
  for (const std::string unit : {"dsfs@.service", "dsfs@mnt-imagenet.service", "dsfs-s3@.service",
                                 "dsfs-s3@mnt-imagenet.service"}) {
    SCOPED_TRACE(unit);
    CommandResult r = RunCommand({"systemd-analyze", "verify", "--man=no", dir / unit}, 60);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    // Unknown keys and bad values are only warnings for systemd: none may be printed.
    EXPECT_EQ(r.out + r.err, "") << Describe(r);
  }
}

// The one difference of the two units: a local store's has no network at all; a store in S3
// starts once the network is up and may reach it.
TEST(SystemdUnitTest, OnlyTheS3UnitReachesTheNetwork) {
  const std::string local = ReadFile(kUnit), s3 = ReadFile(kS3Unit);
  EXPECT_EQ(Get(local, "After"), "local-fs.target");
  EXPECT_EQ(Get(local, "Wants"), "");
  EXPECT_EQ(Get(local, "RestrictAddressFamilies"), "AF_UNIX");
  EXPECT_EQ(Get(local, "IPAddressDeny"), "any");
  EXPECT_EQ(Get(s3, "After"), "network-online.target local-fs.target");
  EXPECT_EQ(Get(s3, "Wants"), "network-online.target");
  EXPECT_EQ(Get(s3, "RestrictAddressFamilies"), "AF_UNIX AF_INET AF_INET6");
  EXPECT_EQ(Get(s3, "IPAddressDeny"), "");
  // Everything else is the same, line for line.
  auto rest = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& kv : Settings(text)) {
      if (kv.first != "After" && kv.first != "Wants" && kv.first != "RestrictAddressFamilies" &&
          kv.first != "IPAddressDeny") {
        out.push_back(kv);
      }
    }
    return out;
  };
  EXPECT_EQ(rest(local), rest(s3));
  EXPECT_NE(local.find("dsfs-s3@.service"), std::string::npos) << "the local unit names the other";
}

// transport=uring needs io_uring_setup, _enter and _register: the unit's SystemCallFilter must
// allow them (they are in @aio, which @system-service holds), or the transport would fall back.
TEST(SystemdUnitTest, TheSystemCallFilterAllowsIoUring) {
  if (!HaveSystemdAnalyze()) {
    GTEST_SKIP() << "SKIPPED: systemd-analyze is not installed (scripts/setup.sh installs systemd)";
  }
  for (const std::string& path : kUnits) {
    SCOPED_TRACE(path);
    std::string allowed;
    std::istringstream given(Get(ReadFile(path), "SystemCallFilter"));
    std::vector<std::string> groups;
    for (std::string g; given >> g;) groups.push_back(g);
    // A group lists the groups it holds ("    @aio"): those are expanded too.
    for (size_t i = 0; i < groups.size() && i < 64; ++i) {
      CommandResult r =
          RunCommand({"systemd-analyze", "syscall-filter", "--no-pager", groups[i]}, 60);
      ASSERT_EQ(r.exit_code, 0) << Describe(r);
      allowed += r.out;
      std::istringstream lines(r.out);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("    @", 0) == 0) groups.push_back(line.substr(4));
      }
    }
    for (const char* call :
         {"io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "umount2", "ioctl"}) {
      EXPECT_NE(allowed.find(std::string("    ") + call + "\n"), std::string::npos) << call;
    }
  }
}

TEST(SystemdUnitTest, NotifyServiceThatUnmountsAndRestarts) {
  for (const std::string& path : kUnits) {
    SCOPED_TRACE(path);
    std::string unit = ReadFile(path);
    EXPECT_EQ(Get(unit, "Type"), "notify");
    EXPECT_EQ(Get(unit, "NotifyAccess"), "main");
    EXPECT_EQ(Get(unit, "Restart"), "on-failure");
    EXPECT_EQ(Get(unit, "EnvironmentFile"), "/etc/dsfs/%i.conf");
    // The daemon must be the main process (it sends READY=1): the foreground mode.
    std::string start = Get(unit, "ExecStart");
    EXPECT_EQ(start, kBuildDir + "/dsfs mount --foreground ${STORE} %f -o ro,${OPTIONS}");
    EXPECT_EQ(Get(unit, "ExecStop"), "-" + kBuildDir + "/dsfs umount %f");
    EXPECT_NE(Get(unit, "ExecStopPost").find("umount --lazy"), std::string::npos);
    EXPECT_EQ(Get(unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
  }
}

// A FUSE mount made inside a private mount namespace is invisible outside it: no directive
// that creates one may be set. The ones that are set must leave /dev/fuse and mount(2).
TEST(SystemdUnitTest, HardeningKeepsTheHostMountNamespace) {
  for (const std::string& path : kUnits) {
    SCOPED_TRACE(path);
    std::string unit = ReadFile(path);
    for (const char* key : {"ProtectSystem",
                            "ProtectHome",
                            "PrivateTmp",
                            "PrivateDevices",
                            "PrivateMounts",
                            "ProtectKernelTunables",
                            "ProtectKernelModules",
                            "ProtectKernelLogs",
                            "ProtectControlGroups",
                            "ProtectProc",
                            "ProcSubset",
                            "ReadOnlyPaths",
                            "InaccessiblePaths",
                            "ReadWritePaths",
                            "TemporaryFileSystem",
                            "BindPaths",
                            "BindReadOnlyPaths",
                            "MountFlags",
                            "RootDirectory",
                            "RootImage",
                            "PrivateUsers",
                            "DynamicUser",
                            "User"}) {
      EXPECT_EQ(Get(unit, key), "") << key << " would hide the mount from the host (or drop root)";
    }
    EXPECT_EQ(Get(unit, "NoNewPrivileges"), "yes");
    EXPECT_EQ(Get(unit, "DeviceAllow"), "/dev/fuse rw");
    EXPECT_EQ(Get(unit, "DevicePolicy"), "closed");
    std::string caps = Get(unit, "CapabilityBoundingSet");
    EXPECT_NE(caps.find("CAP_SYS_ADMIN"), std::string::npos) << caps;
    std::string calls = Get(unit, "SystemCallFilter");
    EXPECT_NE(calls.find("@mount"), std::string::npos) << calls;
    EXPECT_NE(calls.find("@system-service"), std::string::npos) << calls;
    // Every directive is explained where it is set.
    EXPECT_NE(unit.find("# Hardening."), std::string::npos);
  }
}

// -o kernel attaches a loop device and mounts EROFS on it: the device policy must allow both.
TEST(SystemdUnitTest, LoopDevicesAllowedForKernelMounts) {
  for (const std::string& path : kUnits) {
    std::string unit = ReadFile(path);
    EXPECT_NE(unit.find("\nDeviceAllow=/dev/loop-control rw\n"), std::string::npos) << path;
    EXPECT_NE(unit.find("\nDeviceAllow=block-loop rw\n"), std::string::npos) << path;
  }
}

// `cmake --install` into a staging directory: the binary, the mount helper link (mount(8)
// finds helpers in /sbin), the unit with the installed binary's path, the example config,
// the man pages.
TEST(InstallTest, InstallsBinaryHelperUnitsAndExample) {
  TempDir dest;
  CommandResult r = RunCommand({"env", "DESTDIR=" + dest.path(), CMAKE_COMMAND, "--install",
                                kBuildDir, "--prefix", "/opt/dsfs-test"},
                               300);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string root = dest.path();
  struct stat st;
  ASSERT_EQ(::stat((root + "/opt/dsfs-test/bin/dsfs").c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);
  std::string helper = root + "/sbin/mount.fuse.dsfs";
  ASSERT_TRUE(std::filesystem::is_symlink(helper)) << helper;
  EXPECT_EQ(std::filesystem::read_symlink(helper).string(), "/opt/dsfs-test/bin/dsfs");
  for (const char* name : {"dsfs@.service", "dsfs-s3@.service"}) {
    std::string unit_path = root + "/opt/dsfs-test/lib/systemd/system/" + name;
    ASSERT_TRUE(std::filesystem::exists(unit_path)) << r.out;
    std::string unit = ReadFile(unit_path);
    EXPECT_EQ(Get(unit, "ExecStart"),
              "/opt/dsfs-test/bin/dsfs mount --foreground ${STORE} %f -o ro,${OPTIONS}");
    EXPECT_EQ(unit.find(kBuildDir), std::string::npos) << "the build directory leaked into it";
  }
  EXPECT_TRUE(
      std::filesystem::exists(root + "/opt/dsfs-test/share/bash-completion/completions/dsfs"))
      << r.out;
  EXPECT_TRUE(std::filesystem::exists(root + "/opt/dsfs-test/share/doc/dsfs/copyright")) << r.out;
  EXPECT_TRUE(std::filesystem::exists(root + "/opt/dsfs-test/share/doc/dsfs/dsfs.conf.example"))
      << r.out;
  // The man pages, where pandoc built them (tests/checks/man_test.py checks what they say).
  if (std::filesystem::exists(std::string(kBuildDir) + "/man/dsfs.1")) {
    EXPECT_TRUE(std::filesystem::exists(root + "/opt/dsfs-test/share/man/man1/dsfs.1.gz")) << r.out;
    EXPECT_TRUE(
        std::filesystem::exists(root + "/opt/dsfs-test/share/man/man8/mount.fuse.dsfs.8.gz"))
        << r.out;
  }
}

}  // namespace
}  // namespace dsfs
