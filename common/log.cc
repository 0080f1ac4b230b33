#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>
#include <string>

namespace dsfs {

std::shared_ptr<spdlog::logger> Log() {
  static std::once_flag once;
  static std::shared_ptr<spdlog::logger> logger;
  std::call_once(once, [] {
    logger = spdlog::get("dsfs");
    if (!logger) {
      logger = spdlog::stderr_color_mt("dsfs");
      logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
      logger->set_level(spdlog::level::warn);
    }
  });
  return logger;
}

bool SetLogLevel(std::string_view name) {
  auto level = spdlog::level::from_str(std::string(name));
  if (level == spdlog::level::off && name != "off") return false;
  Log()->set_level(level);
  return true;
}

}  // namespace dsfs
