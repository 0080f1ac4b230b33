// The tree's own counters as JSON (the stats file's core; mount/stats.h adds the rest) and
// the systemd status line of a Filesystem.
#include "fs/stats.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "common/units.h"
#include "fs/filesystem.h"

namespace dsfs {

std::string OneLineJson(const nlohmann::ordered_json& j) {
  // Indented by 0, every member is on a line of its own, after ": "; strings escape their line
  // breaks, so each newline is layout: dropped after "{" and before "}", a space elsewhere.
  const std::string lines = j.dump(0, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string out;
  out.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i] != '\n') {
      out += lines[i];
    } else if (out.back() != '{' && (i + 1 >= lines.size() || lines[i + 1] != '}')) {
      out += ' ';
    }
  }
  return out;
}

double StatsSeconds(double seconds) { return std::round(seconds * 1000) / 1000; }

nlohmann::ordered_json HistogramJson(const LatencyHistogram& h) {
  const LatencyHistogram::Snapshot s = h.snapshot();
  return {{"count", s.count},
          {"sum_us", s.sum_ns / 1000},
          {"buckets", nlohmann::ordered_json(s.counts)}};
}

nlohmann::ordered_json Filesystem::StatsObject() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["uptime_s"] = StatsSeconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  if (transport_stats_) {
    TransportStats ts = transport_stats_();
    nlohmann::ordered_json queues = nlohmann::ordered_json::object();
    for (size_t q = 0; q < ts.per_queue_requests.size(); ++q) {
      queues[std::to_string(q)] = ts.per_queue_requests[q];
    }
    j["transport"] = {{"serving", ts.description},
                      {"ring_requests", ts.ring_requests},
                      {"classic_requests", ts.classic_requests},
                      {"queue_requests", std::move(queues)},
                      {"ioctls", ts.ioctls}};
  }
  j["requests"] = {{"lookup", n(c.lookup)}, {"getattr", n(c.getattr)}, {"readdir", n(c.readdir)},
                   {"open", n(c.open)},     {"read", n(c.read)},       {"readlink", n(c.readlink)},
                   {"statfs", n(c.statfs)}};
  j["bytes_served"] = n(c.bytes_read);
  j["read_errors"] = n(c.errors);
  nlohmann::ordered_json cache = nlohmann::ordered_json::object();
  if (cache_) {
    ByteCache::Stats cs = cache_->stats();
    cache = {{"hits", cs.hits},       {"misses", cs.misses},
             {"bytes", cs.bytes},     {"capacity_bytes", cs.capacity_bytes},
             {"entries", cs.entries}, {"evictions", cs.evictions}};
  }
  j["cache"] = std::move(cache);
  j["decompress"] = {{"chunks", store_->decoded_chunks()},
                     {"seconds", StatsSeconds(static_cast<double>(store_->decode_ns()) / 1e9)}};
  if (prefetcher_) {
    Prefetcher::Stats ps = prefetcher_->stats();
    j["push"] = {{"files", ps.pushed_files},
                 {"bytes", ps.pushed_bytes},
                 {"budget_bytes", ps.push_budget_bytes},
                 {"retries", ps.push_retries},
                 {"failures", ps.push_failures}};
    j["readahead"] = {{"files", ps.readahead_files}, {"chunks", ps.readahead_chunks}};
    // Preload's progress: how far (of the totals counted first), for how long, how fast and
    // how long still to go at that rate.
    double pct = ps.preload_total_bytes ? 100.0 * static_cast<double>(ps.preload_bytes) /
                                              static_cast<double>(ps.preload_total_bytes)
                                        : (ps.preload_done ? 100.0 : 0.0);
    double rate =
        ps.preload_seconds > 0 ? static_cast<double>(ps.preload_bytes) / ps.preload_seconds : 0.0;
    double left = std::string_view(ps.preload_state) == "loading" && rate > 0
                      ? static_cast<double>(ps.preload_total_bytes -
                                            std::min(ps.preload_bytes, ps.preload_total_bytes)) /
                            rate
                      : 0.0;
    j["preload"] = {{"state", ps.preload_state},
                    {"files", ps.preload_files},
                    {"bytes", ps.preload_bytes},
                    {"total_files", ps.preload_total_files},
                    {"total_bytes", ps.preload_total_bytes},
                    {"percent", std::round(pct * 10) / 10},
                    {"seconds", StatsSeconds(ps.preload_seconds)},
                    {"bytes_per_s", static_cast<uint64_t>(rate)},
                    {"seconds_left", StatsSeconds(left)},
                    {"done", ps.preload_done ? 1 : 0}};
    j["queued_jobs"] = ps.queued_jobs;
  }
  uint64_t tensor_indexes;
  {
    std::lock_guard lock(mu_);
    tensor_indexes = tensors_.size();
  }
  j["views"] = {{"images_decoded", n(images_decoded_)},
                {"decode_seconds", StatsSeconds(static_cast<double>(n(image_decode_ns_)) / 1e9)},
                {"images_resized", n(images_resized_)},
                {"resize_seconds", StatsSeconds(static_cast<double>(n(image_resize_ns_)) / 1e9)},
                {"tensor_indexes", tensor_indexes}};
  // A remote store's requests and disk cache (local backends have none: no key).
  auto backend = store_->backend_counters();
  if (!backend.empty()) {
    nlohmann::ordered_json b = {{"name", std::string(store_->backend_name())}};
    for (const auto& [name, value] : backend) b[name] = value;
    j["backend"] = std::move(b);
  }
  const StoreHeader& h = store_->header();
  j["store"] = {
      {"files", h.file_count}, {"directories", h.dir_count}, {"file_bytes", h.file_bytes}};
  // Time per request in the core, by operation (RequestCounters::latency).
  nlohmann::ordered_json latency = nlohmann::ordered_json::object();
  for (int op = 0; op < RequestCounters::kOps; ++op) {
    latency[RequestCounters::kOpNames[op]] = HistogramJson(c.latency[op]);
  }
  j["latency"] = std::move(latency);
  return j;
}

std::string Filesystem::StatsJson() const {
  return stats_source_ ? stats_source_() : OneLineJson(StatsObject());
}

std::string Filesystem::StatusLine() const {
  auto n = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  const RequestCounters& c = counters_;
  uint64_t requests = n(c.lookup) + n(c.getattr) + n(c.readdir) + n(c.open) + n(c.read) +
                      n(c.readlink) + n(c.statfs);
  std::string line = "serving: " + std::to_string(requests) + " requests, " +
                     FormatBytes(n(c.bytes_read)) + " read, " + std::to_string(n(c.errors)) +
                     " errors; ";
  if (cache_) {
    ByteCache::Stats cs = cache_->stats();
    uint64_t lookups = cs.hits + cs.misses;
    line += "cache " + FormatBytes(cs.bytes) + " of " + FormatBytes(cs.capacity_bytes) + ", " +
            std::to_string(lookups == 0 ? 0 : cs.hits * 100 / lookups) + "% hits";
  } else {
    line += "no cache";
  }
  if (prefetcher_) {
    Prefetcher::Stats ps = prefetcher_->stats();
    if (std::string_view(ps.preload_state) == "loading" && ps.preload_total_bytes) {
      line += "; preload " +
              std::to_string(std::min(ps.preload_bytes, ps.preload_total_bytes) * 100 /
                             ps.preload_total_bytes) +
              "%";
    }
  }
  if (transport_stats_) line += "; transport " + transport_stats_().description;
  return line;
}

}  // namespace dsfs
