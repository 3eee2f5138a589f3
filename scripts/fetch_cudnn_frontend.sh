#!/usr/bin/env bash
# Puts the cuDNN frontend's headers (header-only; the nvidia-cudnn-frontend wheel's include/)
# into .deps/cudnn_frontend, where CMake looks for them: with them and cuDNN 9, bf16/f16
# attention past 64 tokens runs cuDNN's fused kernels. Without them the build still works (the
# composed attention runs instead). Needs pip and the network once; does nothing when present.
set -euo pipefail
cd "$(dirname "$0")/.."
frontend_version=1.32.0  # the release cuda/cudnn_attention.cpp was written against
[ -f .deps/cudnn_frontend/include/cudnn_frontend.h ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 -d "$tmp" \
  "nvidia-cudnn-frontend==$frontend_version"
mkdir -p .deps/cudnn_frontend
python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
[z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith('include/')]" "$tmp"/nvidia_cudnn_frontend-*.whl .deps/cudnn_frontend
echo "vitddp: cuDNN frontend $frontend_version headers in .deps/cudnn_frontend"
