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
//!
//! In memory the matrices are dense (p²/64 words each), but a message
//! carries only what is set: each matrix goes as whichever is shortest of
//! its words, its nonzero words with their indices, or the positions of its
//! set bits; the outgoing bytes as all p of them or the nonzero ones; the
//! checks as varints (see [`Reduction::encode`]). The reduction of an
//! empty sync then takes 76 to 86 bytes whatever p, nearly all of them
//! the checks; a sparse pattern about two bytes per set bit and per
//! process that sends; a full matrix its p²/8 bytes and a tag byte, as
//! before (a total exchange of puts: 135 KB at 1,024 processes, where both
//! matrices went whole, 270 KB).

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
    /// Process `pid`'s contribution: its row and its checks (a sync writes
    /// its last one over instead, [`Reduction::rewrite`]).
    #[allow(clippy::too_many_arguments)]
    pub fn local(
        p: u32,
        pid: u32,
        sends_to: impl Fn(u32) -> bool,
        out_bytes: u64,
        ending: bool,
        registrations: (u64, u32, u32),
        tagsize: (u64, u32),
    ) -> Reduction {
        let mut r = Reduction::empty();
        r.rewrite(p, pid, sends_to, out_bytes, ending, registrations, tagsize);
        r
    }

    /// A reduction of no process, to be written over
    /// ([`Reduction::rewrite`]).
    pub fn empty() -> Reduction {
        Reduction {
            p: 0,
            words: Vec::new(),
            asks: Vec::new(),
            out_bytes: Vec::new(),
            ending: Extremes::none(),
            registrations: Extremes::none(),
            registrations_all: Extremes::none(),
            tagsize: Extremes::none(),
            eager_to_all: Extremes::none(),
        }
    }

    /// [`Reduction::local`] in place: this reduction becomes process
    /// `pid`'s contribution, in the room of its own vectors. (The sync
    /// keeps its reduction boxed and writes it over: a reduction moved by
    /// value is a copy of some 300 bytes, and a sync moved it about 15
    /// times.)
    #[allow(clippy::too_many_arguments)]
    pub fn rewrite(
        &mut self,
        p: u32,
        pid: u32,
        sends_to: impl Fn(u32) -> bool,
        out_bytes: u64,
        ending: bool,
        registrations: (u64, u32, u32),
        tagsize: (u64, u32),
    ) {
        for v in [&mut self.words, &mut self.asks] {
            v.clear();
            v.resize(matrix_words(p), 0);
        }
        self.out_bytes.clear();
        self.out_bytes.resize(p as usize, 0);
        self.p = p;
        self.ending = Extremes::of(u64::from(ending), pid, 0);
        self.registrations =
            Extremes::of(registrations.0, pid, u64::from(registrations.1) << 32 | u64::from(registrations.2));
        self.registrations_all = self.registrations;
        self.tagsize =
            Extremes::of(u64::from(tagsize.1.min(0xffff)) << TAGSIZE_CALLS_SHIFT | tagsize.0.min(TAGSIZE_MAX), pid, 0);
        self.eager_to_all = Extremes::of(0, pid, 0);
        for to in (0..p).filter(|&to| sends_to(to)) {
            let bit = self.bit(pid, to);
            self.words[bit / 64] |= 1 << (bit % 64);
        }
        self.out_bytes[pid as usize] = out_bytes;
    }

    /// Makes this reduction a copy of `other`, in the room of its own
    /// vectors (a clone would allocate new ones).
    pub fn copy_from(&mut self, other: &Reduction) {
        let Reduction { p, words, asks, out_bytes, ending, registrations, registrations_all, tagsize, eager_to_all } =
            other;
        self.p = *p;
        self.words.clone_from(words);
        self.asks.clone_from(asks);
        self.out_bytes.clone_from(out_bytes);
        self.ending = *ending;
        self.registrations = *registrations;
        self.registrations_all = *registrations_all;
        self.tagsize = *tagsize;
        self.eager_to_all = *eager_to_all;
    }

    /// [`Reduction::ask`], by value.
    #[cfg(test)]
    pub fn asking(mut self, pid: u32, asks_of: impl Fn(u32) -> bool) -> Reduction {
        self.ask(pid, asks_of);
        self
    }

    /// Process `pid`'s row of the second matrix: whom it asks gets of.
    pub fn ask(&mut self, pid: u32, asks_of: impl Fn(u32) -> bool) {
        for to in (0..self.p).filter(|&to| asks_of(to)) {
            let bit = self.bit(pid, to);
            self.asks[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// This process popped NULL while several registrations of NULL could be
    /// meant: it leaves the digest to the processes that know.
    pub fn set_undecided_registrations(&mut self) {
        self.registrations = Extremes::none();
    }

    /// Records whether process `pid` sent a stream to every other process
    /// before the barrier.
    pub fn eager_to_all(mut self, pid: u32, all: bool) -> Reduction {
        self.set_eager_to_all(pid, all);
        self
    }

    /// [`Reduction::eager_to_all`] in place.
    pub fn set_eager_to_all(&mut self, pid: u32, all: bool) {
        self.eager_to_all = Extremes::of(u64::from(all), pid, 0);
    }

    /// Whether every process sent a stream to every other one before the
    /// barrier: a total exchange small enough to go eagerly.
    pub fn all_eager_to_all(&self) -> bool {
        self.eager_to_all.min.value == 1
    }

    fn bit(&self, from: u32, to: u32) -> usize {
        from as usize * self.p as usize + to as usize
    }

    /// Whether no process has puts or messages for another, nor asks
    /// another for gets, in this superstep.
    pub fn quiet(&self) -> bool {
        self.words.iter().chain(&self.asks).all(|&w| w == 0)
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

    /// The most bytes an encoded reduction of `p` processes takes: both
    /// matrices and the outgoing bytes dense, behind their tags, and the
    /// checks' varints at their longest. Most take far fewer.
    pub fn max_encoded_len(p: u32) -> usize {
        let words = matrix_words(p);
        4 + 3 + 8 * (2 * words + p as usize) + CHECKS * (1 + 2 * (MAX_VARINT + 5 + MAX_VARINT))
    }

    /// The reduction as bytes: the number of processes (u32), each matrix
    /// ([`DENSE`], [`WORDS`] or [`BITS`], whichever is shortest), the
    /// outgoing bytes ([`DENSE`] or [`WORDS`]), then each check: [`ONE`]
    /// and its witness where the minimum is the maximum (one process's
    /// own, or all alike), else [`TWO`] and the minimum and maximum
    /// witness; a witness as varints of its value, process and detail.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out);
        out
    }

    /// [`Reduction::encode`] appended to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.p.to_le_bytes());
        write_matrix(out, &self.words);
        write_matrix(out, &self.asks);
        write_counts(out, &self.out_bytes);
        for e in [&self.ending, &self.registrations, &self.registrations_all, &self.tagsize, &self.eager_to_all] {
            let witnesses: &[&Witness] = if e.min == e.max { &[&e.min] } else { &[&e.min, &e.max] };
            out.push(if witnesses.len() == 1 { ONE } else { TWO });
            for w in witnesses {
                write_varint(out, w.value);
                write_varint(out, u64::from(w.pid));
                write_varint(out, w.detail);
            }
        }
    }

    /// Decodes a peer's reduction for a job of `p` processes.
    pub fn decode(bytes: &[u8], p: u32) -> Result<Reduction, String> {
        let n = matrix_words(p);
        let (mut words, mut asks, mut out_bytes) = (vec![0; n], vec![0; n], vec![0; p as usize]);
        let [ending, registrations, registrations_all, tagsize, eager_to_all] =
            read(bytes, p, |part, i, x| match part {
                Part::Words => words[i] |= x,
                Part::Asks => asks[i] |= x,
                Part::OutBytes => out_bytes[i] = x,
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

/// A check whose minimum and maximum are one witness, written once.
const ONE: u8 = 1;
/// A check written as its minimum and its maximum witness.
const TWO: u8 = 2;

/// Tag of a part of an encoded reduction written whole: every word (u64).
const DENSE: u8 = 0;
/// Tag of a part written as its nonzero words, each as its index (a
/// varint: the first index, then the gap to the one before less one) and
/// its value (a u64 in a matrix, a varint among the outgoing bytes), behind
/// their count (a varint).
const WORDS: u8 = 1;
/// Tag of a matrix written as the positions of its set bits (row by row,
/// varints as the indices of [`WORDS`]), behind their count.
const BITS: u8 = 2;
/// The longest varint of a u64.
const MAX_VARINT: usize = 10;

/// Words of a p × p bit matrix.
fn matrix_words(p: u32) -> usize {
    (p as usize * p as usize).div_ceil(64)
}
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
    /// Where every process of the job runs on one host: each posts its
    /// reduction on its board in shared memory and reads everyone else's
    /// there (the runtime's `Engine::post`), one step and no message.
    Board,
}

/// The most processes for which the board is the default: each process
/// reads and merges every other's post, p − 1 of them, O(p²) work for the
/// job where the star's is O(p). Empty syncs back to back on 2 cores, mean
/// of each run, star against board: 2 processes 2.0-2.1 (dissemination,
/// the default there) against 1.6 us, 4 processes 11.7-16.4 against
/// 10.7-12.1, 8 processes 27.7-35.8 against 25.4-27.7, 16 processes
/// 120-194 against 109-123; 24 processes 262-273 against 258-366, 32
/// 397-471 against 426-487, 64 1,446-1,940 against 1,707-2,116. (A post
/// holds one process's own reduction, which fits a post up to thousands of
/// processes.)
pub const BOARD_DEFAULT_MAX: u32 = 16;

impl Barrier {
    /// As process 0 tells the others at `bsp_begin`: 0 for the star,
    /// `u32::MAX` for the board, else the fan-out.
    pub fn code(self) -> u32 {
        match self {
            Barrier::Star => 0,
            Barrier::Dissemination(k) => k.clamp(1, u32::MAX - 1),
            Barrier::Board => u32::MAX,
        }
    }

    pub fn from_code(code: u32) -> Barrier {
        match code {
            0 => Barrier::Star,
            u32::MAX => Barrier::Board,
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

/// Reads an encoded reduction of `p` processes, handing each nonzero word
/// of its vectors to `word(part, index, value)` (a bit of a matrix, or
/// several, may come in more than one word of the same index: they are to
/// be ORed); returns its checks. Anything malformed, truncated or out of
/// range is an error, whatever `word` saw before it.
fn read(bytes: &[u8], p: u32, mut word: impl FnMut(Part, usize, u64)) -> Result<[Extremes; CHECKS], String> {
    let mut r = Reader(bytes);
    let theirs = r.u32()?;
    if theirs != p {
        return Err(format!("reduction for {theirs} processes, not {p}"));
    }
    let bits = p as usize * p as usize;
    for (part, name) in [(Part::Words, "the matrix of puts and messages"), (Part::Asks, "the matrix of gets")] {
        read_matrix(&mut r, bits, |i, x| word(part, i, x)).map_err(|e| format!("{name}: {e}"))?;
    }
    read_counts(&mut r, p as usize, |i, x| word(Part::OutBytes, i, x)).map_err(|e| format!("outgoing bytes: {e}"))?;
    let mut extremes = [Extremes::of(0, 0, 0); CHECKS];
    let witness = |r: &mut Reader<'_>| -> Result<Witness, String> {
        let (value, pid, detail) = (r.varint()?, r.varint()?, r.varint()?);
        let pid = u32::try_from(pid).map_err(|_| format!("process {pid} in a check"))?;
        Ok(Witness { value, pid, detail })
    };
    for e in &mut extremes {
        match r.u8()? {
            ONE => {
                e.min = witness(&mut r)?;
                e.max = e.min;
            }
            TWO => {
                e.min = witness(&mut r)?;
                e.max = witness(&mut r)?;
            }
            other => return Err(format!("a check marked {other}")),
        }
    }
    if !r.0.is_empty() {
        return Err(format!("{} trailing bytes after a reduction", r.0.len()));
    }
    Ok(extremes)
}

/// Writes a matrix held in `words` in the shortest of its encodings (the
/// dense one where they tie).
fn write_matrix(out: &mut Vec<u8>, words: &[u64]) {
    let dense = 8 * words.len();
    let (mut count, mut ones, mut listed) = (0, 0, 0);
    for (gap, w) in gaps(nonzero(words)) {
        count += 1;
        ones += w.count_ones() as usize;
        listed += varint_len(gap) + 8;
    }
    let listed = varint_len(count as u64) + listed;
    // Each set bit takes a byte at least: they are looked at one by one
    // only if their list might be the shortest.
    let shortest = dense.min(listed);
    let bits = (varint_len(ones as u64) + ones < shortest)
        .then(|| varint_len(ones as u64) + gaps(set_bits(words)).map(|(gap, ())| varint_len(gap)).sum::<usize>());
    if bits.is_some_and(|bits| bits < shortest) {
        out.push(BITS);
        write_varint(out, ones as u64);
        for (gap, ()) in gaps(set_bits(words)) {
            write_varint(out, gap);
        }
    } else if listed < dense {
        out.push(WORDS);
        write_varint(out, count as u64);
        for (gap, w) in gaps(nonzero(words)) {
            write_varint(out, gap);
            out.extend_from_slice(&w.to_le_bytes());
        }
    } else {
        out.push(DENSE);
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

/// Writes the outgoing bytes `counts`, whole or as the nonzero ones,
/// whichever is shorter.
fn write_counts(out: &mut Vec<u8>, counts: &[u64]) {
    let (count, listed) =
        gaps(nonzero(counts)).fold((0, 0), |(count, len), (gap, x)| (count + 1, len + varint_len(gap) + varint_len(x)));
    if varint_len(count) + listed < 8 * counts.len() {
        out.push(WORDS);
        write_varint(out, count);
        for (gap, x) in gaps(nonzero(counts)) {
            write_varint(out, gap);
            write_varint(out, x);
        }
    } else {
        out.push(DENSE);
        for x in counts {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// Reads a matrix of `bits` bits as [`write_matrix`] wrote it, handing
/// each nonzero word, or a word of one of its bits, to `word(index, value)`.
fn read_matrix(r: &mut Reader<'_>, bits: usize, mut word: impl FnMut(usize, u64)) -> Result<(), String> {
    let n = bits.div_ceil(64);
    // The bits of the last word past the end of the matrix, which are clear.
    let past_end = match bits % 64 {
        0 => 0,
        used => !0u64 << used,
    };
    let mut take = |i: usize, x: u64| {
        if i + 1 == n && x & past_end != 0 {
            return Err(format!("bits set past the end of the matrix of {bits} bits"));
        }
        word(i, x);
        Ok(())
    };
    match r.u8()? {
        DENSE => {
            for i in 0..n {
                let x = r.u64()?;
                if x != 0 {
                    take(i, x)?;
                }
            }
        }
        WORDS => {
            let mut at = Ascending::new(n);
            for _ in 0..r.count(n, "words")? {
                let i = at.index(r.varint()?)?;
                let x = r.u64()?;
                if x == 0 {
                    return Err(format!("word {i} listed as nonzero is zero"));
                }
                take(i, x)?;
            }
        }
        BITS => {
            let mut at = Ascending::new(bits);
            for _ in 0..r.count(bits, "bits")? {
                let bit = at.index(r.varint()?)?;
                take(bit / 64, 1 << (bit % 64))?;
            }
        }
        tag => return Err(format!("unknown encoding {tag}")),
    }
    Ok(())
}

/// Reads `p` outgoing byte counts as [`write_counts`] wrote them, handing
/// each nonzero one to `count(process, value)`.
fn read_counts(r: &mut Reader<'_>, p: usize, mut count: impl FnMut(usize, u64)) -> Result<(), String> {
    match r.u8()? {
        DENSE => {
            for i in 0..p {
                let x = r.u64()?;
                if x != 0 {
                    count(i, x);
                }
            }
        }
        WORDS => {
            let mut at = Ascending::new(p);
            for _ in 0..r.count(p, "counts")? {
                let i = at.index(r.varint()?)?;
                let x = r.varint()?;
                if x == 0 {
                    return Err(format!("the count of process {i}, listed as nonzero, is zero"));
                }
                count(i, x);
            }
        }
        tag => return Err(format!("unknown encoding {tag}")),
    }
    Ok(())
}

/// The nonzero words of `words`, with their indices.
fn nonzero(words: &[u64]) -> impl Iterator<Item = (usize, u64)> + '_ {
    words.iter().copied().enumerate().filter(|&(_, w)| w != 0)
}

/// The positions of the set bits of `words`, in order.
fn set_bits(words: &[u64]) -> impl Iterator<Item = (usize, ())> + '_ {
    nonzero(words).flat_map(|(i, mut w)| {
        std::iter::from_fn(move || {
            (w != 0).then(|| {
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                (64 * i + bit, ())
            })
        })
    })
}

/// Ascending indices with their values as they are written: the first
/// index, then each one's distance from the one before less one.
fn gaps<T>(items: impl Iterator<Item = (usize, T)>) -> impl Iterator<Item = (u64, T)> {
    let mut next = 0;
    items.map(move |(i, x)| {
        let gap = (i - next) as u64;
        next = i + 1;
        (gap, x)
    })
}

/// Indices read back from their [`gaps`], each below `len`.
struct Ascending {
    next: usize,
    len: usize,
}

impl Ascending {
    fn new(len: usize) -> Ascending {
        Ascending { next: 0, len }
    }

    fn index(&mut self, gap: u64) -> Result<usize, String> {
        let i = usize::try_from(gap)
            .ok()
            .and_then(|gap| self.next.checked_add(gap))
            .filter(|&i| i < self.len)
            .ok_or_else(|| format!("an index past the end: {} and a gap of {gap}, of {}", self.next, self.len))?;
        self.next = i + 1;
        Ok(i)
    }
}

fn write_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Bytes of `x` as a varint.
fn varint_len(x: u64) -> usize {
    (64 - x.leading_zeros() as usize).max(1).div_ceil(7)
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

    /// A varint (LEB128) of 64 bits at most.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, String> {
        let bytes = self.0;
        let mut x = 0;
        for (i, &b) in bytes.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                break;
            }
            x |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &bytes[i + 1..];
                return Ok(x);
            }
        }
        match bytes.len() {
            n if n < 10 && bytes.iter().all(|&b| b & 0x80 != 0) => Err(format!("truncated: a varint of {n} bytes")),
            _ => Err("a varint of more than 64 bits".into()),
        }
    }

    /// A count (a varint) of at most `most` `what`.
    fn count(&mut self, most: usize, what: &str) -> Result<usize, String> {
        let n = self.varint()?;
        usize::try_from(n).ok().filter(|&n| n <= most).ok_or_else(|| format!("{n} {what}, of {most} at most"))
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

    /// A process posts its own reduction on the board (one row of each
    /// matrix, its own outgoing bytes), which fits a post far beyond the
    /// processes for which the board is the default.
    #[test]
    fn a_process_s_own_reduction_fits_a_post() {
        for p in [BOARD_DEFAULT_MAX, 4096] {
            let me = p - 1;
            let local =
                Reduction::local(p, me, |_| true, u64::MAX, true, (u64::MAX, u32::MAX, u32::MAX), (u64::MAX, u32::MAX))
                    .asking(me, |_| true)
                    .eager_to_all(me, true);
            let len = local.encode().len();
            assert!(len <= bulkwire_runtime::POST_MAX, "{p} processes: {len} bytes");
        }
        assert_eq!(Barrier::from_code(Barrier::Board.code()), Barrier::Board);
        assert_eq!(Barrier::from_code(Barrier::Dissemination(u32::MAX).code()), Barrier::Dissemination(u32::MAX - 1));
    }

    /// Quiet: nobody puts, sends or asks, whatever else the processes say
    /// (bytes, registrations, the end); one bit of either matrix, from any
    /// process, and it is not.
    #[test]
    fn a_superstep_is_quiet_only_without_a_bit_in_either_matrix() {
        let p = 70;
        let local = |me: u32, to: Option<u32>, ask: Option<u32>| {
            Reduction::local(p, me, |q| Some(q) == to, 5, true, (1, 2, 3), (4, 5)).asking(me, |q| Some(q) == ask)
        };
        let mut all = local(0, None, None);
        for me in 1..p {
            all.merge_encoded(&local(me, None, None).encode()).unwrap();
        }
        assert!(all.quiet());
        for (me, to, ask) in [(69, Some(0), None), (3, None, Some(68)), (0, Some(69), None)] {
            let mut one = all.clone();
            one.merge_encoded(&local(me, to, ask).encode()).unwrap();
            assert!(!one.quiet(), "{me} {to:?} {ask:?}");
        }
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
    fn a_reduction_written_over_an_old_one_is_a_new_one() {
        let p = 70;
        let fresh =
            |pid: u32| Reduction::local(p, pid, |j| j % 3 == 0, 7, false, (5, 1, 2), (4, 1)).asking(pid, |j| j == 1);
        // The old one: merged from others, every matrix bit and check set.
        let mut old = Reduction::local(p, 2, |_| true, u64::MAX, true, (9, 9, 9), (8, 8)).asking(2, |_| true);
        old.merge_encoded(&fresh(69).encode()).unwrap();
        old.rewrite(p, 5, |j| j % 3 == 0, 7, false, (5, 1, 2), (4, 1));
        assert_eq!(old.asking(5, |j| j == 1), fresh(5));
        // One of another size too.
        let mut small = Reduction::local(3, 0, |_| true, 1, false, (0, 0, 0), (0, 0));
        small.rewrite(p, 5, |j| j % 3 == 0, 7, false, (5, 1, 2), (4, 1));
        assert_eq!(small.asking(5, |j| j == 1), fresh(5));
        let mut copy = Reduction::local(3, 0, |_| true, 1, false, (0, 0, 0), (0, 0));
        copy.copy_from(&fresh(5));
        assert_eq!(copy, fresh(5));
        let mut appended = vec![1, 2];
        fresh(5).encode_into(&mut appended);
        assert_eq!(appended, [vec![1, 2], fresh(5).encode()].concat());
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

    /// The tag of the first matrix of an encoded reduction.
    fn first_tag(bytes: &[u8]) -> u8 {
        bytes[4]
    }

    /// The reduction's bytes in the dense encoding that came before this
    /// one: every word, and the checks in fixed widths.
    fn dense_len(p: u32) -> usize {
        4 + 8 * (2 * matrix_words(p) + p as usize) + CHECKS * 2 * (8 + 4 + 8)
    }

    #[test]
    fn a_message_is_as_long_as_what_it_says() {
        // An empty sync: a few bytes of matrices whatever p.
        let empty = |p: u32| Reduction::local(p, p - 1, |_| false, 0, false, (u64::MAX / 3, 0, 0), (0, 0));
        let small = empty(2).encode().len();
        assert!(small < 80, "{small}");
        for p in [64, 256, 1024, 5000] {
            let len = empty(p).encode().len();
            assert!(len <= small + 10, "p {p}: {len} against {small} at 2");
            assert_eq!(&empty(p).encode()[4..10], [WORDS, 0, WORDS, 0, WORDS, 0]);
        }
        // A ring at 1,024 processes: the set bits, two bytes each.
        let p = 1024;
        let mut ring = Reduction::local(p, 0, |j| j == 1, 5, false, (0, 0, 0), (0, 0));
        for i in 1..p {
            ring.merge_encoded(&Reduction::local(p, i, |j| j == (i + 1) % p, 5, false, (0, 0, 0), (0, 0)).encode())
                .unwrap();
        }
        let bytes = ring.encode();
        assert_eq!(first_tag(&bytes), BITS);
        assert!(bytes.len() < 2 * 1024 + 2 * 1024 + 300, "{}", bytes.len());
        // Blocks of 64 processes that all talk among themselves: words.
        let p = 256;
        let block = Reduction::local(p, 70, |j| j / 64 == 1, 1, false, (0, 0, 0), (0, 0));
        let bytes = block.encode();
        assert_eq!(first_tag(&bytes), WORDS);
        // A total exchange: the dense matrix, no longer than before.
        for p in [1, 2, 3, 64, 100, 300] {
            let mut all = Reduction::local(p, 0, |j| j != 0, 1 << 20, false, (u64::MAX, 9, 0), (1 << 30, 3));
            for i in 1..p {
                let r = Reduction::local(p, i, |j| j != i, 1 << 20, false, (u64::MAX, 9, 0), (1 << 30, 3));
                all.merge_encoded(&r.asking(i, |j| j != i).eager_to_all(i, true).encode()).unwrap();
            }
            let bytes = all.encode();
            if p >= 8 {
                assert_eq!(first_tag(&bytes), DENSE, "p {p}");
            }
            assert!(bytes.len() <= dense_len(p), "p {p}: {} against {}", bytes.len(), dense_len(p));
            assert!(bytes.len() <= Reduction::max_encoded_len(p));
            assert_eq!(Reduction::decode(&bytes, p).unwrap(), all);
        }
    }

    /// A reduction of `p` processes written by hand: `parts` after the
    /// number of processes, then checks of zeros.
    fn handmade(p: u32, parts: &[&[u8]]) -> Vec<u8> {
        let mut bytes = p.to_le_bytes().to_vec();
        for part in parts {
            bytes.extend_from_slice(part);
        }
        for _ in 0..CHECKS {
            bytes.extend_from_slice(&[ONE, 0, 0, 0]);
        }
        bytes
    }

    #[test]
    fn malformed_encodings_are_errors_not_panics() {
        let none: &[u8] = &[WORDS, 0];
        let zero9 = [DENSE, 0, 0, 0, 0, 0, 0, 0, 0];
        // Well formed, to begin with: p = 3, one word per matrix.
        let fine = handmade(3, &[&[BITS, 2, 1, 3], &zero9, &[WORDS, 1, 2, 7]]);
        let r = Reduction::decode(&fine, 3).unwrap();
        assert!(r.talks(0, 1) && r.talks(1, 2) && !r.talks(0, 0));
        assert_eq!(r.out_bytes, [0, 0, 7]);
        let cases: &[(&str, Vec<u8>, &str)] = &[
            ("unknown tag of a matrix", handmade(3, &[&[3], none, none]), "unknown encoding 3"),
            ("unknown tag of the counts", handmade(3, &[none, none, &[BITS, 0]]), "unknown encoding 2"),
            ("a word past the end", handmade(3, &[&[WORDS, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], none, none]), "past the end"),
            ("a bit past the end", handmade(3, &[&[BITS, 1, 9], none, none]), "past the end"),
            ("a second bit past the end", handmade(3, &[&[BITS, 2, 4, 4], none, none]), "past the end"),
            ("a count past the end", handmade(3, &[none, none, &[WORDS, 1, 3, 1]]), "past the end"),
            (
                "a gap that overflows",
                handmade(3, &[&[BITS, 2, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1], none, none]),
                "past the end",
            ),
            ("more words than the matrix", handmade(3, &[&[WORDS, 2], none, none]), "2 words, of 1 at most"),
            ("more bits than the matrix", handmade(3, &[&[BITS, 10], none, none]), "10 bits, of 9 at most"),
            ("more counts than processes", handmade(3, &[none, none, &[WORDS, 4]]), "4 counts, of 3 at most"),
            (
                "a count of more than 64 bits",
                handmade(3, &[&[BITS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2], none, none]),
                "more than 64 bits",
            ),
            (
                "a varint that never ends",
                handmade(
                    3,
                    &[&[BITS, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0], none, none],
                ),
                "more than 64 bits",
            ),
            ("a listed word of zero", handmade(3, &[&[WORDS, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], none, none]), "is zero"),
            ("a listed count of zero", handmade(3, &[none, none, &[WORDS, 1, 1, 0]]), "is zero"),
            (
                "a dense word with bits past the matrix",
                handmade(3, &[&[DENSE, 0, 2, 0, 0, 0, 0, 0, 0], none, none]),
                "past the end",
            ),
            ("trailing bytes", [fine.clone(), vec![0]].concat(), "trailing"),
            ("another p", handmade(4, &[none, none, none]), "for 4 processes"),
        ];
        for (what, bytes, error) in cases {
            let e = Reduction::decode(bytes, 3).expect_err(what);
            assert!(e.contains(error), "{what}: {e}");
            let mut r = Reduction::local(3, 0, |_| true, 1, false, (0, 0, 0), (0, 0));
            assert!(r.merge_encoded(bytes).is_err(), "{what}");
        }
        // A process of more than 32 bits in a check (behind its mark).
        let mut big_pid = handmade(3, &[none, none, none]);
        big_pid[4 + 6 + 2] = 0x80;
        big_pid.splice(4 + 6 + 3..4 + 6 + 3, [0x80, 0x80, 0x80, 0x10]);
        let e = Reduction::decode(&big_pid, 3).unwrap_err();
        assert!(e.contains("process 4294967296"), "{e}");
        // A check marked neither ONE nor TWO.
        let mut marked = handmade(3, &[none, none, none]);
        marked[4 + 6 + 4] = 3;
        assert!(Reduction::decode(&marked, 3).unwrap_err().contains("a check marked 3"));
        // Every truncation of a well-formed reduction of each kind.
        let p = 70;
        let kinds = [
            Reduction::local(p, 3, |_| false, 0, false, (1, 2, 3), (4, 5)),
            Reduction::local(p, 3, |j| j % 9 == 0, 1 << 40, true, (1, 2, 3), (4, 5)).asking(3, |j| j < 40),
            Reduction::local(p, 3, |_| true, 1, false, (1, 2, 3), (4, 5)).asking(3, |_| true),
        ];
        for r in kinds {
            let bytes = r.encode();
            for end in 0..bytes.len() {
                assert!(Reduction::decode(&bytes[..end], p).is_err(), "{end} of {}", bytes.len());
            }
            assert_eq!(Reduction::decode(&bytes, p).unwrap(), r);
        }
    }

    #[test]
    fn a_process_undecided_about_a_pop_of_null_leaves_the_check_to_the_others() {
        let p = 3;
        let merged = |undecided: &[u32], digests: [u64; 3]| {
            let parts: Vec<Reduction> = (0..p)
                .map(|i| {
                    let mut r = Reduction::local(p, i, |_| false, 0, false, (digests[i as usize], 2, 1), (0, 0));
                    if undecided.contains(&i) {
                        r.set_undecided_registrations();
                    }
                    r
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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// An arbitrary check: a value from one process, or none.
        fn extremes() -> impl Strategy<Value = Extremes> {
            prop_oneof![
                1 => Just(Extremes::none()),
                4 => (any::<(u64, u32, u64)>(), any::<(u64, u32, u64)>()).prop_map(|(a, b)| {
                    let (mut e, b) = (Extremes::of(a.0, a.1, a.2), Extremes::of(b.0, b.1, b.2));
                    e.merge(&b);
                    e
                }),
            ]
        }

        /// A matrix of `p` processes: empty, a few bits, a few words,
        /// random words at some density, or full.
        fn matrix(p: u32) -> impl Strategy<Value = Vec<u64>> {
            let n = matrix_words(p);
            let bits = p as usize * p as usize;
            let clear_past_end = move |mut words: Vec<u64>| {
                if !bits.is_multiple_of(64) {
                    words[n - 1] &= !(!0u64 << (bits % 64));
                }
                words
            };
            prop_oneof![
                Just(vec![0; n]),
                prop::collection::vec(0..bits, 0..40).prop_map(move |set| {
                    let mut words = vec![0; n];
                    for bit in set {
                        words[bit / 64] |= 1 << (bit % 64);
                    }
                    words
                }),
                prop::collection::vec((0..n, any::<u64>()), 0..40).prop_map(move |set| {
                    let mut words = vec![0; n];
                    for (i, w) in set {
                        words[i] = w;
                    }
                    clear_past_end(words)
                }),
                (prop::collection::vec(any::<u64>(), n), 0u32..4).prop_map(move |(words, thin)| {
                    // thin: ANDs of random words, each halving the density.
                    let words = words
                        .iter()
                        .enumerate()
                        .map(|(i, w)| (0..thin).fold(*w, |w, k| w & w.rotate_left(7 * k + i as u32 + 1)))
                        .collect();
                    clear_past_end(words)
                }),
                Just(clear_past_end(vec![!0; n])),
            ]
        }

        /// Outgoing bytes of `p` processes: mostly zero or mostly not.
        fn counts(p: u32) -> impl Strategy<Value = Vec<u64>> {
            prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => any::<u64>(), 1 => 0u64..100_000], p as usize)
        }

        fn reduction(p: u32) -> impl Strategy<Value = Reduction> {
            (matrix(p), matrix(p), counts(p), prop::array::uniform5(extremes())).prop_map(
                move |(words, asks, out_bytes, [ending, registrations, registrations_all, tagsize, eager_to_all])| {
                    Reduction {
                        p,
                        words,
                        asks,
                        out_bytes,
                        ending,
                        registrations,
                        registrations_all,
                        tagsize,
                        eager_to_all,
                    }
                },
            )
        }

        fn two_reductions() -> impl Strategy<Value = (Reduction, Reduction)> {
            (1u32..=300).prop_flat_map(|p| (reduction(p), reduction(p)))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]

            #[test]
            fn encoding_round_trips_and_merging_is_or_and_max((a, b) in two_reductions()) {
                let p = a.p;
                let bytes = a.encode();
                prop_assert!(bytes.len() <= Reduction::max_encoded_len(p));
                // No part is longer than its dense words and its tag.
                let checks = [a.ending, a.registrations, a.registrations_all, a.tagsize, a.eager_to_all];
                let witness = |w: &Witness| varint_len(w.value) + varint_len(u64::from(w.pid)) + varint_len(w.detail);
                let checks: usize = checks
                    .iter()
                    .map(|e| 1 + witness(&e.min) + if e.min == e.max { 0 } else { witness(&e.max) })
                    .sum();
                prop_assert!(bytes.len() <= 4 + 3 + 8 * (2 * matrix_words(p) + p as usize) + checks);
                prop_assert_eq!(&Reduction::decode(&bytes, p).unwrap(), &a);
                let mut merged = b.clone();
                merged.merge_encoded(&bytes).unwrap();
                let or = |x: &[u64], y: &[u64]| x.iter().zip(y).map(|(x, y)| x | y).collect::<Vec<_>>();
                prop_assert_eq!(&merged.words, &or(&a.words, &b.words));
                prop_assert_eq!(&merged.asks, &or(&a.asks, &b.asks));
                let max: Vec<u64> = a.out_bytes.iter().zip(&b.out_bytes).map(|(x, y)| *x.max(y)).collect();
                prop_assert_eq!(&merged.out_bytes, &max);
                let mut checks = [b.ending, b.registrations, b.registrations_all, b.tagsize, b.eager_to_all];
                for (e, o) in checks.iter_mut().zip([a.ending, a.registrations, a.registrations_all, a.tagsize, a.eager_to_all]) {
                    e.merge(&o);
                }
                prop_assert_eq!(checks, [merged.ending, merged.registrations, merged.registrations_all, merged.tagsize, merged.eager_to_all]);
                // Merging is idempotent: the dissemination may hear a part twice.
                let mut again = merged.clone();
                again.merge_encoded(&bytes).unwrap();
                prop_assert_eq!(&again, &merged);
                // And the merged one round-trips too.
                prop_assert_eq!(&Reduction::decode(&merged.encode(), p).unwrap(), &merged);
            }

            #[test]
            fn damaged_encodings_are_errors_or_reductions_never_panics(
                r in (1u32..=70).prop_flat_map(reduction),
                at in any::<prop::sample::Index>(),
                byte in any::<u8>(),
                cut in any::<prop::sample::Index>(),
            ) {
                let mut bytes = r.encode();
                let i = at.index(bytes.len());
                bytes[i] = byte;
                let _ = Reduction::decode(&bytes, r.p);
                let mut other = r.clone();
                let _ = other.merge_encoded(&bytes);
                let end = cut.index(bytes.len() + 1);
                let _ = Reduction::decode(&bytes[..end], r.p);
                prop_assert!(Reduction::decode(&r.encode()[..end.min(r.encode().len() - 1)], r.p).is_err());
            }

            #[test]
            fn arbitrary_bytes_are_errors_or_reductions(p in 1u32..=70, bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                let _ = Reduction::decode(&bytes, p);
                let mut with_p = p.to_le_bytes().to_vec();
                with_p.extend_from_slice(&bytes);
                if let Ok(r) = Reduction::decode(&with_p, p) {
                    // Whatever decodes is a reduction that encodes again.
                    prop_assert_eq!(Reduction::decode(&r.encode(), p).unwrap(), r);
                }
            }
        }
    }
}
