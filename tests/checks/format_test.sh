#!/usr/bin/env bash
# The C++ sources follow .clang-format (Debian 12's clang-format 14): a file it would change
# fails the test, with the change shown. `clang-format -i FILE` fixes a file.
#   tests/checks/format_test.sh [REPO]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}" || exit 2
if ! command -v clang-format >/dev/null; then
  echo "SKIPPED: clang-format is not installed (scripts/setup.sh installs it)"
  exit 77
fi
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cc' '*.h')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "FAIL: $f is not formatted (clang-format -i $f):"
    diff -u "$f" <(clang-format "$f") | head -n 20
    bad=$((bad + 1))
  fi
done
if ((bad > 0)); then
  echo "FAIL: $bad of ${#files[@]} files differ from .clang-format"
  exit 1
fi
echo "ok: ${#files[@]} files follow .clang-format"
