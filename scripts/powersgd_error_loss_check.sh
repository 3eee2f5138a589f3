#!/usr/bin/env bash
# Numerics of --powersgd-error-dtype bucket (Note [A 16-bit error]): 2-GPU ViT-L/32 in bf16 with
# PowerSGD rank 4, trained for 100 steps on the learnable synthetic task from the same seed, with
# the error feedback in f32 and in bf16. As scripts/loss_curve_check.sh (whose reasons for the
# trailing mean hold here too), the bf16 error's 10-step trailing mean must stay within 2% of the
# f32 error's at every step; the per-step worst is printed for information. Writes
# $OUT/powersgd_error_loss.json; exits 1 when outside (or a run fails).
# Another PowerSGD setting is compared the same way with PSGD_LOSS_FLAG (a train flag without its
# dashes), PSGD_LOSS_A (the reference value), PSGD_LOSS_B and PSGD_LOSS_EXTRA (more flags for both
# runs): e.g. PSGD_LOSS_FLAG=powersgd-products PSGD_LOSS_A=gemm PSGD_LOSS_B=passes
# PSGD_LOSS_EXTRA="--powersgd-error-dtype bucket", written to $OUT/powersgd_products_loss.json.
# PSGD_LOSS_GPUS=1 runs both on one GPU as a one-rank DDP run (--ddp: the hook compresses all the
# same, its error feedback included), where two GPUs are not at hand.
# Usage: scripts/powersgd_error_loss_check.sh BUILD_DIR [steps]
set -uo pipefail
build=${1:?build dir}
steps=${2:-100}
out=${OUT:-bench-out}
flag=${PSGD_LOSS_FLAG:-powersgd-error-dtype}
a=${PSGD_LOSS_A:-f32}
b=${PSGD_LOSS_B:-bucket}
name=${flag#powersgd-}
name=powersgd_${name%%-*}_loss
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
gpus=(--gpus "${PSGD_LOSS_GPUS:-2}"); [ "${PSGD_LOSS_GPUS:-2}" = 1 ] && gpus+=(--ddp)
flags=("${gpus[@]}" --precision bf16 --hook powersgd --powersgd-rank 4 --bucket-mb 2000 --data learnable --optimizer adamw
       --lr 1e-4 --warmup 0 --steps "$steps" --print-every 0 --json --seed 3 --timeout 120 ${PSGD_LOSS_EXTRA:-})
for e in "$a" "$b"; do
  "$build/bin/train" "${flags[@]}" "--$flag" "$e" 2> "$out/psgd_loss_$e.err" | grep '^{' \
    > "$out/psgd_loss_$e.json" \
    || { echo "$name: --$flag $e run failed"; tail -3 "$out/psgd_loss_$e.err"; exit 1; }
done
python3 - "$out" "$flag" "$a" "$b" "$name" <<'PY'
import json, sys
out, flag, a, b, name = sys.argv[1:6]
WINDOW, TOLERANCE = 10, 0.02
f32, narrow = (json.load(open(f"{out}/psgd_loss_{e}.json"))["losses"] for e in (a, b))
if not f32 or len(f32) != len(narrow):
    print(f"{name}: step counts differ or are empty: {len(f32)} vs {len(narrow)}")
    sys.exit(1)
def mean(xs):  # trailing means over WINDOW steps (fewer for the first)
    windows = (xs[max(0, i - WINDOW + 1):i + 1] for i in range(len(xs)))
    return [sum(w) / len(w) for w in windows]
step = [abs(a - b) / abs(b) for a, b in zip(narrow, f32)]
trail = [abs(a - b) / abs(b) for a, b in zip(mean(narrow), mean(f32))]
worst_step, worst_trail = max(range(len(step)), key=step.__getitem__), max(range(len(trail)), key=trail.__getitem__)
ok = trail[worst_trail] <= TOLERANCE
json.dump({"flag": flag, a: f32, b: narrow, "rel_diff": step, "trailing_mean_rel_diff": trail,
           "trailing_mean_window": WINDOW, "tolerance": TOLERANCE, "pass": ok},
          open(f"{out}/{name}.json", "w"))
print(f"{name}: {len(f32)} steps, --{flag} {a} {f32[0]:.4f} -> {f32[-1]:.4f}, "
      f"{b} {narrow[0]:.4f} -> {narrow[-1]:.4f}")
print(f"{name}: per-step worst relative difference {step[worst_step]:.4f} at step {worst_step + 1}; "
      f"{WINDOW}-step trailing mean worst {trail[worst_trail]:.4f} at step {worst_trail + 1}: "
      f"{'within' if ok else 'OUTSIDE'} {TOLERANCE:.0%}")
sys.exit(0 if ok else 1)
PY
