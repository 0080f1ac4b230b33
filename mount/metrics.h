// A mount's counters in the Prometheus text exposition format (version 0.0.4): what
// `dsfs stats --prometheus MNT` prints and `-o metrics_file=PATH` keeps written for
// node_exporter's textfile collector (no listening socket: the unit's lockdown holds).
//
// Every metric comes from ONE table over the stats object (mount/stats.h; the table is in
// metrics.cc): a path into the JSON, a metric name (dsfs_*, `_total` for counters, base units:
// bytes, seconds), its type and help, and a label. A path the stats object lacks (no S3 backend,
// no memory guard, a classic mount's kernel block) gives no series. Every series carries a
// `mountpoint` label. docs/usage.md ("Metrics") lists the names.
#pragma once

#include <sys/stat.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace dsfs {

// The exposition text of `stats` (a mount's stats object) for the mount at `mountpoint`:
// HELP and TYPE lines, then the series, one family after the other; ends with a newline.
std::string PrometheusText(const nlohmann::ordered_json& stats, const std::string& mountpoint);

// -o metrics_file=PATH: PATH rewritten atomically (a new PATH.tmp-XXXXXX, then renamed over it)
// on each Write, and removed when this goes (only if it is still the file this wrote).
// Thread safety: Write from one thread at a time.
class MetricsFile {
 public:
  // OK if PATH can be written: an absolute path, not below `mountpoint`, in a directory where
  // this process can create a file (tried: a temporary made and removed), and nothing there
  // yet but a metrics file of dsfs's or an empty file (what is there is replaced, and removed
  // at unmount). Otherwise the one-line error the mount fails with, before mounting.
  [[nodiscard]] static Status Check(const std::string& path, const std::string& mountpoint);

  // `stats` gives the stats object on each Write (from the writing thread).
  MetricsFile(std::string path, std::string mountpoint,
              std::function<nlohmann::ordered_json()> stats);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Writes the file now; a failure is logged (repeats held back), never fatal.
  void Write();

 private:
  std::string path_, mountpoint_;
  std::function<nlohmann::ordered_json()> stats_;
  bool written_ = false;
  // The file last renamed to path_: an inode number alone may be reused by another's file.
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  off_t size_ = 0;
  struct timespec ctime_ = {};
};

}  // namespace dsfs
