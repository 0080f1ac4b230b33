#include "common/path.h"

namespace dsfs {

std::vector<std::string_view> SplitList(std::string_view list, char sep) {
  std::vector<std::string_view> items;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(sep, pos);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(pos, end - pos);
    pos = end + 1;
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::vector<std::string_view> PathParts(std::string_view path) {
  std::vector<std::string_view> parts = SplitList(path, '/');
  std::erase(parts, std::string_view("."));
  return parts;
}

}  // namespace dsfs
