#!/usr/bin/env bash
# Installs the Debian packages vitddp builds and tests with, skipping those already present.
# The CUDA toolkit, cuDNN and NCCL are not Debian packages here: when absent, the build is
# CPU-only (see CMakeLists.txt).
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libeigen3-dev libgtest-dev libcli11-dev nlohmann-json3-dev
          libgloo-dev python3-torch python3-torchvision python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "vitddp: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
