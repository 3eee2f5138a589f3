#!/usr/bin/env bash
# One-GPU benchmark: vitddp and the PyTorch reference (torch_ddp_vit.py) side by side in one
# run, ViT-L/32, batch 32, synthetic data, for each precision. Writes one JSON line per run to
# ${OUT:-bench-out}/single_gpu.jsonl and prints a table (scripts/bench_table.py), then times the
# loader alone (`train bench loader`, loader.jsonl).
# VITDDP_FLAGS="--cuda-graph=false" goes to every vitddp run (default: the program's choices).
# COMPILE_PRECISIONS="bf16 ..." adds torch.compile(mode="reduce-overhead") rows for those precisions,
# GRAPH_PRECISIONS="bf16 ..." rows of PyTorch's whole step captured as one CUDA graph
# (torch_graph_step.py beside the reference script).
# Usage: scripts/bench_single_gpu.sh BUILD_DIR REFERENCE_SCRIPT [precisions...]
set -uo pipefail
build=${1:?build dir}
reference=${2:?path to torch_ddp_vit.py}
shift 2
precisions=("$@")
[ ${#precisions[@]} -eq 0 ] && precisions=(fp32 tf32)
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/single_gpu.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
for p in "${precisions[@]}"; do
  for data in gpu synthetic; do
    "$build/bin/train" --gpus 1 --precision "$p" --data "$data" --steps 30 --set untimed-steps=10 ${VITDDP_FLAGS:-} \
      --print-every 0 --json 2>&1 | tee -a "$out/single_gpu.log" | grep '^{' >> "$results" || echo "vitddp $p $data failed"
  done
  gpu_data="--gpu-data"
  for extra in "$gpu_data" ""; do
    python3 "$reference" --precision "$p" $extra --warmup 10 --steps 20 --workers 8 --tag "eager" 2>&1 \
      | tee -a "$out/single_gpu.log" | grep '^{' >> "$results" || echo "pytorch $p $extra failed"
  done
done
# PyTorch's strongest form: Inductor kernels replayed as CUDA graphs. Compiling takes
# about a minute per precision, so only the precisions named in COMPILE_PRECISIONS run it.
for p in ${COMPILE_PRECISIONS:-}; do
  python3 "$reference" --precision "$p" --gpu-data --compile --compile-mode reduce-overhead --warmup 10 --steps 20 \
    --tag "compile reduce-overhead" 2>&1 | tee -a "$out/single_gpu.log" | grep '^{' >> "$results" \
    || echo "pytorch $p compile failed"
done
for p in ${GRAPH_PRECISIONS:-}; do
  python3 "$(dirname "$reference")/torch_graph_step.py" --precision "$p" --warmup 10 --steps 20 2>&1 \
    | tee -a "$out/single_gpu.log" | grep '^{' >> "$results" || echo "pytorch $p whole-step graph failed"
done
python3 "$(dirname "$0")/bench_table.py" "$results"
# The loader alone, as the loader rows above build it (ViT-L/32's 224x224 synthetic images, batch
# 32, 8 workers): the rate a step would have to beat for the loader to hold it up.
"$build/bin/train" bench loader --model vit_l_32 --data synthetic --set workers=8 --steps 210 --set untimed-steps=10 --json \
  > "$out/loader.jsonl" 2>> "$out/single_gpu.log" || echo "vitddp loader bench failed"
python3 - "$out/loader.jsonl" <<'PY' || true
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(f"loader alone ({j['model']}, batch {j['batch_size']}, {j['workers']} workers): "
          f"{j['images_per_s']:.0f} images/s, {j['batches_per_s']:.1f} batches/s")
PY
