//! The progress engine.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bulkwire_proto::{
    Config, Endpoint, Event, Landed, Landing, Path, RateControl, SendError, Strategy, TailFilter, Time,
};
use bulkwire_wire::{Coverage, Header, JobKey};

use crate::cycles::{self, Point};
use crate::env::JobEnv;
use crate::loss::LossInjector;
use crate::paths::Paths;
use crate::rate;
use crate::rendezvous::{Control, PeerReport, ToLauncher, ToRank};
use crate::shm::{Dest, DestState, Kind, Shm, ShmOptions, Sleeper, POST_MAX};
use crate::sockets::{PathSockets, RecvBatch, SendBatch, SocketOptions};

/// A peer that acknowledges nothing for this long is declared unreachable.
/// Longer than the launcher's 3 s without a heartbeat, so that a stopped or
/// hung process is reported as such (the more precise reason) rather than
/// as unreachable by whichever peer noticed first; short enough that the
/// job still stops within 5 s.
/// The runtime's best-effort channel: what is sent on it leaves once and is
/// never resent or acknowledged ([`Strategy::BestEffort`]); what is lost
/// stays lost. Over shared memory nothing is lost.
pub const BEST_EFFORT_CHANNEL: u16 = 6;

const UNREACHABLE_AFTER: Duration = Duration::from_secs(4);
/// How often a rank tells the launcher it is alive, from a thread of its
/// own that never touches the engine: a process busy with a large buffer
/// under the engine's lock (a BSP sync moving gigabytes) is alive.
const HEARTBEAT: Duration = Duration::from_millis(250);
/// The longest the progress thread sleeps with nothing to do.
const IDLE_WAKE: Duration = Duration::from_millis(250);
/// Datagrams read per socket per progress call, so one busy socket cannot
/// starve the rest of the work.
const READ_BATCH: usize = 64;
/// Datagrams read per system call.
const RECV_BATCH: usize = 16;
/// Where every peer is on this host, a spinning wait reads the sockets at
/// every this many turns ([`Engine::progress_spinning`]) when each process
/// has a core of its own, and at every [`QUIET_TURNS_SHARED`]th when they
/// share cores. Powers of two: a turn masks its count rather than divide.
const QUIET_TURNS: u32 = 1024;
const QUIET_TURNS_SHARED: u32 = 64;
const _: () = assert!(QUIET_TURNS.is_power_of_two() && QUIET_TURNS_SHARED.is_power_of_two());
/// A spinning wait over UDP reads the path that delivered last at every
/// turn and the other at every this many ([`Engine::progress_spinning`]).
/// The other read is a system call (about 0.3 us) in which the busy path's
/// datagram is not seen. An 8 B ping-pong over loopback, 200,000 round
/// trips of one build in turns: 4.91-5.07 us a half round trip reading it
/// at every 4th turn, 4.70-4.81 at every 16th (three series; 4.10 against
/// 4.05 in a fourth, the machine running faster); this build against the
/// one before, alternating, median ratio 1.04 and 1.06 (8 and 6 pairs);
/// `bench pingpong` 1.21-1.30x raw UDP against 1.25-1.30x. A datagram on
/// the other path (a probe, the first after a switch of paths) waits at
/// most this many turns, a few microseconds; the kernel's receive stamps,
/// where latency is sampled, do not wait with it.
const COLD_TURNS: u32 = 16;
/// Where both paths deliver in turn (data one way, explicit
/// acknowledgements on the premium path the other), the other path is
/// read at every [`WARM_TURNS`]th turn for this many reads after the
/// paths last took turns.
const WARM_READS: u32 = 16;
const WARM_TURNS: u32 = 4;
/// Datagrams sent per system call: at least this many, and more of small
/// datagrams, up to [`SEND_BATCH_BYTES`] of buffers ([`send_batch`]).
const SEND_BATCH: usize = 16;
/// Buffer bytes a send batch of small datagrams may take: 64 Ethernet-sized
/// datagrams, which segmentation offload sends in two system calls' worth
/// of trips through the stack.
const SEND_BATCH_BYTES: usize = 512 << 10;
/// A send batch for datagrams of up to `max_datagram` bytes.
fn send_batch(max_datagram: usize, segmentation: bool) -> SendBatch {
    let count = (SEND_BATCH_BYTES / max_datagram.max(1)).clamp(SEND_BATCH, SendBatch::MAX);
    let mut batch = SendBatch::new(count, max_datagram);
    batch.set_segmentation(segmentation);
    batch
}

/// Datagram size on loopback: the largest UDP payload, rounded down to 1 KiB.
const LOOPBACK_DATAGRAM: usize = 63 * 1024;
/// How long the progress thread naps while the application spins.
const SPIN_NAP: Duration = Duration::from_micros(200);
/// [`SPIN_NAP`] while the application spins in a collective wait (a BSP
/// sync), and until the thread next wakes after it: also the longest the
/// thread then leaves the sockets to an application that has left the
/// sync. Until the next sync little arrives that cannot wait: the other
/// processes' next barrier, and prods after a loss, whose senders wait in
/// the sync anyway. Where processes share cores, the thread waking every
/// 200 us found the application busy and only competed with the others:
/// with 8 processes on 2 cores it made more than half of the context
/// switches, an empty sync took 157-241 us against 132-172 us napping this
/// long, and a total exchange of 16 KiB per pair 860-1,560 us against
/// 580-800 us (alternating runs).
const COLLECTIVE_NAP: Duration = Duration::from_millis(5);
/// How long it naps while an application thread blocks in poll(2) on the
/// sockets; also the longest a datagram waits once that thread has left.
const POLL_NAP: Duration = Duration::from_millis(1);
/// The least a collective wait spins, yielding its core in every turn,
/// before it blocks: even where processes share cores. In a barrier every
/// process is on its way; a yielding waiter hands its core to one of them,
/// and the datagrams it waits for then need no wake-up (which, measured on
/// 8 processes over 2 cores, cost more than the yields: an empty BSP sync
/// took 350-410 us blocking and 170-220 us spinning).
const COLLECTIVE_SPIN: Duration = Duration::from_millis(1);
/// The longest a wait spins when told how long what it waits for takes
/// ([`Runtime::wait_uninterruptible`]).
const LONGEST_SPIN: Duration = Duration::from_millis(10);
/// The longest an application thread blocks in poll(2) before it looks at
/// the engine again (a stop ordered meanwhile, a state changed by others).
const POLL_AT_MOST: Duration = Duration::from_millis(20);

/// Whether arrival times come from the kernel's receive stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stamps {
    /// Switched off (`BULKWIRE_RX_STAMPS=0`), or refused by the kernel.
    Off,
    /// Turned on once the endpoint samples arrival times.
    Wanted,
    On,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Env(#[from] crate::env::JobEnvError),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("rendezvous failed: {0}")]
    Rendezvous(String),
    #[error("invalid configuration: {0}")]
    Config(#[from] bulkwire_proto::ConfigError),
    #[error("rank {peer} broke the protocol: {reason}")]
    Protocol { peer: u32, reason: &'static str },
    #[error("the job is stopping: {0}")]
    Stopped(String),
    /// The flag given to [`Runtime::set_interrupt`] was raised (by a signal
    /// handler, say) while a call waited.
    #[error("interrupted while waiting")]
    Interrupted,
}

/// A message lent ([`Engine::lend`]): to a peer on this host, until it says
/// it has read it, or to the endpoint for a peer over UDP, until every
/// packet of it has been acknowledged ([`Engine::loan_returned`]).
#[derive(Debug)]
pub struct Loan {
    to: u32,
    token: u64,
    len: usize,
    since: Time,
    /// Lent to the endpoint, for a peer over UDP: returned once nothing
    /// but this holds it.
    sent: Option<Arc<LentSlice>>,
}

/// A caller's slice lent to the endpoint ([`Engine::lend`] to a peer over
/// UDP, or [`Engine::lend_region`]): its packets carry pieces of it where
/// it lies. The endpoint reads
/// it only under the engine's lock, until every packet has been
/// acknowledged; a loan that ends before that (the job stopped) first
/// makes the endpoint read a copy instead ([`Engine::release_loans`]).
#[derive(Debug)]
pub(crate) struct LentSlice {
    ptr: std::sync::atomic::AtomicPtr<u8>,
    len: usize,
    /// The copy [`LentSlice::keep_copy`] made.
    copy: std::sync::OnceLock<Box<[u8]>>,
}

impl AsRef<[u8]> for LentSlice {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is the lender's slice, which it leaves unchanged
        // and alive while the loan lasts, or this slice's own copy; `len`
        // bytes either way.
        unsafe { std::slice::from_raw_parts(self.ptr.load(Ordering::Acquire), self.len) }
    }
}

impl bulkwire_proto::LentBytes for LentSlice {}

impl LentSlice {
    /// Copies the lent bytes into memory of its own, read from now on: the
    /// lender's slice is about to be the lender's again.
    fn keep_copy(&self) {
        if self.copy.get().is_none() {
            let copy: Box<[u8]> = self.as_ref().into();
            let ptr = self.copy.get_or_init(|| copy).as_ptr().cast_mut();
            self.ptr.store(ptr, Ordering::Release);
        }
    }
}

impl Loan {
    /// The peer the message was lent to.
    pub fn to(&self) -> u32 {
        self.to
    }

    /// About how long its reader takes to read it, at most (at 2 GB/s):
    /// how long its lender's wait should spin.
    pub fn read_time(&self) -> Duration {
        Duration::from_nanos((self.len as u64).saturating_mul(1_000) / LOAN_READ_RATE)
    }
}

/// The rate, bytes a microsecond (2 GB/s), at which a lender expects its
/// reader to read a lent message at the least, so that its wait spins
/// through the read rather than sleeping in the middle of it
/// ([`Loan::read_time`]). A peer reads 4 MiB in 350 us to 1.5 ms on a
/// 2-core machine, by the load; a lender that slept after the usual spin
/// (250 us) needed a wake-up datagram in every round trip of 4 MiB, and
/// the reader's answer waited for the scheduler (4 MiB ping-pong, blocks
/// of 20 round trips alternating in one job, two runs: median half round
/// trip 590-610 us sleeping after 250 us, 420-430 us spinning 3 ms).
const LOAN_READ_RATE: u64 = 2_000;

/// The most bytes [`Engine::lend`] sends after the lent data.
pub const LEND_SUFFIX_MAX: usize = crate::shm::SUFFIX_MAX;
/// The shortest message [`Engine::lend`] lends, with any ring: a layer
/// need not ask about shorter ones.
pub const LEND_FROM: usize = crate::shm::LARGE_FROM;
/// The shortest message [`Engine::lend_borrowed`] lends.
pub const STREAM_LEND_FROM: usize = crate::shm::STREAM_LEND_FROM;
/// `BULKWIRE_UDP_LEND=0` copies every message to a peer over UDP into the
/// endpoint, rather than lending it the caller's slice ([`Engine::lend`]).
pub const UDP_LEND: &str = "BULKWIRE_UDP_LEND";

/// How long a loan is out before its lender also checks, at every look,
/// that the reader's process still exists (the launcher stops the job when
/// a process dies, but a lender need not wait for that to know).
const LOAN_CHECK_AFTER: Duration = Duration::from_millis(10);

/// A message taken from the endpoint, waiting to be matched: `data[start..]`
/// (`start` is 0 unless the channel takes messages in place, see
/// [`bulkwire_proto::Endpoint::set_in_place`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    pub from: u32,
    pub channel: u16,
    pub data: Vec<u8>,
    pub start: usize,
    /// A message a peer on this host lent that is not read yet
    /// ([`Engine::defer`]): `data` holds only its end, and
    /// [`Engine::read_lent`] reads the rest where the receiver wants it.
    /// Only [`Engine::take_lent`] returns such a message.
    pub lent: Option<LentMessage>,
    /// Bytes of the message after `data[start..]` that were written where
    /// an aim said ([`Engine::aim`]): 0 for any other message.
    pub aimed: usize,
}

impl Inbound {
    /// A message as it came, whole in `data[start..]`.
    pub fn new(from: u32, channel: u16, data: Vec<u8>, start: usize) -> Inbound {
        Inbound { from, channel, data, start, lent: None, aimed: 0 }
    }

    /// Its length: what `data` holds, what is still to be read of it
    /// where it was lent and not read yet, and what was written where an
    /// aim said.
    pub fn len(&self) -> usize {
        self.lent.as_ref().map_or(0, |l| l.len) + self.data.len() - self.start + self.aimed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the start of a message that a receive takes in place lies
/// ([`Engine::defer`], [`Engine::defer_into`]): in the memory of its
/// sender, a peer on this host, until the receiver reads it; or already in
/// the receive's own buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LentMessage {
    /// Bytes of the message before what [`Inbound::data`] holds.
    pub(crate) len: usize,
    /// In the sender's memory, or (`None`) in the receive's buffer.
    pub(crate) remote: Option<Remote>,
}

/// Where a lent message lies in its sender's memory, and the token the
/// sender is answered with once it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Remote {
    pub(crate) addr: u64,
    pub(crate) token: u64,
}

/// Which messages lent by peers on this host are left unread when they
/// come ([`Engine::defer`]): those on `channel`, from `from` (any rank if
/// `None`), whose end (the last bytes of a message sent whole, which come
/// with its description; the suffix of one sent by [`Engine::lend`]) is at
/// least `tail` bytes long and passes `filter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferral {
    pub channel: u16,
    pub from: Option<u32>,
    pub tail: usize,
    pub filter: TailFilter,
}

impl Deferral {
    pub(crate) fn covers(&self, from: u32, channel: u16, end: &[u8]) -> bool {
        channel == self.channel
            && self.from.is_none_or(|f| f == from)
            && end.len() >= self.tail
            && self.filter.accepts(end)
    }
}

