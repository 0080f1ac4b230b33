// Metadata segments (format version 3): the tables cut into compressed segments, fetched
// lazily, cached within a bound, damage refused cleanly; version 2 stores still read.
#include "store/segments.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "pack/packer.h"
#include "store/store.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/fakes/faulty_store.h"
#include "tests/support/fakes/mem_store.h"
#include "tests/support/test_util.h"

namespace dsfs::testing {
namespace {

bool IsSegmentKey(std::string_view key) {
  uint64_t s;
  return ParsePayloadKey(key, &s, kInodeSegmentSpace) ||
         ParsePayloadKey(key, &s, kNameSegmentSpace);
}

class SegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 3 directories of 700 files with long-ish names, symlinks, one with a target of nearly a
    // segment: many segments of 4 KiB.
    for (int d = 0; d < 3; ++d) {
      for (int f = 0; f < 700; ++f) {
        std::string rel =
            "dir" + std::to_string(d) + "/file-with-a-longer-name-" + std::to_string(f) + ".txt";
        files_[rel] = "contents of " + rel;
        WriteFile(dir_ / ("src/" + rel), files_[rel]);
      }
    }
    ::symlink("dir0/file-with-a-longer-name-1.txt", (dir_ / "src/short-link").c_str());
    long_target_ = std::string(4000, 't');  // PATH_MAX bounds a target on disk
    ::symlink(long_target_.c_str(), (dir_ / "src/long-link").c_str());
    options_.segment_bytes = 4096;
    options_.chunk_bytes = 4096;
    options_.dict_bytes = 0;
    options_.threads = 2;
    std::unique_ptr<Store> store;
    ASSERT_TRUE(PackToMemory(dir_ / "src", options_, &table_, &store).ok());
  }

  std::unique_ptr<Store> Open(std::shared_ptr<MemTable> table, uint64_t meta_cache = 0) {
    std::unique_ptr<Store> store;
    Status s = Store::Open(NewMemReader(table), &store, nullptr, meta_cache);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return store;
  }

  // Every file reads back (names through lookups, contents), and both links.
  void CheckEverything(const Store& store) {
    for (const auto& [rel, data] : files_) {
      uint32_t ino;
      InodeRecord r;
      ASSERT_TRUE(store.LookupPath(rel, &ino, &r).ok()) << rel;
      ReadBuffer buf;
      std::string_view out;
      ASSERT_TRUE(store.Read(r, 0, r.size, &buf, &out).ok()) << rel;
      EXPECT_EQ(out, data) << rel;
      std::string path;
      ASSERT_TRUE(store.PathOf(ino, Store::kRootIno, &path).ok());
      EXPECT_EQ(path, rel);
    }
    uint32_t ino;
    InodeRecord r;
    std::string_view target;
    ASSERT_TRUE(store.LookupPath("long-link", &ino, &r).ok());
    ASSERT_TRUE(store.ReadLink(r, &target).ok());
    EXPECT_EQ(target, long_target_);
    ASSERT_TRUE(store.LookupPath("short-link", &ino, &r).ok());
    ASSERT_TRUE(store.ReadLink(r, &target).ok());
    EXPECT_EQ(target, "dir0/file-with-a-longer-name-1.txt");
  }

  TempDir dir_;
  PackOptions options_;
  std::shared_ptr<MemTable> table_;
  std::map<std::string, std::string> files_;
  std::string long_target_;
};

TEST_F(SegmentsTest, TablesAreStoredInCompressedSegmentsThatReadBackWhole) {
  auto store = Open(table_);
  ASSERT_TRUE(store);
  // No dictionary (dict_bytes 0): the groups are kernel frames, format 5.
  EXPECT_EQ(store->header().version, kKernelFormatVersion);
  for (const char* old : {"I", "I.sum", "N", "N.sum"})
    EXPECT_EQ(table_->data.count(old), 0u) << old;
  SegmentIndex ix;
  ASSERT_TRUE(SegmentIndex::Parse(table_->data.at(std::string(kSegmentIndexKey)), &ix).ok());
  EXPECT_GT(ix.inodes.size(), 3u);
  EXPECT_GT(ix.names.size(), 5u);
  const Store::MetadataSize m = store->metadata_size();
  EXPECT_EQ(m.segments, ix.inodes.size() + ix.names.size());
  EXPECT_LT(m.stored_bytes * 2, m.inode_bytes + m.name_bytes) << "names compress well";
  // No name segment over kNameSegmentFactor segments' size raw (only an item longer than that
  // makes one: SegmentsFormatTest).
  for (const SegmentEntry& e : ix.names) {
    EXPECT_LE(e.raw_bytes, kNameSegmentFactor * options_.segment_bytes);
  }
  std::string inodes, names;
  ASSERT_TRUE(ReadMetadataTables(NewMemReader(table_).get(), &inodes, &names).ok());
  EXPECT_EQ(names.size(), store->header().names_bytes);
  EXPECT_EQ(inodes.size(), m.inode_bytes);
  EXPECT_TRUE(store->VerifyMetadata().ok());
  CheckEverything(*store);
}

