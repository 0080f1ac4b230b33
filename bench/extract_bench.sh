#!/usr/bin/env bash
# bench/extract_bench.sh: `dsfs extract` of a store to tmpfs, side by side with `cp -a` of the
# same tree from ext4 and `unsquashfs` of a `mksquashfs -comp zstd` image of it (issue 43).
#
#   bench/extract_bench.sh [SRC]      (default /work/data-python/photo32: 150,000 small JPEGs)
#
# Hot: the tree, the store and the image are read once before the timed runs, so each run reads
# from the page cache. Each way writes into a fresh directory on tmpfs (/dev/shm), removed
# after (not timed); best of 3 wall-clock seconds each, in rounds (cp, unsquashfs, dsfs, dsfs
# -j 2, dsfs tar to /dev/null). Writes bench/results/extract/extract-<date>.md. Run under
# `flock /work/bench.lock`. Environment: DSFS (default build/dsfs), BENCH_WORK (default
# /var/tmp/dsfs-extract-bench: the store and the image, kept for later runs).
set -uo pipefail
export LC_ALL=C
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${1:-/work/data-python/photo32}
DSFS=${DSFS:-$REPO/build/dsfs}
WORK=${BENCH_WORK:-/var/tmp/dsfs-extract-bench}
OUTDIR=$REPO/bench/results/extract
STAMP=$(date -u +%Y%m%d-%H%M%S)
REPORT=$OUTDIR/extract-$STAMP.md
TMP=/dev/shm/dsfs-extract-bench.$$
ROUNDS=3
mkdir -p "$WORK" "$OUTDIR" "$TMP"
trap 'rm -rf "$TMP"' EXIT
[[ $(stat -f -c %T /dev/shm) == tmpfs ]] || { echo "/dev/shm is not tmpfs" >&2; exit 1; }
name=$(basename "$SRC")
STORE=$WORK/$name.db
IMG=$WORK/$name.sqfs
[[ -f $STORE ]] || "$DSFS" pack -q "$SRC" "$STORE" || exit 1
[[ -f $IMG ]] || mksquashfs "$SRC" "$IMG" -comp zstd -quiet -no-progress >/dev/null || exit 1
files=$(find "$SRC" -type f | wc -l)
# Hot: everything each way reads is in the page cache.
cat "$STORE" "$IMG" >/dev/null
tar -cf - -C "$SRC" . >/dev/null

# timed NAME CMD...: wall seconds of CMD, appended to the list of NAME
declare -A best
timed() {
  local n=$1 t0 t1 s; shift
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>"$TMP/err" || { echo "$n failed: $(cat "$TMP/err")" >&2; exit 1; }
  t1=$(date +%s.%N)
  s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  echo "  $n: ${s}s" >&2
  if [[ -z ${best[$n]:-} ]] || awk -v a="$s" -v b="${best[$n]}" 'BEGIN { exit !(a < b) }'; then
    best[$n]=$s
  fi
}
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r" >&2
  timed cp cp -a "$SRC" "$TMP/cp"; rm -rf "$TMP/cp"
  timed unsquashfs unsquashfs -q -n -d "$TMP/sq" "$IMG"; rm -rf "$TMP/sq"
  timed dsfs "$DSFS" extract -q "$STORE" "$TMP/dsfs"
  # Checked once: the extracted tree is the source tree.
  if ((r == 1)); then
    diff -r --no-dereference "$SRC" "$TMP/dsfs" >/dev/null || { echo "extract differs" >&2; exit 1; }
  fi
  rm -rf "$TMP/dsfs"
  timed dsfs_j1 "$DSFS" extract -q -j 2 "$STORE" "$TMP/dsfs1"; rm -rf "$TMP/dsfs1"
  timed dsfs_tar "$DSFS" extract -q "$STORE" -
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
cpus=$(nproc)
rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "# dsfs extract, $name ($files files), hot, to tmpfs"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $cpus CPUs, dsfs $rev; best of $ROUNDS wall-clock seconds."
  echo "Source tree on ext4 ($SRC), store $(du -h "$STORE" | cut -f1) (\`dsfs pack\` defaults),"
  echo "image $(du -h "$IMG" | cut -f1) (\`mksquashfs -comp zstd\`). Command: bench/extract_bench.sh $SRC"
  echo
  echo "| way | seconds | files/s | dsfs extract's speed against it |"
  echo "|---|---|---|---|"
  for n in cp unsquashfs dsfs dsfs_j1 dsfs_tar; do
    label=$n
    case $n in
      cp) label='`cp -a` of the tree (ext4 -> tmpfs)' ;;
      unsquashfs) label='`unsquashfs -d` of the image (-> tmpfs)' ;;
      dsfs) label='`dsfs extract STORE DIR` (-> tmpfs; -j 1, the default)' ;;
      dsfs_j1) label='`dsfs extract -j 2 STORE DIR` (-> tmpfs; writes on a thread of their own)' ;;
      dsfs_tar) label='`dsfs extract STORE -` (tar to /dev/null)' ;;
    esac
    rate=$(awk -v f="$files" -v s="${best[$n]}" 'BEGIN { printf "%.0f", f / s }')
    vs="—"
    [[ $n == cp || $n == unsquashfs ]] &&
      vs="$(ratio "${best[$n]}" "${best[dsfs]}")x (-j 2: $(ratio "${best[$n]}" "${best[dsfs_j1]}")x)"
    echo "| $label | ${best[$n]} | $rate | $vs |"
  done
} >"$REPORT"
cat "$REPORT"
