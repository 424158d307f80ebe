//! Phase 1 of the sync: the barrier is an OR reduction of every process's
//! row of the communication bit-matrix (seed 002 §3, step 2).
//!
//! The reduction is a tree in which every process is the root of its own
//! tree (the dissemination pattern, n-way: Hoefler et al., "Fast barrier
//! synchronization for InfiniBand", 2006): with fan-out k, in round r a
//! process sends what it knows to the processes m·(k+1)^r ahead (m = 1..k)
//! and merges what comes from those as far behind. After ⌈log_(k+1) p⌉
//! rounds every process holds the whole matrix, with no broadcast back down.
//! Fan-out 1 is the classic dissemination barrier (log2 p rounds of one
//! message); fan-out p − 1 is one round in which everyone tells everyone.
//! Each round is a dependent step, paid in latency (and, when processes
//! share cores, in scheduling), while each message costs its sender and
//! receiver CPU time; the default, [`DEFAULT_FANOUT`], gives one round up to
//! 8 processes and two up to 64. This needs a merge that may see a
//! contribution twice (OR, max, min are idempotent), which is why every
//! field below merges that way.
//!
//! Besides the matrix, the same messages carry what every process must
//! agree on, each as the extremes (value, process) over the job: whether
//! the call is `bsp_end` or `bsp_sync`, the digest of the superstep's
//! registrations, the tag size for the next superstep, whether every
//! process sent all its streams before the barrier (which shapes the next
//! superstep's barrier, see `Bsp::reduce`). Each process's
//! total outgoing bytes ride along in a slot that only it writes, so every
//! process learns the global load.

use crate::error::Reason;

/// The value of one check, with the process it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Witness {
    pub value: u64,
    pub pid: u32,
    /// Extra detail for the error message (pushes and pops for registrations).
    pub detail: u64,
}

/// Smallest and largest value of a check over the processes merged so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extremes {
    pub min: Witness,
    pub max: Witness,
}

impl Extremes {
    pub fn of(value: u64, pid: u32, detail: u64) -> Extremes {
        let w = Witness { value, pid, detail };
        Extremes { min: w, max: w }
    }

    fn merge(&mut self, o: &Extremes) {
        if (o.min.value, o.min.pid) < (self.min.value, self.min.pid) {
            self.min = o.min;
        }
        if (o.max.value, o.max.pid) > (self.max.value, self.max.pid) {
            self.max = o.max;
        }
    }

    pub fn agree(&self) -> bool {
        self.min.value == self.max.value
    }

    /// No value: what a process contributes to a check it has no say in.
    /// Merging keeps the other side, so the first real value replaces it.
    fn none() -> Extremes {
        Extremes {
            min: Witness { value: u64::MAX, pid: u32::MAX, detail: 0 },
            max: Witness { value: 0, pid: 0, detail: 0 },
        }
    }

    /// Whether some process contributed a value.
    pub fn any(&self) -> bool {
        self.min.value <= self.max.value
    }
}

/// What the barrier reduces: two p × p bit-matrices (row i: the processes
/// i has puts or messages for, and those it asks gets of), everyone's
/// outgoing bytes, and the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    pub p: u32,
    words: Vec<u64>,
    asks: Vec<u64>,
    /// Bytes each process will send over the network in this superstep.
    pub out_bytes: Vec<u64>,
    /// 1 for `bsp_end`, 0 for `bsp_sync`.
    pub ending: Extremes,
    /// Digest of the superstep's `push_reg`/`pop_reg` sequence, from the
    /// processes that know which registration each of their pops removes
    /// (not those that popped NULL while several registrations of NULL
    /// could be meant: they take the choice of the others).
    pub registrations: Extremes,
    /// The same digest from every process, the undecided ones with their
    /// most recent registration of NULL: what counts when no process knows.
    pub registrations_all: Extremes,
    /// Tag size in effect in the next superstep (the low 48 bits) and how
    /// many times the process called `bsp_set_tagsize` in this one (above).
    pub tagsize: Extremes,
    /// 1 if the process sent a stream to every other process before the
    /// barrier (eagerly), else 0: the minimum says whether all did.
    pub eager_to_all: Extremes,
}

