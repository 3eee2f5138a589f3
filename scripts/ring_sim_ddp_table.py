#!/usr/bin/env python3
"""The docs' table of one ViT-L/32 DDP step in ring_sim: rows of ring_sim_ddp.py's ddp.jsonl with
a straggler late by 1 ms (LATE_1MS), joined by ranks and link with those late by 50 us
(LATE_50US), then any further 1 ms rows (MORE, e.g. 1,024 ranks). Prints markdown.

usage: ring_sim_ddp_table.py LATE_1MS LATE_50US [MORE]
"""
import json
import sys
late = [json.loads(l) for l in open(sys.argv[1])]
jit = {(r["ranks"], r["link"]): r for r in map(json.loads, open(sys.argv[2]))}
big = [json.loads(l) for l in open(sys.argv[3])] if len(sys.argv) > 3 else []
short = lambda l: l.split(" (")[0].replace("PCIe Gen5 x16", "PCIe Gen5").replace("Ethernet 100 GbE", "100 GbE")
def cell(v, plain, limit):
    if v is None: return limit, "-"
    return f"{v:,.2f}", f"{(v / plain - 1) * 100:+.1f}%"
print("| ranks | link | no straggler (ms) | 1 ms late: plain ring | bypass | bypass against plain | 50 us late: plain ring | bypass | bypass against plain |")
print("|---|---|---|---|---|---|---|---|---|")
for r in late + big:
    j = jit.get((r["ranks"], r["link"]))
    b, g = cell(r["bypass_ms"], r["plain_ms"], "not simulated" if r["ranks"] >= 1024 else "over 90 s to simulate")
    if j:
        jb, jg = cell(j["bypass_ms"], j["plain_ms"], "over 60 s to simulate")
        jp = f"{j['plain_ms']:,.2f}"
    else:
        jp, jb, jg = "not simulated", "", ""
    print(f"| {r['ranks']:,} | {short(r['link'])} | {r['no straggler_ms']:,.2f} | {r['plain_ms']:,.2f} | {b} | {g} | {jp} | {jb} | {jg} |")
