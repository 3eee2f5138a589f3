#!/usr/bin/env bash
# Temporary: where graphed and eager runs with a clip part.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DVITDDP_TESTS=OFF > /tmp/cfg.log 2>&1 && cmake --build build-gpu -j 16 --target train > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
base="--set timeout=60 --model vit_tiny --batch-size 32 --steps 6 --print-every 0 --set gemm-autotune=false --data gpu --lr 0.01 --json"
recipe="--lr-schedule cosine --warmup-steps 2 --label-smoothing 0.1 --clip-grad-norm 0.05 --model-ema 0.9 --weight-decay 0.05"
show() {
  python3 - "$@" <<'PY'
import json, sys
from safetensors.torch import load_file
rows = []
for log in sys.argv[1:]:
    j = [json.loads(l) for l in open(log + ".log") if l.startswith("{")][-1]
    rows.append((log, j["grad_norm"], j["losses"], load_file(log + ".st")))
ref = rows[0][3]
for log, g, losses, w in rows:
    d = max(float((ref[k].double() - w[k].double()).abs().max()) for k in ref)
    print(f"  {log.split('/')[-1]}: norm {g!r} losses {' '.join(f'{x:.9g}' for x in losses)} wdiff {d:.3g}")
PY
}
run() {  # label args
  local label=$1; shift
  echo "$label"
  for m in e1:--cuda-graph=false g1:--cuda-graph e2:--cuda-graph=false g2:--cuda-graph; do
    build-gpu/bin/train $base "$@" ${m#*:} --save /tmp/${m%%:*}.st > /tmp/${m%%:*}.log 2>&1 || { echo " ${m%%:*} failed"; tail -3 /tmp/${m%%:*}.log; }
  done
  show /tmp/e1 /tmp/g1 /tmp/e2 /tmp/g2
}
plain="--optimizer adamw --precision bf16"
sharded="--gpus 1 --set ddp=true --bucket-mb 0.5 --set update=sharded --precision bf16 --optimizer sgd --momentum 0.9"
run "plain bf16 recipe" $plain $recipe
run "plain bf16 recipe, no concurrent wgrad" $plain $recipe --set concurrent-wgrad=false
run "plain bf16 sgd clip" --optimizer sgd --momentum 0.9 --precision bf16 --clip-grad-norm 0.05
run "sharded clip" $sharded --clip-grad-norm 0.05
run "sharded clip fp32" ${sharded/bf16/fp32} --clip-grad-norm 0.05
run "sharded clip, no concurrent wgrad" $sharded --clip-grad-norm 0.05 --set concurrent-wgrad=false
run "sharded clip, one bucket" ${sharded/0.5/50} --clip-grad-norm 0.05
