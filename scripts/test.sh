#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, build, run every test.
# GPU tests skip themselves without a GPU. `ctest --test-dir build -L gpu` runs them alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}"
