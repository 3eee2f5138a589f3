#!/usr/bin/env bash
# Nsight Compute on one training step's kernels: duration, DRAM and SM throughput, achieved
# occupancy, registers and shared memory per block, for the kernels whose names match a regex.
# ncu reads hardware counters only on some GPU-machine runtimes (see the device tool's notes);
# clocks are left alone (--clock-control none).
# Usage: scripts/ncu_kernels.sh BUILD_DIR KERNEL_REGEX [PRECISION] [LAUNCH_COUNT]
# e.g. scripts/ncu_kernels.sh build-gpu 'layer_norm|gelu|add_words' bf16 200
# NCU_TRAIN_FLAGS: more train flags (e.g. "--set ddp=true --hook powersgd --powersgd-rank 4" for the hook's
# kernels on one GPU); NCU_DETAIL=1 adds the memory-workload and warp-state sections to the CSV.
set -uo pipefail
build=${1:?build dir}
regex=${2:?kernel name regex}
precision=${3:-bf16}
count=${4:-200}
out=${OUT:-bench-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
command -v ncu > /dev/null || { echo "ncu not found"; exit 1; }
# Four steps; only kernels inside step 4's NVTX range (domain vitddp) are profiled, after the
# first steps' autotuning and first-use allocations; at most LAUNCH_COUNT of them.
ncu --clock-control none --target-processes all --nvtx --nvtx-include "vitddp@step 4/" \
  --kernel-name "regex:$regex" --launch-count "$count" \
  --section SpeedOfLight --section Occupancy --section LaunchStats \
  ${NCU_DETAIL:+--section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats} --csv \
  "$build/bin/train" --gpus 1 --model vit_l_32 --precision "$precision" --data gpu --steps 4 --cuda-graph=false \
  --print-every 0 ${NCU_TRAIN_FLAGS:-} > "$out/ncu_$precision.csv" 2> "$out/ncu_$precision.log"
status=$?
echo "ncu exit $status ($out/ncu_$precision.csv)"
python3 - "$out/ncu_$precision.csv" <<'PY' || true
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no ncu rows")
head, body = rows[0], rows[1:]
col = {name: i for i, name in enumerate(head)}
want = {"Duration": "us", "DRAM Throughput": "%", "Compute (SM) Throughput": "%", "Achieved Occupancy": "%",
        "Registers Per Thread": "", "Block Size": "", "Grid Size": ""}
by_kernel = collections.defaultdict(dict)
for r in body:
    name, metric, unit, value = r[col["Kernel Name"]], r[col["Metric Name"]], r[col["Metric Unit"]], r[col["Metric Value"]]
    if metric in want:
        key = (name[:70], r[col["ID"]])
        by_kernel[key][metric] = f"{value} {unit}".strip()
for (name, launch), m in sorted(by_kernel.items(), key=lambda kv: int(kv[0][1])):
    print(f"{launch:>5} {name:70s} " + "  ".join(f"{k.split()[0]}={m.get(k, '-')}" for k in want))
PY
