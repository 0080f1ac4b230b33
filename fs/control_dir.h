// The hidden control directory of a mount (/.dsfs): its name, which every layer that has to
// know it (the tree it hides, the packer's warning, the views) takes from here.
#pragma once

#include <string_view>

namespace dsfs {

// The name of the control directory in the root of every mount. A stored root entry of this
// name is hidden behind it.
inline constexpr std::string_view kControlDirName = ".dsfs";

}  // namespace dsfs