impl Reduction {
    /// Process `pid`'s contribution: its row and its checks.
    pub fn local(
        p: u32,
        pid: u32,
        sends_to: impl Fn(u32) -> bool,
        out_bytes: u64,
        ending: bool,
        registrations: (u64, u32, u32),
        tagsize: (u64, u32),
    ) -> Reduction {
        let mut r = Reduction {
            p,
            words: vec![0; (p as usize * p as usize).div_ceil(64)],
            asks: vec![0; (p as usize * p as usize).div_ceil(64)],
            out_bytes: vec![0; p as usize],
            ending: Extremes::of(u64::from(ending), pid, 0),
            registrations: Extremes::of(
                registrations.0,
                pid,
                u64::from(registrations.1) << 32 | u64::from(registrations.2),
            ),
            registrations_all: Extremes::of(
                registrations.0,
                pid,
                u64::from(registrations.1) << 32 | u64::from(registrations.2),
            ),
            tagsize: Extremes::of(
                u64::from(tagsize.1.min(0xffff)) << TAGSIZE_CALLS_SHIFT | tagsize.0.min(TAGSIZE_MAX),
                pid,
                0,
            ),
            eager_to_all: Extremes::of(0, pid, 0),
        };
        for to in (0..p).filter(|&to| sends_to(to)) {
            let bit = r.bit(pid, to);
            r.words[bit / 64] |= 1 << (bit % 64);
        }
        r.out_bytes[pid as usize] = out_bytes;
        r
    }

    /// Process `pid`'s row of the second matrix: whom it asks gets of.
    pub fn asking(mut self, pid: u32, asks_of: impl Fn(u32) -> bool) -> Reduction {
        for to in (0..self.p).filter(|&to| asks_of(to)) {
            let bit = self.bit(pid, to);
            self.asks[bit / 64] |= 1 << (bit % 64);
        }
        self
    }

    /// This process popped NULL while several registrations of NULL could be
    /// meant: it leaves the digest to the processes that know.
    pub fn undecided_registrations(mut self) -> Reduction {
        self.registrations = Extremes::none();
        self
    }

    /// Records whether process `pid` sent a stream to every other process
    /// before the barrier.
    pub fn eager_to_all(mut self, pid: u32, all: bool) -> Reduction {
        self.eager_to_all = Extremes::of(u64::from(all), pid, 0);
        self
    }

    /// Whether every process sent a stream to every other one before the
    /// barrier: a total exchange small enough to go eagerly.
    pub fn all_eager_to_all(&self) -> bool {
        self.eager_to_all.min.value == 1
    }

    fn bit(&self, from: u32, to: u32) -> usize {
        from as usize * self.p as usize + to as usize
    }

    /// Whether `from` has puts or messages for `to` in this superstep.
    pub fn talks(&self, from: u32, to: u32) -> bool {
        let bit = self.bit(from, to);
        self.words[bit / 64] >> (bit % 64) & 1 == 1
    }

    /// Whether `from` asks gets of `to` in this superstep.
    pub fn asks(&self, from: u32, to: u32) -> bool {
        let bit = self.bit(from, to);
        self.asks[bit / 64] >> (bit % 64) & 1 == 1
    }

    /// Whether a data stream goes from `from` to `to`: its puts and
    /// messages, or replies to the gets `to` asked of it.
    pub fn streams(&self, from: u32, to: u32) -> bool {
        self.talks(from, to) || self.asks(to, from)
    }

