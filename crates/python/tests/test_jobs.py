"""The package on real jobs: every program of jobs/ runs as a job of
several processes through ``python -m bulkwire.run`` and checks itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, check, run_job

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_point_to_point(n):
    out = check(run_job("p2p.py", n)).stdout
    assert sorted(out.split("\n")[:-1]) == [f"p2p ok {r}" for r in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_collectives_every_root(n):
    out = check(run_job("collectives.py", n)).stdout
    assert out.count("collectives ok") == n


@pytest.mark.parametrize("n", [4, 5])
def test_groups_change_at_run_time(n):
    assert check(run_job("groups.py", n)).stdout.count("groups ok") == n


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_bsp_sections(n):
    assert check(run_job("bsp.py", n)).stdout.count("bsp ok") == n


@pytest.mark.parametrize("flush", ["warp", "2"])
def test_shared_memory(flush):
    out = check(run_job("shared_memory.py", 3, env={"BULKWIRE_DSM_FLUSH": flush})).stdout
    assert out.count("shared memory ok") == 3, out


def test_ctrl_c_interrupts_a_blocked_receive():
    assert "interrupt ok" in check(run_job("interrupt.py", 2)).stdout


def test_an_uncaught_exception_stops_the_job_with_its_message():
    done = run_job("fails.py", 3, timeout=30)
    assert done.returncode != 0
    assert "rank 1: ValueError: bad input on rank 1" in done.stderr, done.stderr
    assert "Traceback" in done.stderr


def test_an_exception_in_a_bsp_section_stops_the_job():
    done = run_job("fails.py", 3, "bsp", timeout=30)
    assert done.returncode != 0
    assert "RuntimeError: bad data in superstep 0" in done.stderr, done.stderr


def test_launcher_options_are_checked():
    done = subprocess.run([sys.executable, "-m", "bulkwire.run", "-n", "many", "prog.py"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "'many'" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "bulkwire.run", "-n", "2", "/no/such/program.py"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "program.py" in done.stderr, done.stderr


def _bulkwire_command() -> str | None:
    for candidate in [os.environ.get("BULKWIRE_BIN"), REPO / "target/debug/bulkwire", REPO / "target/release/bulkwire",
                      shutil.which("bulkwire")]:
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


def test_bulkwire_run_starts_python_programs():
    command = _bulkwire_command()
    if command is None:
        pytest.skip("the bulkwire command is not built")
    # `bulkwire run` runs the program it is given: here the interpreter.
    done = subprocess.run([command, "run", "-n", "2", sys.executable, str(Path(__file__).parent / "jobs/p2p.py")],
                          capture_output=True, text=True, timeout=120)
    assert check(done).stdout.count("p2p ok") == 2


def test_example_pi():
    out = check(run_job(EXAMPLES / "pi.py", 4, "--samples", "400000")).stdout
    assert "pi ≈ 3.1" in out, out


def test_example_sample_sort():
    out = check(run_job(EXAMPLES / "sample_sort.py", 4, "--n", "200000")).stdout
    assert "sorted 200000 keys" in out, out


def test_example_jacobi():
    out = check(run_job(EXAMPLES / "jacobi.py", 3, "--n", "48")).stdout
    assert "matches the serial solution" in out, out


def test_bench_rows_have_the_documented_format():
    done = subprocess.run([sys.executable, "-m", "bulkwire.bench", "pingpong", "--quick", "--no-mpi", "--json",
                           "--sizes", "8,4096"], capture_output=True, text=True, timeout=300)
    rows = json.loads(check(done).stdout)
    # Named by the transport the runtime reached the peer by: on this
    # machine its shared memory, unless BULKWIRE_SHM=0.
    over = "udp" if os.environ.get("BULKWIRE_SHM") == "0" else "shm"
    assert {(r["source"], r["what"], r["size_bytes"]) for r in rows} == {
        (s, w, b) for s, w in [("bulkwire", over), ("bulkwire-python", over), ("bulkwire-python", f"{over}-pickle")]
        for b in (8, 4096)}
    for r in rows:
        assert r["bench"] == "pingpong" and r["procs"] == 2 and r["median_us"] > 0, r
