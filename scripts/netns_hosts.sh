# Sourced: two network namespaces joined by a veth pair, standing for two hosts (as
# tests/common/two_hosts.h does for the tests). Needs root.
#   make_two_hosts TAG SUBNET   sets ns=(vitddp-TAG$$-0 vitddp-TAG$$-1) and addr=(SUBNET.1 SUBNET.2)
#   remove_two_hosts            deletes them
#   two_hosts_or_exit TAG SUBNET PREFIX
#                               both, for a script: a fresh folder /tmp/PREFIX-XXXXXX in $work, the hosts and
#                               the folder removed at exit, and one line and exit 1 when they cannot be made
make_two_hosts() {
  local tag=$1 subnet=$2 id=$$
  ns=("vitddp-$tag$id-0" "vitddp-$tag$id-1")
  addr=("$subnet.1" "$subnet.2")
  ip netns add "${ns[0]}" && ip netns add "${ns[1]}" &&
    ip link add "v$tag${id}a" type veth peer name "v$tag${id}b" &&
    ip link set "v$tag${id}a" netns "${ns[0]}" && ip link set "v$tag${id}b" netns "${ns[1]}" || return 1
  local h dev
  for h in 0 1; do
    dev=$([ $h = 0 ] && echo "v$tag${id}a" || echo "v$tag${id}b")
    ip -n "${ns[$h]}" addr add "${addr[$h]}/24" dev "$dev" && ip -n "${ns[$h]}" link set lo up &&
      ip -n "${ns[$h]}" link set "$dev" up || return 1
  done
}
remove_two_hosts() {
  ip netns del "${ns[0]}" 2> /dev/null
  ip netns del "${ns[1]}" 2> /dev/null
}
two_hosts_or_exit() {
  work=$(mktemp -d "/tmp/$3-XXXXXX")
  trap 'remove_two_hosts; rm -rf "$work"' EXIT
  make_two_hosts "$1" "$2" || { echo "$0: cannot make the network namespaces" >&2; exit 1; }
}
