"""Point-to-point calls on objects and buffers, checked on every rank."""
import array
import time

import numpy as np

import bulkwire

w = bulkwire.World()
r, n = w.rank, w.size
right, left = (r + 1) % n, (r - 1) % n
assert bulkwire.World() is w, "World() is one object per process"
assert w.Get_rank() == r and w.Get_size() == n and w.wtime() >= 0

# Objects around the ring, with a status.
w.send({"from": r, "list": list(range(r))}, dest=right, tag=3)
st = bulkwire.Status()
got = w.recv(source=left, tag=3, status=st)
assert got == {"from": left, "list": list(range(left))}, got
assert (st.source, st.tag) == (left, 3) and st.count > 0, st

# Any source and any tag: every other rank sends one message to rank 0
# (between barriers, so that no other message can match).
w.barrier()
if r == 0:
    seen = set()
    for _ in range(n - 1):
        st = bulkwire.Status()
        obj = w.recv(source=bulkwire.ANY_SOURCE, tag=bulkwire.ANY_TAG, status=st)
        assert obj == ("hello", st.source) and st.tag == 100 + st.source, (obj, st)
        seen.add(st.source)
    assert seen == set(range(1, n)), seen
else:
    w.send(("hello", r), dest=0, tag=100 + r)
w.barrier()

# Messages between two ranks are not overtaken, and tags select.
if n > 1:
    if r == 0:
        for i in range(50):
            w.send(i, dest=1, tag=i % 2)
    elif r == 1:
        odd = [w.recv(source=0, tag=1) for _ in range(25)]
        even = [w.recv(source=0, tag=0) for _ in range(25)]
        assert odd == list(range(1, 50, 2)) and even == list(range(0, 50, 2)), (odd, even)

# Non-blocking: irecv before the send, test until done, waitall.
req = w.irecv(source=left, tag=9)
st = bulkwire.Status()
done, value = req.test(st)
sends = [w.isend([r, k], dest=right, tag=9 if k == 0 else 10) for k in range(3)]
assert bulkwire.Request.waitall(sends) == [None] * 3
while not done:
    done, value = req.test(st)
assert req.done and value == [left, 0] and st.source == left, (value, st)
assert [w.recv(source=left, tag=10) for _ in range(2)] == [[left, 1], [left, 2]]
try:
    req.wait()
    raise SystemExit("a completed request waited again")
except bulkwire.Error as e:
    assert "already completed" in str(e), e

# Buffers: NumPy arrays of several types, bytearray, array.array, empty.
for dtype in [np.int8, np.uint16, np.int32, np.int64, np.float32, np.float64, np.complex128]:
    out = (np.arange(1000) * (r + 1)).astype(dtype)
    into = np.zeros(1000, dtype=dtype)
    w.Isend(out, dest=right, tag=20).wait()
    st = bulkwire.Status()
    w.Recv(into, source=left, tag=20, status=st)
    assert np.array_equal(into, (np.arange(1000) * (left + 1)).astype(dtype)), dtype
    assert st.count == out.nbytes
w.Send(bytearray(b"abc"), dest=right, tag=21)
w.Send(array.array("d", [1.5, r]), dest=right, tag=22)
w.Send(b"", dest=right, tag=23)
ba = bytearray(3)
w.Recv(ba, source=left, tag=21)
assert ba == b"abc"
aa = array.array("d", [0.0, 0.0])
req = w.Irecv(aa, source=left, tag=22)
assert req.wait() is None and list(aa) == [1.5, left], aa
st = bulkwire.Status()
w.Recv(bytearray(0), source=left, tag=23, status=st)
assert st.count == 0

# A large message arrives whole.
big = np.random.default_rng(r).integers(0, 255, 4 << 20, dtype=np.uint8)
w.Send(big, dest=right, tag=30)
into = np.empty_like(big)
w.Recv(into, source=left, tag=30)
assert np.array_equal(into, np.random.default_rng(left).integers(0, 255, 4 << 20, dtype=np.uint8))

# A large message lent to a Recv that waits for it is read from the
# sender's memory straight into the array (unless rank 1 stalls 0.2 s).
w.barrier()
if n > 1 and r < 2 and w._transport(1 - r) == "shm":
    if r == 0:
        time.sleep(0.2)
        w.Send(big, dest=1, tag=35)
    else:
        before = w._shm_read_in_place()
        into = np.zeros(4 << 20, np.uint8)
        w.Recv(into, source=0, tag=35)
        assert np.array_equal(into, np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8))
        assert w._shm_read_in_place() - before == 1, w._shm_read_in_place() - before

# Isend borrows its buffer until it completes: a large one to a process on
# this host is read from the array itself (lent, not copied), by wait or
# by test; after that the array is the caller's again.
lent = w._shm_lent()
reqs = [w.Isend(big, dest=right, tag=33), w.Isend(big[: 3 << 20], dest=right, tag=34)]
while not reqs[1].test()[0]:
    pass
assert reqs[1].done
assert reqs[0].wait() is None and reqs[0].done
big[:] = 0
for tag, length in [(33, 4 << 20), (34, 3 << 20)]:
    into = np.empty(length, dtype=np.uint8)
    w.Recv(into, source=left, tag=tag)
    assert np.array_equal(into, np.random.default_rng(left).integers(0, 255, 4 << 20, dtype=np.uint8)[:length]), tag
if n > 1 and w._transport(right) == "shm":
    assert w._shm_lent() - lent == 2, (lent, w._shm_lent())

# Longer than the runtime's largest message (16 MiB): sent in pieces once
# its receiver has matched it, which a blocking send waits for. Around the
# ring, Isend before Recv; and objects by sendrecv, whose posted receive is
# matched while its send waits.
big = np.random.default_rng(r).integers(0, 255, 40 << 20, dtype=np.uint8)
expected = np.random.default_rng(left).integers(0, 255, 40 << 20, dtype=np.uint8)
req = w.Isend(big, dest=right, tag=31)
into = np.empty_like(big)
st = bulkwire.Status()
w.Recv(into, source=left, tag=31, status=st)
assert req.wait() is None and st.count == big.nbytes and np.array_equal(into, expected)
obj = w.sendrecv({"from": r, "data": big.tobytes()}, dest=right, sendtag=32, source=left, recvtag=32)
assert obj["from"] == left and obj["data"] == expected.tobytes()

# sendrecv.
assert w.sendrecv(("sr", r), dest=right, sendtag=40, source=left, recvtag=40) == ("sr", left)

# Bad arguments: clear errors, and the job goes on.
for bad, expected in [
    (lambda: w.send(1, dest=n), f"rank {n} does not exist"),
    (lambda: w.send(1, dest=0, tag=-5), "tag -5"),
    (lambda: w.recv(source=n + 3), f"source {n + 3} does not exist"),
    (lambda: w.Send(object(), dest=0), "expected a buffer"),
    (lambda: w.Recv(b"read-only", source=0), "read-only"),
    (lambda: w.Send(np.arange(10)[::2], dest=0), "not contiguous"),
]:
    try:
        bad()
        raise SystemExit(f"no error for {expected!r}")
    except (ValueError, TypeError, bulkwire.Error) as e:
        assert expected in str(e), (expected, str(e))

# A message longer than the receive buffer is an error naming both sizes.
w.Send(np.zeros(8, np.uint8), dest=right, tag=50)
try:
    w.Recv(np.zeros(4, np.uint8), source=left, tag=50)
    raise SystemExit("a truncating receive succeeded")
except bulkwire.Error as e:
    assert "has 8 bytes, the buffer 4" in str(e), e
w.barrier()
print(f"p2p ok {r}")
