"""BSP sections on NumPy arrays: put, get, messages, two sections in a row."""
import numpy as np

import bulkwire

for section in range(2):
    with bulkwire.bsp() as bsp:
        p, s = bsp.pid, bsp.nprocs
        row = np.zeros(s, dtype=np.float64)
        ints = np.arange(10, dtype=np.int32) + 100 * p
        bsp.push_reg(row)
        bsp.push_reg(ints)
        bsp.sync()
        # Everyone puts its pid into slot pid of every row.
        for q in range(s):
            bsp.put(q, np.array([p + section], dtype=np.float64), row, offset=p)
        # And gets elements 3..6 of its right neighbour's ints.
        got = np.zeros(3, dtype=np.int32)
        bsp.get((p + 1) % s, ints, got, offset=3)
        bsp.sync()
        assert np.array_equal(row, np.arange(s) + section), row
        assert np.array_equal(got, np.arange(3, 6) + 100 * ((p + 1) % s)), got
        # Messages with tags.
        bsp.set_tagsize(4)
        bsp.sync()
        for q in range(s):
            bsp.send(q, np.full(q + 1, p, dtype=np.int16), tag=np.int32(p).tobytes())
        bsp.sync()
        assert bsp.qsize() == (s, sum(2 * (q + 1) for q in [p] * s)), bsp.qsize()
        senders = []
        for tag, payload in bsp.messages():
            sender = int(np.frombuffer(tag, np.int32)[0])
            assert np.array_equal(np.frombuffer(payload, np.int16), np.full(p + 1, sender)), payload
            senders.append(sender)
        assert sorted(senders) == list(range(s)) and bsp.move() is None
        # Errors name the call.
        try:
            bsp.put(0, np.zeros(1), np.zeros(1))
            raise SystemExit("a put to an unregistered array was accepted")
        except bulkwire.Error as e:
            assert "not registered" in str(e), e
        try:
            bsp.put(s, np.zeros(1), row)
            raise SystemExit("a put to a process that does not exist was accepted")
        except bulkwire.Error as e:
            assert "put" in str(e), e
        bsp.pop_reg(ints)
        bsp.sync()
        t = bsp.time()
        assert t > 0
print(f"bsp ok {bulkwire.World().rank}")
