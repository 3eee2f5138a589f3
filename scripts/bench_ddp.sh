#!/usr/bin/env bash
# Two-GPU DDP benchmark: vitddp and the PyTorch reference (torch_ddp_vit.py under torchrun)
# side by side in one run, ViT-L/32, batch 32 per GPU, batches made on the GPU, over NVLink and
# with NCCL_P2P_DISABLE=1 (traffic through host shared memory, like PCIe-only servers).
# Writes JSON lines to ${OUT:-bench-out}/ddp.jsonl and prints a table (scripts/bench_table.py).
# Usage: scripts/bench_ddp.sh BUILD_DIR REFERENCE_SCRIPT [precision] [bucket sizes...]
set -uo pipefail
build=${1:?build dir}
reference=${2:?path to torch_ddp_vit.py}
precision=${3:-fp32}
shift 3 2>/dev/null || shift $#
buckets=("$@")
[ ${#buckets[@]} -eq 0 ] && buckets=(25 100)
out=${OUT:-bench-out}
mkdir -p "$out"
results="$out/ddp.jsonl"
: > "$results"
export NCCL_NVLS_ENABLE=0
common=(--precision "$precision" --data gpu --warmup 10 --steps 20 --print-every 0 --json)
ours() { "$build/bin/train" "$@" "${common[@]}" 2>&1 | tee -a "$out/ddp.log" | grep '^{' >> "$results" || echo "vitddp $* failed"; }
theirs() { "$@" --precision "$precision" --gpu-data --warmup 10 --steps 20 2>&1 | tee -a "$out/ddp.log" | grep '^{' >> "$results" || echo "pytorch $* failed"; }
torchrun2=(python3 -m torch.distributed.run --standalone --nproc_per_node=2 "$reference" --ddp)

NCCL_P2P_DISABLE=0 ours --gpus 1
NCCL_P2P_DISABLE=0 theirs python3 "$reference"
# DDP_HOOK_LINKS: the NCCL_P2P_DISABLE values for which the bf16-hook rows run too.
for p2p in 0 1; do
  for mb in "${buckets[@]}"; do
    NCCL_P2P_DISABLE=$p2p ours --gpus 2 --bucket-mb "$mb"
    NCCL_P2P_DISABLE=$p2p theirs "${torchrun2[@]}" --bucket-mb "$mb" --static-graph --grad-as-bucket-view
  done
  case " ${DDP_HOOK_LINKS:-0 1} " in *" $p2p "*)
    NCCL_P2P_DISABLE=$p2p ours --gpus 2 --bucket-mb 100 --hook bf16
    NCCL_P2P_DISABLE=$p2p theirs "${torchrun2[@]}" --bucket-mb 100 --static-graph --grad-as-bucket-view --hook bf16 ;;
  esac
done
python3 "$(dirname "$0")/bench_table.py" "$results"
