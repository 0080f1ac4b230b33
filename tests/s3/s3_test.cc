// The S3 backend against a real S3 server: Ceph's RADOS Gateway, started once for this binary
// by tests/support/ceph_rgw.sh (1 monitor, 1 memstore OSD, radosgw on 127.0.0.1) and stopped at the
// end (a watchdog stops it too if this process dies). Skipped, saying why, where Ceph is missing.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "backend/s3/s3_kv.h"
#include "s3/client.h"
#include "s3/credentials.h"
#include "tests/support/hostile_s3.h"
#include "tests/support/mount_util.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

struct Ceph {
  std::string dir, endpoint, access, secret, skip;
  double start_s = 0;
};
Ceph* g_ceph = nullptr;

std::string Field(const std::string& out, const std::string& name) {
  for (const auto& line : LinesWith(out, name + "=")) {
    if (line.rfind(name + "=", 0) == 0) return line.substr(name.size() + 1);
  }
  return "";
}

std::string Script() { return std::string(DSFS_SOURCE_DIR) + "/tests/support/ceph_rgw.sh"; }

class CephEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    g_ceph = new Ceph;
    for (const char* bin : {"/usr/bin/ceph-mon", "/usr/bin/ceph-osd", "/usr/bin/radosgw"}) {
      if (::access(bin, X_OK) != 0) {
        g_ceph->skip = std::string("SKIPPED: ") + bin +
                       " not installed (scripts/setup.sh installs ceph-mon ceph-osd radosgw)";
        return;
      }
    }
    const char* tmp = std::getenv("TMPDIR");
    g_ceph->dir = std::string(tmp ? tmp : "/tmp") + "/dsfs-ceph-" + std::to_string(::getpid());
    auto t0 = std::chrono::steady_clock::now();
    CommandResult r = RunCommand({Script(), "start", g_ceph->dir, std::to_string(::getpid())}, 120);
    g_ceph->start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.exit_code != 0) {
      g_ceph->skip = "Ceph did not start: " + Describe(r);
      return;
    }
    g_ceph->endpoint = Field(r.out, "endpoint");
    g_ceph->access = Field(r.out, "access_key");
    g_ceph->secret = Field(r.out, "secret_key");
    std::printf("Ceph RGW at %s serving after %.2f s\n", g_ceph->endpoint.c_str(), g_ceph->start_s);
    // What every client in this process and its children (dsfs push, dsfs mount) uses.
    ::setenv("AWS_ENDPOINT_URL", g_ceph->endpoint.c_str(), 1);
    ::setenv("AWS_ACCESS_KEY_ID", g_ceph->access.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", g_ceph->secret.c_str(), 1);
    ::unsetenv("AWS_SESSION_TOKEN");
    ::unsetenv("AWS_PROFILE");
    ::setenv("DSFS_S3_ATTEMPTS", "3", 1);  // a short retry budget: the fault tests wait for it
    ::setenv("DSFS_S3_TIMEOUT_S", "3", 1);
  }
  void TearDown() override {
    if (g_ceph && !g_ceph->dir.empty()) RunCommand({Script(), "stop", g_ceph->dir}, 60);
  }
};
const auto* g_env = ::testing::AddGlobalTestEnvironment(new CephEnvironment);

#define SKIP_WITHOUT_CEPH()                                  \
  do {                                                       \
    if (!g_ceph->skip.empty()) GTEST_SKIP() << g_ceph->skip; \
  } while (0)

std::unique_ptr<S3Client> Client(S3Client::RetryPolicy policy = {}) {
  AwsSettings s;
  EXPECT_TRUE(LoadAwsSettings(&s).ok());
  policy.attempts = 3;
  return std::make_unique<S3Client>(s, policy);
}

// A fresh bucket per test.
std::string NewBucket() {
  static std::atomic<int> n{0};
  std::string b = "t" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  Status s = Client()->CreateBucket(b);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b;
}

