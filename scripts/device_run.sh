#!/usr/bin/env bash
# Everything one GPU-machine call does: build (sm_90) with the carried header packages, run
# the GPU tests and the CPU tests, then the one-GPU benchmark against PyTorch. Logs go to $OUT.
# Run `bash scripts/fetch_device_deps.sh` here first and carry `.deps`.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-device-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python_bin=$(command -v python3)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DVITDDP_PYTHON="$python_bin" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
# Without the CPU tests only the program and the GPU test binary are built (less device time).
targets=(); [ "${SKIP_CPU_TESTS:-0}" = 1 ] && targets=(--target train vitddp_gpu_tests)
cmake --build build-gpu -j "$(nproc)" "${targets[@]}" > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "build ok (commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
(cd build-gpu && ctest -L gpu -V ${GPU_TEST_FILTER:+-R "$GPU_TEST_FILTER"} > "$OUT/gpu_tests.log" 2>&1)
gpu_tests_exit=$?; echo "gpu tests exit $gpu_tests_exit"
grep -E "loss torchvision|gradients compared" "$OUT/gpu_tests.log"
grep -E "tests passed|\(Failed\)|FAILED" "$OUT/gpu_tests.log" | tail -15
# STOP_ON_GPU_TEST_FAILURE=1: nothing more when a GPU test failed (or timed out: ctest stops each after 180 s).
if [ "${STOP_ON_GPU_TEST_FAILURE:-0}" = 1 ] && [ "$gpu_tests_exit" != 0 ]; then
  grep -E "Failure|Expected|Which is|Timeout" "$OUT/gpu_tests.log" | head -20; exit 1
fi
if [ "${SKIP_CPU_TESTS:-0}" != 1 ]; then
  (cd build-gpu && ctest -L cpu -j 8 --output-on-failure > "$OUT/cpu_tests.log" 2>&1); echo "cpu tests exit $?"
  grep -E "tests passed|\(Failed\)" "$OUT/cpu_tests.log" | tail -10
fi
for p in ${BREAKDOWN_PRECISIONS-fp32 bf16}; do
  build-gpu/bin/train --gpus 1 --data gpu --precision "$p" --warmup 3 --steps 5 --print-every 0 --op-breakdown \
    > "$OUT/breakdown_$p.log" 2>&1; echo "breakdown $p exit $?"; head -25 "$OUT/breakdown_$p.log" | grep -E "summary|ms "
done
# SANITIZE="gtest filter": compute-sanitizer's memcheck and racecheck over those GPU tests
# (out-of-bounds and shared-memory races in new kernels; works where the runtime allows it).
if [ -n "${SANITIZE:-}" ]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 99 build-gpu/tests/vitddp_gpu_tests --gtest_filter="$SANITIZE" \
      > "$OUT/sanitize_$tool.log" 2>&1; echo "compute-sanitizer $tool exit $?"
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitize_$tool.log" | tail -3
  done
fi
# NCU_KERNELS="regex": Nsight Compute on one bf16 step's matching kernels (NCU_PRECISION to change).
if [ -n "${NCU_KERNELS:-}" ]; then
  OUT="$OUT" bash scripts/ncu_kernels.sh build-gpu "$NCU_KERNELS" "${NCU_PRECISION:-bf16}" | head -60
fi
if [ "${RESUME_CHECK:-0}" = 1 ]; then
  bash scripts/gpu_resume_check.sh build-gpu > "$OUT/resume_check.log" 2>&1; grep -E "resume \[|failed" "$OUT/resume_check.log"
