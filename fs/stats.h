// The stats of a mount as JSON: the one JSON writer of fs/ (nlohmann::json), for the stats file
// of /.dsfs (Filesystem::StatsObject, fs/stats.cc) and of a -o kernel mount's image server.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dsfs {

// `j` on one line, as the stats files have always shown it: `{"a": 1, "b": {"c": "x"}}` (the
// separators ", " and ": ", no other white space; bytes that are not UTF-8 become U+FFFD).
// Tools read the stats file with a flat parser (tools/cmd_stats.cc) and tests look for
// `"key": value`: the layout is part of the format.
std::string OneLineJson(const nlohmann::ordered_json& j);

// Seconds as the stats show them: rounded to milliseconds.
double StatsSeconds(double seconds);

}  // namespace dsfs
