// The one spdlog logger dsfs library code writes to ("dsfs"). Tools configure it once (level,
// sink); library code only fetches it. Never write to std::cout/std::cerr from library code.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace dsfs {

// Returns the "dsfs" logger, creating a stderr logger on first use. Thread-safe.
std::shared_ptr<spdlog::logger> Log();

// Sets the level from a name (trace, debug, info, warn, error, off). Returns false on a bad name.
bool SetLogLevel(std::string_view name);

}  // namespace dsfs
