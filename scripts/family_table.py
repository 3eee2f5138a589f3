#!/usr/bin/env python3
"""The family benchmark's table (scripts/bench_family.sh): one row per (model, batch, precision,
system), vitddp's steps/s against each PyTorch form of the same row, MFU from vitddp's FLOP count
per image (its --json's train_gflop_per_image, the same model for every system) and the GPU's
dense peak, and peak memory (eager's is comparable; the graphed forms report their pools)."""
import json
import sys


def system(r):
    return "vitddp" if r.get("system") == "vitddp" else "pytorch " + (r.get("tag") or "eager")


def key(r):
    if r.get("system") == "vitddp":
        c = r["config"]
        return (c["model"], c["batch-size"], c["precision"])
    return (r["model"], r["batch_per_gpu"], r["precision"])


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    ours = {key(r): r for r in rows if r.get("system") == "vitddp"}
    print("| model | batch | precision | system | steps/s | vitddp against it | MFU | peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        k = key(r)
        mine = ours.get(k)
        sps = r["steps_per_s"]
        ratio = f"{mine['steps_per_s'] / sps:.2f}x" if mine and mine is not r else "-"
        mfu = "-"
        if mine and mine.get("gpu_peak_tflops"):
            flop = mine["train_gflop_per_image"] * 1e9 * k[1]
            mfu = f"{sps * flop / (mine['gpu_peak_tflops'] * 1e12) * 100:.1f}%"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {system(r)} | {sps:.2f} | {ratio} | {mfu} | {r.get('peak_mem_mib', 0):.0f} |")


if __name__ == "__main__":
    main()
