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

size_t Utf8CodePoint(std::string_view s, char32_t* cp) {
  auto b = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  auto cont = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
  const unsigned c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF && cont(1)) {
    *cp = (c & 0x1F) << 6 | (b(1) & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF && cont(1) && cont(2)) {
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) return 0;
    *cp = (c & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) return 0;
    *cp = (c & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    return 4;
  }
  return 0;
}

}  // namespace dsfs