/// The endpoint with its sockets: everything the application and the
/// progress thread share, behind one lock.
#[derive(Debug)]
pub struct Engine {
    pub endpoint: Endpoint,
    sockets: PathSockets,
    peers: Vec<(SocketAddr, SocketAddr)>,
    start: Instant,
    rx: RecvBatch,
    tx: SendBatch,
    /// Datagrams that came in coalesced reads, by the rank they name.
    coalesced: Vec<u64>,
    /// Large messages' datagrams are read straight into the message's
    /// buffer (`BULKWIRE_DIRECT_READ`, on by default).
    direct_read: bool,
    /// Arrival times come from the kernel's receive stamps once the
    /// endpoint samples them (`BULKWIRE_RX_STAMPS`, on by default): a
    /// process that comes late to its socket (descheduled on a busy host)
    /// does not take its own delay for the network's.
    rx_stamps: Stamps,
    /// The path that delivered the latest datagram.
    hot: Path,
    /// Reads of the other path left at the short interval ([`WARM_READS`]).
    warm_reads: u32,
    /// Messages taken from the endpoint and not yet matched by the application.
    pub inbox: VecDeque<Inbound>,
    inbox_bytes: usize,
    /// Ranks that have finished: nothing more will come from them.
    pub finished: Vec<bool>,
    /// Why the job must stop, once it must.
    pub failure: Option<String>,
    /// Injected receive loss (`BULKWIRE_TEST_DROP`, tests only).
    loss: Option<LossInjector>,
    /// When the step of the current wait wants another try even if nothing
    /// arrives (a pacer's next send), set by [`Engine::wake_within`].
    wake_at: Option<Time>,
    /// Say on standard error when a pair's data changes path
    /// (`BULKWIRE_VERBOSE`).
    verbose: bool,
    /// The job's Warp parameters, for peers put under control at run time.
    rate_control: RateControl,
    /// Work of the layers above that the progress thread does while the
    /// application is away from the library ([`Runtime::add_progress_hook`]).
    hooks: Vec<ProgressHook>,
    /// The shared-memory path to the peers on this host, if any.
    shm: Option<Shm>,
    /// Which lent messages are left unread when they come ([`Engine::defer`]).
    deferral: Option<Deferral>,
    /// The buffer of the receive that set it ([`Engine::defer_into`]).
    dest: Option<Dest>,
    /// Which messages from a peer over UDP go into that buffer, reassembled
    /// there as they come ([`Engine::defer_into`]). Apart from `deferral`,
    /// which also makes the shared-memory path leave lent messages unread.
    placing: Option<Deferral>,
    /// Every peer is reached through shared memory: a spinning wait need
    /// not read the sockets at every turn.
    all_shm: bool,
    quiet_turns: u32,
    /// [`QUIET_TURNS`] or [`QUIET_TURNS_SHARED`], less one: a mask.
    quiet_mask: u32,
    /// Messages to peers over UDP may be lent to the endpoint ([`UDP_LEND`]).
    udp_lend: bool,
    /// Messages lent to the endpoint so far.
    udp_loans: u64,
    /// Messages sent from the caller's slice, then copied
    /// ([`Engine::send_then_copy`]).
    sent_then_copied: u64,
}

/// A layer's work for the progress thread: called with the engine locked
/// after each reading of the sockets while no application thread is in a
/// call; what it sends goes out at once. It returns whether it is still
/// wanted: a layer that is gone returns false, and its hook is dropped.
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<dyn Fn(&mut Engine) -> bool + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

