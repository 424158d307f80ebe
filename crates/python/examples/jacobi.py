"""Jacobi iteration for Laplace's equation on an n × n grid, split by rows:
each process exchanges its boundary rows with its neighbours (Sendrecv of
NumPy rows) and an allreduce of the largest change decides when to stop.

    python -m bulkwire.run -n 4 crates/python/examples/jacobi.py [--n 128] [--tol 1e-4]

The check: rank 0 runs the same iteration serially on the whole grid and
the gathered parallel solution equals it (the same arithmetic in the same
order, so to the last bit), after the same number of iterations.
"""

import argparse

import numpy as np

import bulkwire


def boundary(n: int) -> np.ndarray:
    """The grid with its fixed edges: 1 on the top edge, 0 elsewhere."""
    grid = np.zeros((n, n))
    grid[0, :] = 1.0
    return grid


def sweep(u: np.ndarray) -> tuple[np.ndarray, float]:
    new = u.copy()
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return new, float(np.abs(new - u).max()) if u.size else 0.0


def serial(n: int, tol: float, limit: int) -> tuple[np.ndarray, int]:
    u = boundary(n)
    for it in range(1, limit + 1):
        u, change = sweep(u)
        if change < tol:
            return u, it
    return u, limit


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--limit", type=int, default=20_000)
    args = parser.parse_args()
    w = bulkwire.World()
    r, size, n = w.rank, w.size, args.n
    if n - 2 < size:
        raise SystemExit(f"--n {n} is too small for {size} processes")
    # Interior rows 1..n-2 split in blocks; each block with a ghost row
    # above and below.
    inner = np.array_split(np.arange(1, n - 1), size)[r]
    lo, hi = inner[0], inner[-1]
    u = boundary(n)[lo - 1 : hi + 2].copy()
    up, down = r - 1, r + 1
    change = np.zeros(1)
    start = w.wtime()
    for it in range(1, args.limit + 1):
        new = u.copy()
        new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        local = np.array([np.abs(new[1:-1] - u[1:-1]).max()])
        u = new
        requests = []
        if up >= 0:
            requests.append(w.Irecv(u[0], source=up, tag=1))
            w.Send(u[1], dest=up, tag=2)
        if down < size:
            requests.append(w.Irecv(u[-1], source=down, tag=2))
            w.Send(u[-2], dest=down, tag=1)
        bulkwire.Request.waitall(requests)
        w.Allreduce(local, change, op=bulkwire.MAX)
        if change[0] < args.tol:
            break
    elapsed = w.wtime() - start
    rows = w.gather(u[1:-1], root=0)
    if r == 0:
        whole = boundary(n)
        whole[1 : n - 1] = np.concatenate(rows)
        expected, iterations = serial(n, args.tol, args.limit)
        assert iterations == it, f"{it} iterations in parallel, {iterations} serially"
        assert np.array_equal(whole, expected), f"largest difference {np.abs(whole - expected).max()}"
        print(f"{n}x{n} grid: {it} iterations on {size} processes in {elapsed:.3f} s; "
              f"matches the serial solution")


if __name__ == "__main__":
    main()
