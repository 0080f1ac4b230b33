// FindMemoryLimit against fake cgroupfs trees (cgroup v1, v2, hybrid, none, garbage), the
// budgets derived from a limit, and a real cgroup v1 memory cgroup that `dsfs info` runs in.
#include "common/memory_limit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pack/compressor.h"
#include "tests/support/cgroup_util.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::TempDir;
using testing::WriteFile;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kPhysical = 8ull << 30;  // the fake machine's RAM
// What cgroup v1 shows for no limit (LONG_MAX rounded down to a 4 KiB page).
constexpr const char* kV1Unlimited = "9223372036854771712\n";

std::string Bytes(uint64_t n) { return std::to_string(n) + "\n"; }

// One line of /proc/self/mountinfo.
std::string MountLine(int id, const std::string& root, const std::string& mountpoint,
                      const std::string& fstype, const std::string& super) {
  return std::to_string(id) + " 23 0:" + std::to_string(id) + " " + root + " " + mountpoint +
         " rw,relatime - " + fstype + " " + fstype + " " + super + "\n";
}

// This machine's layout (Debian 12 in a v1 container): the controllers under a tmpfs at
// /sys/fs/cgroup, the unified hierarchy (no controllers) at /sys/fs/cgroup/unified.
std::string HybridMountinfo() {
  return MountLine(22, "/", "/", "ext4", "rw") +
         MountLine(31, "/", "/sys/fs/cgroup", "tmpfs", "rw,mode=755") +
         MountLine(32, "/", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu") +
         MountLine(35, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
         MountLine(40, "/", "/sys/fs/cgroup/systemd", "cgroup", "rw,name=systemd") +
         MountLine(41, "/", "/sys/fs/cgroup/unified", "cgroup2", "rw");
}

// A fake root: proc/self/{cgroup,mountinfo} and cgroup files under it.
class FakeRoot {
 public:
  void Put(const std::string& path, const std::string& data) { WriteFile(dir_ / path, data); }
  void Cgroup(const std::string& text) { Put("proc/self/cgroup", text); }
  void Mountinfo(const std::string& text) { Put("proc/self/mountinfo", text); }
  MemoryLimit Find() const { return FindMemoryLimit(dir_.path(), kPhysical); }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
};

// v1: the memory controller's cgroup /a/b under /sys/fs/cgroup/memory.
void V1Tree(FakeRoot* r, const std::string& root_limit, const std::string& a_limit,
            const std::string& b_limit) {
  r->Cgroup("9:name=systemd:/\n4:memory:/a/b\n1:cpu:/\n0::/\n");
  r->Mountinfo(HybridMountinfo());
  r->Put("sys/fs/cgroup/memory/memory.limit_in_bytes", root_limit);
  r->Put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", a_limit);
  r->Put("sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", b_limit);
}

TEST(MemoryLimitTest, V1ParentSmallerThanChild) {
  FakeRoot r;
  V1Tree(&r, kV1Unlimited, Bytes(100 * kMiB), Bytes(200 * kMiB));
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 100 * kMiB);
  EXPECT_EQ(m.source, "cgroup v1 /sys/fs/cgroup/memory/a/memory.limit_in_bytes");
}

TEST(MemoryLimitTest, V1ChildSmallerThanParent) {
  FakeRoot r;
  V1Tree(&r, kV1Unlimited, Bytes(200 * kMiB), Bytes(160 * kMiB));
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 160 * kMiB);
  EXPECT_EQ(m.source, "cgroup v1 /sys/fs/cgroup/memory/a/b/memory.limit_in_bytes");
  EXPECT_EQ(m.ToString(), "167.8 MB (" + m.source + ")");
}

TEST(MemoryLimitTest, V1HierarchicalLimitOfAnAncestorOutOfSight) {
  // A container sees its own cgroup at the mount's root; the kernel's memory.stat still tells
  // the smallest limit above it.
  FakeRoot r;
  r.Cgroup("4:memory:/docker/c1\n");
  r.Mountinfo(MountLine(35, "/docker/c1", "/sys/fs/cgroup/memory", "cgroup", "rw,memory"));
  r.Put("sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);
  r.Put("sys/fs/cgroup/memory/memory.stat",
        "cache 0\nrss 0\nhierarchical_memory_limit 52428800\nhierarchical_memsw_limit 1\n");
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 50 * kMiB);
  EXPECT_EQ(m.source, "cgroup v1 /sys/fs/cgroup/memory/memory.stat hierarchical_memory_limit");
}

