#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for runs on the GPU machine, which has CUDA, cuDNN, NCCL, Eigen,
# GoogleTest and PyTorch but no package registry: the Debian packages the build needs beyond
# those (CLI11, nlohmann/json, libjpeg-turbo's TurboJPEG, libpng with zlib's headers) are
# downloaded here and unpacked into .deps/root (the build links the libraries there by path),
# the cuDNN frontend's headers (the nvidia-cudnn-frontend wheel's include/, for cuDNN's fused
# attention) into .deps/cudnn_frontend, the PyTorch reference scripts are copied into .deps/anchors, and scikit-learn's digits (the
# accuracy sweeps' real images) are written to .deps/digits here, because the GPU machine's python
# has no scikit-learn. Name .deps in the device call's `carry`; configure there with
# -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/root .deps/anchors
(cd .deps/debs && apt-get download libcli11-dev nlohmann-json3-dev libturbojpeg0 libturbojpeg0-dev libpng-dev libpng16-16 \
  zlib1g-dev zlib1g)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
# Debian's absolute development links (libz.so -> /lib/...) point into .deps/root instead.
find .deps/root -type l | while read -r link; do
  target=$(readlink "$link")
  if [[ $target == /* && -e .deps/root$target ]]; then ln -sfn "$(realpath -s --relative-to="$(dirname "$link")" ".deps/root$target")" "$link"; fi
done
bash scripts/fetch_cudnn_frontend.sh
if [ -d ../shared/anchors ]; then cp ../shared/anchors/*.py .deps/anchors/; fi
[ -d .deps/digits/val ] || /usr/bin/python3 scripts/make_digits_dataset.py .deps/digits
echo "vitddp: .deps ready ($(du -sh .deps | cut -f1))"
