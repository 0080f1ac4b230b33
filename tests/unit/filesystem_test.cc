#include "fs/filesystem.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fs/prefetcher.h"
#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::PackToMemory;
using testing::TempDir;
using testing::WriteFile;

class FilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_ / "src/cls_a/1.jpg", "one", 0640);
    WriteFile(dir_ / "src/cls_a/2.jpg", "two");
    WriteFile(dir_ / "src/cls_b/3.jpg", std::string(10000, 'z'), 0755);
    ASSERT_EQ(::symlink("cls_a/1.jpg", (dir_ / "src/alias").c_str()), 0);
    std::shared_ptr<MemTable> table;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(PackToMemory(dir_ / "src", PackOptions{}, &table_, &store).ok());
    FsOptions o;
    o.uid = 1234;
    o.gid = 5678;
    fs_ = std::make_unique<Filesystem>(std::move(store), o);
  }

  uint64_t Ino(uint64_t parent, const std::string& name) {
    struct stat st;
    EXPECT_TRUE(fs_->Lookup(parent, name, &st).ok()) << name;
    return st.st_ino;
  }

  std::map<std::string, uint64_t> List(uint64_t ino, uint64_t offset = 0) {
    std::map<std::string, uint64_t> out;
    EXPECT_TRUE(fs_->ReadDir(ino, offset,
                             [&](std::string_view name, const struct stat& st, uint64_t) {
                               out[std::string(name)] = st.st_ino;
                               return true;
                             })
                    .ok());
    return out;
  }

  TempDir dir_;
  std::shared_ptr<MemTable> table_;
  std::unique_ptr<Filesystem> fs_;
};

// A READ of the original tree decodes (and checks) its inode record once: the prefetcher gets
// the record the read decoded.
TEST_F(FilesystemTest, AReadDecodesItsInodeRecordOnce) {
  auto cache = std::make_shared<ByteCache>(1 << 20);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(table_), &store, cache).ok());
  Filesystem fs(std::move(store), FsOptions{}, cache);
  Prefetcher prefetcher(&fs.store(), cache.get(), fs.inode_space(), Prefetcher::Options{}, nullptr);
  struct stat st;
  ASSERT_TRUE(fs.Lookup(1, "cls_b", &st).ok());
  ASSERT_TRUE(fs.Lookup(st.st_ino, "3.jpg", &st).ok());
  const uint64_t ino = st.st_ino;
  ReadBuffer buf;
  std::string_view out;
  for (bool with_prefetcher : {false, true}) {
    fs.SetPrefetcher(with_prefetcher ? &prefetcher : nullptr);
    for (uint64_t off : {0, 4096}) {
      prefetcher.WaitIdle();
      const uint64_t before = fs.store().inode_decodes();
      ASSERT_TRUE(fs.Read(ino, off, 4096, &buf, &out).ok());
      EXPECT_EQ(fs.store().inode_decodes() - before, 1u) << with_prefetcher << " " << off;
    }
  }
  prefetcher.WaitIdle();
  fs.SetPrefetcher(nullptr);
}

TEST_F(FilesystemTest, LookupAndGetAttrAgree) {
  struct stat a, b;
  ASSERT_TRUE(fs_->Lookup(1, "cls_a", &a).ok());
  EXPECT_TRUE(S_ISDIR(a.st_mode));
  ASSERT_TRUE(fs_->Lookup(a.st_ino, "1.jpg", &b).ok());
  EXPECT_EQ(b.st_size, 3);
  EXPECT_EQ(b.st_mode, static_cast<mode_t>(S_IFREG | 0640));
  EXPECT_EQ(b.st_uid, 1234u);
  EXPECT_EQ(b.st_gid, 5678u);
  struct stat c;
  ASSERT_TRUE(fs_->GetAttr(b.st_ino, &c).ok());
  EXPECT_EQ(c.st_ino, b.st_ino);
  EXPECT_EQ(c.st_size, b.st_size);
  EXPECT_EQ(c.st_mtim.tv_sec, b.st_mtim.tv_sec);
  EXPECT_TRUE(fs_->Lookup(1, "nope", &c).IsNotFound());
  EXPECT_TRUE(fs_->Lookup(b.st_ino, "x", &c).code() == Status::Code::kInvalidArgument);
  EXPECT_TRUE(fs_->GetAttr(999999, &c).IsNotFound());
  EXPECT_TRUE(fs_->GetAttr(0, &c).IsNotFound());
  EXPECT_TRUE(fs_->GetAttr(1ull << 40, &c).IsNotFound());
  ASSERT_TRUE(fs_->Lookup(a.st_ino, "..", &c).ok());
  EXPECT_EQ(c.st_ino, 1u);
}

