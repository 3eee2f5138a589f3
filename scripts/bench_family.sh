#!/usr/bin/env bash
# The ViT family on one GPU: vitddp beside PyTorch eager, PyTorch's whole step as one CUDA graph
# (torch_graph_step.py) and torch.compile(mode="reduce-overhead"), in one run, batches made on the
# GPU. Writes ${OUT:-bench-out}/family.jsonl (one line per run; vitddp's carry "model") and prints
# scripts/family_table.py's table: steps/s, each system against vitddp, MFU and peak memory.
#   ROWS="vit_b_16:64 ..."      model:batch rows (default: the issue's rows and batch 32)
#   PRECISIONS="bf16 ..."       (default bf16)
#   PYTORCH="eager graph compile"  which PyTorch forms run; COMPILE_ROWS limits compile to those
#                                  rows (it compiles for a minute or more per row)
#   VITDDP_ONLY=1               no PyTorch rows; OP_BREAKDOWN=1 adds --op-breakdown to vitddp rows
# Usage: scripts/bench_family.sh BUILD_DIR ANCHORS_DIR (torch_ddp_vit.py, torch_graph_step.py)
set -uo pipefail
build=${1:?build dir}
anchors=${2:?folder of torch_ddp_vit.py and torch_graph_step.py}
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/family.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
rows=${ROWS:-"vit_b_16:64 vit_b_16:32 vit_l_16:32 vit_h_14:32 vit_l_32:128 vit_l_32:32"}
compile_rows=${COMPILE_ROWS:-"vit_b_16:64 vit_l_16:32"}
pytorch=${PYTORCH:-"eager graph compile"}
[ "${VITDDP_ONLY:-0}" = 1 ] && pytorch=""
log="$out/family.log"
for p in ${PRECISIONS:-bf16}; do
  for row in $rows; do
    model=${row%%:*} batch=${row##*:}
    extra=(); [ "${OP_BREAKDOWN:-0}" = 1 ] && extra=(--op-breakdown)
    "$build/bin/train" --gpus 1 --model "$model" --batch-size "$batch" --precision "$p" --data gpu --steps 30 \
      --set untimed-steps=10 --print-every 0 --json "${extra[@]}" 2>>"$log" | grep '^{' >> "$results" \
      || echo "vitddp $model $batch $p failed"
    for form in $pytorch; do
      case $form in
        eager) cmd=(python3 "$anchors/torch_ddp_vit.py" --model "$model" --batch-size "$batch" --precision "$p" --gpu-data
                    --warmup 10 --steps 20 --tag eager) ;;
        graph) cmd=(python3 "$anchors/torch_graph_step.py" --model "$model" --batch-size "$batch" --precision "$p"
                    --warmup 10 --steps 20) ;;
        compile) [[ " $compile_rows " == *" $row "* ]] || continue
                 cmd=(python3 "$anchors/torch_ddp_vit.py" --model "$model" --batch-size "$batch" --precision "$p" --gpu-data
                      --compile --compile-mode reduce-overhead --warmup 10 --steps 20 --tag "compile reduce-overhead") ;;
      esac
      "${cmd[@]}" 2>>"$log" | grep '^{' >> "$results" || echo "pytorch $form $model $batch $p failed"
    done
  done
done
python3 "$(dirname "$0")/family_table.py" "$results"
