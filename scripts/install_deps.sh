#!/usr/bin/env bash
# Installs the Debian packages vitddp builds and tests with, skipping those already present.
# The CUDA toolkit, cuDNN and NCCL are not Debian packages here: when absent, the build is
# CPU-only (see CMakeLists.txt). With a CUDA toolkit, the cuDNN frontend's headers are fetched
# too (scripts/fetch_cudnn_frontend.sh; a failure only costs cuDNN's fused attention).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/debian_packages.sh"
ensure_debian_packages cmake ninja-build g++ pkg-config libeigen3-dev libgtest-dev libcli11-dev nlohmann-json3-dev libgloo-dev python3-torch python3-torchvision python3-numpy libturbojpeg0-dev libpng-dev python3-pil python3-sklearn libsimgrid-dev libfabric-dev
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/fetch_cudnn_frontend.sh" ||
    echo "vitddp: warning: no cuDNN frontend headers (pip download failed); attention past 64 tokens runs the composed ops"
fi
