// The metrics table and the exposition format's writer (mount/metrics.h).
#include "mount/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

#include "common/histogram.h"
#include "common/log.h"
#include "common/path.h"
#include "common/system.h"

namespace dsfs {
namespace {

enum class Type { kCounter, kGauge, kHistogram };

// One row: the stats object's member at `path` ("a.b") as the metric `name`. With a label,
// the series carries label=value; with value "*", `path` names an object and each of its
// members is one series, labelled by the member's name. `scale` turns the stats' unit into
// the metric's base unit. A histogram's member is fs/stats.h's HistogramJson.
struct Row {
  std::string_view path, name;
  Type type;
  std::string_view help, label = {}, value = {};
  double scale = 1;
};

// How every file PrometheusText writes begins (its first row is dsfs_uptime_seconds): what
// MetricsFile::Check knows its own file by.
constexpr char kMetricsFileStart[] = "# HELP dsfs_";

constexpr Type C = Type::kCounter, G = Type::kGauge, H = Type::kHistogram;

// Rows of one name follow each other (they are one family: one HELP, one TYPE).
constexpr Row kTable[] = {
    {"uptime_s", "dsfs_uptime_seconds", G, "Seconds since the mount started."},
    {"requests", "dsfs_requests_total", C, "Requests to the tree, by operation.", "op", "*"},
    {"latency", "dsfs_request_duration_seconds", H,
     "Time in the filesystem core per request, by operation.", "op", "*", 1e-6},
    {"bytes_served", "dsfs_read_bytes_total", C, "Bytes answered to reads of the tree."},
    {"read_errors", "dsfs_read_errors_total", C, "Reads of the tree that failed."},
    {"transport.ring_requests", "dsfs_transport_requests_total", C,
     "FUSE requests by how they arrived.", "path", "uring"},
    {"transport.classic_requests", "dsfs_transport_requests_total", C, "", "path", "classic"},
    {"cache.hits", "dsfs_cache_hits_total", C, "Lookups answered by a cache tier.", "tier", "ram"},
    {"backend.recent_value_hits", "dsfs_cache_hits_total", C, "", "tier", "recent"},
    {"backend.disk_cache_hits", "dsfs_cache_hits_total", C, "", "tier", "disk"},
    {"cache.misses", "dsfs_cache_misses_total", C, "Lookups a cache tier did not answer.", "tier",
     "ram"},
    {"backend.disk_cache_misses", "dsfs_cache_misses_total", C, "", "tier", "disk"},
    {"cache.bytes", "dsfs_cache_bytes", G, "Bytes held by the RAM cache.", "tier", "ram"},
    {"cache.capacity_bytes", "dsfs_cache_capacity_bytes", G, "Capacity of the RAM cache.", "tier",
     "ram"},
    {"cache.entries", "dsfs_cache_entries", G, "Entries in the RAM cache.", "tier", "ram"},
    {"cache.evictions", "dsfs_cache_evictions_total", C, "Entries evicted from the RAM cache.",
     "tier", "ram"},
    {"backend.disk_cache_evicted_blocks", "dsfs_disk_cache_evicted_blocks_total", C,
     "Blocks evicted from the disk cache of a store in object storage."},
    {"backend.remote_gets", "dsfs_s3_get_requests_total", C,
     "GET requests to object storage (the S3 tier)."},
    {"backend.remote_get_bytes", "dsfs_s3_get_bytes_total", C,
     "Bytes fetched from object storage."},
    {"backend.remote_retries", "dsfs_s3_retries_total", C, "Requests to object storage retried."},
    {"backend.remote_failures", "dsfs_s3_failures_total", C,
     "Requests to object storage that failed for good."},
    {"decompress.chunks", "dsfs_chunks_decompressed_total", C, "Chunks decompressed."},
    {"decompress.seconds", "dsfs_decompress_seconds_total", C, "Seconds spent decompressing."},
    {"views.images_decoded", "dsfs_images_decoded_total", C, "Images decoded by the views."},
    {"views.decode_seconds", "dsfs_image_decode_seconds_total", C,
     "Seconds spent decoding images."},
    {"views.images_resized", "dsfs_images_resized_total", C, "Images resized by the views."},
    {"views.resize_seconds", "dsfs_image_resize_seconds_total", C,
     "Seconds spent resizing images."},
    {"push.files", "dsfs_push_files_total", C, "Files pushed into the page cache."},
    {"push.bytes", "dsfs_push_bytes_total", C, "Bytes pushed into the page cache."},
    {"push.budget_bytes", "dsfs_push_budget_bytes", G, "Budget of the pushes into the page cache."},
    {"push.failures", "dsfs_push_failures_total", C, "Pushes into the page cache that failed."},
    {"readahead.files", "dsfs_readahead_files_total", C, "Files read ahead into the RAM cache."},
    {"preload.bytes", "dsfs_preload_bytes", G, "Bytes the preload has loaded."},
    {"preload.total_bytes", "dsfs_preload_target_bytes", G, "Bytes the preload loads in all."},
    {"store.files", "dsfs_store_files", G, "Files in the store."},
    {"store.file_bytes", "dsfs_store_file_bytes", G, "Bytes of the store's files."},
    {"memory_guard.used_bytes", "dsfs_memory_used_bytes", G,
     "Memory used, as the memory guard sees it."},
    {"memory_guard.threshold_bytes", "dsfs_memory_threshold_bytes", G,
     "Memory use at which the guard sheds the RAM cache."},
    {"memory_guard.memory_pressure_events", "dsfs_memory_pressure_events_total", C,
     "Times memory pressure began."},
    {"memory_guard.shed_bytes", "dsfs_memory_shed_bytes_total", C,
     "Bytes shed from the RAM cache under memory pressure."},
    {"memory_limit.bytes", "dsfs_memory_limit_bytes", G,
     "The memory limit the default budgets come from."},
    {"kernel.image_bytes", "dsfs_kernel_image_bytes", G, "Size of the EROFS image (-o kernel)."},
    {"kernel.image_reads", "dsfs_kernel_image_reads_total", C, "Reads of the EROFS image."},
    {"kernel.image_bytes_read", "dsfs_kernel_image_read_bytes_total", C,
     "Bytes answered to reads of the EROFS image."},
    {"kernel.image_read_errors", "dsfs_kernel_image_read_errors_total", C,
     "Reads of the EROFS image that failed."},
    {"kernel.image_read_latency",
     "dsfs_kernel_image_read_duration_seconds",
     H,
     "Time per read of the EROFS image.",
     {},
     {},
     1e-6},
    {"kernel.readahead.bytes", "dsfs_kernel_readahead_bytes_total", C,
     "Bytes read ahead into the image's page cache."},
};

// The member at dotted `path` of `j`, or null.
const nlohmann::ordered_json* Find(const nlohmann::ordered_json& j, std::string_view path) {
  const nlohmann::ordered_json* at = &j;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return at;
}

std::string Number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

// A sample's value: integers as they are (exact up to 2^64), the rest scaled.
std::string Value(const nlohmann::ordered_json& v, double scale) {
  if (v.is_number_unsigned() && scale == 1) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer() && scale == 1) return std::to_string(v.get<int64_t>());
  return Number(v.get<double>() * scale);
}

// A label value as the format asks: UTF-8 (a byte that is not part of a character becomes
// U+FFFD: a mountpoint is any bytes, and one bad label makes the collector drop the file),
// backslash, double quote and line feed escaped.
std::string Escape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    char32_t cp;
    const size_t n = Utf8CodePoint(s.substr(i), &cp);
    if (n == 0)
      out += "\xEF\xBF\xBD";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.append(s.substr(i, n));
    i += n == 0 ? 1 : n;
  }
  return out;
}

