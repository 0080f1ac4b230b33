#!/usr/bin/env bash
# Installs what the benchmarks need, from Debian 12 packages only: the core's dependencies
# (scripts/setup.sh), then the photographs that bench/lib/datasets.py crops, the peers
# (squashfs-tools, squashfuse) and the small tools bench/core_bench.sh calls. Idempotent: apt runs only when a
# package is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ -x "$repo/scripts/setup.sh" || -f "$repo/scripts/setup.sh" ]]; then
  bash "$repo/scripts/setup.sh" || echo "bench/setup.sh: scripts/setup.sh failed; going on with the benchmark packages" >&2
else
  echo "bench/setup.sh: no scripts/setup.sh; installing the benchmark packages only" >&2
fi

PKGS=(
  # photographs for `datasets.py photo-crops` (see the PHOTOS list there)
  mate-backgrounds
  lomiri-wallpapers-16.04
  plasma-workspace-wallpapers
  # the Fashion-MNIST data set
  dataset-fashion-mnist
  # peers
  squashfs-tools squashfuse fuse3
  # the ImageFolder reader
  python3-torch python3-torchvision python3-numpy python3-pil
  # building dsfs-readbench; mountpoint, findmnt, lsblk; timeout
  build-essential cmake ninja-build
  util-linux coreutils procps
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bench/setup.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
