#!/usr/bin/env bash
# One GPU, ViT-L/32 batch 32 on batches made on the GPU: an earlier build against this one, in
# one call, launches alternating (before, after, before, after, ...) so that drift hits both.
# For each precision: the earlier build with its default flags and with its best (--cuda-graph),
# and this build with its defaults (which choose the graph). 30 steps a launch, the first 10
# untimed. Writes $OUT/speed.jsonl (one line a launch, tagged) and prints medians and ratios.
# Usage: scripts/speed_before_after.sh BEFORE_BUILD AFTER_BUILD [ROUNDS] [PRECISIONS...]
set -uo pipefail
before=${1:?earlier build dir}
after=${2:?this build dir}
rounds=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
precisions=("$@")
[ ${#precisions[@]} -eq 0 ] && precisions=(bf16 tf32 fp32)
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/speed.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
common=(--gpus 1 --data gpu --print-every 0 --json)
launch() {  # TAG BUILD ARGS...
  local tag=$1 build=$2
  shift 2
  "$build/bin/train" "${common[@]}" "$@" 2>> "$out/speed.log" | grep '^{' \
    | python3 -c "import json,sys; j=json.loads(sys.stdin.read()); j['tag']='$tag'; print(json.dumps(j))" >> "$results" \
    || echo "$tag failed" | tee -a "$out/speed.log"
}
for p in "${precisions[@]}"; do
  for r in $(seq "$rounds"); do
    launch "before default $p" "$before" --precision "$p" --warmup 10 --steps 20
    launch "after default $p" "$after" --precision "$p" --steps 30 --set untimed-steps=10
    launch "before best $p" "$before" --precision "$p" --warmup 10 --steps 20 --cuda-graph
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys, collections
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    rates[j["tag"]].append(j["steps_per_s"])
precisions = sorted({t.split()[-1] for t in rates}, key=["bf16", "tf32", "fp32"].index)
print("| precision | before, defaults | before, --cuda-graph | after, defaults | after / before defaults | after / before best |")
print("|---|---|---|---|---|---|")
for p in precisions:
    med = {k: statistics.median(rates.get(f"{k} {p}", [float("nan")])) for k in ("before default", "before best", "after default")}
    runs = {k: ", ".join(f"{v:.2f}" for v in rates.get(f"{k} {p}", [])) for k in med}
    print(f"| {p} | {med['before default']:.2f} ({runs['before default']}) | {med['before best']:.2f} ({runs['before best']}) "
          f"| {med['after default']:.2f} ({runs['after default']}) | {med['after default'] / med['before default']:.3f} "
          f"| {med['after default'] / med['before best']:.3f} |")
PY
