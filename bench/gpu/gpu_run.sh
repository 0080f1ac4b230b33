#!/usr/bin/env bash
# bench/gpu/gpu_run.sh: issue 4's end-to-end check, on a machine with a GPU, from the
# repository root, with build-gpu/ from bench/gpu/gpu_bundle.sh carried along. ResNet-18 (bf16)
# on the 32x32 photo32 subset, images/s of (bench/gpu/gpu_train.py, SECONDS each, default 40):
#   the GPU alone; the whole tree decoded once into one tensor on the GPU ("in RAM");
#   an unmodified ImageFolder script over the JPEG tree on local disk, over dsfs's original tree
#   and its bmp view (classic FUSE mounts), and over both as `-o kernel` mounts (EROFS; needs
#   root, skipped with a line otherwise), with 16 and with 4 DataLoader workers; the original
#   tree also over FUSE over io_uring (root, enable_uring set to Y for that mount and put back;
#   skipped with a line where the kernel says no), the A/B of the transports. Then, where
#   build-gpu/ has it, bench/tools/roundtrip_bench.cc on a file of the store: isatty() and a
#   4 KiB O_DIRECT pread per call, classic against io_uring against the same file on local disk,
#   idle and beside 16 busy processes.
# The JPEG tree is copied out of the store onto the local disk (not /tmp, which may be tmpfs).
# Writes OUT/gpu-<date>.jsonl and .md (OUT: $OUT, else /tmp/gpu-out). Unmounts what it mounted.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$REPO/build-gpu
SECONDS_EACH=${1:-40}
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
STAMP=$(date +%Y%m%d-%H%M%S)
JSONL=$OUT/gpu-$STAMP.jsonl
LIBS=$(mktemp -d)
WORK=$(mktemp -d -p "$REPO" build-gpu-work.XXXX)  # on the machine's disk, not a tmpfs /tmp
ORIG=$WORK/orig BMP=$WORK/bmp JPEG=$WORK/jpeg KORIG=$WORK/korig KBMP=$WORK/kbmp UORIG=$WORK/uorig
ENABLE_URING=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$ENABLE_URING" 2>/dev/null || true)
cleanup() {
  for m in "$ORIG" "$BMP" "$KORIG" "$KBMP" "$UORIG"; do mountpoint -q "$m" && dsfs umount "$m"; done
  [[ -n $URING_WAS ]] && echo "$URING_WAS" >"$ENABLE_URING" 2>/dev/null
  rm -rf "$LIBS" "$WORK"
}
trap cleanup EXIT
tar -xJf "$B/libs.tar.xz" -C "$LIBS" || exit 1
# Only dsfs gets the carried libraries (Python and torch keep the machine's own).
dsfs() { LD_LIBRARY_PATH=$LIBS "$B/dsfs" "$@"; }
nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
"$PY" -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "PIL", PIL.__version__, "cuda", torch.cuda.is_available())' || exit 1
dsfs --version || exit 1
mkdir -p "$ORIG" "$BMP" "$JPEG" "$KORIG" "$KBMP" "$UORIG"
dsfs mount "$B/photo32.dsfs" "$ORIG" -o transport=classic || exit 1
cp -a "$ORIG/." "$JPEG/" || exit 1
dsfs mount "$B/photo32.dsfs" "$BMP" -o view=bmp,transport=classic || exit 1
URING=0
if echo Y >"$ENABLE_URING" 2>/dev/null && dsfs mount "$B/photo32.dsfs" "$UORIG" -o transport=uring; then
  [[ -n $URING_WAS ]] && echo "$URING_WAS" >"$ENABLE_URING"
  grep -o '"serving": "[^"]*"' "$UORIG/.dsfs/stats"
  grep -q '"serving": "uring' "$UORIG/.dsfs/stats" && URING=1
fi
((URING)) || echo "gpu_run: no FUSE over io_uring here (above); its runs are skipped"
KERNEL=1
dsfs mount "$B/photo32.dsfs" "$KORIG" -o kernel && dsfs mount "$B/photo32.dsfs" "$KBMP" -o kernel,view=bmp || {
  echo "gpu_run: -o kernel mounts not possible here (above); their runs are skipped"; KERNEL=0; }
findmnt -n -o TARGET,FSTYPE,SOURCE "$KORIG" "$KBMP" 2>/dev/null
echo "images: $(find "$JPEG" -type f | wc -l)"
# TRAIN_ARGS: extra gpu_train.py options (e.g. "--batch 16 --warmup 1" for a smoke test on a CPU)
train() { "$PY" "$REPO/bench/gpu/gpu_train.py" "$@" --seconds "$SECONDS_EACH" ${TRAIN_ARGS:-} | tee -a "$JSONL"; }
train gpu-only "$JPEG" --label "GPU alone"
train ram "$JPEG" --label "whole tree in one tensor on the GPU"
for w in 16 4; do
  train imagefolder "$JPEG" --workers $w --label "ImageFolder, JPEG on local disk, $w workers"
  train imagefolder "$ORIG" --workers $w --label "ImageFolder, dsfs original tree, $w workers"
  ((URING)) && train imagefolder "$UORIG" --workers $w --label "ImageFolder, dsfs original tree over io_uring, $w workers"
  train imagefolder "$BMP" --workers $w --label "ImageFolder, dsfs bmp view, $w workers"
  if ((KERNEL)); then
    train imagefolder "$KORIG" --workers $w --label "ImageFolder, dsfs -o kernel original tree, $w workers"
    train imagefolder "$KBMP" --workers $w --label "ImageFolder, dsfs -o kernel,view=bmp, $w workers"
  fi
done
if [[ -x $B/dsfs-roundtrip-bench ]]; then
  file=$(cd "$JPEG" && find . -type f | head -1 | cut -c2-)
  configs=classic; ((URING)) && configs=classic,uring
  LD_LIBRARY_PATH=$LIBS "$B/dsfs-roundtrip-bench" --dsfs "$B/dsfs" --store "$B/photo32.dsfs" \
    --file "$file" --configs "$configs" --rounds 5 --seconds 0.3 --busy "0,$(nproc)" \
    --ext4-dir "$WORK" | tee "$OUT/gpu-roundtrip-$STAMP.txt"
fi
"$PY" - "$JSONL" >"$OUT/gpu-$STAMP.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {r["label"]: r["images_per_s"] for r in rows}
gpu, ram = by.get("GPU alone"), by.get("whole tree in one tensor on the GPU")
print("| run | images/s | vs GPU alone | vs in RAM |\n|---|---|---|---|")
for r in rows:
    v = r["images_per_s"]
    print(f"| {r['label']} | {v:,.0f} | {v / gpu:.2f}x | {v / ram:.2f}x |" if gpu and ram else f"| {r['label']} | {v:,.0f} | | |")
PYEOF
cat "$OUT/gpu-$STAMP.md"
