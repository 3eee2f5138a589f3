#!/usr/bin/env python3
"""Where the link idles in a `train --trace` file (Chrome trace JSON, optionally .gz).

For each rank: every bucket's median all-reduce time and rate over the steps from --first-step
on, the communication stream's busy time per step against the step's length, and the median
gaps on rank 0's stream, each named by the bucket that ended before it and the one after it
(a gap ends when the next bucket is ready: nothing to send; or when the other rank joins).

With the host copy's all-reduces back to back (Note [Back-to-back host copies]) a bucket's
copies start before its mark on the communication stream, which still waits for the previous
bucket's end: its time here is from that end (or its ready mark, if later), so its rate is
overstated; a gap still means nothing was queued.

    python3 scripts/trace_link_use.py docs/results/<call>/<sweep>/<row>.trace.json.gz
"""
import argparse
import gzip
import json
import statistics


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--first-step", type=int, default=10, help="steps before it are warm-up (default 10)")
    args = parser.parse_args()
    events = load(args.trace)
    ranks = sorted({e["pid"] for e in events if e.get("cat") == "comm"})
    for rank in ranks:
        comm = sorted((e for e in events if e.get("pid") == rank and e.get("cat") == "comm" and e["ph"] == "X"
                       and e["args"]["step"] >= args.first_step), key=lambda e: e["ts"])
        steps = [e for e in events if e.get("pid") == rank and e.get("cat") == "gpu" and e["ph"] == "X"
                 and e["name"].startswith("step") and e["args"]["step"] >= args.first_step]
        last = max(e["args"]["step"] for e in steps)
        steps = [e for e in steps if e["args"]["step"] < last]  # the last step's buckets run past the trace's end
        comm = [e for e in comm if e["args"]["step"] < last]
        by_bucket = {}
        for e in comm:
            by_bucket.setdefault(e["args"]["bucket"], []).append(e)
        print(f"rank {rank}: bucket: median ms, GB/s")
        for b, es in sorted(by_bucket.items()):
            print(f"  b{b:<3} {es[0]['args']['bytes'] / 1e6:9.3f} MB  {statistics.median(e['dur'] for e in es) / 1e3:6.3f} ms"
                  f"  {statistics.median(e['args']['bandwidth_GBps'] for e in es):5.1f} GB/s")
        # The union of the intervals: collectives a backend runs side by side (Gloo's) count once.
        busy_us, reach = 0.0, float("-inf")
        for e in comm:
            begin, end = max(e["ts"], reach), e["ts"] + e["dur"]
            if end > begin:
                busy_us += end - begin
            reach = max(reach, end)
        busy = busy_us / len(steps) / 1e3
        step = sum(e["dur"] for e in steps) / len(steps) / 1e3
        print(f"  communication stream busy {busy:.2f} ms of a {step:.2f} ms step ({100 * busy / step:.0f}%)")
        if rank != ranks[0]:
            continue
        gaps = {}
        reach, last_bucket = comm[0]["ts"] + comm[0]["dur"], comm[0]["args"]["bucket"]
        for after in comm[1:]:
            gap = after["ts"] - reach  # from the end of everything before it
            if gap > 50:  # us: issue jitter below that
                gaps.setdefault(f"b{last_bucket} -> b{after['args']['bucket']}", []).append(gap)
            if after["ts"] + after["dur"] >= reach:
                reach, last_bucket = after["ts"] + after["dur"], after["args"]["bucket"]
        print("  gaps over 50 us on this rank's stream, median ms (count):")
        for key, gs in sorted(gaps.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"    {key:12s} {statistics.median(gs) / 1e3:6.3f} ({len(gs)})")


if __name__ == "__main__":
    main()