fi
# TRACE_RUNS="P2P_DISABLE:BUCKET_MB[:PRECISION[:HOOK[:NAME:FLAGS]]] ...": 2-GPU runs with --trace; the analysis goes
# to the log. FLAGS: more train flags, comma-separated (e.g. "uif:--update-in-forward,--ready-order-share=0.4").
for spec in ${TRACE_RUNS:-}; do
  IFS=: read -r p2p mb prec hook tag flags <<< "$spec"
  name="trace_p2p${p2p}_b${mb}_${prec:-fp32}_${hook:-allreduce}${tag:+_$tag}"
  NCCL_P2P_DISABLE=$p2p build-gpu/bin/train --gpus 2 --data gpu --precision "${prec:-fp32}" --hook "${hook:-allreduce}" \
    --bucket-mb "$mb" --warmup 10 --steps 20 --print-every 0 --timeout 60 ${flags//,/ } --trace "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1
  echo "$name exit $?"; grep -E "^summary|mean over" "$OUT/$name.log"
done
# DDP_BREAKDOWNS="P2P_DISABLE:BUCKET_MB:PRECISION:HOOK:RANK[:NAME:FLAGS] ...": 2-GPU runs with --op-breakdown (GPU time
# per op type of one step, the hook's kernels included, and the host's issue time against the GPU's); FLAGS: more
# train flags, comma-separated.
for spec in ${DDP_BREAKDOWNS:-}; do
  IFS=: read -r p2p mb prec hook rank tag flags <<< "$spec"
  name="ddp_breakdown_p2p${p2p}_b${mb}_${prec}_${hook}${rank:+_r$rank}${tag:+_$tag}"
  NCCL_P2P_DISABLE=$p2p build-gpu/bin/train --gpus 2 --data gpu --precision "$prec" --hook "$hook" --bucket-mb "$mb" \
    ${rank:+--powersgd-rank "$rank"} --warmup 10 --steps 30 --print-every 0 --timeout 60 --op-breakdown ${flags//,/ } \
    > "$OUT/$name.log" 2>&1; echo "$name exit $?"; grep -E "^summary|host against|of which|powersgd|  [a-z_]+ .* ms " "$OUT/$name.log" | head -24
done
# ONE_GPU_RUNS="NAME:PRECISION:FLAGS ...": one-GPU runs (10 + 30 steps) for A/B comparisons in one call, FLAGS
# comma-separated (e.g. "seq:fp32:--concurrent-wgrad=false top32:fp32:--gemm-candidates=32"); each tunes its GEMMs
# afresh into a cache folder of its own.
for spec in ${ONE_GPU_RUNS:-}; do
  IFS=: read -r name prec flags <<< "$spec"
  build-gpu/bin/train --gpus 1 --data gpu --precision "$prec" --warmup 10 --steps 30 --print-every 0 \
    --gemm-cache-dir "$OUT/gemm-cache-$name" ${flags//,/ } > "$OUT/one_gpu_$name.log" 2>&1
  echo "one-GPU run $name ($prec ${flags//,/ }) exit $?"; grep -E "^summary" "$OUT/one_gpu_$name.log"
done
if [ -n "${NCCL_PROBE:-}" ]; then  # e.g. NCCL_PROBE="25"
  OUT="$OUT" bash scripts/nccl_env_probe.sh build-gpu $NCCL_PROBE
fi
# OP_PROBE=1: P2P off, the all-reduce's busbw as a sum and as DDP's average (NCCL's avg), f32 and bf16, at 25 MiB
# and at one step's gradients: the link rate the P2P-off rows are held against, and whether the average costs.
if [ "${OP_PROBE:-0}" = 1 ]; then
  for dtype in f32 bf16; do
    step_bytes=$([ "$dtype" = f32 ] && echo 1226141600 || echo 613070800)
    for op in sum avg; do
      NCCL_P2P_DISABLE=1 timeout 90 build-gpu/bin/train bench allreduce --gpus 2 --dtype "$dtype" --op "$op" \
        --sizes "25M,$step_bytes" --timeout 30 > "$OUT/op_${op}_$dtype.md" 2>&1
      echo "all-reduce, P2P off, $dtype, $op: exit $?"; grep -E "^\| [0-9]|error" "$OUT/op_${op}_$dtype.md" | head -3
    done
  done
fi
# HOST_COPY_PROBE=1: P2P off, the all-reduce through shared host memory and the copy engines (--host-copy,
# Note [Host-copy all-reduce]) beside NCCL's shared-memory transport, sum and DDP's average, f32 and bf16, at
# 25 MiB, 100 MiB and one step's gradients: the link rate its P2P-off rows are held against.
if [ "${HOST_COPY_PROBE:-0}" = 1 ]; then
  for dtype in f32 bf16; do
    step_bytes=$([ "$dtype" = f32 ] && echo 1226141600 || echo 613070800)
    for variant in "nccl:" "host_copy:--host-copy"; do
      tag=${variant%%:*}; flag=${variant#*:}
      for op in sum avg; do
        NCCL_P2P_DISABLE=1 timeout 120 build-gpu/bin/train bench allreduce --gpus 2 --dtype "$dtype" --op "$op" $flag \
          --sizes "25M,100M,$step_bytes" --timeout 30 > "$OUT/${tag}_${op}_$dtype.md" 2>&1
        echo "all-reduce, P2P off, $tag, $dtype, $op: exit $?"; grep -E "^\| [0-9]|rror" "$OUT/${tag}_${op}_$dtype.md" | head -4
      done
    done
  done
fi
# HOST_COPY_PIECES="1 13": P2P off, 100 MiB and one step's 613 MB of bf16 summed by the host copy as that many
# back-to-back all-reduces (13: DDP's 50 MB buckets): plain, overlapping (Note [Back-to-back host copies]), and
# overlapping with the additions beside the copies (Note [Reductions beside the copies]).
for pieces in ${HOST_COPY_PIECES:-}; do
  for variant in "plain:" "overlap:--host-copy-overlap" "both:--host-copy-overlap,--host-copy-reduce-beside"; do
    tag=${variant%%:*}; flag=${variant#*:}
    NCCL_P2P_DISABLE=1 timeout 90 build-gpu/bin/train bench allreduce --gpus 2 --dtype bf16 --op sum --host-copy ${flag//,/ } \
      --pieces "$pieces" --sizes "104857600,613070800" --timeout 30 > "$OUT/host_copy_pieces${pieces}_$tag.md" 2>&1
    echo "host copy, P2P off, bf16 sum in $pieces pieces, $tag: exit $?"
    grep -E "^\| [0-9]|rror" "$OUT/host_copy_pieces${pieces}_$tag.md" | head -3
  done
done
# OP_PROBE_ENVS="TAG:VAR=V,VAR=V ...": the P2P-off bf16 sum probe once per variant of NCCL's settings (channels,
# buffer sizes), to see whether the link the P2P-off rows are held against can carry more. Commas separate the
# variables, so a value cannot hold one.
for spec in ${OP_PROBE_ENVS:-}; do
  [[ $spec == *:*=* ]] || { echo "OP_PROBE_ENVS: '$spec' is not TAG:VAR=V[,VAR=V]"; continue; }
  tag=${spec%%:*}; vars=${spec#*:}
  env NCCL_P2P_DISABLE=1 ${vars//,/ } timeout 90 build-gpu/bin/train bench allreduce --gpus 2 --dtype bf16 --op sum \
    --sizes "25M,104857600,613070800" --timeout 30 > "$OUT/op_sum_bf16_$tag.md" 2>&1
  echo "all-reduce, P2P off, bf16, sum, $tag ($vars): exit $?"; grep -E "^\| [0-9]|error" "$OUT/op_sum_bf16_$tag.md" | head -4
done
if [ "${AFFINITY_PROBE:-0}" = 1 ]; then  # the NVLink bf16 row, threads free or bound
  OUT="$OUT" bash scripts/affinity_probe.sh build-gpu "${AFFINITY_ROUNDS:-3}"
fi
if [ -n "${NVLINK_VARIANCE_ROUNDS:-}" ]; then  # the NVLink bf16 row N times with NCCL's choices logged
  OUT="$OUT" bash scripts/nvlink_variance_probe.sh build-gpu "$NVLINK_VARIANCE_ROUNDS"
fi
if [ "${CE_PROBE:-0}" = 1 ]; then  # NCCL's copy-engine shared-memory transport with P2P off
  OUT="$OUT" bash scripts/shm_ce_probe.sh build-gpu
fi
# CE_HANG_STACKS=1: every thread's stack of a training run stalled under it. CE_HANG_VARIANTS="TAG:ENV=V,ENV=V ..."
# runs it once per variant with those variables (e.g. "ce: ce_ctx:NCCL_CREATE_THREAD_CONTEXT=1").
if [ "${CE_HANG_STACKS:-0}" = 1 ]; then
  read -ra variants <<< "${CE_HANG_VARIANTS:-ce:}"
  for spec in "${variants[@]}"; do
    IFS=: read -r tag vars <<< "$spec"
    (IFS=,; for kv in $vars; do export "$kv"; done; OUT="$OUT" CE_HANG_TAG="$tag" bash scripts/ce_hang_stacks.sh build-gpu 20)
  done
fi
if [ "${COMM_REPORTS:-0}" = 1 ]; then  # train topology and train bench allreduce, NVLink and P2P off
  for p2p in 0 1; do
    NCCL_P2P_DISABLE=$p2p build-gpu/bin/train topology > "$OUT/topology_p2p$p2p.txt" 2>&1; echo "topology p2p_disable=$p2p exit $?"
    cat "$OUT/topology_p2p$p2p.txt"
    for dtype in f32 bf16; do
      NCCL_P2P_DISABLE=$p2p build-gpu/bin/train bench allreduce --gpus 2 --dtype $dtype \
        --out "$OUT/allreduce_p2p${p2p}_$dtype.jsonl" > "$OUT/allreduce_p2p${p2p}_$dtype.md" 2>&1
      echo "allreduce p2p_disable=$p2p $dtype exit $?"; cat "$OUT/allreduce_p2p${p2p}_$dtype.md"
    done
  done
fi
# SWEEP="configs/sweeps/seed_article_2gpu.json configs/sweeps/bf16_2gpu.json"; REFERENCE_SWEEPS: the same, with
# the PyTorch reference's rows beside ours (each row also runs .deps/anchors/torch_ddp_vit.py).
for sweep in ${REFERENCE_SWEEPS:-} ${SWEEP:-}; do
  name=$(basename "$sweep" .json)
  ref=(); [[ " ${REFERENCE_SWEEPS:-} " == *" $sweep "* ]] && ref=(--reference .deps/anchors/torch_ddp_vit.py)
  # SWEEP_TRACE=0: rows untraced (as users run them; no exposed-comm column).
  [ "${SWEEP_TRACE:-1}" = 0 ] && ref+=(--trace=false)
  # SWEEP_RUN_TIMEOUT=S: each row (and its PyTorch run) stopped after S seconds.
  [ -n "${SWEEP_RUN_TIMEOUT:-}" ] && ref+=(--run-timeout "$SWEEP_RUN_TIMEOUT")
  # SWEEP_REPEAT=N: every row launched N times, round by round; each row its median launch (Note [Repeated launches]).
  [ -n "${SWEEP_REPEAT:-}" ] && ref+=(--repeat "$SWEEP_REPEAT")
  VITDDP_COMMIT=${COMMIT:-unknown} build-gpu/bin/train bench --sweep "$sweep" --out-dir "$OUT/$name" "${ref[@]}" \
    > "$OUT/$name.log" 2>&1; echo "sweep $name exit $?"; grep -E "^\||failed" "$OUT/$name.log"
done
# TRACE_SWEEP=configs/sweeps/X.json: that sweep once, every row traced, the traces gzipped for
# scripts/trace_link_use.py (the results' tarball leaves plain .trace.json files out).
if [ -n "${TRACE_SWEEP:-}" ]; then
  name=$(basename "$TRACE_SWEEP" .json)
  VITDDP_COMMIT=${COMMIT:-unknown} build-gpu/bin/train bench --sweep "$TRACE_SWEEP" --out-dir "$OUT/$name" \
    ${SWEEP_RUN_TIMEOUT:+--run-timeout "$SWEEP_RUN_TIMEOUT"} > "$OUT/$name.log" 2>&1
  echo "traced sweep $name exit $?"; grep -E "^\||failed" "$OUT/$name.log"
  gzip -f "$OUT/$name"/*.trace.json 2>/dev/null
  for t in "$OUT/$name"/*.trace.json.gz; do
    case "$t" in *1-gpu*) continue ;; esac
    echo "== $(basename "$t")"; python3 scripts/trace_link_use.py "$t" 2>&1 | head -40
  done
fi
# PSGD_ERROR_LOSS=1: the loss curves of PowerSGD's f32 and bf16 error feedback (2 GPUs, 100 steps).
if [ "${PSGD_ERROR_LOSS:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/powersgd_error_loss_check.sh build-gpu 100
fi
# PSGD_PRODUCTS_LOSS=1: the same for PowerSGD's products through cuBLASLt and as passes (bf16 error).
if [ "${PSGD_PRODUCTS_LOSS:-0}" = 1 ]; then
  OUT="$OUT" PSGD_LOSS_FLAG=powersgd-products PSGD_LOSS_A=gemm PSGD_LOSS_B=passes \
    PSGD_LOSS_EXTRA="--powersgd-error-dtype bucket" bash scripts/powersgd_error_loss_check.sh build-gpu 100
fi
# PSGD_SETTLE_LOSS=1: the same for the error settled by the expansion (eager) and a step late (bf16 error).
if [ "${PSGD_SETTLE_LOSS:-0}" = 1 ]; then
  OUT="$OUT" PSGD_LOSS_FLAG=powersgd-error-settle PSGD_LOSS_A=eager PSGD_LOSS_B=late \
    PSGD_LOSS_EXTRA="--powersgd-error-dtype bucket" bash scripts/powersgd_error_loss_check.sh build-gpu 100
fi
if [ "${LOSS_CURVE:-0}" = 1 ]; then
  OUT="$OUT" bash scripts/loss_curve_check.sh build-gpu 100
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  OUT="$OUT" bash scripts/bench_single_gpu.sh build-gpu .deps/anchors/torch_ddp_vit.py ${BENCH_PRECISIONS:-fp32 tf32}
fi
if [ -n "${DDP_BENCH:-}" ]; then  # e.g. DDP_BENCH="fp32 25 100"
  OUT="$OUT" bash scripts/bench_ddp.sh build-gpu .deps/anchors/torch_ddp_vit.py $DDP_BENCH
fi
