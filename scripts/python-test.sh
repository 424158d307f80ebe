#!/usr/bin/env bash
# Builds the Python package's wheel (target/wheels) and runs its tests
# (crates/python/tests, pytest) under every interpreter of
# scripts/python-env.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t envs < <(scripts/python-env.sh)
rm -f target/wheels/bulkwire-*.whl
"${envs[0]}/bin/maturin" build --release --quiet --out target/wheels --interpreter "${envs[0]}/bin/python"
wheel=$(ls target/wheels/bulkwire-*.whl)
echo "python: built $wheel"
for env in "${envs[@]}"; do
    "$env/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    echo "python: tests under $("$env/bin/python" --version) ($env)"
    (cd crates/python/tests && "../../../$env/bin/python" -m pytest -q -p no:cacheprovider)
done