TEST(MemoryLimitTest, V1UnlimitedIsPhysicalMemory) {
  FakeRoot r;
  V1Tree(&r, kV1Unlimited, kV1Unlimited, kV1Unlimited);
  r.Put("sys/fs/cgroup/memory/a/b/memory.stat",
        std::string("hierarchical_memory_limit ") + kV1Unlimited);
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, kPhysical);
  EXPECT_EQ(m.source, "physical memory");
}

TEST(MemoryLimitTest, NeverMoreThanPhysicalMemory) {
  FakeRoot r;
  V1Tree(&r, kV1Unlimited, Bytes(16ull << 30), kV1Unlimited);
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, kPhysical);
  EXPECT_EQ(m.source, "physical memory");
}

TEST(MemoryLimitTest, V2NestedWithMaxAndHighSmallerThanMax) {
  FakeRoot r;
  r.Cgroup("0::/job/step\n");
  r.Mountinfo(MountLine(30, "/", "/sys/fs/cgroup", "cgroup2", "rw,nsdelegate"));
  // The root cgroup has no memory.* files.
  r.Put("sys/fs/cgroup/job/memory.max", Bytes(300 * kMiB));
  r.Put("sys/fs/cgroup/job/memory.high", "max\n");
  r.Put("sys/fs/cgroup/job/step/memory.max", Bytes(250 * kMiB));
  r.Put("sys/fs/cgroup/job/step/memory.high", Bytes(200 * kMiB));
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 200 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /sys/fs/cgroup/job/step/memory.high");

  // An ancestor's limit below the child's.
  r.Put("sys/fs/cgroup/job/memory.high", Bytes(120 * kMiB));
  m = r.Find();
  EXPECT_EQ(m.bytes, 120 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /sys/fs/cgroup/job/memory.high");

  // "max" everywhere: no limit.
  for (const char* f :
       {"job/memory.max", "job/memory.high", "job/step/memory.max", "job/step/memory.high"}) {
    r.Put(std::string("sys/fs/cgroup/") + f, "max\n");
  }
  m = r.Find();
  EXPECT_EQ(m.bytes, kPhysical);
  EXPECT_EQ(m.source, "physical memory");
}

TEST(MemoryLimitTest, V2AtTheNamespaceRoot) {
  // In a container with its own cgroup namespace the process's cgroup is "/", and the files at
  // the mount's root are the container's limits.
  FakeRoot r;
  r.Cgroup("0::/\n");
  r.Mountinfo(MountLine(30, "/", "/sys/fs/cgroup", "cgroup2", "rw"));
  r.Put("sys/fs/cgroup/memory.max", Bytes(64 * kMiB));
  r.Put("sys/fs/cgroup/memory.high", "max\n");
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 64 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /sys/fs/cgroup/memory.max");
}

TEST(MemoryLimitTest, V2MountedAtAnUnusualPath) {
  // Wherever mountinfo says; a tmpfs at /sys/fs/cgroup holding look-alike files is no cgroup.
  FakeRoot r;
  r.Cgroup("0::/job\n");
  r.Mountinfo(MountLine(31, "/", "/sys/fs/cgroup", "tmpfs", "rw") +
              MountLine(40, "/", "/run/my\\040cgroups", "cgroup2", "rw"));
  r.Put("sys/fs/cgroup/job/memory.max", Bytes(10 * kMiB));
  r.Put("run/my cgroups/job/memory.max", Bytes(90 * kMiB));
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 90 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /run/my cgroups/job/memory.max");
}

TEST(MemoryLimitTest, V2MountOfASubtree) {
  // The mount shows /kube/pod at its mountpoint: the cgroup /kube/pod/ctr is its ctr, and
  // nothing above the mount's root is read (it is not there to read).
  FakeRoot r;
  r.Cgroup("0::/kube/pod/ctr\n");
  r.Mountinfo(MountLine(30, "/kube/pod", "/sys/fs/cgroup", "cgroup2", "rw"));
  r.Put("sys/fs/cgroup/ctr/memory.max", Bytes(70 * kMiB));
  r.Put("sys/fs/cgroup/memory.max", Bytes(80 * kMiB));
  r.Put("sys/fs/cgroup/kube/pod/ctr/memory.max", Bytes(1 * kMiB));  // a decoy: wrong place
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 70 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /sys/fs/cgroup/ctr/memory.max");
}

TEST(MemoryLimitTest, HybridV1MemoryAndV2Unified) {
  FakeRoot r;
  r.Cgroup("9:name=systemd:/user\n4:memory:/slurm/job7\n1:cpu:/\n0::/user\n");
  r.Mountinfo(HybridMountinfo());
  r.Put("sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);
  r.Put("sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", kV1Unlimited);
  r.Put("sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes", Bytes(150 * kMiB));
  r.Put("sys/fs/cgroup/unified/user/cgroup.procs", "1\n");  // no memory controller there
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, 150 * kMiB);
  EXPECT_EQ(m.source, "cgroup v1 /sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes");

  // Were the unified hierarchy to hold a smaller limit, it applies too.
  r.Put("sys/fs/cgroup/unified/user/memory.max", Bytes(140 * kMiB));
  m = r.Find();
  EXPECT_EQ(m.bytes, 140 * kMiB);
  EXPECT_EQ(m.source, "cgroup v2 /sys/fs/cgroup/unified/user/memory.max");
}

TEST(MemoryLimitTest, NoCgroupIsPhysicalMemory) {
  FakeRoot r;  // no proc/ at all
  MemoryLimit m = r.Find();
  EXPECT_EQ(m.bytes, kPhysical);
  EXPECT_EQ(m.source, "physical memory");

  // A /proc/self/cgroup but no cgroup mounted.
  r.Cgroup("0::/job\n4:memory:/job\n");
  r.Mountinfo(MountLine(22, "/", "/", "ext4", "rw"));
  r.Put("sys/fs/cgroup/job/memory.max", Bytes(kMiB));
  r.Put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", Bytes(kMiB));
  m = r.Find();
  EXPECT_EQ(m.bytes, kPhysical);
  EXPECT_EQ(m.source, "physical memory");
}

TEST(MemoryLimitTest, GarbageFallsBackAndNeverThrows) {
  FakeRoot r;
  r.Cgroup("0::/job\n4:memory:/job\n");
  r.Mountinfo(HybridMountinfo());
  // Nothing here is a number of bytes.
  const std::vector<std::string> bad = {"",           "\n",       "-5\n",
                                        "12abc\n",    "0x100\n",  "1e9\n",
                                        " max max\n", "\xff\xfe", "99999999999999999999999\n",
                                        "MAX\n"};
  for (const std::string& v : bad) {
    r.Put("sys/fs/cgroup/unified/job/memory.max", v);
    r.Put("sys/fs/cgroup/unified/job/memory.high", v);
    r.Put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", v);
    r.Put("sys/fs/cgroup/memory/job/memory.stat", "hierarchical_memory_limit " + v);
    MemoryLimit m;
    EXPECT_NO_THROW(m = r.Find());
    EXPECT_EQ(m.bytes, kPhysical) << testing::Printable(v);
    EXPECT_EQ(m.source, "physical memory") << testing::Printable(v);
  }
  // A directory where a file should be.
  ::unlink((r.path() + "/sys/fs/cgroup/memory/job/memory.limit_in_bytes").c_str());
  testing::MakeDir(r.path() + "/sys/fs/cgroup/memory/job/memory.limit_in_bytes");
  EXPECT_EQ(r.Find().bytes, kPhysical);

  // Random bytes in every file, and odd lines in the lists: never a throw, never a crash, and
  // never more than physical memory.
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    FakeRoot g;
    std::string cgroup = testing::RandomBytes(64 + seed * 7, seed);
    if (seed % 2) cgroup += "\n0::/../x\n4:memory:\n::\n0::" + testing::RandomBytes(9, seed) + "\n";
    g.Cgroup(cgroup);
    std::string mi = seed % 3 ? testing::RandomBytes(300, seed + 100) : HybridMountinfo();
    mi += "1 2 3\n4 5 6 7 8 - \n9 9 9 / /x - cgroup2\n" +
          MountLine(50, "relative", "rel/path", "cgroup2", "rw");
    g.Mountinfo(mi);
    g.Put("sys/fs/cgroup/unified/memory.max", testing::RandomBytes(20, seed + 200));
    g.Put("sys/fs/cgroup/memory/memory.stat", testing::RandomBytes(200, seed + 300));
    MemoryLimit m;
    EXPECT_NO_THROW(m = g.Find());
    EXPECT_LE(m.bytes, kPhysical);
    EXPECT_FALSE(m.source.empty());
  }
}

