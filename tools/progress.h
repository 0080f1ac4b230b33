// How long: the progress line of dsfs pack, add, convert, push and verify. On a terminal (stderr a
// tty, no -q) one line redrawn in place with the phase, the counts, the rate and the time left;
// else nothing until the command's own summary line.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "pack/packer.h"

namespace dsfs {

// "42s", "3m05s", "1h02m"; "--" for a negative or unknown duration.
std::string FormatDuration(double seconds);

// The line for `p`, `elapsed_s` after the rate started being measured, when `files_base` files
// and `bytes_base` bytes had been done (so a phase that started late, or a resumed count, does
// not skew the rate). Rate and time left come from bytes when bytes_total is known, else from
// files; "-- left" while nothing was measured yet. Pure: the tests call it with made-up times.
std::string FormatProgress(const PackProgress& p, double elapsed_s, uint64_t files_base,
                           uint64_t bytes_base);

class ProgressLine {
 public:
  // Draws on `err` only if `enabled` (callers pass !quiet && isatty(STDERR_FILENO)).
  ProgressLine(std::ostream& err, bool enabled);
  ~ProgressLine();  // Clear()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool enabled() const { return enabled_; }
  // True when enabled and the line is not drawn or was drawn 200 ms ago or more: callers of a
  // busy loop update only then.
  bool Due() const;
  // Redraws the line. The rate is measured from the update before the first one of the
  // "compressing", "copying" or "finishing" phase (scanning and training say how far they are,
  // not how fast).
  void Update(const PackProgress& p);
  // Erases the line, so the summary (or an error) starts on a clean line.
  void Clear();

 private:
  std::ostream& err_;
  const bool enabled_;
  bool drawn_ = false;
  bool measuring_ = false;
  std::chrono::steady_clock::time_point start_, prev_;
  uint64_t files_base_ = 0, bytes_base_ = 0;
  uint64_t prev_files_ = 0, prev_bytes_ = 0;
};

}  // namespace dsfs
