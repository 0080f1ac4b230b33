#include "common/units.h"

#include <cctype>
#include <cstdio>

namespace dsfs {

Status ParseSize(std::string_view text, uint64_t* bytes) {
  const std::string original(text);
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t next = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (next / 10 != value) return Status::InvalidArgument("size too large: " + original);
    value = next;
    ++i;
  }
  if (i == 0) return Status::InvalidArgument("not a size: '" + original + "'");
  std::string_view suffix = text.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      case 'B':
        shift = 0;
        break;
      default:
        return Status::InvalidArgument("not a size: '" + original + "'");
    }
    std::string_view rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "b" || rest == "iB" || rest == "ib") ||
        (std::toupper(static_cast<unsigned char>(suffix[0])) == 'B' && !rest.empty())) {
      return Status::InvalidArgument("not a size: '" + original + "'");
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return Status::InvalidArgument("size too large: " + original);
  }
  *bytes = value << shift;
  return Status::OK();
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace dsfs