// A tree of small files in a few directories (and one larger, chunked file), packed.
struct PackedTree {
  explicit PackedTree(int files = 60, uint32_t seed = 1) {
    src = dir / "src";
    for (int i = 0; i < files; ++i) {
      WriteFile(src + "/d" + std::to_string(i % 4) + "/f" + std::to_string(i),
                RandomBytes(1000 + (i * 7919) % 30000, seed + i));
    }
    WriteFile(src + "/big.bin", RandomBytes(3 << 20, seed));
    store = dir / "store.db";
    CommandResult r = Dsfs({"pack", "-q", "--backend", "lmdb", src, store});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  TempDir dir;
  std::string src, store;
};

TEST(S3ClientTest, PutGetRangeHeadListDeleteAndMultipart) {
  SKIP_WITHOUT_CEPH();
  auto c = Client();
  std::string b = NewBucket();
  std::string data = RandomBytes(100000, 7);
  ASSERT_TRUE(c->Put(b, "a/b c+d", data, {{"xxh3", "abc"}}).ok());
  std::string got;
  ASSERT_TRUE(c->Get(b, "a/b c+d", &got).ok());
  EXPECT_EQ(got, data);
  ASSERT_TRUE(c->Get(b, "a/b c+d", &got, 1000, 5000).ok());
  EXPECT_EQ(got, data.substr(1000, 5000));
  uint64_t size = 0;
  std::map<std::string, std::string> meta;
  ASSERT_TRUE(c->Head(b, "a/b c+d", &size, &meta).ok());
  EXPECT_EQ(size, data.size());
  EXPECT_EQ(meta["xxh3"], "abc");
  Status s = c->Get(b, "missing", &got);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find("not found"), std::string::npos);

  // Multipart: two parts (RGW wants >= 5 MiB for every part but the last).
  std::string big = RandomBytes((5 << 20) + 12345, 8), id, e1, e2;
  ASSERT_TRUE(c->StartMultipart(b, "a/mp", {}, &id).ok());
  ASSERT_TRUE(c->UploadPart(b, "a/mp", id, 2, std::string_view(big).substr(5 << 20), &e2).ok());
  ASSERT_TRUE(c->UploadPart(b, "a/mp", id, 1, std::string_view(big).substr(0, 5 << 20), &e1).ok());
  ASSERT_TRUE(c->CompleteMultipart(b, "a/mp", id, {e1, e2}).ok());
  ASSERT_TRUE(c->Get(b, "a/mp", &got).ok());
  EXPECT_EQ(got, big);

  std::vector<std::string> keys;
  ASSERT_TRUE(c->List(b, "a/", &keys).ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"a/b c+d", "a/mp"}));
  ASSERT_TRUE(c->Delete(b, "a/mp").ok());
  ASSERT_TRUE(c->List(b, "a/", &keys).ok());
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_EQ(c->counters().retries.load(), 0u);
}

TEST(S3ClientTest, WrongSecretIsAccessDeniedAndNotRetried) {
  SKIP_WITHOUT_CEPH();
  AwsSettings s;
  ASSERT_TRUE(LoadAwsSettings(&s).ok());
  s.secret_access_key = "wrong";
  S3Client c(s, {});
  std::string b = NewBucket(), got;
  Status st = c.Get(b, "x", &got);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("access denied"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("wrong"), std::string::npos) << "the secret is in the message";
  EXPECT_EQ(c.counters().retries.load(), 0u);
}

