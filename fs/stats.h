// The stats of a mount as JSON: the one JSON writer of fs/ (nlohmann::json). The tree's own
// counters are Filesystem::StatsObject (fs/stats.cc); what a mount's stats file shows, /.dsfs's
// and a -o kernel mount's image server's alike, is assembled in one place, mount/stats.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/histogram.h"

namespace dsfs {

// `j` on one line, as the stats files have always shown it: `{"a": 1, "b": {"c": "x"}}` (the
// separators ", " and ": ", no other white space; bytes that are not UTF-8 become U+FFFD).
// Tools read the stats file with a flat parser (tools/cmd_stats.cc) and tests look for
// `"key": value`: the layout is part of the format.
std::string OneLineJson(const nlohmann::ordered_json& j);

// Seconds as the stats show them: rounded to milliseconds.
double StatsSeconds(double seconds);

// A latency histogram as the stats show it: {"count": N, "sum_us": S, "buckets": [c0, ...]},
// the buckets not cumulative, bucket i counting durations of at most 4^i microseconds
// (LatencyHistogram::BoundUs), the last one the longer ones. mount/metrics.h exports it.
nlohmann::ordered_json HistogramJson(const LatencyHistogram& h);

}  // namespace dsfs
