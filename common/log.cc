#include "common/log.h"

#include <fcntl.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/path.h"

namespace dsfs {
namespace {

// %Q: the message, printable (PrintableName without escaping backslashes): a name, a server's
// word or a user's argument in a line cannot break it nor send the terminal an escape.
constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%l] %Q";

// True if stderr is the journal's stream (a systemd service's stderr): journald documents
// $JOURNAL_STREAM as "DEVICE:INODE" of that stream.
bool StderrIsJournal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  struct stat st;
  if (!env || ::fstat(2, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(env, "%llu:%llu", &dev, &ino) != 2) return false;
  return dev == static_cast<unsigned long long>(st.st_dev) &&
         ino == static_cast<unsigned long long>(st.st_ino);
}

// "%*": the syslog priority of the level, as journald reads from a "<N>" line prefix.
class SyslogPriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int priority = LOG_DEBUG;
    switch (msg.level) {
      case spdlog::level::critical:
        priority = LOG_CRIT;
        break;
      case spdlog::level::err:
        priority = LOG_ERR;
        break;
      case spdlog::level::warn:
        priority = LOG_WARNING;
        break;
      case spdlog::level::info:
        priority = LOG_INFO;
        break;
      default:
        break;
    }
    dest.push_back(static_cast<char>('0' + priority));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

class PrintableMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string text =
        PrintableName(std::string_view(msg.payload.data(), msg.payload.size()), false);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PrintableMessageFlag>();
  }
};

std::unique_ptr<spdlog::formatter> MakeFormatter(const std::string& pattern) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriorityFlag>('*');
  formatter->add_flag<PrintableMessageFlag>('Q').set_pattern(pattern);
  return formatter;
}

// Under systemd, stderr lines go to the journal, which stamps them itself: each line gets
// only a "<N>" priority prefix, so `journalctl -p err` works.
void UseJournalFormatIfStderrIsJournal(spdlog::logger* logger) {
  if (!StderrIsJournal()) return;
  logger->set_formatter(MakeFormatter("<%*>%Q"));
}

// A file sink that can be reopened by name: after logrotate renames the file, SIGHUP makes the
// daemon write to a new one. (spdlog's basic_file_sink keeps its descriptor for good.)
class ReopenableFileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ReopenableFileSink(std::string path) : path_(std::move(path)) {}
  ~ReopenableFileSink() override {
    if (file_) std::fclose(file_);
  }

  // Opens (or reopens) the file; on failure the old one is kept and errno is returned.
  int Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) return errno;
    FILE* f = ::fdopen(fd, "a");
    if (!f) {
      int err = errno;
      ::close(fd);
      return err;
    }
    if (file_) std::fclose(file_);
    file_ = f;
    return 0;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!file_) return;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), file_);
    // Log lines are rare (nothing per request above debug): write each one through, so a
    // crash or kill -9 loses none.
    std::fflush(file_);
  }
  void flush_() override {
    if (file_) std::fflush(file_);
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;  // guarded by mutex_ (base_sink's)
};

std::mutex g_sink_mu;                             // guards g_file_sink and sink replacement
std::shared_ptr<ReopenableFileSink> g_file_sink;  // set while logging to a file

void ReplaceSinks(spdlog::sink_ptr sink) {
  auto logger = Log();
  sink->set_formatter(MakeFormatter(kPattern));
  // spdlog's logger does not lock its sink list: replacing it races with threads that log.
  // Callers switch sinks while the process has one thread (before serving) or accept that a
  // line written at that instant may be lost.
  logger->sinks().clear();
  logger->sinks().push_back(std::move(sink));
}

}  // namespace

std::shared_ptr<spdlog::logger> Log() {
  static std::once_flag once;
  static std::shared_ptr<spdlog::logger> logger;
  std::call_once(once, [] {
    logger = spdlog::get("dsfs");
    if (!logger) {
      logger = spdlog::stderr_color_mt("dsfs");
      logger->set_formatter(MakeFormatter(kPattern));
      UseJournalFormatIfStderrIsJournal(logger.get());
      logger->set_level(spdlog::level::warn);
    }
  });
  return logger;
}