impl Engine {
    pub fn now(&self) -> Time {
        Time::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// Called from a wait's step: try the step again within `d` even if
    /// nothing arrives meanwhile (for example when a pacer lets the next
    /// packet go only then). Holds for the current try only.
    pub fn wake_within(&mut self, d: Duration) {
        let at = self.now() + d;
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    /// The work of the layer that set a progress hook, if any: the progress
    /// thread runs it while the application computes, and a wait of the
    /// application whenever something arrives, so that a process waiting
    /// in one layer (a receive, a BSP sync) still serves another (the
    /// groups' membership protocol, whose directory is rank 0).
    pub(crate) fn run_hook(&mut self) {
        if self.hooks.is_empty() {
            return;
        }
        // Taken out while they run (a hook gets the engine whole), without
        // a reference count touched per hook at every datagram.
        let mut hooks = std::mem::take(&mut self.hooks);
        hooks.retain(|hook| (hook.0)(self));
        self.hooks = hooks;
    }

    /// Reads what arrived, fires due timers, sends what is ready and collects
    /// delivered messages. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        self.progress_paths(&[Path::Premium, Path::Ordinary])
    }

    /// [`Engine::progress`] for a spinning caller in its `round`th turn: it
    /// reads the socket that delivered last on every turn and the other one
    /// on every [`COLD_TURNS`]th, so that one turn usually costs one system
    /// call rather than two, and a datagram on the busy path is seen sooner;
    /// both at every turn when the awaited messages come on both paths
    /// (`both`).
    fn progress_spinning(&mut self, round: u32, both: bool) -> bool {
        let cold = match self.hot {
            Path::Ordinary => Path::Premium,
            Path::Premium => Path::Ordinary,
        };
        if self.all_shm {
            // Only wake-ups and rogue datagrams come by the sockets (a
            // wake-up goes to a process that sleeps): read them at every
            // 1,024th turn of any wait, counted across waits, as a wait of
            // a ping-pong lasts a few turns. Each read of both costs two
            // system calls, about 0.6 us; at every 64th turn, one 8 B round
            // trip in eight or so met one (four alternating pairs of
            // 400,000: p90 0.64-0.68 against 0.25-0.26 us, median
            // 0.235-0.241 against 0.226-0.231). Where processes share
            // cores they sleep and are woken often, and every 64th turn
            // stays: every 1,024th looked slower there in one series of
            // broadcasts among 8 processes on 2 cores (`bench bcast
            // --transport shm`, sum of the medians up to 1 KiB, six
            // alternating pairs: 589-881 against 455-644 us), though not
            // clearly beyond the noise.
            self.quiet_turns = self.quiet_turns.wrapping_add(1);
            if self.quiet_turns & self.quiet_mask == 0 {
                self.progress_paths(&[Path::Ordinary, Path::Premium])
            } else {
                self.progress_paths(&[])
            }
        } else if both || round.is_multiple_of(if self.warm_reads > 0 { WARM_TURNS } else { COLD_TURNS }) {
            self.warm_reads = self.warm_reads.saturating_sub(1);
            // The other path first: a datagram the hot one brings is then
            // handled and answered without a read of the other after it
            // (one system call, 0.3-0.4 us, on an answer's way out).
            self.progress_paths(&[cold, self.hot])
        } else {
            self.progress_paths(&[self.hot])
        }
    }

    /// Hands the `n` buffers of a landing read to the endpoint: each
    /// datagram in place while it is the one its slot waited for, then the
    /// rest put together, all before any is handled as a whole (handling
    /// one may write where the later ones were read to). Returns how many
    /// buffers are done with (the rest hold whole datagrams, or runs).
    fn handle_landed(&mut self, now: Time, read_at: Option<Time>, landing: &Landing, n: usize) -> usize {
        // A run's datagrams share the first buffer, and its arrival time.
        let run = landing.run();
        let coalesced = run && self.rx.segment_size(0).is_some();
        let mut j = 0;
        loop {
            let buffer = if run { 0 } else { j };
            if buffer < n {
                self.stamp_arrival(read_at, buffer);
            }
            let Some((head, data, tail)) = self.rx.landed(j, landing) else { break };
            let source = Header::named_source(head).filter(|_| coalesced);
            // SAFETY: the landing is the one just read into, with no call
            // on the endpoint since but this, for slots in order; the read
            // wrote `data` bytes of slot j's region.
            match unsafe { self.endpoint.handle_landed(now, landing, j, head, data, tail) } {
                Landed::InPlace => j += 1,
                Landed::Elsewhere => break,
                // Its channel failed: the regions may be gone, and the
                // datagrams read to them with them (the job stops).
                Landed::Ended => return n,
            }
            // Counted by the rank the datagram names, as a run's datagrams
            // handled where they lie are.
            if let Some(count) = source.and_then(|rank| self.coalesced.get_mut(rank as usize)) {
                *count += 1;
            }
        }
        // SAFETY: as above; nothing was freed since the read.
        unsafe { self.rx.gather_from(j, landing) }
    }

    /// Tells the endpoint when the datagrams of the last read's `i`th
    /// buffer reached this host, where the kernel stamped them; `read_at`:
    /// when the read returned.
    fn stamp_arrival(&mut self, read_at: Option<Time>, i: usize) {
        if let (Some(at), Some(age)) = (read_at, self.rx.age(i)) {
            self.endpoint.set_arrival(at - age);
        }
    }

    /// Turns the kernel's receive stamps on once the endpoint samples
    /// arrival times (it monitors latency, or a peer sends under rate
    /// control), unless `BULKWIRE_RX_STAMPS=0`.
    fn start_stamps(&mut self) {
        if self.rx_stamps == Stamps::Wanted && self.endpoint.samples_arrivals() {
            let on = self.sockets.stamp_arrivals();
            self.rx.set_stamping(on);
            self.rx_stamps = if on { Stamps::On } else { Stamps::Off };
            if self.verbose {
                let how = if on { "the kernel's receive times" } else { "read times (the kernel refused stamps)" };
                eprintln!("bulkwire: arrival times for latency and rate samples: {how}");
            }
        }
    }

    fn progress_paths(&mut self, paths: &[Path]) -> bool {
        // The clock only where a socket is read or a timer is set: a turn
        // of a wait through shared memory needs neither.
        let clock = !paths.is_empty() || self.endpoint.poll_timeout().is_some();
        let now = if clock { self.now() } else { Time::ZERO };
        self.start_stamps();
        let mut moved = false;
        for &path in paths {
            // Buffers read from this socket so far.
            let mut buffers = 0;
            while buffers < READ_BATCH {
                // The next datagrams of a large message in reassembly are
                // read straight into its buffer where they come in order
                // (not where loss is injected: a dropped one would leave
                // the rest out of place).
                let landing = match self.direct_read && self.loss.is_none() {
                    true => self.endpoint.landing(self.rx.capacity()),
                    false => None,
                };
                let socket = self.sockets.socket(path);
                let read = match &landing {
                    // SAFETY: the endpoint lends the landing's regions until
                    // its next call but `handle_landed`.
                    Some(landing) => unsafe { self.rx.recv_landing(socket, landing) },
                    None => self.rx.recv(socket),
                };
                // Would block, or an ICMP error for an earlier send: the
                // protocol recovers from both.
                let Ok(n) = read else { break };
                cycles::mark(Point::Read);
                let read_at = (self.rx_stamps == Stamps::On).then(|| self.now());
                let mut first = 0;
                if let Some(landing) = &landing {
                    first = self.handle_landed(now, read_at, landing, n);
                    if first > 0 {
                        self.delivered_on(path);
                        moved = true;
                    }
                }
                for i in first..n {
                    // An empty datagram is a wake-up from a peer on this
                    // host (see `shm`): it carries nothing, but says that
                    // something came through shared memory. Read by the
                    // progress thread, it must still wake an application
                    // thread that polls the sockets (it counts as moved):
                    // swallowed, that thread slept on to its poll's limit,
                    // and `World::barrier` among 64 processes on 2 cores,
                    // on the board, took 22-27 ms (`bench scale`; woken,
                    // 198-236 us).
                    if self.rx.datagram_mut(i).is_empty() {
                        moved = true;
                        continue;
                    }
                    self.delivered_on(path);
                    moved = true;
                    if let Some(size) = self.rx.segment_size(i) {
                        // A run of datagrams the kernel delivered at once:
                        // each handled where it lies, all stamped alike.
                        let arrived = read_at.zip(self.rx.age(i)).map(|(at, age)| at - age);
                        for datagram in self.rx.datagram_mut(i).chunks(size) {
                            // Counted by the rank the datagram names.
                            if let Some(n) =
                                Header::named_source(datagram).and_then(|rank| self.coalesced.get_mut(rank as usize))
                            {
                                *n += 1;
                            }
                            if !self.loss.as_mut().is_some_and(|l| l.drops()) {
                                if let Some(at) = arrived {
                                    self.endpoint.set_arrival(at);
                                }
                                self.endpoint.handle_datagram(now, datagram);
                            }
                        }
                        continue;
                    }
                    if self.loss.as_mut().is_some_and(|l| l.drops()) {
                        continue;
                    }
                    self.stamp_arrival(read_at, i);
                    self.endpoint.handle_datagram_owned(now, self.rx.datagram_mut(i));
                }
                // A run's landing read fills one buffer (with up to a
                // buffer's worth of datagrams); others, each buffer
                // asked for.
                let asked = match landing.as_ref().is_some_and(Landing::run) {
                    true => 1,
                    false => self.rx.capacity(),
                };
                if n < asked {
                    break;
                }
                buffers += asked;
            }
        }
        if moved {
            cycles::mark(Point::Handled);
        }
        if clock && self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
        moved |= self.flush();
        self.collect();
        if moved {
            cycles::mark(Point::Collected);
        }
        moved |= self.poll_shm();
        moved
    }

    /// A datagram came on `path`: it is the hot one now, and where the
    /// other was, the paths take turns (the other is read sooner a while).
    fn delivered_on(&mut self, path: Path) {
        if self.hot != path {
            self.hot = path;
            self.warm_reads = WARM_READS;
        }
    }

    /// Reads what the peers on this host wrote, into the inbox while it has
    /// room; a malformed record stops the job, as a protocol violation.
    fn poll_shm(&mut self) -> bool {
        let Some(shm) = self.shm.as_mut() else { return false };
        let limit = self.endpoint.config().recv_buffer_bytes;
        let max = self.endpoint.config().max_message_size;
        let (defer, dest) = (self.deferral.as_ref(), self.dest.as_mut());
        let mut moved = match shm.poll(&mut self.inbox, &mut self.inbox_bytes, limit, max, defer, dest) {
            Ok(moved) => moved,
            Err(reason) => {
                self.failure.get_or_insert(reason);
                true
            }
        };
        // What was left unread for a receive that has ended is read now:
        // its sender waits for that.
        if self.deferral.is_none() && shm.deferred() > 0 {
            for i in 0..self.inbox.len() {
                if self.inbox[i].lent.is_some() {
                    self.materialize_at(i);
                    moved = true;
                }
            }
        }
        self.send_wakeups();
        moved
    }

    /// Makes inbox message `i` whole in a buffer of its own.
    fn materialize_at(&mut self, i: usize) {
        let before = self.inbox[i].data.capacity();
        let mut msg = std::mem::replace(&mut self.inbox[i], Inbound::new(0, 0, Vec::new(), 0));
        if let Err(reason) = self.materialize(&mut msg) {
            self.failure.get_or_insert(reason);
        }
        self.inbox_bytes = self.inbox_bytes + msg.data.capacity() - before;
        self.inbox[i] = msg;
    }

    /// Makes `msg` whole in a buffer of its own: what is unread of it is
    /// read from its sender's memory, what is in a receive's buffer copied.
    fn materialize(&mut self, msg: &mut Inbound) -> Result<(), String> {
        let Some(lent) = msg.lent.take() else { return Ok(()) };
        let end = &msg.data[msg.start..];
        let data = match &lent.remote {
            Some(remote) => {
                let shm = self.shm.as_mut().expect("a lent message came through shared memory");
                shm.read_lent_whole(msg.from, lent.len, remote, end)
            }
            None => {
                let dest = self.dest.as_mut().expect("a message in a receive's buffer while it lasts");
                dest.state = DestState::Free;
                Ok(dest.take(lent.len, end))
            }
        };
        self.send_wakeups();
        msg.data = data?;
        msg.start = 0;
        Ok(())
    }

    /// Leaves unread, until a receive reads them into its own buffer, the
    /// messages lent by peers on this host that `deferral` covers and that
    /// come from now until [`Engine::end_deferral`]; `false` (nothing
    /// changed) where another deferral is in force. A receive that sets one
    /// takes such messages with [`Engine::take_lent`] and reads them with
    /// [`Engine::read_lent`]; what it leaves is read at the next turn after
    /// the deferral ends, as it would have been when it came (so a sender
    /// waits for its reader only while a receive is under way).
    pub fn defer(&mut self, deferral: Deferral) -> bool {
        if self.deferral.is_some() || self.shm.is_none() {
            return false;
        }
        self.deferral = Some(deferral);
        true
    }

    /// [`Engine::defer`], and more: the next message from `deferral.from`
    /// (which must be given) that comes through the shared-memory ring is
    /// written into the `len` bytes at `buf` as it comes, all but its end
    /// (`deferral.tail` bytes at least), rather than into a buffer of its
    /// own; once whole, if the deferral covers its end it waits in the
    /// inbox with its start in `buf` ([`Engine::read_lent`] finishes it),
    /// otherwise it is moved out. `false` as [`Engine::defer`].
    ///
    /// From a peer over UDP, likewise for the next message on
    /// `deferral.channel` that comes in several datagrams, fits (all but
    /// its last `deferral.tail` bytes in `len`) and whose end, sent ahead
    /// of it ([`Endpoint::set_tail_ahead`] at the sender, `deferral.tail`
    /// bytes), the deferral covers: it is reassembled in `buf`
    /// ([`Endpoint::place`]), its datagrams read straight there where they
    /// come in order. Nothing is written there beyond that message's part.
    ///
    /// # Safety
    ///
    /// `buf` is valid for writes of `len` bytes, and neither read nor
    /// written by anyone else until [`Engine::end_deferral`] has returned
    /// (which moves out whatever is still in it).
    pub unsafe fn defer_into(&mut self, deferral: Deferral, buf: *mut u8, len: usize) -> bool {
        let Some(from) = deferral.from else { return self.defer(deferral) };
        if self.transport(from) == crate::Transport::Udp {
            if self.deferral.is_some() || self.placing.is_some() || len == 0 {
                return false;
            }
            // SAFETY: the caller lends `buf` until `end_deferral`, which
            // takes it back from the endpoint.
            let filter = Some(deferral.filter.clone());
            unsafe { self.endpoint.place(from, deferral.channel, buf, len, deferral.tail, filter) };
            self.placing = Some(deferral);
            self.dest = Some(Dest { ptr: buf, cap: len, from, state: DestState::Free });
            return true;
        }
        if self.placing.is_some() || !self.defer(deferral) {
            return false;
        }
        if len > 0 {
            self.dest = Some(Dest { ptr: buf, cap: len, from, state: DestState::Free });
        }
        true
    }

    /// Messages left unread when they came ([`Engine::defer`]) and not
    /// read since: the next turn without a deferral reads them.
    pub fn unread(&self) -> usize {
        self.shm.as_ref().map_or(0, Shm::deferred)
    }

    /// Ends the deferral [`Engine::defer`] or [`Engine::defer_into`] set;
    /// what is in the receive's buffer is moved into buffers of its own.
    pub fn end_deferral(&mut self) {
        self.deferral = None;
        self.placing = None;
        self.unplace();
    }

    /// Moves what is in the receive's buffer ([`Engine::defer_into`]) into
    /// buffers of its own; the engine no longer writes there.
    fn unplace(&mut self) {
        // A message over UDP being reassembled there, or whole and not yet
        // in the inbox, moves into a buffer of its own (first: the endpoint
        // then writes there no more, and delivers nothing placed).
        self.endpoint.unplace();
        let Some(mut dest) = self.dest.take() else { return };
        if dest.state == DestState::Holding {
            if let Some(i) = self.inbox.iter().position(|m| m.lent.as_ref().is_some_and(|l| l.remote.is_none())) {
                self.dest = Some(dest);
                self.materialize_at(i);
                dest = self.dest.take().expect("put back");
            }
        }
        if let Some(shm) = self.shm.as_mut() {
            shm.unplace(&mut dest);
        }
    }

    /// Removes and returns the first inbox message that `matches`, left
    /// unread if it was lent and deferred ([`Inbound::lent`]): the caller
    /// then reads it with [`Engine::read_lent`], which its sender waits for.
    pub fn take_lent(&mut self, mut matches: impl FnMut(&Inbound) -> bool) -> Option<Inbound> {
        let index = self.inbox.iter().position(&mut matches)?;
        let message = self.inbox.remove(index).expect("position is valid");
        self.inbox_bytes -= message.data.capacity();
        self.collect();
        Some(message)
    }

    /// Puts the first `dst.len()` bytes (at most [`Inbound::len`]) of `msg`,
    /// taken by [`Engine::take_lent`], into `dst`: what is unread of it is
    /// read from its sender's memory, which is then its sender's again
    /// (the sender is told), and what came with it (its end) is copied;
    /// that end stays in `msg.data`. An error where the sender's memory
    /// could not be read (its process ended).
    pub fn read_lent(&mut self, msg: &mut Inbound, dst: &mut [u8]) -> Result<(), String> {
        let placed = msg.lent.as_ref().is_some_and(|l| l.remote.is_none());
        if !placed {
            // `dst` may be the buffer a later message is being written into.
            self.unplace();
        }
        let end = &msg.data[msg.start..];
        let Some(lent) = msg.lent.take() else {
            let n = dst.len().min(end.len());
            dst[..n].copy_from_slice(&end[..n]);
            return Ok(());
        };
        let n = dst.len().min(lent.len + end.len());
        let (start, came) = dst[..n].split_at_mut(n.min(lent.len));
        came.copy_from_slice(&end[..came.len()]);
        let Some(remote) = &lent.remote else {
            let dest = self.dest.as_mut().expect("a message in a receive's buffer while it lasts");
            dest.state = DestState::Free;
            if start.as_ptr() != dest.ptr.cast_const() {
                // SAFETY: the first `lent.len` bytes of the receive's
                // buffer hold the message's start; `start` is no longer.
                unsafe { std::ptr::copy(dest.ptr, start.as_mut_ptr(), start.len()) };
            }
            return Ok(());
        };
        let shm = self.shm.as_mut().expect("a lent message came through shared memory");
        let read = shm.read_lent(msg.from, lent.len, remote, start);
        self.send_wakeups();
        read
    }

    /// Sends the wake-ups the shared-memory path asked for: an empty
    /// datagram to each sleeping reader's ordinary socket.
    fn send_wakeups(&mut self) {
        let Some(shm) = self.shm.as_mut() else { return };
        for to in shm.wake.drain(..) {
            // A lost wake-up costs the reader its poll timeout at worst.
            let _ = self.sockets.ordinary.send_to(&[], to);
        }
    }

    /// Whether every other process of the job runs on this host and is
    /// reached through shared memory: a collective of the whole job may
    /// then go through the board ([`Engine::post`]) instead of messages.
    pub fn on_board(&self) -> bool {
        self.shm.as_ref().is_some_and(Shm::all_local)
    }

    /// Posts `bytes` on the board as this process's next contribution to a
    /// collective of the whole job, which every process makes in the same
    /// order, and returns the number by which the others read it
    /// ([`Engine::read_post`]). Fails if the job is not all on the board
    /// ([`Engine::on_board`]) or `bytes` is longer than [`POST_MAX`].
    pub fn post(&mut self, kind: Kind, bytes: &[u8]) -> Result<u64, String> {
        let shm = self.shm.as_mut().filter(|s| s.all_local()).ok_or("not every process of the job is on this host")?;
        let seq =
            shm.post(kind, bytes).ok_or_else(|| format!("a post of {} bytes (at most {POST_MAX})", bytes.len()))?;
        self.send_wakeups();
        Ok(seq)
    }

    /// Copies `peer`'s post number `seq` into `dst` if it has made it, and
    /// says whether it has; an error is the peer's violation, or says that
    /// its post is of another collective than `kind`.
    pub fn read_post(&self, peer: u32, seq: u64, kind: Kind, dst: &mut Vec<u8>) -> Result<bool, String> {
        self.shm.as_ref().ok_or("no shared memory with any peer")?.read_post(peer, seq, kind, dst)
    }

    /// How this process reaches `peer`.
    pub fn transport(&self, peer: u32) -> crate::Transport {
        match &self.shm {
            Some(shm) if shm.is_local(peer) => crate::Transport::Shm,
            _ => crate::Transport::Udp,
        }
    }

    /// Whether a message of `len` bytes to `to` on `channel` would be taken
    /// now ([`Endpoint::check_send`], for either path).
    pub fn check_send(&self, to: u32, channel: u16, len: usize) -> Result<(), SendError> {
        match &self.shm {
            Some(shm) if shm.is_local(to) => {
                let cfg = self.endpoint.config();
                if channel >= cfg.channels {
                    return Err(SendError::NoSuchChannel { channel, channels: cfg.channels });
                }
                if len > cfg.max_message_size {
                    return Err(SendError::TooLarge { len, max: cfg.max_message_size });
                }
                shm.check(to, len, cfg.send_buffer_bytes)
            }
            _ => self.endpoint.check_send(to, channel, len),
        }
    }

    pub fn can_send(&self, to: u32, channel: u16, len: usize) -> bool {
        self.check_send(to, channel, len).is_ok()
    }

    /// Whether `peer`, on this host, reads this process's memory: a layer
    /// above may then tell it where to read instead of sending the bytes
    /// ([`Engine::read_peer_memory`] at the peer).
    pub fn peer_reads_memory(&self, peer: u32) -> bool {
        self.shm.as_ref().is_some_and(|s| s.single_copy_to(peer))
    }

    /// This process's arena in shared memory (pointer and length; empty
    /// where there is none): bytes its peers on this host read where they
    /// lie ([`Engine::read_peer_arena`]), as the layer that writes them
    /// arranges (see `BULKWIRE_SHM_ARENA`). Valid while the engine lives.
    pub fn shared_arena(&self) -> (*mut u8, usize) {
        self.shm.as_ref().map_or((std::ptr::null_mut(), 0), |s| s.arena())
    }

    /// The length of `peer`'s arena as this process sees it: 0 where the
    /// peer is not on this host through shared memory, or has none.
    pub fn peer_arena_len(&self, peer: u32) -> usize {
        self.shm.as_ref().map_or(0, |s| s.arena_of(peer))
    }

    /// Where `peer`'s arena lies in this process's memory (its mapping of
    /// the peer's file, valid while the engine lives), and its length;
    /// `None` for a peer not on this host.
    pub fn peer_arena(&self, peer: u32) -> Option<(*const u8, usize)> {
        self.shm.as_ref()?.arena_view(peer)
    }

    /// Copies `dst.len()` bytes from `at` in `peer`'s arena into `dst`; bytes
    /// outside it are an error that says so.
    pub fn read_peer_arena(&mut self, peer: u32, at: u64, dst: &mut [u8]) -> Result<(), String> {
        self.shm.as_mut().ok_or("no shared memory with any peer")?.read_arena(peer, at, dst)
    }

    /// Copies `dst.len()` bytes at `addr` in `peer`'s memory into `dst`, in
    /// one copy, where `peer` said where to read: from this process's
    /// mapping of `peer`'s stage where they lie in it
    /// ([`Engine::stage`]), else by one system call. An address
    /// `peer` does not map, a peer that has exited, or one whose memory
    /// this process cannot read is an error that says so.
    pub fn read_peer_memory(&mut self, peer: u32, addr: u64, dst: &mut [u8]) -> Result<(), String> {
        let shm = self.shm.as_mut().ok_or("no shared memory with any peer")?;
        shm.read_from(peer, addr, dst).map(|_| ()).map_err(|e| match e.raw_os_error() {
            Some(libc::EFAULT) => format!("{} bytes at {addr:#x} are not in process {peer}'s memory", dst.len()),
            Some(libc::ESRCH) => format!("process {peer} has exited"),
            _ => format!("reading process {peer}'s memory: {e}"),
        })
    }

    /// This process's stage, grown to at least `at_least` bytes: memory
    /// whose bytes its peers on this host copy from their mapping of it
    /// when told to read there ([`Engine::read_peer_memory`]), at about
    /// twice the speed of reading this process's memory elsewhere. A stage
    /// too small is replaced, so the caller must know that no peer still
    /// reads the one it had. An error where there is none to be had (no
    /// shared-memory path, `BULKWIRE_SHM_STAGE=0`, no memory).
    pub fn stage(&mut self, at_least: usize) -> Result<(*mut u8, usize), String> {
        self.shm.as_mut().ok_or("no shared memory with any peer")?.stage(at_least)
    }

    /// Lets go of this process's stage and of its mappings of its peers'
    /// stages, for a caller that knows nobody reads them any more (BSP at
    /// `bsp_end`: every reader has read what it was told to).
    pub fn release_stages(&mut self) {
        if let Some(shm) = self.shm.as_mut() {
            shm.release_stages();
        }
    }

    /// Whether a message of `len` bytes to `to` would be lent
    /// ([`Engine::lend`]) rather than copied: `to` runs on this host, reads
    /// this process's memory, and the message is at least as long as its
    /// ring (below that two copies through the ring, in the caches, are
    /// faster than one read from another process's memory), or of 256 KiB
    /// or more where the ring has no room for it now.
    pub fn lends(&self, to: u32, len: usize) -> bool {
        self.shm.as_ref().is_some_and(|s| s.lends(to, len))
    }

    /// Sends `data` followed by `suffix` (at most [`LEND_SUFFIX_MAX`] bytes;
    /// a layer's trailer) to `to` on `channel` without copying `data`: `to`
    /// reads it from this process's memory into the buffer it delivers, one
    /// copy in all, where [`Engine::lends`] holds; else, to a peer over UDP
    /// (from [`LEND_FROM`] bytes, unless [`UDP_LEND`] says no), the endpoint
    /// sends it from where it lies. `None` (nothing sent) otherwise: send a
    /// copy instead.
    ///
    /// What `to` receives is what `data`'s memory holds when `to` reads it
    /// (or the endpoint packs or resends it): the caller leaves it where it
    /// is and unchanged until [`Engine::loan_returned`] says so, keeping the
    /// engine's progress going meanwhile (the answer comes through it).
    pub fn lend(&mut self, to: u32, channel: u16, data: &[u8], suffix: &[u8]) -> Result<Option<Loan>, SendError> {
        let lends = self.lends(to, data.len());
        self.lend_if(lends, LEND_FROM, to, channel, data, suffix)
    }

    /// [`Engine::lend`] for a send whose caller waits for it later, with
    /// others (a borrowed send, as `MPI_Isend`'s): to a peer on this host
    /// also from [`STREAM_LEND_FROM`] bytes where it has yet to read what
    /// went before ([`Shm::lends_in_stream`]); to a peer over UDP from
    /// that size (streaming 64 KiB messages over loopback, `bench bw
    /// --transport udp --no-mpi`, alternating pairs: 3.2-3.4 GB/s against
    /// 2.3-2.5 copied in four, 3.8-4.7 against 3.6-4.0 in six on a faster
    /// day; lent from 16 KiB, no gain at 16 KiB).
    pub fn lend_borrowed(
        &mut self,
        to: u32,
        channel: u16,
        data: &[u8],
        suffix: &[u8],
    ) -> Result<Option<Loan>, SendError> {
        let lends = self.shm.as_ref().is_some_and(|s| s.lends_in_stream(to, data.len()));
        self.lend_if(lends, STREAM_LEND_FROM, to, channel, data, suffix)
    }

    /// [`Engine::lend`] through shared memory where `lends`, else to the
    /// endpoint from `udp_from` bytes.
    fn lend_if(
        &mut self,
        lends: bool,
        udp_from: usize,
        to: u32,
        channel: u16,
        data: &[u8],
        suffix: &[u8],
    ) -> Result<Option<Loan>, SendError> {
        if !lends {
            return self.lend_to_endpoint(to, channel, data, suffix, udp_from);
        }
        let cfg = self.endpoint.config();
        if channel >= cfg.channels {
            return Err(SendError::NoSuchChannel { channel, channels: cfg.channels });
        }
        let len = data.len() + suffix.len();
        if len > cfg.max_message_size {
            return Err(SendError::TooLarge { len, max: cfg.max_message_size });
        }
        if suffix.len() > LEND_SUFFIX_MAX {
            return Err(SendError::TooLarge { len: suffix.len(), max: LEND_SUFFIX_MAX });
        }
        let since = self.now();
        let shm = self.shm.as_mut().expect("lends");
        let token = shm.lend(to, channel, data.as_ptr() as u64, data.len(), suffix);
        self.send_wakeups();
        Ok(Some(Loan { to, token, len, since, sent: None }))
    }

    /// [`Engine::lend`] to a peer over UDP (from `udp_from` bytes, unless
    /// [`UDP_LEND`] says no): the endpoint sends its packets from `data`
    /// where it lies rather than from a copy, and the loan is returned once
    /// every packet has been acknowledged (the last of them asks for an
    /// acknowledgement at once: [`Endpoint::end_phase`]). The send
    /// buffer's limit does not hold it back ([`Endpoint::send_lent`]).
    fn lend_to_endpoint(
        &mut self,
        to: u32,
        channel: u16,
        data: &[u8],
        suffix: &[u8],
        udp_from: usize,
    ) -> Result<Option<Loan>, SendError> {
        if data.len() < udp_from || !self.lends_over_udp(to) {
            return Ok(None);
        }
        if suffix.len() > LEND_SUFFIX_MAX {
            return Err(SendError::TooLarge { len: suffix.len(), max: LEND_SUFFIX_MAX });
        }
        // SAFETY: `lend`'s caller leaves `data` as it is until the loan is
        // returned (or released).
        let Some(mut loan) = (unsafe { self.lend_region(to, data) }) else { unreachable!("checked above") };
        let slice = loan.sent.clone().expect("lent to the endpoint");
        self.endpoint.send_lent(to, channel, &[], slice, suffix)?;
        self.endpoint.end_phase(to, channel);
        self.udp_loans += 1;
        loan.len += suffix.len();
        Ok(Some(loan))
    }

    /// Sends `data` followed by `suffix` (at most [`LEND_SUFFIX_MAX`] bytes)
    /// to `to`, a peer over UDP, on `channel` as one message whose datagrams
    /// leave from `data` where it lies, and only then copies what the
    /// endpoint still holds of it (to resend it if need be): the copy a
    /// send makes anyway is off the way to the peer, made while the peer
    /// takes the datagrams in. `data` is the caller's again when this
    /// returns. `false` (nothing sent) where `to` is not reached over UDP,
    /// lending is off ([`UDP_LEND`]) or the send buffer has no room now:
    /// send a copy instead. Errors as [`Engine::check_send`].
    pub fn send_then_copy(&mut self, to: u32, channel: u16, data: &[u8], suffix: &[u8]) -> Result<bool, SendError> {
        if !self.lends_over_udp(to) {
            return Ok(false);
        }
        if suffix.len() > LEND_SUFFIX_MAX {
            return Err(SendError::TooLarge { len: suffix.len(), max: LEND_SUFFIX_MAX });
        }
        match self.endpoint.check_send(to, channel, data.len() + suffix.len()) {
            Err(SendError::WouldBlock) => return Ok(false),
            checked => checked?,
        }
        // SAFETY: the endpoint reads `data` only under the engine's lock,
        // which this holds until it returns, and from `keep_copy` on it
        // reads the copy instead.
        let Some(loan) = (unsafe { self.lend_region(to, data) }) else { unreachable!("checked above") };
        let slice = loan.sent.expect("lent to the endpoint");
        let body: Arc<dyn bulkwire_proto::LentBytes> = slice.clone();
        self.endpoint.send_lent(to, channel, &[], body, suffix)?;
        self.flush();
        // What the window held back, and every packet until acknowledged.
        if Arc::strong_count(&slice) > 1 {
            slice.keep_copy();
        }
        self.sent_then_copied += 1;
        Ok(true)
    }

    /// Messages [`Engine::send_then_copy`] has sent so far.
    pub fn sent_then_copied(&self) -> u64 {
        self.sent_then_copied
    }

    /// Lends `data` to the endpoint for messages to `to`, a peer over UDP,
    /// that carry parts of it where they lie ([`Engine::send_lent_part`]):
    /// the loan is returned once the endpoint holds no part of it, every
    /// packet that carried one acknowledged ([`Engine::loan_returned`]).
    /// `None` where lending is off (`BULKWIRE_UDP_LEND=0`) or `to` is on
    /// this host or this process.
    ///
    /// # Safety
    ///
    /// `data` stays valid and unchanged until the loan is returned or
    /// released ([`Engine::release_loans`]).
    pub unsafe fn lend_region(&mut self, to: u32, data: &[u8]) -> Option<Loan> {
        if !self.lends_over_udp(to) {
            return None;
        }
        let slice = Arc::new(LentSlice {
            ptr: std::sync::atomic::AtomicPtr::new(data.as_ptr().cast_mut()),
            len: data.len(),
            copy: std::sync::OnceLock::new(),
        });
        Some(Loan { to, token: 0, len: data.len(), since: self.now(), sent: Some(slice) })
    }

    /// Sends `prefix` followed by bytes `range` of the region of `loan`
    /// ([`Engine::lend_region`]) to its peer on `channel`, as one message
    /// whose packets carry the region's bytes where they lie
    /// ([`Endpoint::send_lent`]; the send buffer's limit is the caller's
    /// to check).
    pub fn send_lent_part(
        &mut self,
        loan: &Loan,
        channel: u16,
        prefix: &[u8],
        range: std::ops::Range<usize>,
    ) -> Result<(), SendError> {
        let region = loan.sent.as_ref().expect("a region lent to the endpoint");
        assert!(range.end <= region.len, "a part beyond its region");
        let part = Arc::new(bulkwire_proto::LentRange { whole: region.clone(), range });
        self.endpoint.send_lent(loan.to, channel, prefix, part, &[])?;
        self.udp_loans += 1;
        Ok(())
    }

    /// Whether a message to `to` may be lent to the endpoint: `to` is
    /// another process reached over UDP, and lending is on.
    fn lends_over_udp(&self, to: u32) -> bool {
        self.udp_lend && to != self.endpoint.config().rank && self.transport(to) == crate::Transport::Udp
    }

    /// Messages to peers over UDP lent to the endpoint so far, not copied.
    pub fn udp_loans(&self) -> u64 {
        self.udp_loans
    }

    /// Ends `loans` whose memory the endpoint may still read (their waits
    /// ended early: the job stopped): it reads copies from now on, and the
    /// lenders' memory is theirs again. Loans read by peers on this host
    /// need nothing (a peer reads them only while the job runs).
    pub fn release_loans(&mut self, loans: &[Loan]) {
        for slice in loans.iter().filter_map(|l| l.sent.as_ref()) {
            if Arc::strong_count(slice) > 1 {
                slice.keep_copy();
            }
        }
    }

    /// Whether the reader of `loan` has read the message: `Ok(true)` once it
    /// said so (the memory is the lender's again), an error once its
    /// process has ended without saying so (looked at after the loan has
    /// been out 10 ms).
    pub fn loan_returned(&self, loan: &Loan) -> Result<bool, String> {
        if let Some(slice) = &loan.sent {
            // Whether every packet was acknowledged (the endpoint let go); a
            // peer that stops answering stops the job.
            return Ok(Arc::strong_count(slice) == 1);
        }
        let shm = self.shm.as_ref().expect("a loan was made");
        if shm.returned(loan.token) {
            return Ok(true);
        }
        if self.now().since(loan.since) >= LOAN_CHECK_AFTER && !shm.peer_alive(loan.to) {
            return Err(format!("rank {} ended before it read the message", loan.to));
        }
        Ok(false)
    }

    /// Sends `data` followed by `suffix` to `to` on `channel` as one
    /// message. To a peer on this host, what its ring has room for is
    /// written straight from them and only the rest copied (a message sent
    /// by descriptor, or behind others, is copied whole); to any other, the
    /// two are copied into one buffer for the endpoint. Errors as
    /// [`Engine::check_send`], before anything is sent.
    pub fn send_parts(&mut self, to: u32, channel: u16, data: &[u8], suffix: &[u8]) -> Result<(), SendError> {
        let len = data.len() + suffix.len();
        self.check_send(to, channel, len)?;
        match self.shm.as_mut() {
            Some(shm) if shm.is_local(to) => {
                shm.send_parts(to, channel, data, suffix);
                self.send_wakeups();
                Ok(())
            }
            _ => {
                let mut whole = Vec::with_capacity(len);
                whole.extend_from_slice(data);
                whole.extend_from_slice(suffix);
                self.endpoint.send_owned(to, channel, whole)
            }
        }
    }

    /// Sends `prefix` followed by `body` to `to` on `channel` as one
    /// message. To a peer over UDP the endpoint sends `body` where it lies,
    /// holding it until every packet that carries a piece of it has been
    /// acknowledged ([`Endpoint::send_lent`], whose send-buffer limit this
    /// checks first: use it for memory the caller would otherwise copy);
    /// to a peer on this host, as [`Engine::send_parts`]. Errors as
    /// [`Engine::check_send`], before anything is sent.
    pub fn send_shared(
        &mut self,
        to: u32,
        channel: u16,
        prefix: &[u8],
        body: Arc<dyn bulkwire_proto::LentBytes>,
    ) -> Result<(), SendError> {
        if self.shm.as_ref().is_some_and(|s| s.is_local(to)) {
            return self.send_parts(to, channel, prefix, (*body).as_ref());
        }
        self.endpoint.check_send(to, channel, prefix.len() + (*body).as_ref().len())?;
        self.endpoint.send_lent(to, channel, prefix, body, &[])
    }

    /// Sends `data` to `to` on `channel`: through shared memory to a peer
    /// on this host, else by the endpoint ([`Endpoint::send_owned`]).
    pub fn send_owned(&mut self, to: u32, channel: u16, data: Vec<u8>) -> Result<(), SendError> {
        self.send_from(to, channel, data, 0)
    }

    /// [`Engine::send_owned`] of `framed[RECORD_HEADER_LEN..]`
    /// ([`Endpoint::send_framed`]).
    pub fn send_framed(&mut self, to: u32, channel: u16, framed: Vec<u8>) -> Result<(), SendError> {
        if framed.len() < bulkwire_wire::RECORD_HEADER_LEN {
            return Err(SendError::NoHeadroom { len: framed.len() });
        }
        self.send_from(to, channel, framed, bulkwire_wire::RECORD_HEADER_LEN)
    }

    fn send_from(&mut self, to: u32, channel: u16, data: Vec<u8>, start: usize) -> Result<(), SendError> {
        if !self.shm.as_ref().is_some_and(|s| s.is_local(to)) {
            return match start {
                0 => self.endpoint.send_owned(to, channel, data),
                _ => self.endpoint.send_framed(to, channel, data),
            };
        }
        self.check_send(to, channel, data.len() - start)?;
        self.shm.as_mut().expect("checked").send(to, channel, data, start);
        self.send_wakeups();
        Ok(())
    }

    /// [`Endpoint::awaiting`], now; nothing to do for a peer on this host,
    /// from which nothing is lost (not even a look at the clock: a wait
    /// calls this at every turn).
    pub fn awaiting(&mut self, peer: u32, channel: u16) {
        if self.transport(peer) == crate::Transport::Udp {
            let now = self.now();
            self.endpoint.awaiting(now, peer, channel);
        }
    }

    /// [`Endpoint::end_phase`]; nothing to do for a peer on this host.
    pub fn end_phase(&mut self, to: u32, channel: u16) {
        if self.transport(to) == crate::Transport::Udp {
            self.endpoint.end_phase(to, channel);
        }
    }

    /// Everything sent has been acknowledged (UDP) or taken by its reader
    /// (shared memory).
    pub fn is_idle(&self) -> bool {
        self.endpoint.is_idle() && self.shm.as_ref().is_none_or(Shm::is_idle)
    }

    /// Before `who` (this thread) sleeps in poll(2) on the sockets: whether
    /// it may (nothing came by shared memory meanwhile); a sender that
    /// writes after this wakes it with a datagram.
    fn may_sleep(&mut self, who: Sleeper) -> bool {
        self.shm.as_mut().is_none_or(|shm| shm.may_sleep(who))
    }

    fn awake(&self, who: Sleeper) {
        if let Some(shm) = &self.shm {
            shm.awake(who);
        }
    }

    /// Sends what the endpoint has ready, in batches. Datagrams a full
    /// socket did not take wait in the batch and go first next time.
    fn flush(&mut self) -> bool {
        if let Some(shm) = self.shm.as_mut() {
            shm.flush();
            self.send_wakeups();
        }
        // The clock only when there is something to send (a turn through
        // shared memory has none).
        if self.tx.is_empty() && !self.endpoint.has_transmit() {
            return false;
        }
        cycles::mark(Point::FlushBegan);
        let now = self.now();
        let mut sent = false;
        loop {
            while !self.tx.is_full() {
                let Some((t, shared)) = self.endpoint.poll_transmit_shared(now, self.tx.next_buffer()) else { break };
                cycles::mark(Point::Polled);
                let (ordinary, premium) = self.peers[t.to as usize];
                self.tx.push(t.path, t.to, if t.path == Path::Premium { premium } else { ordinary }, t.len, shared);
                cycles::mark(Point::Batched);
            }
            if self.tx.is_empty() {
                return sent;
            }
            let result = self.tx.send(&self.sockets);
            cycles::mark(Point::Sent);
            match result {
                Ok(_) => sent = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return sent,
                // Anything else is a lost datagram, which the protocol recovers.
                Err(_) => {}
            }
        }
    }

    /// Moves delivered messages to the inbox while it has room, so that an
    /// application that does not receive still holds the sender back. Room
    /// is counted in the memory messages hold: a message delivered in the
    /// buffer it was read into may hold more than its length.
    fn collect(&mut self) {
        let limit = self.endpoint.config().recv_buffer_bytes;
        while self.inbox_bytes < limit {
            match self.endpoint.poll_event() {
                Some(Event::Message { from, channel, data, start }) => {
                    self.inbox_bytes += data.capacity();
                    self.inbox.push_back(Inbound::new(from, channel, data, start));
                }
                Some(Event::Placed { from, channel, placed, end }) => {
                    let msg = self.placed(from, channel, placed, end);
                    self.inbox_bytes += msg.data.capacity();
                    self.inbox.push_back(msg);
                }
                Some(Event::Aimed { from, channel, head, len }) => {
                    self.inbox_bytes += head.capacity();
                    self.inbox.push_back(Inbound { aimed: len, ..Inbound::new(from, channel, head, 0) });
                }
                Some(Event::ProtocolViolation { peer, reason, .. }) => {
                    self.failure.get_or_insert_with(|| format!("rank {peer} broke the protocol: {reason}"));
                }
                // Counted by the endpoint (`latency_stats`); said when asked.
                Some(Event::ModeChanged { peer, data_path }) => {
                    if self.verbose {
                        let rank = self.endpoint.config().rank;
                        let at = self.now().as_nanos() as f64 / 1e9;
                        say(&format!("bulkwire: rank {rank}: data to rank {peer} on the {data_path} path ({at:.3} s)"));
                    }
                }
                None => break,
            }
        }
    }

    /// A message from a peer over UDP whose first `placed` bytes were
    /// reassembled in a receive's buffer ([`Engine::defer_into`]): left
    /// there if the receive's deferral covers its end (as the endpoint
    /// checked before it placed it), else moved out (and the buffer waits
    /// for the next).
    fn placed(&mut self, from: u32, channel: u16, placed: usize, end: Vec<u8>) -> Inbound {
        let dest = self.dest.as_mut().expect("a message is placed only while the receive lends its buffer");
        match &self.placing {
            Some(d) if d.covers(from, channel, &end) => {
                dest.state = DestState::Holding;
                let lent = LentMessage { len: placed, remote: None };
                Inbound { from, channel, data: end, start: 0, lent: Some(lent), aimed: 0 }
            }
            placing => {
                let data = dest.take(placed, &end);
                if let Some(d) = placing {
                    // SAFETY: as in `defer_into`: the buffer is lent until
                    // `end_deferral`.
                    unsafe { self.endpoint.place(from, d.channel, dest.ptr, dest.cap, d.tail, Some(d.filter.clone())) };
                }
                Inbound::new(from, channel, data, 0)
            }
        }
    }

    /// Removes and returns the first inbox message that `matches`.
    pub fn take(&mut self, matches: impl FnMut(&Inbound) -> bool) -> Option<Inbound> {
        let mut message = self.take_lent(matches)?;
        if let Err(reason) = self.materialize(&mut message) {
            self.failure.get_or_insert(reason);
            return None;
        }
        Some(message)
    }

    /// Gives back the buffer of a message taken from the inbox once its
    /// contents are no longer needed: a later datagram is read into it
    /// (see [`crate::sockets::RecvBatch::recycle`]), or a small one a later
    /// message through shared memory; buffers of other sizes are freed.
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        let buffer = match self.shm.as_mut() {
            Some(shm) => shm.keep_buffer(buffer),
            None => Some(buffer),
        };
        if let Some(buffer) = buffer {
            self.rx.recycle(buffer);
        }
    }

