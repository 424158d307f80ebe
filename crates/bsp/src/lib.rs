//! BSPlib for bulkwire: bulk-synchronous supersteps over the runtime's
//! reliable channels, with a sync that exploits what the whole job knows
//! (seed 002, "Exploiting Global Structure for Performance on Clusters").
//!
//! ```no_run
//! use bulkwire_bsp::{Bsp, BspError};
//!
//! fn main() -> Result<(), BspError> {
//!     let mut bsp = Bsp::begin()?;
//!     let (pid, p) = (bsp.pid(), bsp.nprocs());
//!     let x = bsp.register::<u64>(p as usize)?; // collective: in effect after the sync
//!     bsp.sync()?;
//!     for to in 0..p {
//!         bsp.put(to, &[u64::from(pid)], &x, pid as usize)?; // copies now, lands at the sync
//!     }
//!     bsp.send((pid + 1) % p, &[], b"hello")?;
//!     bsp.sync()?;
//!     assert_eq!(bsp.area(&x), (0..u64::from(p)).collect::<Vec<_>>());
//!     for m in bsp.messages() {
//!         assert_eq!(m.payload, b"hello");
//!     }
//!     bsp.end()
//! }
//! ```
//!
//! Semantics are the BSPlib standard's (Hill et al., 1997): registration is
//! collective, matched across processes by order, in effect from the next
//! sync, and the most recent registration of an address wins; `put` copies
//! its source when called, `hpput` may read it at any time until the sync
//! ends; `get` reads the remote value as it was at the end of the
//! superstep's computation: every get is served before any put lands; BSMP
//! messages can be read during the next superstep only; a tag size set in
//! one superstep applies from the next.
//!
//! Two levels of API share one engine:
//!
//! - the safe one: areas the [`Bsp`] owns ([`Bsp::register`] gives a
//!   [`Reg`] handle), typed [`Bsp::put`] and [`Bsp::get`] on slices,
//!   [`Bsp::messages`] to iterate over the BSMP queue;
//! - the raw one (`unsafe fn …_raw`), for the C ABI: registrations named by
//!   the address of the area, puts and gets on raw memory.
//!
//! Every misuse is an [`BspError`] naming the process, the call and the
//! reason. A process that leaves without [`Bsp::end`] (an error, a panic)
//! stops the whole job with that reason, so no process waits forever.
//!
//! The sync is in `sync.rs`, in the paper's numbered phases. Environment:
//!
//! - `BULKWIRE_BSP_ORDER=latin|pid|random`: destination order (default latin);
//! - `BULKWIRE_BSP_PACING=0`: no pacing (for comparison);
//! - `BULKWIRE_BSP_RATE=RATE`: the link rate of every process (`100mbit`,
//!   `1gbit`, bits per second as tc writes them); with it, pacing also
//!   limits the injection rate to each receiver's share of its port;
//! - `BULKWIRE_BSP_EAGER=BYTES`: streams to one destination of at most
//!   this size leave before the barrier rather than after it in schedule
//!   order (default 65536 when the job runs on one host, 0 otherwise; see
//!   [`Bsp::set_eager`]);
//! - `BULKWIRE_BSP_BARRIER=board|star|dissemination`: how the barrier's
//!   reduction flows: through shared memory, each process posting its own
//!   and reading everyone's (`board`, the default where every process of
//!   the job is on one host, up to 16 of them: no message at all), to
//!   process 0 and back (`star`, the default elsewhere where processes
//!   outnumber cores: the fewest messages), or by dissemination (the
//!   default elsewhere: the fewest rounds); process 0's value;
//! - `BULKWIRE_BSP_FANOUT=K`: partners per round of the dissemination
//!   (default 7, one round up to 8 processes, or 2 where processes
//!   outnumber cores; 1 is the classic dissemination barrier), process 0's
//!   value; setting it alone chooses the dissemination;
//! - `BULKWIRE_BSP_LAND_EARLY=0`: every put lands after the transfer
//!   (by default the stream of the first process that puts here lands as
//!   its pieces arrive, up to the first put that would land on the
//!   source of one of this process's hpputs or the target of one of its
//!   gets: the standard's order is then kept);
//! - `BULKWIRE_BSP_BOARD_STREAMS=0`: every stream that leaves before the
//!   barrier goes as messages (by default, where the barrier is on the
//!   board, the streams that fit ride in the process's post behind its
//!   reduction, and each reader takes the one to it from there);
//! - `BULKWIRE_BSP_STATS=1`: packet statistics (Table 5) on stderr at `end`;
//! - `BULKWIRE_PROFILE=FILE`: a JSON line per superstep in `FILE.<pid>`.

mod error;
mod landing;
mod pacing;
mod queue;
mod reduction;
mod registry;
mod repackaging;
mod schedule;
mod stats;
mod sync;

use std::any::Any;
use std::marker::PhantomData;
use std::time::Instant;

use bulkwire_runtime::{JobEnv, Runtime, RuntimeError};

pub use error::{BspError, Call, Reason};
pub use pacing::parse_rate;
pub use queue::{Message, Messages, Queue};
pub use reduction::BOARD_DEFAULT_MAX;
pub use schedule::Order;
pub use stats::{PacketStats, SuperstepProfile};
pub use sync::empty_sync_message_len;

use reduction::{Barrier, Reduction};
use registry::{Area, Registry, Slot};
use repackaging::GetRequest;
use stats::Profiler;

/// Environment variable setting the barrier's fan-out (every process
/// checks it; process 0's value counts).
pub const FANOUT_ENV: &str = "BULKWIRE_BSP_FANOUT";
/// Environment variable choosing the barrier: `star` or `dissemination`
/// (every process checks it; process 0's value counts).
pub const BARRIER_ENV: &str = "BULKWIRE_BSP_BARRIER";
/// Environment variable choosing the destination order.
pub const ORDER_ENV: &str = "BULKWIRE_BSP_ORDER";
/// Environment variable turning pacing off (`0`).
pub const PACING_ENV: &str = "BULKWIRE_BSP_PACING";
/// Environment variable keeping every put until the transfer ends (`0`),
/// instead of landing a stream's puts as its pieces arrive where that
/// keeps the standard's order (for comparison).
pub const LAND_EARLY_ENV: &str = "BULKWIRE_BSP_LAND_EARLY";
/// Environment variable sending every stream that leaves before the
/// barrier as messages (`0`), instead of in the board's posts where the
/// barrier is on the board (for comparison).
pub const BOARD_STREAMS_ENV: &str = "BULKWIRE_BSP_BOARD_STREAMS";
/// Environment variable giving the link rate that pacing keeps under.
pub const RATE_ENV: &str = "BULKWIRE_BSP_RATE";
/// Environment variable giving the largest stream to one destination
/// (bytes) that leaves before the barrier; `0`: none (see [`Bsp::set_eager`]).
pub const EAGER_ENV: &str = "BULKWIRE_BSP_EAGER";
/// [`Bsp::eager`] of a job on one host unless [`EAGER_ENV`] says otherwise.
pub const DEFAULT_EAGER: usize = 64 << 10;
/// Puts of at least this many bytes to a process on this host that reads
/// this one's memory are direct puts (read by the receiver from here, see
/// `repackaging`); smaller ones go through the shared-memory rings, which
/// a single `process_vm_readv` beats only for large messages.
pub const DIRECT_PUT_MIN: usize = 256 << 10;
/// Puts (and hpputs, and get replies) of at least this many bytes to a
/// process on this host are copied into this process's arena in shared
/// memory, from where the receiver copies them into the area as it lands
/// them: two copies of their bytes where the rings take four (into the
/// stream, into the ring, out of it, into the area). Smaller ones cost
/// little either way and travel in the stream; puts from
/// [`DIRECT_PUT_MIN`] are direct puts where the receiver reads this
/// process's memory, and what finds the arena's half full goes in the
/// stream. See `BULKWIRE_SHM_ARENA` for the arena's size (0: none).
pub const ARENA_PUT_MIN: usize = 1 << 10;
/// Environment variable asking for packet statistics at `end` (`1`).
pub const STATS_ENV: &str = "BULKWIRE_BSP_STATS";
/// Environment variable naming the profile: one file `FILE.<pid>` per process.
pub const PROFILE_ENV: &str = "BULKWIRE_PROFILE";

