#!/usr/bin/env bash
# What one GPU-machine call does, each part asked for by a variable; everything it writes is
# packed into $OUT/results.tgz at the end (the device tool returns few files), beside a copy of
# what it printed.
# Run `bash scripts/fetch_device_deps.sh` here first and carry `.deps` (and BEFORE's folder).
#
#   (always)         build (sm_90) into build-gpu: the program and the GPU tests (BUILD=0: not, for a
#                    call that only simulates)
#   BEFORE=DIR       also build the sources in DIR (an earlier commit, e.g. from `git archive`)
#                    and time it against this build: scripts/speed_before_after.sh
#   GPU_TESTS=1      ctest -L gpu (GPU_TEST_FILTER=regex picks some; each stops after 180 s)
#   BENCH=1          one GPU against PyTorch eager and torch.compile: scripts/bench_single_gpu.sh
#   FAMILY=1         the ViT family against PyTorch's forms: scripts/bench_family.sh (its ROWS and
#                    VITDDP_ONLY pass through)
#   LOSS_CURVE=1     bf16 and tf32 loss curves against fp32's: scripts/loss_curve_check.sh
#   OPS="m:b ..."    --op-breakdown of vitddp's bf16 step for each model:batch (ops_M_B.log)
#   JPEG=1           JPEG files at the GPU's pace: scripts/jpeg_bench.sh
#   SIM="ARGS"       scripts/ring_sim_ddp.py ARGS in the background on the machine's cores (.deps/sim.tar.xz,
#                    .deps/vitl32_buckets.json), started before the build, waited for at the end, until
#                    SIM_WAIT s (default 560) from the start
#   TRANSFER=1       train bench transfer of ViT-L/32's GPU state on shm and tcp (transfer_*.json)
#   TRANSFER_CPU=1   the same for its CPU state on this host's cores: scripts/transfer_table.sh
#                    (transfer_cpu/; the two-namespace row where `ip netns` works)
#   MEMORY=1         memory checkpoints of ViT-L/32 on the GPU: their cost per step and a restart from
#                    memory against one from disk: scripts/memory_checkpoint_cost.sh
#   SWEEP="f.json"   train bench --sweep FILE for each (REFERENCE=1: PyTorch's rows beside ours);
#                    DIGITS=1 first puts scikit-learn's digits at data/digits (the accuracy sweeps):
#                    the copy fetch_device_deps.sh wrote to .deps/digits, else made here
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
RESULTS=${OUT:-device-out}
OUT=$(mktemp -d /tmp/vitddp-run.XXXXXX)
mkdir -p "$RESULTS"
exec > >(tee "$OUT/run.log") 2>&1
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
# cuDNN: the one PyTorch's wheel brings (nvidia-cudnn) when there is one, else the system's.
cudnn_root=$(python3 -c "import nvidia.cudnn as c; print(list(c.__path__)[0])" 2>/dev/null || true)
[ -n "$cudnn_root" ] && export LD_LIBRARY_PATH="$cudnn_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libfabric and what it loads, unpacked by fetch_device_deps.sh.
export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu:$PWD/.deps/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build() {  # SOURCE_DIR BUILD_DIR TARGETS...
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DVITDDP_PYTHON="$(command -v python3)" ${cudnn_root:+-DCUDNN_ROOT=$cudnn_root} \
    -DCUDNN_FRONTEND_ROOT="$PWD/.deps/cudnn_frontend" > "$OUT/configure_$(basename "$dir").log" 2>&1 \
    && cmake --build "$dir" -j "$(nproc)" --target "$@" > "$OUT/build_$(basename "$dir").log" 2>&1
}
# The simulations need no build: they start first, niced, on the cores the build leaves.
if [ -n "${SIM:-}" ]; then
  mkdir -p /tmp/vitddp-sim && tar -C /tmp/vitddp-sim -xJf .deps/sim.tar.xz
  (LD_LIBRARY_PATH=/tmp/vitddp-sim/sim/lib nice -n 10 python3 scripts/ring_sim_ddp.py .deps/vitl32_buckets.json \
    /tmp/vitddp-sim/sim/ring_sim "$OUT/ring_sim_ddp" $SIM > "$OUT/ring_sim_ddp.log" 2>&1) &
  sim_pid=$!
  stamp "simulations started: $SIM"
fi
if [ "${BUILD:-1}" != 0 ]; then
  build . build-gpu train vitddp_gpu_tests || { grep -E "error" -A5 "$OUT"/build_*.log | head -40; exit 1; }
  stamp "build ok (commit ${COMMIT:-unknown})"
  grep -h "vitddp: CUDA backend" "$OUT/configure_build-gpu.log"
fi
if [ -n "${BEFORE:-}" ]; then
  build "$BEFORE" build-before train || { grep -E "error" -A5 "$OUT/build_build-before.log" | head -40; exit 1; }
  stamp "build of $BEFORE ok"
  OUT="$OUT" bash scripts/speed_before_after.sh build-before build-gpu "${SPEED_ROUNDS:-2}" ${SPEED_PRECISIONS:-}
  stamp "speed done"
