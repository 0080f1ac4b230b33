#include "s3/credential_parse.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/path.h"
#include "s3/xml.h"

namespace dsfs {
namespace {

std::string_view Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The character text of the first <tag> in `xml`, trimmed; false if there is none.
bool XmlText(std::string_view xml, std::string_view tag, std::string* out) {
  std::string_view e;
  if (!XmlElement(xml, tag, &e)) return false;
  *out = XmlUnescape(Trim(e));
  return true;
}

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

}  // namespace

std::map<std::string, IniSection> ParseIni(std::string_view text) {
  std::map<std::string, IniSection> out;
  IniSection* current = nullptr;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      size_t close = line.find(']');
      current = close == std::string_view::npos
                    ? nullptr
                    : &out[std::string(Trim(line.substr(1, close - 1)))];
      continue;
    }
    size_t eq = line.find('=');
    if (current == nullptr || eq == std::string_view::npos) continue;
    std::string key(Trim(line.substr(0, eq)));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string_view value = Trim(line.substr(eq + 1));
    // An inline comment needs a blank before it (AWS CLI rule): "a=b # note".
    for (size_t i = 1; i < value.size(); ++i) {
      if ((value[i] == '#' || value[i] == ';') && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
        value = Trim(value.substr(0, i));
        break;
      }
    }
    (*current)[key] = std::string(value);
  }
  return out;
}

Status ParseIso8601(std::string_view text, int64_t* unix_s) {
  text = Trim(text);
  auto bad = [&] {
    return Status::InvalidArgument("not an ISO 8601 UTC time (YYYY-MM-DDTHH:MM:SSZ): '" +
                                   PrintableName(text.substr(0, 40)) + "'");
  };
  int v[6];
  const char seps[] = {'-', '-', 'T', ':', ':'};
  const int widths[] = {4, 2, 2, 2, 2, 2};
  size_t pos = 0;
  for (int i = 0; i < 6; ++i) {
    if (pos + widths[i] > text.size()) return bad();
    v[i] = 0;
    for (int k = 0; k < widths[i]; ++k) {
      char c = text[pos + k];
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad();
      v[i] = v[i] * 10 + (c - '0');
    }
    pos += widths[i];
    if (i < 5) {
      if (pos >= text.size()) return bad();
      char sep = text[pos];
      if (!(sep == seps[i] || (i == 2 && (sep == 't' || sep == ' ')))) return bad();
      ++pos;
    }
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t digits = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
      ++pos, ++digits;
    if (digits == 0) return bad();
  }
  std::string_view zone = text.substr(pos);
  if (!(zone == "Z" || zone == "z" || zone == "+00:00" || zone == "+0000")) return bad();
  if (v[0] < 1970 || v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > DaysInMonth(v[0], v[1]) ||
      v[3] > 23 || v[4] > 59 || v[5] > 60) {
    return bad();
  }
  std::tm tm{};
  tm.tm_year = v[0] - 1900;
  tm.tm_mon = v[1] - 1;
  tm.tm_mday = v[2];
  tm.tm_hour = v[3];
  tm.tm_min = v[4];
  tm.tm_sec = v[5];
  *unix_s = static_cast<int64_t>(timegm(&tm));
  return Status::OK();
}

std::string FormatIso8601(int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status CheckCredentialLifetime(const AwsCredentials& c, int64_t now_s) {
  if (c.expiration_s == 0 || c.expiration_s - now_s >= kMinCredentialLifetimeS) {
    return Status::OK();
  }
  const int64_t d = c.expiration_s - now_s;
  return Status::IOError(
      "the keys received expire at " + FormatIso8601(c.expiration_s) + ", " +
      (d <= 0 ? std::to_string(-d) + " s ago" : "in " + std::to_string(d) + " s") +
      " by this host's clock: is this host's clock ahead (or the source's behind)?");
}

Status ParseStsCredentials(std::string_view xml, AwsCredentials* out) {
  std::string_view error;
  if (XmlElement(xml, "Error", &error)) {
    // The server's words, printable (no newline or terminal control reaches a log) and short.
    std::string code, message;
    XmlText(error, "Code", &code);
    XmlText(error, "Message", &message);
    if (code.size() > 64) code.resize(64);
    if (message.size() > 300) message.resize(300);
    return Status::IOError(
        "STS refused: " + (code.empty() ? "unknown error" : PrintableName(code)) +
        (message.empty() ? "" : " (" + PrintableName(message) + ")"));
  }
  std::string_view creds;
  if (!XmlElement(xml, "Credentials", &creds)) {
    return Status::IOError("STS answer has no <Credentials> element");
  }
  AwsCredentials c;
  std::string expiration;
  if (!XmlText(creds, "AccessKeyId", &c.access_key_id) || c.access_key_id.empty() ||
      !XmlText(creds, "SecretAccessKey", &c.secret_access_key) || c.secret_access_key.empty() ||
      !XmlText(creds, "SessionToken", &c.session_token) || c.session_token.empty()) {
    return Status::IOError(
        "STS answer lacks AccessKeyId, SecretAccessKey or SessionToken in <Credentials>");
  }
  if (!XmlText(creds, "Expiration", &expiration)) {
    return Status::IOError("STS answer lacks <Expiration>");
  }
  DSFS_RETURN_IF_ERROR(ParseIso8601(expiration, &c.expiration_s).WithContext("STS Expiration"));
  *out = std::move(c);
  return Status::OK();
}

Status ParseCredentialsJson(std::string_view json, std::string_view what, AwsCredentials* out) {
  const std::string w(what);
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::IOError(w + ": the answer is not a JSON object");
  }
  auto text = [&](const char* name, std::string* v) -> Status {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return Status::OK();
    if (!it->is_string()) return Status::IOError(w + ": " + name + " is not a string");
    *v = it->get<std::string>();
    return Status::OK();
  };
  if (j.contains("Version") && !(j["Version"].is_number_integer() && j["Version"] == 1)) {
    return Status::IOError(w + ": unsupported Version (only 1 is defined)");
  }
  std::string code;
  DSFS_RETURN_IF_ERROR(text("Code", &code));
  if (!code.empty() && code != "Success") {
    return Status::IOError(w + ": answered Code " + PrintableName(code.substr(0, 60)));
  }
  AwsCredentials c;
  DSFS_RETURN_IF_ERROR(text("AccessKeyId", &c.access_key_id));
  DSFS_RETURN_IF_ERROR(text("SecretAccessKey", &c.secret_access_key));
  DSFS_RETURN_IF_ERROR(text("SessionToken", &c.session_token));
  if (c.session_token.empty()) DSFS_RETURN_IF_ERROR(text("Token", &c.session_token));
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return Status::IOError(w + ": AccessKeyId or SecretAccessKey missing");
  }
  std::string expiration;
  DSFS_RETURN_IF_ERROR(text("Expiration", &expiration));
  if (!expiration.empty()) {
    DSFS_RETURN_IF_ERROR(ParseIso8601(expiration, &c.expiration_s).WithContext(w + " Expiration"));
  }
  *out = std::move(c);
  return Status::OK();
}

}  // namespace dsfs
