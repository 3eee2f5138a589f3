#!/usr/bin/env bash
# Numerics of the speed work: ViT-L/32 trained for 100 steps on the learnable synthetic task in
# fp32, bf16 and tf32 from the same seed (the bf16 loss curve within 2% of fp32's).
# tf32 is the control: it changes only the rounding of the matrix products and attention, so
# tf32 vs fp32 shows how far any rounding change moves the per-step curve.
# Prints, for bf16 and tf32 against fp32: the per-step worst relative difference (with its step)
# and the worst relative difference of the 10-step trailing means (window i-9..i, shorter for
# the first 9 steps). Writes $OUT/loss_curves.json. Exits 1 when bf16's trailing mean is
# outside 2% of fp32's at some step (or a run fails).
#
# Why the trailing mean decides: the issue asks for the loss *curve* within 2%. Two runs that
# round differently diverge into two chaotic trajectories after a few steps; each step's loss is
# then the loss of one 32-image batch on a different set of weights, with a step-to-step noise
# of ~0.1 (about 1.5% of a loss near 6.5), so a per-step 2% bound tests batch noise, not
# precision (the tf32 control shows how far a mere rounding change moves single steps). The
# 10-step trailing mean keeps the curve's shape and averages that noise out. The per-step
# figures are printed for information only.
# Usage: scripts/loss_curve_check.sh BUILD_DIR [steps]
set -uo pipefail
build=${1:?build dir}
steps=${2:-100}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
flags=(--gpus 1 --data learnable --optimizer adamw --lr 1e-4 --steps "$steps" --print-every 0 --json --seed 3)
for p in fp32 bf16 tf32; do
  "$build/bin/train" "${flags[@]}" --precision "$p" 2> "$out/loss_$p.err" | grep '^{' > "$out/loss_$p.json" \
    || { echo "loss curve: $p run failed"; tail -3 "$out/loss_$p.err"; exit 1; }
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
WINDOW, TOLERANCE = 10, 0.02
curves = {p: json.load(open(f"{out}/loss_{p}.json"))["losses"] for p in ("fp32", "bf16", "tf32")}
n = min(len(c) for c in curves.values())
if n == 0 or any(len(c) != n for c in curves.values()):
    print("loss curve: runs have different or no step counts: "
          + ", ".join(f"{p} {len(c)}" for p, c in curves.items()))
    sys.exit(1)

def rel(xs, ref):
    return [abs(x - r) / abs(r) for x, r in zip(xs, ref)]

def trailing_mean(xs):
    means = []
    for i in range(len(xs)):
        w = xs[max(0, i - WINDOW + 1):i + 1]
        means.append(sum(w) / len(w))
    return means

def worst(diffs):
    i = max(range(len(diffs)), key=lambda k: diffs[k])
    return diffs[i], i + 1  # steps counted from 1

fp32 = curves["fp32"]
mean_fp32 = trailing_mean(fp32)
result = dict(curves)
summary = {}
for p in ("bf16", "tf32"):
    step = rel(curves[p], fp32)
    mean = rel(trailing_mean(curves[p]), mean_fp32)
    result[f"rel_diff_{p}"] = step
    result[f"trailing_mean_rel_diff_{p}"] = mean
    summary[p] = (worst(step), worst(mean))
result["rel_diff"] = result["rel_diff_bf16"]  # the name earlier files used
result["trailing_mean_window"] = WINDOW
result["tolerance"] = TOLERANCE
(bf16_mean_diff, bf16_mean_step) = summary["bf16"][1]
ok = bf16_mean_diff <= TOLERANCE
result["pass"] = ok
json.dump(result, open(f"{out}/loss_curves.json", "w"))

print(f"loss curve: {n} steps, " + ", ".join(
    f"{p} {curves[p][0]:.4f} -> {curves[p][-1]:.4f}" for p in ("fp32", "bf16", "tf32")))
for p in ("bf16", "tf32"):
    (sd, ss), (md, ms) = summary[p]
    print(f"loss curve: {p} vs fp32: per-step worst relative difference {sd:.4f} at step {ss}; "
          f"{WINDOW}-step trailing mean worst {md:.4f} at step {ms}")
print(f"loss curve: bf16 {WINDOW}-step trailing mean within {TOLERANCE:.0%} of fp32's at every step: "
      f"{'within' if ok else 'OUTSIDE'} (worst {bf16_mean_diff:.4f} at step {bf16_mean_step})")
sys.exit(0 if ok else 1)
PY