/// Plain data: any bit pattern is a valid value and there is no padding,
/// so values can travel as bytes.
///
/// # Safety
///
/// Implement only for types without padding, pointers or invalid bit patterns.
pub unsafe trait Pod: Copy + Send + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(unsafe impl Pod for $t {})* };
}
pod!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);
// SAFETY: an array of plain data is plain data (no padding between elements).
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// `values` as bytes.
pub fn as_bytes<T: Pod>(values: &[T]) -> &[u8] {
    // SAFETY: T is plain data, so every byte of the slice is initialised.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

/// `values` as mutable bytes.
pub fn as_bytes_mut<T: Pod>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: T is plain data, so any bytes written make valid values.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), std::mem::size_of_val(values)) }
}

/// An area owned by the safe API, of some `Pod` element type.
trait OwnedArea: Any + Send {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Pod> OwnedArea for Vec<T> {
    fn bytes(&self) -> &[u8] {
        as_bytes(self)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        as_bytes_mut(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A registered area of `T`s owned by the [`Bsp`]: the same handle names
/// the corresponding area on every process (registrations match by order).
/// Read and write the local area with [`Bsp::area`] and [`Bsp::area_mut`].
#[derive(Debug)]
pub struct Reg<T> {
    slot: Slot,
    index: usize,
    len: usize,
    _type: PhantomData<fn() -> T>,
}

impl<T> Reg<T> {
    /// Elements in the local area.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A BSMP message taken with [`Bsp::hpmove_raw`]: pointers into the
/// receive buffer, valid until the next sync.
#[derive(Clone, Copy, Debug)]
pub struct RawMessage {
    pub tag: *const u8,
    pub tag_len: usize,
    pub payload: *const u8,
    pub payload_len: usize,
}

/// What this process sends to one destination in the current superstep.
#[derive(Debug)]
struct Outbox {
    /// Puts and sends, already repackaged as records (phase 3 happens as
    /// the calls are made).
    stream: repackaging::OutStream,
    /// Gets asked of the destination, in order.
    requests: Vec<GetRequest>,
    /// Where each get's reply lands here.
    targets: Vec<GetTarget>,
    /// Copies of large puts' sources that the destination, on this host,
    /// reads from this process's memory (direct puts, see
    /// `repackaging`), kept until it has read them.
    lent: Vec<Vec<u8>>,
    /// The stream holds direct puts: the sync waits for the destination to
    /// say it has read them.
    direct: bool,
}

impl Outbox {
    /// An empty outbox for each of `p` processes.
    fn all(p: u32) -> Vec<Outbox> {
        (0..p)
            .map(|_| Outbox {
                stream: repackaging::OutStream::new(sync::shares_packet_with_stream(p)),
                requests: Vec::new(),
                targets: Vec::new(),
                lent: Vec::new(),
                direct: false,
            })
            .collect()
    }

    /// Empties the outbox for another superstep, keeping the room of its
    /// lists (a stream's buffer is not kept: it was handed off, or see
    /// `OutStream::take_buffer`).
    fn reset(&mut self, slack: usize) {
        self.stream = repackaging::OutStream::new(slack);
        self.requests.clear();
        self.targets.clear();
        self.lent.clear();
        self.direct = false;
    }

    /// Nothing to send or ask for, and nothing lent.
    fn is_idle(&self) -> bool {
        self.stream.is_empty() && self.requests.is_empty() && self.lent.is_empty() && !self.direct
    }
}

#[derive(Clone, Copy, Debug)]
enum GetTarget {
    Raw(usize),
    Owned { index: usize, at: usize },
}

/// An `hpput`: its source is read at the sync.
#[derive(Clone, Copy, Debug)]
struct HpPut {
    to: u32,
    src: usize,
    slot: Slot,
    offset: u64,
    len: usize,
}

/// The runtime a computation runs on: its own, started by `begin` and
/// finished by `end`, or one that outlives it ([`Bsp::begin_on`]).
pub(crate) enum Held {
    Owned(Runtime),
    Shared(&'static Runtime),
}

impl std::ops::Deref for Held {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        match self {
            Held::Owned(rt) => rt,
            Held::Shared(rt) => rt,
        }
    }
}

/// This process's arena in shared memory: each superstep writes one half,
/// the next the other (see `repackaging`).
#[derive(Debug)]
struct Arena {
    /// The arena's address (kept as a number: the memory is the runtime's
    /// mapping, which lives as long as the runtime this process holds).
    at: usize,
    half: usize,
    /// Bytes of the current superstep's half taken.
    used: usize,
}

impl Arena {
    /// Copies `data` into superstep `superstep`'s half if it goes there
    /// ([`ARENA_PUT_MIN`]) and fits, and returns where in the arena.
    fn copy(&mut self, superstep: u64, data: &[u8]) -> Option<u64> {
        if data.len() < ARENA_PUT_MIN || self.half - self.used < data.len() {
            return None;
        }
        let at = (superstep & 1) as usize * self.half + self.used;
        // SAFETY: `at + data.len()` lies within the arena, the runtime's
        // mapping, alive while this process holds the runtime; no reader
        // reads this half before the sync (see `repackaging`).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.at + at) as *mut u8, data.len()) };
        // Each put's bytes start on a cache line.
        self.used = ((self.used + data.len() + 63) & !63).min(self.half);
        Some(at as u64)
    }
}

/// One process of a BSP computation.
pub struct Bsp {
    rt: Option<Held>,
    pid: u32,
    nprocs: u32,
    started: Instant,
    /// Supersteps completed (the number of syncs so far).
    superstep: u64,
    registry: Registry,
    owned: Vec<Option<Box<dyn OwnedArea>>>,
    outboxes: Vec<Outbox>,
    hpputs: Vec<HpPut>,
    /// Buffers of the last superstep that made direct puts, for the next
    /// one's (a fresh buffer's pages cost the kernel a fault and a clearing
    /// each); they hold as many bytes as that superstep's direct puts.
    spare_lent: Vec<Vec<u8>>,
    /// This superstep's use of the runtime's stage.
    staging: Staging,
    /// The sources of hpputs lent to the runtime in this sync
    /// (`OutStream::hpput_in_place`): the sync ends once every one is
    /// returned, or releases them if it fails.
    loans: Vec<bulkwire_runtime::Loan>,
    /// This process's memory that puts may not land in as they arrive:
    /// the sources of this sync's hpputs, read while it runs (lent to the
    /// runtime, or read by their receivers), and the targets of its gets,
    /// whose replies land before puts. Sorted and apart once the sync has
    /// made it (`sync::merged`).
    off_limits: Vec<std::ops::Range<usize>>,
    /// Direct puts this process has read from their senders' memory.
    direct_puts_read: u64,
    /// This process's arena in shared memory, if it has one (see
    /// `repackaging`), and which processes read it.
    arena: Option<Arena>,
    arena_readers: Vec<bool>,
    /// Puts and get replies this process has read from their senders' arenas.
    arena_reads: u64,
    /// Whether puts may land as they arrive ([`LAND_EARLY_ENV`]), and the
    /// bytes landed so.
    land_early: bool,
    landed_early: u64,
    /// Whether streams that leave before a barrier on the board ride in the
    /// posts ([`BOARD_STREAMS_ENV`]).
    board_streams: bool,
    /// The processes this one reaches over UDP, once the first sync has
    /// asked the runtime.
    udp_peers: Option<Vec<u32>>,
    queue: Queue,
    tagsize: usize,
    next_tagsize: usize,
    /// Calls of `set_tagsize` in this superstep (all processes must agree).
    tagsize_calls: u32,
    order: Order,
    pacing: bool,
    /// Link rate in bits per second, if known: pacing then limits the rate.
    rate: Option<f64>,
    /// Streams of at most this many bytes leave before the barrier.
    eager: usize,
    /// How the barrier's messages flow (process 0's choice).
    barrier: reduction::Barrier,
    /// Supersteps in a row, up to the last, in which every process sent a
    /// stream to every other before the barrier (all processes know it from
    /// the reductions); from two on, the barrier takes one round (see
    /// `Bsp::reduce`).
    eager_to_all_streak: u32,
    /// Rounds of the last barrier (for the profile).
    barrier_rounds: u32,
    /// The last barrier on the board: every process's post, and what they
    /// merged into (see `Bsp::reduce_board`).
    board: sync::BoardMemo,
    /// The last sync's merged reduction, which the next one writes its own
    /// over (`Reduction::rewrite`).
    spare_reduction: Option<Box<Reduction>>,
    /// The records of the last superstep's streams, by sender, emptied
    /// as the next sync parses its streams into them.
    records: Vec<Vec<repackaging::Record>>,
    /// The outboxes the last superstep's sync landed, emptied: the next
    /// one's.
    spare_outboxes: Vec<Outbox>,
    net: sync::Net,
    packet_stats: PacketStats,
    profile: Option<Profiler>,
    computation_started: Instant,
    /// The error that broke the collective state; every later call fails with it.
    failure: Option<BspError>,
    ended: bool,
}

impl Bsp {
    /// Joins the job started by `bulkwire run` (`bsp_begin` with all the
    /// processes there are).
    pub fn begin() -> Result<Bsp, BspError> {
        Bsp::begin_with(u32::MAX)
    }

    /// `bsp_begin(maxprocs)`: the first `maxprocs` processes of the job
    /// take part; any others leave the job quietly (this function does not
    /// return on them; they exit with status 0 once the job ends). Only
    /// process 0's `maxprocs` counts, as in the standard: under
    /// [`Bsp::init`] the others never ran the code that computed it.
    pub fn begin_with(maxprocs: u32) -> Result<Bsp, BspError> {
        Bsp::begin_requested(i64::from(maxprocs))
    }

    /// [`Bsp::begin_with`] for a C caller's `int`: process 0's value is
    /// checked (at least 1) once every process has it, so a meaningless
    /// argument on the others is no error.
    pub fn begin_requested(requested: i64) -> Result<Bsp, BspError> {
        let early = |reason: Reason| BspError { pid: 0, call: Call::Begin, reason };
        let env = JobEnv::from_env().map_err(|e| early(Reason::Runtime(e.to_string())))?;
        let rt = Runtime::start(env.clone()).map_err(|e| BspError {
            pid: env.rank,
            call: Call::Begin,
            reason: Reason::Runtime(e.to_string()),
        })?;
        Bsp::begin_held(Held::Owned(rt), requested)
    }

    /// `bsp_begin` with all the processes of the job, on a runtime that
    /// another layer of this process started and will finish (the Python
    /// package's, shared with its point-to-point and group calls): `end`
    /// leaves it running, and a later `begin_on` starts another BSP
    /// computation on it. Every process of the job must call it.
    pub fn begin_on(rt: &'static Runtime) -> Result<Bsp, BspError> {
        Bsp::begin_held(Held::Shared(rt), i64::from(u32::MAX))
    }

    fn begin_held(rt: Held, requested: i64) -> Result<Bsp, BspError> {
        let (rank, size) = (rt.rank(), rt.size());
        let fail = |reason: Reason| BspError { pid: rank, call: Call::Begin, reason };
        // Few messages where processes share a host's cores (each message
        // then costs CPU time the others wait for: the star; and for the
        // dissemination, fan-out 2 measured best against 1 and 7 with 8
        // processes on 2 cores); fewer rounds where each has its own. Not
        // where hosts are network namespaces of one machine: their links
        // may be what limits the job, and the star sends every message
        // through one process's (8 test-bed hosts behind 20 Mbit/s ports,
        // unpaced exchanges that lose packets: 306-884 ms with the star,
        // 215-237 with the dissemination).
        let shared_cores = rt.host_shares_cores();
        // The board where every process is on this host, if not too many.
        let on_board = rt.with(|e| Ok(e.on_board())).unwrap_or(false);
        let board = on_board && size <= reduction::BOARD_DEFAULT_MAX;
        // Every process checks the setting, but process 0's counts: a bad
        // value there must stop the job, not leave the others waiting.
        let barrier = barrier_setting(shared_cores, board, on_board).map_err(|reason| {
            let error = fail(reason);
            rt.fail(&error.to_string());
            error
        })?;
        let (maxprocs, barrier) = agree_on_maxprocs(&rt, requested, barrier.code(), matches!(rt, Held::Shared(_)))
            .map_err(|e| fail(Reason::Runtime(e.to_string())))?;
        let barrier = Barrier::from_code(barrier);
        let maxprocs = match maxprocs {
            n if n < 0 => return Err(fail(Reason::Negative { what: "maxprocs", value: n })),
            0 => return Err(fail(Reason::Invalid("maxprocs is 0: at least one process is needed".into()))),
            n => u32::try_from(n).unwrap_or(u32::MAX),
        };
        let nprocs = size.min(maxprocs);
        if rank >= nprocs {
            let code = i32::from(rt.finish().is_err());
            std::process::exit(code);
        }
        let order = match std::env::var(ORDER_ENV) {
            Ok(v) => v.parse().map_err(|e: String| fail(Reason::Invalid(format!("{ORDER_ENV}: {e}"))))?,
            Err(_) => Order::default(),
        };
        let pacing = std::env::var(PACING_ENV).map_or(true, |v| v.trim() != "0");
        let land_early = std::env::var(LAND_EARLY_ENV).map_or(true, |v| v.trim() != "0");
        let board_streams = std::env::var(BOARD_STREAMS_ENV).map_or(true, |v| v.trim() != "0");
        let rate = match std::env::var(RATE_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                Some(pacing::parse_rate(&v).map_err(|e| fail(Reason::Invalid(format!("{RATE_ENV}: {e}"))))?)
            }
            _ => None,
        };
        let eager = match std::env::var(EAGER_ENV) {
            Ok(v) if !v.trim().is_empty() => v.trim().parse::<usize>().map_err(|_| {
                fail(Reason::Invalid(format!("{EAGER_ENV}={v}: not a number of bytes (0 sends nothing early)")))
            })?,
            _ if rt.on_loopback() => DEFAULT_EAGER,
            _ => 0,
        };
        let profile = match std::env::var(PROFILE_ENV) {
            Ok(prefix) if !prefix.is_empty() => Some(Profiler::create(&prefix, rank).map_err(|e| BspError {
                pid: rank,
                call: Call::Begin,
                reason: Reason::Runtime(format!("{PROFILE_ENV}: {e}")),
            })?),
            _ => None,
        };
        // Every process knows from each barrier whom it waits for, and asks
        // (prods) for what is late: the receiver drives recovery (seed 002
        // §4.2), and the last packet of a superstep needs no acknowledgement.
        // A stream is read where it arrived, its headers skipped: a piece
        // is delivered in its datagram rather than copied out of it.
        let (max_payload, receiver_packets) = rt
            .with(|e| {
                for peer in (0..nprocs).filter(|&q| q != rank) {
                    e.endpoint.set_receiver_driven(peer, sync::CHANNEL, true);
                }
                e.endpoint.set_in_place(sync::CHANNEL, true);
                Ok((e.endpoint.config().max_payload(), e.endpoint.config().send_buffers()))
            })
            .map_err(|e| fail(Reason::Runtime(e.to_string())))?;
        // The arena, where this process has one that peers read.
        let (arena, arena_readers) = rt
            .with(|e| {
                let (at, len) = e.shared_arena();
                let readers: Vec<bool> = (0..nprocs)
                    .map(|q| q != rank && e.transport(q) == bulkwire_runtime::Transport::Shm && e.peer_arena_len(q) > 0)
                    .collect();
                let arena =
                    (len >= 2 && readers.contains(&true)).then_some(Arena { at: at as usize, half: len / 2, used: 0 });
                Ok((arena, readers))
            })
            .map_err(|e| fail(Reason::Runtime(e.to_string())))?;
        let now = Instant::now();
        Ok(Bsp {
            rt: Some(rt),
            pid: rank,
            nprocs,
            started: now,
            superstep: 0,
            registry: Registry::default(),
            owned: Vec::new(),
            outboxes: Outbox::all(nprocs),
            hpputs: Vec::new(),
            spare_lent: Vec::new(),
            staging: Staging::default(),
            loans: Vec::new(),
            off_limits: Vec::new(),
            direct_puts_read: 0,
            arena,
            arena_readers,
            arena_reads: 0,
            land_early,
            board_streams,
            udp_peers: None,
            landed_early: 0,
            queue: Queue::default(),
            tagsize: 0,
            next_tagsize: 0,
            tagsize_calls: 0,
            order,
            pacing,
            rate,
            eager,
            barrier,
            eager_to_all_streak: 0,
            barrier_rounds: 0,
            board: sync::BoardMemo::default(),
            spare_reduction: None,
            records: Vec::new(),
            spare_outboxes: Vec::new(),
            net: sync::Net::new(nprocs, max_payload, receiver_packets),
            packet_stats: PacketStats::default(),
            profile,
            computation_started: now,
            failure: None,
            ended: false,
        })
    }

    /// `bsp_init`: for programs whose `main` is not the SPMD part. Every
    /// process of the job runs `main`; on all but process 0 this runs
    /// `spmd` (which calls [`Bsp::begin`] and [`Bsp::end`]) and exits, so
    /// that only process 0 goes on with `main` (to read input, say) before
    /// it calls `spmd` itself.
    pub fn init(spmd: impl FnOnce()) -> Result<(), BspError> {
        let env = JobEnv::from_env().map_err(|e| BspError {
            pid: 0,
            call: Call::Init,
            reason: Reason::Runtime(e.to_string()),
        })?;
        if env.rank != 0 {
            spmd();
            std::process::exit(0);
        }
        Ok(())
    }

    /// `bsp_nprocs` before `bsp_begin`: the processes the job has.
    pub fn available() -> Result<u32, BspError> {
        JobEnv::from_env().map(|e| e.size).map_err(|e| BspError {
            pid: 0,
            call: Call::Begin,
            reason: Reason::Runtime(e.to_string()),
        })
    }

    pub fn nprocs(&self) -> u32 {
        self.nprocs
    }

    /// The runtime underneath, for layers that share it (groups use its
    /// channels 3 and 4; BSP uses 2).
    pub fn runtime(&self) -> &Runtime {
        self.rt.as_deref().expect("the runtime is there until end")
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How many puts this process has read straight from their senders'
    /// memory (large puts between processes of one host, see
    /// [`DIRECT_PUT_MIN`]).
    pub fn direct_puts_read(&self) -> u64 {
        self.direct_puts_read
    }

    /// How many puts and get replies this process has read from their
    /// senders' arenas in shared memory (between processes of one host,
    /// see [`ARENA_PUT_MIN`]).
    pub fn arena_reads(&self) -> u64 {
        self.arena_reads
    }

    /// How many bytes of puts this process has landed as their pieces
    /// arrived, during the transfer rather than after it (see
    /// [`LAND_EARLY_ENV`]).
    pub fn bytes_landed_early(&self) -> u64 {
        self.landed_early
    }

    /// Seconds since `begin`.
    pub fn time(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Supersteps completed so far.
    pub fn superstep(&self) -> u64 {
        self.superstep
    }

    /// The destination order of the syncs from now on (each process may
    /// choose; pacing assumes all choose the same).
    pub fn set_order(&mut self, order: Order) {
        self.order = order;
    }

    pub fn order(&self) -> Order {
        self.order
    }

    /// Turns pacing on or off (on by default; off only to compare).
    pub fn set_pacing(&mut self, on: bool) {
        self.pacing = on;
    }

    /// The link rate of every process, bits per second: with pacing on,
    /// each process injects at most its share of the receiving port (the
    /// rate divided by the senders the schedule aims at it at once).
    /// `None` (the default unless `BULKWIRE_BSP_RATE` is set) limits only
    /// the packets in flight. Every process should give the same.
    pub fn set_rate(&mut self, bits_per_s: Option<f64>) -> Result<(), BspError> {
        if let Some(r) = bits_per_s {
            if !r.is_finite() || r < 1e3 {
                let why = format!("set_rate: a link rate of {r} bit/s (at least 1 kbit/s is needed)");
                return Err(self.error(Call::Sync, Reason::Invalid(why)));
            }
        }
        self.rate = bits_per_s;
        Ok(())
    }

    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Sends a stream of at most `bytes` to one destination before the
    /// barrier, with its first round's messages, rather than after it in
    /// the schedule's order (0: none). Its get replies, if the destination
    /// asked for any, follow after the barrier. The data then travels while
    /// the barrier runs, and the receiver has it when the barrier ends.
    ///
    /// On one host (loopback) the default is [`DEFAULT_EAGER`]: no link nor
    /// switch port lies between the processes, so there is nothing for the
    /// destination order to spare (it made no consistent difference there),
    /// and a total exchange of 16 KiB per pair with 8 processes on 2 cores
    /// took 440-500 us where it took 520-540 us with nothing sent early (in
    /// the same runs; 19.7-20.0 against 26.0-26.3 us with 2 processes).
    /// Elsewhere it is 0, so that every byte keeps to the schedule; nothing
    /// goes early in the last superstep, nor when pacing keeps to a link
    /// rate. Processes may differ in this.
    pub fn set_eager(&mut self, bytes: usize) {
        self.eager = bytes;
    }

    /// The barrier this computation's syncs take (process 0's choice, see
    /// `BULKWIRE_BSP_BARRIER`): `board`, `star` or `dissemination k=K`.
    pub fn barrier(&self) -> String {
        match self.barrier {
            Barrier::Board => "board".into(),
            Barrier::Star => "star".into(),
            Barrier::Dissemination(k) => {
                format!("dissemination k={}", k.clamp(1, self.nprocs.saturating_sub(1).max(1)))
            }
        }
    }

    pub fn eager(&self) -> usize {
        self.eager
    }

    /// Packet counters of bsp's channel so far (Table 5).
    pub fn packet_stats(&self) -> PacketStats {
        let mut s = self.packet_stats;
        if let Some(rt) = &self.rt {
            let _ = rt.with(|e| {
                for peer in (0..self.nprocs).filter(|&p| p != self.pid) {
                    if let Some(c) = e.endpoint.channel_stats(peer, sync::CHANNEL) {
                        s.add_channel(&c);
                    }
                }
                Ok(())
            });
        }
        s
    }

    /// An error of this process in `call`, for layers that check their own
    /// arguments (the C ABI's negative sizes).
    pub fn error(&self, call: Call, reason: Reason) -> BspError {
        BspError { pid: self.pid, call, reason }
    }

    /// `bsp_abort`: prints `message`, stops every process of the job, and
    /// exits with status 1.
    pub fn abort(&self, message: &str) -> ! {
        let text = format!("bsp_abort: process {}: {message}", self.pid);
        eprintln!("{text}");
        if let Some(rt) = &self.rt {
            rt.fail(&text);
        }
        std::process::exit(1);
    }

    /// Ends the job because of `error`, a misuse found by a layer above (the
    /// C ABI's argument checks): prints it, stops every process of the job,
    /// and exits with status 1. Unlike [`Bsp::abort`] the text is the error's
    /// own, which already names the process, the call and the reason.
    pub fn fail(&self, error: &BspError) -> ! {
        let text = error.to_string();
        eprintln!("{text}");
        if let Some(rt) = &self.rt {
            rt.fail(&text);
        }
        std::process::exit(1);
    }

    // ----- checks -----------------------------------------------------------

    fn usable(&self, call: Call) -> Result<(), BspError> {
        if let Some(f) = &self.failure {
            return Err(self.error(call, Reason::Failed(Box::new(f.clone()))));
        }
        if self.ended {
            return Err(self.error(call, Reason::Ended));
        }
        Ok(())
    }

    fn check_pid(&self, call: Call, pid: u32) -> Result<(), BspError> {
        if pid >= self.nprocs {
            return Err(self.error(call, Reason::NoSuchProcess { pid: i64::from(pid), nprocs: self.nprocs }));
        }
        Ok(())
    }

    fn registered(&self, call: Call, addr: usize) -> Result<Slot, BspError> {
        self.registry.resolve(addr).map_err(|r| self.error(call, r))
    }

    fn slot_in_effect(&self, call: Call, slot: Slot) -> Result<(), BspError> {
        match self.registry.area(slot) {
            Some(_) => Ok(()),
            None => Err(self.error(call, Reason::NotRegistered { addr: slot as usize, pending: true })),
        }
    }

    // ----- registration -----------------------------------------------------

    /// `bsp_push_reg`: registers the `len` bytes at `addr` (collective; in
    /// effect from the next sync). `addr` may be null (for processes that
    /// register nothing but must take part).
    ///
    /// # Safety
    ///
    /// While registered, the area must stay valid, and must not be read or
    /// written by anyone else during a sync: puts land in it and gets read
    /// it then.
    pub unsafe fn push_reg_raw(&mut self, addr: *const u8, len: usize) -> Result<(), BspError> {
        self.usable(Call::PushReg)?;
        self.registry.push(Area { addr: addr as usize, len, owned: None });
        Ok(())
    }

    /// `bsp_pop_reg`: removes the most recent registration of `addr` at the
    /// next sync (collective).
    pub fn pop_reg_raw(&mut self, addr: *const u8) -> Result<(), BspError> {
        self.usable(Call::PopReg)?;
        self.registry.pop(addr as usize).map(|_| ()).map_err(|r| self.error(Call::PopReg, r))
    }

    /// Registers a new area of `len` zeroed `T`s owned by this `Bsp`
    /// (collective; in effect from the next sync).
    pub fn register<T: Pod + Default>(&mut self, len: usize) -> Result<Reg<T>, BspError> {
        self.register_vec(vec![T::default(); len])
    }

    /// Registers `data` as an area owned by this `Bsp` (collective).
    pub fn register_vec<T: Pod>(&mut self, data: Vec<T>) -> Result<Reg<T>, BspError> {
        self.usable(Call::PushReg)?;
        let len = data.len();
        let mut area: Box<dyn OwnedArea> = Box::new(data);
        let bytes = area.bytes_mut();
        let addr = bytes.as_mut_ptr() as usize;
        let byte_len = bytes.len();
        let index = match self.owned.iter().position(Option::is_none) {
            Some(i) => {
                self.owned[i] = Some(area);
                i
            }
            None => {
                self.owned.push(Some(area));
                self.owned.len() - 1
            }
        };
        let slot = self.registry.push(Area { addr, len: byte_len, owned: Some(index) });
        Ok(Reg { slot, index, len, _type: PhantomData })
    }

    /// Removes a registration made with [`Bsp::register`] (collective; at
    /// the next sync, which also frees the area).
    pub fn unregister<T: Pod>(&mut self, reg: Reg<T>) -> Result<(), BspError> {
        self.usable(Call::PopReg)?;
        self.registry.pop_slot(reg.slot).map_err(|r| self.error(Call::PopReg, r))
    }

    /// The local area of `reg`.
    pub fn area<T: Pod>(&self, reg: &Reg<T>) -> &[T] {
        self.owned_vec(reg)
    }

    /// The local area of `reg`, to write.
    pub fn area_mut<T: Pod>(&mut self, reg: &Reg<T>) -> &mut [T] {
        self.owned[reg.index]
            .as_mut()
            .and_then(|a| a.as_any_mut().downcast_mut::<Vec<T>>())
            .expect("a Reg names an area of its own type until it is unregistered")
    }

    fn owned_vec<T: Pod>(&self, reg: &Reg<T>) -> &Vec<T> {
        self.owned[reg.index]
            .as_ref()
            .and_then(|a| a.as_any().downcast_ref::<Vec<T>>())
            .expect("a Reg names an area of its own type until it is unregistered")
    }

    // ----- DRMA ---------------------------------------------------------------

    /// Copies `src` now into the area of `dst` on process `pid`, starting at
    /// element `offset`; it lands at the end of the sync.
    pub fn put<T: Pod>(&mut self, pid: u32, src: &[T], dst: &Reg<T>, offset: usize) -> Result<(), BspError> {
        self.usable(Call::Put)?;
        self.check_pid(Call::Put, pid)?;
        self.slot_in_effect(Call::Put, dst.slot)?;
        let offset = (offset as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        self.stream_put(pid, dst.slot, offset, as_bytes(src));
        Ok(())
    }

    /// Appends a put to `pid`'s stream: its bytes, or, for a large put to a
    /// process on this host that reads this one's memory, a copy of them
    /// kept here and a record that says where it is (a direct put).
    fn stream_put(&mut self, pid: u32, slot: Slot, offset: u64, data: &[u8]) {
        if !self.reads_here(pid, data.len()) {
            if let Some(at) = self.copy_to_arena(pid, data) {
                self.outboxes[pid as usize].stream.in_arena(false, slot, offset, data.len() as u64, at);
                return;
            }
            self.outboxes[pid as usize].stream.put(slot, offset, data);
            return;
        }
        if let Some(addr) = self.staging.copy(&self.rt, data) {
            let outbox = &mut self.outboxes[pid as usize];
            outbox.stream.direct(false, slot, offset, data.len() as u64, addr);
            outbox.direct = true;
            return;
        }
        // The spare buffer that fits best, else a new one.
        let best = (0..self.spare_lent.len())
            .filter(|&i| self.spare_lent[i].capacity() >= data.len())
            .min_by_key(|&i| self.spare_lent[i].capacity());
        let mut copy = match best {
            Some(i) => self.spare_lent.swap_remove(i),
            None => Vec::with_capacity(data.len()),
        };
        copy.extend_from_slice(data);
        let outbox = &mut self.outboxes[pid as usize];
        outbox.stream.direct(false, slot, offset, data.len() as u64, copy.as_ptr() as u64);
        outbox.lent.push(copy);
        outbox.direct = true;
    }

    /// Copies `data`, a put's bytes for `pid`, into this superstep's half
    /// of the arena, if it goes there ([`ARENA_PUT_MIN`]) and fits, and
    /// returns where in the arena.
    pub(crate) fn copy_to_arena(&mut self, pid: u32, data: &[u8]) -> Option<u64> {
        match self.arena_readers[pid as usize] {
            true => self.arena.as_mut()?.copy(self.superstep, data),
            false => None,
        }
    }

    /// Whether a put of `len` bytes to `pid` goes as a direct put:
    /// [`DIRECT_PUT_MIN`] bytes or more, to another process that reads this
    /// one's memory.
    pub(crate) fn reads_here(&self, pid: u32, len: usize) -> bool {
        len >= DIRECT_PUT_MIN
            && pid != self.pid
            && self.rt.as_ref().is_some_and(|rt| rt.with(|e| Ok(e.peer_reads_memory(pid))).unwrap_or(false))
    }

    /// Asks for `len` elements at element `offset` of `src` on process
    /// `pid`, as they are at the end of this superstep's computation, to be
    /// written at element `dst_offset` of the local area of `dst` by the end
    /// of the sync.
    pub fn get<T: Pod>(
        &mut self,
        pid: u32,
        src: &Reg<T>,
        offset: usize,
        dst: &Reg<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.usable(Call::Get)?;
        self.check_pid(Call::Get, pid)?;
        self.slot_in_effect(Call::Get, src.slot)?;
        let size = std::mem::size_of::<T>();
        if dst_offset.checked_add(len).is_none_or(|end| end > dst.len) {
            let reason = Reason::OutOfBounds {
                access: "the destination of bsp_get".into(),
                offset: (dst_offset * size) as u64,
                len: (len * size) as u64,
                size: dst.len * size,
                owner: self.pid,
                slot: dst.slot,
            };
            return Err(self.error(Call::Get, reason));
        }
        let request = GetRequest {
            hp: false,
            slot: src.slot,
            offset: (offset as u64).saturating_mul(size as u64),
            len: (len * size) as u64,
        };
        let outbox = &mut self.outboxes[pid as usize];
        outbox.requests.push(request);
        outbox.targets.push(GetTarget::Owned { index: dst.index, at: dst_offset * size });
        Ok(())
    }

    /// `bsp_put`: copies `len` bytes at `src` now; they land at `offset` in
    /// the area registered at `dst` on process `pid` at the end of the sync.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len` bytes.
    pub unsafe fn put_raw(
        &mut self,
        pid: u32,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.usable(Call::Put)?;
        self.check_pid(Call::Put, pid)?;
        let slot = self.registered(Call::Put, dst as usize)?;
        let data = if len == 0 { &[][..] } else { std::slice::from_raw_parts(src, len) };
        self.stream_put(pid, slot, offset as u64, data);
        Ok(())
    }

    /// `bsp_hpput`: like [`Bsp::put_raw`], but `src` is read during the
    /// sync, not now: at its start, or, for a large hpput to a process on
    /// this host, by the receiver straight from `src` at some time before
    /// the sync ends here. As BSPlib leaves it, a source that puts land in
    /// during the same sync may be read before or after they land.
    ///
    /// # Safety
    ///
    /// `src` must stay valid for reads of `len` bytes until the next sync
    /// ends, and unchanged by this process from the sync's start.
    pub unsafe fn hpput_raw(
        &mut self,
        pid: u32,
        src: *const u8,
        dst: *const u8,
        offset: usize,
        len: usize,
    ) -> Result<(), BspError> {
        self.usable(Call::HpPut)?;
        self.check_pid(Call::HpPut, pid)?;
        let slot = self.registered(Call::HpPut, dst as usize)?;
        self.hpputs.push(HpPut { to: pid, src: src as usize, slot, offset: offset as u64, len });
        Ok(())
    }

    /// `bsp_get`: `len` bytes at `offset` in the area registered at `src`
    /// on process `pid`, as they are at the end of this superstep's
    /// computation, are written to `dst` by the end of the sync.
    ///
    /// # Safety
    ///
    /// `dst` must stay valid for writes of `len` bytes until the sync ends.
    pub unsafe fn get_raw(
        &mut self,
        pid: u32,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), BspError> {
        self.get_raw_as(Call::Get, pid, src, offset, dst, len)
    }

    /// `bsp_hpget`: as [`Bsp::get_raw`] (this implementation gives hpget
    /// the stronger guarantees of get).
    ///
    /// # Safety
    ///
    /// As [`Bsp::get_raw`].
    pub unsafe fn hpget_raw(
        &mut self,
        pid: u32,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), BspError> {
        self.get_raw_as(Call::HpGet, pid, src, offset, dst, len)
    }

    fn get_raw_as(
        &mut self,
        call: Call,
        pid: u32,
        src: *const u8,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), BspError> {
        self.usable(call)?;
        self.check_pid(call, pid)?;
        let slot = self.registered(call, src as usize)?;
        let outbox = &mut self.outboxes[pid as usize];
        outbox.requests.push(GetRequest { hp: call == Call::HpGet, slot, offset: offset as u64, len: len as u64 });
        outbox.targets.push(GetTarget::Raw(dst as usize));
        Ok(())
    }

    // ----- BSMP ---------------------------------------------------------------

    /// `bsp_set_tagsize`: the tag size from the next sync on (every process
    /// must ask for the same). Returns the size that was pending for the
    /// next superstep before this call: the size in effect now at the first
    /// call of a superstep, the size the previous call asked for at a later
    /// one (as BSPonMPI does).
    pub fn set_tagsize(&mut self, size: usize) -> Result<usize, BspError> {
        self.usable(Call::SetTagsize)?;
        let pending = std::mem::replace(&mut self.next_tagsize, size);
        self.tagsize_calls = self.tagsize_calls.saturating_add(1);
        Ok(pending)
    }

    /// The tag size in effect in this superstep.
    pub fn tagsize(&self) -> usize {
        self.tagsize
    }

    /// `bsp_send`: queues a message for process `pid`, readable there in
    /// the next superstep. `tag` must have the tag size's length.
    pub fn send(&mut self, pid: u32, tag: &[u8], payload: &[u8]) -> Result<(), BspError> {
        self.usable(Call::Send)?;
        self.check_pid(Call::Send, pid)?;
        if tag.len() != self.tagsize {
            return Err(self.error(Call::Send, Reason::TagLength { len: tag.len(), tagsize: self.tagsize }));
        }
        // From 1 KiB to a process on this host: through the arena, where
        // the receiver's queue reads it.
        match self.copy_to_arena(pid, payload) {
            Some(at) => self.outboxes[pid as usize].stream.send_in_arena(tag, payload.len() as u64, at),
            None => self.outboxes[pid as usize].stream.send(tag, payload),
        }
        Ok(())
    }

    /// `bsp_send` on raw memory: the tag is the tag size's bytes at `tag`.
    ///
    /// # Safety
    ///
    /// `tag` must be valid for reads of [`Bsp::tagsize`] bytes and `payload`
    /// for `len` bytes (either may be null when its length is 0).
    pub unsafe fn send_raw(
        &mut self,
        pid: u32,
        tag: *const u8,
        payload: *const u8,
        len: usize,
    ) -> Result<(), BspError> {
        let tag = if self.tagsize == 0 { &[][..] } else { std::slice::from_raw_parts(tag, self.tagsize) };
        let payload = if len == 0 { &[][..] } else { std::slice::from_raw_parts(payload, len) };
        self.send(pid, tag, payload)
    }

    /// `bsp_qsize`: messages waiting, and their payload bytes.
    pub fn qsize(&self) -> (usize, usize) {
        (self.queue.len(), self.queue.bytes())
    }

    /// `bsp_get_tag`: the first waiting message (its tag and payload
    /// length), without taking it; `None` when the queue is empty.
    pub fn get_tag(&self) -> Option<Message<'_>> {
        self.queue.peek()
    }

    /// `bsp_move`: copies the first message's payload into `buf` (as much
    /// as fits), takes it off the queue, and returns the payload's length.
    pub fn move_message(&mut self, buf: &mut [u8]) -> Result<usize, BspError> {
        self.usable(Call::Move)?;
        let pid = self.pid;
        match self.queue.pop() {
            Some(m) => {
                let n = m.payload.len().min(buf.len());
                buf[..n].copy_from_slice(&m.payload[..n]);
                Ok(m.payload.len())
            }
            None => Err(BspError { pid, call: Call::Move, reason: Reason::EmptyQueue }),
        }
    }

    /// `bsp_hpmove`: takes the first message off the queue and returns
    /// where its tag and payload are; they stay there until the next sync.
    pub fn hpmove_raw(&mut self) -> Option<RawMessage> {
        let m = self.queue.pop()?;
        Some(RawMessage {
            tag: m.tag.as_ptr(),
            tag_len: m.tag.len(),
            payload: m.payload.as_ptr(),
            payload_len: m.payload.len(),
        })
    }

    /// Takes the waiting messages off the queue, in order, as they are iterated.
    pub fn messages(&mut self) -> Messages<'_> {
        self.queue.drain()
    }

    // ----- supersteps -----------------------------------------------------------

    /// `bsp_sync`: ends the superstep. Everything asked for lands, messages
    /// sent become readable, registrations take effect.
    pub fn sync(&mut self) -> Result<(), BspError> {
        self.usable(Call::Sync)?;
        self.superstep_end(Call::Sync).map_err(|e| self.poison(e))
    }

    /// `bsp_end`: the last sync (every process must reach it after the same
    /// number of syncs), then leaves the job. Prints the packet statistics
    /// when `BULKWIRE_BSP_STATS=1`.
    pub fn end(mut self) -> Result<(), BspError> {
        self.usable(Call::End)?;
        self.superstep_end(Call::End).map_err(|e| self.poison(e))?;
        self.ended = true;
        // The last sync waited for the readers of this process's stage, and
        // read what this one was told to read in its peers' (puts and get
        // replies): let go of both, whose pages a mapping would keep.
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        let _ = rt.with(|e| {
            e.release_stages();
            Ok(())
        });
        if std::env::var(STATS_ENV).is_ok_and(|v| v.trim() == "1") {
            // One write per line, so the lines of a job's processes do not mix.
            let line = format!("{}\n", self.packet_stats().line(self.pid));
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
        if let Some(p) = &mut self.profile {
            p.flush().map_err(|e| BspError {
                pid: self.pid,
                call: Call::End,
                reason: Reason::Runtime(e.to_string()),
            })?;
        }
        let pid = self.pid;
        match self.rt.take().expect("the runtime is there until end") {
            Held::Owned(rt) => {
                rt.finish().map_err(|e| BspError { pid, call: Call::End, reason: Reason::Runtime(e.to_string()) })
            }
            Held::Shared(_) => Ok(()),
        }
    }

    fn poison(&mut self, e: BspError) -> BspError {
        self.failure.get_or_insert_with(|| e.clone());
        e
    }
}

impl Drop for Bsp {
    fn drop(&mut self) {
        let Some(rt) = &self.rt else { return };
        if self.ended {
            return;
        }
        // Leaving without bsp_end breaks the superstep structure for every
        // process: stop the job, saying why, rather than let others wait.
        let reason = match &self.failure {
            Some(e) => e.to_string(),
            None if std::thread::panicking() => format!("bsp: process {}: panicked", self.pid),
            None => format!("bsp: process {}: left without calling bsp_end", self.pid),
        };
        eprintln!("{reason}");
        rt.fail(&reason);
    }
}

/// A superstep's use of the runtime's stage (`Engine::stage`): memory whose
/// readers on this host map it rather than read this process's memory, for
/// the copies of direct puts and of large get replies.
#[derive(Default)]
struct Staging {
    /// Bytes of this superstep's copies in the stage.
    used: usize,
    /// Bytes of this superstep's direct copies, staged or not, and the most
    /// any superstep has had: the size the stage takes at a superstep's
    /// first.
    wanted: usize,
    want: usize,
    /// No stage could be had: not asked for again.
    off: bool,
}

impl Staging {
    /// Copies `data`, bytes another process of this host is to read, into
    /// the runtime's stage after this superstep's others, and returns where
    /// they lie in this process's memory; `None` where there is no stage or
    /// no room left in it. The superstep's first copy may replace the stage
    /// with one as large as the most any superstep has copied: nobody reads
    /// the old one any more (the last sync waited for its readers). Where a
    /// stage cannot be made, the copies go in buffers of the heap, which
    /// their readers read with `process_vm_readv`.
    fn copy(&mut self, rt: &Option<Held>, data: &[u8]) -> Option<u64> {
        // Each copy starts on a cache line.
        let start = self.used.next_multiple_of(64);
        let end = start.checked_add(data.len())?;
        self.wanted = self.wanted.saturating_add(data.len().next_multiple_of(64));
        self.want = self.want.max(self.wanted);
        if self.off {
            return None;
        }
        let grow_to = if start == 0 { self.want } else { 0 };
        let Some((ptr, len)) = rt.as_ref()?.with(|e| Ok(e.stage(grow_to).ok())).ok().flatten() else {
            // Off, or the memory could not be had (making a stage
            // allocates its pages): the heap's buffers from now on.
            self.off = true;
            return None;
        };
        if end > len {
            return None;
        }
        // SAFETY: `start..end` lies within the stage, which this process
        // alone writes, and which no reader reads before this superstep's
        // sync (the bytes there from the last one were read before it
        // ended).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(start), data.len()) };
        self.used = end;
        Some(ptr as u64 + start as u64)
    }

    /// Every reader has read this superstep's copies: the next superstep's
    /// start again at the stage's beginning.
    fn read(&mut self) {
        self.used = 0;
        self.wanted = 0;
    }
}

/// Process 0's `bsp_begin` argument and barrier (its [`Barrier::code`]),
/// for every process: the standard takes process 0's, since under
/// `bsp_init` only process 0 runs `main`, where the number is usually
/// decided. Process 0 sends them to every other process as its first
/// message on the bsp channel; it precedes any superstep traffic from
/// process 0 because the channel delivers in order.
///
/// With `handshake` (a computation on a runtime that an earlier one may
/// have used), every other process first tells process 0 that it is ready,
/// and process 0 answers only when all are: so nobody sends the new
/// computation's data to a process still finishing the old one's last
/// sync, which would take it for its own.
fn agree_on_maxprocs(rt: &Runtime, mine: i64, barrier: u32, handshake: bool) -> Result<(i64, u32), RuntimeError> {
    if rt.rank() == 0 {
        if handshake {
            let mut ready = vec![false; rt.size() as usize];
            ready[0] = true;
            rt.wait(|e| {
                while let Some(m) = e.take(|m| m.channel == sync::CHANNEL && m.data[m.start..] == [BEGIN]) {
                    ready[m.from as usize] = true;
                }
                Ok(ready.iter().all(|&r| r).then_some(()))
            })?;
        }
        let mut pending: Vec<u32> = (1..rt.size()).collect();
        rt.wait(|e| {
            while let Some(&to) = pending.last() {
                match e.send_owned(to, sync::CHANNEL, begin_message(mine, barrier)) {
                    Ok(()) => pending.pop(),
                    Err(bulkwire_proto::SendError::WouldBlock) => return Ok(None),
                    Err(other) => return Err(RuntimeError::Stopped(other.to_string())),
                };
            }
            Ok(Some(()))
        })?;
        return Ok((mine, barrier));
    }
    if handshake {
        rt.wait(|e| match e.send_owned(0, sync::CHANNEL, vec![BEGIN]) {
            Ok(()) => Ok(Some(())),
            Err(bulkwire_proto::SendError::WouldBlock) => Ok(None),
            Err(other) => Err(RuntimeError::Stopped(other.to_string())),
        })?;
    }
    rt.wait(|e| match e.take(|m| m.from == 0 && m.channel == sync::CHANNEL) {
        None => Ok(None),
        Some(m) => match m.data[m.start..].split_first() {
            Some((&BEGIN, value)) if value.len() == 12 => {
                let maxprocs = i64::from_le_bytes(value[..8].try_into().expect("8 bytes"));
                let barrier = u32::from_le_bytes(value[8..].try_into().expect("4 bytes"));
                Ok(Some((maxprocs, barrier)))
            }
            _ => Err(RuntimeError::Stopped("process 0's first bsp message is not its bsp_begin".into())),
        },
    })
}

/// Kind byte of the message that carries process 0's `bsp_begin` argument.
pub(crate) const BEGIN: u8 = 0xB0;

fn begin_message(maxprocs: i64, barrier: u32) -> Vec<u8> {
    let mut m = vec![BEGIN];
    m.extend_from_slice(&maxprocs.to_le_bytes());
    m.extend_from_slice(&barrier.to_le_bytes());
    m
}

/// The barrier process 0 chooses for the job from [`BARRIER_ENV`] and
/// [`FANOUT_ENV`]: by default the board where `board` says so (every
/// process on this host, and not too many), else the star where processes
/// outnumber cores (`shared_cores`), else the dissemination; a fan-out set
/// alone chooses the dissemination. The board asked for where the job is
/// not all on this host (`on_board`) is an error.
fn barrier_setting(shared_cores: bool, board: bool, on_board: bool) -> Result<Barrier, Reason> {
    let fanout = match std::env::var(FANOUT_ENV) {
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(k) if k >= 1 => Some(k),
            _ => {
                let why = format!("{FANOUT_ENV}={v}: the barrier's fan-out must be a whole number of at least 1");
                return Err(Reason::Invalid(why));
            }
        },
        Err(_) => None,
    };
    let default_fanout = if shared_cores { 2 } else { reduction::DEFAULT_FANOUT };
    let dissemination = Barrier::Dissemination(fanout.unwrap_or(default_fanout));
    match std::env::var(BARRIER_ENV).as_deref().map(str::trim) {
        Ok("star") => Ok(Barrier::Star),
        Ok("dissemination") => Ok(dissemination),
        Ok("board") if on_board => Ok(Barrier::Board),
        Ok("board") => Err(Reason::Invalid(format!(
            "{BARRIER_ENV}=board: the board needs every process of the job on this host, reached through shared \
             memory (not with {} = 0)",
            bulkwire_runtime::SHM
        ))),
        Ok(other) => Err(Reason::Invalid(format!("{BARRIER_ENV}={other}: expected board, star or dissemination"))),
        Err(_) if fanout.is_some() => Ok(dissemination),
        Err(_) if board => Ok(Barrier::Board),
        Err(_) if shared_cores => Ok(Barrier::Star),
        Err(_) => Ok(dissemination),
    }
}
