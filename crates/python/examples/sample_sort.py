"""Sample sort of NumPy arrays in BSP: each process sorts its keys, picks
regular samples, every process gets every sample (puts), all choose the
same splitters, and keys go to their bucket's process as BSMP messages.

    python -m bulkwire.run -n 4 crates/python/examples/sample_sort.py [--n KEYS]

The check: the buckets are in order across processes, each is sorted, and
together they are exactly the sorted input (rank 0 regenerates all keys
from the seeds and compares).
"""

import argparse

import numpy as np

import bulkwire


def keys_of(seed: int, rank: int, count: int) -> np.ndarray:
    return np.random.default_rng([seed, rank]).integers(0, 1 << 40, count, dtype=np.int64)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000, help="keys in all")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with bulkwire.bsp() as bsp:
        p, s = bsp.pid, bsp.nprocs
        counts = [args.n // s + (r < args.n % s) for r in range(s)]
        keys = np.sort(keys_of(args.seed, p, counts[p]))
        start = bsp.time()

        # Superstep 1: each process's keys at the quantiles (j + 1/2)/k,
        # k = 4s regular samples, to every process.
        k = 4 * s
        samples = np.zeros(s * k, dtype=np.int64)
        bsp.push_reg(samples)
        bsp.sync()
        at = ((np.arange(k) + 0.5) * len(keys) / k).astype(int)
        mine = keys[at] if len(keys) else np.zeros(k, np.int64)
        for q in range(s):
            bsp.put(q, mine, samples, offset=p * k)
        bsp.sync()

        # Superstep 2: the same s - 1 splitters everywhere (the samples at
        # the quantiles i/s); keys to their buckets' processes.
        splitters = np.sort(samples)[np.arange(1, s) * k]
        bucket = np.searchsorted(splitters, keys, side="right")
        for q in range(s):
            part = keys[bucket == q]
            if len(part):
                bsp.send(q, part)
        bsp.sync()
        received = [np.frombuffer(payload, dtype=np.int64) for _, payload in bsp.messages()]
        mine = np.sort(np.concatenate(received)) if received else np.zeros(0, np.int64)
        elapsed = bsp.time() - start

        # Check: gather the buckets at process 0 through messages.
        bsp.send(0, np.concatenate([[p], mine]))
        bsp.sync()
        if p == 0:
            buckets = sorted((np.frombuffer(m, np.int64) for _, m in bsp.messages()), key=lambda b: b[0])
            result = np.concatenate([b[1:] for b in buckets])
            expected = np.sort(np.concatenate([keys_of(args.seed, r, counts[r]) for r in range(s)]))
            assert np.array_equal(result, expected), "the buckets are not the sorted input"
            sizes = [len(b) - 1 for b in buckets]
            print(f"sorted {args.n} keys on {s} processes in {elapsed:.3f} s; bucket sizes {sizes}")


if __name__ == "__main__":
    main()
