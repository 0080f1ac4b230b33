// The `dsfs` command. Each subcommand is a function over its arguments and two streams, so tests
// run it in-process; tools/main.cc is only the process wrapper.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "fs/mount.h"
#include "store/packer.h"

namespace dsfs {

// Runs `dsfs ARGS...` (args excludes the program name). Returns the exit status: 0 on success,
// 1 on failure (one "dsfs: error: ..." line on `err`), 2 on a usage error.
int DsfsMain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Subcommands, called by DsfsMain after parsing.
struct PackCommand {
  std::string src, dst;
  bool force = false;
  bool quiet = false;
  PackOptions options;
};
Status RunPack(const PackCommand& cmd, std::ostream& out, std::ostream& err);

// Parses a mount option list ("threads=2,allow_other,...") into `config`: the one place where
// -o options are understood. InvalidArgument names an unknown or malformed option.
Status ParseMountOptions(const std::string& list, MountConfig* config);
Status RunMount(const MountConfig& config);
Status RunUmount(const std::string& mountpoint, bool lazy);

Status RunLs(const std::string& store, const std::string& path, bool long_format, bool recursive,
             std::ostream& out);
Status RunCat(const std::string& store, const std::string& path, std::ostream& out);
Status RunInfo(const std::string& store, bool json, std::ostream& out);
// Prints the live counters of the dsfs mount at `mountpoint` (its /.dsfs/stats file).
Status RunStats(const std::string& mountpoint, bool json, std::ostream& out);
// Checks every payload; lists the damaged files on `out`. Corruption if any is damaged.
Status RunVerify(const std::string& store, std::ostream& out);

}  // namespace dsfs
