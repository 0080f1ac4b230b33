// Resource limits against crafted stores: a store whose (checksummed, so deliberately crafted)
// metadata claims huge images, huge files, huge chunks, parent loops or very deep trees is
// refused or answers errors, without allocating without bound, looping or overflowing the stack.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <sstream>

#include "backend/kv_open.h"
#include "fs/filesystem.h"
#include "store/format.h"
#include "store/segments.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/test_util.h"
#include "tools/commands.h"

namespace dsfs::testing {
namespace {

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string images = std::string(DSFS_FUZZ_DIR) + "/corpus/image/";
    WriteFile(dir_ / "src/train/c0/a.jpg", ReadFile(images + "rgb8.jpg"));
    WriteFile(dir_ / "src/train/c0/b.jpg", ReadFile(images + "gray8.jpg"));
    WriteFile(dir_ / "src/train/c1/c.png", ReadFile(images + "rgb8.png"));
    WriteFile(dir_ / "src/notes.txt", TextBytes(10000, 3));
    options_.chunk_bytes = 4096;
    options_.dict_bytes = 0;
    options_.predecode = true;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(PackToMemory(dir_ / "src", options_, &table_, &store).ok());
    for (uint32_t ino = 1; ino <= store->inode_count(); ++ino) {
      InodeRecord r;
      ASSERT_TRUE(store->GetInode(ino, &r).ok());
      records_.push_back(r);
    }
    InodeRecord r;
    ASSERT_TRUE(store->LookupPath("train/c0/a.jpg", &a_, &r).ok());
    ASSERT_TRUE(store->LookupPath("train/c0/b.jpg", &b_, &r).ok());
    ASSERT_TRUE(store->LookupPath("notes.txt", &notes_, &r).ok());
    ASSERT_TRUE(IsDecodableImage(records_[a_ - 1]));
    std::string inode_bytes;
    ASSERT_TRUE(ReadMetadataTables(NewMemReader(table_).get(), &inode_bytes, &names_).ok());
  }

  // Writes `records` and names_ back (new layout, metadata segments, header) with every
  // checksum right.
  void Rewrite(const std::vector<InodeRecord>& records) {
    InodeLayout l = InodeLayout::For(records);
    table_->data[std::string(kLayoutKey)] = l.Serialize();
    std::string inodes(records.size() * l.record_bytes(), '\0');
    for (size_t i = 0; i < records.size(); ++i) l.Encode(records[i], &inodes[i * l.record_bytes()]);
    StoreHeader h;
    std::memcpy(&h, table_->data.at(std::string(kHeaderKey)).data(), sizeof(h));
    for (auto it = table_->data.begin(); it != table_->data.end();) {
      uint64_t s;
      bool meta = it->first == kSegmentIndexKey ||
                  ParsePayloadKey(it->first, &s, kInodeSegmentSpace) ||
                  ParsePayloadKey(it->first, &s, kNameSegmentSpace);
      it = meta ? table_->data.erase(it) : std::next(it);
    }
    MetadataRecords meta;
    ASSERT_TRUE(EncodeMetadata(records, inodes, l, names_, h.segment_bytes, 3, 1, &meta).ok());
    for (auto& [k, v] : meta.records) table_->data[k] = v;
    h.inode_count = records.size();
    h.names_bytes = names_.size();
    SealHeader(&h);
    table_->data[std::string(kHeaderKey)] = std::string(reinterpret_cast<char*>(&h), sizeof(h));
    fuzz::RepairChecksums(table_.get());
  }

  std::unique_ptr<Filesystem> Mount() {
    std::unique_ptr<Store> store;
    Status s = Store::Open(NewMemReader(table_), &store, std::make_shared<ByteCache>(1 << 20));
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
    return std::make_unique<Filesystem>(std::move(store), FsOptions{});
  }

  // FUSE inode of `path` (components separated by '/', from the root).
  static Status Resolve(const Filesystem& fs, const std::string& path, struct stat* st) {
    uint64_t ino = 1;
    std::istringstream parts(path);
    for (std::string part; std::getline(parts, part, '/');) {
      DSFS_RETURN_IF_ERROR(fs.Lookup(ino, part, st));
      ino = st->st_ino;
    }
    return Status::OK();
  }

  TempDir dir_;
  PackOptions options_;
  std::shared_ptr<MemTable> table_;
  std::vector<InodeRecord> records_;
  std::string names_;  // the name pool
  uint32_t a_ = 0, b_ = 0, notes_ = 0;
};

TEST_F(LimitsTest, ImageClaimingHugeSizesIsServedAsIs) {
  const std::string original = ReadFile(dir_ / "src/train/c0/a.jpg");
  for (auto [w, h] :
       {std::pair<uint32_t, uint32_t>{65535, 65535}, {UINT32_MAX, 2}, {70000, 1}, {2, 40000000}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    auto recs = records_;
    recs[a_ - 1].width = w;
    recs[a_ - 1].height = h;
    Rewrite(recs);
    auto fs = Mount();
    ASSERT_TRUE(fs);
    struct stat st;
    ASSERT_TRUE(Resolve(*fs, ".dsfs/bmp/train/c0/a.jpg", &st).ok());
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), original.size());
    ReadBuffer buf;
    std::string_view out;
    ASSERT_TRUE(fs->Read(st.st_ino, 0, 1 << 20, &buf, &out).ok());
    EXPECT_TRUE(out == original);
    // The tensor view refuses the class instead of sizing images.npy from the claim.
    EXPECT_TRUE(Resolve(*fs, ".dsfs/tensor/train/images.npy", &st).IsNotFound());
  }
}

