#!/usr/bin/env bash
# Why did NCCL's copy-engine shared-memory transport (NCCL_SHM_USE_CUDA_MEMCPY=1, P2P off) hang
# our training's first large collective, when our all-reduce benchmark ran under it (d39756f)?
# The training issues a small all-gather (the model check, NCCL's LL protocol) before its large
# broadcast (Simple); the benchmark's collectives were all large. Here the benchmark runs a
# small size before a large one, in NCCL's default protocols and in Simple only. Short limits:
# a hang costs 30 s. Usage: scripts/shm_ce_probe.sh BUILD_DIR   (logs under $OUT)
set -uo pipefail
build=${1:?build dir}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=3
for proto in default Simple; do
  envs=(); [ "$proto" != default ] && envs=(NCCL_PROTO="$proto")
  env "${envs[@]}" timeout 90 "$build/bin/train" bench allreduce --gpus 2 --dtype f32 --sizes 4K,64M,1224MB \
    --timeout 30 > "$out/ce_small_then_large_$proto.md" 2>&1
  echo "copy engines, 4K then 64M then 1224MB, protocol $proto: exit $?"; grep -E "^\| [0-9]|error" "$out/ce_small_then_large_$proto.md" | head -4
done
