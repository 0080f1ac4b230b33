// Damaged stores: bytes flipped at many places of real store files, for every backend. Each
// trial must end in one of two clean outcomes: the store is refused when opened (dsfs mount
// fails with one line), or it opens and every file either reads byte-identical to its source or
// fails with EIO (what the FUSE layer answers for that status); `dsfs verify` then names
// exactly the files that fail. A crash, a hang, wrong bytes or another errno fails the test.
//
// A backend plugs in by adding a factory to Backends(): how to write a store file with it
// (reading detects the backend from the file, Store::Open).
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "backend/kv_open.h"
#include "fs/filesystem.h"
#include "pack/packer.h"
#include "tests/support/test_util.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

struct BackendFactory {
  std::string name;
  // The file of a store at `path` whose bytes the trials flip: the store itself for a one-file
  // backend, else the file holding the data (RocksDB: its largest table file).
  std::function<std::string(const std::string& path)> data_file;
};

Status PackWith(const std::string& backend, const std::string& src, const std::string& path,
                const PackOptions& o) {
  std::unique_ptr<KvWriter> w;
  DSFS_RETURN_IF_ERROR(NewKvWriter(path, backend, {}, &w));
  return PackDirectory(src, o, w.get(), nullptr, nullptr);
}

std::vector<BackendFactory> Backends() {
  return {{"lmdb", [](const std::string& path) { return path; }},
          {"rocksdb", [](const std::string& path) { return PayloadFile(path); }}};
}

class CorruptionTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    src_ = dir_ / "src";
    // Small and large files, text and images, in a few directories: every kind of record.
    std::mt19937 rng(7);
    for (int d = 0; d < 4; ++d) {
      for (int f = 0; f < 10; ++f) {
        std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f) + ".txt";
        files_[rel] = TextBytes(200 + rng() % 3000, d * 100 + f);
      }
    }
    files_["big/text.bin"] = TextBytes(150000, 99);    // 10 chunks of 16 KiB
    files_["big/noise.bin"] = RandomBytes(40000, 98);  // stored raw
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(DSFS_FUZZ_DIR) + "/corpus/image")) {
      files_["img/" + e.path().filename().string()] = ReadFile(e.path().string());
    }
    for (const auto& [rel, data] : files_) WriteFile(src_ + "/" + rel, data);
    options_.zstd_level = 3;
    options_.dict_bytes = 4096;
    options_.chunk_bytes = 16 << 10;
    options_.segment_bytes = 4096;
    options_.threads = 1;
  }

  TempDir dir_;
  std::string src_;
  std::map<std::string, std::string> files_;
  PackOptions options_;
};

struct Outcomes {
  int trials = 0, refused = 0, intact = 0, damaged = 0, damaged_files = 0;
};

TEST_P(CorruptionTest, FlippedBytesAreRefusedOrFailOnlyTheDamagedFiles) {
  const std::string store_path = dir_ / "store.db";
  ASSERT_TRUE(PackWith(GetParam().name, src_, store_path, options_).ok());
  // Trials damage a copy: one file of it, rewritten each time from the pristine bytes.
  const std::string damaged_path = dir_ / "damaged.db";
  std::filesystem::copy(store_path, damaged_path, std::filesystem::copy_options::recursive);
  const std::string target = GetParam().data_file(damaged_path);
  ASSERT_FALSE(target.empty());
  const std::string pristine = ReadFile(target);
  ASSERT_GT(pristine.size(), 4096u);
  // Positions: an even spread over the whole file (every page, headers included) and random
  // ones; the flipped bit varies with the trial.
  std::vector<size_t> positions;
  const int kSpread = SweepTrials(1200), kRandom = SweepTrials(800);
  for (int i = 0; i < kSpread; ++i) positions.push_back(pristine.size() * i / kSpread + i % 7);
  std::mt19937_64 rng(11);
  for (int i = 0; i < kRandom; ++i) positions.push_back(rng() % pristine.size());
  Outcomes o;
  for (size_t t = 0; t < positions.size(); ++t) {
    const size_t pos = std::min(positions[t], pristine.size() - 1);
    SCOPED_TRACE("trial " + std::to_string(t) + ": byte " + std::to_string(pos));
    std::string bytes = pristine;
    bytes[pos] = static_cast<char>(bytes[pos] ^ (1u << (t % 8)));
    WriteFile(target, bytes);
    ++o.trials;
    std::unique_ptr<Store> store;
    Status open = Store::Open(damaged_path, StoreOptions{}, &store);
    if (!open.ok()) {
      // A clean refusal: one line naming the store.
      EXPECT_EQ(open.message().find('\n'), std::string::npos);
      EXPECT_NE(open.message().find(damaged_path), std::string::npos) << open.message();
      ++o.refused;
      continue;
    }
    Filesystem fs(std::move(store), FsOptions{});
    std::set<std::string> failed;
    for (const auto& [rel, data] : files_) {
      uint32_t ino;
      InodeRecord rec;
      Status s = fs.store().LookupPath(rel, &ino, &rec);
      std::string got;
      ReadBuffer buf;
      for (uint64_t off = 0; s.ok() && off < rec.size; off += 128 << 10) {
        std::string_view out;
        s = fs.Read(ino, off, 128 << 10, &buf, &out);
        got.append(out);
      }
      if (s.ok()) {
        EXPECT_EQ(got.size(), data.size()) << rel;
        EXPECT_TRUE(got == data) << rel << ": wrong bytes served from a damaged store";
      } else {
        EXPECT_EQ(s.ToErrno(), EIO) << rel << ": " << s.ToString();
        failed.insert("/" + rel);
      }
    }
    // dsfs verify names exactly the files that failed (or the metadata, when that is hit).
    std::ostringstream report;
    Status v = RunVerify(damaged_path, /*quiet=*/false, report, std::cerr);
    if (failed.empty()) {
      // Damage in unused space (free pages, padding) or a part no file needs.
      if (v.ok()) ++o.intact;
    }
    if (!failed.empty()) {
      ++o.damaged;
      o.damaged_files += static_cast<int>(failed.size());
      EXPECT_FALSE(v.ok()) << "verify found nothing wrong but reads failed";
    }
    if (!v.ok() && report.str().find("BAD metadata") == std::string::npos) {
      std::set<std::string> named;
      std::istringstream lines(report.str());
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("BAD /", 0) == 0) named.insert(line.substr(4, line.find(": ") - 4));
      }
      EXPECT_EQ(named, failed) << report.str();
    }
  }
  std::printf(
      "[ corruption ] %s: %d trials: %d refused at open, %d with every file intact, %d "
      "with damaged files (%d file reads answered EIO), 0 wrong bytes\n",
      GetParam().name.c_str(), o.trials, o.refused, o.intact, o.damaged, o.damaged_files);
  RecordProperty("trials", o.trials);
  RecordProperty("refused", o.refused);
  RecordProperty("damaged", o.damaged);
  EXPECT_EQ(o.trials, kSpread + kRandom);
  EXPECT_GT(o.damaged, 0) << "no trial hit a file: the test would prove nothing";
}

