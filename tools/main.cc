#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string_view program = argc > 0 ? argv[0] : "dsfs";
  std::string_view name = program.substr(program.rfind('/') + 1);
  // mount(8) runs mount.fuse.dsfs (a link to this binary) for fuse.dsfs mounts.
  if (name.rfind("mount.", 0) == 0) {
    return dsfs::MountHelperMain(std::string(program), args, std::cout, std::cerr);
  }
  return dsfs::DsfsMain(args, std::cout, std::cerr);
}
