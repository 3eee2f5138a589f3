#!/usr/bin/env bash
# JPEG data at the GPU's pace, on one GPU: writes ImageNet-like JPEGs (scripts/make_imagenet_like.py,
# 500x375, ~100 KB), times the loader alone on them with the train preset (`train bench loader`,
# one worker per CPU), then trains ViT-L/32 bf16 graphed on them and on --data gpu. One JSON line
# per run in ${OUT:-bench-out}/jpeg.jsonl.
# Usage: scripts/jpeg_bench.sh BUILD_DIR [IMAGES]
set -uo pipefail
build=${1:?build dir}
images=${2:-8000}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
data=$(mktemp -d /tmp/vitddp-jpeg.XXXXXX)
python3 "$(dirname "$0")/make_imagenet_like.py" "$data" --images "$images" --classes 100 | tee "$out/jpeg.log"
results="$out/jpeg.jsonl"
: > "$results"
cpus=$(nproc)
for batch in 32 256; do  # about 20,000 timed images each
  "$build/bin/train" bench loader --data "$data" --model vit_l_32 --batch-size "$batch" --steps $((20480 / batch)) \
    --set workers="$cpus" --json 2>&1 | tee -a "$out/jpeg.log" | grep '^{' >> "$results" || echo "bench loader failed"
done
for src in gpu "$data"; do
  "$build/bin/train" --gpus 1 --model vit_l_32 --precision bf16 --batch-size 32 --data "$src" --steps 300 \
    --print-every 0 --json 2>&1 | tee -a "$out/jpeg.log" | grep '^{' >> "$results" || echo "train on $src failed"
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r.get("bench") == "loader":
        print(f"loader alone, batch {r['batch_size']}, {r['workers']} workers: {r['images_per_s']:.0f} images/s")
    else:
        print(f"train --data {r['config']['data']}: {r['steps_per_s']:.1f} steps/s, {r['images_per_s']:.0f} images/s, "
              f"loader {r.get('loader_images_per_s') or 0:.0f} images/s")
PY
rm -rf "$data"
