#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for runs on the GPU machine, which has CUDA, cuDNN, NCCL, Eigen,
# GoogleTest and PyTorch but no package registry: the Debian packages the build needs beyond
# those (CLI11, nlohmann/json, libjpeg-turbo's TurboJPEG, libpng with zlib's headers, libfabric
# and the libraries it loads) are downloaded here and unpacked into .deps/root (the build links
# the libraries there by path; scripts/device_run.sh puts them on LD_LIBRARY_PATH),
# the cuDNN frontend's headers (the nvidia-cudnn-frontend wheel's include/, for cuDNN's fused
# attention) into .deps/cudnn_frontend, the PyTorch reference scripts are copied into .deps/anchors, and scikit-learn's digits (the
# accuracy sweeps' real images) are written to .deps/digits here, because the GPU machine's python
# has no scikit-learn. Name .deps in the device call's `carry`; configure there with
# -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/root .deps/anchors
(cd .deps/debs && apt-get download libcli11-dev nlohmann-json3-dev libturbojpeg0 libturbojpeg0-dev libpng-dev libpng16-16 \
  zlib1g-dev zlib1g libfabric1 libfabric-dev libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 \
  libnl-3-200 libnl-route-3-200 libnuma1 libatomic1)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
# Debian's absolute development links (libz.so -> /lib/...) point into .deps/root instead.
find .deps/root -type l | while read -r link; do
  target=$(readlink "$link")
  if [[ $target == /* && -e .deps/root$target ]]; then ln -sfn "$(realpath -s --relative-to="$(dirname "$link")" ".deps/root$target")" "$link"; fi
done
# pkg-config files name /usr: make them name where they lie.
sed -i 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|' .deps/root/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
# The simulator (sim/ring_sim, built here) and the SimGrid libraries it loads, packed: the DDP
# table's 1,024-rank rows run on the GPU machine's cores (scripts/ring_sim_ddp.py --jobs).
sim=""
for f in "${SIM_BUILD:-build}/bin/ring_sim" build/bin/ring_sim; do [ -x "$f" ] && { sim=$f; break; }; done
if [ -n "$sim" ]; then
  rm -rf .deps/sim && mkdir -p .deps/sim/lib
  cp "$sim" .deps/sim/
  ldd "$sim" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s)\.so' | xargs -I{} cp -L {} .deps/sim/lib/
  tar -C .deps -cJf .deps/sim.tar.xz sim && rm -rf .deps/sim
fi
bash scripts/fetch_cudnn_frontend.sh
if [ -d ../shared/anchors ]; then cp ../shared/anchors/*.py .deps/anchors/; fi
[ -d .deps/digits/val ] || /usr/bin/python3 scripts/make_digits_dataset.py .deps/digits
echo "vitddp: .deps ready ($(du -sh .deps | cut -f1))"
