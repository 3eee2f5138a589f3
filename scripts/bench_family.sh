#!/usr/bin/env bash
# The ViT family on one GPU: vitddp beside PyTorch eager, PyTorch's whole step as one CUDA graph
# (torch_graph_step.py) and torch.compile(mode="reduce-overhead"), in one run, batches made on the
# GPU. Writes ${OUT:-bench-out}/family.jsonl (one line per run; vitddp's carry "model") and prints
# scripts/family_table.py's table: steps/s, each system against vitddp, MFU and peak memory.
#   ROWS="model:batch:precision:forms ..."  forms: PyTorch's forms for that row joined by "+"
#        (eager, graph, compile; "-" none). Default: the family's rows, compile (which compiles
#        for a minute or more) where the docs compare against it, the whole-step graph elsewhere,
#        eager everywhere for its comparable peak memory.
#   VITDDP_ONLY=1               no PyTorch rows
# Usage: scripts/bench_family.sh BUILD_DIR ANCHORS_DIR (torch_ddp_vit.py, torch_graph_step.py)
set -uo pipefail
build=${1:?build dir}
anchors=${2:?folder of torch_ddp_vit.py and torch_graph_step.py}
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/family.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
rows=${ROWS:-"vit_b_16:64:bf16:eager+compile vit_b_16:32:bf16:eager+graph vit_l_16:32:bf16:eager+compile
vit_h_14:32:bf16:eager+graph vit_l_32:128:bf16:eager+graph vit_l_32:32:bf16:graph"}
log="$out/family.log"
for row in $rows; do
  IFS=: read -r model batch p forms <<< "$row"
  p=${p:-bf16} forms=${forms:--}
  [ "${VITDDP_ONLY:-0}" = 1 ] && forms=-
  "$build/bin/train" --gpus 1 --model "$model" --batch-size "$batch" --precision "$p" --data gpu --steps 30 \
    --set untimed-steps=10 --print-every 0 --json 2>>"$log" | grep '^{' >> "$results" \
    || echo "vitddp $model $batch $p failed"
  for form in ${forms//+/ }; do
    case $form in
      eager) cmd=(python3 "$anchors/torch_ddp_vit.py" --model "$model" --batch-size "$batch" --precision "$p" --gpu-data
                  --warmup 10 --steps 20 --tag eager) ;;
      graph) cmd=(python3 "$anchors/torch_graph_step.py" --model "$model" --batch-size "$batch" --precision "$p"
                  --warmup 10 --steps 20) ;;
      compile) cmd=(python3 "$anchors/torch_ddp_vit.py" --model "$model" --batch-size "$batch" --precision "$p" --gpu-data
                    --compile --compile-mode reduce-overhead --warmup 10 --steps 20 --tag "compile reduce-overhead") ;;
      -) continue ;;
      *) echo "bench_family: unknown form $form in $row" >&2; exit 2 ;;
      esac
    "${cmd[@]}" 2>>"$log" | grep '^{' >> "$results" || echo "pytorch $form $model $batch $p failed"
  done
done
python3 "$(dirname "$0")/family_table.py" "$results"