TEST_F(FilesystemTest, ReadDirListsDotsThenEntriesAndResumes) {
  auto root = List(1);
  EXPECT_EQ(root.size(), 5u);  // . .. alias cls_a cls_b
  EXPECT_EQ(root["."], 1u);
  EXPECT_EQ(root[".."], 1u);
  EXPECT_EQ(root["cls_a"], Ino(1, "cls_a"));
  // Resuming at each offset yields the rest, in order.
  std::vector<std::string> all;
  uint64_t next = 0;
  for (;;) {
    bool got = false;
    ASSERT_TRUE(fs_->ReadDir(1, next,
                             [&](std::string_view name, const struct stat&, uint64_t n) {
                               all.emplace_back(name);
                               next = n;
                               got = true;
                               return false;  // one entry per call, as with a tiny reply buffer
                             })
                    .ok());
    if (!got) break;
  }
  EXPECT_EQ(all, (std::vector<std::string>{".", "..", "alias", "cls_a", "cls_b"}));
  EXPECT_TRUE(List(1, 100).empty());
  struct stat st;
  EXPECT_TRUE(fs_->ReadDir(Ino(1, "alias"), 0,
                           [](std::string_view, const struct stat&, uint64_t) { return true; })
                  .code() == Status::Code::kInvalidArgument);
  (void)st;
}

TEST_F(FilesystemTest, OpenRefusesWritesAndDirectories) {
  uint64_t f = Ino(Ino(1, "cls_a"), "1.jpg");
  EXPECT_TRUE(fs_->Open(f, O_RDONLY).ok());
  for (int flags : {O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC, O_WRONLY | O_APPEND, O_RDWR | O_CREAT}) {
    Status s = fs_->Open(f, flags);
    EXPECT_EQ(s.ToErrno(), EROFS) << flags;
  }
  EXPECT_EQ(fs_->Open(Ino(1, "cls_a"), O_RDONLY).code(), Status::Code::kInvalidArgument);
}

TEST_F(FilesystemTest, ReadReadLinkStatFs) {
  uint64_t f = Ino(Ino(1, "cls_b"), "3.jpg");
  ReadBuffer buf;
  std::string_view out;
  ASSERT_TRUE(fs_->Read(f, 9990, 4096, &buf, &out).ok());
  EXPECT_EQ(out, std::string(10, 'z'));
  ASSERT_TRUE(fs_->Read(f, 20000, 4096, &buf, &out).ok());
  EXPECT_TRUE(out.empty());
  std::string_view target;
  ASSERT_TRUE(fs_->ReadLink(Ino(1, "alias"), &target).ok());
  EXPECT_EQ(target, "cls_a/1.jpg");
  EXPECT_EQ(fs_->ReadLink(f, &target).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(fs_->Read(Ino(1, "cls_a"), 0, 10, &buf, &out).code(), Status::Code::kInvalidArgument);
  struct statvfs vfs;
  ASSERT_TRUE(fs_->StatFs(&vfs).ok());
  EXPECT_EQ(vfs.f_files, 7u);
  EXPECT_TRUE(vfs.f_flag & ST_RDONLY);
}

TEST_F(FilesystemTest, StatsFileIsHiddenAndLive) {
  // Not listed at the root, so ImageFolder(root) never sees it...
  auto root = List(1);
  EXPECT_EQ(root.count(".dsfs"), 0u);
  // ...but reachable by name.
  struct stat dir, st;
  ASSERT_TRUE(fs_->Lookup(1, ".dsfs", &dir).ok());
  EXPECT_TRUE(S_ISDIR(dir.st_mode));
  EXPECT_FALSE(fs_->IsVirtual(dir.st_ino));  // cached: paths into the views go through it
  EXPECT_FALSE(fs_->IsVirtual(1));
  auto listing = List(dir.st_ino);
  EXPECT_EQ(listing.size(), 6u);  // ., .., stats and the three views
  for (const char* name : {"stats", "bmp", "npy", "tensor"}) EXPECT_EQ(listing.count(name), 1u);
  ASSERT_TRUE(fs_->Lookup(dir.st_ino, "stats", &st).ok());
  EXPECT_EQ(st.st_ino, listing["stats"]);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_TRUE(fs_->IsVirtual(st.st_ino));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), Filesystem::kStatsBytes);
  EXPECT_TRUE(fs_->Lookup(dir.st_ino, "nope", &st).IsNotFound());
  EXPECT_FALSE(fs_->Lookup(1, ".dsfs2", &st).ok());

  ReadBuffer buf;
  std::string_view out;
  uint64_t f = Ino(Ino(1, "cls_b"), "3.jpg");
  ASSERT_TRUE(fs_->Read(f, 0, 100000, &buf, &out).ok());
  ASSERT_TRUE(fs_->Read(listing["stats"], 0, 1 << 20, &buf, &out).ok());
  EXPECT_EQ(out.size(), Filesystem::kStatsBytes);
  EXPECT_EQ(out.back(), '\n');
  std::string json(out);
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"bytes_served\": 10000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"read\": 2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"files\": 3"), std::string::npos) << json;
  // One line, members in their order, separated by ", " and ": " (tools read it so).
  EXPECT_EQ(json.rfind("{\"uptime_s\": ", 0), 0u) << json;
  EXPECT_NE(json.find("\"bytes_served\": 10000, \"read_errors\": 0, \"cache\": {}, "
                      "\"decompress\": {\"chunks\": "),
            std::string::npos)
      << json;
  EXPECT_EQ(json.find('\n'), Filesystem::kStatsBytes - 1) << json;
  auto parsed = nlohmann::ordered_json::parse(json);
  std::vector<std::string> keys;
  for (const auto& item : parsed.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"uptime_s", "requests", "bytes_served", "read_errors",
                                            "cache", "decompress", "views", "store", "latency"}));
  EXPECT_EQ(parsed["requests"]["read"], 2);
  EXPECT_EQ(parsed["store"]["files"], 3);
  // Reads at an offset return the rest.
  ASSERT_TRUE(fs_->Read(listing["stats"], Filesystem::kStatsBytes - 1, 10, &buf, &out).ok());
  EXPECT_EQ(out, "\n");
  EXPECT_EQ(fs_->Read(dir.st_ino, 0, 10, &buf, &out).code(), Status::Code::kInvalidArgument);
}

