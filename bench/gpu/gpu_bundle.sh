#!/usr/bin/env bash
# bench/gpu/gpu_bundle.sh: prepares build-gpu/ for bench/gpu/gpu_run.sh (issue 4's end-to-end
# check on a GPU machine, which has no package registry): the dsfs binary, its shared libraries (an
# xz-compressed tar, glibc excluded) and a store of the photo32 benchmark tree limited to its
# first CLASSES classes, so that all of it fits in what one device run can carry (64 MiB).
#
#   bench/gpu/gpu_bundle.sh [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench] [--classes 50]
#
# Then, with a device lent: run(command="bench/gpu/gpu_run.sh", carry=["build-gpu"]).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DSFS=$REPO/build/dsfs
WORK=${BENCH_WORK:-/var/tmp/dsfs-bench}
CLASSES=50
while (($#)); do
  case $1 in
    --dsfs) DSFS=$2; shift ;;
    --work) WORK=$2; shift ;;
    --classes) CLASSES=$2; shift ;;
    *) echo "gpu_bundle: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=$REPO/build-gpu
[[ -x $DSFS ]] || { echo "gpu_bundle: no dsfs binary at $DSFS" >&2; exit 1; }
[[ -d $WORK/photo32 ]] || { echo "gpu_bundle: $WORK/photo32 missing: run bench/core_bench.sh once" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
# Without debug information: a RelWithDebInfo binary is ~56 MB of the 64 MiB a run carries.
strip --strip-debug -o "$OUT/dsfs" "$DSFS"
# The round-trip benchmark (isatty, stat, O_DIRECT pread on a dsfs file, classic vs io_uring).
RT=$(dirname "$DSFS")/bench/dsfs-roundtrip-bench
[[ -x $RT ]] && strip --strip-debug -o "$OUT/dsfs-roundtrip-bench" "$RT"
ldd "$DSFS" "$OUT"/dsfs-roundtrip-bench 2>/dev/null | awk '/=> \//{ print $3 }' |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv)\.so' | sort -u |
  tar -chJf "$OUT/libs.tar.xz" --transform 's|.*/||' -T -
mapfile -t dirs < <(cd "$WORK/photo32" && ls | sort | head -n "$CLASSES")
tar -cf - -C "$WORK/photo32" "${dirs[@]}" | "$DSFS" pack -q - "$OUT/photo32.dsfs"
"$DSFS" info "$OUT/photo32.dsfs" | head -3
du -sh "$OUT"/*
total=$(du -sb "$OUT" | cut -f1)
((total < 64 << 20)) || { echo "gpu_bundle: $OUT is $total bytes, over the 64 MiB a device run carries: use fewer --classes" >&2; exit 1; }