fi
if [ "${GPU_TESTS:-0}" = 1 ]; then
  (cd build-gpu && timeout "${GPU_TEST_BUDGET:-400}" ctest -L gpu --timeout 180 --output-on-failure ${GPU_TEST_FILTER:+-R "$GPU_TEST_FILTER"} \
    > "$OUT/gpu_tests.log" 2>&1)
  stamp "gpu tests exit $?"
  grep -E "loss torchvision|gradients compared" "$OUT/gpu_tests.log"
  grep -E "tests passed|\(Failed\)|\(Timeout\)|Not Run" "$OUT/gpu_tests.log" | tail -20
fi
if [ "${BENCH:-0}" = 1 ]; then
  OUT="$OUT" COMPILE_PRECISIONS="${COMPILE_PRECISIONS:-bf16}" GRAPH_PRECISIONS="${GRAPH_PRECISIONS:-bf16}" \
    bash scripts/bench_single_gpu.sh build-gpu \
    .deps/anchors/torch_ddp_vit.py ${BENCH_PRECISIONS:-bf16 tf32 fp32}
  stamp "bench done"
fi
if [ "${FAMILY:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/bench_family.sh build-gpu .deps/anchors
  stamp "family done"
fi
for row in ${OPS:-}; do
  model=${row%%:*} batch=${row##*:}
  build-gpu/bin/train --gpus 1 --model "$model" --batch-size "$batch" --precision bf16 --data gpu --steps 20 \
    --set untimed-steps=10 --print-every 0 --op-breakdown > "$OUT/ops_${model}_$batch.log" 2>&1
  stamp "op breakdown $model $batch exit $?"; grep -A25 "op breakdown of one step" "$OUT/ops_${model}_$batch.log" | head -30
done
if [ "${JPEG:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/jpeg_bench.sh build-gpu "${JPEG_IMAGES:-8000}" | tail -6
  stamp "jpeg done"
fi
if [ "${LOSS_CURVE:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/loss_curve_check.sh build-gpu "${LOSS_STEPS:-100}" | tail -8
  stamp "loss curves done"
fi
if [ "${DIGITS:-0}" = 1 ]; then
  if [ -d .deps/digits/val ]; then ln -sfn ../.deps/digits data/digits
  else python3 scripts/make_digits_dataset.py data/digits > "$OUT/digits.log" 2>&1; fi
fi
if [ "${TRANSFER:-0}" = 1 ]; then
  for provider in shm tcp; do
    timeout 300 build-gpu/bin/train bench transfer --model vit_l_32 --optimizer adamw --hook powersgd --precision bf16 \
      --batch-size 8 --data gpu --provider $provider --repeats 5 --json > "$OUT/transfer_$provider.log" 2>&1
    stamp "transfer $provider exit $?"; tail -2 "$OUT/transfer_$provider.log"
  done
fi
if [ "${TRANSFER_CPU:-0}" = 1 ]; then
  ROUNDS=${ROUNDS:-2} REPEATS=${REPEATS:-11} timeout "${TRANSFER_CPU_BUDGET:-240}" bash scripts/transfer_table.sh build-gpu/bin/train "$OUT/transfer_cpu" --device cpu
  stamp "transfer of the CPU state done"
fi
if [ "${MEMORY:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/memory_checkpoint_cost.sh build-gpu
  stamp "memory checkpoints done"
fi
for sweep in ${SWEEP:-}; do
  name=$(basename "$sweep" .json)
  ref=(); [ "${REFERENCE:-0}" = 1 ] && ref=(--reference .deps/anchors/torch_ddp_vit.py)
  VITDDP_COMMIT=${COMMIT:-unknown} build-gpu/bin/train bench --sweep "$sweep" --out-dir "$OUT/$name" "${ref[@]}" \
    > "$OUT/$name.log" 2>&1
  stamp "sweep $name exit $?"; grep -E "^\||failed" "$OUT/$name.log"
done
if [ -n "${sim_pid:-}" ]; then
  while kill -0 "$sim_pid" 2> /dev/null && [ $(( $(date +%s) - start )) -lt "${SIM_WAIT:-560}" ]; do sleep 5; done
  kill -0 "$sim_pid" 2> /dev/null && { echo "simulations still running: stopped"; pkill -f ring_sim; }
  stamp "simulations: $(wc -l < "$OUT/ring_sim_ddp/ddp.jsonl" 2> /dev/null || echo 0) rows"
  tail -5 "$OUT/ring_sim_ddp.log"
fi
stamp "done"
# A file back from the device may be at most 16 MiB: large ones are named here and left out.
(cd "$OUT" && find . -type f -size +4M) > "$OUT/left_out.txt"
[ -s "$OUT/left_out.txt" ] && { echo "left out of results.tgz (over 4 MiB):"; (cd "$OUT" && xargs -a left_out.txt ls -l); }
tar czf "$RESULTS/results.tgz" -X "$OUT/left_out.txt" -C "$OUT" . && cp "$OUT/run.log" "$RESULTS/run.log"
