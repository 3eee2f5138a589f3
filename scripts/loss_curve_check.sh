#!/usr/bin/env bash
# Numerics of the speed work: ViT-L/32 trained for 100 steps on the learnable synthetic task in
# fp32 and in bf16 from the same seed; the bf16 loss curve must stay within 2% of the fp32 one
# at every step (issue [5/7]). Writes $OUT/loss_curves.json and prints the worst step.
# Usage: scripts/loss_curve_check.sh BUILD_DIR [steps]
set -uo pipefail
build=${1:?build dir}
steps=${2:-100}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
flags=(--gpus 1 --data learnable --optimizer adamw --lr 1e-4 --warmup 0 --steps "$steps" --print-every 0 --json --seed 3)
for p in fp32 bf16; do
  "$build/bin/train" "${flags[@]}" --precision "$p" 2> "$out/loss_$p.err" | grep '^{' > "$out/loss_$p.json" \
    || { echo "loss curve: $p run failed"; tail -3 "$out/loss_$p.err"; exit 1; }
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
fp32 = json.load(open(f"{out}/loss_fp32.json"))["losses"]
bf16 = json.load(open(f"{out}/loss_bf16.json"))["losses"]
rel = [abs(b - f) / abs(f) for f, b in zip(fp32, bf16)]
worst = max(range(len(rel)), key=lambda i: rel[i])
json.dump({"fp32": fp32, "bf16": bf16, "rel_diff": rel}, open(f"{out}/loss_curves.json", "w"))
print(f"loss curve: {len(rel)} steps, fp32 {fp32[0]:.4f} -> {fp32[-1]:.4f}, bf16 {bf16[0]:.4f} -> {bf16[-1]:.4f}, "
      f"worst relative difference {rel[worst]:.4f} at step {worst + 1} ({'within' if rel[worst] <= 0.02 else 'OUTSIDE'} 2%)")
PY
