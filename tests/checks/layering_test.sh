#!/usr/bin/env bash
# The include rules of the layers (docs/design.md), checked on the sources; the link
# rules are checked by the dsfs_layer_check_* executables (tests/CMakeLists.txt).
#   tests/checks/layering_test.sh [REPO]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}" || exit 2
fail=0
# check WHAT DIRS -- PATTERN: no file under DIRS includes a header matching PATTERN.
check() {
  local what=$1 pattern=$2; shift 2
  local hits
  hits=$(grep -rnE "^#include [<\"]($pattern)" "$@" 2>/dev/null)
  if [[ -n $hits ]]; then
    echo "FAIL: $what:"; echo "$hits"; fail=1
  else
    echo "ok: $what"
  fi
}
above_store='fs/|fuse/|kernel/|mount/|pack/|tools/'
check "store/ and cache/ include nothing above them" "$above_store" store cache
check "cache/ includes nothing of store/" 'store/' cache
check "common/ includes no other layer" 's3/|backend/|image/|cache/|store/|pack/|erofs/|fs/|fuse/|kernel/|mount/|tools/' common
check "s3/ includes only common/" 'backend/|image/|cache/|store/|pack/|erofs/|fs/|fuse/|kernel/|mount/|tools/' s3
check "backend/ includes only common/ and s3/" 'image/|cache/|store/|pack/|erofs/|fs/|fuse/|kernel/|mount/|tools/' backend
check "pack/ and erofs/ include nothing above them" 'fs/|fuse/|kernel/|mount/|tools/' pack erofs
check "fs/ (the core) includes nothing of fuse/, kernel/, mount/, pack/ or tools/" 'fuse/|kernel/|mount/|pack/|tools/' fs
check "fuse/ includes nothing of kernel/, mount/, pack/ or tools/" 'kernel/|mount/|pack/|tools/' fuse
check "kernel/ includes nothing of mount/, pack/ or tools/" 'mount/|pack/|tools/' kernel
check "mount/ includes nothing of pack/ or tools/" 'pack/|tools/' mount
srcs=(common s3 image cache store pack erofs fs fuse kernel mount tools bench)
# Above backend/, a store is opened through backend/kv_open.h (and read through kv.h) only.
check "nothing outside backend/ includes a local backend's own header" \
  'backend/(lmdb_kv|lmdb_check|rocksdb_kv)\.h' "${srcs[@]}" tests
check "nothing above backend/ includes the S3 store's parts" 'backend/s3/s3_kv[a-z_]*\.h' "${srcs[@]}"
check "libfuse only in fuse/ (and the tests and benchmarks of it)" 'fuse[_.0-9]*[a-z_]*\.h>' common s3 backend image cache store pack erofs fs kernel mount tools
check "libcurl only in s3/" 'curl/' common backend image cache store pack erofs fs fuse kernel mount tools bench tests
check "libarchive only in pack/" 'archive' common s3 backend image cache store erofs fs fuse kernel mount tools
check "the test fakes only in tests/" 'tests/' common s3 backend image cache store pack erofs fs fuse kernel mount tools bench
exit $fail
