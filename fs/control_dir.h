// The hidden control directory of a mount (/.dsfs): its names, which every layer that has to
// know them (the tree it hides, the packer's warning, the views, `dsfs stats`) takes from here.
//
// What it holds: one directory per view not mounted as the root ("original", "bmp", "npy",
// "tensor"), and the stats file (a JSON of the mount's counters, fs/stats.h). Its inode
// numbers are in fs/inode_space.h; Filesystem serves it (fs/control_dir.cc).
#pragma once

#include <string_view>

namespace dsfs {

// The name of the control directory in the root of every mount. A stored root entry of this
// name is hidden behind it.
inline constexpr std::string_view kControlDirName = ".dsfs";
// The stats file in it.
inline constexpr std::string_view kStatsFileName = "stats";

}  // namespace dsfs
