//! Who sends to whom in a collective: the trees and rings of seed 004 §3
//! and of the MPI libraries, computed from a view's member list alone, so
//! that every member derives the same shape without a message.
//!
//! Positions are relative to the root: the root is 0, and the member at
//! view position `p` is `(p - root) mod n`.

use std::fmt;
use std::str::FromStr;

/// How a collective moves its data; chosen per group and operation at run
/// time (seed 004 §4), or by [`choose`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// The root sends to every member (or every member to the root).
    Flat,
    /// A binary tree rooted at the sender, in view order: NCS's multicast
    /// tree (seed 004 §3.2).
    BinaryTree,
    /// A binomial tree: ⌈log2 n⌉ rounds, the fewest for a small message.
    Binomial,
    /// A pipelined chain: each member passes each piece to the next.
    Chain,
    /// Broadcast as a scatter (binomial) and an allgather (ring): each link
    /// carries about the message once, for large messages.
    ScatterAllgather,
    /// Allreduce and allgather around a ring: reduce-scatter, then allgather.
    Ring,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Flat,
        Algorithm::BinaryTree,
        Algorithm::Binomial,
        Algorithm::Chain,
        Algorithm::ScatterAllgather,
        Algorithm::Ring,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Flat => "flat",
            Algorithm::BinaryTree => "tree",
            Algorithm::Binomial => "binomial",
            Algorithm::Chain => "chain",
            Algorithm::ScatterAllgather => "scatter-allgather",
            Algorithm::Ring => "ring",
        }
    }

    /// Whether `op` can run this way.
    pub fn supports(self, op: Operation) -> bool {
        use Algorithm::*;
        use Operation::*;
        match op {
            Bcast => matches!(self, Flat | BinaryTree | Binomial | Chain | ScatterAllgather),
            Reduce => matches!(self, Flat | BinaryTree | Binomial | Chain),
            Allreduce => matches!(self, Flat | BinaryTree | Binomial | Chain | Ring),
            Gather | Scatter => matches!(self, Flat | Binomial),
            Allgather => matches!(self, Flat | Ring),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Algorithm, String> {
        Algorithm::ALL.into_iter().find(|a| a.name() == s.trim()).ok_or_else(|| {
            let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!("{s:?} is not an algorithm: one of {}", names.join(", "))
        })
    }
}

/// The collectives whose algorithm a group can choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
}

impl Operation {
    pub const ALL: [Operation; 6] = [
        Operation::Bcast,
        Operation::Reduce,
        Operation::Allreduce,
        Operation::Gather,
        Operation::Scatter,
        Operation::Allgather,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::Bcast => "bcast",
            Operation::Reduce => "reduce",
            Operation::Allreduce => "allreduce",
            Operation::Gather => "gather",
            Operation::Scatter => "scatter",
            Operation::Allgather => "allgather",
        }
    }
}

impl FromStr for Operation {
    type Err = String;
    fn from_str(s: &str) -> Result<Operation, String> {
        Operation::ALL.into_iter().find(|o| o.name() == s.trim()).ok_or_else(|| {
            let names: Vec<_> = Operation::ALL.iter().map(|o| o.name()).collect();
            format!("{s:?} is not a collective: one of {}", names.join(", "))
        })
    }
}

/// The automatic choice, by message size (bytes per member), group size,
/// and whether a host's processes share its cores: the fewest rounds for small
/// messages, the fewest bytes per link for large ones. Where processes
/// share cores, every relay waits for one, so broadcasts go straight from
/// the root up to 1 MiB, and reductions below 16 KiB (measured with 8
/// processes on 2 cores: broadcast of 32 KiB flat 210-257 us against
/// binomial 353-362; allreduce of 8 B to 4 KiB flat 5-25% below binomial).
/// Measured with `bulkwire bench bcast` and `bench allreduce`
/// (docs/BENCHMARKS.md).
pub fn choose(op: Operation, bytes: usize, members: usize, shares_cores: bool) -> Algorithm {
    if members <= 2 {
        return Algorithm::Flat;
    }
    match op {
        Operation::Bcast if shares_cores && bytes <= 1 << 20 => Algorithm::Flat,
        Operation::Bcast if shares_cores => Algorithm::Binomial,
        Operation::Reduce | Operation::Allreduce if shares_cores && bytes < 16 << 10 => Algorithm::Flat,
        Operation::Bcast if bytes >= 512 << 10 && members >= 4 => Algorithm::ScatterAllgather,
        Operation::Bcast if bytes >= 64 << 10 => Algorithm::BinaryTree,
        Operation::Allreduce if bytes >= 64 << 10 => Algorithm::Ring,
        Operation::Allgather => Algorithm::Ring,
        Operation::Gather | Operation::Scatter if bytes >= 64 << 10 || shares_cores => Algorithm::Flat,
        _ => Algorithm::Binomial,
    }
}

/// The tree of `algorithm` over `n` members: the parent and children of
/// relative position `r`, children in the order they are served (the
/// largest subtree first).
pub fn tree(algorithm: Algorithm, n: usize, r: usize) -> (Option<usize>, Vec<usize>) {
    debug_assert!(r < n);
    match algorithm {
        Algorithm::Flat => match r {
            0 => (None, (1..n).collect()),
            _ => (Some(0), Vec::new()),
        },
        Algorithm::BinaryTree => {
            let parent = (r > 0).then(|| (r - 1) / 2);
            (parent, [2 * r + 1, 2 * r + 2].into_iter().filter(|&c| c < n).collect())
        }
        Algorithm::Chain => ((r > 0).then(|| r - 1), (r + 1 < n).then_some(r + 1).into_iter().collect()),
        // Binomial, and the trees of the other algorithms' phases: the
        // subtree of r is the positions r .. r + lowest_bit(r).
        _ => {
            let parent = (r > 0).then(|| r - lowest_bit(r));
            let limit = if r == 0 { n.next_power_of_two() } else { lowest_bit(r) };
            let mut children = Vec::new();
            let mut step = 1;
            while step < limit && r + step < n {
                children.push(r + step);
                step <<= 1;
            }
            children.reverse();
            (parent, children)
        }
    }
}

