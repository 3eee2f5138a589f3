#!/usr/bin/env bash
# Memory checkpoints of ViT-L/32 (bf16, AdamW, batch 32, --data gpu) on one GPU: what they cost a
# step, what a failure loses, and what a restart from them saves against one from disk:
#   chosen       40 steps, --max-restarts 1: the interval N the program chooses, a save's two parts
#   plain        STEPS steps without checkpoints
#   at_chosen    STEPS steps with a memory checkpoint every N (written beside training)
#   from_memory  every N, rank 0 killed in step N + 701: restored from memory, from the newest step whose
#                write had finished
#   from_disk    the same with no memory checkpoint in time and --checkpoint-every N: restored from disk
# Writes memory_<run>.log under $OUT and memory_checkpoints.md (the table docs/reliability.md cites).
#
#   OUT=out bash scripts/memory_checkpoint_cost.sh build-gpu
set -uo pipefail
build=$1
out=${OUT:-.}
train="$build/bin/train"
steps=${STEPS:-1200}
base=${MEMORY_BASE:-"--model vit_l_32 --precision bf16 --optimizer adamw --batch-size 32 --data gpu --print-every 0 --json"}
ckpt=$(mktemp -d /tmp/vitddp-ckpt-XXXXXX)
run() {  # NAME ENV ARGS...
  local name=$1 env=$2
  shift 2
  env $env timeout 240 "$train" $base "$@" > "$out/memory_$name.log" 2>&1
  echo "memory $name: exit $?"
}
run chosen "" --steps 40 --max-restarts 1
every=$(grep '^{' "$out/memory_chosen.log" | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['memory_checkpoints']['every'])" 2>/dev/null || echo 500)
run plain "" --steps "$steps"
run at_chosen "" --steps "$steps" --max-restarts 1 --set memory-checkpoint-every="$every"
run from_memory "VITDDP_FAULT=0:$((every + 700)):exit" --steps $((every + 720)) --max-restarts 1 \
  --set memory-checkpoint-every="$every"
run from_disk "VITDDP_FAULT=0:$((every + 700)):exit" --steps $((every + 720)) --max-restarts 1 \
  --set memory-checkpoint-every=100000 --checkpoint-dir "$ckpt/disk" --checkpoint-every "$every"
rm -rf "$ckpt"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def result(name):
    lines = [l for l in open(f"{out}/memory_{name}.log") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
r = {n: result(n) for n in ("chosen", "plain", "at_chosen", "from_memory", "from_disk")}
md = []
p, a, c = r["plain"], r["at_chosen"], r["chosen"]
if p and a and c and c["memory_checkpoints"]:
    step = p["median_step_ms"] / 1e3
    m = c["memory_checkpoints"]
    every, copy, write = m["every"], m["copy_seconds"], m["write_seconds"]
    write_steps = -(-write // step)
    md += ["| interval N (steps) | a step waits for the copy (s) | the write, beside training (s) | cost per step (ms) "
           "| share of a step | measured: steps/s without, with | steps lost at most |", "|---|---|---|---|---|---|---|"]
    md.append(f"| {every} | {copy:.3f} | {write:.2f} | {copy / every * 1e3:.3f} | {copy / every / step * 100:.2f}% "
              f"| {p['steps_per_s']:.1f}, {a['steps_per_s']:.1f} | {every - 1 + int(write_steps)} |")
    md.append(f"\nA step without checkpoints: {p['median_step_ms']:.2f} ms (median). Steps lost at most: the N - 1 after "
              f"a save, and the {int(write_steps)} a failure may strike in while the newest save is still being "
              f"written (its step folder is then skipped for the one before).")
m, d = r["from_memory"], r["from_disk"]
if m and d and m.get("recovery") and d.get("recovery"):
    rm, rd = m["recovery"], d["recovery"]
    md += ["", "| restored from | step | restore (s) | recovery (s), failure to state restored |", "|---|---|---|---|"]
    for x in (rm, rd):
        md.append(f"| {x['restored_from']} | {x['step']} | {x['restore_seconds']:.2f} | {x.get('recovery_seconds', float('nan')):.2f} |")
    md.append(f"\nRecovery from memory against disk: {rd.get('recovery_seconds', 0) / max(rm.get('recovery_seconds', 1e-9), 1e-9):.2f}x "
              f"(restore alone {rd['restore_seconds'] / max(rm['restore_seconds'], 1e-9):.2f}x).")
open(f"{out}/memory_checkpoints.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