// Open reads the header, layout, index and the root's segment; a lookup a few more: never the
// whole tables.
TEST_F(SegmentsTest, SegmentsAreFetchedOnlyWhenUsed) {
  auto mu = std::make_shared<std::mutex>();
  auto fetched = std::make_shared<std::set<std::string>>();
  FaultPolicy count = [mu, fetched](std::string_view key) {
    if (IsSegmentKey(key)) {
      std::lock_guard<std::mutex> lock(*mu);
      fetched->insert(std::string(key));
    }
    return Fault::kNone;
  };
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(NewFaultyReader(NewMemReader(table_), count), &store).ok());
  size_t segments = 0;
  for (const auto& [k, v] : table_->data) segments += IsSegmentKey(k);
  EXPECT_EQ(fetched->size(), 1u) << "open fetches the root's inode segment only";
  uint32_t ino;
  InodeRecord r;
  ASSERT_TRUE(store->LookupPath("dir2/file-with-a-longer-name-5.txt", &ino, &r).ok());
  EXPECT_LE(fetched->size(), 8u) << "of " << segments;
  EXPECT_GT(segments, 12u);
}

TEST_F(SegmentsTest, CacheStaysWithinItsBoundWhateverTheTables) {
  constexpr uint64_t kBound = 32 << 10;
  auto store = Open(table_, kBound);
  ASSERT_TRUE(store);
  CheckEverything(*store);
  CheckEverything(*store);
  ByteCache::Stats st = store->metadata_cache_stats();
  EXPECT_LE(st.bytes, kBound);
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.hits, 0u);
}

// A name from GetName stays valid through the next 15 GetName calls, whichever segments they
// touch (the per-thread ring); the store's own lookups meanwhile do not count.
TEST_F(SegmentsTest, NameViewsOutliveLaterLookups) {
  auto store = Open(table_, 8 << 10);  // evicts almost at once
  ASSERT_TRUE(store);
  uint32_t ino;
  InodeRecord r;
  ASSERT_TRUE(store->LookupPath("dir0/file-with-a-longer-name-0.txt", &ino, &r).ok());
  std::string_view held;
  ASSERT_TRUE(store->GetName(r, &held).ok());
  const std::string copy(held);
  for (int i = 0; i < SegmentedTable::kNameRingSlots - 1; ++i) {
    InodeRecord o;
    std::string rel = "dir" + std::to_string(i % 3) + "/file-with-a-longer-name-" +
                      std::to_string(100 + 40 * i) + ".txt";
    ASSERT_TRUE(store->LookupPath(rel, &ino, &o).ok()) << rel;
    std::string_view n;
    ASSERT_TRUE(store->GetName(o, &n).ok());
    EXPECT_EQ(held, copy);
  }
}

// Every segment damaged in turn, with its checksum repaired (so the damage reaches the
// decompressor) or not: refused at open in one line, or a Corruption where it is used; never
// a wrong name or a crash.
TEST_F(SegmentsTest, DamagedSegmentsAreCorruptionNeverWrongNames) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : table_->data) {
    if (IsSegmentKey(k)) keys.push_back(k);
  }
  int refused = 0, failed = 0;
  for (const std::string& key : keys) {
    for (bool repair : {false, true}) {
      for (size_t at : {size_t{0}, size_t{7}, size_t{1} << 30}) {
        auto copy = std::make_shared<MemTable>();
        copy->data = table_->data;
        std::string& v = copy->data.at(key);
        v[std::min(at, v.size() - 1)] ^= 0x41;
        if (repair) fuzz::RepairChecksums(copy.get());
        std::unique_ptr<Store> store;
        Status s = Store::Open(NewMemReader(copy), &store);
        if (!s.ok()) {
          EXPECT_TRUE(s.IsCorruption()) << s.ToString();
          EXPECT_EQ(s.message().find('\n'), std::string::npos);
          ++refused;
          continue;
        }
        Status v_s = store->VerifyMetadata();
        // Damage under a repaired checksum may decompress (a literal changed): nothing can
        // tell then, but it must not crash. Under its own checksum, it never reads.
        if (!v_s.ok()) {
          EXPECT_TRUE(v_s.IsCorruption()) << v_s.ToString();
          ++failed;
        }
        EXPECT_TRUE(repair || !v_s.ok()) << key;
        for (const auto& [rel, data] : files_) {
          uint32_t ino;
          InodeRecord r;
          Status ls = store->LookupPath(rel, &ino, &r);
          if (!ls.ok()) continue;
          ReadBuffer buf;
          std::string_view out;
          if (store->Read(r, 0, r.size, &buf, &out).ok() && !repair) EXPECT_EQ(out, data) << rel;
        }
      }
    }
  }
  EXPECT_GT(failed, int(keys.size()));
  std::printf("[ segments ] %zu segments damaged 6 ways: %d refused at open, %d failed verify\n",
              keys.size(), refused, failed);
}