    /// [`Engine::recycle`] of all the buffers of what was received at once
    /// (see [`crate::sockets::RecvBatch::recycle_many`]): kept for a next
    /// time as large.
    pub fn recycle_many(&mut self, buffers: impl Iterator<Item = Vec<u8>>) {
        match self.shm.as_mut() {
            Some(shm) => self.rx.recycle_many(buffers.filter_map(|b| shm.keep_buffer(b))),
            None => self.rx.recycle_many(buffers),
        }
    }

    /// Lets the next messages from `from` (a peer over UDP) on `channel`
    /// be read straight to the `len` bytes at `base` where they come in
    /// order, each in one datagram and `skip` bytes longer than a full
    /// datagram's data: their bytes past the first `skip` one after the
    /// other ([`Endpoint::aim`]). Such a message reaches the inbox with its
    /// first `skip` bytes in [`Inbound::data`] and the number of the others
    /// in [`Inbound::aimed`]. `false` (and no aim) where the peer is not
    /// over UDP, datagrams are too small for it to be worth it
    /// ([`Endpoint::aim_chunk`]) or are not read in place
    /// (`BULKWIRE_DIRECT_READ=0`, injected loss), or a message of that
    /// channel from `from` is in the inbox or on its way there: the aim
    /// must follow from every message the caller has taken. Replaces an
    /// aim given before.
    ///
    /// # Safety
    ///
    /// `base` is valid for writes of `len` bytes, and neither read nor
    /// written by anyone else until [`Engine::unaim`] has returned or a
    /// message comes otherwise (the bytes of a message taken are the
    /// caller's). A datagram read there that turns out not to be the next
    /// leaves its bytes there: the caller writes there what belongs there
    /// later.
    pub unsafe fn aim(&mut self, from: u32, channel: u16, skip: usize, base: *mut u8, len: usize) -> bool {
        self.endpoint.unaim();
        let worth = self.endpoint.aim_chunk(skip).is_some();
        if !worth || !self.direct_read || self.loss.is_some() || self.transport(from) != crate::Transport::Udp {
            return false;
        }
        self.collect();
        if self.inbox.iter().any(|m| (m.from, m.channel) == (from, channel)) {
            return false;
        }
        // SAFETY: the caller's promise, passed on; `unaim` takes it back.
        unsafe { self.endpoint.aim(from, channel, skip, base, len) }
    }

