"""Benchmarks of the Python package, each beside its references measured in
the same run::

    python -m bulkwire.bench pingpong [--sizes 8,1024,1048576] [--json | --csv] [--no-mpi] [--quick]

``pingpong``: the half round trip between two processes on this machine,
median of many, for NumPy arrays sent as buffers (``Send``/``Recv``) and as
pickled objects (``send``/``recv``), by

* ``bulkwire-python``: this package, in a job of 2 started by its launcher;
* ``bulkwire``: the same loop in Rust, on the same runtime in the same job
  (so the difference is what Python costs per message);
* ``mpi4py``: mpi4py over Open MPI, started by ``mpirun``, once with TCP
  only (``tcp``) and once with shared memory (``shm``), when both are
  installed (``--no-mpi`` skips them).

Every rank runs with ``OPENBLAS_NUM_THREADS=1``: NumPy's OpenBLAS threads
spin for work and would take the time a rank waits in on a machine of few
cores. The loops alternate in five rounds per size, so that a drift of the
machine's speed meets them alike.

Rows (``--json``) are in the format of docs/BENCHMARKS.md: ``bench``,
``source``, ``what`` (the transport, ``-pickle`` for objects), ``procs``,
``size_bytes``, ``median_us``. bulkwire's transport is the one its runtime
reached the peer by: ``shm`` on this machine, ``udp`` with
``BULKWIRE_SHM=0`` in the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

DEFAULT_SIZES = [8, 1024, 65536, 1 << 20]
ROWS_MARK = "BULKWIRE-BENCH-ROWS "


def _iterations(size: int, quick: bool) -> tuple[int, int]:
    """(warm-up, measured) round trips for a message of ``size`` bytes."""
    n = 2000 if size <= 4096 else 500 if size <= 65536 else 100
    if quick:
        n = max(n // 20, 10)
    return max(n // 10, 5), n


def _row(source: str, what: str, size: int, times: list[float]) -> dict[str, Any]:
    return {
        "bench": "pingpong",
        "source": source,
        "what": what,
        "procs": 2,
        "size_bytes": size,
        "median_us": statistics.median(times) / 2 * 1e6,
    }


def _loop(first: bool, send: Callable[[], None], recv: Callable[[], None], warmup: int, n: int) -> list[float]:
    clock = time.perf_counter
    times = []
    for i in range(warmup + n):
        start = clock()
        if first:
            send()
            recv()
        else:
            recv()
            send()
        if i >= warmup:
            times.append(clock() - start)
    return times


def _bulkwire_rank(sizes: list[int], quick: bool) -> None:
    import numpy

    import bulkwire

    world = bulkwire.World()
    if world.size != 2:
        raise SystemExit("pingpong needs exactly 2 processes")
    peer, first = 1 - world.rank, world.rank == 0
    over = world._transport(peer)
    rows = []
    for size in sizes:
        warmup, n = _iterations(size, quick)
        out = numpy.zeros(size, dtype=numpy.uint8)
        into = numpy.empty(size, dtype=numpy.uint8)
        times: dict[str, list[float]] = {"python": [], "pickle": [], "rust": []}
        # Rounds that alternate the three loops, so that a drift of the
        # machine's speed meets them alike.
        rounds = 5
        for round in range(rounds):
            world.barrier()
            times["python"] += _loop(first, lambda: world.Send(out, peer, 1), lambda: world.Recv(into, peer, 1),
                                     warmup if round == 0 else 0, n // rounds)
            world.barrier()
            times["pickle"] += _loop(first, lambda: world.send(out, peer, 2), lambda: world.recv(source=peer, tag=2),
                                     warmup if round == 0 else 0, n // rounds)
            world.barrier()
            if round == 0:
                world._pingpong_rust(peer, size, warmup)
            times["rust"] += world._pingpong_rust(peer, size, n // rounds)
        rows.append(_row("bulkwire-python", over, size, times["python"]))
        rows.append(_row("bulkwire-python", f"{over}-pickle", size, times["pickle"]))
        rows.append(_row("bulkwire", over, size, times["rust"]))
    if world.rank == 0:
        print(ROWS_MARK + json.dumps(rows), flush=True)


def _mpi4py_rank(sizes: list[int], quick: bool, what: str) -> None:
    import numpy
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    peer, first = 1 - comm.rank, comm.rank == 0
    rows = []
    for size in sizes:
        warmup, n = _iterations(size, quick)
        out = numpy.zeros(size, dtype=numpy.uint8)
        into = numpy.empty(size, dtype=numpy.uint8)
        comm.Barrier()
        times = _loop(first, lambda: comm.Send(out, peer, 1), lambda: comm.Recv(into, peer, 1), warmup, n)
        rows.append(_row("mpi4py", what, size, times))
        comm.Barrier()
        times = _loop(first, lambda: comm.send(out, peer, 2), lambda: comm.recv(source=peer, tag=2), warmup, n)
        rows.append(_row("mpi4py", what + "-pickle", size, times))
    if comm.rank == 0:
        print(ROWS_MARK + json.dumps(rows), flush=True)


def _rows_of(output: str) -> list[dict[str, Any]]:
    for line in output.splitlines():
        if line.startswith(ROWS_MARK):
            return json.loads(line[len(ROWS_MARK) :])
    raise RuntimeError("the benchmark's rank 0 printed no rows")


def _run(command: list[str], what: str) -> list[dict[str, Any]]:
    # NumPy's OpenBLAS keeps threads that spin for work; on a machine of
    # few cores they take the time the ranks wait in. Every rank, bulkwire's
    # and mpi4py's alike, runs with one.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return _rows_of(done.stdout)


def _mpirun(transport: str) -> list[str]:
    command = ["mpirun", "-np", "2", "--oversubscribe", "--mca", "pml", "ob1"]
    if transport == "tcp":
        command += ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
    else:
        command += ["--mca", "btl", "vader,self"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return command


def _pingpong(args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = ",".join(map(str, args.sizes))
    rank_args = ["-m", "bulkwire.bench", "--rank", "bulkwire", "--sizes", sizes] + (["--quick"] if args.quick else [])
    rows = _run([sys.executable, "-m", "bulkwire.run", "-n", "2", sys.executable, *rank_args], "the bulkwire job")
    if args.no_mpi:
        return rows
    missing = [m for m, ok in [("mpirun", shutil.which("mpirun")), ("mpi4py", _has_mpi4py())] if not ok]
    if missing:
        print(f"# mpi4py references skipped: {' and '.join(missing)} not installed", file=sys.stderr)
        return rows
    for transport in ["tcp", "shm"]:
        mpi_args = ["-m", "bulkwire.bench", "--rank", f"mpi4py-{transport}", "--sizes", sizes]
        mpi_args += ["--quick"] if args.quick else []
        try:
            rows += _run(_mpirun(transport) + [sys.executable, *mpi_args], f"mpi4py over {transport}")
        except RuntimeError as e:
            print(f"# mpi4py over {transport} skipped: {e}", file=sys.stderr)
    return rows


def _has_mpi4py() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def _table(rows: list[dict[str, Any]]) -> str:
    columns = sorted({(r["source"], r["what"]) for r in rows}, key=lambda c: (c[1].endswith("pickle"), c))
    sizes = sorted({r["size_bytes"] for r in rows})
    value = {(r["source"], r["what"], r["size_bytes"]): r["median_us"] for r in rows}
    lines = ["# pingpong: half round trip, median, microseconds; 2 processes on this machine"]
    lines.append(f"{'bytes':>9} " + " ".join(f"{s + '/' + w:>24}" for s, w in columns))
    for size in sizes:
        cells = [f"{value[(s, w, size)]:>24.2f}" if (s, w, size) in value else f"{'-':>24}" for s, w in columns]
        lines.append(f"{size:>9} " + " ".join(cells))
    python, rust = "bulkwire-python", "bulkwire"
    over = next((r["what"] for r in rows if r["source"] == rust), "udp")
    lines.append(f"# Python's cost per message ({python}/{over} − {rust}/{over}), microseconds:")
    lines.append(
        "#   "
        + ", ".join(
            f"{size} B: {value[(python, over, size)] - value[(rust, over, size)]:+.2f}"
            for size in sizes
            if (python, over, size) in value and (rust, over, size) in value
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bulkwire.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", nargs="?", choices=["pingpong"], default="pingpong")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=DEFAULT_SIZES,
                        help="message sizes in bytes, comma-separated")
    parser.add_argument("--json", action="store_true", help="rows as a JSON list")
    parser.add_argument("--csv", action="store_true", help="rows as CSV")
    parser.add_argument("--no-mpi", action="store_true", help="without the mpi4py references")
    parser.add_argument("--quick", action="store_true", help="fewer round trips (a check, not a measurement)")
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(s < 0 for s in args.sizes):
        parser.error("--sizes: sizes are 0 or more bytes")
    if args.rank == "bulkwire":
        _bulkwire_rank(args.sizes, args.quick)
        return 0
    if args.rank in ("mpi4py-tcp", "mpi4py-shm"):
        _mpi4py_rank(args.sizes, args.quick, args.rank.split("-")[1])
        return 0
    try:
        rows = _pingpong(args)
    except RuntimeError as e:
        print(f"python -m bulkwire.bench: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.csv:
        keys = ["bench", "source", "what", "procs", "size_bytes", "median_us"]
        print(",".join(keys))
        for r in rows:
            print(",".join(str(r[k]) for k in keys))
    else:
        print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
