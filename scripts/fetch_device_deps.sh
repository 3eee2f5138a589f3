#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for runs on the GPU machine, which has CUDA, cuDNN, NCCL, Eigen,
# GoogleTest and PyTorch but no package registry: the header-only Debian packages the build
# needs are downloaded here and unpacked into .deps/root, and the PyTorch reference script is
# copied into .deps/anchors. Name .deps in the device call's `carry`; configure there with
# -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/root .deps/anchors
(cd .deps/debs && apt-get download libcli11-dev nlohmann-json3-dev)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
if [ -d ../shared/anchors ]; then cp ../shared/anchors/*.py .deps/anchors/; fi
echo "vitddp: .deps ready ($(du -sh .deps | cut -f1))"
