#!/usr/bin/env bash
# train bench transfer of ViT-L/32's training state (AdamW and PowerSGD, after one step) on the
# providers issue [6/7] asks for: shm within a host, tcp on loopback, and tcp between two network
# namespaces as two hosts (scripts/two_netns_hosts.sh; needs root, else that row is left out).
# Writes transfer_<case>.log under OUT and transfer.md, the table docs/performance.md cites.
#
#   bash scripts/transfer_table.sh build/bin/train OUT [extra train flags, e.g. --gpus 2 --data gpu]
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 TRAIN OUT [FLAGS...]" >&2; exit 2; }
train=$1
out=$2
shift 2
mkdir -p "$out"
here=$(dirname "$0")
state=(--model vit_l_32 --optimizer adamw --hook powersgd --batch-size 1 --repeats ${REPEATS:-21} --json "$@")
cases="shm tcp"
timeout 900 "$train" bench transfer "${state[@]}" --procs 2 --provider shm > "$out/transfer_shm.log" 2>&1
timeout 900 "$train" bench transfer "${state[@]}" --procs 2 --provider tcp > "$out/transfer_tcp.log" 2>&1
if [ "$(id -u)" = 0 ]; then
  timeout 900 bash "$here/two_netns_hosts.sh" "$train" bench transfer "${state[@]}" --procs 1 --provider tcp \
    > "$out/transfer_two_hosts.log" 2>&1
  cases="$cases two_hosts"
fi
python3 - "$out" $cases <<'PY'
import json, statistics, sys
out, cases = sys.argv[1], sys.argv[2:]
names = {"shm": "shm, one host", "tcp": "tcp, loopback", "two_hosts": "tcp, two network namespaces (veth)"}
rows = ["| provider | tensors | GB | list of writes (GB/s) | contiguous fi_write loop (GB/s) | list against loop | "
        "median of per-repeat ratios | every byte checked |",
        "|---|---|---|---|---|---|---|---|"]
for c in cases:
    lines = [l for l in open(f"{out}/transfer_{c}.log") if l.startswith("{")]
    if not lines:
        rows.append(f"| {names[c]} | failed: see transfer_{c}.log | | | | | | |")
        continue
    j = json.loads(lines[-1])
    rows.append(f"| {names[c]} ({j['provider']}) | {j['tensors']} | {j['bytes'] / 1e9:.2f} | {j['list_gbps']:.2f} | "
                f"{j['loop_gbps']:.2f} | {j['list_vs_loop'] * 100:.1f}% | {j['list_vs_loop_paired'] * 100:.1f}% | "
                f"{'yes' if j['verified'] else 'NO'} |")
open(f"{out}/transfer.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
