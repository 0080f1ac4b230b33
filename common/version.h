// The one version of dsfs: CMake's project(VERSION), shown by --version, -V, the mount helper
// and `dsfs info`, and named in NEWS.md, the man pages and the Debian package. Defined in the
// one file CMake writes from common/version.cc.in, so that a new version rebuilds that file
// alone.
#pragma once

namespace dsfs {

// "0.1.0"
const char* DsfsVersion();

}  // namespace dsfs
