// dsfs cache ls [DIR] / dsfs cache gc [DIR] [--keep-days N] [-n]: the S3 disk caches in a
// cache_dir, listed and cleaned up (backend/s3/s3_cache_dir.h says what is safe and how).
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

#include "backend/s3/s3_cache_dir.h"
#include "common/units.h"
#include "fs/stats.h"
#include "tools/commands.h"

namespace dsfs {
namespace {

std::string FormatTime(time_t t) {
  struct tm tm;
  char buf[32];
  if (::localtime_r(&t, &tm) == nullptr ||
      std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm) == 0) {
    return "?";
  }
  return buf;
}

}  // namespace

std::string DefaultCacheDir() {
  // The XDG base directory rules: a relative $XDG_CACHE_HOME is ignored (as is a relative
  // $HOME: a daemon's working directory is /).
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/dsfs";
  return std::string(home && home[0] == '/' ? home : "/root") + "/.cache/dsfs";
}

Status RunCacheLs(const std::string& dir_arg, std::ostream& out, bool json) {
  const std::string dir = dir_arg.empty() ? DefaultCacheDir() : dir_arg;
  std::vector<S3CacheEntry> caches;
  Status s = ListS3Caches(dir, &caches);
  // No cache yet (no mount of a store in S3 made the default one): nothing to list. A DIR
  // given that does not exist is still an error (a typo lists nothing either).
  if (!s.ok() && !(s.IsNotFound() && dir_arg.empty())) return s;
  if (json) {
    // {"dir", "caches": [{"name", "url", "endpoint", "identity", "bytes", "last_use_unix_s",
    // "mounted", "stale_stores"}], "total_bytes"}; unknown strings are empty.
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    uint64_t total = 0;
    for (const auto& c : caches) {
      list.push_back({{"name", c.name},
                      {"url", c.meta.url},
                      {"endpoint", c.meta.endpoint},
                      {"identity", c.meta.id},
                      {"bytes", c.bytes},
                      {"last_use_unix_s", static_cast<int64_t>(c.last_use)},
                      {"mounted", c.mounted},
                      {"stale_stores", c.stale.size()}});
      total += c.bytes;
    }
    nlohmann::ordered_json j = {{"dir", dir}, {"caches", list}, {"total_bytes", total}};
    out << OneLineJson(j) << "\n";
    return Status::OK();
  }
  uint64_t total = 0;
  for (const auto& c : caches) {
    out << c.name << "  "
        << (c.meta.url.empty() ? "(unknown: made before dsfs recorded it)" : c.meta.url)
        << "\n  endpoint: " << (c.meta.endpoint.empty() ? "?" : c.meta.endpoint)
        << "  identity: " << (c.meta.id.empty() ? "?" : c.meta.id) << "\n  " << FormatBytes(c.bytes)
        << "  last used " << FormatTime(c.last_use) << "  "
        << (c.mounted ? "mounted now" : "not mounted");
    if (!c.stale.empty()) out << "  " << c.stale.size() << " stale store(s) (pushed over since)";
    out << "\n";
    total += c.bytes;
  }
  out << caches.size() << " cache(s), " << FormatBytes(total) << " in " << dir << "\n";
  return Status::OK();
}

Status RunCacheGc(const std::string& dir_arg, int keep_days, bool dry_run, std::ostream& out) {
  const std::string dir = dir_arg.empty() ? DefaultCacheDir() : dir_arg;
  S3CacheGcOptions options;
  options.keep_days = keep_days;
  options.dry_run = dry_run;
  std::vector<S3CacheGcResult> results;
  Status s = GcS3Caches(dir, options, &results);
  if (!s.ok() && !(s.IsNotFound() && dir_arg.empty())) return s;  // as RunCacheLs
  uint64_t freed = 0;
  for (const auto& r : results) {
    out << r.name << ": " << r.action << " (" << r.why << ")";
    if (r.freed_bytes) out << ", " << FormatBytes(r.freed_bytes);
    out << "\n";
    freed += r.freed_bytes;
  }
  out << FormatBytes(freed) << (dry_run ? " would be freed" : " freed") << " in " << dir << "\n";
  return Status::OK();
}

}  // namespace dsfs