TEST_F(SegmentsTest, IndexThatDisagreesWithTheStoreIsRefusedAtOpen) {
  SegmentIndex ix;
  ASSERT_TRUE(SegmentIndex::Parse(table_->data.at(std::string(kSegmentIndexKey)), &ix).ok());
  auto with = [&](const std::function<void(SegmentIndex*)>& change) {
    auto copy = std::make_shared<MemTable>();
    copy->data = table_->data;
    SegmentIndex c = ix;
    change(&c);
    copy->data[std::string(kSegmentIndexKey)] = c.Serialize();
    std::unique_ptr<Store> store;
    return Store::Open(NewMemReader(copy), &store);
  };
  Status s = with([](SegmentIndex* c) { c->names.pop_back(); });
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("name table size does not match"), std::string::npos) << s.ToString();
  s = with([](SegmentIndex* c) { c->inodes_per_segment += 1; });
  EXPECT_NE(s.message().find("does not match the inode table"), std::string::npos) << s.ToString();
  s = with([](SegmentIndex* c) { c->inodes.back().raw_bytes += 1; });
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  s = with([](SegmentIndex* c) { c->names[0].raw_bytes = kMaxSegmentRawBytes + 1; });
  EXPECT_NE(s.message().find("impossible segment size"), std::string::npos) << s.ToString();
  // One bit of the index itself: its checksum.
  auto copy = std::make_shared<MemTable>();
  copy->data = table_->data;
  copy->data.at(std::string(kSegmentIndexKey))[9] ^= 1;
  std::unique_ptr<Store> store;
  s = Store::Open(NewMemReader(copy), &store);
  EXPECT_NE(s.message().find("segment index checksum mismatch"), std::string::npos) << s.ToString();
  // A missing segment: that part of the tree fails, named.
  copy->data = table_->data;
  copy->data.erase(SegmentKey(kNameSegmentSpace, 3));
  ASSERT_TRUE(Store::Open(NewMemReader(copy), &store).ok());
  s = store->VerifyMetadata();
  EXPECT_NE(s.message().find("store is missing name segment 3"), std::string::npos) << s.ToString();
}

// A version 2 store (raw "I" and "N" tables with per-segment checksums) reads as before.
TEST_F(SegmentsTest, VersionTwoStoresStillRead) {
  std::string inodes, names;
  ASSERT_TRUE(ReadMetadataTables(NewMemReader(table_).get(), &inodes, &names).ok());
  auto v2 = std::make_shared<MemTable>();
  for (const auto& [k, v] : table_->data) {
    if (!IsSegmentKey(k) && k != kSegmentIndexKey) v2->data[k] = v;
  }
  ASSERT_TRUE(testing::UnsolidGroups(v2.get()).ok());
  v2->data["I"] = inodes;
  v2->data["I.sum"] = SegmentSums(inodes, options_.segment_bytes);
  v2->data["N"] = names;
  v2->data["N.sum"] = SegmentSums(names, options_.segment_bytes);
  StoreHeader h;
  std::memcpy(&h, v2->data.at("H").data(), sizeof(h));
  h.version = 2;
  h.checksum = XXH3_64bits(&h, offsetof(StoreHeader, checksum));
  v2->data["H"] = std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  auto store = Open(v2);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->header().version, 2u);
  EXPECT_EQ(store->metadata_size().segments, 0u);
  EXPECT_TRUE(store->VerifyMetadata().ok());
  CheckEverything(*store);
}

