#!/usr/bin/env bash
# The test suite: formatting, lints, every test (including the fault sweep over
# 2,000 seeds, and the BSPlib conformance suite and C examples, compiled with
# scripts/bspcc and run for P = 1, 2, 3, 4 and 8), the Python package's wheel
# and pytest suite (scripts/python-test.sh, under each Python the machine has)
# and a short fuzzing run of the wire decoder.
#   FUZZ_SECONDS       fuzzing time (default 20)
#   BULKWIRE_SEEDS     seeds of the fault sweep (default 2000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "lints"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked

step "the cycle marks compiled in (bulkwire-runtime's feature cycles)"
cargo clippy -p bulkwire-runtime --all-targets --features cycles --locked -- -D warnings
cargo test -p bulkwire-runtime --features cycles --locked --lib cycles

step "python package: wheel and tests"
scripts/python-test.sh

step "fuzz the wire decoder"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}" .ci/fuzz.sh

step "all tests passed"