INSTANTIATE_TEST_SUITE_P(Backends, CorruptionTest, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dsfs::testing

// ---------------------------------------------------------------------------------------------
// Damaged LMDB B-tree pages. LMDB follows the page numbers and node offsets of its branch and
// leaf pages before dsfs sees a value, so no record checksum helps there: a store whose tree
// is damaged made every command that opened it (verify, cat, ls, the mount daemon) die of
// SIGSEGV. The tree is checked when the store is opened (in a child process, CheckKvStructure):
// every command refuses such a store with one line, and none crashes.
namespace dsfs::testing {
namespace {

class DamagedLmdbTest : public ::testing::Test {
 protected:
  void SetUp() override { Pack(52, 0); }

  // `random` incompressible files of a few overflow pages each (one entry of the tree each)
  // and `text` small text files, whose records sit in the leaf pages.
  void Pack(int random, int text) {
    src_ = dir_ / "src";
    std::filesystem::remove_all(src_);
    files_.clear();
    for (int i = 0; i < random; ++i) {
      files_["c" + std::to_string(i % 4) + "/r" + std::to_string(i)] =
          RandomBytes(66000 + 37 * i, i);
    }
    for (int i = 0; i < text; ++i) files_["t/s" + std::to_string(i)] = TextBytes(300 + 50 * i, i);
    for (const auto& [rel, data] : files_) WriteFile(src_ + "/" + rel, data);
    store_ = dir_ / "store.dsfs";
    CommandResult r = Dsfs({"pack", "-q", "-f", "--backend", "lmdb", src_, store_});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    pristine_ = ReadFile(store_);
    pages_ = LmdbTreePages(pristine_);
    ASSERT_FALSE(pages_.empty());
    damaged_ = dir_ / "damaged.dsfs";
  }

  // Every command that opens the store: none may crash, hang or serve wrong bytes; a failure
  // is one line. Returns how many of them refused the store for its tree.
  int RunEveryCommand(const std::string& store) {
    const std::string file = "c1/r5";
    std::vector<std::vector<std::string>> commands = {
        {"verify", store},
        {"cat", store, file},
        {"ls", "-R", store},
        {"info", store},
        {"convert", "-q", store, dir_ / "converted", "--backend", "rocksdb"}};
    int refused = 0;
    for (const auto& args : commands) {
      SCOPED_TRACE("dsfs " + args[0]);
      std::filesystem::remove_all(dir_ / "converted");
      CommandResult r = Dsfs(args, 60);
      EXPECT_NE(r.exit_code, -1) << "killed by a signal or hung: " << Describe(r);
      if (r.exit_code == 0) {
        if (args[0] == "cat") {
          EXPECT_TRUE(r.out == files_.at(file)) << "wrong bytes served";
        }
        continue;
      }
      EXPECT_TRUE(IsOneLineError(r, {"dsfs: error: "}));
      if (r.err.find("LMDB B-tree") != std::string::npos) ++refused;
    }
    return refused;
  }

  TempDir dir_;
  std::string src_, store_, pristine_, damaged_;
  std::map<std::string, std::string> files_;
  std::vector<LmdbPage> pages_;
};

TEST_F(DamagedLmdbTest, UndamagedStorePassesTheCheck) {
  EXPECT_TRUE(CheckKvStructure(store_).ok());
  CommandResult r = Dsfs({"verify", store_});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"cat", store_, "c3/r7"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(r.out == files_.at("c3/r7"));
  EXPECT_EQ(RunEveryCommand(store_), 0);
}

// The crash report's store (52 files of a few overflow pages each: one leaf page of 57 entries)
// with 16 bytes XOR 0x5a at offset 8300, in the node-offset array of that leaf page (page 2).
// `dsfs verify` died of SIGSEGV (exit 139).
TEST_F(DamagedLmdbTest, CrashReportStoreIsRefusedInOneLine) {
  const LmdbPage& leaf = pages_.front();
  ASSERT_EQ(leaf.pgno, 2u);
  ASSERT_EQ(leaf.flags & 0x02, 0x02) << "page 2 is no leaf page";
  ASSERT_GE(leaf.lower, 108 + 16) << "offset 8300 is not in page 2's node-offset array";
  PutFile(damaged_, XorBytes(pristine_, 8300, 16));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"verify", damaged_},
                                             {"cat", damaged_, "c0/r0"},
                                             {"ls", damaged_},
                                             {"info", damaged_}}) {
    SCOPED_TRACE("dsfs " + args[0]);
    CommandResult r = Dsfs(args, 60);
    EXPECT_TRUE(IsOneLineError(r, {"damaged store: its LMDB B-tree is inconsistent"}));
    EXPECT_TRUE(IsOneLineError(r, {"damaged.dsfs"}));
  }
  // In this process too (what Store::Open and the mount daemon call): a status, no crash.
  std::unique_ptr<KvReader> kv;
  Status s = OpenKvReader(damaged_, KvReaderOptions{}, &kv);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(damaged_), std::string::npos) << s.message();
  // `dsfs add` reads the tree of the copy it writes: refused before, the store left as it was.
  WriteFile(dir_ / "more/new.txt", "new\n");
  CommandResult r = Dsfs({"add", "-q", damaged_, dir_ / "more"});
  EXPECT_TRUE(IsOneLineError(r, {"LMDB B-tree"}));
  EXPECT_TRUE(ReadFile(damaged_) == XorBytes(pristine_, 8300, 16));
}

