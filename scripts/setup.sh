#!/usr/bin/env bash
# Installs what dsfs needs, from Debian 12 packages only. Idempotent: packages already present
# are skipped.
#   bash scripts/setup.sh           everything: building, packaging, the tests and the benchmarks
#   bash scripts/setup.sh --build   only what building dsfs and its Debian package needs
# (The package itself needs neither: its Depends are the runtime libraries, packaging/package.cmake.)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# Building: the compiler and tools, the libraries' headers, pandoc for the man pages, and
# dpkg-dev (dpkg-shlibdeps) and file for `cpack -G DEB`, pybind11 and Python's headers for the
# Python module (python/).
BUILD=(
  build-essential cmake pkg-config ninja-build
  libfuse3-dev liburing-dev liblmdb-dev librocksdb-dev libzstd-dev libxxhash-dev
  libcurl4-openssl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev libarchive-dev libsystemd-dev
  pandoc dpkg-dev file
  pybind11-dev python3-pybind11 python3-dev
)
# The tests and benchmarks: GoogleTest, the FUSE tools, a real Ceph gateway, systemd-analyze,
# man, the reference filesystems (squashfs, EROFS), the datasets and Python with torch, clang
# for the fuzzers and sanitizer builds, clang-format (the format check), zsh and fish (their
# completions' test), openssl (the credential tests' self-signed CA).
TEST=(
  libgtest-dev libgmock-dev
  fuse3 lmdb-utils
  ceph-mon ceph-osd radosgw ceph-common iproute2
  systemd groff-base man-db
  squashfs-tools squashfuse erofs-utils
  dataset-fashion-mnist
  python3-torch python3-torchvision python3-numpy python3-pil python3-matplotlib python3-pytest
  psmisc procps util-linux mount
  openssl
  clang-14 libclang-rt-14-dev llvm-14 clang-format
  zsh fish
)
case ${1:-} in
  "") PKGS=("${BUILD[@]}" "${TEST[@]}") ;;
  --build) PKGS=("${BUILD[@]}") ;;
  *) echo "usage: $0 [--build]" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
