"""Ctrl-C (SIGINT) ends a blocked receive with KeyboardInterrupt, and the
interrupted receive takes no later message."""
import os
import signal
import threading
import time

import bulkwire

w = bulkwire.World()
if w.rank == 0:
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        w.recv(source=1, tag=5)
        raise SystemExit("the receive returned without a message")
    except KeyboardInterrupt:
        waited = time.monotonic() - start
        assert 0.25 < waited < 5, waited
    w.send("go", dest=1, tag=4)
    assert w.recv(source=1, tag=5) == "reply"
    # A collective is interrupted the same way.
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    try:
        w.bcast(None, root=1)
        raise SystemExit("the broadcast returned before its root called it")
    except KeyboardInterrupt:
        pass
    w.send("done", dest=1, tag=6)
    print("interrupt ok")
else:
    assert w.recv(source=0, tag=4) == "go"
    w.send("reply", dest=0, tag=5)
    assert w.recv(source=0, tag=6) == "done"
