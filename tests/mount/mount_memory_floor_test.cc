// Real mounts at the small end of memory limits (issue 39 point 7): a 48 MiB cgroup (v1, made
// and removed by the test) holding the daemon and a reader of two threads, default options,
// every file of a tree far larger than the limit read three times and checked: no OOM kill,
// no failed read, the daemon alive. For a store on disk and one in object storage (the S3
// test server of tests/support/hostile_s3.h, the disk cache on), whose fetch threads held 16
// spans of blocks at once and got the daemon killed there, its RAM cache shed to the floor.
// Below the smallest limit a mount lives in, `dsfs mount` says so in one line; and the daemon
// lowers its OOM score where it may (mount/mount.cc).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/memory_limit.h"
#include "common/units.h"
#include "tests/support/cgroup_util.h"
#include "tests/support/hostile_s3.h"
#include "tests/support/mount_util.h"

namespace dsfs::testing {
namespace {

constexpr uint64_t kLimit = 48ull << 20;
constexpr int kFiles = 8000;  // 4-12 KB each: ~64 MB decompressed; and 4 files of 3 MB

// argv: tree manifest files. Writes the tree and its manifest (path, md5).
constexpr const char* kMakeTree = R"PY(
import hashlib, os, random, sys
out, manifest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(39)
words = [''.join(rnd.choice('abcdefghijklmnop') for _ in range(rnd.randint(3, 9))) for _ in range(500)]
with open(manifest, 'w') as m:
    def put(rel, data):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as f:
            f.write(data)
        m.write(f"{rel} {hashlib.md5(data).hexdigest()}\n")
    for i in range(n):
        size = rnd.randint(4000, 12000)
        put(f"d{i % 40:02d}/f{i:06d}.txt",
            (f"{i} " + ' '.join(rnd.choice(words) for _ in range(size // 5)))[:size].encode())
    for i in range(4):
        put(f"large/l{i}.bin", rnd.randbytes(3 << 20))
)PY";

// argv: mountpoint manifest. Reads every file three times in shuffled order with 2 threads,
// checking its md5; prints "reads=N failed=F" and the first failures.
constexpr const char* kReader = R"PY(
import hashlib, random, sys, threading
mp, manifest = sys.argv[1], sys.argv[2]
want = dict(line.split() for line in open(manifest))
order = [p for k in range(3) for p in random.Random(7 + k).sample(sorted(want), len(want))]
lock = threading.Lock()
st = {"reads": 0, "failed": 0, "errors": []}
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
            st["reads"] += 1
            if not ok:
                st["failed"] += 1
                if len(st["errors"]) < 3:
                    st["errors"].append(rel + ": " + err)
ts = [threading.Thread(target=work, args=(order[i::2],)) for i in range(2)]
for t in ts: t.start()
for t in ts: t.join()
print(f"reads={st['reads']} failed={st['failed']}", *st["errors"], sep="\n")
)PY";

struct FloorTree {
  FloorTree() {
    src = dir / "src";
    store = dir / "tree.dsfs";
    manifest = dir / "manifest";
    WriteFile(dir / "make_tree.py", kMakeTree);
    WriteFile(dir / "reader.py", kReader);
    made = RunCommand(
        {"/usr/bin/python3", dir / "make_tree.py", src, manifest, std::to_string(kFiles)}, 120);
    if (made.exit_code == 0) made = Dsfs({"pack", "-q", "--backend", "lmdb", src, store}, 300);
  }
  TempDir dir;
  std::string src, store, manifest;
  CommandResult made;
};

// CAP_SYS_RESOURCE (bit 24 of CapEff), which lowering an OOM score needs.
bool CanLowerOomScore() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1;
  }
  return false;
}

class MountMemoryFloorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tree_ = new FloorTree(); }
  static void TearDownTestSuite() {
    delete tree_;
    tree_ = nullptr;
  }

  // `dsfs mount WHAT MP -o log_file=... EXTRA...` run in `cg` by `sh -c PRELUDE; exec ...`;
  // the daemon is adopted by `guard`.
  // (With a log_file=, the mount's warnings go there: none is given where they are looked for.)
  CommandResult MountIn(const TestCgroup& cg, MountGuard* guard, const std::string& what,
                        std::vector<std::string> extra, const std::string& prelude = "") {
    std::vector<std::string> args = {DsfsBinary(), "mount", what, guard->mountpoint()};
    args.insert(args.end(), extra.begin(), extra.end());
    AddTestTransport(&args);
    std::vector<std::string> argv = cg.Inside(args);
    if (!prelude.empty()) argv[2] = prelude + " && " + argv[2];
    CommandResult r = RunCommand(argv, 60);
    guard->Adopt();
    return r;
  }