    /// Ends the aim [`Engine::aim`] gave: nothing is written there after.
    pub fn unaim(&mut self) {
        self.endpoint.unaim();
    }

    /// Keeps at least `n` of the buffers given back from now on (see
    /// [`crate::sockets::RecvBatch::keep_at_least`]).
    pub fn keep_receive_buffers(&mut self, n: usize) {
        self.rx.keep_at_least(n);
    }

    /// The addresses of `rank`'s ordinary and premium sockets.
    pub fn peer_addrs(&self, rank: u32) -> Option<(SocketAddr, SocketAddr)> {
        self.peers.get(rank as usize).copied()
    }

    fn fds(&self) -> [RawFd; 2] {
        [self.sockets.ordinary.as_raw_fd(), self.sockets.premium.as_raw_fd()]
    }
}

struct Inner {
    engine: Mutex<Engine>,
    changed: Condvar,
    stop: AtomicBool,
    /// Application threads spinning on the engine right now.
    spinning: AtomicU32,
    /// The last wait to start spinning was a collective one.
    collective: AtomicBool,
    /// An application thread is blocked in poll(2) on the sockets.
    app_polls: AtomicBool,
    /// Polls of an application thread that slept to [`POLL_AT_MOST`]
    /// with nothing ready ([`Runtime::polls_to_limit`]).
    polls_to_limit: AtomicU64,
    /// Of those, polls that came to their limit though something had come
    /// by shared memory meanwhile ([`Runtime::wakeups_missed`]).
    wakeups_missed: AtomicU64,
    /// Application threads blocked until the progress thread finds what
    /// they wait for.
    blocked: AtomicU32,
    /// How long the application spins before it blocks (zero: never spins).
    spin: Duration,
    /// Calls the application has left: one that left a call lately is
    /// likely to call again soon and poll the sockets itself. A count, not
    /// a time: the progress thread notes when it sees it move, and a call
    /// need not read the clock (a tenth of an 8 B half round trip through
    /// shared memory went to reading it here).
    calls_left: AtomicU64,
    /// When the progress thread will wake up by itself (engine time, ns).
    thread_wakes_at: AtomicU64,
    wake: OwnedFd,
    /// Wakes an application thread that blocks in poll(2) on the sockets
    /// (`app_polls`) when the progress thread has read for it.
    poller_wake: OwnedFd,
    control: Mutex<Control>,
    /// The launcher let everyone go (all ranks finished).
    released: AtomicBool,
    rank: u32,
    /// Raised (by a signal handler, say) to end the application's waits
    /// with [`RuntimeError::Interrupted`]; see [`Runtime::set_interrupt`].
    interrupt: std::sync::OnceLock<Arc<AtomicBool>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves a usable engine: its state
        // changes are complete per call.
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake_poller(&self) {
        signal(&self.poller_wake);
    }

    fn wake_thread(&self) {
        signal(&self.wake);
    }

    fn report(&self, msg: &ToLauncher) {
        let mut control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        // A launcher that is gone is noticed by the reader.
        let _ = control.send(msg);
    }
}

/// A running process of a job: its engine and the progress thread.
pub struct Runtime {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    size: u32,
    /// The job runs on one host, over loopback.
    loopback: bool,
    /// More of the job's processes run on this host, or on this machine
    /// (hosts that are its network namespaces), than it has cores.
    shares_cores: bool,
    /// More of the job's processes run on this host than it has cores.
    host_shares_cores: bool,
    finished: AtomicBool,
}

impl Runtime {
    /// Joins the job described by the environment.
    pub fn from_env() -> Result<Runtime, RuntimeError> {
        Runtime::start(JobEnv::from_env()?)
    }

