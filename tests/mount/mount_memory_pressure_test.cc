// Real mounts under memory pressure (issue 29 points 2 and 5): a tree whose decompressed size
// is above the limit of a memory cgroup (v1, made and removed by the test), the daemon started
// in it, and a reader in it that reads every file three times in shuffled order with 2 threads
// and checks each file's bytes: classic and -o kernel, with default options and with the RAM
// cache forced far above the limit (16 GiB: what an eighth of a large host's RAM, the default
// before budgets came from the limit, gives), which the memory guard (fs/memory_guard.h) has to
// hold within it. Every read succeeds, nothing is OOM-killed (memory.oom_control), and the
// daemon's own memory (RssAnon) stays within half the limit.

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cgroup_util.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

constexpr uint64_t kLimit = 96ull << 20;
constexpr int kFiles = 16000;  // 4-12 KB each: ~128 MB decompressed, ~25 MB stored

// Makes the tree and its manifest (path, md5) with Python: argv tree manifest files.
constexpr const char* kMakeTree = R"PY(
import hashlib, os, random, sys
out, manifest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(29)
words = [''.join(rnd.choice('abcdefghijklmnop') for _ in range(rnd.randint(3, 9))) for _ in range(500)]
with open(manifest, 'w') as m:
    for i in range(n):
        rel = f"d{i % 40:02d}/f{i:06d}.txt"
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        size = rnd.randint(4000, 12000)
        data = (f"{i} " + ' '.join(rnd.choice(words) for _ in range(size // 5)))[:size].encode()
        with open(path, 'wb') as f:
            f.write(data)
        m.write(f"{rel} {hashlib.md5(data).hexdigest()}\n")
)PY";

// Reads every file of the manifest under argv[1] three times in shuffled order, 2 threads,
// checking its md5; prints "reads=N failed=F" and the first failures.
constexpr const char* kReader = R"PY(
import hashlib, random, sys, threading
mp, manifest = sys.argv[1], sys.argv[2]
want = dict(line.split() for line in open(manifest))
order = [p for _ in range(3) for p in random.Random(7).sample(sorted(want), len(want))]
lock = threading.Lock()
stats = {"reads": 0, "failed": 0, "errors": []}
def work(part):
    for rel in part:
        ok, err = False, ""
        try:
            with open(mp + "/" + rel, "rb") as f:
                ok = hashlib.md5(f.read()).hexdigest() == want[rel]
            err = "" if ok else "wrong bytes"
        except OSError as e:
            err = str(e)
        with lock:
            stats["reads"] += 1
            if not ok:
                stats["failed"] += 1
                if len(stats["errors"]) < 5:
                    stats["errors"].append(rel + ": " + err)
threads = [threading.Thread(target=work, args=(order[i::2],)) for i in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print(f"reads={stats['reads']} failed={stats['failed']}", *stats["errors"], sep="\n")
sys.exit(1 if stats["failed"] else 0)
)PY";

struct PressureTree {
  PressureTree() {
    src = dir / "src";
    store = dir / "tree.dsfs";
    mp = dir / "mnt";
    manifest = dir / "manifest";
    WriteFile(dir / "make_tree.py", kMakeTree);
    WriteFile(dir / "reader.py", kReader);
    made = RunCommand(
        {"/usr/bin/python3", dir / "make_tree.py", src, manifest, std::to_string(kFiles)}, 120);
    if (made.exit_code == 0) made = Dsfs({"pack", src, store, "-q"}, 300);
    ::mkdir(mp.c_str(), 0755);
  }
  TempDir dir;
  std::string src, store, mp, manifest;
  CommandResult made;
};

// "kernel" or "classic", with extra mount options.
struct Case {
  bool kernel;
  bool forced_cache;  // cache_size=16G
};

class MountMemoryPressureTest : public ::testing::TestWithParam<Case> {
 protected:
  // The tree is made and packed once for all the cases (a few seconds), removed after them.
  static void SetUpTestSuite() { tree_ = new PressureTree(); }
  static void TearDownTestSuite() {
    delete tree_;
    tree_ = nullptr;
  }
  static PressureTree* tree_;
};
PressureTree* MountMemoryPressureTest::tree_ = nullptr;

TEST_P(MountMemoryPressureTest, EveryFileReadThriceInALimitBelowTheTree) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string v1 = V1MemoryMount();
  if (v1.empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller";
  const Case c = GetParam();
  PressureTree* tree = tree_;
  ASSERT_EQ(tree->made.exit_code, 0) << Describe(tree->made);
  TestCgroup cg(v1,
                std::string(c.kernel ? "kernel" : "classic") + (c.forced_cache ? "-forced" : ""));
  ASSERT_TRUE(cg.made()) << cg.error();
  ASSERT_TRUE(cg.SetLimit(kLimit));
  {
    MountGuard guard(tree->mp);
    std::vector<std::string> args = {DsfsBinary(), "mount", tree->store, tree->mp};
    const std::string log = tree->dir / "daemon.log";
    ::unlink(log.c_str());
    args.insert(args.end(), {"-o", "log_file=" + log});
    if (c.kernel) args.insert(args.end(), {"-o", "kernel"});
    if (c.forced_cache) {
      args.insert(args.end(), {"-o", "cache_size=16G"});
    }
    AddTestTransport(&args);
    std::ofstream(std::string("/proc/sys/vm/drop_caches")) << "3" << std::endl;
    CommandResult r = RunCommand(cg.Inside(args), 60);
    guard.Adopt();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ASSERT_FALSE(guard.daemons().empty());
    const pid_t daemon = guard.daemons().front();

    CommandResult read = RunCommand(
        cg.Inside({"/usr/bin/python3", tree->dir / "reader.py", tree->mp, tree->manifest}), 300);
    // A failure says whether the kernel killed the daemon or it ended by itself (its log).
    const std::string why = Describe(read) + "\nOOM kills in " + cg.path() + ": " +
                            std::to_string(cg.OomKills()) + "\n--- daemon log ---\n" +
                            ReadFile(log);
    EXPECT_NE(read.out.find("reads=" + std::to_string(3 * kFiles) + " failed=0"), std::string::npos)
        << why;
    EXPECT_EQ(cg.OomKills(), 0u) << why;
    char state = 0;
    pid_t ppid;
    ASSERT_TRUE(ProcStat(daemon, &ppid, &state)) << "the daemon is gone";
    const uint64_t anon_kb = ProcStatusKb(daemon, "RssAnon");
    // Default budgets keep the daemon within half the limit (common/memory_limit.cc); a cache
    // the user forced larger is held by the guard alone, below its threshold (3/4 of it: the
    // inode and dentry slab the kernel may reclaim does not count against it).
    EXPECT_LE(anon_kb << 10, c.forced_cache ? kLimit / 4 * 3 : kLimit / 2)
        << "RssAnon " << anon_kb << " kB";
    r = Dsfs({"stats", "--json", tree->mp});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.out.find("\"memory_guard\": {\"watching\": \"cgroup v1 " + cg.path() + "\""),
              std::string::npos)
        << r.out;
    if (c.forced_cache) {
      // The guard held the cache to the room below its threshold: far less than it was given.
      const size_t at = r.out.find("\"cache_capacity_bytes\": ");
      ASSERT_NE(at, std::string::npos) << r.out;
      EXPECT_LT(std::stoull(r.out.substr(at + 24)), kLimit) << r.out;
    }
    std::printf("%s%s: %s; daemon VmHWM %llu kB, RssAnon %llu kB; memory.failcnt %s\n",
                c.kernel ? "kernel" : "classic", c.forced_cache ? " forced cache" : "",
                read.out.substr(0, read.out.find('\n')).c_str(),
                static_cast<unsigned long long>(ProcStatusKb(daemon, "VmHWM")),
                static_cast<unsigned long long>(anon_kb),
                ReadFile(cg.path() + "/memory.failcnt").c_str());
    std::printf("stats: %s\n", r.out.substr(r.out.find("\"memory_guard\"")).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Mounts, MountMemoryPressureTest,
                         ::testing::Values(Case{false, false}, Case{true, false}, Case{false, true},
                                           Case{true, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.kernel ? "Kernel" : "Classic") +
                                  (info.param.forced_cache ? "ForcedCache" : "Defaults");
                         });

}  // namespace
}  // namespace dsfs::testing
