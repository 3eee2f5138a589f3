#!/usr/bin/env python3
"""Where the straggler bypass pays for this project's users: one DDP step's all-reduces of ViT-L/32
(the bucket sizes vitddp's reducer makes, read from `train --json`'s bucket_bytes) in ring_sim on
RANKS ranks over NVLink-, PCIe-, InfiniBand- and Ethernet-like links, without a straggler and
with one rank late by DT at its first reduce of every bucket, the plain ring against the bypass.
The step's communication time is the sum of its buckets' all-reduces (one after another on the
communication stream). Writes ddp.jsonl (a row as each finishes, appended) and ddp.md in OUT.

A bypass run past --bypass-limit-s seconds of simulation is stopped and its cell says so: with a
delay much longer than the ring's own time the late rank's pieces are forwarded hop by hop
(O(n^2) messages), which SimGrid takes minutes to simulate at 256 ranks. --links keeps the links
whose names contain one of its words; --no-bypass-from N leaves the bypass column out from N ranks.
--jobs N runs N simulations at once (one process each: a 1,024-rank all-reduce takes minutes).
TRAIN is the train program, or a file holding its --json line (bucket_bytes is read from it).

usage: ring_sim_ddp.py TRAIN RING_SIM OUT [--ranks 8,64,256] [--dt-ms 1] [--links InfiniBand,Ethernet]
                       [--bypass-limit-s 120] [--no-bypass-from 1024] [--jobs 1]
"""
import argparse
import collections
import concurrent.futures
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
    if train.endswith(".json"):
        return json.load(open(train))["bucket_bytes"]
    out = subprocess.run([train, "--procs", "1", "--set", "ddp=true", "--model", "vit_l_32", "--batch-size", "1",
                          "--steps", "1", "--print-every", "0", "--json"], check=True, capture_output=True, text=True)
    j = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    return j["bucket_bytes"]


def allreduce_us(sim, ranks, size, bandwidth, latency, dt, bypass, limit_s=None):
    """The all-reduce's simulated microseconds, or None when it took longer than limit_s to simulate."""
    chunk = max(size / ranks, 4.0)
    cmd = [sim, "--ranks", str(ranks), "--chunk-bytes", f"{chunk:.0f}", "--bandwidth", f"{bandwidth:.6g}",
           "--latency-seconds", f"{latency:.6g}", "--step-seconds", f"{chunk / REDUCE_RATE:.6g}", "--alpha", "1.5"]
    if dt > 0:
        cmd += ["--slow", "1", "--slow-extra-seconds", f"{dt:.6g}", "--late-reduce", "0"]
    if not bypass:
        cmd.append("--plain")
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=limit_s).stdout
    except subprocess.TimeoutExpired:
        return None
    j = json.loads(out.strip().splitlines()[-1])
    assert j["exact"], cmd
    return j["allreduce_seconds"] * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("sim")
    ap.add_argument("out")
    ap.add_argument("--ranks", default="8,64,256")
    ap.add_argument("--dt-ms", type=float, default=1.0)
    ap.add_argument("--links", default="", help="comma-separated words: keep the links whose names contain one")
    ap.add_argument("--bypass-limit-s", type=float, default=120.0)
    ap.add_argument("--no-bypass-from", type=int, default=1 << 30)
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sizes = collections.Counter(bucket_sizes(a.train))
    dt = a.dt_ms * 1e-3
    words = [w for w in a.links.split(",") if w]
    links = {k: v for k, v in LINKS.items() if not words or any(w in k for w in words)}
    jsonl = os.path.join(a.out, "ddp.jsonl")
    configs = (("no straggler", 0.0, False), ("plain", dt, False), ("bypass", dt, True))
    cells = [(n, link, label, d, bypass) for n in [int(x) for x in a.ranks.split(",")] for link in links
             for label, d, bypass in configs if not (bypass and n >= a.no_bypass_from)]
    # Every (cell, bucket size) is one simulation; a row is written once all of its cells are in.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = {(n, link, label, size): pool.submit(allreduce_us, a.sim, n, size, *links[link], d, bypass,
                                                       a.bypass_limit_s if bypass else None)
                   for n, link, label, d, bypass in cells for size in sizes}
        for n in [int(x) for x in a.ranks.split(",")]:
            for link in links:
                step = {}
                for label, _, bypass in configs:
                    if bypass and n >= a.no_bypass_from:
                        step[label] = None
                        continue
                    parts = [futures[(n, link, label, size)].result() for size in sizes]
                    step[label] = None if None in parts else sum(c * p for c, p in zip(sizes.values(), parts))
                ms = {k + "_ms": (None if v is None else v / 1e3) for k, v in step.items()}
                row = {"ranks": n, "link": link, "dt_ms": a.dt_ms, "buckets": sum(sizes.values()),
                       "bytes": sum(s * c for s, c in sizes.items()), **ms}
                with open(jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    rows = [json.loads(l) for l in open(jsonl)]
    md = [f"ViT-L/32's DDP step: {rows[0]['buckets']} buckets, {rows[0]['bytes'] / 1e6:.0f} MB of f32 gradients, "
          f"all-reduced one after another; a straggler late by {a.dt_ms:g} ms at its first reduce of every bucket.", "",
          "| ranks | link | no straggler (ms) | plain ring, straggler (ms) | bypass, straggler (ms) | bypass against plain |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        byp = r["bypass_ms"]
        cell = (f"{byp:.2f}" if byp is not None else
                "not simulated" if r["ranks"] >= a.no_bypass_from else f"over {a.bypass_limit_s:g} s to simulate")
        gain = f"{(byp / r['plain_ms'] - 1) * 100:+.1f}%" if byp is not None else "-"
        md.append(f"| {r['ranks']} | {r['link']} | {r['no straggler_ms']:.2f} | {r['plain_ms']:.2f} | {cell} | {gain} |")
    with open(os.path.join(a.out, "ddp.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