    pub fn start(env: JobEnv) -> Result<Runtime, RuntimeError> {
        if std::env::var_os("BULKWIRE_PARENT_DEATH").is_some_and(|v| v == "kill") {
            die_with_parent()?;
        }
        crate::malloc::keep_freed_memory()?;
        let (mut control, ip) = Control::connect(&env)?;
        let options = SocketOptions::from_env()?;
        crate::sockets::mark_control(&control.writer, &options);
        let sockets = PathSockets::bind(ip, &options)?;
        let (ordinary, premium) = sockets.addrs()?;
        // Loopback carries the largest datagrams (one system call moves
        // 64 KB); elsewhere a datagram fills one frame of the job's
        // interface: 1472 bytes on Ethernet, more on a jumbo-frame network.
        let mut max_datagram = if ip.is_loopback() {
            LOOPBACK_DATAGRAM
        } else {
            crate::sockets::interface_mtu(ip).map_or(1472, |mtu| datagram_for_mtu(ip, mtu))
        };
        if let Ok(v) = std::env::var("BULKWIRE_MAX_DATAGRAM") {
            max_datagram = v.trim().parse().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("BULKWIRE_MAX_DATAGRAM={v:?}: not a number"))
            })?;
        }
        // The shared-memory file exists before the launcher hears of this
        // process, so every peer finds it once the table has come.
        let shm_options = ShmOptions::from_lookup(|name| std::env::var(name).ok(), env.local_size)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        // Settings that the shared-memory file system can hold.
        let fitted = shm_options.as_ref().map(|o| {
            let free = crate::shm::free_bytes().map_err(|e| format!("/dev/shm: {e}"))?;
            let fitted = o.fit(free, env.local_size)?;
            if env.rank == 0 && (fitted.ring, fitted.arena) != (o.ring, o.arena) {
                say(&format!(
                    "bulkwire: /dev/shm has {} free: rings of {} KiB{} for the {} processes of a host",
                    crate::shm::bytes(free),
                    fitted.ring >> 10,
                    if fitted.arena == 0 { " and no arena" } else { "" },
                    env.local_size
                ));
            }
            Ok::<_, String>(fitted)
        });
        let mut shm = match fitted.map(|o| o.and_then(|o| Shm::create(env.job, env.rank, env.size, &o))) {
            None => None,
            Some(Ok(shm)) => Some(shm),
            Some(Err(why)) => {
                say(&format!(
                    "bulkwire: rank {}: no shared-memory path ({why}): peers on this host over UDP",
                    env.rank
                ));
                None
            }
        };
        control.send(&ToLauncher::Hello {
            job: env.job,
            rank: env.rank,
            size: env.size,
            pid: std::process::id(),
            ordinary,
            premium,
            max_datagram,
            kernel: crate::env::kernel_id(),
            wire: bulkwire_wire::VERSION,
        })?;
        let (peers, on_kernel) = match control.recv()? {
            Some(ToRank::Table { job, peers, max_datagram: everyone, kernels })
                if job == env.job && peers.len() == env.size as usize =>
            {
                // The whole job sends datagrams every rank's link carries:
                // a jumbo-frame host must not send frames a peer's cannot.
                if everyone > 0 {
                    max_datagram = max_datagram.min(everyone);
                }
                (peers, kernels.get(env.rank as usize).copied().unwrap_or(1))
            }
            Some(ToRank::Abort { reason }) => return Err(RuntimeError::Stopped(reason)),
            other => return Err(RuntimeError::Rendezvous(format!("unexpected answer from the launcher: {other:?}"))),
        };

        if let Some(shm) = shm.as_mut() {
            let ordinary: Vec<SocketAddr> = peers.iter().map(|p| p.0).collect();
            shm.attach(env.job, &ordinary);
            if shm.local_peers().is_empty() {
                shm.unlink();
            }
        }
        // Every socket of the job on loopback: the job runs on this host.
        let loopback = peers.iter().all(|(o, p)| o.ip().is_loopback() && p.ip().is_loopback());
        let coverage = mac_coverage(loopback)?;
        let key = env.key.clone().covering(coverage);
        let mut config = endpoint_config(
            env.job,
            key,
            env.rank,
            env.size,
            max_datagram,
            sockets.recv_buffer_bytes()?,
            ip.is_loopback(),
        );
        // The premium path is distinct where its datagrams leave the host
        // marked, or by an interface of their own.
        let distinct = !loopback
            && sockets.premium_unavailable.is_none()
            && (sockets.premium_elsewhere || options.premium_dscp != 0);
        let mut paths = Paths::from_lookup(|name| std::env::var(name).ok(), distinct)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        if let (Some(why), false) = (&sockets.premium_unavailable, paths == Paths::Ordinary) {
            // Said once per process, and the job goes on as best effort.
            say(&format!(
                "bulkwire: rank {}: the premium path is not available ({why}): data stays on the ordinary path",
                env.rank
            ));
            paths = Paths::Ordinary;
        }
        paths.apply(&mut config);
        let lookup = |name: &str| std::env::var(name).ok();
        let interface_bits = match loopback {
            true => None,
            false => crate::sockets::interface_of(ip).and_then(|name| rate::interface_speed(&name)),
        };
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        config.rate_control = rate::from_lookup(lookup, interface_bits).map_err(invalid)?;
        let rate_control = match &config.rate_control {
            Some(c) => c.clone(),
            None => rate::control(&lookup, interface_bits).map_err(invalid)?,
        };
        let verbose = std::env::var("BULKWIRE_VERBOSE").is_ok_and(|v| !v.is_empty() && v != "0");
        if verbose {
            let how = match &shm {
                Some(shm) => format!(
                    "shared memory to {} of {} peers ({} KiB rings, large messages {})",
                    shm.local_peers().len(),
                    env.size.saturating_sub(1),
                    shm.ring_bytes() >> 10,
                    if shm.local_peers().iter().all(|&r| shm.single_copy_from(r)) {
                        "read in one copy"
                    } else {
                        "through the rings"
                    }
                ),
                None => "no shared memory; every peer over UDP".to_string(),
            };
            say(&format!("bulkwire: rank {}: {how}", env.rank));
            let offload = match (sockets.segmentation, sockets.coalescing) {
                (true, true) => "segmented sends and coalesced reads (UDP GSO and GRO)",
                (true, false) => "segmented sends (UDP GSO), no coalesced reads",
                (false, true) => "coalesced reads (UDP GRO), no segmented sends",
                (false, false) => "no segmentation offload",
            };
            say(&format!("bulkwire: rank {}: UDP datagrams of up to {} B, {offload}", env.rank, config.max_datagram));
        }
        if verbose && env.rank == 0 {
            eprintln!("bulkwire: {}", paths.describe());
            eprintln!("bulkwire: {}", rate::describe(config.rate_control.as_ref()));
        }
        let mut endpoint = Endpoint::new(config)?;
        for peer in (0..env.size).filter(|&p| p != env.rank) {
            endpoint
                .set_strategy(peer, BEST_EFFORT_CHANNEL, Strategy::BestEffort)
                .map_err(|e| io::Error::other(format!("best-effort channel: {e}")))?;
        }
        let max_datagram = endpoint.config().max_datagram;

        let wake = eventfd()?;
        let poller_wake = eventfd()?;
        control.reader.get_ref().set_read_timeout(Some(Duration::from_secs(1)))?;
        let (segmentation, coalescing) = (sockets.segmentation, sockets.coalescing);
        let direct_read = std::env::var("BULKWIRE_DIRECT_READ").ok();
        let direct_read = crate::env::switch("BULKWIRE_DIRECT_READ", direct_read.as_deref(), true)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        if coalescing && direct_read {
            // A run the kernel coalesced fills one buffer of a read.
            endpoint.read_runs(Some(RecvBatch::ROOM));
        }
        let udp_lend = std::env::var(UDP_LEND).ok();
        let udp_lend = crate::env::switch(UDP_LEND, udp_lend.as_deref(), true)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        let rx_stamps = std::env::var("BULKWIRE_RX_STAMPS").ok();
        let rx_stamps = match crate::env::switch("BULKWIRE_RX_STAMPS", rx_stamps.as_deref(), true) {
            Ok(true) => Stamps::Wanted,
            Ok(false) => Stamps::Off,
            Err(why) => return Err(io::Error::new(io::ErrorKind::InvalidInput, why).into()),
        };
        // Spinning pays only when every process of the job here has a core:
        // of this host's, and of this kernel's where hosts are network
        // namespaces of one machine (a test bed, containers). Measured on 8
        // test-bed hosts over 2 cores (`bench --hosts … total-exchange -n 8`,
        // in turns with spinning ranks): an empty sync 266-289 us against
        // 323-440 (BSPlib's barrier the dissemination in both); the
        // exchanges of 16 KiB a pair not clearly faster (1.25-2.36 ms in
        // ten runs against 1.49-2.22 in four).
        let cores = crate::env::host_cores();
        let host_shares_cores = env.local_size > cores;
        let kernel_cores = crate::env::kernel_cores();
        let shares_cores = host_shares_cores || on_kernel > kernel_cores;
        if shares_cores && !host_shares_cores && verbose && env.rank == 0 {
            say(&format!(
                "bulkwire: {on_kernel} processes of the job share this machine's {kernel_cores} cores (hosts are network namespaces of it): waits yield"
            ));
        }
        let engine = Engine {
            endpoint,
            sockets,
            peers,
            start: Instant::now(),
            rx: {
                let mut rx = RecvBatch::new(RECV_BATCH);
                rx.set_coalescing(coalescing);
                rx
            },
            tx: send_batch(max_datagram, segmentation),
            hot: Path::Ordinary,
            warm_reads: 0,
            inbox: VecDeque::new(),
            inbox_bytes: 0,
            finished: vec![false; env.size as usize],
            coalesced: vec![0; env.size as usize],
            direct_read,
            rx_stamps,
            failure: None,
            loss: LossInjector::from_env(env.rank)?,
            wake_at: None,
            verbose,
            rate_control,
            hooks: Vec::new(),
            all_shm: shm.as_ref().is_some_and(Shm::all_local) && env.size > 1,
            quiet_turns: 0,
            quiet_mask: if shares_cores { QUIET_TURNS_SHARED - 1 } else { QUIET_TURNS - 1 },
            udp_lend,
            sent_then_copied: 0,
            udp_loans: 0,
            shm,
            deferral: None,
            dest: None,
            placing: None,
        };
        let spin = match std::env::var("BULKWIRE_SPIN_US").ok().and_then(|v| v.trim().parse().ok()) {
            Some(us) => Duration::from_micros(us),
            None if !shares_cores => Duration::from_micros(250),
            None => Duration::ZERO,
        };
        let inner = Arc::new(Inner {
            engine: Mutex::new(engine),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            spinning: AtomicU32::new(0),
            collective: AtomicBool::new(false),
            app_polls: AtomicBool::new(false),
            polls_to_limit: AtomicU64::new(0),
            wakeups_missed: AtomicU64::new(0),
            blocked: AtomicU32::new(0),
            spin,
            calls_left: AtomicU64::new(0),
            thread_wakes_at: AtomicU64::new(0),
            wake,
            poller_wake,
            control: Mutex::new(control),
            released: AtomicBool::new(false),
            rank: env.rank,
            interrupt: std::sync::OnceLock::new(),
        });
        let thread_inner = inner.clone();
        let thread = std::thread::Builder::new()
            .name("bulkwire-progress".into())
            .spawn(move || progress_thread(&thread_inner))?;
        let heartbeat_inner = inner.clone();
        let heartbeat = std::thread::Builder::new()
            .name("bulkwire-heartbeat".into())
            .spawn(move || heartbeat_thread(&heartbeat_inner))?;
        Ok(Runtime {
            inner,
            thread: Mutex::new(Some(thread)),
            heartbeat: Mutex::new(Some(heartbeat)),
            size: env.size,
            loopback,
            shares_cores,
            host_shares_cores,
            finished: AtomicBool::new(false),
        })
    }

    /// Whether the job runs on one host, over loopback (every socket in the
    /// peer table is): no link nor switch port lies between its processes.
    pub fn on_loopback(&self) -> bool {
        self.loopback
    }

    /// Makes every wait of the application end with
    /// [`RuntimeError::Interrupted`] while `flag` is raised: a signal handler
    /// that raises it (Ctrl-C in an interpreter, say) then interrupts a
    /// blocked receive within [`POLL_AT_MOST`]. The flag is the caller's to
    /// lower. Only the first flag given counts.
    pub fn set_interrupt(&self, flag: Arc<AtomicBool>) {
        let _ = self.inner.interrupt.set(flag);
    }

    fn check(&self, e: &Engine, interruptible: bool) -> Result<(), RuntimeError> {
        check(e)?;
        match self.inner.interrupt.get().filter(|_| interruptible) {
            Some(flag) if flag.load(Ordering::Relaxed) => Err(RuntimeError::Interrupted),
            _ => Ok(()),
        }
    }

    /// Adds work that the progress thread does for a layer above while the
    /// application is away from the library, and that the application's
    /// waits do whenever something arrives (a layer's hook holds its state
    /// weakly, and returns false once the layer is gone: then it is dropped).
    pub fn add_progress_hook(&self, hook: ProgressHook) {
        self.inner.lock().hooks.push(hook);
    }

    /// How this process reaches `peer`: through shared memory (a peer on
    /// this host, unless `BULKWIRE_SHM=0`) or over UDP.
    pub fn transport(&self, peer: u32) -> crate::Transport {
        self.inner.lock().transport(peer)
    }

    /// How many times an application thread, blocked in poll(2) on the
    /// sockets, slept to its limit (20 ms) with nothing ready. A wait for
    /// something that comes through shared memory is woken by an empty
    /// datagram from its writer, or by the progress thread where that
    /// thread read the datagram first: a wake-up lost shows here, as a
    /// sleep to the limit.
    pub fn polls_to_limit(&self) -> u64 {
        self.inner.polls_to_limit.load(Ordering::Relaxed)
    }

    /// Of [`Runtime::polls_to_limit`], those that slept on though a peer on
    /// this host had written to this process or posted on the board what
    /// it waited for ([`Shm::missed_wakeup`]): a wake-up lost. A peer kept
    /// from running (the machine's cores busy elsewhere) makes a sleep to
    /// the limit, not a missed wake-up, unless it is kept between its post
    /// and the wake-up it sends.
    pub fn wakeups_missed(&self) -> u64 {
        self.inner.wakeups_missed.load(Ordering::Relaxed)
    }

    /// Buffers this process took fresh from the allocator to read
    /// datagrams into, beyond its first batch's: each is new pages for
    /// the kernel to fault in. Those of a BSP superstep's streams are kept
    /// for the next superstep's ([`Engine::recycle_many`]), so a second
    /// superstep like the first makes none.
    pub fn receive_buffers_made(&self) -> u64 {
        self.inner.lock().rx.made()
    }

    /// Whether more of the job's processes run on this host than it has
    /// cores, or on this machine than it has (where hosts are network
    /// namespaces of one machine): then a process waits for a core before
    /// it can pass a message on, and each hop of a relay costs a
    /// scheduling delay.
    pub fn shares_cores(&self) -> bool {
        self.shares_cores
    }

    /// Whether more of the job's processes run on this host than it has
    /// cores: they share cores and nothing but memory lies between them
    /// (not the network namespaces of one machine, whose links may be
    /// what limits the job).
    pub fn host_shares_cores(&self) -> bool {
        self.host_shares_cores
    }

    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The endpoint's counters: packets, retransmissions, rejected datagrams.
    pub fn stats(&self) -> bulkwire_proto::EndpointStats {
        self.inner.lock().endpoint.stats()
    }

    /// What this process sent through shared memory so far, all peers
    /// together.
    pub fn shm_stats(&self) -> crate::ShmStats {
        let e = self.inner.lock();
        let mut total = crate::ShmStats::default();
        for s in e.shm.as_ref().map_or(&[][..], |s| &s.stats[..]) {
            total.messages_sent += s.messages_sent;
            total.bytes_sent += s.bytes_sent;
            total.single_copy += s.single_copy;
            total.lent += s.lent;
            total.read_in_place += s.read_in_place;
            total.shared_copies += s.shared_copies;
            total.wakeups_sent += s.wakeups_sent;
            total.arena_read_bytes += s.arena_read_bytes;
            total.stage_read_bytes += s.stage_read_bytes;
        }
        total
    }

    /// This rank's traffic to every other rank so far (see [`PeerReport`]).
    pub fn peer_reports(&self) -> Vec<PeerReport> {
        let e = self.inner.lock();
        let cfg = e.endpoint.config();
        (0..cfg.ranks)
            .filter(|&peer| peer != cfg.rank)
            .map(|peer| {
                let mut c = bulkwire_proto::ChannelStats::default();
                for channel in 0..cfg.channels {
                    c.add(&e.endpoint.channel_stats(peer, channel).unwrap_or_default());
                }
                let l = e.endpoint.latency_stats(peer).unwrap_or_default();
                let r = e.endpoint.rate_stats(peer).unwrap_or_default();
                let m = e.shm.as_ref().map_or_else(Default::default, |s| s.stats[peer as usize]);
                PeerReport {
                    peer,
                    ordinary_data_packets: c.ordinary.data.packets,
                    ordinary_data_bytes: c.ordinary.data.bytes,
                    premium_data_packets: c.premium.data.packets,
                    premium_data_bytes: c.premium.data.bytes,
                    ordinary_control_bytes: c.ordinary.control.bytes,
                    premium_control_bytes: c.premium.control.bytes,
                    retransmitted_packets: c.retransmissions,
                    explicit_acks: c.explicit_acks_sent,
                    prods: c.prods_sent,
                    lstats: c.lstats_sent,
                    switches_to_premium: l.switches_to_high,
                    switches_to_ordinary: l.switches_to_low,
                    probes_sent: l.probes_sent,
                    probes_lost: l.probes_lost,
                    confirmations: l.confirmations,
                    clock_exchanges: l.clock_requests,
                    ack_bytes: c.feedback.acks,
                    prod_bytes: c.feedback.prods,
                    lstat_bytes: c.feedback.lstats,
                    probe_bytes: l.feedback.probes,
                    clock_sync_bytes: l.feedback.clock_sync,
                    warp_bytes: c.feedback.warp,
                    warp_feedback_received: r.feedback_received,
                    paced: r.paced,
                    shm_messages: m.messages_sent,
                    shm_bytes: m.bytes_sent,
                    shm_single_copy: m.single_copy,
                    shm_wakeups: m.wakeups_sent,
                    shm_arena_read_bytes: m.arena_read_bytes,
                    shm_stage_read_bytes: m.stage_read_bytes,
                    offload_sent: e.tx.segmented(peer),
                    offload_received: e.coalesced.get(peer as usize).copied().unwrap_or(0),
                    read_in_place: c.read_in_place,
                    placed: c.placed,
                    best_effort_lost: c.skipped,
                    best_effort_abandoned: c.messages_abandoned,
                }
            })
            .collect()
    }

    /// Puts what this process sends to `peer` under Warp rate control with
    /// the job's parameters (`BULKWIRE_WARP_CAPACITY`, [`crate::rate`]), or
    /// takes it out. A job started with `BULKWIRE_RATE_CONTROL=warp` has
    /// every peer under control from the start.
    pub fn set_rate_control(&self, peer: u32, on: bool) {
        let control = self.rate_control();
        self.set_rate_control_with(peer, on.then_some(&control));
    }

    /// [`Runtime::set_rate_control`] with parameters of the caller's.
    pub fn set_rate_control_with(&self, peer: u32, control: Option<&RateControl>) {
        let mut e = self.inner.lock();
        e.endpoint.set_rate_control(peer, control);
        self.kick(&e);
    }

    /// Which paths carry this process's data: `ordinary`, `premium` or
    /// `adaptive` (as `BULKWIRE_PATHS` names them).
    pub fn paths_name(&self) -> &'static str {
        let e = self.inner.lock();
        let cfg = e.endpoint.config();
        match (cfg.premium_only, cfg.latency.is_some()) {
            (true, _) => "premium",
            (false, true) => "adaptive",
            (false, false) => "ordinary",
        }
    }

    /// The job's Warp parameters (what [`Runtime::set_rate_control`] uses).
    pub fn rate_control(&self) -> RateControl {
        self.inner.lock().rate_control.clone()
    }

    /// Warp rate control toward `peer`: the pacer's rate and the feedback
    /// exchanged; `None` while nothing of it has happened.
    pub fn rate_stats(&self, peer: u32) -> Option<bulkwire_proto::RateStats> {
        self.inner.lock().endpoint.rate_stats(peer)
    }

    /// The latency engines' counters toward `peer` (adaptive paths only):
    /// probes, samples, decisions, switches each way.
    pub fn latency_stats(&self, peer: u32) -> Option<bulkwire_proto::LatencyStats> {
        self.inner.lock().endpoint.latency_stats(peer)
    }

    /// The addresses of `rank`'s sockets.
    pub fn peer_addrs(&self, rank: u32) -> Option<(SocketAddr, SocketAddr)> {
        self.inner.lock().peer_addrs(rank)
    }

    /// What the MACs of this job's datagrams cover (the header alone on
    /// loopback, see [`Coverage::Header`]).
    pub fn mac_coverage(&self) -> Coverage {
        self.inner.lock().endpoint.config().key.coverage()
    }

    /// The largest datagram this process sends (chosen from the interface's MTU).
    pub fn max_datagram(&self) -> usize {
        self.inner.lock().endpoint.config().max_datagram
    }

    /// Seconds since this process joined the job.
    pub fn elapsed(&self) -> Duration {
        self.inner.lock().start.elapsed()
    }

    /// [`Runtime::with`] for work that sends nothing (a read of a peer's
    /// arena): no flush after it, which looks at every local peer's queue.
    pub fn with_no_send<R>(&self, f: impl FnOnce(&mut Engine) -> Result<R, RuntimeError>) -> Result<R, RuntimeError> {
        let mut e = self.inner.lock();
        check(&e)?;
        f(&mut e)
    }

    /// Works on the engine once, then sends what that made ready. Reading
    /// the sockets is left to waits and to the progress thread: a send
    /// should cost one system call, not five.
    pub fn with<R>(&self, f: impl FnOnce(&mut Engine) -> Result<R, RuntimeError>) -> Result<R, RuntimeError> {
        cycles::mark(Point::SendCalled);
        let mut e = self.inner.lock();
        check(&e)?;
        let result = f(&mut e);
        e.flush();
        self.kick(&e);
        result
    }

    /// [`Engine::end_deferral`], whatever state the job is in (a receive's
    /// buffer must be the receive's again once it returns).
    pub fn end_deferral(&self) {
        self.inner.lock().end_deferral();
    }

    /// [`Engine::unaim`], whatever state the job is in (the region must be
    /// the caller's again once it returns).
    pub fn unaim(&self) {
        self.inner.lock().unaim();
    }

    /// [`Engine::release_loans`], whatever state the job is in (a lender's
    /// memory must be its own again once its wait returns).
    pub fn release_loans(&self, loans: &[Loan]) {
        self.inner.lock().release_loans(loans);
    }

    /// Waits until `f` returns `Some`: first spinning on the sockets, then
    /// sleeping while the progress thread works.
    pub fn wait<R>(&self, f: impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>) -> Result<R, RuntimeError> {
        self.wait_spinning(self.inner.spin, false, false, true, f)
    }

    /// [`Runtime::wait`] that the flag of [`Runtime::set_interrupt`] does
    /// not end: for a wait that must not leave before `f` says so, as a
    /// send whose reader is still to read the caller's memory (only a stop
    /// of the job ends it otherwise). Where the wait spins at all (every
    /// process of the job here has a core), it spins for `spin` at least
    /// (at most 10 ms), the time the work it waits for is
    /// expected to take ([`Loan::read_time`]).
    pub fn wait_uninterruptible<R>(
        &self,
        spin: Duration,
        f: impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
    ) -> Result<R, RuntimeError> {
        let spin = match self.inner.spin.is_zero() {
            true => Duration::ZERO,
            false => self.inner.spin.max(spin.min(LONGEST_SPIN)),
        };
        self.wait_spinning(spin, false, false, false, f)
    }

    /// [`Runtime::wait`] for a collective operation, in which every process
    /// is expected soon: it spins (yielding) a while even when the
    /// processes share cores, where a plain wait would block at once.
    pub fn wait_collective<R>(
        &self,
        f: impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
    ) -> Result<R, RuntimeError> {
        self.wait_spinning(self.inner.spin.max(COLLECTIVE_SPIN), true, false, true, f)
    }

    /// [`Runtime::wait_collective`] for a layer whose messages come on both
    /// paths at once (groups: a control plane on the premium path beside
    /// data on the ordinary one): both sockets are read at every turn of
    /// the spin, where a plain wait reads the other path at every 4th to
    /// 16th turn (measured, when that was every 4th, with `bench bcast -n
    /// 8`, 8 B, 8 processes on 2 cores, six alternating pairs: median 64
    /// against 206 us flat, 150 against 205 us binomial, 235 against 304 us
    /// by chain).
    pub fn wait_both_paths<R>(
        &self,
        f: impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
    ) -> Result<R, RuntimeError> {
        self.wait_spinning(self.inner.spin.max(COLLECTIVE_SPIN), true, true, true, f)
    }

    fn wait_spinning<R>(
        &self,
        spin: Duration,
        collective: bool,
        both_paths: bool,
        interruptible: bool,
        mut f: impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
    ) -> Result<R, RuntimeError> {
        // Read at the first check, not here: most waits through shared
        // memory end before it, and need not read the clock at all.
        let mut spin_until = None;
        self.inner.collective.store(collective, Ordering::SeqCst);
        self.inner.spinning.fetch_add(1, Ordering::SeqCst);
        let mut round = 0u32;
        let spun = loop {
            let mut e = self.inner.lock();
            if let Err(err) = self.check(&e, interruptible) {
                break Err(err);
            }
            // What is already in the inbox is older than anything a turn
            // would bring: a wait that finds it there takes it without one
            // (a receive in a stream of small messages, which the last turn
            // moved to the inbox by the dozen).
            if round == 0 && !e.inbox.is_empty() {
                match self.step(&mut e, &mut f) {
                    Ok(Some(r)) => break Ok(Some(r)),
                    Ok(None) => {}
                    Err(err) => break Err(err),
                }
            }
            if e.progress_spinning(round, both_paths) {
                e.run_hook();
                // Something came or went: the spin lasts `spin` from the
                // last turn that moved anything, so that a wait does not
                // fall asleep while its peer is busy with this process's
                // traffic (taking in a message this process sent, then
                // sending the answer, acknowledgements coming all the
                // while), to be woken by the answer's first datagram. Not
                // where processes share cores: there the spin is what others
                // need the core for.
                if !self.shares_cores {
                    spin_until = None;
                }
            }
            round = round.wrapping_add(1);
            match self.step(&mut e, &mut f) {
                Ok(Some(r)) => break Ok(Some(r)),
                Ok(None) => {}
                Err(err) => break Err(err),
            }
            drop(e);
            // The clock at every eighth turn of a spin, which lasts hundreds
            // of turns (at every turn where there is no spin).
            if round.is_multiple_of(8) || spin.is_zero() {
                let now = Instant::now();
                if now >= *spin_until.get_or_insert(now + spin) {
                    break Ok(None);
                }
            }
            // The awaited message may need a thread that waits for this core
            // (the peer, a progress thread, anyone when the cores are shared):
            // let it run. With nobody waiting, a yield costs one system call.
            // Spinning without it, round trips fell into a mode of one spin
            // time each whenever the cores were shared (64 KiB half round
            // trip 56 -> 300 us; 8 B 3 -> 270 us); yielding only after 20 us
            // made that mode 20 us. A process with a core of its own yields
            // at every 16th turn only (to its progress thread, or to other
            // work on the machine): a yield is most of a turn's cost through
            // shared memory, and under load it hands the core away for a
            // time slice (500,000 round trips of 8 B, two bound ranks, the
            // machine otherwise busy, paired runs: 1.24 s yielding at every
            // turn, 0.70 s at every 16th).
            if self.shares_cores || round.is_multiple_of(16) {
                std::thread::yield_now();
            }
        };
        self.inner.spinning.fetch_sub(1, Ordering::SeqCst);
        if let Some(r) = spun? {
            return Ok(r);
        }
        // One waiting thread blocks in poll(2) on the sockets itself: a
        // datagram then wakes one thread, not the progress thread and then
        // this one (measured: about 27 us against 2.4 us of blocking UDP per
        // half round trip when ranks share a core).
        if self.inner.app_polls.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let result = self.wait_polling(&mut f, interruptible);
            self.inner.app_polls.store(false, Ordering::SeqCst);
            return result;
        }
        // From here on the progress thread does the reading: tell it so
        // before waking it, or it would take us for about to spin again.
        self.inner.blocked.fetch_add(1, Ordering::SeqCst);
        self.inner.wake_thread();
        let result = self.wait_blocking(&mut f, interruptible);
        self.inner.blocked.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn wait_polling<R>(
        &self,
        f: &mut impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
        interruptible: bool,
    ) -> Result<R, RuntimeError> {
        loop {
            let (fds, timeout) = {
                let mut e = self.inner.lock();
                self.check(&e, interruptible)?;
                if e.progress() {
                    e.run_hook();
                }
                // Other threads of the application may wait on what arrived.
                self.inner.changed.notify_all();
                if let Some(r) = self.step(&mut e, f)? {
                    return Ok(r);
                }
                let now = e.now();
                // Timers are this thread's too; and a stop ordered by the
                // launcher (read by the progress thread) is seen within
                // POLL_AT_MOST.
                let timeout = e.endpoint.poll_timeout().map_or(POLL_AT_MOST, |t| t.since(now)).min(POLL_AT_MOST);
                let timeout = e.wake_at.map_or(timeout, |t| timeout.min(t.since(now)));
                (e.fds(), timeout)
            };
            if !self.inner.lock().may_sleep(Sleeper::Poller) {
                continue;
            }
            let mut polls = [
                libc::pollfd { fd: fds[0], events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: fds[1], events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.inner.poller_wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            let to_limit = poll_fds(&mut polls, timeout) == 0 && timeout == POLL_AT_MOST;
            drain(&self.inner.poller_wake, polls[2].revents);
            let e = self.inner.lock();
            if to_limit {
                self.inner.polls_to_limit.fetch_add(1, Ordering::Relaxed);
                if e.shm.as_ref().is_some_and(Shm::missed_wakeup) {
                    self.inner.wakeups_missed.fetch_add(1, Ordering::Relaxed);
                }
            }
            e.awake(Sleeper::Poller);
        }
    }

    fn wait_blocking<R>(
        &self,
        f: &mut impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
        interruptible: bool,
    ) -> Result<R, RuntimeError> {
        let mut e = self.inner.lock();
        loop {
            self.check(&e, interruptible)?;
            if let Some(r) = self.step(&mut e, f)? {
                return Ok(r);
            }
            let now = e.now();
            let timeout = e.wake_at.map_or(POLL_AT_MOST, |t| t.since(now).min(POLL_AT_MOST));
            e = self.inner.changed.wait_timeout(e, timeout).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// One try of a wait's `f`. What it queued goes out at once, whether or
    /// not the wait is over (not after the next yield or sleep); a wait
    /// that is over leaves the call.
    fn step<R>(
        &self,
        e: &mut Engine,
        f: &mut impl FnMut(&mut Engine) -> Result<Option<R>, RuntimeError>,
    ) -> Result<Option<R>, RuntimeError> {
        e.wake_at = None;
        let result = f(e)?;
        if result.is_some() {
            cycles::mark(Point::Matched);
        }
        e.flush();
        if result.is_some() {
            self.kick(e);
        }
        Ok(result)
    }

    /// Called as the application leaves a call: counts it, and wakes the
    /// progress thread if the engine now wants attention before the thread
    /// would wake by itself.
    fn kick(&self, e: &Engine) {
        self.inner.calls_left.fetch_add(1, Ordering::Relaxed);
        let wanted = e.endpoint.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        if wanted < self.inner.thread_wakes_at.load(Ordering::SeqCst) {
            self.inner.wake_thread();
        }
    }

    /// Reports a failure of this process to the launcher, which stops the job.
    pub fn fail(&self, reason: &str) {
        self.inner.report(&ToLauncher::Failed { reason: reason.to_string() });
    }

    /// Leaves the job cleanly: waits until everything this process sent has
    /// been acknowledged, tells the launcher, and keeps answering peers until
    /// every rank has finished. Later calls do nothing, so a runtime shared
    /// by reference can be finished through it; one dropped unfinished
    /// finishes this way.
    pub fn finish(&self) -> Result<(), RuntimeError> {
        if self.finished.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Before the calls that leave the job make marks of their own.
        if let Some(summary) = cycles::report() {
            eprintln!(
                "bulkwire: rank {}: {}",
                self.inner.rank,
                summary.replace('\n', &format!("\nbulkwire: rank {}: ", self.inner.rank))
            );
        }
        // What peers have not acknowledged yet they are asked to now, rather
        // than at the next timeout (long on a channel whose receivers drive
        // recovery).
        self.with(|e| {
            e.endpoint.request_acknowledgements();
            Ok(())
        })?;
        self.wait(|e| Ok(e.is_idle().then_some(())))?;
        if std::env::var("BULKWIRE_STATS").is_ok_and(|v| !v.is_empty() && v != "0") {
            let peers = self.peer_reports();
            self.inner.report(&ToLauncher::Stats { peers });
        }
        self.inner.report(&ToLauncher::Finished);
        while !self.inner.released.load(Ordering::SeqCst) {
            let e = self.inner.lock();
            self.check(&e, true)?;
            drop(self.inner.changed.wait_timeout(e, Duration::from_millis(20)).unwrap_or_else(|p| p.into_inner()));
        }
        self.shutdown();
        Ok(())
    }

    fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake_thread();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        let heartbeat = self.heartbeat.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = heartbeat {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.finished.swap(true, Ordering::SeqCst) {
            // A panic is a failure of this rank, not its end: stop the job.
            self.inner.report(&ToLauncher::Failed { reason: "the program panicked".into() });
        }
        if !self.finished.load(Ordering::SeqCst) {
            if let Err(e) = self.finish() {
                eprintln!("bulkwire: rank {}: {e}", self.inner.rank);
            }
        }
        self.shutdown();
    }
}

/// Asks the kernel to kill this process when its parent ends. A rank
/// started over ssh is the child of the ssh server's session, which ends
/// when the launcher's ssh client is killed: the rank must not outlive it,
/// even stopped or hung.
fn die_with_parent() -> Result<(), RuntimeError> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid has no preconditions.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    // The parent may have ended before the request: then we were adopted.
    if unsafe { libc::getppid() } == 1 {
        return Err(RuntimeError::Stopped("the process that started this rank is gone".into()));
    }
    Ok(())
}

/// What datagram MACs cover: the header alone when every socket of the job
/// is on loopback (`all_loopback`; see [`Coverage::Header`] for why that is
/// safe), unless `BULKWIRE_MAC_COVERAGE=datagram` asks for the whole
/// datagram. Every rank decides alike from the same peer table and
/// environment.
fn mac_coverage(all_loopback: bool) -> Result<Coverage, RuntimeError> {
    let setting = std::env::var("BULKWIRE_MAC_COVERAGE").ok();
    match setting.as_deref().map(str::trim) {
        None | Some("" | "auto") => Ok(if all_loopback { Coverage::Header } else { Coverage::Datagram }),
        Some("datagram") => Ok(Coverage::Datagram),
        Some(other) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("BULKWIRE_MAC_COVERAGE={other:?}: expected auto or datagram"),
        )
        .into()),
    }
}

