#!/usr/bin/env bash
# Does the host's CPU placement move the host-bound NVLink bf16 row? On one machine (fbed73c) the same 2-GPU bf16
# 25 MB row gave 78.55 to 90.30 steps/s from run to run. Prints the CPU/GPU topology, then runs the row with the
# ranks' threads free and with each rank's training thread held to CPUs of its own (--bind-cpus), alternating.
# Usage: OUT=folder bash scripts/affinity_probe.sh BUILD_DIR [ROUNDS]
set -uo pipefail
build=${1:?usage: affinity_probe.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
export NCCL_NVLS_ENABLE=0
{ nproc; nvidia-smi topo -m; lscpu; lscpu -e; } > "$OUT/topology.txt" 2>&1
row=(--gpus 2 --data gpu --precision bf16 --warmup 10 --steps 30 --print-every 0 --timeout 60)
for round in $(seq "$rounds"); do
  for bind in 0 1 2; do
    log="$OUT/affinity_bind${bind}_$round.log"
    timeout 120 "$build/bin/train" "${row[@]}" --bind-cpus "$bind" > "$log" 2>&1
    echo "--bind-cpus $bind, round $round: exit $? $(grep -E '^summary' "$log" | grep -oE '[0-9.]+ steps/s')"
  done
done