// The real gateway behind a hostile relay (tests/support/hostile_s3.h): requests signed by dsfs
// (SigV4) and checked by RGW, answers dripped, stalled or cut on the way back. A push and reads
// through it work; wrong keys are one line, not retried, even through it; each fault ends within
// the retry budget in one line, and reads recover with the network.
TEST(S3StoreTest, ThroughAHostileNetworkSigV4AndAccessDeniedHoldAndFaultsEnd) {
  SKIP_WITHOUT_CEPH();
  PackedTree tree;
  std::string bucket = NewBucket();
  const int port = std::stoi(g_ceph->endpoint.substr(g_ceph->endpoint.rfind(':') + 1));
  HostileS3 relay(port);
  ASSERT_TRUE(relay.ok()) << relay.error();
  const std::string url = "s3://" + bucket + "/relayed";
  CommandResult r = Dsfs({"push", "-q", tree.store, url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"cat", url, "/d1/f1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, ReadFile(tree.src + "/d1/f1"));
  {
    ScopedEnv env;
    env.Set("AWS_SECRET_ACCESS_KEY", "wrong-secret");
    r = Dsfs({"ls", url});
    EXPECT_TRUE(IsOneLineError(r, {"access denied"})) << Describe(r);
    EXPECT_EQ(r.err.find("gave up"), std::string::npos) << "403 was retried: " << Describe(r);
    EXPECT_EQ(r.err.find("wrong-secret"), std::string::npos);
  }
  for (const char* mode : {"drip 2", "stall", "reset"}) {
    relay.SetMode(mode);
    r = Dsfs({"cat", url, "/d2/f2"}, 120);
    EXPECT_TRUE(IsOneLineError(r, {"gave up after 2 tries"})) << mode << ": " << Describe(r);
  }
  EXPECT_GE(relay.HostileRequests(), 6);
  relay.SetMode("normal");
  r = Dsfs({"cat", url, "/d2/f2"});
  EXPECT_EQ(r.out, ReadFile(tree.src + "/d2/f2")) << Describe(r);
}

std::map<std::string, std::string> ListingOf(const std::string& source,
                                             const KvReaderOptions& ko = {},
                                             std::unique_ptr<KvReader>* keep = nullptr) {
  std::unique_ptr<KvReader> kv;
  Status s = OpenKvReader(source, ko, &kv);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  KvReader* raw = kv.get();
  std::unique_ptr<Store> store;
  // The listing reads through a Store that does not own the reader the caller keeps.
  struct Borrowed : KvReader {
    KvReader* r;
    explicit Borrowed(KvReader* r) : r(r) {}
    Status Get(std::string_view k, PinnedValue* v) override { return r->Get(k, v); }
    Status Seek(std::string_view k, std::string* f, PinnedValue* v) override {
      return r->Seek(k, f, v);
    }
    std::string_view Name() const override { return r->Name(); }
  };
  s = Store::Open(std::make_unique<Borrowed>(raw), &store);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  auto listing = StoreListing(*store);
  store.reset();
  if (keep) *keep = std::move(kv);
  return listing;
}

TEST(S3StoreTest, PushThenReadEveryFileAlikeAndPushRules) {
  SKIP_WITHOUT_CEPH();
  PackedTree tree;
  std::string url = "s3://" + NewBucket() + "/sets/one";
  CommandResult r = Dsfs({"push", tree.store, url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  // Not on a terminal: no progress, one summary line with the time and the rate.
  EXPECT_EQ(LineCount(r.out), 1) << Describe(r);
  EXPECT_NE(r.out.find("pushed"), std::string::npos) << Describe(r);
  EXPECT_NE(r.out.find("/s"), std::string::npos) << "no rate: " << Describe(r);
  EXPECT_EQ(r.err, "") << Describe(r);
  std::unique_ptr<Store> local;
  ASSERT_TRUE(Store::Open(tree.store, StoreOptions{}, &local).ok());
  auto want = StoreListing(*local);
  EXPECT_EQ(ListingOf(url), want);
  // The inspecting commands take the URL like a path.
  r = Dsfs({"cat", url, "d1/f1"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, ReadFile(tree.src + "/d1/f1"));
  r = Dsfs({"ls", url, "d2"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("f2"), std::string::npos) << Describe(r);
  r = Dsfs({"verify", url});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Dsfs({"info", url});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("s3"), std::string::npos) << Describe(r);
  EXPECT_TRUE(IsOneLineError(Dsfs({"add", url, tree.src}), {"not updated in place"}));
  // A second push is refused without --force, in one line.
  EXPECT_TRUE(IsOneLineError(Dsfs({"push", tree.store, url}), {"already there"}));
  // Again with --force: the same store, so every data object is found and skipped (resume).
  r = Dsfs({"push", "--force", tree.store, url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("data objects already there"), std::string::npos) << Describe(r);
  // Bad destinations and sources: one line each.
  EXPECT_TRUE(IsOneLineError(Dsfs({"push", tree.store, "s3://B/x"}), {"bucket name"}));
  EXPECT_TRUE(IsOneLineError(Dsfs({"push", tree.store, tree.dir / "x"}), {"s3://"}));
  EXPECT_TRUE(IsOneLineError(Dsfs({"push", tree.src, url + "2"}), {"not a dsfs store"}));
  EXPECT_TRUE(IsOneLineError(Dsfs({"push", tree.store, "s3://no-such-bucket-here/x"}),
                             {"not found", "NoSuchBucket"}));
}

// dsfs extract reads a store in S3 as it reads a local one (the same opener).
TEST(S3StoreTest, ExtractWritesTheTreeOfAStoreInS3) {
  SKIP_WITHOUT_CEPH();
  PackedTree tree;
  const std::string url = "s3://" + NewBucket() + "/sets/extract";
  CommandResult r = Dsfs({"push", "-q", tree.store, url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string out = tree.dir / "out";
  r = Dsfs({"extract", "-q", url, out});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(TreeListing(out), TreeListing(tree.src));
  r = Dsfs({"extract", url, "-", "d1/f1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find(ReadFile(tree.src + "/d1/f1")), std::string::npos) << "not in the tar";
}

TEST(S3StoreTest, ConvertToS3AndAChangedStoreReplacesTheOld) {
  SKIP_WITHOUT_CEPH();
  PackedTree one(20, 1), two(30, 2);
  std::string bucket = NewBucket();
  std::string url = "s3://" + bucket + "/p";
  CommandResult r = Dsfs({"convert", one.store, url, "--backend", "s3"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::unique_ptr<Store> s1, s2;
  ASSERT_TRUE(Store::Open(one.store, StoreOptions{}, &s1).ok());
  ASSERT_TRUE(Store::Open(two.store, StoreOptions{}, &s2).ok());
  EXPECT_EQ(ListingOf(url), StoreListing(*s1));
  auto c = Client();
  std::vector<std::string> before, after;
  ASSERT_TRUE(c->List(bucket, "p/data/", &before).ok());
  r = Dsfs({"push", "-f", two.store, url});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ListingOf(url), StoreListing(*s2));
  ASSERT_TRUE(c->List(bucket, "p/data/", &after).ok());
  for (const auto& k : before) {
    EXPECT_EQ(std::find(after.begin(), after.end(), k), after.end())
        << k << " of the old store is left";
  }
  EXPECT_TRUE(
      IsOneLineError(Dsfs({"convert", one.store, url + "x", "--backend", "lmdb"}), {"s3 backend"}));
}

TEST(S3StoreTest, AnUnfinishedPushIsNotAStore) {
  SKIP_WITHOUT_CEPH();
  std::string url = "s3://" + NewBucket() + "/half";
  {
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(url, "s3", KvWriterOptions{}, &w).ok());
    ASSERT_TRUE(w->Put("H", "header").ok());
    // Destroyed without Commit: data objects may be there, the index is not.
  }
  std::unique_ptr<KvReader> kv;
  Status s = OpenKvReader(url, {}, &kv);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find("no dsfs store there"), std::string::npos);
}

TEST(S3StoreTest, DiskCacheServesASecondReaderWithoutGetsAndIsChecked) {
  SKIP_WITHOUT_CEPH();
  PackedTree tree;
  std::string url = "s3://" + NewBucket() + "/c";
  ASSERT_EQ(Dsfs({"push", "-q", tree.store, url}).exit_code, 0);
  std::unique_ptr<Store> local;
  ASSERT_TRUE(Store::Open(tree.store, StoreOptions{}, &local).ok());
  auto want = StoreListing(*local);
  TempDir cache;
  KvReaderOptions ko;
  ko.cache_dir = cache.path();
  ko.cache_disk_bytes = 1ull << 30;
  std::unique_ptr<KvReader> kv;
  EXPECT_EQ(ListingOf(url, ko, &kv), want);
  S3ReaderStats first;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &first));
  EXPECT_GT(first.gets, 1u);
  // Adjacent values come in one GET: far fewer GETs than values read.
  EXPECT_LT(first.gets, first.disk_misses + first.disk_hits);
  // The files of one payload group, read one after another, read the group once.
  uint64_t recent = 0;
  for (const auto& [name, n] : kv->Counters()) {
    if (name == "recent_value_hits") recent = n;
  }
  EXPECT_GT(recent, 0u);
  kv.reset();
  // A later reader of the same store: only the index is fetched.
  EXPECT_EQ(ListingOf(url, ko, &kv), want);
  S3ReaderStats second;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &second));
  EXPECT_EQ(second.gets, 1u);
  EXPECT_EQ(second.disk_misses, 0u);
  kv.reset();
  // Damaged cache files: detected by the checksums, fetched again, never served.
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache.path())) {
    if (!e.is_regular_file() || e.path().filename() == "index") continue;
    int fd = ::open(e.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    for (off_t off = 0; off < static_cast<off_t>(e.file_size()); off += 4096) {
      char c = 'X';
      ASSERT_EQ(::pwrite(fd, &c, 1, off), 1);
    }
    ::close(fd);
  }
  EXPECT_EQ(ListingOf(url, ko, &kv), want);
  S3ReaderStats third;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &third));
  EXPECT_GT(third.disk_misses, 0u);
  EXPECT_GT(third.gets, 1u);
}

TEST(S3StoreTest, LargeValuesComeInParallelPiecesAndConcurrentMissesShareOneGet) {
  SKIP_WITHOUT_CEPH();
  TempDir dir;
  std::string big = RandomBytes(20 << 20, 3);
  WriteFile(dir / "src/big.bin", big);
  for (int i = 0; i < 8; ++i)
    WriteFile(dir / ("src/s/f" + std::to_string(i)), RandomBytes(5000, i));
  CommandResult r = Dsfs(
      {"pack", "-q", "--backend", "rocksdb", "--chunk-size", "16M", dir / "src", dir / "store"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::string url = "s3://" + NewBucket() + "/l";
  ASSERT_EQ(Dsfs({"push", "-q", dir / "store", url}).exit_code, 0);
  TempDir cache;
  KvReaderOptions ko;
  ko.cache_dir = cache.path();
  ko.cache_disk_bytes = 1ull << 30;
  std::unique_ptr<KvReader> kv;
  ASSERT_TRUE(OpenKvReader(url, ko, &kv).ok());
  // Every thread reads the 16 MiB value at once: one fetch (two 8 MiB GETs), shared.
  std::string first_key;
  PinnedValue v;
  ASSERT_TRUE(kv->Seek("P", &first_key, &v).ok());
  S3ReaderStats before;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &before));
  std::vector<std::thread> threads;
  std::vector<std::string> got(8);
  std::string big_key;
  // The largest value of the store: the first chunk of big.bin.
  std::string key = "P";
  size_t largest = 0;
  for (;;) {
    std::string found;
    PinnedValue pv;
    if (!kv->Seek(key, &found, &pv).ok()) break;
    if (pv.size() > largest) {
      largest = pv.size();
      big_key = found;
    }
    key = found + std::string(1, '\0');
  }
  ASSERT_GT(largest, 8u << 20);
  kv.reset();
  ASSERT_TRUE(OpenKvReader(url, {}, &kv).ok());  // no disk cache: nothing found there
  kv.reset();
  std::filesystem::remove_all(cache.path());
  ASSERT_TRUE(OpenKvReader(url, ko, &kv).ok());
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      PinnedValue pv;
      if (kv->Get(big_key, &pv).ok()) got[i] = std::string(pv.data());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < 8; ++i) EXPECT_EQ(got[i], got[0]);
  EXPECT_EQ(got[0].size(), largest);
  S3ReaderStats after;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &after));
  // The index, then the value's 1 MiB blocks (17 or 18 of them: it is not aligned) in 8 MiB
  // pieces: 3, once, whatever the number of threads.
  EXPECT_EQ(after.gets, 1u + 3u);
  kv.reset();
  std::unique_ptr<Store> local;
  ASSERT_TRUE(Store::Open(dir / "store", StoreOptions{}, &local).ok());
  EXPECT_EQ(ListingOf(url, ko), StoreListing(*local));
}

