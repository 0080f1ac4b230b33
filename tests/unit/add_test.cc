// dsfs add (growing a store in place, atomically) and dsfs convert, on both backends.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "backend/kv_open.h"
#include "pack/packer.h"
#include "store/store.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::RandomBytes;
using testing::StoreListing;
using testing::TempDir;
using testing::TextBytes;
using testing::TreeListing;
using testing::WriteFile;

std::string SmallJpeg(int w, int h) {
  std::string rgb(static_cast<size_t>(w * h * 3), '\0');
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<char>(i * 7);
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(t, reinterpret_cast<const unsigned char*>(rgb.data()), w, 0, h, TJPF_RGB,
                        &out, &size, TJSAMP_420, 90, 0),
            0);
  std::string jpeg(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(t);
  return jpeg;
}

// Every record of the store at `path` whose key starts with `space`.
std::map<std::string, std::string> Records(const std::string& path, char space) {
  std::unique_ptr<KvReader> r;
  EXPECT_TRUE(OpenKvReader(path, KvReaderOptions{}, &r).ok());
  std::map<std::string, std::string> out;
  if (!r) return out;
  EXPECT_TRUE(
      ForEachRecord(r.get(), std::string(1, space), [&](std::string_view k, std::string_view v) {
        if (k[0] == space) out[std::string(k)] = std::string(v);
        return Status::OK();
      }).ok());
  return out;
}

// Listing of a store with `extra` entries (a second tree, under `prefix`) merged in.
std::map<std::string, std::string> Merged(std::map<std::string, std::string> base,
                                          const std::string& dir, const std::string& prefix) {
  for (auto& [k, v] : TreeListing(dir)) base[prefix.empty() ? k : prefix + "/" + k] = v;
  return base;
}

// Compares listings, naming the paths that differ (not dumping file contents).
::testing::AssertionResult SameListing(const std::map<std::string, std::string>& got,
                                       const std::map<std::string, std::string>& want) {
  std::string diff;
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    if (it == got.end())
      diff += " missing:" + k;
    else if (it->second != v)
      diff += " differs:" + k;
  }
  for (const auto& [k, v] : got) {
    if (!want.count(k)) diff += " extra:" + k;
  }
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "listings differ:" << diff;
}

class AddTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/cat/a.txt", "alpha");
    WriteFile(dir_ / "src/cat/big.bin", RandomBytes(300000, 1));  // several chunks
    WriteFile(dir_ / "src/dog/d.txt", TextBytes(5000, 2));
    ASSERT_EQ(::symlink("cat/a.txt", (dir_ / "src/link").c_str()), 0);
    WriteFile(dir_ / "new/cat/b.txt", "bravo");  // into an existing directory
    WriteFile(dir_ / "new/bird/c.jpg", SmallJpeg(24, 16));
    WriteFile(dir_ / "new/bird/big.bin", RandomBytes(200000, 3));
    WriteFile(dir_ / "new/empty", "");
    ASSERT_EQ(::symlink("bird/c.jpg", (dir_ / "new/to_c").c_str()), 0);
    options_.chunk_bytes = 65536;
    options_.dict_bytes = 4096;
    std::unique_ptr<Store> s;
    ASSERT_TRUE(testing::PackToBackend(dir_ / "src", options_, GetParam(), store_, &s).ok());
  }

  Status Add(const std::string& src, AddOptions options = {}) {
    std::unique_ptr<KvWriter> w;
    DSFS_RETURN_IF_ERROR(NewKvUpdater(store_, &w));
    std::unique_ptr<Store> base;
    DSFS_RETURN_IF_ERROR(Store::Open(store_, StoreOptions{}, &base));
    return AddDirectory(*base, src, options, w.get(), nullptr, nullptr);
  }
  std::map<std::string, std::string> Listing() {
    std::unique_ptr<Store> s;
    EXPECT_TRUE(Store::Open(store_, StoreOptions{}, &s).ok());
    return s ? StoreListing(*s) : std::map<std::string, std::string>{};
  }

  TempDir dir_;
  std::string store_ = dir_ / "s.db";
  PackOptions options_;
};