// One histogram (HistogramJson) as _bucket, _sum and _count series.
void Histogram(std::string* out, std::string_view name, const std::string& labels,
               const nlohmann::ordered_json& h, double scale) {
  const nlohmann::ordered_json* buckets = Find(h, "buckets");
  const nlohmann::ordered_json* sum = Find(h, "sum_us");
  if (!buckets || !buckets->is_array() || !sum || !sum->is_number()) return;
  uint64_t cumulative = 0;
  size_t i = 0;
  for (const auto& b : *buckets) {
    if (!b.is_number_unsigned()) return;
    cumulative += b.get<uint64_t>();
    const bool last = i + 1 == buckets->size();
    const std::string le =
        last ? "+Inf"
             : Number(static_cast<double>(LatencyHistogram::BoundUs(static_cast<int>(i))) * scale);
    *out += std::string(name) + "_bucket{" + labels + ",le=\"" + le + "\"} " +
            std::to_string(cumulative) + "\n";
    ++i;
  }
  *out += std::string(name) + "_sum{" + labels + "} " + Value(*sum, scale) + "\n";
  *out += std::string(name) + "_count{" + labels + "} " + std::to_string(cumulative) + "\n";
}

}  // namespace

std::string PrometheusText(const nlohmann::ordered_json& stats, const std::string& mountpoint) {
  const std::string base = "mountpoint=\"" + Escape(mountpoint) + "\"";
  std::string out;
  for (size_t r = 0; r < std::size(kTable);) {
    // One family: the rows of this name.
    const Row& first = kTable[r];
    std::string series;
    for (; r < std::size(kTable) && kTable[r].name == first.name; ++r) {
      const Row& row = kTable[r];
      const nlohmann::ordered_json* v = Find(stats, row.path);
      if (!v) continue;
      std::vector<std::pair<std::string, const nlohmann::ordered_json*>> members;
      if (row.value == "*") {
        if (!v->is_object()) continue;
        for (auto it = v->begin(); it != v->end(); ++it) {
          members.emplace_back(
              base + "," + std::string(row.label) + "=\"" + Escape(it.key()) + "\"", &*it);
        }
      } else if (!row.label.empty()) {
        members.emplace_back(base + "," + std::string(row.label) + "=\"" + Escape(row.value) + "\"",
                             v);
      } else {
        members.emplace_back(base, v);
      }
      for (const auto& [labels, m] : members) {
        if (row.type == Type::kHistogram) {
          if (m->is_object()) Histogram(&series, row.name, labels, *m, row.scale);
        } else if (m->is_number()) {
          series += std::string(row.name) + "{" + labels + "} " + Value(*m, row.scale) + "\n";
        }
      }
    }
    if (series.empty()) continue;
    const char* type = first.type == Type::kCounter ? "counter"
                       : first.type == Type::kGauge ? "gauge"
                                                    : "histogram";
    out += "# HELP " + std::string(first.name) + " " + std::string(first.help) + "\n";
    out += "# TYPE " + std::string(first.name) + " " + type + "\n";
    out += series;
  }
  return out;
}

