#!/usr/bin/env bash
# NCCL's copy-engine shared-memory transport (NCCL_SHM_USE_CUDA_MEMCPY=1, NCCL_SHM_MEMCPY_MODE=3)
# against its SM copies, P2P off: our all-reduce's busbw at a 25 MiB bucket and at one step's
# gradients of ViT-L/32 (f32 1226 MB, bf16 613 MB), the link rates the P2P-off sweeps are held
# against. Short limits: training runs hung under this transport (docs/performance.md, "Copy
# engines for the shared-memory transport"). Usage: scripts/shm_ce_probe.sh BUILD_DIR   (tables under $OUT)
set -uo pipefail
build=${1:?build dir}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1
for setting in sm ce; do
  envs=(NCCL_SHM_USE_CUDA_MEMCPY=0)
  [ "$setting" = ce ] && envs=(NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=3)
  for dtype in f32 bf16; do
    step_bytes=$([ "$dtype" = f32 ] && echo 1226141600 || echo 613070800)
    env "${envs[@]}" timeout 90 "$build/bin/train" bench allreduce --gpus 2 --dtype "$dtype" --sizes "25M,$step_bytes" \
      --timeout 30 > "$out/shm_${setting}_$dtype.md" 2>&1
    echo "all-reduce, P2P off, ${setting} copies, $dtype: exit $?"; grep -E "^\| [0-9]|error" "$out/shm_${setting}_$dtype.md" | head -3
  done
done
