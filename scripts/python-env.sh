#!/usr/bin/env bash
# Virtual environments for the Python package, one per interpreter: the
# python3 on PATH and, where it is another, Debian's /usr/bin/python3. Each
# gets maturin (to build the wheel), NumPy and pytest (for the tests), and,
# where Open MPI's compiler is installed, mpi4py (for the benchmark's
# reference). Prints each environment's directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

interpreters=("$(command -v python3)")
if [ -x /usr/bin/python3 ] && [ "$(readlink -f /usr/bin/python3)" != "$(readlink -f "${interpreters[0]}")" ]; then
    interpreters+=(/usr/bin/python3)
fi
for python in "${interpreters[@]}"; do
    version=$("$python" -c 'import platform; print(platform.python_version())')
    case "$python" in /usr/bin/*) origin=system ;; *) origin=path ;; esac
    dir="target/python/$version-$origin"
    if [ ! -x "$dir/bin/python" ]; then
        "$python" -m venv "$dir" >&2
    fi
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" numpy pytest >&2
    if command -v mpicc >/dev/null 2>&1 && ! "$dir/bin/python" -c 'import mpi4py' 2>/dev/null; then
        "$dir/bin/python" -m pip install -q --disable-pip-version-check mpi4py >&2 \
            || echo "python-env: mpi4py could not be installed in $dir; the benchmark runs without it" >&2
    fi
    echo "$dir"
done