TEST(S3StoreTest, LargeCompressibleValuesAreStoredCompressed) {
  SKIP_WITHOUT_CEPH();
  std::string bucket = NewBucket();
  std::string url = "s3://" + bucket + "/z";
  std::string table = TextBytes(4 << 20, 5), random = RandomBytes(2 << 20, 6);
  {
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(url, "s3", KvWriterOptions{}, &w).ok());
    ASSERT_TRUE(w->Put("H", "header").ok());
    ASSERT_TRUE(w->Put("N", table).ok());
    ASSERT_TRUE(w->Put("P1", random).ok());
    ASSERT_TRUE(w->Commit().ok());
  }
  uint64_t size = 0;
  std::vector<std::string> keys;
  ASSERT_TRUE(Client()->List(bucket, "z/data/", &keys).ok());
  ASSERT_EQ(keys.size(), 1u);
  ASSERT_TRUE(Client()->Head(bucket, keys[0], &size).ok());
  EXPECT_LT(size, table.size() / 2 + random.size() + 100) << "the text table is not compressed";
  EXPECT_GE(size, random.size()) << "random bytes cannot shrink";
  for (bool cached : {false, true, true}) {
    TempDir cache;
    KvReaderOptions ko;
    if (cached) {
      ko.cache_dir = cache.path();
      ko.cache_disk_bytes = 1 << 30;
    }
    std::unique_ptr<KvReader> kv;
    ASSERT_TRUE(OpenKvReader(url, ko, &kv).ok());
    PinnedValue v;
    ASSERT_TRUE(kv->Get("N", &v).ok());
    EXPECT_TRUE(v.data() == table);
    ASSERT_TRUE(kv->Get("P1", &v).ok());
    EXPECT_TRUE(v.data() == random);
    ASSERT_TRUE(kv->Get("N", &v).ok());  // from the disk cache when there is one
    EXPECT_TRUE(v.data() == table);
  }
}

