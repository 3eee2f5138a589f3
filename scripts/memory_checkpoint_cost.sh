#!/usr/bin/env bash
# Memory checkpoints of ViT-L/32 (bf16, AdamW, batch 32, --data gpu) on one GPU: what they cost a
# step and what a restart from them saves against one from disk. Five runs of the same 40 steps:
#   plain            no checkpoints
#   every10          --max-restarts 1, a memory checkpoint every 10 steps
#   chosen           --max-restarts 1, the interval the program chooses (at most 2% of the time)
#   from_memory      every 10, rank 0 killed in step 26: restored from memory (step 20)
#   from_disk        no memory checkpoint in time, --checkpoint-dir every 10: restored from disk
# Writes memory_<run>.log under $OUT and memory_checkpoints.md (the table docs/reliability.md cites).
#
#   OUT=out bash scripts/memory_checkpoint_cost.sh build-gpu
set -uo pipefail
build=$1
out=${OUT:-.}
train="$build/bin/train"
base=${MEMORY_BASE:-"--model vit_l_32 --precision bf16 --optimizer adamw --batch-size 32 --data gpu --steps 40 --print-every 0 --json"}
ckpt=$(mktemp -d /tmp/vitddp-ckpt-XXXXXX)
run() {  # NAME ENV ARGS...
  local name=$1 env=$2
  shift 2
  env $env timeout 240 "$train" $base "$@" > "$out/memory_$name.log" 2>&1
  echo "memory $name: exit $?"
}
run plain ""
run every10 "" --max-restarts 1 --set memory-checkpoint-every=10
run chosen "" --max-restarts 1
run from_memory "VITDDP_FAULT=0:25:exit" --max-restarts 1 --set memory-checkpoint-every=10
run from_disk "VITDDP_FAULT=0:25:exit" --max-restarts 1 --set memory-checkpoint-every=1000 --checkpoint-dir "$ckpt/disk" \
  --checkpoint-every 10
rm -rf "$ckpt"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def result(name):
    lines = [l for l in open(f"{out}/memory_{name}.log") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
r = {n: result(n) for n in ("plain", "every10", "chosen", "from_memory", "from_disk")}
md = []
p, e, c = r["plain"], r["every10"], r["chosen"]
if p and e:
    step = p["median_step_ms"] / 1e3
    save = e["memory_checkpoints"]["save_seconds"]
    md += ["| interval (steps) | one save (s) | cost per step (ms) | share of a step | steps lost at most |", "|---|---|---|---|---|"]
    rows = [(10, save)]
    if c and c["memory_checkpoints"]:
        rows.append((c["memory_checkpoints"]["every"], c["memory_checkpoints"]["save_seconds"]))
    for every, s in rows:
        md.append(f"| {every} | {s:.2f} | {s / every * 1e3:.2f} | {s / every / step * 100:.1f}% | {every - 1} |")
    md.append(f"\nA step without checkpoints: {p['median_step_ms']:.2f} ms (median), {p['steps_per_s']:.1f} steps/s; "
              f"with a save every 10 steps: {e['steps_per_s']:.1f} steps/s over the timed steps.")
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
