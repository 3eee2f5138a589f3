#!/usr/bin/env python3
"""The seed paper's sweeps of the straggler bypass, run with ring_sim (sim/ring_sim.cpp, SimGrid),
and what they show: a table (markdown), a chart (SVG) and the raw JSON lines in OUT.

  paper: the paper's figures (T = 3 us per reduce, 5 us per hop plus an 8 KB packet over
         100 Gbit/s, one slow rank of a ring of RANKS): the reduce-scatter time of the plain ring
         and of the bypass over dT, for several alpha, a slow rank late at one reduce
         ("transient") and at every reduce ("persistent"); the four findings checked.
  scale: the gain over the ring size, 4 to MAX_RANKS, at the dT where RANKS gained most.

usage: ring_sim_sweep.py RING_SIM OUT [--ranks 8] [--max-ranks 1024] [--only paper|scale]
"""
import argparse
import json
import os
import subprocess
import sys

T = 3e-6
DTS_US = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200]
ALPHAS = [1.2, 1.5, 2.0, 3.0]
TRANSFER = 5e-6 + 8192 / (100e9 / 8)  # one hop: latency plus the packet's transmission


def run(sim, ranks, dt_us, alpha, plain, late_reduce, slow=(1,)):
    cmd = [sim, "--ranks", str(ranks), "--slow", ",".join(map(str, slow)), "--slow-extra-seconds", f"{dt_us * 1e-6:.9g}",
           "--alpha", str(alpha), "--late-reduce", str(late_reduce)]
    if plain:
        cmd.append("--plain")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    if not j["exact"]:
        sys.exit(f"ring_sim: inexact sums for {' '.join(cmd)}")
    return j


