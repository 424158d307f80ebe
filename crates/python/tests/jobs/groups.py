"""Groups created, found, joined and left at run time, with collectives
and posts among their members (run with 4 processes or more)."""
import numpy as np

import bulkwire

w = bulkwire.World()
r, n = w.rank, w.size
assert n >= 4, "run with 4 processes or more"
evens = list(range(0, n, 2))

# Rank 0 creates the group of the even ranks; the others find it.
if r == 0:
    g = w.create_group("evens", evens[1:])
elif r in evens:
    g = w.find_group("evens")
else:
    g = None
if g is not None:
    assert g.name == "evens" and g.members == evens and g.view == 1, g
    assert g.position == evens.index(r)
    for root in evens:
        assert g.bcast(f"from {root}" if r == root else None, root=root) == f"from {root}"
        buf = np.full(1000, root, dtype=np.int64) if r == root else np.zeros(1000, dtype=np.int64)
        g.Bcast(buf, root=root)
        assert np.all(buf == root)
    total = np.zeros(4)
    g.Allreduce(np.full(4, float(r)), total)
    assert np.all(total == sum(evens)), total
    assert g.allgather(r) == evens
    assert g.gather(r, root=evens[-1]) == (evens if r == evens[-1] else None)
    # Every algorithm gives the same broadcast.
    for algorithm in ["flat", "tree", "binomial", "chain", "scatter-allgather"]:
        g.set_algorithm("bcast", algorithm)
        data = np.arange(70_000, dtype=np.uint8) if r == 0 else np.zeros(70_000, dtype=np.uint8)
        g.Bcast(data, root=0)
        assert np.array_equal(data, np.arange(70_000, dtype=np.uint8)), algorithm
    g.set_algorithm("bcast", None)
    # Confirmed delivery: the root hears one acknowledgement per child.
    g.set_delivery("confirmed")
    g.Bcast(np.zeros(8), root=0)
    g.set_delivery("sent")
    # Posts: no common call; each member receives every other's.
    g.post(("post", r), tag=5)
    got = sorted(g.recv_post(tag=5) for _ in range(len(evens) - 1))
    assert got == sorted(("post", m) for m in evens if m != r), got
    assert g.recv_post(tag=5, block=False) is None
    # Best-effort posts: nothing is lost between processes of one host.
    g.set_best_effort(True)
    g.post(("best effort", r), tag=6)
    got = sorted(g.recv_post(tag=6) for _ in range(len(evens) - 1))
    assert got == sorted(("best effort", m) for m in evens if m != r), got
    g.set_best_effort(False)
    try:
        g.set_algorithm("bcast", "no-such")
        raise SystemExit("a bad algorithm was accepted")
    except ValueError as e:
        assert "is not an algorithm" in str(e), e
w.barrier()

# Rank 1 creates a group of its own, which the other odd ranks then join.
if r == 1:
    odd = w.create_group("odds", [])
w.barrier()
if r % 2 == 1 and r != 1:
    odd = w.join_group("odds")
if r % 2 == 1:
    odd.wait_members(len(range(1, n, 2)))
    assert sorted(odd.members) == list(range(1, n, 2)), odd.members
    assert odd.allreduce(1) == len(odd.members)
    odd.barrier()
    if r != 1:
        odd.leave()
    else:
        odd.wait_members(1)
        odd.destroy()
w.barrier()
# A name already taken is refused with a clear error.
if r == 0:
    try:
        w.create_group("evens", [])
        raise SystemExit("a second group 'evens' was created")
    except bulkwire.Error as e:
        assert "evens" in str(e), e
print(f"groups ok {r}")