    /// Bytes of an encoded reduction of `p` processes.
    pub fn encoded_len(p: u32) -> usize {
        let words = (p as usize * p as usize).div_ceil(64);
        4 + 8 * (2 * words + p as usize) + CHECKS * 2 * (8 + 4 + 8)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Reduction::encoded_len(self.p));
        out.extend_from_slice(&self.p.to_le_bytes());
        for w in self.words.iter().chain(&self.asks).chain(&self.out_bytes) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for e in [&self.ending, &self.registrations, &self.registrations_all, &self.tagsize, &self.eager_to_all] {
            for w in [&e.min, &e.max] {
                out.extend_from_slice(&w.value.to_le_bytes());
                out.extend_from_slice(&w.pid.to_le_bytes());
                out.extend_from_slice(&w.detail.to_le_bytes());
            }
        }
        out
    }

    /// Decodes a peer's reduction for a job of `p` processes.
    pub fn decode(bytes: &[u8], p: u32) -> Result<Reduction, String> {
        let n = (p as usize * p as usize).div_ceil(64);
        let (mut words, mut asks, mut out_bytes) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::new());
        let [ending, registrations, registrations_all, tagsize, eager_to_all] =
            read(bytes, p, |part, _, x| match part {
                Part::Words => words.push(x),
                Part::Asks => asks.push(x),
                Part::OutBytes => out_bytes.push(x),
            })?;
        Ok(Reduction { p, words, asks, out_bytes, ending, registrations, registrations_all, tagsize, eager_to_all })
    }

    /// Merges a peer's encoded reduction into this one, read in place (a
    /// barrier merges one from every partner in every round): the
    /// matrices by OR, the byte counts by maximum, the checks by their
    /// extremes. After an error `self` may hold part of it: the sync fails
    /// with the error.
    pub fn merge_encoded(&mut self, bytes: &[u8]) -> Result<(), String> {
        let [ending, registrations, registrations_all, tagsize, eager_to_all] =
            read(bytes, self.p, |part, i, x| match part {
                Part::Words => self.words[i] |= x,
                Part::Asks => self.asks[i] |= x,
                Part::OutBytes => self.out_bytes[i] = self.out_bytes[i].max(x),
            })?;
        self.ending.merge(&ending);
        self.registrations.merge(&registrations);
        self.registrations_all.merge(&registrations_all);
        self.tagsize.merge(&tagsize);
        self.eager_to_all.merge(&eager_to_all);
        Ok(())
    }

    /// The first disagreement, as every process sees it after the reduction.
    pub fn disagreement(&self, superstep: u64) -> Option<Reason> {
        if !self.ending.agree() {
            return Some(Reason::SyncMismatch { ended: self.ending.max.pid, synced: self.ending.min.pid, superstep });
        }
        if !self.registrations.any() && !self.registrations_all.agree() {
            let (a, b) = (self.registrations_all.min.pid, self.registrations_all.max.pid);
            let detail = format!(
                "in superstep {superstep} every process popped NULL while several registrations of NULL were in \
                 effect, and processes {a} and {b} would remove different ones: the choice is ambiguous (pass the \
                 registered address on at least one process)"
            );
            return Some(Reason::RegistrationsDiffer { detail });
        }
        if self.registrations.any() && !self.registrations.agree() {
            let describe = |w: &Witness| {
                format!(
                    "process {} made {} bsp_push_reg and {} bsp_pop_reg",
                    w.pid,
                    w.detail >> 32,
                    w.detail & 0xffff_ffff
                )
            };
            let (a, b) = (describe(&self.registrations.min), describe(&self.registrations.max));
            let same_counts = self.registrations.min.detail == self.registrations.max.detail;
            let detail = if same_counts {
                format!(
                    "{a} in superstep {superstep}, and so did {b}, but in another order or popping other registrations",
                    b = self.registrations.max.pid
                )
            } else {
                format!("{a} in superstep {superstep}, {b}")
            };
            return Some(Reason::RegistrationsDiffer { detail });
        }
        if !self.tagsize.agree() {
            let (a, b) = (self.tagsize.min, self.tagsize.max);
            let (a_size, b_size) = (a.value & TAGSIZE_MAX, b.value & TAGSIZE_MAX);
            if a_size != b_size {
                return Some(Reason::TagSizesDiffer { a: a.pid, a_size, b: b.pid, b_size });
            }
            let calls = |w: &Witness| (w.value >> TAGSIZE_CALLS_SHIFT) as u32;
            return Some(Reason::TagSizeCallsDiffer { a: a.pid, a_calls: calls(&a), b: b.pid, b_calls: calls(&b) });
        }
        None
    }
}

/// Where the count of `bsp_set_tagsize` calls sits in the tag size's
/// witness value, above the size itself.
const TAGSIZE_CALLS_SHIFT: u32 = 48;

/// The checks a reduction carries: ending, registrations (twice), tag size,
/// eager to all.
const CHECKS: usize = 5;
const TAGSIZE_MAX: u64 = (1 << TAGSIZE_CALLS_SHIFT) - 1;