def linear_fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    icpt = my - slope * mx
    ss_res = sum((y - (icpt + slope * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return slope, icpt, 1 - ss_res / ss_tot


def paper(sim, ranks, out):
    rows = []
    for mode, late in (("transient", 0), ("persistent", -1)):
        for dt in DTS_US:
            plain = run(sim, ranks, dt, ALPHAS[0], True, late)
            for alpha in ALPHAS:
                b = run(sim, ranks, dt, alpha, False, late)
                rows.append({"mode": mode, "dt_us": dt, "alpha": alpha, "plain_us": plain["reduce_scatter_seconds"] * 1e6,
                             "bypass_us": b["reduce_scatter_seconds"] * 1e6, "skips": b["skips"],
                             "redirects": b["redirects"], "forwarded": b["forwarded"]})
    for r in rows:
        r["gain"] = 1 - r["bypass_us"] / r["plain_us"]
    with open(os.path.join(out, "paper.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def findings(rows, ranks):
    lines = []
    for mode in ("transient", "persistent"):
        rs = [r for r in rows if r["mode"] == mode]
        by_dt = {}
        for r in rs:
            by_dt.setdefault(r["dt_us"], r["plain_us"])
        xs = sorted(by_dt)
        slope, icpt, r2 = linear_fit(xs, [by_dt[x] for x in xs])
        lines.append(f"- {mode}: T_Ring = {icpt:.1f} us + {slope:.3f} x dT (R^2 {r2:.4f})")
        for alpha in ALPHAS:
            g = [(r["dt_us"], r["gain"]) for r in rs if r["alpha"] == alpha]
            best = max(g, key=lambda p: p[1])
            last = g[-1]
            threshold_us = ((alpha - 1) * T + TRANSFER) * 1e6
            lines.append(f"  - alpha {alpha}: threshold dT > {threshold_us:.2f} us; best gain {best[1] * 100:.1f}% at dT "
                         f"{best[0]} us; {last[1] * 100:.1f}% at {last[0]} us")
        # Past every alpha's threshold, how far apart the alphas' gains are.
        past = (max(ALPHAS) - 1) * T * 1e6 + TRANSFER * 1e6
        spread = 0.0
        for dt in xs:
            if dt <= past:
                continue
            gs = [r["gain"] for r in rs if r["dt_us"] == dt]
            spread = max(spread, max(gs) - min(gs))
        lines.append(f"  - past the largest threshold ({past:.1f} us), the alphas' gains differ by at most "
                     f"{spread * 100:.2f} points")
    return lines


def table(rows):
    out = ["| straggler | dT (us) | T_Ring (us) | " + " | ".join(f"bypass, alpha {a} (us, gain)" for a in ALPHAS) + " |",
           "|---|---|---|" + "---|" * len(ALPHAS)]
    for mode in ("transient", "persistent"):
        for dt in DTS_US:
            rs = {r["alpha"]: r for r in rows if r["mode"] == mode and r["dt_us"] == dt}
            cells = " | ".join(f"{rs[a]['bypass_us']:.1f} ({rs[a]['gain'] * 100:+.1f}%)" for a in ALPHAS)
            out.append(f"| {mode} | {dt} | {rs[ALPHAS[0]]['plain_us']:.1f} | {cells} |")
    return out


def chart(rows, path):
    """Two panels: the gain against dT per alpha (transient straggler), and T_Ring and the
    bypass's time against dT (alpha 1.5), both straggler kinds."""
    w, h, pad = 460, 300, 50
    colours = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1"]
    xmax = max(DTS_US)

    def xy(dt, v, vmax, x0):
        return x0 + pad + dt / xmax * (w - 2 * pad), h - pad - v / vmax * (h - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h}" font-family="sans-serif" font-size="12">',
             '<rect width="100%" height="100%" fill="white"/>']
    trans = [r for r in rows if r["mode"] == "transient"]
    gmax = max(0.3, max(r["gain"] for r in trans) * 1.1)
    parts.append(f'<text x="{pad}" y="20">gain of the bypass (1 - T_bypass / T_Ring), one rank late once by dT</text>')
    for k, alpha in enumerate(ALPHAS):
        pts = " ".join("%.1f,%.1f" % xy(r["dt_us"], max(r["gain"], 0), gmax, 0) for r in trans if r["alpha"] == alpha)
        parts.append(f'<polyline class="gain" fill="none" stroke="{colours[k]}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{w - pad - 60}" y="{40 + 15 * k}" fill="{colours[k]}">alpha {alpha}</text>')
    y253 = xy(0, 0.253, gmax, 0)[1]
    parts.append(f'<line x1="{pad}" x2="{w - pad}" y1="{y253:.1f}" y2="{y253:.1f}" stroke="#999" stroke-dasharray="4"/>')
    parts.append(f'<text x="{pad + 4}" y="{y253 - 4:.1f}" fill="#666">the paper\'s best, 25.3%</text>')
    for frac in (0, 0.1, 0.2, 0.3):
        if frac <= gmax:
            y = xy(0, frac, gmax, 0)[1]
            parts.append(f'<text x="{pad - 35}" y="{y + 4:.1f}">{int(frac * 100)}%</text>')
    tmax = max(r["plain_us"] for r in rows) * 1.05
    parts.append(f'<text x="{w + pad}" y="20">reduce-scatter time (us) against dT (us), alpha 1.5</text>')
    for k, (mode, key, label) in enumerate([("transient", "plain_us", "plain, late once"),
                                            ("transient", "bypass_us", "bypass, late once"),
                                            ("persistent", "plain_us", "plain, late every reduce"),
                                            ("persistent", "bypass_us", "bypass, late every reduce")]):
        pts = " ".join("%.1f,%.1f" % xy(r["dt_us"], r[key], tmax, w) for r in rows if r["mode"] == mode and r["alpha"] == 1.5)
        dash = ' stroke-dasharray="5,3"' if key == "bypass_us" else ""
        parts.append(f'<polyline class="time" fill="none" stroke="{colours[k // 2 * 2]}" stroke-width="2"{dash} points="{pts}"/>')
        parts.append(f'<text x="{w + pad + 10}" y="{40 + 15 * k}" fill="{colours[k // 2 * 2]}">{label}</text>')
    for x0 in (0, w):
        parts.append(f'<line x1="{x0 + pad}" x2="{x0 + w - pad}" y1="{h - pad}" y2="{h - pad}" stroke="black"/>')
        parts.append(f'<line x1="{x0 + pad}" x2="{x0 + pad}" y1="{pad}" y2="{h - pad}" stroke="black"/>')
        for dt in (0, 50, 100, 150, 200):
            x = xy(dt, 0, 1, x0)[0]
            parts.append(f'<text x="{x - 8:.1f}" y="{h - pad + 15}">{dt}</text>')
        parts.append(f'<text x="{x0 + w / 2 - 20}" y="{h - 12}">dT (us)</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def scale(sim, rows, ranks, max_ranks, out):
    trans = [r for r in rows if r["mode"] == "transient" and r["alpha"] == 1.5]
    best_dt = max(trans, key=lambda r: r["gain"])["dt_us"]
    res = []
    n = 4
    while n <= max_ranks:
        p = run(sim, n, best_dt, 1.5, True, 0)
        b = run(sim, n, best_dt, 1.5, False, 0)
        res.append({"ranks": n, "dt_us": best_dt, "plain_us": p["reduce_scatter_seconds"] * 1e6,
                    "bypass_us": b["reduce_scatter_seconds"] * 1e6,
                    "gain": 1 - b["reduce_scatter_seconds"] / p["reduce_scatter_seconds"]})
        print(f"scale: {n} ranks: gain {res[-1]['gain'] * 100:.1f}%", flush=True)
        n *= 2
    with open(os.path.join(out, "scale.jsonl"), "w") as f:
        for r in res:
            f.write(json.dumps(r) + "\n")
    lines = [f"| ranks | T_Ring (us) | bypass (us) | gain |", "|---|---|---|---|"]
    for r in res:
        lines.append(f"| {r['ranks']} | {r['plain_us']:.1f} | {r['bypass_us']:.1f} | {r['gain'] * 100:.1f}% |")
    return best_dt, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sim")
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--max-ranks", type=int, default=1024)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = paper(a.sim, a.ranks, a.out)
    md = [f"# The straggler bypass at the paper's parameters ({a.ranks} ranks, slow rank 1)", "",
          f"T = 3 us per reduce, {TRANSFER * 1e6:.3f} us per hop (5 us latency and an 8 KB packet over 100 Gbit/s), "
          "SimGrid CM02 (no corrective factors); the reduce-scatter's time (the last rank done). 'transient': the "
          "slow rank's first reduce takes dT more; 'persistent': every one does.", "", "## Findings", ""]
    md += findings(rows, a.ranks)
    md += ["", "## Table", ""] + table(rows)
    chart(rows, os.path.join(a.out, "paper.svg"))
    best_dt, lines = scale(a.sim, rows, a.ranks, a.max_ranks, a.out)
    md += ["", f"## Over the ring size (transient, dT {best_dt} us, alpha 1.5)", ""] + lines
    with open(os.path.join(a.out, "paper.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
