#!/usr/bin/env bash
# The bypass ring on this machine's CPU processes: 4 Gloo ranks all-reduce 1 MiB of f32, rank 1
# late at its first reduce of each all-reduce by 0, 10 and 30 ms (VITDDP_SLOW_RANK=1:D:0), the
# plain ring against the bypass (wait 5 ms), with Gloo's own all-reduce beside; then ring_sim's
# prediction at the same scaled figures (4 ranks, 256 KiB chunks, the hop's cost fitted to the
# measured no-delay time: loopback on a small machine costs milliseconds of CPU per hop).
# ROUNDS (default 5) repeats the whole measurement, the configurations interleaved within each
# round, so slow phases of the machine fall on every configuration alike; the table gives each
# figure's median over the rounds, and the range of the bypass's ratio to the plain ring.
# Usage: [ROUNDS=5] scripts/bypass_cpu_bench.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build dir} out=${2:?out dir}
mkdir -p "$out"
: > "$out/cpu_bench.jsonl"
for round in $(seq "${ROUNDS:-5}"); do
  for delay in 0 0.01 0.03; do
    for alg in gloo ring bypass-ring; do
      VITDDP_SLOW_RANK=1:$delay:0 "$build/bin/train" bench allreduce --procs 4 --sizes 1M --iters 60 --warmup-iters 5 \
        --cpu-allreduce $alg --bypass-wait-ms 5 --json | grep '^{' |
        python3 -c "import json,sys; j=json.loads(sys.stdin.readline()); print(json.dumps({'kind':'measured','round':$round,'delay_s':$delay,'algorithm':'$alg','time_us':j['time_us']}))" \
        >> "$out/cpu_bench.jsonl"
    done
  done
done
hop=$(python3 - "$out/cpu_bench.jsonl" <<'PY'
import json, sys
import statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
t = statistics.median(r["time_us"] for r in rows if r["delay_s"] == 0 and r["algorithm"] == "ring")
# 2 (n - 1) = 6 steps, each a hop, a 256 KiB transfer at 1 GB/s and a 30 us reduce.
print((t * 1e-6 / 6) - 262144 / 1e9 - 3e-5)
PY
)
for delay in 0 0.01 0.03; do
  for plain in --plain ""; do
    "$build/bin/ring_sim" --ranks 4 --chunk-bytes 262144 --bandwidth 1e9 --latency-seconds "$hop" --step-seconds 3e-5 \
      --slow 1 --late-reduce 0 --slow-extra-seconds $delay --wait-seconds 0.005 $plain |
      python3 -c "import json,sys; j=json.load(sys.stdin); print(json.dumps({'kind':'simulated','delay_s':$delay,'algorithm':'bypass-ring' if j['bypass'] else 'ring','time_us':j['allreduce_seconds']*1e6,'hop_s':$hop}))" \
      >> "$out/cpu_bench.jsonl"
  done
done
python3 - "$out/cpu_bench.jsonl" <<'PY' | tee "$out/cpu_bench.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
measured = lambda d, a: {r["round"]: r["time_us"] for r in rows if r["kind"] == "measured" and r["delay_s"] == d and r["algorithm"] == a}
simulated = lambda d, a: next(r["time_us"] for r in rows if r["kind"] == "simulated" and r["delay_s"] == d and r["algorithm"] == a)
rounds = len(measured(0, "ring"))
print(f"| rank 1 late by | Gloo's all-reduce (no delay applied) | plain ring | bypass ring | bypass against plain, median (range) of {rounds} rounds | ring_sim: plain | ring_sim: bypass | ring_sim: bypass against plain |")
print("|---|---|---|---|---|---|---|---|")
for d in (0, 0.01, 0.03):
    g, p, b = measured(d, "gloo"), measured(d, "ring"), measured(d, "bypass-ring")
    ratios = [(b[k] / p[k] - 1) * 100 for k in p]
    sp, sb = simulated(d, "ring"), simulated(d, "bypass-ring")
    print(f"| {d * 1e3:.0f} ms | {statistics.median(g.values()) / 1e3:.2f} ms | {statistics.median(p.values()) / 1e3:.2f} ms | "
          f"{statistics.median(b.values()) / 1e3:.2f} ms | {statistics.median(ratios):+.1f}% ({min(ratios):+.1f} to {max(ratios):+.1f}) | "
          f"{sp / 1e3:.2f} ms | {sb / 1e3:.2f} ms | {(sb / sp - 1) * 100:+.1f}% |")
PY
