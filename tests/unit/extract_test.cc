// dsfs extract (tools/cmd_extract.cc): the tree written back as packed (contents, modes, mtimes
// to the nanosecond, symlinks, empty directories, names of any bytes), into a directory and as
// a tar stream `tar` reads back; `dsfs pack` of what it wrote gives the same store tree again;
// a damaged store's unreadable files (exactly those `dsfs verify` names) fail alone, the rest
// written; it never writes outside DIR, refuses a non-empty DIR without --force and then
// replaces nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "backend/kv_open.h"
#include "pack/pack_run.h"
#include "pack/tree_builder.h"
#include "store/store.h"
#include "tests/support/test_util.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

struct Outcome {
  int code;
  std::string out, err;
};

Outcome Extract(std::vector<std::string> args) {
  args.insert(args.begin(), "extract");
  std::ostringstream out, err;
  const int code = DsfsMain(args, out, err);
  return {code, out.str(), err.str()};
}

// Every entry below `root` with its type, permission bits, mtime and contents (or target).
std::map<std::string, std::string> Attrs(const std::string& root) {
  std::map<std::string, std::string> all;
  WalkTree(root, [&](const std::string& rel, const struct stat& st, const std::string& path) {
    if (rel.empty()) return;
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) v += " " + ReadFile(path);
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
      v += " -> " + std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
    }
    all[rel] = v;
  });
  return all;
}

void SetMtime(const std::string& path, int64_t s, long ns) {
  struct timespec t[2] = {{s, ns}, {s, ns}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, AT_SYMLINK_NOFOLLOW), 0) << path;
}

class ExtractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    WriteFile(src_ + "/cls/a.txt", TextBytes(3000, 1), 0640);
    WriteFile(src_ + "/cls/big", RandomBytes(600000, 2), 0755);    // several chunks
    WriteFile(src_ + "/cls/huge", RandomBytes(5 << 20, 3), 0644);  // written by the walk itself
    WriteFile(src_ + "/odd/new\nline", "n", 0600);
    WriteFile(src_ + "/odd/\xff\xfe-not-utf8", "x", 0444);
    WriteFile(src_ + "/odd/-leading-dash", "d", 04755);
    WriteFile(src_ + "/odd/" + std::string(255, 'L'), "long", 0644);
    MakeDir(src_ + "/empty", 0700);
    MakeDir(src_ + "/ro", 0755);
    WriteFile(src_ + "/ro/f", "f", 0644);
    ASSERT_EQ(::symlink("../../../../etc/passwd", (src_ + "/odd/outside").c_str()), 0);
    ASSERT_EQ(::symlink("/etc", (src_ + "/abs").c_str()), 0);
    ASSERT_EQ(::symlink("a.txt", (src_ + "/cls/rel").c_str()), 0);
    SetMtime(src_ + "/cls/a.txt", 981173106, 123456789);
    SetMtime(src_ + "/odd/outside", 1000000000, 5);
    SetMtime(src_ + "/empty", 1234567890, 987654321);
    ASSERT_EQ(::chmod((src_ + "/ro").c_str(), 0555), 0);  // written into before its chmod
    store_ = dir_ / "s.db";
    std::ostringstream out, err;
    ASSERT_EQ(DsfsMain({"pack", "-q", src_, store_, "--group-size", "4K", "--chunk-size", "64K"},
                       out, err),
              0)
        << err.str();
  }

  TempDir dir_;
  std::string src_, store_;
};

