#!/usr/bin/env bash
# Installs everything dsfs needs to build, test and benchmark, from Debian 12 packages only.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake pkg-config ninja-build
  libfuse3-dev fuse3
  liburing-dev
  liblmdb-dev lmdb-utils
  libcurl4-openssl-dev
  ceph-mon ceph-osd radosgw ceph-common iproute2
  librocksdb-dev
  libzstd-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libxxhash-dev
  libcli11-dev
  nlohmann-json3-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev
  libarchive-dev
  libsystemd-dev systemd
  squashfs-tools squashfuse
  erofs-utils
  dataset-fashion-mnist
  python3-torch python3-torchvision python3-numpy python3-pil python3-matplotlib
  pandoc groff-base man-db
  psmisc procps util-linux mount
  clang-14 libclang-rt-14-dev llvm-14
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
