#include "s3/xml.h"

#include <utility>

namespace dsfs {

namespace {

// The raw contents of the first <tag>...</tag> at or after `*pos`, and `*pos` moved past it;
// false if there is none.
bool NextElement(std::string_view xml, std::string_view tag, size_t* pos, std::string_view* out) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t b = xml.find(open, *pos);
  if (b == std::string_view::npos) return false;
  b += open.size();
  const size_t e = xml.find(close, b);
  if (e == std::string_view::npos) return false;
  *out = xml.substr(b, e - b);
  *pos = e + close.size();
  return true;
}

}  // namespace

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  for (std::string_view e; NextElement(xml, tag, &pos, &e);) out.push_back(e);
  return out;
}

bool XmlElement(std::string_view xml, std::string_view tag, std::string_view* out) {
  size_t pos = 0;
  return NextElement(xml, tag, &pos, out);
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
