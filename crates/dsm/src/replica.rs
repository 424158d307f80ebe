//! One process's replica of the shared memory, free of I/O: it is given
//! the time, local operations and the messages that arrive, and hands out
//! the messages to send. The runtime ([`crate::Dsm`]) and the simulator's
//! tests drive the same code.
//!
//! Every process holds every segment it maps whole (full replication, as
//! Mermera's implementations do); a read is a load from the local copy.
//! Writes travel on one reliable channel between each pair of processes,
//! which delivers in order:
//!
//! - **slow** writes wait in the writer's buffer, where a later write to the
//!   same location replaces an earlier one still waiting (only the newest
//!   value of a location is sent), and the buffer is flushed as a batch;
//! - **PRAM** writes wait in the same buffer, every one kept in the order
//!   issued, and reach every replica in that order;
//! - **coherent** writes go to a sequencer, process 0, which numbers them
//!   and sends each to every replica; every replica applies them in that
//!   one order, and the writer's call returns once its write is applied at
//!   its own replica (Mermera's `CO_Write`: sent and received back). A
//!   sequencer, not a token: one round trip to process 0 and its broadcast
//!   per write, where a token would make a writer wait for the token's
//!   round of all processes; the price is process 0's load, fair for the
//!   few coherent writes (flags, counters) that programs of this kind make.
//!
//! The buffer is flushed when it holds more writes than its threshold
//! (`Λ·b` of seed 003 §3, in writes issued, counting those a slow write
//! replaced), when its oldest write has waited `max_delay`, before a
//! coherent write, and by a fence. Under Warp control the threshold
//! follows the network: each replica computes warp from the stamps of the
//! batches it receives (seed 003's MDP) and raises its threshold while warp
//! exceeds 1 (the network is slower than the rate of stamps: congestion),
//! lowers it while warp is below 1 (seed 003's RAP with the sign reversed,
//! as Mermera's buffer threshold needs). A larger threshold sends fewer,
//! larger batches, and, for slow writes, fewer intermediate values.
//!
//! A fence ([`Replica::fence`]) is collective: each process flushes and
//! sends a fence marker to every other; process 0 sends its marker only
//! after it has every other's, so that every coherent write issued before
//! any fence has been sequenced and sent before it. Once a process holds
//! every other's marker, every write issued anywhere before the fence has
//! been applied at its replica (each marker follows its sender's writes on
//! the same channel).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bulkwire_proto::{Time, WarpConfig, WarpEstimator};

use crate::codec::{self, Entry, Message};
use crate::element::ElemType;

/// How a write reaches the other replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Semantics {
    Coherent,
    Pram,
    Slow,
}

impl std::str::FromStr for Semantics {
    type Err = String;
    fn from_str(s: &str) -> Result<Semantics, String> {
        match s.trim() {
            "coherent" => Ok(Semantics::Coherent),
            "pram" => Ok(Semantics::Pram),
            "slow" => Ok(Semantics::Slow),
            other => Err(format!("{other:?} is not a write semantics: coherent, pram or slow")),
        }
    }
}

/// The most writes in one batch message.
pub const MAX_BATCH: usize = 50_000;

/// Bytes waiting for the transport past which a writer waits (back-pressure:
/// without it, a writer faster than the network would queue without bound,
/// and its peers would read ever older values).
pub const QUEUED_LIMIT: usize = 1 << 20;

/// A segment's number: the order in which this process mapped it (every
/// process maps the same segments in the same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegId(pub u32);

/// The elements of a segment, each in a 64-bit word (a value of at most 8
/// bytes, by its bits), shared between the replica, which stores what
/// arrives, and the application, which reads without a lock.
#[derive(Debug)]
pub struct Storage {
    pub name: String,
    pub elem: ElemType,
    words: Box<[AtomicU64]>,
}

