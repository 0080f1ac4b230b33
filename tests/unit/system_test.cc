// common/system.h: small files, process liveness (the one zombie rule), absolute paths.
#include "common/system.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "common/mount_table.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

TEST(SystemTest, SmallFilesAndTheirFirstLine) {
  TempDir dir;
  const std::string p = dir / "f";
  WriteFile(p, "first line\nsecond\n  \n");
  std::string s;
  ASSERT_TRUE(ReadSmallFile(p, &s));
  EXPECT_EQ(s, "first line\nsecond\n  \n");
  ASSERT_TRUE(ReadSmallFile(p, &s, 5));
  EXPECT_EQ(s, "first");
  EXPECT_EQ(ReadSmallFileTrimmed(p), "first line\nsecond");
  ASSERT_TRUE(ReadFirstLine(p, &s));
  EXPECT_EQ(s, "first line");
  // A procfs file, which reports no size.
  ASSERT_TRUE(ReadSmallFile("/proc/self/stat", &s));
  EXPECT_NE(s.find(std::to_string(::getpid()) + " ("), std::string::npos) << s;
  EXPECT_FALSE(ReadSmallFile(dir / "missing", &s));
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(ReadFirstLine(dir / "missing", &s));
  EXPECT_EQ(ReadSmallFileTrimmed(dir / "missing"), "");
}

TEST(SystemTest, AZombieIsNotAlive) {
  EXPECT_TRUE(ProcessAlive(::getpid()));
  EXPECT_TRUE(ProcessAlive(1));  // another user's process (EPERM) would count too
  EXPECT_FALSE(ProcessAlive(0));
  EXPECT_FALSE(ProcessAlive(-1));
  const pid_t child = ::fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  // Exited but not waited for: a zombie, which kill(pid, 0) still finds.
  bool zombie = false;
  for (int i = 0; i < 500 && !zombie; ++i) {
    zombie = ReadSmallFileTrimmed("/proc/" + std::to_string(child) + "/stat").find(") Z") !=
             std::string::npos;
    if (!zombie) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(zombie);
  EXPECT_EQ(::kill(child, 0), 0);
  EXPECT_FALSE(ProcessAlive(child));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(ProcessAlive(child));
}

TEST(SystemTest, AbsolutePathResolvesTheDirectoryNotTheLastComponent) {
  TempDir dir;
  const std::string real = std::filesystem::canonical(dir.path()).string();
  ASSERT_EQ(::mkdir((real + "/d").c_str(), 0755), 0);
  std::filesystem::create_directory_symlink(real + "/d", real + "/link");
  EXPECT_EQ(AbsolutePath(""), "");
  EXPECT_EQ(AbsolutePath("/"), "/");
  // The last component is kept as named (it may be a dead mount): a link stays a link.
  EXPECT_EQ(AbsolutePath(real + "/link"), real + "/link");
  EXPECT_EQ(AbsolutePath(real + "/link/../d/./x"), real + "/d/x");
  // Its directory is resolved: a path through the link names the directory's real path.
  EXPECT_EQ(AbsolutePath(real + "/link/x"), real + "/d/x");
  // A trailing slash names the directory itself, resolved as POSIX resolves it.
  EXPECT_EQ(AbsolutePath(real + "/link/"), real + "/d");
  // Relative paths are taken from the working directory.
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(real);
  EXPECT_EQ(AbsolutePath("d/y"), real + "/d/y");
  std::filesystem::current_path(cwd);
  // A directory that does not exist is kept as written, normalized.
  EXPECT_EQ(AbsolutePath(real + "/none/a/../b"), real + "/none/b");
}

TEST(MountTableTest, UnescapesAndFindsTheTopmostMount) {
  EXPECT_EQ(UnescapeMountinfo("a\\040b\\011c\\012d\\134e"), "a b\tc\nd\\e");
  EXPECT_EQ(UnescapeMountinfo("trailing\\04"), "trailing\\04");  // not an escape
  EXPECT_EQ(UnescapeMountinfo("\\999"), "\\999");
  MountInfo m;
  ASSERT_TRUE(FindMount("/proc", &m));
  EXPECT_EQ(m.fstype, "proc");
  EXPECT_TRUE(IsMountpoint("/proc/"));  // made absolute first
  TempDir dir;
  EXPECT_FALSE(IsMountpoint(dir.path()));
  int lines = 0;
  ForEachMount([&](const std::string& mp, const MountInfo&) {
    EXPECT_EQ(mp.front(), '/');
    ++lines;
  });
  EXPECT_GT(lines, 1);
}

}  // namespace
}  // namespace dsfs::testing
