#!/usr/bin/env bash
# Runs a `train` command as two hosts: two network namespaces joined by a veth pair (10.213.250.1
# and .2), one launcher in each with --nnodes 2 --set node-rank=K --rendezvous (a fresh shared
# folder) added, and VITDDP_GLOO_HOST set to the namespace's address (Gloo and the transfer
# engine listen there). Needs root. Prints host 0's output, then host 1's; exits with the first
# non-zero code.
#
#   sudo bash scripts/two_netns_hosts.sh build/bin/train bench transfer --model vit_l_32 \
#        --optimizer adamw --hook powersgd --batch-size 1 --provider tcp --json
#   sudo bash scripts/two_netns_hosts.sh build/bin/train --procs 2 --hook powersgd --steps 20
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TRAIN [ARGS...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: network namespaces need root" >&2; exit 2; }
train=$1
shift
source "$(dirname "${BASH_SOURCE[0]}")/netns_hosts.sh"
two_hosts_or_exit h 10.213.250 vitddp-two-hosts
rdzv=$work
set +e
for h in 0 1; do
  VITDDP_GLOO_HOST=${addr[$h]} ip netns exec "${ns[$h]}" "$train" "$@" --nnodes 2 --set node-rank=$h \
    --rendezvous "$rdzv/rdzv" > "$rdzv/host$h.log" 2>&1 &
  pids[$h]=$!
done
code=0
for h in 0 1; do
  wait "${pids[$h]}"
  c=$?
  [ $code = 0 ] && code=$c
done
cat "$rdzv/host0.log"
echo "--- host 1:"
cat "$rdzv/host1.log"
exit $code