impl Storage {
    fn new(name: &str, elem: ElemType, len: usize) -> Storage {
        Storage { name: name.to_string(), elem, words: (0..len).map(|_| AtomicU64::new(0)).collect() }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The bits of element `index` (acquire: a later read sees at least
    /// what was stored before it by the same batch or coherent order).
    pub fn load(&self, index: usize) -> u64 {
        self.words[index].load(Ordering::Acquire)
    }

    fn store(&self, index: usize, bits: u64) {
        self.words[index].store(bits, Ordering::Release);
    }
}

/// How the buffer of slow and PRAM writes is flushed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Flush {
    /// When more than this many writes wait (a fixed `Λ·b`).
    Fixed(usize),
    /// Under Warp control (seed 003 §3): when more than `Λ·quantum` writes
    /// wait, Λ starting at `scale` and moving at each warp sample by
    /// `Λ ← Λ·(1 − epsilon·(1 − warp))`: seed 003's RAP with the sign of ε
    /// reversed, as Mermera's buffer threshold needs, and its step scaled
    /// by Λ. The seed's additive step, with ε per second of the sample's
    /// span ([`bulkwire_proto::BufferedSubmission`]'s law), left Λ within
    /// 20% of its start after 5,000 batches of the solver on the test bed
    /// (`bench solver`), while the threshold that ran it fastest was 50×
    /// the start; the scaled step covers that in a few hundred samples.
    /// Λ stays between `min_scale` and `max_scale`.
    Warp { quantum: f64, scale: f64, epsilon: f64, min_scale: f64, max_scale: f64 },
}

impl Flush {
    /// Warp control with the paper's quantum (b = 20 writes) starting at
    /// `scale`, which is also its floor: Λ rises above it under congestion
    /// and comes back to it, never below (below it, on a network that
    /// keeps up, the buffer would be flushed at every write, and a batch's
    /// headers would cost more than its writes: measured on the test bed,
    /// 3.6× the bytes and 2.2× the time of a fixed threshold). ε = 0.05: a
    /// sample of warp 2 raises Λ by 5%.
    pub fn warp(scale: f64) -> Flush {
        Flush::Warp { quantum: 20.0, scale, epsilon: 0.05, min_scale: scale, max_scale: 1000.0 }
    }

