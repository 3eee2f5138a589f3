#!/bin/bash
# Temporary A/B (not committed): the fused compensation with 2 or 4 rows a warp (VITDDP_AB_COMPENSATE_ROWS).
export NCCL_NVLS_ENABLE=0
for rep in 1 2; do
  for v in 2 4; do
    if [ $v = 4 ]; then export VITDDP_AB_COMPENSATE_ROWS=1; else unset VITDDP_AB_COMPENSATE_ROWS; fi
    build-gpu/bin/train --gpus 1 --ddp --data gpu --precision bf16 --hook powersgd --bucket-mb 2000 --powersgd-rank 4 \
      --powersgd-error-dtype bucket --warmup 10 --steps 30 --print-every 0 --op-breakdown > "$OUT/ab_rows${v}_$rep.log" 2>&1
    echo "== rows $v rep $rep exit $?"; grep -E "powersgd (compensate|products|expand)|^summary" "$OUT/ab_rows${v}_$rep.log"
  done
done
VITDDP_AB_COMPENSATE_ROWS=1 build-gpu/tests/vitddp_gpu_tests --gtest_filter='LowRankGpu.Projection*:PowerSgdGpu.*' \
  > "$OUT/test_rows4.log" 2>&1; echo "== test rows 4 exit $?"; tail -3 "$OUT/test_rows4.log"