uint64_t AllocatedBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (e.is_regular_file() && ::stat(e.path().c_str(), &st) == 0 &&
        e.path().filename() != "index") {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

TEST(S3StoreTest, DiskCacheStaysWithinItsBudget) {
  SKIP_WITHOUT_CEPH();
  PackedTree tree(200);  // ~6 MB stored plus the 3 MiB file
  std::string url = "s3://" + NewBucket() + "/e";
  ASSERT_EQ(Dsfs({"push", "-q", tree.store, url}).exit_code, 0);
  std::unique_ptr<Store> local;
  ASSERT_TRUE(Store::Open(tree.store, StoreOptions{}, &local).ok());
  TempDir cache;
  KvReaderOptions ko;
  ko.cache_dir = cache.path();
  ko.cache_disk_bytes = 3 << 20;
  std::unique_ptr<KvReader> kv;
  EXPECT_EQ(ListingOf(url, ko, &kv), StoreListing(*local));
  S3ReaderStats st;
  ASSERT_TRUE(GetS3ReaderStats(kv.get(), &st));
  EXPECT_GT(st.evicted_blocks, 0u);
  EXPECT_LE(AllocatedBytes(cache.path()), ko.cache_disk_bytes);
  kv.reset();
  // A reader that starts over a full cache keeps to the budget too.
  EXPECT_EQ(ListingOf(url, ko, &kv), StoreListing(*local));
  EXPECT_LE(AllocatedBytes(cache.path()), ko.cache_disk_bytes);
}

// ---- Mounts --------------------------------------------------------------------------------

TEST(S3MountTest, MountReadsTheTreeAndErrorsAreOneLine) {
  SKIP_WITHOUT_CEPH();
  SKIP_UNLESS_CAN_MOUNT();
  PackedTree tree;
  std::string bucket = NewBucket();
  std::string url = "s3://" + bucket + "/m";
  ASSERT_EQ(Dsfs({"push", "-q", tree.store, url}).exit_code, 0);
  std::string mp = tree.dir / "mnt", cache = tree.dir / "cache", log = tree.dir / "log";
  MakeDir(mp);
  {
    MountGuard g(mp);
    CommandResult r = g.MountBackground(
        url, {"-o", "cache_dir=" + cache + ",cache_disk=64M,log_file=" + log + ",log_level=debug"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(TreeListing(mp), TreeListing(tree.src));
    // The keys are nowhere a user of the machine reads: the daemon's command line, its log.
    for (pid_t pid : g.daemons()) {
      std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      EXPECT_EQ(cmdline.find(g_ceph->secret), std::string::npos);
      EXPECT_EQ(cmdline.find(g_ceph->access), std::string::npos);
    }
    std::string stats = ReadFile(mp + "/.dsfs/stats");
    EXPECT_EQ(stats.find(g_ceph->secret), std::string::npos);
  }
  std::string logged = ReadFile(log);
  EXPECT_EQ(logged.find(g_ceph->secret), std::string::npos);
  EXPECT_EQ(logged.find(g_ceph->access), std::string::npos);
  // 404: no store there; 403: wrong keys. One line each, nothing mounted.
  MountGuard g(mp);
  EXPECT_TRUE(IsOneLineError(g.MountBackground("s3://" + bucket + "/nothing"), {"no dsfs store"}));
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret", 1);
  CommandResult denied = g.MountBackground(url);
  ::setenv("AWS_SECRET_ACCESS_KEY", g_ceph->secret.c_str(), 1);
  EXPECT_TRUE(IsOneLineError(denied, {"access denied"}));
  EXPECT_EQ(denied.err.find("wrong-secret"), std::string::npos);
  EXPECT_FALSE(IsMounted(mp));
}

TEST(S3MountTest, RetryBudgetMountOptionsReachTheClient) {
  SKIP_UNLESS_CAN_MOUNT();
  ScopedEnv env;
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
  env.Set("AWS_ACCESS_KEY_ID", "k");
  env.Set("AWS_SECRET_ACCESS_KEY", "s");
  env.Set("DSFS_S3_ATTEMPTS", "3");
  TempDir dir;
  std::string mp = dir / "mnt";
  MakeDir(mp);
  MountGuard g(mp);
  EXPECT_TRUE(IsOneLineError(
      g.MountBackground("s3://bucket/x", {"-o", "cache_disk=0,s3_attempts=1,s3_timeout=2"}),
      {"gave up after 1 tries"}));
  EXPECT_TRUE(IsOneLineError(g.MountBackground("s3://bucket/x", {"-o", "cache_disk=0"}),
                             {"gave up after 3 tries"}));
  CommandResult bad = g.MountBackground("s3://bucket/x", {"-o", "s3_attempts=0"});
  EXPECT_EQ(bad.exit_code, 2) << Describe(bad);  // a usage error
  EXPECT_NE(bad.err.find("s3_attempts=0: not a whole number from 1 to 1000"), std::string::npos)
      << Describe(bad);
  EXPECT_FALSE(IsMounted(mp));
}

// Stops and starts only the gateway: the cluster (and the objects) stay.
void StopRgw() { ASSERT_EQ(RunCommand({Script(), "stop-rgw", g_ceph->dir}).exit_code, 0); }
void StartRgw() {
  CommandResult r = RunCommand({Script(), "start-rgw", g_ceph->dir}, 120);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
}

TEST(S3MountTest, OutageGivesEioAfterTheRetryBudgetCachedFilesServeAndReadsRecover) {
  SKIP_WITHOUT_CEPH();
  SKIP_UNLESS_CAN_MOUNT();
  PackedTree tree(80);
  std::string url = "s3://" + NewBucket() + "/f";
  ASSERT_EQ(Dsfs({"push", "-q", tree.store, url}).exit_code, 0);
  std::string mp = tree.dir / "mnt", cache = tree.dir / "cache";
  MakeDir(mp);
  std::vector<std::string> cached = {"d0/f0", "d0/f4"};
  {
    MountGuard g(mp);
    ASSERT_EQ(g.MountBackground(url, {"-o", "cache_dir=" + cache + ",cache_size=0"}).exit_code, 0);
    for (const auto& f : cached) EXPECT_EQ(ReadFile(mp + "/" + f), ReadFile(tree.src + "/" + f));
    StopRgw();
    // A file never read: EIO once the retries are spent, in bounded time (no hang).
    auto t0 = Clock::now();
    std::string data, error;
    EXPECT_FALSE(ReadAll(mp + "/big.bin", &data, &error, 1 << 20));
    EXPECT_NE(error.find("Input/output error"), std::string::npos) << error;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));
    // What was read before still serves.
    for (const auto& f : cached) EXPECT_EQ(ReadFile(mp + "/" + f), ReadFile(tree.src + "/" + f));
    StartRgw();
    // Back: the same file reads, byte for byte.
    ASSERT_TRUE(ReadAll(mp + "/big.bin", &data, &error, 1 << 20)) << error;
    EXPECT_EQ(data, ReadFile(tree.src + "/big.bin"));
  }
  // A mount while the endpoint is down: the cached index, one warning, the cached files.
  StopRgw();
  {
    MountGuard g(mp);
    CommandResult r = g.MountBackground(url, {"-o", "cache_dir=" + cache + ",cache_size=0"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    if (r.exit_code == 0) {
      for (const auto& f : cached) EXPECT_EQ(ReadFile(mp + "/" + f), ReadFile(tree.src + "/" + f));
    }
  }
  StartRgw();
}

// A network namespace of this test with a relay (tests/support/netns_proxy.py) from its
// 127.0.0.1:8000 to the gateway: another node, 1 ms away each way. The delay is a `tc netem` on the
// namespace's loopback, or, where the kernel has no netem, the relay's own delay line. No
// address outside the namespace. Removed, and the relay ended by PID, at the end.
class NetnsNode {
 public:
  NetnsNode() : name_("dsfs-s3-" + std::to_string(::getpid())) {
    CommandResult r = RunCommand({"ip", "netns", "add", name_});
    if (r.exit_code != 0) {
      error_ = "ip netns add: " + Describe(r);
      return;
    }
    made_ = true;
    r = RunCommand({"ip", "-n", name_, "link", "set", "lo", "up"});
    if (r.exit_code != 0) {
      error_ = "lo up: " + Describe(r);
      return;
    }
    r = RunCommand(
        {"tc", "-n", name_, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"});
    const bool netem = r.exit_code == 0;
    if (!netem) {
      std::string why = r.err.substr(0, r.err.find('\n'));
      std::printf("no tc netem (%s): the relay delays by 1 ms each way\n", why.c_str());
    }
    const std::string port = g_ceph->endpoint.substr(g_ceph->endpoint.rfind(':') + 1);
    proxy_ = ::fork();
    if (proxy_ == 0) {
      int log =
          ::open(("/tmp/" + name_ + ".proxy.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (log >= 0) {
        ::dup2(log, 1);
        ::dup2(log, 2);
      }
      std::string script = std::string(DSFS_SOURCE_DIR) + "/tests/support/netns_proxy.py";
      ::execl("/usr/bin/python3", "python3", script.c_str(), name_.c_str(), "8000", port.c_str(),
              netem ? "0" : "1", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Listening once the namespace shows the port.
    if (!WaitUntil(
            [&] {
              return RunCommand(
                         {"nsenter", "--net=/run/netns/" + name_, "ss", "-ltnH", "sport = :8000"})
                         .out.find("8000") != std::string::npos;
            },
            std::chrono::seconds(20))) {
      error_ = "netns_proxy.py did not start: " + ReadFile("/tmp/" + name_ + ".proxy.log");
    }
  }
  ~NetnsNode() {
    if (proxy_ > 0) {
      ::kill(proxy_, SIGKILL);
      ::waitpid(proxy_, nullptr, 0);
    }
    if (made_) RunCommand({"ip", "netns", "del", name_});
    std::error_code ec;
    std::filesystem::remove("/tmp/" + name_ + ".proxy.log", ec);
  }
  const std::string& error() const { return error_; }
  bool made() const { return made_; }
  // `dsfs mount` run inside the namespace (its daemon stays there), reaching the gateway
  // through the relay.
  CommandResult Mount(MountGuard* g, const std::string& url, const std::string& options) {
    CommandResult r = RunCommand({"nsenter", "--net=/run/netns/" + name_, "env",
                                  "AWS_ENDPOINT_URL=http://127.0.0.1:8000", DsfsBinary(), "mount",
                                  url, g->mountpoint(), "-o", options});
    g->Adopt();
    if (r.exit_code != 0) {
      int st = 0;
      pid_t gone = ::waitpid(proxy_, &st, WNOHANG);
      r.err += "[relay " + std::string(gone == proxy_ ? "exited " + std::to_string(st) : "runs") +
               ": " + ReadFile("/tmp/" + name_ + ".proxy.log") + "]";
      r.err += "[listening in " + name_ + ": " +
               RunCommand({"nsenter", "--net=/run/netns/" + name_, "ss", "-ltnp"}).out + "]";
    }
    return r;
  }

 private:
  std::string name_, error_;
  bool made_ = false;
  pid_t proxy_ = -1;
};

TEST(S3MountTest, ThreeMountsOfOneStoreReadAlikeInParallelAndARemountNeedsNoGet) {
  SKIP_WITHOUT_CEPH();
  SKIP_UNLESS_CAN_MOUNT();
  PackedTree tree(120);
  std::string url = "s3://" + NewBucket() + "/n";
  ASSERT_EQ(Dsfs({"push", "-q", tree.store, url}).exit_code, 0);
  auto want = TreeListing(tree.src);
  std::vector<std::unique_ptr<MountGuard>> mounts;
  // Mount 2 is another node: its own network namespace, 1 ms away from the gateway.
  NetnsNode node;
  if (!node.made()) {
    // No network namespaces here (a container without CAP_SYS_ADMIN in its network): the three
    // mounts share this one, said plainly.
    std::printf("mount 2 in this network namespace: %s\n", node.error().c_str());
  } else {
    ASSERT_EQ(node.error(), "");
  }
  for (int i = 0; i < 3; ++i) {
    std::string mp = tree.dir / ("mnt" + std::to_string(i));
    MakeDir(mp);
    mounts.push_back(std::make_unique<MountGuard>(mp));
    const std::string cache_opt = "cache_dir=" + (tree.dir / ("cache" + std::to_string(i)));
    CommandResult r = i == 2 && node.made()
                          ? node.Mount(mounts.back().get(), url, cache_opt)
                          : mounts.back()->MountBackground(url, {"-o", cache_opt});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  std::vector<std::map<std::string, std::string>> got(3);
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&, i] { got[i] = TreeListing(mounts[i]->mountpoint()); });
  }
  for (auto& t : readers) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], want) << "mount " << i;
  // Each mount fetched the store itself; the stats say so.
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(StatsField(mounts[i]->mountpoint(), "remote_gets"), 1u);
    EXPECT_GT(StatsField(mounts[i]->mountpoint(), "remote_get_bytes"), 3u << 20);
  }
  // Mount 0 again with its cache kept (a restarted node's second epoch): one request, for the
  // index (is the store still the one cached?), and every byte from the disk.
  std::string mp0 = mounts[0]->mountpoint();
  mounts[0].reset();
  {
    MountGuard g(mp0);
    CommandResult r = g.MountBackground(url, {"-o", "cache_dir=" + (tree.dir / "cache0")});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(TreeListing(mp0), want);
    EXPECT_EQ(StatsField(mp0, "remote_gets"), 1u) << "the index only";
    EXPECT_EQ(StatsField(mp0, "disk_cache_misses"), 0u);
    EXPECT_GT(StatsField(mp0, "disk_cache_hits"), 10u);
  }
  // And with the gateway down: the same, from the cached index.
  StopRgw();
  {
    MountGuard g(mp0);
    CommandResult r = g.MountBackground(url, {"-o", "cache_dir=" + (tree.dir / "cache0")});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    if (r.exit_code == 0) {
      EXPECT_EQ(TreeListing(mp0), want);
      EXPECT_EQ(StatsField(mp0, "remote_gets"), 1u) << "only the index, which failed";
      EXPECT_EQ(StatsField(mp0, "disk_cache_misses"), 0u);
      EXPECT_GT(StatsField(mp0, "disk_cache_hits"), 10u);
    }
  }
  StartRgw();
}

}  // namespace
}  // namespace dsfs::testing
