// The one spdlog logger dsfs library code writes to ("dsfs"). Tools configure it once (level,
// where it writes); library code only fetches it. Never write to std::cout/std::cerr from library
// code.
//
// Where the log goes: stderr by default (in the foreground, and under systemd, whose journal
// captures a service's stderr: there, lines carry a "<N>" priority prefix instead of a time), a
// file (`-o log_file=PATH`, reopened on SIGHUP so logrotate can move it away), or syslog (a
// background daemon that has no stderr left).
//
// Errors that can repeat once per request (a damaged payload read a million times) go through
// LogRepeated: one line per message per interval, then a "repeated K times" summary.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// Returns the "dsfs" logger, creating a stderr logger on first use. Thread-safe.
std::shared_ptr<spdlog::logger> Log();

// Sets the level from a name (trace, debug, info, warn, error, off). Returns false on a bad name.
bool SetLogLevel(std::string_view name);
// True if `name` is a level SetLogLevel accepts.
bool IsLogLevel(std::string_view name);

// Sends the log to the file at `path` (appending; created 0640 if missing) instead of where it
// went. IOError if it cannot be opened; the log is then unchanged.
[[nodiscard]] Status LogToFile(const std::string& path);
// Sends the log to stderr again (the default).
void LogToStderr();
// Sends the log to syslog (facility daemon, tagged "dsfs[PID]") unless it goes to a file.
void LogToSyslogUnlessFile();
// Closes and reopens the log file (after logrotate moved it); a no-op unless logging to a file.
// Safe to call from any thread, never from a signal handler.
void ReopenLogFile();

// Limits how often one message is logged. Each distinct message (its text is its key) is
// logged at most once per `interval`; repeats in between are counted, and the count is logged
// as "<message> (repeated K times in the last S s)" with the next line let through or by
// Flush. At most `max_keys` messages are tracked; beyond that, new messages share one key
// (their first text is logged, the rest counted).
//
// Thread safety: every method may be called from any number of threads (one mutex).
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using NowFn = std::function<Clock::time_point()>;

  LogLimiter(std::shared_ptr<spdlog::logger> logger, std::chrono::milliseconds interval,
             size_t max_keys = 1024, NowFn now = &Clock::now);

  // Logs `message` at `level` now, or counts it if the same message was logged less than
  // `interval` ago. Messages below the logger's level are dropped without being counted.
  void Log(spdlog::level::level_enum level, const std::string& message);

  // Logs the "repeated K times" summary of every message whose interval has passed with
  // repeats counted (all of them if `all`, e.g. at shutdown), and forgets messages that have
  // been quiet for an interval. Call it periodically so the last burst is reported.
  void Flush(bool all);

  // Messages being tracked (for tests).
  size_t tracked() const;

 private:
  struct Entry {
    spdlog::level::level_enum level;
    Clock::time_point last_logged;
    uint64_t repeats = 0;  // suppressed since last_logged
  };
  void Summarize(const std::string& message, Entry* e, Clock::time_point now);

  std::shared_ptr<spdlog::logger> logger_;
  const std::chrono::milliseconds interval_;
  const size_t max_keys_;
  const NowFn now_;
  mutable std::mutex mu_;                 // guards entries_
  std::map<std::string, Entry> entries_;  // message -> when it was last logged
};

// The process-wide limiter over Log(), 10 s per message. Code that may log once per request
// logs errors through it.
LogLimiter& RepeatedLog();
template <typename... Args>
void LogRepeated(spdlog::level::level_enum level, fmt::format_string<Args...> format,
                 Args&&... args) {
  if (!Log()->should_log(level)) return;
  RepeatedLog().Log(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dsfs
