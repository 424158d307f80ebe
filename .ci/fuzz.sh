#!/usr/bin/env bash
# Fuzzes the wire decoder for a short time over the checked-in seed corpus.
#   FUZZ_SECONDS  how long to fuzz (default 30)
# Installs cargo-fuzz and a nightly toolchain if missing; without nightly it
# falls back to stable with RUSTC_BOOTSTRAP=1. The corpus is copied to a temp
# dir, so the repository is not modified (a crash input goes to the ignored
# crates/wire/fuzz/artifacts/decode/ and is printed in base64).
set -euo pipefail

FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
if ! [[ "$FUZZ_SECONDS" =~ ^[0-9]+$ ]]; then
    echo "fuzz.sh: FUZZ_SECONDS must be a whole number of seconds, not '$FUZZ_SECONDS'" >&2
    exit 2
fi

cd "$(dirname "${BASH_SOURCE[0]}")/../crates/wire"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

toolchain=(+nightly)
if ! rustup run nightly true >/dev/null 2>&1; then
    echo "fuzz.sh: installing the nightly toolchain"
    if ! rustup toolchain install nightly --profile minimal; then
        echo "fuzz.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1"
        toolchain=()
        export RUSTC_BOOTSTRAP=1
    fi
fi

cargo "${toolchain[@]}" fuzz build decode

corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
cp -R fuzz/corpus/decode/. "$corpus/"

if ! cargo "${toolchain[@]}" fuzz run decode "$corpus" -- \
    -max_total_time="$FUZZ_SECONDS" -timeout=30; then
    echo "fuzz.sh: the decode target failed; crashing inputs (base64):" >&2
    for f in fuzz/artifacts/decode/*; do
        [[ -f "$f" ]] && echo "$f: $(base64 -w0 "$f")" >&2
    done
    exit 1
fi
echo "fuzz.sh: decode ran ${FUZZ_SECONDS}s over the seed corpus without a crash"