/// Writes `line` to standard error in one piece, so that the lines of the
/// ranks of a job, which share the launcher's standard error, do not mix.
fn say(line: &str) {
    let _ = io::Write::write_all(&mut io::stderr(), format!("{line}\n").as_bytes());
}

/// The largest UDP payload that fits one frame of `mtu` bytes.
fn datagram_for_mtu(ip: std::net::IpAddr, mtu: usize) -> usize {
    let headers = if ip.is_ipv4() { 20 + 8 } else { 40 + 8 };
    // Below the IPv6 minimum MTU something is wrong: stay with Ethernet's size.
    if mtu < 1280 {
        return 1472;
    }
    (mtu - headers).min(LOOPBACK_DATAGRAM)
}

/// Packet buffers for an endpoint whose peers' sockets hold `recv_buffer`
/// bytes (peers are configured alike). Half the buffers are for packets in
/// flight; a sender with more in flight than the receiving socket holds
/// would only overflow it and resend. The kernel reports twice the payload
/// it accepts (the rest is bookkeeping), so half of that is what datagrams
/// may fill.
/// The settings of a job's endpoint, before its paths and rate control:
/// rank `rank` of `size`, datagrams of up to `max_datagram` bytes, its
/// sockets holding `socket_buffer` bytes each (as the kernel reports it),
/// on loopback or not.
pub fn endpoint_config(
    job: u64,
    key: JobKey,
    rank: u32,
    size: u32,
    max_datagram: usize,
    socket_buffer: usize,
    loopback: bool,
) -> Config {
    let mut config = Config::new(job, key, rank, size);
    // 0: comm's messages, 1: comm's collectives, 2: bsp's supersteps,
    // 3: the groups' control plane (premium), 4: the groups' data,
    // 5: the shared memory's writes, 6: best-effort data (the groups'
    // unreliable posts; [`BEST_EFFORT_CHANNEL`]).
    config.channels = 7;
    config.max_message_size = 16 << 20;
    config.send_buffer_bytes = 32 << 20;
    config.recv_buffer_bytes = 32 << 20;
    config.max_datagram = max_datagram;
    config.packet_buffers = packet_buffers(socket_buffer, max_datagram);
    config.initial_rtt = Duration::from_micros(if loopback { 50 } else { 500 });
    config.min_rto = Duration::from_micros(500);
    config
}

