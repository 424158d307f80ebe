#!/usr/bin/env bash
# Seed 001's many-to-one loss study on the namespace test bed: K senders
# into one receiver whose port takes RATE, for each K, with raw UDP, TCP,
# bulkwire, and bulkwire under Warp rate control. Prints CSV rows of
# `bulkwire bench incast` (one header), one run per K. Root only.
#
#   scripts/many-to-one.sh [RATE] [BYTES_PER_SENDER] [K…]
#   scripts/many-to-one.sh 100mbit 4000000 1 2 3 4 6 7
set -euo pipefail
rate="${1:-100mbit}"
bytes="${2:-4000000}"
shift $(($# < 2 ? $# : 2))
ks=("$@")
[ ${#ks[@]} -gt 0 ] || ks=(1 2 4 7)
for k in "${ks[@]}"; do
    [[ "$k" =~ ^[1-9][0-9]*$ ]] || { echo "many-to-one: K must be a positive number: $k" >&2; exit 2; }
done
here="$(cd "$(dirname "$0")" && pwd)"
bulkwire="${BULKWIRE:-$here/../target/release/bulkwire}"
max=0
for k in "${ks[@]}"; do ((k > max)) && max=$k; done
hosts=$((max + 1))
"$here/netns-testbed.sh" up "$hosts" "$rate" >&2
trap '"$here/netns-testbed.sh" down "$hosts"' EXIT
header=1
for k in "${ks[@]}"; do
    names=$(seq -s, -f 'bwh%g' 0 "$k")
    out=$("$bulkwire" bench --hosts "$names" --ssh "$here/netns-exec" --bind 10.90.0.254 \
        incast -k "$k" --sizes 65536 --bytes "$bytes" --warp --warp-capacity "$rate" --csv)
    if ((header)); then echo "$out"; header=0; else echo "$out" | tail -n +2; fi
done
