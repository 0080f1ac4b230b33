#include "common/mount_table.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/system.h"

namespace dsfs {

std::string UnescapeMountinfo(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (int k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

void ForEachMount(const std::function<void(const std::string&, const MountInfo&)>& fn) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, dev, root, mp, field;
    if (!(ls >> id >> parent >> dev >> root >> mp)) continue;
    while (ls >> field && field != "-") {
    }
    MountInfo m;
    if (!(ls >> m.fstype >> m.source)) continue;
    m.source = UnescapeMountinfo(m.source);
    size_t colon = dev.find(':');
    if (colon != std::string::npos)
      m.dev_minor = std::strtoul(dev.c_str() + colon + 1, nullptr, 10);
    fn(UnescapeMountinfo(mp), m);
  }
}

bool FindMount(const std::string& path, MountInfo* info) {
  std::string abs = AbsolutePath(path);
  bool found = false;
  // The last match is the topmost mount, the one umount2 acts on.
  ForEachMount([&](const std::string& mp, const MountInfo& m) {
    if (mp != abs) return;
    *info = m;
    found = true;
  });
  return found;
}

bool IsMountpoint(const std::string& path) {
  MountInfo m;
  return FindMount(path, &m);
}

}  // namespace dsfs