    fn threshold(&self, scale: f64) -> f64 {
        match *self {
            Flush::Fixed(n) => n as f64,
            Flush::Warp { quantum, .. } => scale * quantum,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub rank: u32,
    pub ranks: u32,
    pub flush: Flush,
    /// The longest a buffered write waits before a flush.
    pub max_delay: Duration,
}

impl Config {
    pub fn new(rank: u32, ranks: u32) -> Config {
        Config { rank, ranks, flush: Flush::Fixed(64), max_delay: Duration::from_millis(5) }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DsmError {
    #[error("{call}: no segment {seg} is mapped here ({mapped} are)")]
    NotMapped { call: &'static str, seg: u32, mapped: usize },
    #[error("{call}: index {index} is out of range: segment {name:?} has {len} elements")]
    OutOfRange { call: &'static str, name: String, index: u64, len: usize },
    #[error("{call}: segment {name:?} holds {held}, not {asked}")]
    WrongType { call: &'static str, name: String, held: &'static str, asked: &'static str },
    #[error(
        "map: segment {seg} is {name:?} of {len} {elem} here but {their_name:?} of {their_len} {their_elem} at rank {rank}: \
         every process must map the same segments, in the same order, with the same sizes and types"
    )]
    Mismatch {
        seg: u32,
        name: String,
        len: u64,
        elem: &'static str,
        rank: u32,
        their_name: String,
        their_len: u64,
        their_elem: &'static str,
    },
    #[error("map: segment {name:?} is mapped already (as segment {seg})")]
    MappedTwice { name: String, seg: u32 },
    #[error("rank {rank} sent a malformed shared-memory message: {why}")]
    Malformed { rank: u32, why: String },
    #[error("{var}: {why}")]
    Setting { var: &'static str, why: String },
    #[error("{0}")]
    Runtime(String),
}

/// A coherent write under way: done once applied here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

/// A write as a replica applied it, for a history checker
/// ([`Replica::record`]): its writer, what it wrote, and its place in the
/// coherent order if it is coherent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    pub writer: u32,
    pub entry: Entry,
    pub global: Option<u64>,
}

/// Counters of a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Writes issued here, by kind.
    pub slow_writes: u64,
    pub pram_writes: u64,
    pub coherent_writes: u64,
    /// Slow writes that replaced a waiting one (never sent).
    pub coalesced: u64,
    pub batches_sent: u64,
    /// Entries sent in batches, to each replica counted once.
    pub entries_sent: u64,
    pub bytes_sent: u64,
    pub batches_received: u64,
    /// Writes of others applied here.
    pub applied: u64,
    pub flushes_by_threshold: u64,
    pub flushes_by_delay: u64,
    pub flushes_by_fence: u64,
    pub warp_samples: u64,
    /// The last warp computed, and the threshold now.
    pub last_warp: f64,
    pub threshold: f64,
}

#[derive(Debug)]
struct Segment {
    storage: Arc<Storage>,
}

/// What a peer said it mapped as a segment number.
#[derive(Clone, Debug)]
struct Announced {
    name: String,
    len: u64,
    elem: ElemType,
}

#[derive(Debug)]
pub struct Replica {
    config: Config,
    segments: Vec<Segment>,
    announced: HashMap<(u32, u32), Announced>,
    /// Messages from each peer held, in order, until a segment they write
    /// is mapped here (order matters: PRAM and coherent order).
    held: Vec<VecDeque<Message>>,
    /// Slow and PRAM writes waiting to be flushed, in order.
    buffer: Vec<Entry>,
    /// Where a slow write to a location waits in `buffer`.
    slow_at: HashMap<(u32, u64), usize>,
    /// Writes issued since the last flush (replaced ones included).
    issued: usize,
    oldest: Option<Time>,
    /// Coherent writes issued and applied here, of this writer.
    coherent_issued: u64,
    coherent_applied: u64,
    /// Process 0: the next global number; elsewhere, the next expected.
    next_global: u64,
    fence_epoch: u64,
    /// Markers received per epoch.
    fence_markers: BTreeMap<u64, u32>,
    /// Process 0 has sent its marker of this epoch.
    fence_sent: u64,
    outbox: VecDeque<(u32, Vec<u8>)>,
    /// Bytes in `outbox`.
    queued: usize,
    warp: WarpEstimator,
    /// Λ under Warp control.
    scale: f64,
    failure: Option<DsmError>,
    stats: Stats,
    log: Option<Vec<Applied>>,
}

impl Replica {
    pub fn new(config: Config) -> Replica {
        let scale = match config.flush {
            Flush::Fixed(_) => 1.0,
            Flush::Warp { scale, .. } => scale,
        };
        Replica {
            config,
            segments: Vec::new(),
            announced: HashMap::new(),
            held: (0..config.ranks).map(|_| VecDeque::new()).collect(),
            buffer: Vec::new(),
            slow_at: HashMap::new(),
            issued: 0,
            oldest: None,
            coherent_issued: 0,
            coherent_applied: 0,
            next_global: 0,
            fence_epoch: 0,
            fence_markers: BTreeMap::new(),
            fence_sent: 0,
            outbox: VecDeque::new(),
            queued: 0,
            warp: WarpEstimator::new(config.ranks, &WarpConfig::default()),
            scale,
            failure: None,
            stats: Stats::default(),
            log: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> Stats {
        Stats { threshold: self.threshold(), ..self.stats }
    }

    /// The first error a peer's message or a mismatched mapping caused:
    /// every later call should report it.
    pub fn failure(&self) -> Option<&DsmError> {
        self.failure.as_ref()
    }

    fn others(&self) -> impl Iterator<Item = u32> + '_ {
        let me = self.config.rank;
        (0..self.config.ranks).filter(move |&r| r != me)
    }

    fn send_all(&mut self, bytes: Vec<u8>) {
        let others: Vec<u32> = self.others().collect();
        for to in others {
            self.stats.bytes_sent += bytes.len() as u64;
            self.queued += bytes.len();
            self.outbox.push_back((to, bytes.clone()));
        }
    }

    // ----- segments ------------------------------------------------------

    /// Maps a segment of `len` elements of `elem` called `name` (every
    /// process maps the same segments in the same order); its elements
    /// start at zero. Writes that came for it before are applied now.
    pub fn map(&mut self, name: &str, elem: ElemType, len: usize) -> Result<SegId, DsmError> {
        if let Some(i) = self.segments.iter().position(|s| s.storage.name == name) {
            return Err(DsmError::MappedTwice { name: name.to_string(), seg: i as u32 });
        }
        let seg = self.segments.len() as u32;
        self.segments.push(Segment { storage: Arc::new(Storage::new(name, elem, len)) });
        for rank in self.others().collect::<Vec<_>>() {
            if let Some(theirs) = self.announced.remove(&(rank, seg)) {
                self.check_same(seg, rank, &theirs);
            }
        }
        self.send_all(codec::encode(&Message::Map { seg, len: len as u64, elem, name: name.to_string() }));
        self.release_held();
        Ok(SegId(seg))
    }

    fn check_same(&mut self, seg: u32, rank: u32, theirs: &Announced) {
        let mine = &self.segments[seg as usize].storage;
        if mine.name != theirs.name || mine.len() as u64 != theirs.len || mine.elem != theirs.elem {
            let error = DsmError::Mismatch {
                seg,
                name: mine.name.clone(),
                len: mine.len() as u64,
                elem: mine.elem.name(),
                rank,
                their_name: theirs.name.clone(),
                their_len: theirs.len,
                their_elem: theirs.elem.name(),
            };
            self.failure.get_or_insert(error);
        }
    }

    /// The elements of segment `seg`, for reads.
    pub fn storage(&self, seg: SegId) -> Option<Arc<Storage>> {
        self.segments.get(seg.0 as usize).map(|s| s.storage.clone())
    }

    fn check(&self, call: &'static str, seg: SegId, index: u64) -> Result<(), DsmError> {
        let s = self.segments.get(seg.0 as usize).ok_or(DsmError::NotMapped {
            call,
            seg: seg.0,
            mapped: self.segments.len(),
        })?;
        if index >= s.storage.len() as u64 {
            return Err(DsmError::OutOfRange { call, name: s.storage.name.clone(), index, len: s.storage.len() });
        }
        Ok(())
    }

    // ----- writes --------------------------------------------------------

    /// Writes `bits` at `index` of `seg` here at once, and to the other
    /// replicas by `semantics`. A coherent write returns a ticket, done
    /// ([`Replica::is_done`]) once the write has its place in the one order
    /// and is applied here; until then this replica holds the old value.
    pub fn write(
        &mut self,
        now: Time,
        seg: SegId,
        index: u64,
        bits: u64,
        semantics: Semantics,
    ) -> Result<Option<Ticket>, DsmError> {
        self.check("write", seg, index)?;
        let entry = Entry { seg: seg.0, index, bits };
        match semantics {
            Semantics::Coherent => {
                self.stats.coherent_writes += 1;
                // Writes issued before go first (one flush, before the
                // sequencer's order takes this one).
                self.flush_at(now);
                self.coherent_issued += 1;
                let ticket = Ticket(self.coherent_issued);
                if self.config.rank == 0 {
                    self.sequence(0, entry);
                } else {
                    self.stats.bytes_sent += codec::COHERENT_REQUEST_LEN as u64;
                    self.queued += codec::COHERENT_REQUEST_LEN;
                    self.outbox.push_back((0, codec::encode(&Message::CoherentRequest(entry))));
                }
                return Ok(Some(ticket));
            }
            Semantics::Slow => {
                self.stats.slow_writes += 1;
                self.apply(entry);
                match self.slow_at.get(&(entry.seg, index)) {
                    Some(&at) => {
                        self.buffer[at].bits = bits;
                        self.stats.coalesced += 1;
                    }
                    None => {
                        self.slow_at.insert((entry.seg, index), self.buffer.len());
                        self.buffer.push(entry);
                    }
                }
            }
            Semantics::Pram => {
                self.stats.pram_writes += 1;
                self.apply(entry);
                // A PRAM write after a waiting slow write to the same
                // location must not be overtaken by the slow one's later
                // replacement: the slow entry stops taking replacements.
                self.slow_at.remove(&(entry.seg, index));
                self.buffer.push(entry);
            }
        }
        self.issued += 1;
        self.oldest.get_or_insert(now);
        if self.issued as f64 > self.threshold() {
            self.stats.flushes_by_threshold += 1;
            self.flush_at(now);
        }
        Ok(None)
    }

    /// Whether the coherent write of `ticket` is applied here.
    pub fn is_done(&self, ticket: Ticket) -> bool {
        self.coherent_applied >= ticket.0
    }

    fn apply(&mut self, e: Entry) {
        self.apply_logged(self.config.rank, e, None);
    }

    fn apply_logged(&mut self, writer: u32, e: Entry, global: Option<u64>) {
        self.segments[e.seg as usize].storage.store(e.index as usize, e.bits);
        if let Some(log) = &mut self.log {
            log.push(Applied { writer, entry: e, global });
        }
    }

    /// Keeps a log of every write applied here from now on, in the order
    /// applied ([`Replica::take_log`]): for history checkers.
    pub fn record(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    pub fn take_log(&mut self) -> Vec<Applied> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Process 0 gives `entry` of `writer` its place in the one order.
    fn sequence(&mut self, writer: u32, entry: Entry) {
        let global = self.next_global;
        self.next_global += 1;
        self.send_all(codec::encode(&Message::Coherent { global, writer, entry }));
        self.apply_logged(writer, entry, Some(global));
        if writer == self.config.rank {
            self.coherent_applied += 1;
        }
    }

    /// Sends what the buffer holds now, as one batch to every replica.
    pub fn flush(&mut self, now: Time) {
        self.flush_at(now);
    }

    fn flush_at(&mut self, now: Time) {
        if self.buffer.is_empty() {
            self.issued = 0;
            self.oldest = None;
            return;
        }
        let entries = std::mem::take(&mut self.buffer);
        self.slow_at.clear();
        self.issued = 0;
        self.oldest = None;
        self.stats.entries_sent += entries.len() as u64;
        // Batches of at most MAX_BATCH writes (1 MB), each a message the
        // transport takes; one writer's batches arrive in order.
        for chunk in entries.chunks(MAX_BATCH) {
            self.stats.batches_sent += 1;
            self.send_all(codec::encode(&Message::Batch { sent: now.as_nanos(), entries: chunk.to_vec() }));
        }
    }

    // ----- fence ---------------------------------------------------------

    /// Begins a fence (collective); returns its number, done
    /// ([`Replica::fence_done`]) once every write issued anywhere before
    /// any process's fence is applied here.
    pub fn fence(&mut self, now: Time) -> u64 {
        if !self.buffer.is_empty() {
            self.stats.flushes_by_fence += 1;
        }
        self.flush_at(now);
        self.fence_epoch += 1;
        let epoch = self.fence_epoch;
        if self.config.rank != 0 {
            self.send_all(codec::encode(&Message::Fence { epoch }));
        }
        self.maybe_release_fence();
        epoch
    }

    fn maybe_release_fence(&mut self) {
        let epoch = self.fence_epoch;
        if self.config.rank == 0
            && self.fence_sent < epoch
            && self.fence_markers.get(&epoch).copied().unwrap_or(0) + 1 >= self.config.ranks
        {
            self.fence_sent = epoch;
            self.send_all(codec::encode(&Message::Fence { epoch }));
        }
    }

    pub fn fence_done(&self, epoch: u64) -> bool {
        epoch <= self.fence_epoch && self.fence_markers.get(&epoch).copied().unwrap_or(0) + 1 >= self.config.ranks
    }

    // ----- the network ---------------------------------------------------

    /// A message `bytes` from `from` arrived at `now`.
    pub fn handle(&mut self, now: Time, from: u32, bytes: &[u8]) {
        if from >= self.config.ranks || from == self.config.rank {
            return;
        }
        let message = match codec::decode(bytes) {
            Ok(m) => m,
            Err(why) => {
                self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                return;
            }
        };
        if let Message::Batch { sent, .. } = &message {
            self.stats.batches_received += 1;
            self.observe_warp(from, Time::from_nanos(*sent), now);
        }
        let held = &mut self.held[from as usize];
        if !held.is_empty() {
            held.push_back(message);
            return;
        }
        if let Some(m) = self.take(from, message) {
            self.held[from as usize].push_back(m);
        }
    }

    /// Uses `message` from `from`, or gives it back if it writes a segment
    /// not mapped here yet.
    fn take(&mut self, from: u32, message: Message) -> Option<Message> {
        let mapped = self.segments.len() as u32;
        match message {
            Message::Map { seg, len, elem, name } => {
                let theirs = Announced { name, len, elem };
                if seg < mapped {
                    self.check_same(seg, from, &theirs);
                } else {
                    self.announced.insert((from, seg), theirs);
                }
                None
            }
            Message::Batch { sent, entries } => {
                if entries.iter().any(|e| e.seg >= mapped) {
                    return Some(Message::Batch { sent, entries });
                }
                if let Some(bad) = entries.iter().find(|e| !self.in_range(e)) {
                    let why = format!("a write to element {} of segment {}, out of its range", bad.index, bad.seg);
                    self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                    return None;
                }
                self.stats.applied += entries.len() as u64;
                for e in entries {
                    self.apply_logged(from, e, None);
                }
                None
            }
            Message::CoherentRequest(entry) => {
                if self.config.rank != 0 {
                    let why = "a coherent write sent to a process that is not the sequencer".into();
                    self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                    return None;
                }
                if entry.seg >= mapped {
                    return Some(Message::CoherentRequest(entry));
                }
                if !self.in_range(&entry) {
                    let why =
                        format!("a coherent write to element {} of segment {}, out of range", entry.index, entry.seg);
                    self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                    return None;
                }
                self.sequence(from, entry);
                None
            }
            Message::Coherent { global, writer, entry } => {
                if from != 0 || global != self.next_global {
                    let why = format!("coherent write {global} from rank {from}, expected {} from 0", self.next_global);
                    self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                    return None;
                }
                if entry.seg >= mapped {
                    return Some(Message::Coherent { global, writer, entry });
                }
                if !self.in_range(&entry) {
                    let why =
                        format!("a coherent write to element {} of segment {}, out of range", entry.index, entry.seg);
                    self.failure.get_or_insert(DsmError::Malformed { rank: from, why });
                    return None;
                }
                self.next_global += 1;
                self.stats.applied += 1;
                self.apply_logged(writer, entry, Some(global));
                if writer == self.config.rank {
                    self.coherent_applied += 1;
                }
                None
            }
            Message::Fence { epoch } => {
                *self.fence_markers.entry(epoch).or_insert(0) += 1;
                self.maybe_release_fence();
                None
            }
        }
    }

    fn in_range(&self, e: &Entry) -> bool {
        self.segments.get(e.seg as usize).is_some_and(|s| e.index < s.storage.len() as u64)
    }

    /// Uses held messages whose segments are mapped now, in order.
    fn release_held(&mut self) {
        for from in 0..self.config.ranks {
            while let Some(m) = self.held[from as usize].pop_front() {
                if let Some(back) = self.take(from, m) {
                    self.held[from as usize].push_front(back);
                    break;
                }
            }
        }
    }

    fn observe_warp(&mut self, from: u32, sent: Time, now: Time) {
        let Some(sample) = self.warp.observe(from, sent, now) else { return };
        self.stats.warp_samples += 1;
        self.stats.last_warp = sample.warp;
        if let Flush::Warp { epsilon, min_scale, max_scale, .. } = self.config.flush {
            // Seed 003 §3: Λ rises with congestion (warp above 1), so that
            // the buffer is flushed less often, and falls while the network
            // keeps up. One sample's warp counts at most 10: a batch held up
            // once (a scheduling delay) must not swing Λ to its ceiling.
            let warp = sample.warp.min(10.0);
            let scale = self.scale * (1.0 - epsilon * (1.0 - warp)).max(0.5);
            self.scale = scale.clamp(min_scale, max_scale);
        }
    }

    /// The next message to send: `(to, bytes)`.
    pub fn poll_transmit(&mut self) -> Option<(u32, Vec<u8>)> {
        let m = self.outbox.pop_front()?;
        self.queued -= m.1.len();
        Some(m)
    }

    /// Gives back a message the transport had no room for: it goes first.
    pub fn unsend(&mut self, to: u32, bytes: Vec<u8>) {
        self.queued += bytes.len();
        self.outbox.push_front((to, bytes));
    }

    /// Bytes of messages waiting for room in the transport: a writer that
    /// outruns the network finds them growing, and should wait (the
    /// runtime's [`crate::Dsm`] does past [`crate::replica::QUEUED_LIMIT`]).
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// When the buffer's oldest write will have waited `max_delay`.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.oldest.map(|t| t + self.config.max_delay)
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.stats.flushes_by_delay += 1;
            self.flush_at(now);
        }
    }

    /// The threshold now (writes), `Λ·b`.
    pub fn threshold(&self) -> f64 {
        self.config.flush.threshold(self.scale)
    }

    /// Λ under Warp control (1 otherwise).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Messages waiting for a segment not mapped here.
    pub fn held(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }
}