/// Partners per round unless `BULKWIRE_BSP_FANOUT` says otherwise.
pub const DEFAULT_FANOUT: u32 = 7;

/// How the reduction's messages flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// Every process sends its reduction to process 0, which sends the
    /// merged one back: 2(p-1) messages in two steps, the fewest messages,
    /// for processes that share cores, where every message costs CPU time
    /// the others wait for. (8 processes on 2 cores, 3,000 empty syncs:
    /// 104-111 us against 145 us for a dissemination of fan-out 2, which
    /// sends 32 messages; 16 processes: 293 against 525 us; a tree of
    /// fan-out 2, 3 or 4 was slower than the star.)
    Star,
    /// [`Dissemination`] of this fan-out: every process learns everything
    /// in log_(k+1) p rounds, the fewest steps, where each has a core.
    Dissemination(u32),
}

impl Barrier {
    /// As process 0 tells the others at `bsp_begin`: 0 for the star, else
    /// the fan-out.
    pub fn code(self) -> u32 {
        match self {
            Barrier::Star => 0,
            Barrier::Dissemination(k) => k.max(1),
        }
    }

    pub fn from_code(code: u32) -> Barrier {
        match code {
            0 => Barrier::Star,
            k => Barrier::Dissemination(k),
        }
    }
}

/// The shape of the dissemination for `p` processes with fan-out `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dissemination {
    p: u32,
    k: u32,
}

impl Dissemination {
    pub fn new(p: u32, fanout: u32) -> Dissemination {
        Dissemination { p, k: fanout.clamp(1, p.saturating_sub(1).max(1)) }
    }

    /// The distance unit of `round`: (k+1)^round, or `None` once it reaches
    /// p (every process is then heard).
    fn stride(&self, round: u32) -> Option<u32> {
        let stride = u64::from(self.k + 1).checked_pow(round)?;
        (stride < u64::from(self.p)).then_some(stride as u32)
    }

    /// Rounds until every process holds everyone's contribution.
    pub fn rounds(&self) -> u32 {
        (0..).find(|&r| self.stride(r).is_none()).expect("strides grow past p")
    }

    /// The distances of `round`: m·(k+1)^round for m = 1..=k, below p.
    /// They are distinct and nonzero, so no process hears itself or anyone
    /// twice in a round.
    pub fn distances(&self, round: u32) -> impl Iterator<Item = u32> + '_ {
        let stride = self.stride(round).map_or(0, u64::from);
        (1..=u64::from(self.k))
            .map(move |m| m * stride)
            .take_while(move |&d| d > 0 && d < u64::from(self.p))
            .map(|d| d as u32)
    }

    /// Whom `pid` sends to and hears from in `round`, as (to, from) pairs.
    pub fn partners(&self, pid: u32, round: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let p = self.p;
        self.distances(round).map(move |d| ((pid + d) % p, (pid + p - d) % p))
    }
}

/// The vectors of an encoded reduction, in their order.
#[derive(Clone, Copy)]
enum Part {
    Words,
    Asks,
    OutBytes,
}

/// Reads an encoded reduction of `p` processes, handing each word of its
/// vectors to `word(part, index, value)`; returns its checks.
fn read(bytes: &[u8], p: u32, mut word: impl FnMut(Part, usize, u64)) -> Result<[Extremes; CHECKS], String> {
    let mut r = Reader(bytes);
    if r.u32()? != p {
        return Err("reduction for another number of processes".into());
    }
    let n = (p as usize * p as usize).div_ceil(64);
    for (part, len) in [(Part::Words, n), (Part::Asks, n), (Part::OutBytes, p as usize)] {
        for i in 0..len {
            word(part, i, r.u64()?);
        }
    }
    let mut extremes = [Extremes::of(0, 0, 0); CHECKS];
    for e in &mut extremes {
        for w in [&mut e.min, &mut e.max] {
            *w = Witness { value: r.u64()?, pid: r.u32()?, detail: r.u64()? };
        }
    }
    if !r.0.is_empty() {
        return Err("trailing bytes after a reduction".into());
    }
    Ok(extremes)
}

