#!/usr/bin/env bash
# Where does a 2-GPU training run stop under NCCL's copy-engine shared-memory transport
# (docs/performance.md, "Copy engines for the shared-memory transport")? Starts one run with
# P2P off and NCCL_SHM_USE_CUDA_MEMCPY=1, waits until it has stalled, then asks each worker for
# every thread's stack (SIGUSR2: framework/core/thread_stacks.h), names the frames
# (scripts/symbolize_stacks.py), and lets the run's own watchdog or heartbeat monitor end it;
# a hard limit kills it if neither does (that would be a bug of ours: the log says so).
# Usage: scripts/ce_hang_stacks.sh BUILD_DIR [SECONDS_BEFORE_STACKS] [EXTRA TRAIN FLAGS...]   (logs under $OUT)
# CE_HANG_TAG names the logs (several variants in one call).
set -uo pipefail
build=${1:?build dir}
wait_s=${2:-20}
shift 2 2>/dev/null || shift $#
tag=${CE_HANG_TAG:-ce}
out=${OUT:-bench-out}
mkdir -p "$out"
[ "${CE_PROXY_DUMP:-0}" = 1 ] && export NCCL_PROXY_DUMP_SIGNAL=10
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_USE_CUDA_MEMCPY=1 NCCL_SHM_MEMCPY_MODE=${NCCL_SHM_MEMCPY_MODE:-3}
log="$out/${tag}_hang_run.log"
# --timeout 30: the watchdog stops a late collective at 30 s, the heartbeat monitor a stuck
# watchdog at 50 s; 120 s is far past both.
timeout -s KILL 120 "$build/bin/train" --gpus 2 --data gpu --precision fp32 --warmup 2 --steps 2 --print-every 1 \
  --timeout 30 "$@" > "$log" 2>&1 &
runner=$!
sleep "$wait_s"
launcher=$(pgrep -P "$runner" || true)
workers=$( [ -n "$launcher" ] && pgrep -P "$launcher" || true)
echo "[$tag] launcher ${launcher:-gone}, workers: ${workers:-none (the run ended: see $log)}"
for pid in $workers; do
  for task in /proc/"$pid"/task/*; do
    echo "thread $(basename "$task") $(cat "$task/comm") state=$(awk '{print $3}' "$task/stat" 2>/dev/null) wchan=$(cat "$task/wchan" 2>/dev/null) syscall=$(cut -d' ' -f1 "$task/syscall" 2>/dev/null)"
  done > "$out/${tag}_hang_threads_$pid.txt"
  # One worker at a time: each dump goes out in one write, but both into this one log.
  dumps=$(grep -c '^end of stacks' "$log")
  kill -USR2 "$pid"
  for _ in $(seq 100); do
    [ "$(grep -c '^end of stacks' "$log")" -gt "$dumps" ] && break
    sleep 0.1
  done
done
# CE_PROXY_DUMP=1: NCCL's own view of its proxy too (NCCL_PROXY_DUMP_SIGNAL=10): which copies
# are posted, transmitted and done, after our stacks are out.
if [ "${CE_PROXY_DUMP:-0}" = 1 ]; then
  sleep 3
  for pid in $workers; do kill -USR1 "$pid" 2>/dev/null; done
fi
wait "$runner"; code=$?
echo "[$tag] run exit $code$([ "$code" = 137 ] && echo ' (killed by the 120 s limit: neither the watchdog nor the heartbeat ended it)')"
grep -vE '^(/|\S+\(|build)' "$log" | grep -vE '^\s*$' | grep -E 'error|vitddp:|stacks of|summary' | head -12
python3 "$(dirname "$0")/symbolize_stacks.py" "$log" > "$out/${tag}_hang_stacks.txt" 2>&1
echo "[$tag] named stacks: $(grep -c '^thread ' "$out/${tag}_hang_stacks.txt") thread blocks in $out/${tag}_hang_stacks.txt"