TEST_F(LimitsTest, ClaimedImageSizeWithinLimitsButWrongFailsWithEio) {
  auto recs = records_;
  recs[a_ - 1].width = 8000;  // 64 M pixels: within the limits, but not what is stored
  recs[a_ - 1].height = 8000;
  Rewrite(recs);
  auto fs = Mount();
  ASSERT_TRUE(fs);
  struct stat st;
  ASSERT_TRUE(Resolve(*fs, ".dsfs/npy/train/c0/a.jpg.npy", &st).ok());
  ReadBuffer buf;
  std::string_view out;
  Status s = fs->Read(st.st_ino, 0, 4096, &buf, &out);
  EXPECT_EQ(s.ToErrno(), EIO) << s.ToString();
}

TEST_F(LimitsTest, HugeChunkSizeInTheHeaderIsRefused) {
  StoreHeader h;
  std::memcpy(&h, table_->data.at(std::string(kHeaderKey)).data(), sizeof(h));
  h.chunk_bytes = 1u << 30;
  SealHeader(&h);
  table_->data[std::string(kHeaderKey)] = std::string(reinterpret_cast<char*>(&h), sizeof(h));
  std::unique_ptr<Store> store;
  Status s = Store::Open(NewMemReader(table_), &store);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST_F(LimitsTest, FileClaimingAHugeSizeFailsItsReadsOnly) {
  auto recs = records_;
  recs[notes_ - 1].size = uint64_t{1} << 50;
  Rewrite(recs);
  auto fs = Mount();
  ASSERT_TRUE(fs);
  struct stat st;
  ASSERT_TRUE(Resolve(*fs, "notes.txt", &st).ok());
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), uint64_t{1} << 50);
  ReadBuffer buf;
  std::string_view out;
  for (uint64_t off : {uint64_t{0}, uint64_t{1} << 40, (uint64_t{1} << 50) - 10}) {
    Status s = fs->Read(st.st_ino, off, 1 << 17, &buf, &out);
    EXPECT_EQ(s.ToErrno(), EIO) << off << ": " << s.ToString();
  }
  // The images still read.
  ASSERT_TRUE(Resolve(*fs, ".dsfs/npy/train/c0/a.jpg.npy", &st).ok());
  EXPECT_TRUE(fs->Read(st.st_ino, 0, 1 << 20, &buf, &out).ok());
}

TEST_F(LimitsTest, ParentLoopFailsTheTensorFileListInsteadOfHanging) {
  auto recs = records_;
  recs[a_ - 1].parent = b_;  // a -> b -> a
  recs[b_ - 1].parent = a_;
  Rewrite(recs);
  auto fs = Mount();
  ASSERT_TRUE(fs);
  struct stat st;
  ASSERT_TRUE(Resolve(*fs, ".dsfs/tensor/train/files.txt", &st).ok());
  ReadBuffer buf;
  std::string_view out;
  Status s = fs->Read(st.st_ino, 0, 4096, &buf, &out);
  EXPECT_EQ(s.ToErrno(), EIO) << s.ToString();
}

// A chain of 20,000 nested directories (a few hundred KB of store): verify and ls -R refuse it
// as damaged instead of recursing 20,000 levels deep, and the tensor view of the root is
// refused instead of holding 20,000 ever longer paths.
TEST_F(LimitsTest, VeryDeepTreeIsRefusedByTheWalkAndTheTensorView) {
  constexpr uint32_t kDepth = 20000;
  std::vector<InodeRecord> recs(kDepth);
  names_ = "d";
  for (uint32_t i = 0; i < kDepth; ++i) {
    InodeRecord& r = recs[i];
    r = records_[0];  // the root: a directory
    r.parent = i == 0 ? 1 : i;
    r.name_off = 0;
    r.name_len = i == 0 ? 0 : 1;
    r.size = i + 1 < kDepth ? 1 : 0;
    r.data = i + 1 < kDepth ? i + 2 : 0;
  }
  Rewrite(recs);
  for (auto it = table_->data.begin(); it != table_->data.end();) {
    uint64_t id;
    bool payload = ParsePayloadKey(it->first, &id) || ParsePayloadKey(it->first, &id, kPixelSpace);
    it = payload ? table_->data.erase(it) : std::next(it);
  }
  auto fs = Mount();
  ASSERT_TRUE(fs);
  struct stat st;
  EXPECT_TRUE(Resolve(*fs, ".dsfs/tensor/images.npy", &st).IsNotFound());
  EXPECT_TRUE(Resolve(*fs, "d/d/d/d", &st).ok());
  // The same store as a file, through dsfs verify and ls -R.
  const std::string path = dir_ / "deep.db";
  std::unique_ptr<KvWriter> w;
  ASSERT_TRUE(NewKvWriter(path, "lmdb", {}, &w).ok());
  for (const auto& [k, v] : table_->data) ASSERT_TRUE(w->Put(k, v).ok());
  ASSERT_TRUE(w->Commit().ok());
  std::ostringstream out;
  Status s = RunVerify(path, /*quiet=*/false, out, std::cerr);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(out.str().find("deeper than"), std::string::npos) << out.str();
  std::ostringstream listing;
  s = RunLs(path, "/", false, true, listing);
  EXPECT_FALSE(s.ok());
}

// A name longer than the kernel takes (stores packed before pack refused them): verify calls
// the store damaged.
TEST_F(LimitsTest, NameLongerThanTheKernelTakesFailsVerify) {
  std::string& names = names_;
  std::vector<InodeRecord> recs = records_;
  recs[notes_ - 1].name_off = names.size();
  recs[notes_ - 1].name_len = 4096;
  names += std::string(4096, 'N');
  Rewrite(recs);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewMemReader(table_), &store).ok());
  Status s = store->VerifyMetadata();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("name of 4096 bytes"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsfs::testing
