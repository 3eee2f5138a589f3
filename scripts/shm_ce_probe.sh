#!/usr/bin/env bash
# Does NCCL's copy-engine shared-memory transport pay with P2P off? NCCL_SHM_USE_CUDA_MEMCPY=1
# moves the shared-memory copies from the NCCL kernel's threads to copy engines driven by
# NCCL's proxy thread (NCCL_SHM_MEMCPY_MODE 1: sender side, 3: both sides). It hung in our
# first broadcast on 2026-11-29 (NCCL 2.28.9), so every run here has a short limit.
# For each setting: PyTorch's all-reduce busbw, ours, and fp32 DDP (25 MB buckets) steps/s.
# Usage: scripts/shm_ce_probe.sh BUILD_DIR [PRECISION]   (logs under $OUT)
set -uo pipefail
build=${1:?build dir}
prec=${2:-fp32}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1
settings=("default:" "ce1:NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=1"
          "ce3:NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=3")
for s in "${settings[@]}"; do
  name=${s%%:*}; envs=${s#*:}
  echo "== $name ($envs)"
  env $envs NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 90 python3 scripts/torch_allreduce_probe.py 64 1226 \
    > "$out/ce_torch_$name.log" 2>&1; echo "torch exit $?"
  grep -E "^torch all-reduce" "$out/ce_torch_$name.log"; grep -m2 -E "via SHM" "$out/ce_torch_$name.log"
  env $envs timeout 90 "$build/bin/train" bench allreduce --gpus 2 --dtype f32 --sizes 64M,1224MB --timeout 40 \
    > "$out/ce_ours_$name.md" 2>&1; echo "ours exit $?"; tail -4 "$out/ce_ours_$name.md"
  [ "$name" = default ] && continue  # the sweeps have the default DDP rows
  env $envs timeout 120 "$build/bin/train" --gpus 2 --data gpu --precision "$prec" --bucket-mb 25 --warmup 10 \
    --steps 20 --print-every 0 --timeout 40 > "$out/ce_ddp_$name.log" 2>&1; echo "ddp exit $?"
  grep -E "^summary|error|timed out" "$out/ce_ddp_$name.log" | head -3
done
