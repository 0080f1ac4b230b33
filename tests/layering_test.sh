#!/usr/bin/env bash
# The include rules of the layers (docs/design.md), checked on the sources; the link
# rules are checked by the dsfs_layer_check_* executables (tests/CMakeLists.txt).
#   tests/layering_test.sh [REPO]
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2
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
check "store/ and cache/ include nothing of fs/, pack/ or tools/" 'fs/|pack/|tools/' store cache
check "cache/ includes nothing of store/" 'store/' cache
check "common/ includes no other layer" 'backend/|image/|cache/|store/|pack/|erofs/|fs/|tools/' common
check "backend/ includes only common/" 'image/|cache/|store/|pack/|erofs/|fs/|tools/' backend
check "pack/ and erofs/ include nothing of fs/ or tools/" 'fs/|tools/' pack erofs
check "fs/ includes nothing of pack/ or tools/" 'pack/|tools/' fs
srcs=(common image cache store pack erofs fs tools bench)
check "nothing outside backend/ includes lmdb_store.h or rocksdb_store.h" \
  'backend/(lmdb|rocksdb)_store\.h' "${srcs[@]}" tests
check "libfuse only in fs/ (and the tests and benchmarks of it)" 'fuse' common backend image cache store pack erofs tools
check "libarchive only in pack/" 'archive' common backend image cache store erofs fs tools
check "the test fakes only in tests/" 'tests/' common backend image cache store pack erofs fs tools bench
exit $fail
