#include "common/path.h"

namespace dsfs {

std::vector<std::string_view> PathParts(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (!part.empty() && part != ".") parts.push_back(part);
  }
  return parts;
}

}  // namespace dsfs
