#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, train. With a GPU visible it
# trains ViT-L/32 on it; without one it falls back to a small ViT on the CPU and says so.
# Extra arguments go to `train` (see `build/bin/train --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec "${BUILD_DIR:-build}/bin/train" "$@"