// dsfs add to a version 2 store writes its metadata in segments and the new files in solid
// groups: the result is a version 4 store holding the old tree (in the old groups) and the new
// one.
TEST_F(SegmentsTest, AddToAVersionTwoStoreMakesAVersionFourOne) {
  std::string inodes, names;
  ASSERT_TRUE(ReadMetadataTables(NewMemReader(table_).get(), &inodes, &names).ok());
  MemTable old;
  old.data = table_->data;
  ASSERT_TRUE(testing::UnsolidGroups(&old).ok());
  const std::string path = dir_ / "v2.db";
  {
    std::unique_ptr<KvWriter> w;
    ASSERT_TRUE(NewKvWriter(path, "lmdb", {}, &w).ok());
    for (const auto& [k, v] : old.data) {
      if (k == "H" || IsSegmentKey(k) || k == kSegmentIndexKey) continue;
      ASSERT_TRUE(w->Put(k, v).ok());
    }
    ASSERT_TRUE(w->Put("I", inodes).ok());
    ASSERT_TRUE(w->Put("I.sum", SegmentSums(inodes, options_.segment_bytes)).ok());
    ASSERT_TRUE(w->Put("N", names).ok());
    ASSERT_TRUE(w->Put("N.sum", SegmentSums(names, options_.segment_bytes)).ok());
    StoreHeader h;
    std::memcpy(&h, table_->data.at("H").data(), sizeof(h));
    h.version = 2;
    h.checksum = XXH3_64bits(&h, offsetof(StoreHeader, checksum));
    ASSERT_TRUE(w->Put("H", std::string(reinterpret_cast<const char*>(&h), sizeof(h))).ok());
    ASSERT_TRUE(w->Commit().ok());
  }
  WriteFile(dir_ / "more/new.txt", "a new file");
  uint64_t base_payloads = 0;
  {
    std::unique_ptr<Store> base;
    ASSERT_TRUE(Store::Open(path, StoreOptions{}, &base).ok());
    ASSERT_EQ(base->header().version, 2u);
    base_payloads = base->header().payload_count;
    std::unique_ptr<KvWriter> up;
    ASSERT_TRUE(NewKvUpdater(path, &up).ok());
    AddOptions ao;
    ao.prefix = "added";
    Status s = AddDirectory(*base, dir_ / "more", ao, up.get(), nullptr, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::Open(path, StoreOptions{}, &store).ok());
  EXPECT_EQ(store->header().version, kFormatVersion);
  EXPECT_EQ(store->header().solid_payload_from, base_payloads);
  EXPECT_GT(store->metadata_size().segments, 0u);
  EXPECT_TRUE(store->VerifyMetadata().ok());
  CheckEverything(*store);
  uint32_t ino;
  InodeRecord r;
  ASSERT_TRUE(store->LookupPath("added/new.txt", &ino, &r).ok());
  ReadBuffer buf;
  std::string_view out;
  ASSERT_TRUE(store->Read(r, 0, r.size, &buf, &out).ok());
  EXPECT_EQ(out, "a new file");
}

TEST(SegmentsFormatTest, NamesAreCutOnlyBetweenItems) {
  // Items of 100 bytes in a pool of 10,000: cuts at item starts, no segment over the target
  // but for an item longer than it.
  std::vector<InodeRecord> recs(101);
  std::string names;
  for (int i = 0; i < 100; ++i) {
    recs[i].name_off = names.size();
    recs[i].name_len = 100;
    names += std::string(100, static_cast<char>('a' + i % 26));
  }
  recs[100].mode = 0120777;  // a symlink with a 5000-byte target
  recs[100].name_off = names.size();
  recs[100].name_len = 3;
  names += "lnk";
  recs[100].data = names.size();
  recs[100].size = 5000;
  names += std::string(5000, '/');
  const InodeLayout layout = InodeLayout::For(recs);
  std::string inodes(101 * layout.record_bytes(), '\0');
  for (size_t i = 0; i < recs.size(); ++i) {
    layout.Encode(recs[i], inodes.data() + i * layout.record_bytes());
  }
  MetadataRecords m;
  ASSERT_TRUE(EncodeMetadata(recs, inodes, layout, names, 1024, 3, 1, &m).ok());
  uint64_t off = 0;
  std::set<uint64_t> starts;
  for (const SegmentEntry& e : m.index.names) {
    starts.insert(off);
    off += e.raw_bytes;
  }
  EXPECT_EQ(off, names.size());
  for (const InodeRecord& r : recs) {
    // An item's segment starts at or before it and ends at or after it.
    auto it = starts.upper_bound(r.name_off);
    --it;
    auto next = starts.upper_bound(r.name_off);
    uint64_t end = next == starts.end() ? names.size() : *next;
    EXPECT_LE(r.name_off + r.name_len, end);
  }
  EXPECT_EQ(m.index.inodes_per_segment, 1024u / layout.record_bytes());
  EXPECT_EQ(m.index.inodes.size(), 1u);
  EXPECT_EQ(m.records.back().first, kSegmentIndexKey);
}

}  // namespace
}  // namespace dsfs::testing
