// Human-facing sizes: parsing "8G", "512K", "1048576" and formatting byte counts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dsfs {

// Parses a size with an optional binary suffix (K, M, G, T; optional trailing "B" or "iB").
Status ParseSize(std::string_view text, uint64_t* bytes);

// "1.5 MB"-style text (decimal units, as du -h --si) for summaries.
std::string FormatBytes(uint64_t bytes);

}  // namespace dsfs
