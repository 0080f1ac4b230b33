// Writes the checked-in seed corpus of the fuzz targets (tests/fuzz/corpus/{store,record}) from
// a small tree packed in memory: text, a chunked file, a symlink, an empty directory and the
// image seeds (tests/fuzz/corpus/image) in class directories, so the seeds reach the views.
// Usage: dsfs_fuzz_seeds CORPUS_DIR      (run again after a format change; commit the output)
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "pack/packer.h"
#include "store/codec.h"
#include "store/format.h"
#include "store/segments.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/fakes/mem_store.h"

namespace fs = std::filesystem;

namespace {

void Put(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

void Copy(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// Packs `src` in memory; false (and a message) on failure.
bool Pack(const fs::path& src, bool predecode, dsfs::MemTable** out,
          std::shared_ptr<dsfs::MemTable>* keep) {
  dsfs::PackOptions o;
  o.zstd_level = 3;
  o.dict_bytes = 1024;
  o.chunk_bytes = 4096;
  o.segment_bytes = 4096;
  o.threads = 1;
  o.predecode = predecode;
  *keep = std::make_shared<dsfs::MemTable>();
  auto writer = dsfs::NewMemWriter(*keep);
  dsfs::Status s = dsfs::PackDirectory(src.string(), o, writer.get(), nullptr, nullptr);
  if (!s.ok()) {
    std::cerr << "dsfs_fuzz_seeds: " << s.ToString() << "\n";
    return false;
  }
  *out = keep->get();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: dsfs_fuzz_seeds CORPUS_DIR\n";
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path src = fs::temp_directory_path() / ("dsfs-seeds-" + std::to_string(::getpid()));
  fs::remove_all(src);
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i * 7919 % 1000) + " of seeds\n";
  Put(src / "notes.txt", text.substr(0, 300));
  Put(src / "big.txt", text);  // several 4 KiB chunks
  for (int i = 0; i < 8; ++i)
    Put(src / "docs" / ("d" + std::to_string(i)), text.substr(i * 50, 200));
  fs::create_directories(src / "empty");
  fs::create_symlink("notes.txt", src / "link");
  // 8x8 images in two classes (the tensor view exists there); the others in a mixed directory.
  const fs::path images = corpus / "image";
  Copy(images / "rgb8.jpg", src / "train/c0/a.jpg");
  Copy(images / "gray8.jpg", src / "train/c0/b.jpg");
  Copy(images / "rgb8.png", src / "train/c1/a.png");
  Copy(images / "pal8.png", src / "train/c1/b.png");
  for (const char* n : {"prog16.jpg", "sub420.jpg", "gray1.png", "interlaced.png"}) {
    Copy(images / n, src / "mixed" / n);
  }
  // S3 index seeds: checksum kept (0) and repaired (1), a few sizes.
  for (int entries : {0, 1, 12}) {
    const std::string index = dsfs::fuzz::SampleS3Index(entries, 0xfeed + entries);
    Put(corpus / "s3index" / ("index" + std::to_string(entries)), std::string(1, '\0') + index);
    Put(corpus / "s3index" / ("index" + std::to_string(entries) + "-repaired"),
        std::string(1, '\1') + index);
  }
  int rc = 0;
  for (bool predecode : {false, true}) {
    dsfs::MemTable* table;
    std::shared_ptr<dsfs::MemTable> keep;
    if (!Pack(src, predecode, &table, &keep)) {
      rc = 1;
      continue;
    }
    const std::string name = predecode ? "predecode" : "plain";
    Put(corpus / "store" / (name + "-repaired"), dsfs::fuzz::SerializeTable(*table, true));
    Put(corpus / "store" / (name + "-checked"), dsfs::fuzz::SerializeTable(*table, false));
    if (predecode) continue;
    // Record seeds: a header, the layout with some records, and each payload group.
    const auto& d = table->data;
    Put(corpus / "record" / "header", std::string(1, '\3') + d.at(std::string(dsfs::kHeaderKey)));
    std::string layout = d.at(std::string(dsfs::kLayoutKey));
    std::string inode_bytes, names;
    if (!dsfs::ReadMetadataTables(dsfs::NewMemReader(keep).get(), &inode_bytes, &names).ok()) {
      std::cerr << "dsfs_fuzz_seeds: cannot read the metadata back\n";
      return 1;
    }
    uint16_t n = static_cast<uint16_t>(layout.size());
    Put(corpus / "record" / "layout", std::string(1, '\1') +
                                          std::string(reinterpret_cast<const char*>(&n), 2) +
                                          layout + inode_bytes.substr(0, 256));
    // Solid groups: the group record itself (a payload record), and its index and records
    // decompressed (the group harness).
    std::shared_ptr<dsfs::Dictionary> dict;
    std::string dict_bytes;
    if (auto z = d.find(std::string(dsfs::kDictKey)); z != d.end()) {
      dsfs::StoreHeader h;
      if (!dsfs::ParseHeader(d.at(std::string(dsfs::kHeaderKey)), &h).ok() ||
          !dsfs::DecodeDictionaryRecord(z->second, h.dict_bytes, &dict_bytes).ok()) {
        return 1;
      }
    }
    if (!dsfs::Dictionary::Create(dict_bytes, 3, &dict).ok()) return 1;
    int groups = 0;
    uint64_t first = 0;  // the group's first id: one past the group before
    for (const auto& [k, v] : d) {
      uint64_t id;
      if (!dsfs::ParsePayloadKey(k, &id) || groups >= 3) continue;
      ++groups;
      Put(corpus / "record" / ("payload" + std::to_string(groups)), std::string(1, '\0') + v);
      dsfs::PayloadView p;
      std::string content;
      if (dsfs::ParsePayload(v, &p).ok()) {
        content.resize(p.raw_bytes);
        dsfs::PayloadDecoder decoder;
        if (!decoder.Decode(p, dict.get(), content.data()).ok()) content.clear();
      }
      std::string ids(16, '\0');
      std::memcpy(ids.data(), &id, 8);
      std::memcpy(ids.data() + 8, &first, 8);
      Put(corpus / "record" / ("group" + std::to_string(groups)),
          std::string(1, '\2') + ids + content);
      first = id + 1;
    }
  }
  fs::remove_all(src);
  return rc;
}
