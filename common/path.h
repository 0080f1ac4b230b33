// Splitting '/'-separated paths (store paths, archive entry names).
#pragma once

#include <string_view>
#include <vector>

namespace dsfs {

// The components of `path` in order, without empty ones and ".": "./a//b/." -> {"a", "b"}.
// ".." is returned as is; what it means is the caller's business. The views point into `path`.
std::vector<std::string_view> PathParts(std::string_view path);

}  // namespace dsfs
