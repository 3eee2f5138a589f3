#!/usr/bin/env bash
# Where does a 2-GPU training run stop under NCCL's copy-engine shared-memory transport
# (docs/performance.md, "Copy engines for the shared-memory transport")? Starts one run with
# P2P off and NCCL_SHM_USE_CUDA_MEMCPY=1, waits until it has stalled, then describes every
# thread of each worker (the kernel's view: name, wait channel, syscall; then gdb's stacks where
# gdb exists), and lets the run's own watchdog end it.
# Usage: scripts/ce_hang_stacks.sh BUILD_DIR [SECONDS_BEFORE_STACKS]   (logs under $OUT)
set -uo pipefail
build=${1:?build dir}
wait_s=${2:-20}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=3
"$build/bin/train" --gpus 2 --data gpu --precision fp32 --warmup 2 --steps 2 --print-every 1 --timeout 60 \
  > "$out/ce_hang_run.log" 2>&1 &
launcher=$!
sleep "$wait_s"
workers=$(pgrep -P "$launcher" || true)
echo "launcher $launcher, workers: ${workers:-none (the run ended: see ce_hang_run.log)}"
for pid in $workers; do
  file="$out/ce_hang_stacks_$pid.txt"
  # The kernel's view first (always there), then gdb's stacks where gdb exists and may attach.
  for task in /proc/"$pid"/task/*; do
    echo "thread $(basename "$task") $(cat "$task/comm") wchan=$(cat "$task/wchan" 2>/dev/null) syscall=$(cut -d' ' -f1 "$task/syscall" 2>/dev/null)"
  done > "$file"
  command -v gdb > /dev/null && timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt' >> "$file" 2>&1
  echo "stacks of $pid: $(wc -l < "$file") lines in $file"
done
wait "$launcher"; echo "run exit $?"; tail -3 "$out/ce_hang_run.log"