Status MetricsFile::Check(const std::string& path, const std::string& mountpoint) {
  const std::string what = "mount option metrics_file=" + path;
  if (path.empty() || path[0] != '/')
    return Status::InvalidArgument(what + ": not an absolute path");
  if (path.back() == '/') return Status::InvalidArgument(what + ": names a directory");
  // What is there already is replaced, and removed at unmount: only a metrics file of dsfs's
  // (or an empty file), never a store, a config file, a device or what a link points to.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(what + ": is a directory");
    if (S_ISLNK(st.st_mode)) return Status::InvalidArgument(what + ": is a symbolic link");
    if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(what + ": is not a regular file");
    std::string head;
    if (st.st_size > 0 && !(ReadSmallRegularFile(path, &head, sizeof(kMetricsFileStart) - 1) &&
                            head == kMetricsFileStart)) {
      return Status::InvalidArgument(what + ": holds something else than dsfs's metrics (" +
                                     "it would be replaced): remove it or name another file");
    }
  }
  // Not below the mountpoint: once mounted, nothing there can be written.
  const std::string dir = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  char* real_dir = ::realpath(dir.c_str(), nullptr);
  char* real_mp = ::realpath(mountpoint.c_str(), nullptr);
  const bool inside = real_dir && real_mp &&
                      (std::string_view(real_dir) == real_mp ||
                       std::string_view(real_dir).starts_with(std::string(real_mp) + "/"));
  ::free(real_dir);
  ::free(real_mp);
  if (inside) return Status::InvalidArgument(what + ": is inside the mountpoint " + mountpoint);
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, what + ": cannot create a file in " + dir);
  ::close(fd);
  ::unlink(tmp.c_str());
  return Status::OK();
}

MetricsFile::MetricsFile(std::string path, std::string mountpoint,
                         std::function<nlohmann::ordered_json()> stats)
    : path_(std::move(path)), mountpoint_(std::move(mountpoint)), stats_(std::move(stats)) {}

MetricsFile::~MetricsFile() {
  // Only the file this wrote: not one another process has put there since.
  struct stat st;
  if (written_ && ::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_ &&
      st.st_size == size_ && st.st_ctim.tv_sec == ctime_.tv_sec &&
      st.st_ctim.tv_nsec == ctime_.tv_nsec) {
    ::unlink(path_.c_str());
  }
}

void MetricsFile::Write() {
  const std::string text = PrometheusText(stats_(), mountpoint_);
  // A new file of a name no one could guess or plant a link at (the directory of a textfile
  // collector may be writable by others), renamed over PATH.
  std::string tmp = path_ + ".tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    LogRepeated(spdlog::level::warn, "metrics_file: cannot create {}: {}", tmp,
                std::strerror(errno));
    return;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  struct stat st;
  const bool ok = done == text.size() && ::fchmod(fd, 0644) == 0 && ::fstat(fd, &st) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    LogRepeated(spdlog::level::warn, "metrics_file: cannot write {}: {}", path_,
                std::strerror(ok ? errno : err));
    ::unlink(tmp.c_str());
    return;
  }
  // Its attributes once in place (a rename may change the ctime).
  if (::lstat(path_.c_str(), &st) != 0) return;
  written_ = true;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  size_ = st.st_size;
  ctime_ = st.st_ctim;
}

}  // namespace dsfs