bool IsLogLevel(std::string_view name) {
  auto level = spdlog::level::from_str(std::string(name));
  return !(level == spdlog::level::off && name != "off");
}

bool SetLogLevel(std::string_view name) {
  if (!IsLogLevel(name)) return false;
  Log()->set_level(spdlog::level::from_str(std::string(name)));
  return true;
}

Status LogToFile(const std::string& path) {
  auto sink = std::make_shared<ReopenableFileSink>(path);
  if (int err = sink->Open(); err != 0) return Status::FromErrno(err, "log file " + path);
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_file_sink = sink;
  ReplaceSinks(sink);
  return Status::OK();
}

void LogToStderr() {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_file_sink.reset();
  ReplaceSinks(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  UseJournalFormatIfStderrIsJournal(Log().get());
}

void LogToSyslogUnlessFile() {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_file_sink) return;
  ReplaceSinks(std::make_shared<spdlog::sinks::syslog_sink_mt>("dsfs", LOG_PID, LOG_DAEMON, true));
}

void ReopenLogFile() {
  std::shared_ptr<ReopenableFileSink> sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mu);
    sink = g_file_sink;
  }
  if (!sink) return;
  if (int err = sink->Open(); err != 0) {
    Log()->error("cannot reopen the log file: {} (still writing to the old one)",
                 std::strerror(err));
    return;
  }
  Log()->info("log file reopened");
}

// ---------------------------------------------------------------------------------------------

namespace {
constexpr const char* kOverflowKey = "";  // shared by messages beyond max_keys
}  // namespace

LogLimiter::LogLimiter(std::shared_ptr<spdlog::logger> logger, std::chrono::milliseconds interval,
                       size_t max_keys, NowFn now)
    : logger_(std::move(logger)), interval_(interval), max_keys_(max_keys), now_(std::move(now)) {}

void LogLimiter::Summarize(const std::string& message, Entry* e, Clock::time_point now) {
  double seconds = std::chrono::duration<double>(now - e->last_logged).count();
  if (message == kOverflowKey) {
    logger_->log(e->level, "{} more messages not logged in the last {:.0f} s (too many distinct)",
                 e->repeats, seconds);
  } else {
    logger_->log(e->level, "{} (repeated {} times in the last {:.0f} s)", message, e->repeats,
                 seconds);
  }
  e->repeats = 0;
  e->last_logged = now;
}

void LogLimiter::Log(spdlog::level::level_enum level, const std::string& message) {
  if (!logger_->should_log(level)) return;
  Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(message);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      it = entries_.find(kOverflowKey);
      if (it == entries_.end()) {
        // The first message over the limit is logged; the others are counted together.
        entries_.emplace(kOverflowKey, Entry{level, now, 0});
        logger_->log(level, "{}", message);
        return;
      }
    } else {
      entries_.emplace(message, Entry{level, now, 0});
      logger_->log(level, "{}", message);
      return;
    }
  }
  Entry& e = it->second;
  if (now - e.last_logged < interval_) {
    ++e.repeats;
    return;
  }
  if (e.repeats > 0) Summarize(it->first, &e, now);
  logger_->log(level, "{}", message);
  e.last_logged = now;
}

void LogLimiter::Flush(bool all) {
  Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    bool due = all || now - e.last_logged >= interval_;
    if (due && e.repeats > 0) {
      Summarize(it->first, &e, now);
      ++it;
    } else if (due) {
      // Quiet for a whole interval: its next occurrence is logged anyway.
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t LogLimiter::tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

LogLimiter& RepeatedLog() {
  static LogLimiter* limiter = new LogLimiter(Log(), std::chrono::seconds(10));
  return *limiter;
}

}  // namespace dsfs