// AddOptions::cancel: an add whose token is set fails with "interrupted" and leaves the
// store as it was.
TEST_P(AddTest, CancelTokenLeavesTheStoreAsItWas) {
  auto old_listing = Listing();
  std::atomic<bool> cancel{true};
  AddOptions options;
  options.cancel = &cancel;
  Status s = Add(dir_ / "new", options);
  EXPECT_EQ(s.code(), Status::Code::kIOError) << s.ToString();
  EXPECT_EQ(s.message(), "interrupted");
  EXPECT_EQ(Listing(), old_listing);
}

TEST_P(AddTest, AddsNewEntriesAndKeepsEveryExistingRecord) {
  auto old_listing = Listing();
  ASSERT_EQ(old_listing, TreeListing(dir_ / "src"));
  auto old_payloads = Records(store_, 'P');
  auto old_dict = Records(store_, 'Z');
  ASSERT_TRUE(Add(dir_ / "new").ok());
  EXPECT_TRUE(SameListing(Listing(), Merged(old_listing, dir_ / "new", "")));
  // Existing payload records are untouched (same keys, same bytes); new ones come after them;
  // the dictionary is the store's.
  auto payloads = Records(store_, 'P');
  for (const auto& [k, v] : old_payloads) EXPECT_EQ(payloads[k], v) << "record " << k;
  EXPECT_GT(payloads.size(), old_payloads.size());
  EXPECT_EQ(Records(store_, 'Z'), old_dict);
  std::unique_ptr<Store> s;
  ASSERT_TRUE(Store::Open(store_, StoreOptions{}, &s).ok());
  EXPECT_EQ(s->header().file_count, 3u + 4u);
  EXPECT_EQ(s->header().dir_count, 1u + 3u);
  EXPECT_TRUE(s->VerifyMetadata().ok());
  // The new image got its image fields from the pack-time decode.
  uint32_t ino;
  InodeRecord rec;
  ASSERT_TRUE(s->LookupPath("bird/c.jpg", &ino, &rec).ok());
  EXPECT_TRUE(IsDecodableImage(rec));
  EXPECT_EQ(rec.width, 24u);
  EXPECT_EQ(rec.height, 16u);
  EXPECT_EQ(s->header().image_count, 1u);
}

TEST_P(AddTest, PrefixPutsTheTreeBelowANewDirectory) {
  auto old_listing = Listing();
  ASSERT_TRUE(Add(dir_ / "new", AddOptions{"extra/2024", false, 0, ""}).ok());
  auto want = Merged(old_listing, dir_ / "new", "extra/2024");
  want["extra"] = "<dir>";
  want["extra/2024"] = "<dir>";
  EXPECT_TRUE(SameListing(Listing(), want));
}

TEST_P(AddTest, ExistingNameIsAnErrorUnlessReplacing) {
  auto old_listing = Listing();
  WriteFile(dir_ / "clash/cat/a.txt", "new alpha");
  WriteFile(dir_ / "clash/fresh.txt", "fresh");
  Status s = Add(dir_ / "clash");
  EXPECT_EQ(s.code(), Status::Code::kExists) << s.message();
  EXPECT_NE(s.message().find("cat/a.txt"), std::string::npos) << s.message();
  EXPECT_TRUE(SameListing(Listing(), old_listing));  // nothing written
  // A file where the store has a directory, and a directory below a file.
  WriteFile(dir_ / "clash2/dog", "a file named like a directory");
  EXPECT_EQ(Add(dir_ / "clash2").code(), Status::Code::kExists);
  WriteFile(dir_ / "clash3/link/x", "below a symlink");
  EXPECT_EQ(Add(dir_ / "clash3").code(), Status::Code::kExists);
  EXPECT_TRUE(SameListing(Listing(), old_listing));
  ASSERT_TRUE(Add(dir_ / "clash", AddOptions{"", true, 0, ""}).ok());
  auto want = old_listing;
  want["cat/a.txt"] = "new alpha";
  want["fresh.txt"] = "fresh";
  EXPECT_TRUE(SameListing(Listing(), want));
  ASSERT_TRUE(Add(dir_ / "clash2", AddOptions{"", true, 0, ""}).ok());
  want.erase("dog/d.txt");
  want["dog"] = "a file named like a directory";
  EXPECT_TRUE(SameListing(Listing(), want));
}

