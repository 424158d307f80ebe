"""Collectives of the job on objects and buffers, every root, checked."""
import numpy as np

import bulkwire

w = bulkwire.World()
r, n = w.rank, w.size
DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]

for root in range(n):
    # Objects.
    assert w.bcast({"root": root, "data": [root] * 3} if r == root else None, root=root) == {
        "root": root, "data": [root] * 3}
    gathered = w.gather((r, "x" * r), root=root)
    assert gathered == ([(i, "x" * i) for i in range(n)] if r == root else None), gathered
    assert w.scatter([{"to": i} for i in range(n)] if r == root else None, root=root) == {"to": r}
    assert w.reduce(r + 1, op=bulkwire.PROD, root=root) == (np.prod(range(1, n + 1)) if r == root else None)
    assert w.reduce([r], root=root) == (list(range(n)) if r == root else None)
    # Buffers, every size class.
    for size in [0, 1, 1000, 300_000]:
        buf = np.arange(size, dtype=np.float64) + root if r == root else np.zeros(size)
        w.Bcast(buf, root=root)
        assert np.array_equal(buf, np.arange(size, dtype=np.float64) + root), (root, size)
        send = np.full(size, r, dtype=np.int32)
        out = np.zeros(size * n, dtype=np.int32) if r == root else None
        w.Gather(send, out, root=root)
        if r == root:
            assert np.array_equal(out, np.repeat(np.arange(n, dtype=np.int32), size)), (root, size)
        blocks = np.repeat(np.arange(n, dtype=np.int16), size) * 3 if r == root else None
        mine = np.zeros(size, dtype=np.int16)
        w.Scatter(blocks, mine, root=root)
        assert np.all(mine == 3 * r), (root, size)
    for dtype in DTYPES:
        send = (np.arange(100) % 7 + r).astype(dtype)
        out = np.zeros(100, dtype=dtype) if r == root else None
        w.Reduce(send, out, op=bulkwire.MAX, root=root)
        if r == root:
            assert np.array_equal(out, (np.arange(100) % 7 + n - 1).astype(dtype)), dtype

for dtype in DTYPES:
    for op, expected in [(bulkwire.SUM, sum(range(n))), (bulkwire.MIN, 0), (bulkwire.MAX, n - 1)]:
        send = np.full(257, r, dtype=dtype)
        out = np.zeros(257, dtype=dtype)
        w.Allreduce(send, out, op=op)
        assert np.all(out == expected), (dtype, op, out[:4])
inplace = np.full(10, r + 1.0)
w.Allreduce(bulkwire.IN_PLACE, inplace, op=bulkwire.PROD)
assert np.allclose(inplace, np.prod(np.arange(1, n + 1, dtype=float)))
# A function of two arrays as the operation.
out = np.zeros(5)
w.Allreduce(np.full(5, float(r)), out, op=lambda a, b: np.hypot(a, b))
assert np.allclose(out, np.sqrt(sum(i * i for i in range(n)))), out
red = np.zeros(3)
w.Reduce(np.full(3, r + 1.0), red if r == 0 else None, op=lambda a, b: a * b, root=0)
if r == 0:
    assert np.allclose(red, np.prod(np.arange(1, n + 1, dtype=float)))
# Objects with the built-in operations and functions.
assert w.allreduce(r, op=bulkwire.SUM) == sum(range(n))
assert w.allreduce({r}, op=lambda a, b: a | b) == set(range(n))
assert w.allgather(r * 2) == [2 * i for i in range(n)]
all_of = np.zeros(n * 3, dtype=np.int64)
w.Allgather(np.full(3, r, dtype=np.int64), all_of)
assert np.array_equal(all_of, np.repeat(np.arange(n), 3))

# A large broadcast and allreduce (8 MiB).
big = np.arange(1 << 20, dtype=np.float64) if r == 0 else np.zeros(1 << 20)
w.Bcast(big, root=0)
assert np.array_equal(big, np.arange(1 << 20, dtype=np.float64))
w.Allreduce(bulkwire.IN_PLACE, big, op=bulkwire.SUM)
assert np.array_equal(big, np.arange(1 << 20, dtype=np.float64) * n)

# Bad arguments.
for bad, expected in [
    (lambda: w.Allreduce(np.zeros(3, dtype=np.complex64), np.zeros(3, dtype=np.complex64)), "cannot reduce"),
    (lambda: w.Allreduce(np.zeros(3), np.zeros(4)), "must match"),
    (lambda: w.scatter([1] * (n + 1) if r == 0 else None, root=0) if r == 0 else (_ for _ in ()).throw(
        ValueError("one item per member")), "one item per member"),
]:
    try:
        bad()
        raise SystemExit(f"no error for {expected!r}")
    except (ValueError, TypeError, bulkwire.Error) as e:
        assert expected in str(e), (expected, str(e))
w.barrier()
print(f"collectives ok {r}")
