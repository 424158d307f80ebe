"""Runs a program as a job of N processes: ``python -m bulkwire.run -n 4
prog.py [args…]``, the same launcher as ``bulkwire run`` with the same
options (``--help`` lists them). A program that is a Python script, or
``-m module`` or ``-c code``, is run by this interpreter."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from . import _bulkwire


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return _bulkwire.launch(["python -m bulkwire.run", *args], sys.executable)


if __name__ == "__main__":
    sys.exit(main())
