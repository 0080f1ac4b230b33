#!/usr/bin/env bash
# The main job, end to end: installs what is needed, builds dsfs, packs Fashion-MNIST (Debian's
# dataset-fashion-mnist, 70,000 images) as an ImageFolder tree into one store, mounts it, reads
# it with an unmodified torchvision ImageFolder + DataLoader script, prints images/s, unmounts.
# Usage: sudo ./demo.sh          (WORK=/var/tmp/dsfs-demo by default)
set -euo pipefail
cd "$(dirname "$0")"
REPO=$PWD
WORK=${WORK:-/var/tmp/dsfs-demo}
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
DSFS=$REPO/build/dsfs
mkdir -p "$WORK"
echo "== Fashion-MNIST as an ImageFolder tree of PNG files: $WORK/fashion-mnist"
/usr/bin/python3 bench/lib/datasets.py fashion-mnist "$WORK/fashion-mnist"
echo "== dsfs pack"
"$DSFS" pack --force "$WORK/fashion-mnist" "$WORK/fashion-mnist.db"
"$DSFS" info "$WORK/fashion-mnist.db"
MNT=$WORK/mnt
mkdir -p "$MNT"
if grep -q " $MNT fuse.dsfs" /proc/self/mountinfo; then "$DSFS" umount "$MNT"; fi
echo "== dsfs mount $WORK/fashion-mnist.db $MNT"
"$DSFS" mount "$WORK/fashion-mnist.db" "$MNT"
trap '"$DSFS" umount "$MNT" || umount -l "$MNT"' EXIT
ls "$MNT"
echo "== unmodified torchvision ImageFolder + DataLoader (2 workers, batch 256) over the mount"
/usr/bin/python3 bench/lib/imagefolder_read.py "$MNT" --epochs 2 --workers 2 --batch 256 --label dsfs \
  | tee "$WORK/imagefolder.jsonl"
/usr/bin/python3 - "$WORK/imagefolder.jsonl" <<'PY'
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if '"epoch"' in l]
print("== Fashion-MNIST through dsfs, unmodified ImageFolder + DataLoader: " +
      ", ".join(f"epoch {e['epoch']}: {e['images_per_s']:.0f} images/s" for e in epochs))
PY
"$DSFS" stats "$MNT" | grep -E "^requests\.read:|^push\.files:|^cache\.hits:"