TEST(MemoryLimitTest, ThisProcess) {
  const MemoryLimit& m = ProcessMemoryLimit();
  EXPECT_GT(m.bytes, 0u);
  EXPECT_LE(m.bytes, PhysicalMemoryBytes());
  EXPECT_FALSE(m.source.empty());
  EXPECT_EQ(&m, &ProcessMemoryLimit());  // found once
}

TEST(MemoryLimitTest, BudgetsAreFractionsOfTheLimit) {
  const uint64_t l = 16ull << 30;
  MemoryBudgets b = BudgetsFor(l);
  EXPECT_EQ(b.cache_bytes, l / 8);
  EXPECT_EQ(b.push_bytes, l / 4);
  EXPECT_EQ(b.metadata_readahead_bytes, l / 8);
  EXPECT_EQ(b.metadata_cache_bytes, l / 32);
  EXPECT_EQ(b.pack_sample_bytes, l / 16);
  EXPECT_EQ(b.pack_held_bytes, 32 * kMiB);
  EXPECT_EQ(b.pack_pipeline_bytes, l / 4);
  // A small limit: the metadata cache's floor of 32 MiB gives way to an eighth.
  b = BudgetsFor(160 * kMiB);
  EXPECT_EQ(b.cache_bytes, 20 * kMiB);
  EXPECT_EQ(b.metadata_cache_bytes, 20 * kMiB);
  EXPECT_EQ(b.pack_held_bytes, 10 * kMiB);
  EXPECT_EQ(BudgetsFor(512 * kMiB).metadata_cache_bytes, 32 * kMiB);
  const MemoryBudgets& d = DefaultBudgets();
  EXPECT_EQ(d.cache_bytes, ProcessMemoryLimit().bytes / 8);
}

