#!/usr/bin/env bash
# Builds bulkwire in release mode and installs it for BSPlib programs:
#
#   scripts/install.sh [PREFIX]
#
#   PREFIX/bin/bulkwire        the launcher (bulkwire run -n N prog)
#   PREFIX/bin/bspcc           compiler wrapper (bspc++ for C++)
#   PREFIX/bin/bsprun          bsprun -npes N prog, as bulkwire run -n N prog
#   PREFIX/include/bsp.h       the BSPlib header (and mcbsp.h, its alias)
#   PREFIX/include/bulkwire.h  groups and collectives for C
#   PREFIX/lib/libbsp.so, .a   the BSPlib library, shared and static
#
# PREFIX defaults to /usr/local when run as root, ~/.local otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [ $# -eq 1 ]; then
    prefix="$1"
elif [ "$(id -u)" = 0 ]; then
    prefix=/usr/local
else
    prefix="$HOME/.local"
fi

cargo build --release --locked -p bulkwire -p bulkwire-bsp-c

mkdir -p "$prefix/bin" "$prefix/include" "$prefix/lib"
install -m 755 target/release/bulkwire "$prefix/bin/bulkwire"
install -m 755 scripts/bspcc "$prefix/bin/bspcc"
ln -sf bspcc "$prefix/bin/bspc++"
install -m 755 scripts/bsprun "$prefix/bin/bsprun"
install -m 644 include/bsp.h "$prefix/include/bsp.h"
install -m 644 include/mcbsp.h "$prefix/include/mcbsp.h"
install -m 644 include/bulkwire.h "$prefix/include/bulkwire.h"
install -m 755 target/release/libbsp.so "$prefix/lib/libbsp.so"
install -m 644 target/release/libbsp.a "$prefix/lib/libbsp.a"

echo "installed bulkwire, bspcc, bspc++, bsprun, bsp.h, bulkwire.h and libbsp under $prefix"
case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "add $prefix/bin to PATH to use them: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
