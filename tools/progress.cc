#include "tools/progress.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/units.h"

namespace dsfs {

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "--";
  auto s = static_cast<uint64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  }
  return buf;
}

std::string FormatProgress(const PackProgress& p, double elapsed_s, uint64_t files_base,
                           uint64_t bytes_base) {
  std::string line = std::string(p.phase) + " " + std::to_string(p.files_done);
  if (p.files_total) line += "/" + std::to_string(p.files_total);
  line += " files  " + FormatBytes(p.bytes_done);
  if (p.bytes_total) line += "/" + FormatBytes(p.bytes_total);
  uint64_t done = p.bytes_total ? p.bytes_done : p.files_done;
  uint64_t total = p.bytes_total ? p.bytes_total : p.files_total;
  char buf[64];
  if (total) {
    std::snprintf(buf, sizeof(buf), "  %.1f%%",
                  100.0 * static_cast<double>(std::min(done, total)) / static_cast<double>(total));
    line += buf;
  }
  uint64_t files = p.files_done > files_base ? p.files_done - files_base : 0;
  uint64_t bytes = p.bytes_done > bytes_base ? p.bytes_done - bytes_base : 0;
  uint64_t measured = p.bytes_total ? bytes : files;
  double left = -1;
  if (elapsed_s > 0 && measured > 0) {
    std::snprintf(
        buf, sizeof(buf), "  %.0f files/s  %s/s", static_cast<double>(files) / elapsed_s,
        FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes) / elapsed_s)).c_str());
    line += buf;
    if (total) {
      left = static_cast<double>(total > done ? total - done : 0) /
             (static_cast<double>(measured) / elapsed_s);
    }
  }
  if (total && done >= total) left = 0;
  return line + "  " + FormatDuration(left) + " left";
}

ProgressLine::ProgressLine(std::ostream& err, bool enabled) : err_(err), enabled_(enabled) {}

ProgressLine::~ProgressLine() { Clear(); }

void ProgressLine::Update(const PackProgress& p) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  bool rated = std::strcmp(p.phase, "compressing") == 0 || std::strcmp(p.phase, "copying") == 0 ||
               std::strcmp(p.phase, "pushing") == 0 || std::strcmp(p.phase, "finishing") == 0 ||
               std::strcmp(p.phase, "verifying") == 0 || std::strcmp(p.phase, "warming") == 0;
  if (rated && !measuring_) {
    // From the update before (the end of training, which starts the compression), else now.
    measuring_ = true;
    start_ = drawn_ ? prev_ : now;
    files_base_ = drawn_ ? prev_files_ : p.files_done;
    bytes_base_ = drawn_ ? prev_bytes_ : p.bytes_done;
  }
  prev_ = now;
  prev_files_ = p.files_done;
  prev_bytes_ = p.bytes_done;
  double elapsed = measuring_ ? std::chrono::duration<double>(now - start_).count() : 0;
  err_ << "\r" << FormatProgress(p, elapsed, files_base_, bytes_base_) << "\033[K" << std::flush;
  drawn_ = true;
}

bool ProgressLine::Due() const {
  return enabled_ &&
         (!drawn_ || std::chrono::steady_clock::now() - prev_ >= std::chrono::milliseconds(200));
}

void ProgressLine::Clear() {
  if (!drawn_) return;
  err_ << "\r\033[K" << std::flush;
  drawn_ = false;
  measuring_ = false;
}

}  // namespace dsfs
