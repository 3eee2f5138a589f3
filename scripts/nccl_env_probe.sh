#!/usr/bin/env bash
# Which NCCL settings make two-GPU DDP fastest when P2P is off (traffic through host shared
# memory)? Runs `train --gpus 2` (fp32, ViT-L/32, batch 32 per GPU, batches made on the GPU)
# under each setting below, plus the one-GPU baseline, and writes JSON lines with the setting.
# Usage: scripts/nccl_env_probe.sh BUILD_DIR [bucket MB...]
set -uo pipefail
build=${1:?build dir}
shift
buckets=("$@")
[ ${#buckets[@]} -eq 0 ] && buckets=(25)
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/nccl_env.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
# A short --timeout: a setting that makes NCCL hang costs a minute, not five
# (NCCL_SHM_USE_CUDA_MEMCPY=1 hung in the first broadcast with NCCL 2.28.9 on 2026-11-29).
common=(--precision "${PRECISION:-fp32}" --data gpu --warmup 10 --steps 20 --print-every 0 --json --timeout 60)
run() {  # run LABEL ENV... -- FLAGS...
  local label=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local line
  line=$(env "${envs[@]}" "$build/bin/train" "$@" "${common[@]}" 2>>"$out/nccl_env.log" | grep '^{')
  if [ -z "$line" ]; then echo "probe $label failed"; return; fi
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["probe"]=sys.argv[2]; print(json.dumps(d))' "$line" "$label" >> "$results"
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(f"{sys.argv[2]:60s} {d.get(\"steps_per_s\", d)}")' "$line" "$label"
}
run "1 GPU" -- --gpus 1
for mb in "${buckets[@]}"; do
  run "p2p off, bucket $mb" NCCL_P2P_DISABLE=1 -- --gpus 2 --bucket-mb "$mb"
  run "p2p off, bucket $mb, MIN_NCHANNELS=4" NCCL_P2P_DISABLE=1 NCCL_MIN_NCHANNELS=4 -- --gpus 2 --bucket-mb "$mb"
  run "p2p off, bucket $mb, MIN_NCHANNELS=8" NCCL_P2P_DISABLE=1 NCCL_MIN_NCHANNELS=8 -- --gpus 2 --bucket-mb "$mb"
  run "p2p off, bucket $mb, MAX_NCHANNELS=1" NCCL_P2P_DISABLE=1 NCCL_MAX_NCHANNELS=1 -- --gpus 2 --bucket-mb "$mb"
  run "p2p off, bucket $mb, BUFFSIZE=16M" NCCL_P2P_DISABLE=1 NCCL_BUFFSIZE=16777216 -- --gpus 2 --bucket-mb "$mb"
  run "p2p off, bucket $mb, MIN_NCHANNELS=8 BUFFSIZE=16M" NCCL_P2P_DISABLE=1 NCCL_MIN_NCHANNELS=8 NCCL_BUFFSIZE=16777216 -- --gpus 2 --bucket-mb "$mb"
done
run "nvlink, bucket 25" NCCL_P2P_DISABLE=0 -- --gpus 2 --bucket-mb 25
