#!/usr/bin/env bash
# bench/ab_hot.sh: two dsfs binaries side by side, taking turns, on one store: hot shuffled
# open+read+close files/s (dsfs-readbench, 4 and 1 threads, the median of the passes after a
# warm one), classic and -o kernel. For a change that should not move them (a restructure):
# the figures of A and B must agree within the spread of their own rounds.
#
#   sudo bench/ab_hot.sh DSFS_A DSFS_B STORE FILES_LIST [ROUNDS]
#
# FILES_LIST: one path a line, relative to the mount (dsfs-readbench --write-list). Mounts at
# a directory it makes and removes; unmounts what it mounted, also on failure. Prints one line
# per run: binary, mode, threads, files/s of each pass.
set -euo pipefail
a=$1 b=$2 store=$3 list=$4 rounds=${5:-2}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readbench=${READBENCH:-$repo/build/bench/dsfs-readbench}
mnt=$(mktemp -d /tmp/dsfs-ab-XXXXXX)
cleanup() { mountpoint -q "$mnt" && "$a" umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
run() {  # run LABEL DSFS MODE
  local label=$1 dsfs=$2 mode=$3 opts=()
  [[ $mode == kernel ]] && opts=(-o kernel)
  "$dsfs" mount "$store" "$mnt" "${opts[@]}"
  for t in 4 1; do
    local rates
    rates=$("$readbench" "$mnt" --list "$list" --threads "$t" --passes 4 |
            sed -n 's/.*"files_per_s":\([0-9.]*\).*/\1/p' | tr '\n' ' ')
    echo "$label $mode threads=$t files/s: $rates"
  done
  "$dsfs" umount "$mnt"
}
for r in $(seq "$rounds"); do
  for mode in classic kernel; do
    run "A($r)" "$a" "$mode"
    run "B($r)" "$b" "$mode"
  done
done
