#!/usr/bin/env bash
# Does the host's CPU placement move the host-bound NVLink bf16 row (docs/performance.md: it varies by +-10% from
# machine to machine)? Prints the machine's CPU/GPU topology, then runs the 2-GPU bf16 25 MB row (NVLink) with the
# ranks free to run anywhere and with both held to the CPUs of GPU 0's NUMA node, alternating, twice each.
# Usage: OUT=folder bash scripts/affinity_probe.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: affinity_probe.sh BUILD_DIR}
export NCCL_NVLS_ENABLE=0
{ nproc; nvidia-smi topo -m; cat /sys/devices/system/node/node*/cpulist 2>/dev/null; } > "$OUT/topology.txt" 2>&1
near=$(nvidia-smi topo -m 2>/dev/null | awk '/^GPU0/ {for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9]+-[0-9]+/) {print $i; exit}}')
echo "GPU0's CPUs: ${near:-unknown}"
row=(--gpus 2 --data gpu --precision bf16 --warmup 10 --steps 30 --print-every 0 --timeout 60)
for round in 1 2; do
  "$build/bin/train" "${row[@]}" > "$OUT/affinity_free_$round.log" 2>&1
  echo "free, round $round: $(grep -E '^summary' "$OUT/affinity_free_$round.log" | grep -oE '[0-9.]+ steps/s')"
  if [ -n "$near" ]; then
    taskset -c "${near%%,*}" "$build/bin/train" "${row[@]}" > "$OUT/affinity_near_$round.log" 2>&1
    echo "CPUs ${near%%,*}, round $round: $(grep -E '^summary' "$OUT/affinity_near_$round.log" | grep -oE '[0-9.]+ steps/s')"
  fi
done