// Damage all over every branch and leaf page: the page header, the node-offset array, the node
// headers and keys at the top of the page. Every command ends with one line or serves the right
// bytes; damage to the node-offset array is always refused by the check.
TEST_F(DamagedLmdbTest, DamagedTreePagesNeverCrashACommand) {
  // A tree of several leaf pages under a branch page.
  Pack(260, 40);
  ASSERT_GE(pages_.size(), 3u);
  auto is_branch = [](const LmdbPage& p) { return (p.flags & 0x01) != 0; };
  ASSERT_TRUE(std::any_of(pages_.begin(), pages_.end(), is_branch)) << "no branch page";
  int trials = 0, refused = 0;
  for (const LmdbPage& page : pages_) {
    // The header's flags, lower and upper; the node-offset array (start, middle, end); the
    // first node's header and key; the page's last bytes.
    const size_t middle = 16 + (page.lower - 16u) / 4 * 2;
    std::vector<size_t> offsets = {8, 12, 16, middle, page.lower - 2u};
    offsets.insert(offsets.end(), {size_t{page.upper}, page.upper + 8u, 4096 - 16});
    for (size_t off : offsets) {
      for (size_t n : {size_t{16}, size_t{1}}) {
        SCOPED_TRACE("page " + std::to_string(page.pgno) + " offset " + std::to_string(off) + ", " +
                     std::to_string(n) + " bytes");
        PutFile(damaged_, XorBytes(pristine_, page.offset() + off, n, n == 1 ? 0xff : 0x5a));
        int r = RunEveryCommand(damaged_);
        ++trials;
        if (r > 0) ++refused;
        // The node-offset array: LMDB would read nodes at the offsets it finds there.
        if (n == 16 && off >= 16 && off + n <= page.lower) {
          EXPECT_EQ(r, 5) << "every command refuses a damaged node-offset array";
        }
      }
    }
  }
  std::printf("[ lmdb tree ] %zu tree pages, %d damaged stores: %d refused by the check\n",
              pages_.size(), trials, refused);
}

// The walk is bounded: one that does not finish in time is killed, and says so in one line.
TEST_F(DamagedLmdbTest, CheckThatRunsPastItsTimeIsKilled) {
  Status s = CheckKvStructure(store_, std::chrono::milliseconds(0));
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("did not finish"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_TRUE(CheckKvStructure(store_, std::chrono::milliseconds(60000)).ok());
}

}  // namespace
}  // namespace dsfs::testing
