#!/usr/bin/env bash
# A host lost whole, and what recovery costs from its buddy's replica against the disk: two network
# namespaces as two hosts of one rank each (veth pair, as scripts/two_netns_hosts.sh), --max-restarts 1.
# Each scenario: rank 1 hangs in step 2 once step 2 is saved, host 1's processes are all killed and
# its /dev/shm folder removed, and the same command started again in host 1's namespace takes the
# lost node's place (Note [A lost host] in distributed/launcher.cpp):
#   buddy  memory checkpoints every 2 steps: node 0 holds node 1's step 2; rank 1 restores it from
#          the replica node 0 hands back, rank 0 from its node's memory
#   disk   no memory checkpoint in time (memory-checkpoint-every=100000), --checkpoint-every 2 into a
#          folder both hosts reach: every rank restores step 2 from disk
# Both recoveries are timed alike, from the failure (as the launchers saw it) to the state restored
# (--json's recovery.recovery_seconds, rank 0's). Writes lost_host_<scenario>_host<h>.log under $OUT and
# lost_host_recovery.md. Needs root.
#
#   sudo OUT=out bash scripts/lost_host_recovery.sh build/bin/train
set -uo pipefail
train=$(realpath "$1")
out=${OUT:-.}
mkdir -p "$out"
model=${MODEL:-vit_b_32}
[ "$(id -u)" = 0 ] || { echo "$0: network namespaces need root" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/netns_hosts.sh"
two_hosts_or_exit l 10.214.250 vitddp-lost-host
set +e
base="--procs 1 --nnodes 2 --model $model --optimizer adamw --batch-size 2 --steps 4 --print-every 0 --json
  --set timeout=600 --max-restarts 1"
start_host() {  # SCENARIO HOST LOGNAME ENV ARGS...
  local scenario=$1 h=$2 log=$3 env=$4
  shift 4
  env $env VITDDP_GLOO_HOST=${addr[$h]} ip netns exec "${ns[$h]}" "$train" $base --set node-rank=$h \
    --rendezvous "$work/$scenario/rdzv" "$@" > "$out/lost_host_${scenario}_$log.log" 2>&1 &
}
scenario() {  # NAME READY_FILE ARGS...: runs it; READY_FILE: the file whose presence says step 2 is saved
  local name=$1 ready=$2
  shift 2
  mkdir -p "$work/$name"
  start_host "$name" 0 host0 "" "$@"
  local first=$!
  start_host "$name" 1 host1_lost "VITDDP_FAULT=1:2:hang" "$@"
  local lost=$!
  for _ in $(seq 1 3000); do [ -e "$ready" ] && break; sleep 0.2; done
  [ -e "$ready" ] || echo "$name: $ready never appeared"
  sleep 1  # the same step of rank 0, the disk's record of rank 1
  local pids
  pids=$(ip netns pids "${ns[1]}")
  kill -9 $pids 2> /dev/null
  for p in $pids; do rm -rf "/dev/shm/vitddp-memory-$p-node1"; done
  wait $lost
  start_host "$name" 1 host1 "" "$@"
  local replacement=$!
  wait $replacement
  echo "$name: host 1's replacement exit $?"
  wait $first
  echo "$name: host 0 exit $?"
}
scenario buddy "$work/buddy/rdzv/store/replica%2Eheld%2E1" --set memory-checkpoint-every=2
scenario disk "$work/disk/ckpt/step-000002/rank-1.json" --set memory-checkpoint-every=100000 \
  --checkpoint-dir "$work/disk/ckpt" --checkpoint-every 2
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
def result(name):
    lines = [l for l in open(f"{out}/lost_host_{name}_host0.log") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
md = ["| restored from (rank 0, rank 1) | step | state per rank (GB) | hand-back from the buddy (s) "
      "| restore, rank 0 (s) | recovery (s), failure to state restored |", "|---|---|---|---|---|---|"]
got = {}
for name in ("buddy", "disk"):
    r = result(name)
    if not r or not r.get("recovery"):
        md.append(f"| {name}: no result |  |  |  |  |  |")
        continue
    x = r["recovery"]
    log = open(f"{out}/lost_host_{name}_host1.log").read()
    m = re.search(r"handed back this node's memory checkpoint of step \d+ \((\d+) bytes in ([0-9.]+) s\)", log)
    back = f"{float(m.group(2)):.2f} ({int(m.group(1)) / 1e9:.2f} GB)" if m else "-"
    state = r["params"] * 4 * 3 / 1e9  # f32 weights and AdamW's two moments
    got[name] = x.get("recovery_seconds")
    md.append(f"| {', '.join(x.get('by_rank', [x['restored_from']]))} | {x['step']} | {state:.2f} | {back} "
              f"| {x['restore_seconds']:.2f} | {x.get('recovery_seconds', float('nan')):.2f} |")
if got.get("buddy") and got.get("disk"):
    md.append(f"\nRecovery from the buddy's replica against disk: {got['disk'] / got['buddy']:.2f}x.")
open(f"{out}/lost_host_recovery.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