TEST(MemoryLimitTest, TheCacheTakesThePlaceOfAPageCacheTooSmallForTheFiles) {
  // The daemon's resident share stays within half the limit: the tight cache, the metadata
  // cache and a 16th. Three eighths where the metadata cache is a 32nd (its 32 MiB cap: at
  // 1 GiB and up), less at small limits (96 MiB: 48 - 12 - 6 = 30 MiB).
  EXPECT_EQ(BudgetsFor(2048 * kMiB).tight_cache_bytes, 768 * kMiB);
  EXPECT_EQ(BudgetsFor(96 * kMiB).tight_cache_bytes, 30 * kMiB);
  for (uint64_t limit : {32 * kMiB, 96 * kMiB, 121 * kMiB, 307 * kMiB, 1024 * kMiB, 8192 * kMiB}) {
    const MemoryBudgets m = BudgetsFor(limit);
    EXPECT_LE(m.tight_cache_bytes + m.metadata_cache_bytes + limit / 16, limit / 2) << limit;
    EXPECT_GE(m.tight_cache_bytes, m.cache_bytes) << limit;
  }
  const uint64_t l = 1024 * kMiB;
  const MemoryBudgets b = BudgetsFor(l);
  EXPECT_EQ(b.tight_cache_bytes, l / 8 * 3);
  // Files the page cache can keep (half the limit or less): an eighth.
  EXPECT_EQ(CacheBytesFor(b, l, l / 2, 400 * kMiB), l / 8);
  EXPECT_EQ(CacheBytesFor(b, l, 10 * kMiB, 12 * kMiB), l / 8);
  // More: as much as holds them all, up to three eighths, never below an eighth.
  EXPECT_EQ(CacheBytesFor(b, l, l / 2 + 1, 400 * kMiB), l / 8 * 3);
  EXPECT_EQ(CacheBytesFor(b, l, 4 * l, 200 * kMiB), 200 * kMiB);
  EXPECT_EQ(CacheBytesFor(b, l, 4 * l, 10 * kMiB), l / 8);
}

TEST(MemoryLimitTest, PackPipelineWithinItsBudget) {
  // Batches of up to 8 MiB raw and as much encoded: 16 MiB each.
  EXPECT_EQ(BatchesInFlight(2, 1ull << 30), 8u);    // 4 per thread at most
  EXPECT_EQ(BatchesInFlight(16, 40 * kMiB), 2u);    // a 160 MiB limit: 2 in flight
  EXPECT_EQ(BatchesInFlight(16, 256 * kMiB), 16u);  // not 64
  EXPECT_EQ(BatchesInFlight(0, 0), 2u);
  EXPECT_GE(SampleBytes(110 << 10), (110u << 10) * 4);
  EXPECT_LE(SampleBytes(16 << 20), 64 * kMiB);
}

