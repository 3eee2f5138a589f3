#!/usr/bin/env bash
# Runs each fault scenario on the CPU (2 Gloo ranks, vit_tiny) and prints a markdown table:
# what was done, the exit code, the launcher's or the rank's message, and how long the run took
# to stop. Usage: scripts/fault_table.sh BUILD_DIR [EXTRA TRAIN FLAGS...]
set -uo pipefail
build=${1:?build dir}
shift
train="$build/bin/train"
base=(--procs 2 --model vit_tiny --batch-size 4 --set workers=1 --steps 6 --set timeout=5 "$@")
echo "| fault | exit code | what it said | time to stop (s) |"
echo "|---|---|---|---|"
row() {
  local name=$1 env=$2
  shift 2
  local start end out code
  start=$(date +%s.%N)
  out=$(env $env timeout 120 "$train" "${base[@]}" "$@" 2>&1)
  code=$?
  end=$(date +%s.%N)
  local said
  said=$(printf '%s\n' "$out" | grep -E "launcher:|error:|skipped" | tail -1 | sed 's/|/\\|/g' | cut -c1-220)
  printf '| %s | %s | %s | %.1f |\n' "$name" "$code" "$said" "$(echo "$end - $start" | bc)"
}
row "rank 1 exits (status 7) at step 2" "VITDDP_FAULT=1:1:exit"
row "rank 1 killed by SIGKILL at step 2" "VITDDP_FAULT=1:1:kill"
row "rank 1 hangs at step 2 (timeout 5 s)" "VITDDP_FAULT=1:1:hang"
row "rank 1's loss is NaN at step 2" "VITDDP_FAULT=1:1:nan"
row "rank 1's loss is NaN at step 2, --nonfinite skip" "VITDDP_FAULT=1:1:nan" --nonfinite skip
row "bad flag (--bucket-mb 0)" "" --bucket-mb 0
