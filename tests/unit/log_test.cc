// Logging: the repeat limiter (one line per message per interval, then a count) and the log
// file that SIGHUP reopens after logrotate.
#include "common/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "tests/support/test_util.h"

namespace dsfs {
namespace {

using testing::LineCount;
using testing::ReadFile;
using testing::TempDir;
using Clock = LogLimiter::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A limiter over a logger that writes to a string, with a clock the test moves.
class LogLimiterTest : public ::testing::Test {
 protected:
  LogLimiterTest() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l %v");
    logger_ = std::make_shared<spdlog::logger>("limiter_test", sink);
    logger_->set_level(spdlog::level::info);
  }
  std::unique_ptr<LogLimiter> Make(size_t max_keys = 1024) {
    return std::make_unique<LogLimiter>(logger_, seconds(10), max_keys, [this] { return now_; });
  }
  std::string Take() {
    std::string s = out_.str();
    out_.str("");
    return s;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> logger_;
  Clock::time_point now_ = Clock::time_point() + seconds(1000);
};

TEST_F(LogLimiterTest, AMillionRepeatsAreOneLineAndACount) {
  auto limiter = Make();
  const std::string msg = "read on inode 7: payload checksum mismatch";
  for (int i = 0; i < 1000000; ++i) {
    limiter->Log(spdlog::level::err, msg);
    if (i % 1000 == 0) now_ += milliseconds(1);  // 1 s in all: within one interval
  }
  EXPECT_EQ(Take(), "error " + msg + "\n");
  // Flushing before the interval has passed says nothing yet...
  limiter->Flush(false);
  EXPECT_EQ(Take(), "");
  // ...after it, the count of what was held back.
  now_ += seconds(10);
  limiter->Flush(false);
  EXPECT_EQ(Take(), "error " + msg + " (repeated 999999 times in the last 11 s)\n");
  // Quiet for another interval: forgotten, and logged again at once when it recurs.
  now_ += seconds(10);
  limiter->Flush(false);
  EXPECT_EQ(limiter->tracked(), 0u);
  EXPECT_EQ(Take(), "");
  limiter->Log(spdlog::level::err, msg);
  EXPECT_EQ(Take(), "error " + msg + "\n");
}

TEST_F(LogLimiterTest, OneLinePerIntervalWithTheCountOfTheLastOne) {
  auto limiter = Make();
  // 100 repeats per second for 35 s: four lines let through (t = 0, 10, 20, 30 s), each after
  // the first with the count held back since the one before.
  for (int t = 0; t < 3500; ++t) {
    limiter->Log(spdlog::level::warn, "same");
    now_ += milliseconds(10);
  }
  std::string out = Take();
  EXPECT_EQ(LineCount(out), 7) << out;  // 4 messages + 3 summaries
  EXPECT_NE(out.find("same (repeated 999 times in the last 10 s)"), std::string::npos) << out;
  limiter->Flush(/*all=*/true);
  EXPECT_EQ(Take(), "warning same (repeated 499 times in the last 5 s)\n");
}

TEST_F(LogLimiterTest, DistinctMessagesAreLimitedSeparately) {
  auto limiter = Make();
  for (int i = 0; i < 100; ++i) {
    limiter->Log(spdlog::level::err, "inode 1 damaged");
    limiter->Log(spdlog::level::err, "inode 2 damaged");
  }
  EXPECT_EQ(Take(), "error inode 1 damaged\nerror inode 2 damaged\n");
  limiter->Flush(true);
  std::string out = Take();
  EXPECT_NE(out.find("inode 1 damaged (repeated 99 times"), std::string::npos) << out;
  EXPECT_NE(out.find("inode 2 damaged (repeated 99 times"), std::string::npos) << out;
}

TEST_F(LogLimiterTest, TooManyDistinctMessagesShareOneCount) {
  auto limiter = Make(/*max_keys=*/4);
  for (int i = 0; i < 1000; ++i) limiter->Log(spdlog::level::err, "file " + std::to_string(i));
  // Four tracked, the fifth logged as the first over the limit, the rest counted together.
  std::string out = Take();
  EXPECT_EQ(LineCount(out), 5) << out;
  EXPECT_LE(limiter->tracked(), 5u);
  limiter->Flush(true);
  EXPECT_EQ(Take(), "error 995 more messages not logged in the last 0 s (too many distinct)\n");
}

TEST_F(LogLimiterTest, MessagesBelowTheLevelAreNeitherLoggedNorCounted) {
  auto limiter = Make();
  for (int i = 0; i < 10; ++i) limiter->Log(spdlog::level::debug, "noise");
  limiter->Flush(true);
  EXPECT_EQ(Take(), "");
  EXPECT_EQ(limiter->tracked(), 0u);
}

TEST(LogLevelTest, NamesAreChecked) {
  for (const char* ok : {"trace", "debug", "info", "warn", "error", "off"}) {
    EXPECT_TRUE(IsLogLevel(ok)) << ok;
  }
  for (const char* bad : {"", "verbose", "INFO ", "warning2"}) EXPECT_FALSE(IsLogLevel(bad)) << bad;
  EXPECT_FALSE(SetLogLevel("loud"));
}

// logrotate renames the file, then sends SIGHUP: the daemon must write to a new file by the
// old name, not keep writing to the renamed one.
// What a line says comes from names, servers and users: printed escaped, so that no
// newline forges a second line and no escape sequence reaches a terminal showing the log.
TEST(LogFileTest, ControlCharactersInAMessageAreEscaped) {
  TempDir dir;
  std::string path = dir / "dsfs.log";
  ASSERT_TRUE(LogToFile(path).ok());
  SetLogLevel("info");
  Log()->warn("role {} refused", "evil\x1b[2J\n[2026-01-01 00:00:00.000] [error] forged\a");
  LogToStderr();
  SetLogLevel("warn");
  const std::string log = ReadFile(path);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_EQ(log.find_first_of("\x1b\a"), std::string::npos) << log;
  EXPECT_NE(log.find("role evil\\033[2J\\012[2026-01-01 00:00:00.000] [error] forged\\007 refused"),
            std::string::npos)
      << log;
}

TEST(LogFileTest, ReopenWritesToANewFileAfterARename) {
  TempDir dir;
  std::string path = dir / "dsfs.log";
  ASSERT_TRUE(LogToFile(path).ok());
  SetLogLevel("info");
  Log()->info("before rotation");
  ASSERT_EQ(std::rename(path.c_str(), (dir / "dsfs.log.1").c_str()), 0);
  Log()->info("still the old file");
  ReopenLogFile();
  Log()->info("after rotation");
  std::string old_log = ReadFile(dir / "dsfs.log.1"), new_log = ReadFile(path);
  EXPECT_NE(old_log.find("before rotation"), std::string::npos) << old_log;
  EXPECT_NE(old_log.find("still the old file"), std::string::npos) << old_log;
  EXPECT_EQ(old_log.find("after rotation"), std::string::npos) << old_log;
  EXPECT_NE(new_log.find("after rotation"), std::string::npos) << new_log;
  EXPECT_NE(new_log.find("[info]"), std::string::npos) << "lines keep the usual pattern";

  // A log file that cannot be opened is an error, and the log stays where it was.
  Status s = LogToFile(dir / "no/such/dir/x.log");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.log"), std::string::npos) << s.message();
  Log()->info("still here");
  EXPECT_NE(ReadFile(path).find("still here"), std::string::npos);
  LogToStderr();
  SetLogLevel("warn");
}

}  // namespace
}  // namespace dsfs
