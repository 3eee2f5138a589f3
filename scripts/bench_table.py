#!/usr/bin/env python3
"""Prints a markdown table from JSON result lines of `train --json` and torch_ddp_vit.py."""
import json
import sys

FLOP_PER_IMAGE = 3 * 30.8e9  # ViT-L/32 at 224: forward 30.8 GFLOP, training ~3x (models/vit/vit_config.h)


def fields(r):
    """(system, precision, data, batch, gpus, bucket, hook, p2p_disabled) of one result line."""
    if r.get("system") == "vitddp":
        cfg = r["config"]
        data = cfg["data"] if cfg["data"] == "gpu" else "loader"
        return ("vitddp", cfg["precision"], data, cfg["batch-size"], r.get("world_size", 1),
                cfg.get("bucket-mb", 25), cfg.get("hook", "allreduce"), r.get("nccl_p2p_disable", "0"))
    data = "gpu" if r.get("gpu_data") or "cuda graph" in (r.get("tag") or "") else "loader"
    hook = {"none": "allreduce"}.get(r.get("hook", "none"), r.get("hook"))
    return ("pytorch " + (r.get("tag") or "eager"), r["precision"], data, r["batch_per_gpu"], r.get("gpus", 1),
            r.get("bucket_mb", 25), hook, r.get("nccl_p2p_disable", "0"))


def main():
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    multi = any(fields(r)[4] > 1 for r in lines)
    baseline = {}
    for r in lines:
        f = fields(r)
        if f[4] == 1:
            baseline.setdefault((f[0], f[1]), r["steps_per_s"])
    if multi:
        print("| system | precision | GPUs | bucket MB | hook | P2P | steps/s per GPU | img/s total | scaling efficiency | peak MiB |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    else:
        print("| system | precision | data | steps/s | img/s | peak MiB | achieved TFLOP/s | MFU (of 989 TFLOP/s) |")
        print("|---|---|---|---|---|---|---|---|")
    for r in lines:
        system, precision, data, batch, gpus, bucket, hook, p2p = fields(r)
        sps = r["steps_per_s"]
        if multi:
            base = baseline.get((system, precision))
            eff = f"{sps / base:.3f}" if base and gpus > 1 else "-"
            link = "-" if gpus == 1 else ("off (SHM)" if str(p2p) == "1" else "NVLink")
            print(f"| {system} | {precision} | {gpus} | {bucket if gpus > 1 else '-'} | {hook if gpus > 1 else '-'} | "
                  f"{link} | {sps:.2f} | {sps * batch * gpus:.0f} | {eff} | {r.get('peak_mem_mib', 0):.0f} |")
        else:
            mfu = sps * batch * FLOP_PER_IMAGE / 989e12 * 100  # dense bf16 datasheet peak as the yardstick
            print(f"| {system} | {precision} | {data} | {sps:.2f} | {sps * batch:.0f} | "
                  f"{r.get('peak_mem_mib', 0):.0f} | {sps * batch * FLOP_PER_IMAGE / 1e12:.1f} | {mfu:.1f}% |")


if __name__ == "__main__":
    main()