// The STATUS= line systemd shows: requests served, bytes read, errors and the cache fill.
TEST_F(FilesystemTest, StatusLineCountsRequests) {
  EXPECT_EQ(fs_->StatusLine(), "serving: 0 requests, 0 B read, 0 errors; no cache");
  ReadBuffer buf;
  std::string_view out;
  uint64_t f = Ino(Ino(1, "cls_b"), "3.jpg");  // two lookups
  ASSERT_TRUE(fs_->Read(f, 0, 100000, &buf, &out).ok());
  EXPECT_EQ(fs_->StatusLine(), "serving: 3 requests, 10.0 kB read, 0 errors; no cache");

  // With a RAM cache: its fill and hit rate.
  std::shared_ptr<MemTable> table;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(PackToMemory(dir_ / "src", PackOptions{}, &table, &store).ok());
  std::unique_ptr<Store> cached;
  auto cache = std::make_shared<ByteCache>(1000000);
  ASSERT_TRUE(Store::Open(NewMemReader(table), &cached, cache).ok());
  Filesystem fs(std::move(cached), FsOptions{}, cache);
  std::string line = fs.StatusLine();
  EXPECT_NE(line.find("cache 0 B of 1.0 MB, 0% hits"), std::string::npos) << line;
}

// The FUSE layer says which transport serves; the stats file and the status line show it.
TEST_F(FilesystemTest, StatsShowTheTransport) {
  EXPECT_EQ(fs_->StatsJson().find("transport"), std::string::npos);
  fs_->SetTransportStats([] {
    Filesystem::TransportStats t;
    t.description = "classic (a \"quoted\" reason)";
    t.ring_requests = 7;
    t.classic_requests = 3;
    t.per_queue_requests = {5, 2};
    t.ioctls = 4;
    return t;
  });
  std::string j = fs_->StatsJson();
  EXPECT_NE(j.find("\"transport\": {\"serving\": \"classic (a \\\"quoted\\\" reason)\", "
                   "\"ring_requests\": 7, \"classic_requests\": 3, "
                   "\"queue_requests\": {\"0\": 5, \"1\": 2}, \"ioctls\": 4}"),
            std::string::npos)
      << j;
  EXPECT_NE(fs_->StatusLine().find("; transport classic (a \"quoted\" reason)"), std::string::npos)
      << fs_->StatusLine();
  fs_->SetTransportStats(nullptr);
  EXPECT_EQ(fs_->StatsJson().find("transport"), std::string::npos);
}

}  // namespace
}  // namespace dsfs
