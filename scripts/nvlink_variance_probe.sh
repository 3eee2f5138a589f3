#!/usr/bin/env bash
# Why the 2-GPU bf16 NVLink row is sometimes ~15% slower for a whole run (docs/performance.md, sixth session:
# traced, every 25 MB all-reduce of a slow run takes 0.4-0.5 ms instead of 0.13). Runs the row ROUNDS times with
# NCCL's initialisation and tuning log, so that a slow run's NCCL choices can be set beside a fast run's.
# Usage: OUT=folder bash scripts/nvlink_variance_probe.sh BUILD_DIR [ROUNDS]
set -uo pipefail
build=${1:?usage: nvlink_variance_probe.sh BUILD_DIR [ROUNDS]}
rounds=${2:-6}
export NCCL_NVLS_ENABLE=0
for round in $(seq "$rounds"); do
  log="$OUT/nvlink_variance_$round.log"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV timeout 120 "$build/bin/train" --gpus 2 --data gpu --precision bf16 \
    --warmup 10 --steps 30 --print-every 0 --timeout 60 > "$log" 2>&1
  echo "round $round: exit $? $(grep -E '^summary' "$log" | grep -oE '[0-9.]+ steps/s')" \
    "$(grep -cE 'NCCL INFO' "$log") NCCL lines, $(grep -oE '[0-9]+ coll channels' "$log" | sort -u | tr '\n' ' ')"
done