TEST_F(ExtractTest, DirectoryRoundTripIsByteIdenticalAndRepacksTheSame) {
  const std::string out = dir_ / "out";
  Outcome r = Extract({store_, out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("extracted 8 files"), std::string::npos) << r.out;
  EXPECT_EQ(Attrs(out), Attrs(src_));
  // Packed again, the extracted tree is the same store tree (contents, links, directories).
  const std::string again = dir_ / "again.db";
  std::ostringstream o, e;
  ASSERT_EQ(DsfsMain({"pack", "-q", out, again}, o, e), 0) << e.str();
  std::unique_ptr<Store> a, b;
  ASSERT_TRUE(Store::Open(store_, StoreOptions{}, &a).ok());
  ASSERT_TRUE(Store::Open(again, StoreOptions{}, &b).ok());
  EXPECT_EQ(StoreListing(*a), StoreListing(*b));
  const std::string out2 = dir_ / "out2";
  ASSERT_EQ(Extract({again, out2}).code, 0);
  EXPECT_EQ(Attrs(out2), Attrs(src_));
  // With the writes on a thread of their own (-j 2) the same.
  const std::string out3 = dir_ / "out3";
  ASSERT_EQ(Extract({store_, out3, "-j", "2"}).code, 0);
  EXPECT_EQ(Attrs(out3), Attrs(src_));
}

TEST_F(ExtractTest, TarStreamReadsBackWithTar) {
  Outcome r = Extract({store_, "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const std::string tar = dir_ / "t.tar", out = dir_ / "untar";
  WriteFile(tar, r.out);
  MakeDir(out);
  CommandResult t = RunCommand({"tar", "-xpf", tar, "-C", out});
  ASSERT_EQ(t.exit_code, 0) << Describe(t);
  EXPECT_EQ(Attrs(out), Attrs(src_));
}

TEST_F(ExtractTest, NamedPathsWithTheirParents) {
  const std::string out = dir_ / "out";
  Outcome r = Extract({store_, out, "cls/a.txt", "/empty", "odd/outside"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& [rel, v] : Attrs(out)) names.insert(rel);
  EXPECT_EQ(names, (std::set<std::string>{"cls", "cls/a.txt", "empty", "odd", "odd/outside"}));
  EXPECT_EQ(Attrs(out)["cls/a.txt"], Attrs(src_)["cls/a.txt"]);
  EXPECT_NE(Extract({store_, dir_ / "o2", "cls/../../x"}).code, 0);
  Outcome missing = Extract({store_, dir_ / "o3", "nope"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(LineCount(missing.err), 1) << missing.err;
}

TEST_F(ExtractTest, ViewAsTheSource) {
  const std::string src = dir_ / "img", store = dir_ / "img.db", out = dir_ / "bmp";
  WriteFile(src + "/c/1.jpg", Jpeg(24, 16, 1));
  WriteFile(src + "/c/note.txt", "not an image");
  std::ostringstream o, e;
  ASSERT_EQ(DsfsMain({"pack", "-q", src, store}, o, e), 0) << e.str();
  Outcome r = Extract({store, out, "--view", "bmp"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string bmp = ReadFile(out + "/c/1.jpg");
  EXPECT_EQ(bmp.substr(0, 2), "BM");
  EXPECT_EQ(bmp.size(), 54u + 16 * 24 * 3);  // rows of 72 bytes need no padding
  EXPECT_EQ(ReadFile(out + "/c/note.txt"), "not an image");
  Outcome bad = Extract({store, dir_ / "x", "--view", "nope"});
  EXPECT_EQ(bad.code, 1);
}

TEST_F(ExtractTest, RefusesANonEmptyDirAndForceOnlyAdds) {
  const std::string out = dir_ / "out", outside = dir_ / "outside";
  MakeDir(out);
  MakeDir(outside);
  WriteFile(out + "/cls/a.txt", "mine");
  Outcome r = Extract({store_, out});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_EQ(DirNames(out), (std::vector<std::string>{"cls"}));
  // Links planted in DIR where the store has a directory and a file: never followed.
  ASSERT_EQ(::symlink(outside.c_str(), (out + "/odd").c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/f").c_str(), (out + "/ro").c_str()), 0);
  r = Extract({store_, out, "--force"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(LinesWith(r.err, "dsfs: error: odd").size(), 1u) << r.err;
  EXPECT_EQ(ReadFile(out + "/cls/a.txt"), "mine");                // kept
  EXPECT_EQ(ReadFile(out + "/cls/big"), RandomBytes(600000, 2));  // added
  EXPECT_TRUE(DirNames(outside).empty()) << "wrote through a planted symlink";
  struct stat st;
  ASSERT_EQ(::lstat((out + "/odd").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_F(ExtractTest, SymlinksPointingOutAreWrittenAsLinks) {
  const std::string out = dir_ / "out";
  ASSERT_EQ(Extract({store_, out}).code, 0);
  struct stat st;
  ASSERT_EQ(::lstat((out + "/abs").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // A second extract over it with --force adds nothing through them.
  Outcome r = Extract({store_, out, "--force"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("already there, kept"), std::string::npos) << r.out;
  EXPECT_EQ(Attrs(out), Attrs(src_));
}

// A crafted store (pack never writes one: TreeBuilder::Normalize refuses such names) whose
// entries are named "..", "." and "a/b", beside a link pointing out: the bad names fail alone,
// each on one line; nothing is written outside DIR; the link is written as a link.
TEST_F(ExtractTest, HostileNamesInACraftedStoreFailAlone) {
  const std::string crafted = dir_ / "crafted.db";
  {
    std::unique_ptr<KvWriter> writer;
    ASSERT_TRUE(NewKvWriter(crafted, "lmdb", KvWriterOptions{}, &writer).ok());
    PackOptions options;
    PackRun run(options, writer.get(), {});
    TreeBuilder tree;
    auto add = [&](const std::string& name, uint32_t mode, const std::string& target) {
      TreeBuilder::Node n;
      n.name = name;
      n.SetTimes(mode, 1000000000, 0);
      if (!target.empty()) {
        n.data = tree.AddTarget(target);
        n.size = target.size();
      }
      tree.AddChild(0, n);
    };
    add("..", S_IFLNK | 0777, "x");
    add(".", S_IFDIR | 0755, "");
    add("a/b", S_IFLNK | 0777, "y");
    add("escape", S_IFLNK | 0777, "../../../../tmp");
    add("fine", S_IFDIR | 0700, "");
    std::vector<InodeRecord> inodes;
    std::string names;
    PackStats st;
    ASSERT_TRUE(tree.Build(&inodes, &names, &st).ok());
    Status s = run.Finish(inodes, names, "", &st);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  const std::string out = dir_ / "out";
  const std::vector<std::string> before = DirNames(dir_.path());
  Outcome r = Extract({crafted, out});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(LinesWith(r.err, "no file name").size(), 3u) << r.err;
  std::vector<std::string> after = DirNames(dir_.path());
  after.erase(std::remove(after.begin(), after.end(), "out"), after.end());
  EXPECT_EQ(after, before) << "something written beside DIR";
  EXPECT_EQ(DirNames(out), (std::vector<std::string>{"escape", "fine"}));
  struct stat lst;
  ASSERT_EQ(::lstat((out + "/escape").c_str(), &lst), 0);
  EXPECT_TRUE(S_ISLNK(lst.st_mode));
  // As a tar stream: the same entries left out, the rest listed.
  r = Extract({crafted, "-"});
  EXPECT_EQ(r.code, 1);
  WriteFile(dir_ / "c.tar", r.out);
  CommandResult t = RunCommand({"tar", "-tf", dir_ / "c.tar"});
  EXPECT_EQ(t.out, "escape\nfine/\n") << Describe(t);
}

// A store damaged at spread positions: the files extract fails on are exactly those `dsfs
// verify` names, each on one line; every other file is written with its exact bytes.
TEST_F(ExtractTest, DamagedFilesFailAloneTheRestIsWritten) {
  const std::string target = PayloadFile(store_);
  const std::string pristine = ReadFile(target);
  int compared = 0;
  for (int t = 0; t < 24 && compared < 3; ++t) {
    std::string bytes = pristine;
    const size_t pos = bytes.size() * t / 24 + 7;
    bytes[pos] ^= 0x20;
    WriteFile(target, bytes);
    std::ostringstream report, e;
    DsfsMain({"verify", "-q", store_}, report, e);
    if (report.str().find("BAD metadata") != std::string::npos || report.str().empty()) continue;
    std::set<std::string> bad;
    std::istringstream lines(report.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("BAD /", 0) == 0) bad.insert(line.substr(5, line.find(": ") - 5));
    }
    if (bad.empty()) continue;
    const std::string out = dir_ / ("out" + std::to_string(t));
    Outcome r = Extract({store_, out});
    EXPECT_EQ(r.code, 1) << r.err;
    std::set<std::string> named;
    for (const std::string& line : LinesWith(r.err, "dsfs: error: ")) {
      const std::string rest = line.substr(13);
      if (rest.find("could not be extracted") != std::string::npos) continue;
      named.insert(rest.substr(0, rest.find(": ")));
    }
    EXPECT_EQ(named, bad) << r.err;
    for (const auto& [rel, v] : Attrs(src_)) {
      if (bad.count(rel)) {
        EXPECT_NE(::access((out + "/" + rel).c_str(), F_OK), 0) << rel << ": partly written";
      } else {
        EXPECT_EQ(Attrs(out)[rel], v) << rel;
      }
    }
    ++compared;
  }
  WriteFile(target, pristine);
  std::printf("[ extract ] %d damaged stores compared\n", compared);
  EXPECT_GT(compared, 0) << "no trial damaged a file: the test would prove nothing";
}

}  // namespace
}  // namespace dsfs::testing
