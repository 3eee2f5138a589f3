#!/usr/bin/env bash
# Configures and builds vitddp (Release, Ninja) into ${BUILD_DIR:-build}. Extra arguments go
# to cmake, e.g. -DVITDDP_CUDA=OFF or -DCMAKE_CUDA_ARCHITECTURES=90.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