  // Every file read three times by two threads inside a 48 MiB cgroup with the daemon.
  void ReadAllInside(const std::string& name, const std::string& what,
                     std::vector<std::string> extra) {
    const std::string v1 = V1MemoryMount();
    if (v1.empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller";
    if (kSanitized) GTEST_SKIP() << "SKIPPED: a sanitizer build's dsfs needs more than 48 MiB";
    ASSERT_EQ(tree_->made.exit_code, 0) << Describe(tree_->made);
    TestCgroup cg(v1, name);
    ASSERT_TRUE(cg.made()) << cg.error();
    ASSERT_TRUE(cg.SetLimit(kLimit));
    const std::string mp = tree_->dir / ("mnt-" + name);
    ::mkdir(mp.c_str(), 0755);
    MountGuard guard(mp);
    std::ofstream("/proc/sys/vm/drop_caches") << "3" << std::endl;
    extra.insert(extra.begin(), {"-o", "log_file=" + std::string(tree_->dir / "daemon.log")});
    CommandResult r = MountIn(cg, &guard, what, extra);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ASSERT_FALSE(guard.daemons().empty());
    const pid_t daemon = guard.daemons().front();
    CommandResult read = RunCommand(
        cg.Inside({"/usr/bin/python3", tree_->dir / "reader.py", mp, tree_->manifest}), 300);
    const std::string why = Describe(read) + "\nOOM kills in " + cg.path() + ": " +
                            std::to_string(cg.OomKills()) + "\n--- daemon log ---\n" +
                            ReadFile(tree_->dir / "daemon.log");
    EXPECT_NE(read.out.find("reads=" + std::to_string(3 * (kFiles + 4)) + " failed=0"),
              std::string::npos)
        << why;
    EXPECT_EQ(cg.OomKills(), 0u) << why;
    char state = 0;
    pid_t ppid;
    ASSERT_TRUE(ProcStat(daemon, &ppid, &state)) << "the daemon is gone\n" << why;
    std::printf("%s at 48 MiB: %s; daemon VmHWM %llu kB, RssAnon %llu kB; cgroup peak %s",
                name.c_str(), read.out.substr(0, read.out.find('\n')).c_str(),
                static_cast<unsigned long long>(ProcStatusKb(daemon, "VmHWM")),
                static_cast<unsigned long long>(ProcStatusKb(daemon, "RssAnon")),
                ReadFile(cg.path() + "/memory.max_usage_in_bytes").c_str());
  }

  static FloorTree* tree_;
};
FloorTree* MountMemoryFloorTest::tree_ = nullptr;

TEST_F(MountMemoryFloorTest, StoreOnDiskLivesIn48MiB) {
  SKIP_UNLESS_CAN_MOUNT();
  ReadAllInside("floor-lmdb", tree_->store, {});
}

TEST_F(MountMemoryFloorTest, StoreInObjectStorageLivesIn48MiB) {
  SKIP_UNLESS_CAN_MOUNT();
  HostileS3 s3;
  ASSERT_TRUE(s3.ok()) << s3.error();
  ASSERT_EQ(tree_->made.exit_code, 0) << Describe(tree_->made);
  const std::string url = "s3://" + s3.NewBucket() + "/s";
  CommandResult push = Dsfs({"push", "-q", tree_->store, url}, 120);
  ASSERT_EQ(push.exit_code, 0) << Describe(push);
  ReadAllInside("floor-s3", url, {"-o", "cache_dir=" + std::string(tree_->dir / "cache")});
}

TEST_F(MountMemoryFloorTest, BelowTheFloorIsOneLineAndTheMountGoesOn) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string v1 = V1MemoryMount();
  if (v1.empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller";
  ASSERT_EQ(tree_->made.exit_code, 0) << Describe(tree_->made);
  TestCgroup cg(v1, "floor-below");
  ASSERT_TRUE(cg.made()) << cg.error();
  const uint64_t below = MinimumMountLimitBytes(false) - (4 << 20);
  ASSERT_TRUE(cg.SetLimit(below));
  const std::string mp = tree_->dir / "mnt-below";
  ::mkdir(mp.c_str(), 0755);
  MountGuard guard(mp);
  CommandResult r = MountIn(cg, &guard, tree_->store, {});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(LineCount(r.err), 1) << Describe(r);
  const MemoryLimit limit{below, "cgroup v1 " + cg.path() + "/memory.limit_in_bytes"};
  EXPECT_NE(r.err.find("a mount of a store on disk needs a memory limit of " +
                       FormatBytes(MinimumMountLimitBytes(false)) + " at least; this one has " +
                       limit.ToString()),
            std::string::npos)
      << Describe(r);
  EXPECT_EQ(ReadFile(mp + "/d00/f000000.txt").substr(0, 2), "0 ");
}

TEST_F(MountMemoryFloorTest, TheDaemonLowersItsOomScoreWhereItMay) {
  SKIP_UNLESS_CAN_MOUNT();
  const std::string v1 = V1MemoryMount();
  if (v1.empty()) GTEST_SKIP() << "SKIPPED: no cgroup v1 memory controller";
  ASSERT_EQ(tree_->made.exit_code, 0) << Describe(tree_->made);
  TestCgroup cg(v1, "floor-oom-score");
  ASSERT_TRUE(cg.made()) << cg.error();
  const std::string mp = tree_->dir / "mnt-oom";
  ::mkdir(mp.c_str(), 0755);
  MountGuard guard(mp);
  // Raised by the caller first (anyone may raise his own): lowered from there where
  // CAP_SYS_RESOURCE allows it, else kept (the kernel refuses; the mount goes on).
  CommandResult r = MountIn(cg, &guard, tree_->store, {}, "echo 300 > /proc/self/oom_score_adj");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_FALSE(guard.daemons().empty());
  const std::string adj =
      ReadFile("/proc/" + std::to_string(guard.daemons().front()) + "/oom_score_adj");
  EXPECT_EQ(adj, CanLowerOomScore() ? "-500\n" : "300\n");
}

}  // namespace
}  // namespace dsfs::testing
