// dsfs-tuned-pack: packs a directory into a RocksDB store with another table layout than dsfs's
// (bench/rocksdb_options_bench.py compares them). The shipped dsfs has no such setting: it
// always writes the defaults of KvWriterOptions::RocksdbLayout, which that benchmark chose.
//
//   dsfs-tuned-pack SRC DST [block_size=N,bloom_bits=N,compression=zstd|none]
//
// DST must not exist. Every layout is a valid store that the shipped dsfs mounts and reads.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backend/kv_open.h"
#include "common/path.h"
#include "pack/packer.h"
#include "store/store.h"

namespace {

// Parses the layout list; false (after naming the item) on an unknown or malformed item.
bool ParseLayout(std::string_view list, dsfs::KvWriterOptions::RocksdbLayout* layout) {
  for (std::string_view view : dsfs::SplitList(list, ',')) {
    std::string item(view);
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq),
                value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* rest = nullptr;
    unsigned long long n = std::strtoull(value.c_str(), &rest, 10);
    bool number = !value.empty() && rest && *rest == '\0';
    if (key == "block_size" && number && n >= 512 && n <= (1u << 30)) {
      layout->block_bytes = static_cast<uint32_t>(n);
    } else if (key == "bloom_bits" && number && n <= 64) {
      layout->bloom_bits = static_cast<uint32_t>(n);
    } else if (key == "compression" && (value == "zstd" || value == "none")) {
      layout->zstd_blocks = value == "zstd";
    } else {
      std::fprintf(stderr, "dsfs-tuned-pack: bad layout item '%s'\n", item.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(
        stderr,
        "usage: dsfs-tuned-pack SRC DST [block_size=N,bloom_bits=N,compression=zstd|none]\n");
    return 2;
  }
  dsfs::KvWriterOptions wo;
  if (argc == 4 && !ParseLayout(argv[3], &wo.rocksdb)) return 2;
  std::unique_ptr<dsfs::KvWriter> writer;
  dsfs::Status s = dsfs::NewKvWriter(argv[2], "rocksdb", wo, &writer);
  dsfs::PackStats stats;
  dsfs::PackOptions options;
  options.store_path = argv[2];
  if (s.ok()) s = dsfs::PackDirectory(argv[1], options, writer.get(), nullptr, &stats);
  if (!s.ok()) {
    std::fprintf(stderr, "dsfs-tuned-pack: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
