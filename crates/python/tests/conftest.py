"""Helpers of the Python package's tests: each multi-process test runs a
program of ``jobs/`` as a job, through the package's own launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
EXAMPLES = HERE.parent / "examples"


def run_job(program: str | Path, n: int, *args: str, timeout: float = 120, env: dict | None = None,
            launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    path = Path(program)
    if not path.is_absolute():
        path = JOBS / path
    command = (launcher or [sys.executable, "-m", "bulkwire.run"]) + ["-n", str(n), str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def check(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


@pytest.fixture
def job():
    return run_job
