"""Rank 1 fails with an uncaught exception while rank 0 waits for it; in a
BSP section with an argument, inside the section."""
import sys

import bulkwire

w = bulkwire.World()
if len(sys.argv) > 1 and sys.argv[1] == "bsp":
    with bulkwire.bsp() as bsp:
        if bsp.pid == 1:
            raise RuntimeError("bad data in superstep 0")
        bsp.sync()
else:
    if w.rank == 1:
        raise ValueError("bad input on rank 1")
    w.recv(source=1)
