# Two hosts on one machine, for the scripts that source this: two network namespaces
# joined by a bridge, and an mpirun agent that starts a host's processes in its
# namespace and a UTS namespace with its host name (node1, node2), so inter-node traffic
# crosses TCP and ranks find their nodes by host name. Needs root. hosts_up TAG makes
# them (TAG: a short name of the caller's own, e.g. its pid) and sets MPI, the mpirun
# options that place 2 ranks on each; hosts_down TAG removes them, whatever is left;
# hosts_link TAG H up|down cuts or mends host H's link; hosts_shape TAG RATE limits
# every link to RATE (tc's units, e.g. 200mbit) each way.
hosts_up() {
  local T=$1 net=10.231.$(($$ % 250)) h
  ip link add "${T}br" type bridge && ip addr add "$net.254/24" dev "${T}br" && ip link set "${T}br" up || return 1
  for h in 1 2; do
    ip netns add "${T}n$h" && ip link add "${T}v$h" type veth peer name "${T}p$h" &&
      ip link set "${T}p$h" netns "${T}n$h" && ip link set "${T}v$h" master "${T}br" up &&
      ip netns exec "${T}n$h" ip addr add "$net.$h/24" dev "${T}p$h" &&
      ip netns exec "${T}n$h" ip link set "${T}p$h" up && ip netns exec "${T}n$h" ip link set lo up || return 1
  done
  HOSTS_AGENT=$(mktemp)
  cat > "$HOSTS_AGENT" <<SH
#!/bin/sh
# mpirun's ssh: agent HOST CMD... runs CMD in HOST's namespaces, under its name.
h=\$1; shift
case \$h in node1) ns=${T}n1 ;; node2) ns=${T}n2 ;; *) echo "agent: no host \$h" >&2; exit 1 ;; esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$h && exec \$*"
SH
  chmod +x "$HOSTS_AGENT"
  MPI=(--mca plm_rsh_agent "$HOSTS_AGENT" --host node1:2,node2:2 --mca oob_tcp_if_include "$net.0/24"
    --mca btl_tcp_if_include "$net.0/24" --mca btl self,vader,tcp)
}

# Each step may find its object gone already (a namespace takes its veth along): none
# may stop the others, under set -e too.
hosts_down() {
  local T=$1 h
  for h in 1 2; do
    ip netns pids "${T}n$h" 2>/dev/null | xargs -r kill -9 || true
    ip netns del "${T}n$h" 2>/dev/null || true
    ip link del "${T}v$h" 2>/dev/null || true
  done
  ip link del "${T}br" 2>/dev/null || true
  rm -f "${HOSTS_AGENT:-}"
}

hosts_link() { ip link set "$1v$2" "$3"; }

hosts_shape() {
  local T=$1 rate=$2 h
  for h in 1 2; do
    tc qdisc add dev "${T}v$h" root tbf rate "$rate" burst 256kb latency 100ms &&
      ip netns exec "${T}n$h" tc qdisc add dev "${T}p$h" root tbf rate "$rate" burst 256kb latency 100ms || return 1
  done
}
