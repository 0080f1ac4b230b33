#include "tests/support/prometheus_parser.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

namespace dsfs::testing {
namespace {

bool MetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool LabelName(std::string_view s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// A float as the format writes it: Go's ParseFloat, plus +Inf, -Inf and NaN.
bool Float(std::string_view s, double* v) {
  if (s == "+Inf" || s == "Inf") {
    *v = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *v = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *v = NAN;
    return true;
  }
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  const std::string str(s);
  char* end = nullptr;
  *v = std::strtod(str.c_str(), &end);
  return end == str.c_str() + str.size();
}

// The family a sample name belongs to, given the types declared so far.
std::string FamilyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string base = name.substr(0, name.size() - suffix.size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return name;
}

// Parses `{a="x",b="y"}` from s[*pos] (at '{').
bool Labels(std::string_view s, size_t* pos, std::map<std::string, std::string>* labels,
            std::string* why) {
  size_t i = *pos + 1;
  for (;;) {
    if (i < s.size() && s[i] == '}') break;
    size_t eq = s.find('=', i);
    if (eq == std::string_view::npos) return (*why = "label without '='", false);
    const std::string name(s.substr(i, eq - i));
    if (!LabelName(name)) return (*why = "bad label name '" + name + "'", false);
    i = eq + 1;
    if (i >= s.size() || s[i] != '"') return (*why = "label value not quoted", false);
    ++i;
    std::string value;
    bool closed = false;
    while (i < s.size()) {
      const char c = s[i++];
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\') {
        if (i >= s.size()) break;
        const char e = s[i++];
        if (e == '\\')
          value += '\\';
        else if (e == '"')
          value += '"';
        else if (e == 'n')
          value += '\n';
        else
          return (*why = std::string("bad escape \\") + e + " in a label value", false);
      } else {
        value += c;
      }
    }
    if (!closed) return (*why = "unterminated label value", false);
    if (!labels->emplace(name, value).second) return (*why = "label '" + name + "' twice", false);
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') break;
    return (*why = "expected ',' or '}' after a label", false);
  }
  *pos = i + 1;
  return true;
}

struct HistogramSeries {
  std::vector<std::pair<double, double>> buckets;  // (le, count) in order
  bool has_sum = false, has_count = false;
  double count = 0;
};

}  // namespace

bool PromExposition::Find(const std::string& name, const std::map<std::string, std::string>& want,
                          double* value) const {
  for (const PromSample& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : want) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) all = false;
    }
    if (all) {
      *value = s.value;
      return true;
    }
  }
  return false;
}

bool ParseExposition(std::string_view text, PromExposition* out, std::string* error) {
  *out = PromExposition();
  if (!text.empty() && text.back() != '\n') return (*error = "no newline at the end", false);
  std::set<std::string> sampled;  // families that have samples
  std::set<std::string> done;     // families whose samples ended
  std::string current;            // the family of the samples being read
  std::set<std::string> series;   // name + labels, seen
  // family -> labels without le -> its series
  std::map<std::string, std::map<std::map<std::string, std::string>, HistogramSeries>> hists;
  size_t line_no = 0;
  size_t start = 0;
  auto fail = [&](const std::string& why) {
    *error = "line " + std::to_string(line_no) + ": " + why;
    return false;
  };
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# HELP name text", "# TYPE name type", or a comment.
      std::string_view rest = line.substr(1);
      if (rest.rfind(" HELP ", 0) == 0 || rest.rfind(" TYPE ", 0) == 0) {
        const bool help = rest[1] == 'H';
        rest = rest.substr(6);
        const size_t sp = rest.find(' ');
        const std::string name(rest.substr(0, sp));
        const std::string arg(sp == std::string_view::npos ? "" : rest.substr(sp + 1));
        if (!MetricName(name)) return fail("bad metric name '" + name + "'");
        if (sampled.count(name))
          return fail((help ? "HELP" : "TYPE") + std::string(" of ") + name + " after its samples");
        if (help) {
          if (!out->help.emplace(name, arg).second) return fail("second HELP of " + name);
        } else {
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                       "untyped"};
          if (!kTypes.count(arg)) return fail("unknown type '" + arg + "'");
          if (!out->types.emplace(name, arg).second) return fail("second TYPE of " + name);
          if (arg == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
            return fail("counter " + name + " does not end in _total");
          }
        }
      }
      continue;
    }
    // A sample: name [{labels}] value [timestamp].
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    PromSample s;
    s.name = std::string(line.substr(0, i));
    if (!MetricName(s.name)) return fail("bad metric name '" + s.name + "'");
    if (i < line.size() && line[i] == '{') {
      std::string why;
      if (!Labels(line, &i, &s.labels, &why)) return fail(why);
    }
    if (i >= line.size() || line[i] != ' ') return fail("no value");
    std::string_view rest = line.substr(i + 1);
    const size_t sp = rest.find(' ');
    if (!Float(rest.substr(0, sp), &s.value)) {
      return fail("value '" + std::string(rest.substr(0, sp)) + "' is not a number");
    }
    if (sp != std::string_view::npos) {
      double ts;
      if (!Float(rest.substr(sp + 1), &ts) ||
          rest.substr(sp + 1).find('.') != std::string_view::npos) {
        return fail("bad timestamp");
      }
    }
    const std::string family = FamilyOf(s.name, out->types);
    auto type = out->types.find(family);
    if (type == out->types.end()) return fail("sample of " + family + " without a TYPE");
    if (family != current) {
      if (done.count(family)) return fail("the samples of " + family + " are not together");
      if (!current.empty()) done.insert(current);
      current = family;
    }
    sampled.insert(family);
    std::string key = s.name + "{";
    for (const auto& [k, v] : s.labels) key += k + "=\"" + v + "\"\x01";
    if (!series.insert(key).second) return fail("series " + key + "} twice");
    if (type->second == "counter" && (std::isnan(s.value) || s.value < 0)) {
      return fail("counter " + s.name + " is negative or NaN");
    }
    if (type->second == "histogram") {
      std::map<std::string, std::string> base = s.labels;
      HistogramSeries* h = nullptr;
      if (s.name == family + "_bucket") {
        auto le = base.find("le");
        if (le == base.end()) return fail("bucket without le");
        double bound;
        if (!Float(le->second, &bound)) return fail("le '" + le->second + "' is not a number");
        base.erase(le);
        h = &hists[family][base];
        if (!h->buckets.empty()) {
          if (bound <= h->buckets.back().first)
            return fail("le bounds of " + family + " do not rise");
          if (s.value < h->buckets.back().second)
            return fail("buckets of " + family + " are not cumulative");
        }
        h->buckets.emplace_back(bound, s.value);
      } else if (s.name == family + "_sum") {
        hists[family][base].has_sum = true;
      } else if (s.name == family + "_count") {
        h = &hists[family][base];
        h->has_count = true;
        h->count = s.value;
      } else {
        return fail("sample " + s.name + " of histogram " + family);
      }
    }
    out->samples.push_back(std::move(s));
  }
  for (const auto& [family, by_labels] : hists) {
    for (const auto& [labels, h] : by_labels) {
      if (h.buckets.empty() || !std::isinf(h.buckets.back().first)) {
        return (*error = "histogram " + family + " has no +Inf bucket", false);
      }
      if (!h.has_sum) return (*error = "histogram " + family + " has no _sum", false);
      if (!h.has_count) return (*error = "histogram " + family + " has no _count", false);
      if (h.count != h.buckets.back().second) {
        return (*error = "histogram " + family + ": _count is not its +Inf bucket", false);
      }
    }
  }
  return true;
}

}  // namespace dsfs::testing