fn packet_buffers(recv_buffer: usize, max_datagram: usize) -> usize {
    let in_flight = (recv_buffer / 2 / max_datagram).clamp(4, 512);
    2 * in_flight
}

fn check(e: &Engine) -> Result<(), RuntimeError> {
    match &e.failure {
        Some(reason) => Err(RuntimeError::Stopped(reason.clone())),
        None => Ok(()),
    }
}

/// Blocks in poll(2) while the application does not spin; fires timers,
/// reads the control connection, sends heartbeats, and watches for peers
/// that stopped answering.
fn progress_thread(inner: &Inner) {
    let control_fd = inner.control.lock().map(|c| c.reader.get_ref().as_raw_fd()).unwrap_or(-1);
    // What the launcher sent right behind the peer table (a peer that
    // finished at once) may already wait in the reader's buffer, where
    // poll(2) does not see it.
    if inner.control.lock().is_ok_and(|c| !c.reader.buffer().is_empty()) {
        read_control(inner);
    }
    let mut reported = false;
    // The application's calls as last seen, and when they were seen to
    // move: the application left a call no later than that.
    let (mut calls_seen, mut active_at) = (0u64, None::<Time>);
    while !inner.stop.load(Ordering::SeqCst) {
        // An application thread that spins does all the engine's work
        // (reads, timers, the peers on this host) and needs no help: this
        // thread leaves the engine's lock alone until it stops. Were this
        // thread to take a turn, the spinner would block on the lock for
        // it, and a turn may be long: reading a message of 4 MiB that a
        // peer on this host lent takes hundreds of microseconds.
        if inner.spinning.load(Ordering::SeqCst) > 0
            && inner.blocked.load(Ordering::SeqCst) == 0
            && !inner.app_polls.load(Ordering::SeqCst)
        {
            nap(inner, control_fd, if inner.collective.load(Ordering::SeqCst) { COLLECTIVE_NAP } else { SPIN_NAP });
            continue;
        }
        // With no application thread blocked on this one (asleep on the
        // condition variable or in poll(2)), a turn is only a helper's:
        // where the application holds the engine it is in a call, so busy
        // with the engine itself, and this thread naps again rather than
        // sleep on the lock (a system call of the application's to wake it
        // as it leaves, and on busy cores a context switch). Streaming 16 KiB messages between two
        // test-bed hosts on 2 cores (`bench bw`, eight alternating pairs):
        // 1,062-1,153 MB/s napping, 1,000-1,141 waiting on the lock
        // (0.94-1.03x TCP against 0.84-0.97x); 4 KiB and 64 KiB alike.
        let helping = inner.blocked.load(Ordering::SeqCst) == 0 && !inner.app_polls.load(Ordering::SeqCst);
        let (fds, timeout, nap) = {
            let mut e = match helping {
                true => match inner.engine.try_lock() {
                    Ok(e) => e,
                    // A panic while holding the lock leaves a usable engine
                    // ([`Inner::lock`]).
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => {
                        let collective = inner.collective.load(Ordering::SeqCst);
                        nap(inner, control_fd, if collective { COLLECTIVE_NAP } else { SPIN_NAP });
                        continue;
                    }
                },
                false => inner.lock(),
            };
            // An application thread may poll the sockets meanwhile: it
            // reads them and fires the timers itself, but this thread's
            // turns at every nap still count (4 senders under Warp into one
            // 100 Mbit/s test-bed port: 11.3-11.4 MB/s with them, 8.2-8.8
            // without). What this turn reads, that thread hears of: it
            // sleeps in poll(2) on the sockets, not on the condition
            // variable, and is woken; without the wake-up the message
            // waited for the next datagram (2% of a sparse stream's
            // messages 1.5-4 ms late). Checked under the engine's lock,
            // which the polling thread takes before it looks for its
            // message.
            let app_polls = inner.app_polls.load(Ordering::SeqCst);
            let moved = e.progress();
            // A layer's own progress (groups pass posts on), while the
            // application computes.
            e.run_hook();
            e.flush();
            if app_polls && moved {
                inner.wake_poller();
            }
            let now = e.now();
            let calls = inner.calls_left.load(Ordering::Relaxed);
            if calls != calls_seen {
                (calls_seen, active_at) = (calls, Some(now));
            }
            // A peer over loopback that acknowledges nothing is not cut off
            // by a network: it is stopped, hung or starved of a core (64
            // processes on 2 cores went 4 s without a turn), which the
            // launcher's heartbeats tell apart. Only peers across a network
            // are declared unreachable here.
            if !reported {
                let unreachable = e.endpoint.unresponsive_peers(now, UNREACHABLE_AFTER);
                let across = unreachable.iter().find(|&&peer| !e.peers[peer as usize].0.ip().is_loopback());
                if let Some(peer) = across {
                    reported = true;
                    let reason = format!("rank {peer} is unreachable: nothing acknowledged for {UNREACHABLE_AFTER:?}");
                    inner.report(&ToLauncher::Failed { reason });
                }
            }
            let timeout = e.endpoint.poll_timeout().map_or(IDLE_WAKE, |t| t.since(now));
            // While the application spins, or has just left a call and will
            // likely be back to spin, this thread only naps: the application
            // reads the sockets itself, and a send need not wake this thread
            // unless a timer falls due before the nap ends. Waking it costs a
            // system call and, with every core busy spinning, a context switch
            // on the critical path.
            // While an application thread polls the sockets, naps are longer:
            // it reads and fires timers itself, and when it leaves, this
            // thread takes over within a nap without being woken.
            let nap = app_polls
                || inner.blocked.load(Ordering::SeqCst) == 0
                    && (inner.spinning.load(Ordering::SeqCst) > 0
                        || active_at.is_some_and(|at| now.since(at) < inner.spin));
            let nap_length = if app_polls {
                POLL_NAP
            } else if inner.collective.load(Ordering::SeqCst) {
                COLLECTIVE_NAP
            } else {
                SPIN_NAP
            };
            let wake_in = if nap { nap_length } else { IDLE_WAKE };
            inner.thread_wakes_at.store((now + timeout.min(wake_in)).as_nanos(), Ordering::SeqCst);
            (e.fds(), timeout, nap.then_some(nap_length))
        };
        inner.changed.notify_all();
        if let Some(nap) = nap {
            self::nap(inner, control_fd, timeout.min(nap));
            continue;
        }
        // Something came by shared memory since the engine was read: look
        // again at once rather than sleep.
        let wait = if inner.lock().may_sleep(Sleeper::Progress) { timeout.min(IDLE_WAKE) } else { Duration::ZERO };
        let mut polls = [
            libc::pollfd { fd: fds[0], events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: fds[1], events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: inner.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: control_fd, events: libc::POLLIN, revents: 0 },
        ];
        poll_fds(&mut polls, wait);
        inner.lock().awake(Sleeper::Progress);
        drain(&inner.wake, polls[2].revents);
        if polls[3].revents != 0 {
            read_control(inner);
        }
    }
}

/// The progress thread stays out of the application's way (it reads the
/// sockets) for `timeout`, but lets a kick or the launcher end the nap.
fn nap(inner: &Inner, control_fd: libc::c_int, timeout: Duration) {
    let mut polls = [
        libc::pollfd { fd: inner.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: control_fd, events: libc::POLLIN, revents: 0 },
    ];
    poll_fds(&mut polls, timeout);
    drain(&inner.wake, polls[0].revents);
    if polls[1].revents != 0 {
        read_control(inner);
    }
}

/// Tells the launcher every [`HEARTBEAT`] that this process is alive,
/// until the runtime stops. It takes no lock but the control connection's.
fn heartbeat_thread(inner: &Inner) {
    while !inner.stop.load(Ordering::SeqCst) {
        inner.report(&ToLauncher::Heartbeat);
        std::thread::park_timeout(HEARTBEAT);
    }
}

/// poll(2) with a timeout finer than a millisecond.
/// Returns poll(2)'s answer: how many descriptors are ready, 0 when the
/// timeout passed, -1 on an error (an interrupting signal).
fn poll_fds(polls: &mut [libc::pollfd], timeout: Duration) -> i32 {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `polls` is a valid array of pollfd and `timeout` a valid
    // timespec for the duration of the call; a null signal mask keeps ours.
    unsafe { libc::ppoll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, &timeout, std::ptr::null()) }
}

/// A new non-blocking eventfd.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new descriptor that we then own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh, valid descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes `fd`, an eventfd, readable.
fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets `fd`, an eventfd, after poll(2) reported it readable.
fn drain(fd: &OwnedFd, revents: libc::c_short) {
    if revents != 0 {
        let mut count = [0u8; 8];
        // SAFETY: reading 8 bytes into a valid buffer from our eventfd.
        unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
    }
}

/// Handles the messages from the launcher that have arrived, including any
/// the reader already buffered (poll(2) does not see those).
fn read_control(inner: &Inner) {
    loop {
        let (message, more) = {
            let mut control = inner.control.lock().unwrap_or_else(|e| e.into_inner());
            let message = control.recv();
            (message, !control.reader.buffer().is_empty())
        };
        match message {
            Ok(Some(ToRank::Abort { reason })) => stop_now(inner, &reason),
            Ok(Some(ToRank::PeerFinished { rank })) => {
                let mut e = inner.lock();
                if let Some(f) = e.finished.get_mut(rank as usize) {
                    *f = true;
                }
            }
            Ok(Some(ToRank::Release)) => inner.released.store(true, Ordering::SeqCst),
            Ok(Some(ToRank::Table { .. })) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Ok(None) | Err(_) => stop_now(inner, "the launcher is gone"),
        }
        inner.changed.notify_all();
        if !more {
            return;
        }
    }
}

/// Ends this process: the job is over.
fn stop_now(inner: &Inner, reason: &str) -> ! {
    eprintln!("bulkwire: rank {}: job stopped: {reason}", inner.rank);
    std::process::exit(1);
}