TEST(MemoryLimitTest, ExplicitSizeWarning) {
  MemoryLimit l{160 * kMiB, "cgroup v1 /sys/fs/cgroup/memory/x/memory.limit_in_bytes"};
  EXPECT_EQ(ExplicitSizeWarning("cache_size", 48 * kMiB, true, l), "");
  EXPECT_EQ(ExplicitSizeWarning("cache_size", 80 * kMiB, true, l), "");
  std::string w = ExplicitSizeWarning("cache_size", 81 * kMiB, true, l);
  EXPECT_NE(w.find("cache_size=84.9 MB"), std::string::npos) << w;
  EXPECT_NE(w.find(l.source), std::string::npos) << w;
  EXPECT_EQ(w.find('\n'), std::string::npos) << w;
  EXPECT_EQ(ExplicitSizeWarning("push", 160 * kMiB, false, l), "");
  EXPECT_NE(ExplicitSizeWarning("push", 161 * kMiB, false, l), "");
}

// ---------------------------------------------------------------------------------------------
// A real cgroup v1 memory cgroup on this machine.

TEST(MemoryLimitTest, RealV1CgroupSeenByDsfsInfo) {
  const std::string mount = testing::V1MemoryMount();
  if (mount.empty()) GTEST_SKIP() << "no cgroup v1 memory controller mounted here";
  if (::geteuid() != 0) GTEST_SKIP() << "making a memory cgroup needs root";
  TempDir dir;
  WriteFile(dir / "src/a.txt", "a\n");
  testing::CommandResult r = testing::Dsfs({"pack", "-q", dir / "src", dir / "s.dsfs"});
  ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
  {
    testing::TestCgroup cg(mount, "info");
    if (!cg.made()) GTEST_SKIP() << cg.error();
    constexpr uint64_t kLimit = 160 * kMiB;
    ASSERT_TRUE(cg.SetLimit(kLimit));
    const std::string file = cg.path() + "/memory.limit_in_bytes";
    r = testing::RunCommand(cg.Inside({testing::DsfsBinary(), "info", "--json", dir / "s.dsfs"}));
    ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
    EXPECT_NE(r.out.find("\"memory_limit_bytes\": " + std::to_string(kLimit)), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\"memory_limit_source\": \"cgroup v1 " + file + "\""), std::string::npos)
        << r.out;
    r = testing::RunCommand(cg.Inside({testing::DsfsBinary(), "info", dir / "s.dsfs"}));
    ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
    EXPECT_NE(r.out.find("memory limit: 167.8 MB (cgroup v1 " + file +
                         "); a mount's cache 21.0 MB (the files fill 4.1 kB of page cache)\n"),
              std::string::npos)
        << r.out;
    // And outside it, not that limit.
    r = testing::Dsfs({"info", "--json", dir / "s.dsfs"});
    EXPECT_EQ(r.out.find(file), std::string::npos) << r.out;
  }
  // A sanitizer's dsfs does not run in 64 MiB (its shadow memory is charged too); the choice
  // itself is unit-tested above (TheCacheTakesThePlaceOfAPageCacheTooSmallForTheFiles).
  if (testing::kSanitized) {
    GTEST_SKIP() << "SKIPPED: a sanitizer build's dsfs needs more than 64 MiB";
  }
  // 10,000 files of 3,000 bytes fill 41 MB of page cache, more than half a 64 MiB limit: the
  // cache takes their place, up to three eighths of it (all of them would need 34.7 MB).
  for (int i = 0; i < 10000; ++i) {
    WriteFile(dir / ("many/d" + std::to_string(i % 50) + "/f" + std::to_string(i)),
              std::string(3000, static_cast<char>('a' + i % 26)));
  }
  r = testing::Dsfs({"pack", "-q", dir / "many", dir / "many.dsfs"});
  ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
  testing::TestCgroup cg(mount, "info-many");
  if (!cg.made()) GTEST_SKIP() << cg.error();
  ASSERT_TRUE(cg.SetLimit(64 * kMiB));
  r = testing::RunCommand(cg.Inside({testing::DsfsBinary(), "info", dir / "many.dsfs"}));
  ASSERT_EQ(r.exit_code, 0) << testing::Describe(r);
  EXPECT_NE(r.out.find("; a mount's cache 21.0 MB (the files fill 41.0 MB of page cache)\n"),
            std::string::npos)
      << r.out;
  r = testing::RunCommand(cg.Inside({testing::DsfsBinary(), "info", "--json", dir / "many.dsfs"}));
  EXPECT_NE(r.out.find("\"mount_cache_bytes\": " + std::to_string(20 * kMiB)), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace dsfs
