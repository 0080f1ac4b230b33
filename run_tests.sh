#!/usr/bin/env bash
# Installs what dsfs needs (Debian 12 packages), builds it, and runs every test:
# unit tests, real-mount tests (root + /dev/fuse) and the torchvision end-to-end test.
# Usage: sudo ./run_tests.sh            (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 900
