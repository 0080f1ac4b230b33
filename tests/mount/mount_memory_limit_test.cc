// A mount inside a memory cgroup (v1, made and removed by the test): its default budgets come
// from the cgroup's limit, its stats say so, and an explicit cache_size the limit does not
// allow is one warning line, and honoured.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cgroup_util.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

constexpr uint64_t kLimit = 256ull << 20;

// `dsfs mount STORE MP EXTRA...` (with the transport and mount kind under test) run inside
// `cg`; the daemon it leaves is adopted by `guard`.
CommandResult MountInside(const TestCgroup& cg, MountGuard* guard, const std::string& store,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"mount", store, guard->mountpoint()};
  args.insert(args.end(), extra.begin(), extra.end());
  AddTestTransport(&args);
  AddTestMount(&args);
  args.insert(args.begin(), DsfsBinary());
  CommandResult r = RunCommand(cg.Inside(args), 60);
  guard->Adopt();
  return r;
}

bool InCgroup(const TestCgroup& cg, pid_t pid) {
  std::ifstream procs(cg.path() + "/cgroup.procs");
  pid_t p;
  while (procs >> p) {
    if (p == pid) return true;
  }
  return false;
}

#define SKIP_UNLESS_V1_MEMORY_CGROUP(mount)                                         \
  do {                                                                              \
    if ((mount).empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller"; \
  } while (0)

TEST(MountMemoryLimitTest, DefaultBudgetsComeFromTheCgroupLimit) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string mount = V1MemoryMount();
  SKIP_UNLESS_V1_MEMORY_CGROUP(mount);
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  TestCgroup cg(mount, "defaults");
  ASSERT_TRUE(cg.made()) << cg.error();
  ASSERT_TRUE(cg.SetLimit(kLimit));
  {
    MountGuard guard(s.mp);
    CommandResult r = MountInside(cg, &guard, s.store);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(r.err, "");
    ASSERT_FALSE(guard.daemons().empty());
    EXPECT_TRUE(InCgroup(cg, guard.daemons().front())) << cg.path();
    EXPECT_EQ(ReadFile(s.mp + "/a.txt"), "small store\n");

    const std::string source = "cgroup v1 " + cg.path() + "/memory.limit_in_bytes";
    r = Dsfs({"stats", "--json", s.mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.out.find("\"memory_limit\": {\"bytes\": " + std::to_string(kLimit) +
                         ", \"source\": \"" + source + "\"}"),
              std::string::npos)
        << r.out;
    // The RAM cache's default: an eighth of the limit (not of this machine's RAM).
    EXPECT_NE(r.out.find("\"capacity_bytes\": " + std::to_string(kLimit / 8) + ","),
              std::string::npos)
        << r.out;
    r = Dsfs({"stats", s.mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(LinesWith(r.out, "memory_limit").size(), 1u) << r.out;
    EXPECT_EQ(LinesWith(r.out, "268.4 MB (" + source + ")").size(), 1u) << r.out;
  }
}

TEST(MountMemoryLimitTest, ACacheSizeTheLimitDoesNotAllowIsOneWarningAndHonoured) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string mount = V1MemoryMount();
  SKIP_UNLESS_V1_MEMORY_CGROUP(mount);
  SmallStore s;
  ASSERT_EQ(s.pack.exit_code, 0) << Describe(s.pack);
  TestCgroup cg(mount, "explicit");
  ASSERT_TRUE(cg.made()) << cg.error();
  ASSERT_TRUE(cg.SetLimit(kLimit));
  {
    MountGuard guard(s.mp);
    constexpr uint64_t kCache = 200ull << 20;  // more than half of 256 MiB
    CommandResult r = MountInside(cg, &guard, s.store, {"-o", "cache_size=200M"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(LineCount(r.err), 1) << Describe(r);
    EXPECT_EQ(LinesWith(r.err, "cache_size=209.7 MB is more than half the memory limit").size(), 1u)
        << Describe(r);
    EXPECT_EQ(LinesWith(r.err, cg.path() + "/memory.limit_in_bytes").size(), 1u) << Describe(r);
    r = Dsfs({"stats", "--json", s.mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.out.find("\"capacity_bytes\": " + std::to_string(kCache) + ","), std::string::npos)
        << r.out;
  }
  {
    // Within what the limit allows: no warning.
    MountGuard guard(s.mp);
    CommandResult r = MountInside(cg, &guard, s.store, {"-o", "cache_size=48M"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(r.err, "");
  }
}

}  // namespace
}  // namespace dsfs::testing
