#!/usr/bin/env python3
"""Where the straggler bypass pays for this project's users: one DDP step's all-reduces of ViT-L/32
(the bucket sizes vitddp's reducer makes, read from `train --json`'s bucket_bytes) in ring_sim on
RANKS ranks over NVLink-, PCIe-, InfiniBand- and Ethernet-like links, without a straggler and
with one rank late by DT at its first reduce of every bucket, the plain ring against the bypass.
The step's communication time is the sum of its buckets' all-reduces (one after another on the
communication stream). Writes ddp.jsonl and ddp.md in OUT.

usage: ring_sim_ddp.py TRAIN RING_SIM OUT [--ranks 8,64,256] [--dt-ms 1]
"""
import argparse
import collections
import json
import os
import subprocess

# Per rank: link bandwidth (bytes/s, each direction) and one hop's latency (s).
LINKS = {
    "NVLink (H200, 450 GB/s)": (450e9, 2e-6),
    "PCIe Gen5 x16 (50 GB/s)": (50e9, 5e-6),
    "InfiniBand NDR (50 GB/s)": (50e9, 3e-6),
    "Ethernet 100 GbE (12.5 GB/s)": (12.5e9, 15e-6),
}
REDUCE_RATE = 1.5e12  # bytes/s a GPU adds two f32 chunks at (HBM-bound)


def bucket_sizes(train):
    out = subprocess.run([train, "--procs", "1", "--set", "ddp=true", "--model", "vit_l_32", "--batch-size", "1",
                          "--steps", "1", "--print-every", "0", "--json"], check=True, capture_output=True, text=True)
    j = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    return j["bucket_bytes"]


def allreduce_us(sim, ranks, size, bandwidth, latency, dt, bypass):
    chunk = max(size / ranks, 4.0)
    cmd = [sim, "--ranks", str(ranks), "--chunk-bytes", f"{chunk:.0f}", "--bandwidth", f"{bandwidth:.6g}",
           "--latency-seconds", f"{latency:.6g}", "--step-seconds", f"{chunk / REDUCE_RATE:.6g}", "--alpha", "1.5"]
    if dt > 0:
        cmd += ["--slow", "1", "--slow-extra-seconds", f"{dt:.6g}", "--late-reduce", "0"]
    if not bypass:
        cmd.append("--plain")
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    assert j["exact"], cmd
    return j["allreduce_seconds"] * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("sim")
    ap.add_argument("out")
    ap.add_argument("--ranks", default="8,64,256")
    ap.add_argument("--dt-ms", type=float, default=1.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sizes = collections.Counter(bucket_sizes(a.train))
    dt = a.dt_ms * 1e-3
    rows = []
    for n in [int(x) for x in a.ranks.split(",")]:
        for link, (bw, lat) in LINKS.items():
            step = {}
            for label, d, bypass in (("no straggler", 0.0, False), ("plain", dt, False), ("bypass", dt, True)):
                step[label] = sum(count * allreduce_us(a.sim, n, size, bw, lat, d, bypass) for size, count in sizes.items())
            rows.append({"ranks": n, "link": link, "dt_ms": a.dt_ms, "buckets": sum(sizes.values()),
                         "bytes": sum(s * c for s, c in sizes.items()), **{k + "_ms": v / 1e3 for k, v in step.items()}})
            r = rows[-1]
            print(f"{n} ranks, {link}: {r['no straggler_ms']:.2f} / {r['plain_ms']:.2f} / {r['bypass_ms']:.2f} ms", flush=True)
    with open(os.path.join(a.out, "ddp.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    md = [f"ViT-L/32's DDP step: {rows[0]['buckets']} buckets, {rows[0]['bytes'] / 1e6:.0f} MB of f32 gradients, "
          f"all-reduced one after another; a straggler late by {a.dt_ms:g} ms at its first reduce of every bucket.", "",
          "| ranks | link | no straggler (ms) | plain ring, straggler (ms) | bypass, straggler (ms) | bypass against plain |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['ranks']} | {r['link']} | {r['no straggler_ms']:.2f} | {r['plain_ms']:.2f} | {r['bypass_ms']:.2f} | "
                  f"{(r['bypass_ms'] / r['plain_ms'] - 1) * 100:+.1f}% |")
    with open(os.path.join(a.out, "ddp.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
