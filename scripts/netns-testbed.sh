#!/usr/bin/env bash
# A test bed of N hosts (network namespaces bwh0 … bwhN-1, 10.90.0.1 … N)
# on one switch (a bridge in the root namespace, 10.90.0.254), with every
# host's link limited to RATE in both directions by a token bucket: a
# receiver's port is a shared bottleneck, as on a switched cluster. Root only.
#
#   scripts/netns-testbed.sh up [N] [RATE]     # default 8 hosts, 100mbit
#   scripts/netns-testbed.sh bottleneck [N] [RATE]
#   scripts/netns-testbed.sh dual [N] [RATE]
#   scripts/netns-testbed.sh down [N]
#
# MTU=9000 (in the environment) gives every link jumbo frames (default
# 1500, Ethernet's); the runtime sizes its datagrams by the interface's MTU.
#
# `bottleneck` makes the last host's downlink a port with two classes, as
# a switch with a premium service has: premium (DSCP EF, what bulkwire's
# premium sockets send) guaranteed a fifth of RATE and served first, best
# effort the rest with a drop-tail queue of 64 packets. Traffic sent to that
# host from the switch's own address (10.90.0.254) at more than RATE, such
# as a UDP flood, congests the best-effort class only.
#
# `dual` gives every host a second interface, eth1 (10.91.0.1 … N), on a
# second switch (10.91.0.254) whose links are not limited: a premium network
# of its own, for BULKWIRE_PREMIUM_IFACE=eth1.
#
# Run a job or a benchmark on it with scripts/netns-exec as the remote shell:
#   bulkwire bench --hosts bwh0,bwh1,…,bwh7 --ssh scripts/netns-exec --bind 10.90.0.254 total-exchange -n 8
set -euo pipefail
action="${1:-}"
n="${2:-8}"
rate="${3:-100mbit}"
mtu="${MTU:-1500}"
case "$mtu" in
    '' | *[!0-9]*) echo "netns-testbed: MTU must be a number of bytes: $mtu" >&2; exit 2 ;;
esac

# RATE times $2 (default 1) over $1, in kbit (tc's units).
rate_part() {
    local kbit
    case "$rate" in
        *gbit) kbit=$((${rate%gbit} * 1000000)) ;;
        *mbit) kbit=$((${rate%mbit} * 1000)) ;;
        *kbit) kbit=${rate%kbit} ;;
        *) echo "netns-testbed: RATE must end in kbit, mbit or gbit: $rate" >&2; exit 2 ;;
    esac
    echo "$((kbit * ${2:-1} / $1))kbit"
}

# The token buckets' size: 200 us at RATE, and at least 32 KB. A bucket
# smaller than a segmented send (UDP GSO, TCP's TSO: up to 64 KB) makes tc
# cut that send into datagrams before it leaves the host, where a NIC takes
# it whole (and the receiving NIC coalesces it again): at 10 Gbit/s with
# 32 KB, TCP and bulkwire alike stalled near 400 MB/s from 64 KiB messages
# on. Slower links keep 32 KB, what their experiments were made with.
burst() {
    local bytes
    bytes=$(($(rate_part 1 | sed 's/kbit$//') / 40))
    echo "$((bytes > 32768 ? bytes : 32768))b"
}

down() {
    for i in $(seq 0 $((n - 1))); do
        ip netns del "bwh$i" 2>/dev/null || true
        ip link del "bwp$i" 2>/dev/null || true
        ip link del "bwq$i" 2>/dev/null || true
    done
    ip link del bwbr 2>/dev/null || true
    ip link del bwbr2 2>/dev/null || true
}

case "$action" in
    up | bottleneck | dual)
        down
        ip link add bwbr type bridge
        ip addr add 10.90.0.254/24 dev bwbr
        ip link set bwbr up
        for i in $(seq 0 $((n - 1))); do
            ns="bwh$i"
            ip netns add "$ns"
            ip link add "bwp$i" type veth peer name eth0 netns "$ns"
            ip link set "bwp$i" mtu "$mtu"
            ip -n "$ns" link set eth0 mtu "$mtu"
            ip link set "bwp$i" master bwbr up
            ip -n "$ns" addr add "10.90.0.$((i + 1))/24" dev eth0
            ip -n "$ns" link set eth0 up
            ip -n "$ns" link set lo up
            # The switch port towards the host (its downlink) and the host's
            # own uplink: each direction at RATE, with a queue of ~10 ms.
            if [ "$action" = bottleneck ] && [ "$i" = $((n - 1)) ]; then
                tc qdisc add dev "bwp$i" root handle 1: htb default 20
                tc class add dev "bwp$i" parent 1: classid 1:1 htb rate "$rate" quantum 1514
                tc class add dev "bwp$i" parent 1:1 classid 1:10 htb rate "$(rate_part 5)" ceil "$rate" prio 0 quantum 1514
                tc class add dev "bwp$i" parent 1:1 classid 1:20 htb rate "$(rate_part 5 4)" ceil "$rate" prio 1 quantum 1514
                tc qdisc add dev "bwp$i" parent 1:10 handle 10: pfifo limit 64
                tc qdisc add dev "bwp$i" parent 1:20 handle 20: pfifo limit 64
                tc filter add dev "bwp$i" parent 1: protocol ip prio 1 u32 match ip tos 0xb8 0xfc flowid 1:10
            else
                tc qdisc add dev "bwp$i" root tbf rate "$rate" burst "$(burst)" latency 10ms
            fi
            ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$(burst)" latency 10ms
        done
        if [ "$action" = dual ]; then
            ip link add bwbr2 type bridge
            ip addr add 10.91.0.254/24 dev bwbr2
            ip link set bwbr2 up
            for i in $(seq 0 $((n - 1))); do
                ip link add "bwq$i" type veth peer name eth1 netns "bwh$i"
                ip link set "bwq$i" master bwbr2 up
                ip -n "bwh$i" addr add "10.91.0.$((i + 1))/24" dev eth1
                ip -n "bwh$i" link set eth1 up
            done
        fi
        ip link set bwbr mtu "$mtu"
        echo "test bed up: $n hosts bwh0..bwh$((n - 1)) at $rate, MTU $mtu; rendezvous address 10.90.0.254"
        ;;
    down) down ;;
    *)
        echo "usage: $0 up [N] [RATE] | bottleneck [N] [RATE] | dual [N] [RATE] | down [N]" >&2
        exit 2
        ;;
esac