pub(crate) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated: {n} bytes wanted, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the dissemination reduction among `p` simulated processes.
    fn disseminate(mut state: Vec<Reduction>, fanout: u32) -> Vec<Reduction> {
        let p = state.len() as u32;
        let shape = Dissemination::new(p, fanout);
        for round in 0..shape.rounds() {
            let sent: Vec<Vec<u8>> = state.iter().map(Reduction::encode).collect();
            for pid in 0..p {
                let mut heard = Vec::new();
                for (to, from) in shape.partners(pid, round) {
                    assert!(shape.partners(from, round).any(|(t, _)| t == pid));
                    assert!(to != pid && from != pid);
                    heard.push(from);
                    state[pid as usize].merge_encoded(&sent[from as usize]).unwrap();
                }
                heard.sort_unstable();
                heard.dedup();
                assert_eq!(heard.len(), shape.partners(pid, round).count(), "a partner twice in a round");
            }
        }
        state
    }

    #[test]
    fn rounds_shrink_with_the_fanout() {
        let rounds = |p, k| Dissemination::new(p, k).rounds();
        assert_eq!(
            [rounds(1, 7), rounds(2, 7), rounds(8, 7), rounds(9, 7), rounds(64, 7), rounds(65, 7)],
            [0, 1, 1, 2, 2, 3]
        );
        assert_eq!([rounds(2, 1), rounds(8, 1), rounds(9, 1), rounds(1000, 1)], [1, 3, 4, 10]);
        assert_eq!(rounds(100, 99), 1);
        assert_eq!(rounds(100, 1000), 1);
        assert_eq!(Dissemination::new(8, 7).partners(3, 0).count(), 7);
        assert_eq!(Dissemination::new(10, 7).partners(3, 1).collect::<Vec<_>>(), [(1, 5)]);
    }

    #[test]
    fn every_process_learns_the_whole_matrix_for_any_p() {
        for p in 1..=33u32 {
            // Process i sends to i+1 and to i*i mod p: an irregular pattern.
            let sends = |i: u32, j: u32| j == (i + 1) % p || j == (i * i) % p;
            let local: Vec<Reduction> = (0..p)
                .map(|i| {
                    Reduction::local(p, i, |j| sends(i, j), u64::from(i) * 10, false, (5, 1, 0), (4, 1))
                        .asking(i, |j| j == (i + 2) % p)
                })
                .collect();
            for fanout in [1, 2, 3, 7, 40] {
                for r in disseminate(local.clone(), fanout) {
                    for i in 0..p {
                        for j in 0..p {
                            assert_eq!(r.talks(i, j), sends(i, j), "p={p} {i}->{j}");
                            assert_eq!(r.asks(i, j), j == (i + 2) % p, "p={p} {i} asks {j}");
                            assert_eq!(r.streams(j, i), sends(j, i) || j == (i + 2) % p);
                        }
                        assert_eq!(r.out_bytes[i as usize], u64::from(i) * 10);
                    }
                    assert_eq!(r.disagreement(0), None);
                }
            }
        }
    }

    #[test]
    fn disagreements_are_seen_by_all_and_named() {
        let p = 5;
        let local: Vec<Reduction> = (0..p)
            .map(|i| Reduction::local(p, i, |_| false, 0, i == 3, (if i == 1 { 9 } else { 5 }, 1, 0), (0, 0)))
            .collect();
        for r in disseminate(local, 2) {
            assert_eq!(r.disagreement(7), Some(Reason::SyncMismatch { ended: 3, synced: 0, superstep: 7 }));
        }
        let local: Vec<Reduction> = (0..p)
            .map(|i| Reduction::local(p, i, |_| false, 0, false, (5, 1, 0), (if i == 2 { 8 } else { 4 }, 1)))
            .collect();
        for r in disseminate(local, 2) {
            assert_eq!(r.disagreement(0), Some(Reason::TagSizesDiffer { a: 0, a_size: 4, b: 2, b_size: 8 }));
        }
        // The same size, but process 3 did not call bsp_set_tagsize.
        let local: Vec<Reduction> =
            (0..p).map(|i| Reduction::local(p, i, |_| false, 0, false, (5, 1, 0), (0, u32::from(i != 3)))).collect();
        for r in disseminate(local, 2) {
            let Some(Reason::TagSizeCallsDiffer { a: 3, a_calls: 0, b_calls: 1, .. }) = r.disagreement(0) else {
                panic!("{:?}", r.disagreement(0))
            };
        }
        let local: Vec<Reduction> = (0..p)
            .map(|i| Reduction::local(p, i, |_| false, 0, false, (u64::from(i == 4), 2 - u32::from(i == 4), 0), (0, 0)))
            .collect();
        for r in disseminate(local, 2) {
            let Some(Reason::RegistrationsDiffer { detail }) = r.disagreement(2) else { panic!() };
            assert!(detail.contains("process 4 made 1 bsp_push_reg"), "{detail}");
        }
    }

    #[test]
    fn everyone_learns_whether_all_sent_eagerly_to_all() {
        let p = 6;
        for holdout in [None, Some(0), Some(5)] {
            let local: Vec<Reduction> = (0..p)
                .map(|i| {
                    Reduction::local(p, i, |j| j != i, 1, false, (5, 1, 0), (0, 0)).eager_to_all(i, Some(i) != holdout)
                })
                .collect();
            for fanout in [1, 2, 5] {
                for r in disseminate(local.clone(), fanout) {
                    assert_eq!(r.all_eager_to_all(), holdout.is_none(), "holdout {holdout:?}, fanout {fanout}");
                    assert_eq!(r.disagreement(0), None, "a vote is not a check");
                }
            }
        }
        // Unsaid, a process did not send eagerly to all.
        let quiet = Reduction::local(2, 0, |_| true, 1, false, (0, 0, 0), (0, 0));
        assert!(!quiet.all_eager_to_all());
    }

    #[test]
    fn malformed_reductions_are_errors() {
        let r = Reduction::local(3, 0, |_| true, 1, false, (0, 0, 0), (4, 2)).eager_to_all(0, true);
        let bytes = r.encode();
        assert!(Reduction::decode(&bytes, 4).is_err());
        assert!(Reduction::decode(&bytes[..bytes.len() - 1], 3).is_err());
        assert_eq!(Reduction::decode(&bytes, 3).unwrap(), r);
        let mut other = Reduction::local(4, 1, |_| true, 1, false, (0, 0, 0), (4, 2));
        assert!(other.merge_encoded(&bytes).is_err(), "another number of processes");
        let mut same = Reduction::local(3, 1, |_| false, 9, false, (0, 0, 0), (4, 2));
        assert!(same.merge_encoded(&bytes[..bytes.len() - 1]).is_err());
        assert!(same.merge_encoded(&[bytes.clone(), vec![0]].concat()).is_err(), "trailing bytes");
    }

    #[test]
    fn a_process_undecided_about_a_pop_of_null_leaves_the_check_to_the_others() {
        let p = 3;
        let merged = |undecided: &[u32], digests: [u64; 3]| {
            let parts: Vec<Reduction> = (0..p)
                .map(|i| {
                    let r = Reduction::local(p, i, |_| false, 0, false, (digests[i as usize], 2, 1), (0, 0));
                    if undecided.contains(&i) {
                        r.undecided_registrations()
                    } else {
                        r
                    }
                })
                .collect();
            let mut all = parts[0].clone();
            for r in &parts[1..] {
                all.merge_encoded(&r.encode()).unwrap();
            }
            all
        };
        // Process 1 removed another registration of NULL for now: no matter.
        let r = merged(&[1], [5, 9, 5]);
        assert_eq!(r.disagreement(3), None);
        assert_eq!((r.registrations.min.value, r.registrations.max.value), (5, 5));
        // Those who decide must still agree.
        assert!(matches!(merged(&[1], [5, 9, 6]).disagreement(3), Some(Reason::RegistrationsDiffer { .. })));
        // Nobody decided: their choices must agree, or the choice is ambiguous.
        assert_eq!(merged(&[0, 1, 2], [7, 7, 7]).disagreement(3), None);
        match merged(&[0, 1, 2], [7, 8, 7]).disagreement(3) {
            Some(Reason::RegistrationsDiffer { detail }) => assert!(detail.contains("ambiguous"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }
}
