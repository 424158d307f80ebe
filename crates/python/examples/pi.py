"""π by Monte Carlo: each process throws its share of points at the unit
square, and an allreduce adds up the hits.

    python -m bulkwire.run -n 4 crates/python/examples/pi.py [--samples N]

The check: the estimate's error is within 5 standard errors of the
binomial count (about 0.5% for a million samples), and the total of hits
equals what rank 0 computes alone from every process's seed (the same
numbers, so the allreduce lost or doubled nothing).
"""

import argparse
import math

import numpy as np

import bulkwire


def hits(seed: int, samples: int) -> int:
    points = np.random.default_rng(seed).random((samples, 2))
    return int(np.count_nonzero((points**2).sum(axis=1) <= 1.0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples in all")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    world = bulkwire.World()
    share = [args.samples // world.size + (r < args.samples % world.size) for r in range(world.size)]
    start = world.wtime()
    mine = np.array([hits(args.seed + world.rank, share[world.rank])], dtype=np.int64)
    total = np.zeros(1, dtype=np.int64)
    world.Allreduce(mine, total, op=bulkwire.SUM)
    estimate = 4.0 * total[0] / args.samples
    elapsed = world.wtime() - start
    if world.rank == 0:
        serial = sum(hits(args.seed + r, share[r]) for r in range(world.size))
        assert serial == total[0], f"allreduce gave {total[0]} hits, the serial count is {serial}"
        p = math.pi / 4
        tolerance = 5 * 4 * math.sqrt(p * (1 - p) / args.samples)
        assert abs(estimate - math.pi) < tolerance, f"{estimate} is farther than {tolerance} from pi"
        print(f"pi ≈ {estimate:.6f} (error {estimate - math.pi:+.2e}, {args.samples} samples on "
              f"{world.size} processes, {elapsed:.3f} s)")


if __name__ == "__main__":
    main()
