#!/usr/bin/env bash
# Exact resume on the GPU: 8 straight steps against 4, a checkpoint, and a resumed run to 8
# (vit_tiny, AdamW, batches made on the GPU); one GPU, then two with PowerSGD. Prints whether
# the saved weights are bit-identical. Usage: scripts/gpu_resume_check.sh [BUILD_DIR] [FLAGS...]
# (FLAGS go to every run, e.g. --gemm-autotune=false or --gemm-cache-dir DIR.)
set -uo pipefail
b=${1:-build-gpu}/bin/train; shift || true; flags="$*"; d=$(mktemp -d)
base="--data gpu --warmup 0 --print-every 0 --optimizer adamw --lr 1e-4 --model vit_tiny --batch-size 16 --dataset-size 512"
for extra in "--gpus 1 $flags" "--gpus 2 --hook powersgd --powersgd-start-iter 2 --bucket-mb 1 $flags"; do
  rm -rf $d/*
  $b $base $extra --steps 8 --save $d/straight.safetensors > $d/a.log 2>&1 || { echo "straight failed"; tail -3 $d/a.log; }
  $b $base $extra --steps 4 --checkpoint-dir $d/ck --checkpoint-every 2 > $d/b.log 2>&1 || { echo "first half failed"; tail -3 $d/b.log; }
  $b $base $extra --steps 8 --resume --checkpoint-dir $d/ck --save $d/resumed.safetensors > $d/c.log 2>&1 || { echo "resume failed"; tail -3 $d/c.log; }
  grep -h "resumed from" $d/c.log
  if cmp -s $d/straight.safetensors $d/resumed.safetensors; then echo "resume [$extra]: bit-identical"; else echo "resume [$extra]: DIFFERENT"; fi
done
