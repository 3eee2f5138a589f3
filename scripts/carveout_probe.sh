#!/usr/bin/env bash
# Does --sm-carveout pay with P2P off? 1-GPU baseline, then 2-GPU fp32 DDP (bucket 25 MB,
# NCCL_P2P_DISABLE=1) at several carve-outs, and NVLink at the same; JSON lines to
# $OUT/carveout.jsonl. Usage: scripts/carveout_probe.sh BUILD_DIR [carveouts...]
set -uo pipefail
build=${1:?build dir}
shift
carveouts=("$@")
[ ${#carveouts[@]} -eq 0 ] && carveouts=(0 2 4 8)
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
common=(--precision "${PRECISION:-fp32}" --data gpu --warmup 10 --steps 20 --print-every 0 --json --timeout 60)
run() {  # LABEL P2P_DISABLE FLAGS...
  local label=$1 p2p=$2; shift 2
  local line
  line=$(NCCL_P2P_DISABLE=$p2p "$build/bin/train" "$@" "${common[@]}" 2>>"$out/carveout.log" | grep '^{')
  [ -z "$line" ] && { echo "$label: failed"; return; }
  python3 - "$line" "$label" >> "$out/carveout.jsonl" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); d["probe"] = sys.argv[2]
t = d.get("trace", {})
print(json.dumps(d))
print(f"{sys.argv[2]:40s} {d['steps_per_s']:.2f} steps/s  backward {t.get('backward_ms', 0):.2f} ms  exposed {t.get('exposed_comm_ms', 0):.2f} ms", file=sys.stderr)
PY
}
run "1 GPU" 0 --gpus 1
for c in "${carveouts[@]}"; do
  run "p2p off, bucket 25, carveout $c" 1 --gpus 2 --bucket-mb 25 --sm-carveout "$c" --trace "$out/carveout_p2p1_$c.json"
done
for c in 0 "${carveouts[-1]}"; do
  run "nvlink, bucket 25, carveout $c" 0 --gpus 2 --bucket-mb 25 --sm-carveout "$c" --trace "$out/carveout_p2p0_$c.json"
done
rm -f "$out"/carveout_p2p*.json
