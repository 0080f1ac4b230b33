// Where -o kernel cannot be served by EROFS, dsfs mounts with FUSE and says why in one log
// line (kernel/kernel_mount.h). Tested for real without touching the host: `dsfs mount -f -o
// kernel=loop` runs inside a private mount namespace (unshare -m) whose /dev is a fresh tmpfs
// holding only fuse and null, so there are no loop devices there. Everything the namespace
// mounts goes away with its last process; the host's /dev is never changed.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/support/kernel_mount_util.h"

namespace dsfs::testing {
namespace {

// The kernel mount fixture (tests/support/kernel_mount_util.h), a suite of its own per file.
class KernelFallbackTest : public KernelMountTest {};

// The device numbers of `dev` as mknod(1) takes them ("c MAJOR MINOR"), or "".
std::string CharDevice(const std::string& dev) {
  struct stat st;
  if (::stat(dev.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return "";
  return "c " + std::to_string(major(st.st_rdev)) + " " + std::to_string(minor(st.st_rdev));
}

TEST_F(KernelFallbackTest, WithoutLoopDevicesKernelLoopFallsBackToFuseSayingWhyOnce) {
  Put(src_ + "/a.txt", "a\n");
  Put(src_ + "/sub/b.bin", RandomBytes(300000, 3));
  Pack();
  if (RunCommand({"unshare", "--version"}, 30).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED: unshare(1) not available";
  }
  const std::string fuse = CharDevice("/dev/fuse"), null = CharDevice("/dev/null");
  ASSERT_FALSE(fuse.empty() || null.empty());
  const std::string log = dir_ / "mount.log";
  // In the namespace: /dev without loop devices; the mount in the foreground, logging to
  // `log`; once it answers, its type and tree; then dsfs umount and the daemon's exit. The
  // script ends its daemon whatever happens (and the namespace then ends with it).
  const std::string mknods =
      "mknod -m 0666 /dev/fuse " + fuse + " && mknod -m 0666 /dev/null " + null + " || exit 91\n";
  const std::string script =
      "set -u\n"
      "mount -t tmpfs -o mode=0755,size=1m dsfs-test-dev /dev || exit 90\n" +
      mknods +
      "[ ! -e /dev/loop-control ] || exit 92\n"
      "\"$0\" mount -f -o kernel=loop,log_level=info \"$1\" \"$2\" >\"$3\" 2>&1 &\n"
      "pid=$!\n"
      "i=0; while [ $i -lt 300 ] && [ -z \"$(findmnt -n -o FSTYPE --mountpoint \"$2\")\" ]; do\n"
      "  kill -0 $pid 2>/dev/null || break; sleep 0.05; i=$((i+1)); done\n"
      "echo \"fstype=$(findmnt -n -o FSTYPE --mountpoint \"$2\")\"\n"
      "diff -r \"$4\" \"$2\" >/dev/null 2>&1 && echo tree=same || echo tree=differs\n"
      "\"$0\" umount \"$2\" && echo umount=ok\n"
      "i=0; while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; i=$((i+1)); done\n"
      "kill -9 $pid 2>/dev/null && echo daemon=killed\n"
      "wait $pid; echo daemon_exit=$?\n";
  CommandResult r = RunCommand({"unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                DsfsBinary(), store_, mp_, log, src_},
                               120);
  const std::string out = ReadFile(log);
  ASSERT_EQ(r.exit_code, 0) << Describe(r) << "\n--- log ---\n" << out;
  EXPECT_NE(r.out.find("fstype=fuse.dsfs\n"), std::string::npos) << Describe(r) << out;
  EXPECT_NE(r.out.find("tree=same\n"), std::string::npos) << Describe(r);
  EXPECT_NE(r.out.find("umount=ok\n"), std::string::npos) << Describe(r);
  EXPECT_NE(r.out.find("daemon_exit=0\n"), std::string::npos) << Describe(r);
  EXPECT_EQ(r.out.find("daemon=killed"), std::string::npos) << Describe(r);
  // Exactly one line says why, and names what is missing.
  std::vector<std::string> why = LinesWith(out, "mounting with FUSE");
  ASSERT_EQ(why.size(), 1u) << out;
  EXPECT_NE(why[0].find("/dev/loop-control"), std::string::npos) << why[0];
  EXPECT_EQ(LinesWith(out, "loop-control").size(), 1u) << out;
  // Nothing of it reached the host's mount table.
  EXPECT_EQ(FsType(mp_), "");
  EXPECT_TRUE(LayersGone(mp_, PrivatePrefixOf(mp_)));
}

}  // namespace
}  // namespace dsfs::testing
