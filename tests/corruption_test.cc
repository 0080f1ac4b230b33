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
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "backend/kv_store.h"
#include "fs/filesystem.h"
#include "pack/packer.h"
#include "tests/test_util.h"
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
          {"rocksdb", [](const std::string& path) {
             std::string largest;
             uintmax_t size = 0;
             for (const auto& e : std::filesystem::directory_iterator(path)) {
               if (e.path().extension() == ".sst" && e.file_size() > size) {
                 size = e.file_size();
                 largest = e.path().string();
               }
             }
             return largest;
           }}};
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
  const int kSpread = 1200, kRandom = 800;
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
    Status v = RunVerify(damaged_path, report);
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
