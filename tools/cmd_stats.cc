// dsfs stats MOUNTPOINT: the live counters of a mount, from its hidden /.dsfs/stats file.
#include <sys/statfs.h>

#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "fs/kernel_mount.h"
#include "fs/mount.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

// Flattens the stats JSON (objects of numbers and strings, no arrays) into "a.b: value" lines;
// a string is shown without its quotes.
// The file is ours, so anything else means it is not a dsfs stats file.
bool Flatten(std::string_view json, std::vector<std::pair<std::string, std::string>>* out) {
  std::vector<std::string> path;
  std::string key;
  size_t i = 0;
  auto skip = [&] {
    while (i < json.size() && std::isspace(static_cast<unsigned char>(json[i]))) ++i;
  };
  skip();
  if (i >= json.size() || json[i] != '{') return false;
  ++i;
  path.emplace_back();
  while (true) {
    skip();
    if (i >= json.size()) return false;
    if (json[i] == '}') {
      ++i;
      path.pop_back();
      if (path.empty()) return true;
      skip();
      if (i < json.size() && json[i] == ',') ++i;
      continue;
    }
    if (json[i] != '"') return false;
    size_t end = json.find('"', i + 1);
    if (end == std::string_view::npos) return false;
    key = std::string(json.substr(i + 1, end - i - 1));
    i = end + 1;
    skip();
    if (i >= json.size() || json[i] != ':') return false;
    ++i;
    skip();
    if (i < json.size() && json[i] == '{') {
      ++i;
      path.push_back(key);
      continue;
    }
    std::string value;
    if (i < json.size() && json[i] == '"') {
      for (++i; i < json.size() && json[i] != '"'; ++i) {
        if (json[i] == '\\' && i + 1 < json.size()) ++i;
        value += json[i];
      }
      if (i >= json.size()) return false;
      ++i;
    }
    size_t vend = json.find_first_of(",}", i);
    if (vend == std::string_view::npos) return false;
    value += std::string(json.substr(i, vend - i));
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
      value.pop_back();
    std::string full;
    for (size_t k = 1; k < path.size(); ++k) full += path[k] + ".";
    out->emplace_back(full + key, value);
    i = vend;
    if (json[i] == ',') ++i;
  }
}

}  // namespace

Status RunStats(const std::string& mountpoint, bool json, std::ostream& out) {
  std::string path = mountpoint + "/.dsfs/stats";
  const bool kernel = KernelStatsPath(mountpoint, &path);  // -o kernel: the image mount's
  std::ifstream f(path);
  if (!f && kernel) {
    return Status::NotFound(mountpoint + " is a -o kernel mount whose daemon is gone (no " + path +
                            "); clear it with: dsfs umount " + mountpoint);
  }
  if (!f) {
    // statfs is never answered from a cache: it tells a dead daemon (fs/mount.cc).
    MountInfo m;
    struct statfs sfs;
    if (FindMount(mountpoint, &m) && m.fstype == kDsfsFsType &&
        ::statfs(mountpoint.c_str(), &sfs) != 0 && (errno == ENOTCONN || errno == ECONNABORTED)) {
      const std::string what = " is a dead dsfs mount (its daemon is gone); clear it with: ";
      return Status::NotFound(mountpoint + what + "dsfs umount " + mountpoint);
    }
    return Status::NotFound(mountpoint + " is not a dsfs mount (no " + path + ")");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (json) {
    out << text << "\n";
    return Status::OK();
  }
  std::vector<std::pair<std::string, std::string>> fields;
  if (!Flatten(text, &fields)) return Status::Corruption(path + ": not a dsfs stats file");
  size_t width = 0;
  for (const auto& [k, v] : fields) width = std::max(width, k.size());
  for (const auto& [k, v] : fields) {
    out << k << ":" << std::string(width + 2 - k.size(), ' ') << v << "\n";
  }
  return Status::OK();
}

}  // namespace dsfs
