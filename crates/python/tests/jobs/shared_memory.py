"""Shared memory from Python: PRAM order seen while others write, coherent
writes ending equal, arrays in and out, and errors."""
import numpy as np

import bulkwire

w = bulkwire.World()
r, n = w.rank, w.size
mem = bulkwire.SharedMemory()
a = mem.map("a", n, dtype="int64")
b = mem.map("b", n, dtype="int64")
f = mem.map("f", 4 * n, dtype="float32")
c = mem.map("c", 1, dtype="float64")
assert len(a) == n and a.name == "a" and a.dtype == "int64"
seen = [0] * n
for i in range(1, 501):
    a.write(r, i, semantics="pram")
    b.write(r, i, semantics="pram")
    for q in range(n):
        bq = b[q]
        assert a[q] >= bq >= seen[q], (q, a[q], bq, seen[q])
        seen[q] = bq
f.write_array(4 * r, np.arange(4, dtype=np.float32) + r, semantics="slow")
c.write(0, float(r), semantics="coherent")
mem.fence()
assert [a[q] for q in range(n)] == [500] * n and b[-1] == 500
out = np.zeros(4 * n, dtype=np.float32)
f.read_into(out)
assert np.array_equal(out, np.concatenate([np.arange(4, dtype=np.float32) + q for q in range(n)])), out
assert w.allgather(c[0]) == [c[0]] * n
for bad, expected in [
    (lambda: a.write(n, 1), "out of range"),
    (lambda: a[n + 5], "out of range"),
    (lambda: a.write(0, 1, semantics="strong"), "not a write semantics"),
    (lambda: f.write_array(0, np.zeros(2)), "holds f32, the array f64"),
    (lambda: mem.map("g", 3, dtype="complex"), "not a segment type"),
    (lambda: mem.map("a", 3), "mapped already"),
]:
    try:
        bad()
        raise SystemExit(f"no error for {expected!r}")
    except (ValueError, TypeError, IndexError, bulkwire.Error) as e:
        assert expected in str(e), (expected, str(e))
mem.fence()
print(f"shared memory ok {r}")
