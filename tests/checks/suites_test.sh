#!/usr/bin/env bash
# Every GoogleTest suite is defined in one file, so a suite name says where its tests are
# (ctest -R SUITE, --gtest_filter=SUITE.*). One exception, one fixture split for size:
# MountedTreeTest (tests/support/mount_tree.h) in mount_tree_test.cc and mount_read_test.cc.
#   tests/checks/suites_test.sh [REPO]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}/tests" || exit 2
shared='MountedTreeTest'
dups=$(grep -rHoE '^TEST(_P|_F)?\([A-Za-z0-9_]+' --include='*.cc' . | sed -E 's/:TEST(_P|_F)?\(/ /' |
         sort -u | awk '{n[$2]++; f[$2] = f[$2] " " $1} END {for (s in n) if (n[s] > 1) print s ":" f[s]}' |
         grep -vE "^($shared):" || true)
if [[ -n $dups ]]; then
  echo "FAIL: suites defined in more than one file:"; echo "$dups"; exit 1
fi
echo "ok: every suite in one file ($(grep -rhoE '^TEST(_P|_F)?\([A-Za-z0-9_]+' --include='*.cc' . |
  sed -E 's/.*\(//' | sort -u | wc -l) suites)"
