#include "s3/xml.h"

#include <utility>

namespace dsfs {

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    pos += open.size();
    const size_t end = xml.find(close, pos);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(pos, end - pos));
    pos = end + close.size();
  }
  return out;
}

bool XmlElement(std::string_view xml, std::string_view tag, std::string_view* out) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t b = xml.find(open);
  if (b == std::string_view::npos) return false;
  b += open.size();
  const size_t e = xml.find(close, b);
  if (e == std::string_view::npos) return false;
  *out = xml.substr(b, e - b);
  return true;
}

std::string XmlUnescape(std::string_view s) {
  static const std::pair<std::string_view, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    bool replaced = false;
    if (s[i] == '&') {
      for (const auto& [entity, c] : kEntities) {
        if (s.substr(i, entity.size()) == entity) {
          out += c;
          i += entity.size() - 1;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += s[i];
  }
  return out;
}

}  // namespace dsfs
