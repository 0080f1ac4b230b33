#include "common/path.h"

#include <cstdio>

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

std::string PrintableName(std::string_view name, bool escape_backslash) {
  std::string out;
  out.reserve(name.size());
  auto escape = [&](std::string_view bytes) {
    for (unsigned char c : bytes) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    }
  };
  while (!name.empty()) {
    char32_t cp = 0;
    size_t n = Utf8CodePoint(name, &cp);
    if (n == 0) {
      escape(name.substr(0, 1));
      n = 1;
    } else if (cp == '\\' && escape_backslash) {
      out += "\\\\";
    } else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
      escape(name.substr(0, n));
    } else {
      out.append(name.substr(0, n));
    }
    name.remove_prefix(n);
  }
  return out;
}

}  // namespace dsfs