TEST_P(AddTest, RepeatedAddsAndConvertRoundTrip) {
  auto want = Listing();
  for (int i = 0; i < 3; ++i) {
    std::string src = dir_ / ("round" + std::to_string(i));
    WriteFile(src + "/r" + std::to_string(i) + "/f.txt", TextBytes(3000 + i, i));
    ASSERT_TRUE(Add(src).ok());
    want = Merged(want, src, "");
  }
  EXPECT_TRUE(SameListing(Listing(), want));
  // Convert to the other backend and back: every record byte for byte.
  std::string other = GetParam() == "lmdb" ? "rocksdb" : "lmdb";
  testing::CommandResult r = testing::RunCommand(
      {testing::DsfsBinary(), "convert", store_, dir_ / "o.db", "--backend", other});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::RunCommand(
      {testing::DsfsBinary(), "convert", dir_ / "o.db", dir_ / "back.db", "--backend", GetParam()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string backend;
  ASSERT_TRUE(DetectBackend(dir_ / "o.db", &backend).ok());
  EXPECT_EQ(backend, other);
  for (char space : {'H', 'I', 'L', 'N', 'P', 'Z'}) {
    EXPECT_EQ(Records(dir_ / "o.db", space), Records(store_, space)) << space;
    EXPECT_EQ(Records(dir_ / "back.db", space), Records(store_, space)) << space;
  }
  std::unique_ptr<Store> s;
  ASSERT_TRUE(Store::Open(dir_ / "o.db", StoreOptions{}, &s).ok());
  EXPECT_EQ(s->backend_name(), other);
  EXPECT_TRUE(SameListing(StoreListing(*s), want));
}

// `dsfs add` killed (SIGKILL) at random moments: the store is always either the old one or
// the old one plus every new file, and passes `dsfs verify`.
TEST_P(AddTest, KilledAddLeavesTheOldStoreOrTheNewOne) {
  for (int i = 0; i < 60; ++i) {
    WriteFile(dir_ / ("many/d" + std::to_string(i % 6) + "/f" + std::to_string(i) + ".bin"),
              i % 2 ? RandomBytes(20000, 100 + i) : TextBytes(30000, i));
  }
  const auto old_listing = Listing();
  const auto new_listing = Merged(old_listing, dir_ / "many", "");
  const std::string pristine = dir_ / "pristine.db";
  std::filesystem::copy(store_, pristine, std::filesystem::copy_options::recursive);
  auto restore = [&] {
    std::filesystem::remove_all(store_);
    std::filesystem::copy(pristine, store_, std::filesystem::copy_options::recursive);
  };
  auto run_add = [&](int64_t kill_after_us) {
    std::string bin = testing::DsfsBinary();
    std::vector<std::string> argv = {bin, "add", "-q", "-j", "2", store_, dir_ / "many"};
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execv(cargv[0], cargv.data());
      _exit(127);
    }
    if (kill_after_us >= 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  // How long an add takes here, uninterrupted: the longest of three, since a busy machine (CI
  // runs two tests at once) makes some adds much slower than others.
  int64_t full_us = 0;
  for (int i = 0; i < 3; ++i) {
    restore();
    auto t0 = std::chrono::steady_clock::now();
    int status = run_add(-1);
    full_us = std::max<int64_t>(full_us, std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::steady_clock::now() - t0)
                                             .count());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_TRUE(SameListing(Listing(), new_listing));
  }
  std::mt19937 rng(20261130);
  int saw_old = 0, saw_new = 0;
  const int kTrials = 50;
  for (int trial = 0; trial < kTrials; ++trial) {
    restore();
    // Up to twice the longest add: most kills land inside an add, some after it.
    int64_t delay = trial == 0 ? 0 : static_cast<int64_t>(rng() % (full_us * 2 + 1));
    run_add(delay);
    testing::CommandResult v = testing::RunCommand({testing::DsfsBinary(), "verify", store_});
    ASSERT_EQ(v.exit_code, 0) << "trial " << trial << " (kill after " << delay << " us): " << v.out
                              << v.err;
    auto listing = Listing();
    if (listing == old_listing) {
      ++saw_old;
    } else {
      ASSERT_EQ(listing, new_listing) << "trial " << trial << ": neither the old nor the new store";
      ++saw_new;
    }
    // A later add completes whatever state the kill left.
    if (trial % 10 == 9) {
      Status s = Add(dir_ / "many", AddOptions{"", true, 0, ""});
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_TRUE(SameListing(Listing(), new_listing));
    }
  }
  RecordProperty("saw_old", saw_old);
  RecordProperty("saw_new", saw_new);
  std::cout << "killed adds: " << saw_old << " left the old store, " << saw_new
            << " the new one (full add: " << full_us << " us)\n";
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
  // Nothing but the store (and the test's own files) is left next to it.
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

// The new version of the store keeps the old one's mode, owner, group and extended attributes
// (an add, and a pack --force over it), whatever the umask.
TEST_P(AddTest, NewVersionsKeepTheStoresModeOwnerAndAttributes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown)";
  const mode_t mode = GetParam() == "lmdb" ? 0640 : 0750;
  ASSERT_EQ(::chown(store_.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(store_.c_str(), mode), 0);
  const bool xattrs = ::setxattr(store_.c_str(), "user.dsfs_test", "kept", 4, 0) == 0;
  auto check = [&](const char* after) {
    struct stat st;
    ASSERT_EQ(::lstat(store_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode) << after;
    EXPECT_EQ(st.st_uid, 65534u) << after;
    EXPECT_EQ(st.st_gid, 65534u) << after;
    if (xattrs) {
      char value[16] = {};
      EXPECT_EQ(::getxattr(store_.c_str(), "user.dsfs_test", value, sizeof(value)), 4) << after;
      EXPECT_STREQ(value, "kept") << after;
    }
  };
  mode_t old_umask = ::umask(022);
  Status s = Add(dir_ / "new");
  ::umask(old_umask);
  ASSERT_TRUE(s.ok()) << s.ToString();
  check("add");
  testing::CommandResult r =
      testing::RunCommand({"sh", "-c",
                           "umask 022; " + testing::DsfsBinary() + " pack -q -f --backend " +
                               GetParam() + " " + (dir_ / "src") + " " + store_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check("pack --force");
}

// Through a symlink, add updates the store the link names; the link stays a link.
TEST_P(AddTest, ThroughASymlinkUpdatesTheStoreItNames) {
  const std::string link = dir_ / "link.db";
  ASSERT_EQ(::symlink(store_.c_str(), link.c_str()), 0);
  auto old_listing = Listing();
  testing::CommandResult r =
      testing::RunCommand({testing::DsfsBinary(), "add", "-q", link, dir_ / "new"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_TRUE(SameListing(Listing(), Merged(old_listing, dir_ / "new", "")));
}

// add --replace of a directory by a file says what it replaced and removed.
TEST_P(AddTest, ReplacingADirectorySaysWhatItRemoved) {
  WriteFile(dir_ / "clash/dog", "a file named like a directory");
  testing::CommandResult r =
      testing::RunCommand({testing::DsfsBinary(), "add", "--replace", store_, dir_ / "clash"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("added 1 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replaced 1 entries of the store, removing the 1 entries below them"),
            std::string::npos)
      << r.out;
}

// A bad --prefix is named as the --prefix (not as an archive's path).
TEST_P(AddTest, BadPrefixIsNamed) {
  for (const std::string& prefix : {std::string("../up"), "a/" + std::string(300, 'p')}) {
    Status s = Add(dir_ / "new", AddOptions{prefix, false, 0, ""});
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("--prefix"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("archive"), std::string::npos) << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AddTest, ::testing::Values("lmdb", "rocksdb"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dsfs
