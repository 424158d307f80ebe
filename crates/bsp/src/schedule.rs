//! Phase 4 of the sync: destination scheduling (seed 002 §3).
//!
//! If every process sent to process 0 first, then to 1, and so on, each
//! receiver in turn would be bombarded while the others idle. A latin
//! square avoids that: in round r process i sends to (i + r) mod p, so in
//! every round each process receives from exactly one sender. `pid` order
//! (the naive one) and a `random` order are kept for comparison.

use std::str::FromStr;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use smallvec::SmallVec;

/// One entry per process, held inline up to 16 processes: a sync builds
/// several such lists, and on a host of a few processes they then cost no
/// allocation.
pub type PerProcess<T> = SmallVec<[T; 16]>;

/// The order in which a process visits its destinations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Round r: process i sends to (i + r) mod p.
    #[default]
    Latin,
    /// Every process sends to 0, 1, 2, … in turn.
    Pid,
    /// A pseudo-random permutation per process and superstep (seeded, so
    /// every process can compute every other's).
    Random,
}

impl Order {
    pub const ALL: [Order; 3] = [Order::Latin, Order::Pid, Order::Random];

    pub fn name(self) -> &'static str {
        match self {
            Order::Latin => "latin",
            Order::Pid => "pid",
            Order::Random => "random",
        }
    }
}

impl std::fmt::Display for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Order {
    type Err = String;

    fn from_str(s: &str) -> Result<Order, String> {
        match s.trim() {
            "latin" => Ok(Order::Latin),
            "pid" => Ok(Order::Pid),
            "random" => Ok(Order::Random),
            other => Err(format!("unknown destination order {other:?} (latin, pid or random)")),
        }
    }
}

/// Process `pid`'s destinations in round order: entry r is the process it
/// sends to in round r (itself included, where its local share goes).
pub fn rounds(order: Order, pid: u32, p: u32, superstep: u64) -> PerProcess<u32> {
    match order {
        Order::Latin => (0..p).map(|r| (pid + r) % p).collect(),
        Order::Pid => (0..p).collect(),
        Order::Random => {
            let mut perm: PerProcess<u32> = (0..p).collect();
            // Every process computes every other's permutation (see
            // `schedule`), so it depends on nothing but (superstep, pid):
            // the superstep seeds ChaCha, which is portable, and each
            // process draws from its own stream of that seed.
            let mut rng = ChaCha8Rng::seed_from_u64(superstep);
            rng.set_stream(u64::from(pid));
            for i in (1..perm.len()).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                perm.swap(i, j);
            }
            perm
        }
    }
}

/// One destination of this process's schedule: where to, and how many
/// senders (this one included) the schedule makes target the same
/// receiver in the same round, if every process keeps to its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visit {
    pub to: u32,
    pub contention: u32,
}

/// `pid`'s schedule for this superstep: the destinations it sends to
/// (`talks(from, to)`, itself excluded), in order, each with its contention.
pub fn schedule(order: Order, pid: u32, p: u32, superstep: u64, talks: impl Fn(u32, u32) -> bool) -> PerProcess<Visit> {
    let all: Vec<PerProcess<u32>> = match order {
        // Only the random order needs everyone's permutation; the others
        // are closed forms.
        Order::Random => (0..p).map(|j| rounds(order, j, p, superstep)).collect(),
        _ => Vec::new(),
    };
    let at = |j: u32, round: usize| match order {
        Order::Latin => (j + round as u32) % p,
        Order::Pid => round as u32,
        Order::Random => all[j as usize][round],
    };
    let mine = rounds(order, pid, p, superstep);
    mine.iter()
        .enumerate()
        .filter(|&(_, &to)| to != pid && talks(pid, to))
        .map(|(round, &to)| {
            let contention = match order {
                // A latin square has one sender per receiver in each round:
                // no scan of every sender (O(p) a destination, O(p²) a
                // schedule).
                Order::Latin => 1,
                _ => (0..p).filter(|&j| j != to && at(j, round) == to && talks(j, to)).count() as u32,
            };
            Visit { to, contention: contention.max(1) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin_square_gives_each_receiver_one_sender_per_round() {
        for p in 1..=16 {
            let table: Vec<Vec<u32>> = (0..p).map(|i| rounds(Order::Latin, i, p, 0).to_vec()).collect();
            for r in 0..p as usize {
                let mut column: Vec<u32> = table.iter().map(|row| row[r]).collect();
                column.sort();
                assert_eq!(column, (0..p).collect::<Vec<_>>(), "p={p} round {r}");
            }
            for row in &table {
                let mut row = row.clone();
                row.sort();
                assert_eq!(row, (0..p).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn contention_of_a_total_exchange_per_order() {
        let p = 8;
        let all = |a: u32, b: u32| a != b;
        for pid in 0..p {
            let latin = schedule(Order::Latin, pid, p, 3, all);
            assert_eq!(latin.len(), 7);
            assert!(latin.iter().all(|v| v.contention == 1), "{latin:?}");
            assert_eq!(latin[0].to, (pid + 1) % p);
            // pid order: everyone hits the same receiver at once.
            let naive = schedule(Order::Pid, pid, p, 3, all);
            assert_eq!(
                naive.iter().map(|v| v.to).collect::<Vec<_>>(),
                (0..p).filter(|&d| d != pid).collect::<Vec<_>>()
            );
            assert!(naive.iter().all(|v| v.contention == 7));
            let random = schedule(Order::Random, pid, p, 3, all);
            let mut to: Vec<u32> = random.iter().map(|v| v.to).collect();
            to.sort();
            assert_eq!(to, (0..p).filter(|&d| d != pid).collect::<Vec<_>>());
        }
        // Random orders are reproducible and change between supersteps.
        assert_eq!(rounds(Order::Random, 2, 8, 5), rounds(Order::Random, 2, 8, 5));
        assert_ne!(rounds(Order::Random, 2, 8, 5), rounds(Order::Random, 2, 8, 6));
    }

    #[test]
    fn only_destinations_with_traffic_are_visited() {
        // Everyone sends to 0 only: contention is the in-degree in pid order.
        let to_zero = |a: u32, b: u32| b == 0 && a != 0;
        let s = schedule(Order::Pid, 3, 4, 0, to_zero);
        assert_eq!(s.as_slice(), [Visit { to: 0, contention: 3 }]);
        assert!(schedule(Order::Latin, 0, 4, 0, to_zero).is_empty());
        assert_eq!("random".parse::<Order>(), Ok(Order::Random));
        assert!("zigzag".parse::<Order>().is_err());
    }
}
