#!/usr/bin/env bash
# The sweeps of `bulkwire bench pingpong` and `bulkwire bench bw` with Open
# MPI over TCP on loopback, in the same table format, so the comparison in
# docs/BENCHMARKS.md can be repeated. Not a dependency: it needs mpicc and
# mpirun (Debian: openmpi-bin libopenmpi-dev) and says so when they are missing.
#
#   scripts/ompi-bench.sh [pingpong|bw|all] [--json] [--iterations N] [--max-size BYTES] [--window W]
#   scripts/ompi-bench.sh alltoall [-n P] [--json] [--iterations N] [--max-size BYTES_PER_PAIR]
#       (MPI_Barrier and MPI_Alltoall, beside `bulkwire bench total-exchange -n P`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

which="${1:-all}"
procs=2
case "$which" in
    pingpong | bw | all) shift || true ;;
    alltoall)
        shift
        if [ "${1:-}" = -n ]; then
            procs="$2"
            shift 2
        fi
        ;;
    -*) which=all ;;
    *)
        echo "usage: $0 [pingpong|bw|all] [--json] [--iterations N] [--max-size BYTES] [--window W]" >&2
        echo "       $0 alltoall [-n P] [--json] [--iterations N] [--max-size BYTES_PER_PAIR]" >&2
        exit 2
        ;;
esac

for tool in mpicc mpirun; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ompi-bench: $tool not found; install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)" >&2
        exit 1
    fi
done
if ! mpirun --version 2>&1 | grep -q "Open MPI"; then
    echo "ompi-bench: mpirun is not Open MPI's; the options below are Open MPI's" >&2
    exit 1
fi

build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
mpicc -O2 -o "$build/bench" ompi/bench.c

# TCP only (no shared memory), on loopback: the transport bulkwire's figures
# are compared with. Root may run jobs here (containers, CI).
mpi=(mpirun -np "$procs" --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 --oversubscribe)
if [ "$(id -u)" = 0 ]; then
    mpi+=(--allow-run-as-root)
fi

run() { "${mpi[@]}" "$build/bench" "$@"; }
json=false
for arg in "$@"; do
    [ "$arg" = --json ] && json=true
done
case "$which" in
    pingpong) run pingpong "$@" ;;
    bw) run bw "$@" ;;
    alltoall) run alltoall "$@" ;;
    all)
        # One list of rows for both sweeps, or the two tables.
        if $json; then
            echo '['
            run pingpong "$@" | sed '1d;$d' | sed '$s/$/,/'
            run bw "$@" | sed '1d;$d'
            echo ']'
        else
            run pingpong "$@"
            echo
            run bw "$@"
        fi
        ;;
esac
