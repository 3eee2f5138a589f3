#!/usr/bin/env python3
"""Prints a markdown table from JSON result lines of `train --json` and torch_ddp_vit.py."""
import json
import sys

FLOP_PER_IMAGE = 3 * 30.8e9  # ViT-L/32 at 224: forward 30.8 GFLOP, training ~3x (NUMBERS.md)


def row(r):
    if r.get("system") == "vitddp":
        cfg = r["config"]
        system, precision, data = "vitddp", cfg["precision"], cfg["data"]
        batch = cfg["batch-size"]
    else:
        system, precision = "pytorch " + (r.get("tag") or "eager"), r["precision"]
        data = "gpu" if r.get("gpu_data") else "loader"
        batch = r["batch_per_gpu"]
    sps = r["steps_per_s"]
    mfu = sps * batch * FLOP_PER_IMAGE / 989e12 * 100  # H100/H200 dense bf16 peak as the yardstick
    return (f"| {system} | {precision} | {data} | {sps:.2f} | {sps * batch:.0f} | "
            f"{r.get('peak_mem_mib', 0):.0f} | {sps * batch * FLOP_PER_IMAGE / 1e12:.1f} | {mfu:.1f}% |")


def main():
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    print("| system | precision | data | steps/s | img/s | peak MiB | achieved TFLOP/s | MFU (of 989 TFLOP/s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in lines:
        print(row(r))


if __name__ == "__main__":
    main()