/// The relative positions in the binomial subtree rooted at `r`: `r` and
/// the `span - 1` positions after it.
pub fn binomial_span(n: usize, r: usize) -> usize {
    if r == 0 {
        n
    } else {
        lowest_bit(r).min(n - r)
    }
}

/// The positions in the subtree rooted at `r` of a flat or binomial tree
/// (consecutive from `r`): what a gather collects there.
pub fn subtree_span(algorithm: Algorithm, n: usize, r: usize) -> usize {
    match (algorithm, r) {
        (Algorithm::Flat, 0) => n,
        (Algorithm::Flat, _) => 1,
        _ => binomial_span(n, r),
    }
}

fn lowest_bit(r: usize) -> usize {
    r & r.wrapping_neg()
}

/// Whom `me` passes a post of `origin` on to, in a view of `members`: its
/// children in the binary tree rooted at the poster (seed 004's multicast
/// tree). `None` if either is not a member of the view.
pub fn post_children(members: &[u32], origin: u32, me: u32) -> Option<Vec<u32>> {
    let n = members.len();
    let from = members.iter().position(|&r| r == origin)?;
    let mine = members.iter().position(|&r| r == me)?;
    let (_, children) = tree(Algorithm::BinaryTree, n, (mine + n - from) % n);
    Some(children.iter().map(|&c| members[(from + c) % n]).collect())
}

/// Splits `len` elements into `parts` nearly equal consecutive ranges.
pub fn split(len: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let (each, extra) = (len / parts, len % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let size = each + usize::from(i < extra);
            let range = start..start + size;
            start += size;
            range
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tree reaches every member exactly once from the root, and
    /// parent and children agree.
    #[test]
    fn every_tree_spans_the_group_and_agrees_with_itself() {
        for algorithm in [Algorithm::Flat, Algorithm::BinaryTree, Algorithm::Binomial, Algorithm::Chain] {
            for n in 1..70 {
                let mut reached = vec![0; n];
                reached[0] = 1;
                for r in 0..n {
                    let (parent, children) = tree(algorithm, n, r);
                    assert_eq!(parent.is_none(), r == 0);
                    for c in children {
                        assert_eq!(tree(algorithm, n, c).0, Some(r), "{algorithm} n={n}");
                        reached[c] += 1;
                    }
                }
                assert!(reached.iter().all(|&x| x == 1), "{algorithm} n={n}: {reached:?}");
            }
        }
    }

    #[test]
    fn binomial_subtrees_are_consecutive_spans() {
        for n in 1..70 {
            for r in 0..n {
                let (_, children) = tree(Algorithm::Binomial, n, r);
                let below: usize = children.iter().map(|&c| binomial_span(n, c)).sum();
                assert_eq!(binomial_span(n, r), 1 + below, "n={n} r={r}");
                for &c in &children {
                    assert!(c > r && c + binomial_span(n, c) <= r + binomial_span(n, r));
                }
            }
        }
    }

    #[test]
    fn a_binomial_tree_has_log_depth() {
        let depth = |mut r: usize| {
            let mut d = 0;
            while let Some(p) = tree(Algorithm::Binomial, 64, r).0 {
                r = p;
                d += 1;
            }
            d
        };
        assert_eq!((0..64).map(depth).max(), Some(6));
        assert_eq!(tree(Algorithm::Binomial, 8, 0).1, vec![4, 2, 1]);
    }

    #[test]
    fn split_covers_everything_in_order() {
        for len in 0..40 {
            for parts in 1..9 {
                let ranges = split(len, parts);
                assert_eq!(ranges.len(), parts);
                assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), len);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            }
        }
    }

    #[test]
    fn the_automatic_choice_avoids_relays_where_processes_share_cores() {
        use Operation::*;
        assert_eq!(choose(Bcast, 32 << 10, 8, false), Algorithm::Binomial);
        assert_eq!(choose(Bcast, 32 << 10, 8, true), Algorithm::Flat);
        assert_eq!(choose(Bcast, 4 << 20, 8, false), Algorithm::ScatterAllgather);
        assert_eq!(choose(Bcast, 4 << 20, 8, true), Algorithm::Binomial);
        assert_eq!(choose(Allreduce, 8, 8, true), Algorithm::Flat);
        assert_eq!(choose(Allreduce, 8, 8, false), Algorithm::Binomial);
        assert_eq!(choose(Allreduce, 1 << 20, 8, true), Algorithm::Ring);
        assert_eq!(choose(Bcast, 1 << 30, 2, false), Algorithm::Flat);
        for op in Operation::ALL {
            for bytes in [0, 8, 1 << 16, 1 << 22] {
                for shares in [false, true] {
                    assert!(choose(op, bytes, 8, shares).supports(op), "{op:?} {bytes} {shares}");
                }
            }
        }
    }

    #[test]
    fn names_round_trip_and_bad_ones_are_named() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
        }
        assert!("fast".parse::<Algorithm>().unwrap_err().contains("flat, tree, binomial"));
    }
}
