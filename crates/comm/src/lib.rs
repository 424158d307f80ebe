//! Point-to-point communication for SPMD programs started by `bulkwire run`.
//!
//! ```no_run
//! use bulkwire_comm::{Source, Tag, World};
//!
//! fn main() -> Result<(), bulkwire_comm::CommError> {
//!     let world = World::init()?;
//!     let (rank, size) = (world.rank(), world.size());
//!     world.send((rank + 1) % size, 7, b"hello")?;
//!     let (status, data) = world.recv(Source::Any, Tag::Is(7))?;
//!     println!("rank {rank} got {:?} from {}", data, status.source);
//!     world.barrier()?;
//!     world.finalize()
//! }
//! ```
//!
//! Messages are matched by source and tag in the order receives are posted,
//! and between two ranks they are never overtaken (MPI's rules). A send
//! copies its data and completes as soon as the data is queued; but a
//! blocking send of a message at least half as long as the shared-memory
//! ring (1 MiB with two processes on a host, the whole ring with
//! `BULKWIRE_SHM_SPLIT=0`; at least 256 KiB), or of 256 KiB or more
//! where the ring has no room for it now, to a peer on
//! this host that can read this process's memory lends the caller's
//! buffer instead: the peer's runtime reads it from there into the buffer
//! its receive returns, one copy in all, and the send completes once it
//! has (the peer reads what comes whether or not a receive is posted, so
//! two ranks that send to each other before they receive both complete).
//!
//! A message of any length up to [`LARGEST_MESSAGE`] can be sent. One that
//! the runtime carries whole (its largest message less the tag: 16 MiB
//! less 4 bytes) is one runtime message, its tag behind it. A larger one
//! goes by rendezvous on the same channel: the sender announces it (an id,
//! the total length and the tag, no data), and the announcement is
//! matched as a small message would be, in its place among the sender's
//! messages. The receive that matches it allocates the whole message once
//! and clears the sender, which then sends it in pieces, one message after
//! another to each peer (the runtime's channels are first in, first out);
//! the receive copies each piece into place as it comes. So only a message
//! that a receive took sends its data: one that waits to be matched holds
//! 28 bytes of the receiver's inbox, and large messages of several senders
//! to one receiver never fill its inbox with pieces nobody takes. A send
//! of a large message completes once its receiver matched it and its last
//! piece is queued (`send` copies one piece at a time from the caller's
//! data rather than all of it first). Clearances and pieces move on in
//! every wait, test and barrier of this process, and by a progress hook
//! while it computes or waits in another layer; receives are matched by
//! the application's calls.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bulkwire_proto::{SendError, TailFilter};
use bulkwire_runtime::{
    Deferral, Engine, Inbound, Loan, PostKind, ProgressHook, Runtime, RuntimeError, Transport, LEND_FROM,
    STREAM_LEND_FROM,
};

/// Channel of application messages.
const USER: u16 = 0;
/// Channel of the library's own collective traffic, so it never meets the
/// application's receives.
const COLLECTIVE: u16 = 1;
/// Bytes of tag after every application message: at the end, a receive
/// removes it by shortening the message instead of moving all of it.
const TAG_LEN: usize = 4;

/// The longest message a send takes and a receive accepts: 1 TiB. An
/// announcement of more is a broken message, never an allocation.
pub const LARGEST_MESSAGE: usize = 1 << 40;

/// What stands in the place of the tag of the messages this library frames
/// itself (announcements, clearances and pieces of large messages): a
/// message of the application with this tag goes as a large one.
const MARK: i32 = i32::MIN;
/// The trailer of a framed message: id (u64), value (u64), tag (i32), kind
/// (u32), [`MARK`].
const TRAILER: usize = 28;
/// Sender to receiver: a large message (id, total length, tag), no data.
const ANNOUNCE: u32 = 1;
/// Receiver to sender: send the message announced with this id.
const CLEAR: u32 = 2;
/// Sender to receiver: data of a cleared message at an offset.
const PIECE: u32 = 3;
/// Sender to receiver: the message with this id will not come (its send
/// was interrupted, or its process left before it was cleared).
const WITHDRAW: u32 = 4;
/// The data of one piece, at most (less where the runtime's messages are
/// smaller). A message of 2 GiB between two processes of a 2-core host
/// (`a_message_of_2_gib` in `crates/cli/tests/job.rs`, two runs each,
/// shared memory / UDP): pieces of 16 MiB took 1.48-1.61 / 1.81-1.84 s,
/// 4 MiB 1.43-1.46 / 1.70-1.71 s, 2 MiB 1.36-1.38 / 1.44-1.46 s, 1 MiB
/// 1.31-1.45 / 1.43-1.53 s, 256 KiB 1.61-1.69 / 1.68-1.70 s: a piece of a
/// few MiB is still in the cache when the receiver copies it into place.
const PIECE_BYTES: usize = 2 << 20;

/// The shortest buffer of [`World::recv_into`] that messages are put into
/// as they come, rather than copied into once whole: below it the copy
/// costs little (16 KiB: about a microsecond), less than setting that up
/// at every receive (8 B ping-pong through shared memory, three
/// alternating runs: 0.28-0.48 us setting it up for every message,
/// against 0.29-0.34 receiving by `recv`).
const PLACE_FROM: usize = 16 << 10;

/// The shortest message a blocking send to a peer over UDP sends from the
/// caller's slice before copying it ([`Engine::send_then_copy`]): the
/// copy is then off the way to the receiver. The smallest size measured
/// to gain (docs/BENCHMARKS.md, ping-pong over UDP); shorter messages,
/// whose copy takes a few hundred nanoseconds at most, are copied first.
const SEND_THEN_COPY_FROM: usize = 4 << 10;

/// Where a receive accepts messages from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Any,
    Rank(u32),
}

/// Which tags a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Any,
    Is(i32),
}

/// What a receive got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub source: u32,
    pub tag: i32,
    pub len: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("rank {to} does not exist: the job has ranks 0 to {}", .size - 1)]
    NoSuchRank { to: u32, size: u32 },
    #[error("a message of {len} bytes exceeds the largest message ({max} bytes)")]
    TooLarge { len: usize, max: usize },
    #[error("a receive from {from:?} with tag {tag:?} can never be matched: {why}")]
    NeverMatched { from: Source, tag: Tag, why: String },
    /// A message matched by a receive could not be taken: it announced more
    /// than [`LARGEST_MESSAGE`] or more than this process can allocate, its
    /// pieces did not add up, or its sender gave it up.
    #[error("the message from rank {from} could not be received: {why}")]
    Broken { from: u32, why: String },
    /// A large message whose receiver finished without taking it.
    #[error("the message to rank {to} was not received: {why}")]
    NotReceived { to: u32, why: String },
    /// A message longer than the buffer a receive gave: its first bytes are
    /// in the buffer, the rest is lost (`MPI_ERR_TRUNCATE`).
    #[error("a message of {len} bytes from rank {from} does not fit the receive's buffer of {capacity} bytes")]
    Truncated { from: u32, len: usize, capacity: usize },
    #[error("request was already completed")]
    Completed,
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// The most ranks for which [`World::barrier`] meets on the board where
/// every rank is on this host (set from measurement, see the scale figures
/// in docs/BENCHMARKS.md).
pub const BOARD_BARRIER_MAX: u32 = 64;

/// A non-blocking send that borrows its data until it completes, as
/// `MPI_Isend` does ([`World::isend_borrowed`]). Complete it with
/// [`BorrowedSend::wait`], [`BorrowedSend::test`] or
/// [`World::wait_borrowed`]; dropping it waits for it (errors then go
/// unreported). Leaking it (`std::mem::forget`) ends the borrow early: the
/// peer then receives whatever the memory holds when it reads it, or the
/// job stops if that memory is gone.
#[must_use = "the data stays borrowed until the send completes"]
pub struct BorrowedSend<'a> {
    world: &'a World,
    /// `None` once complete.
    how: Option<Borrowed>,
}

#[derive(Debug)]
enum Borrowed {
    /// Lent to a peer on this host, which reads it from the caller's data.
    Lent(Loan),
    /// Sent as [`World::isend`] sends (copied where it had to be).
    Copied(Request),
}

/// A non-blocking operation in progress.
#[derive(Debug)]
pub struct Request {
    state: RequestState,
}

#[derive(Debug)]
enum RequestState {
    /// A send waiting for room, in its peer's backlog ([`Matching::backlog`]).
    Send {
        to: u32,
        id: u64,
    },
    /// A large message's send (see [`Out`]).
    Large {
        id: u64,
    },
    Recv {
        id: u64,
    },
    Done(Option<Completion>),
}

/// What a finished request did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    Sent,
    Received(Status, Vec<u8>),
}

#[derive(Debug)]
struct Posted {
    id: u64,
    source: Source,
    tag: Tag,
}

/// What a receive comes to: the message, or why it could not be taken.
type Received = Result<(Status, Vec<u8>), CommError>;

#[derive(Debug, Default)]
struct Matching {
    posted: VecDeque<Posted>,
    done: HashMap<u64, Received>,
    next_id: u64,
    barrier_epoch: u32,
    large: Large,
    /// For each peer, the sends to it that wait for room, in the order they
    /// were started: while any waits, every later send to that peer joins
    /// them, so that no message overtakes one sent before it (a shorter
    /// one could find room where a longer one did not, and a lent one
    /// needs none). Sent from the front by every wait, test and barrier,
    /// and by the progress hook.
    backlog: HashMap<u32, VecDeque<Waiting>>,
    /// Sends of the backlog that failed, until their request asks.
    unsent: HashMap<u64, CommError>,
    /// Whether a large message is under way or a send waits in the backlog
    /// (as of the last change), for the progress hook and the sends to look
    /// at without the lock.
    busy: Arc<AtomicBool>,
}

/// A send in a peer's backlog.
#[derive(Debug)]
enum Waiting {
    /// A message whole, its tag behind it; `id` is its request's.
    Whole { id: u64, data: Vec<u8> },
    /// The announcement of the large message `id` ([`Out`]).
    Announce { id: u64 },
}

/// Large messages under way, both ways.
#[derive(Debug, Default)]
struct Large {
    /// Sends not yet wholly queued, in the order they were started.
    outs: Vec<Out>,
    /// For each peer, the ids of its cleared sends in the order the
    /// clearances came: only the first sends pieces, so that two messages
    /// to one peer never interleave.
    streams: HashMap<u32, VecDeque<u64>>,
    /// Messages being received.
    ins: Vec<Assembly>,
    /// Clearances and withdrawals that found no room yet: (to, message).
    control: VecDeque<(u32, Vec<u8>)>,
    /// Sends that finished or failed, until their request asks.
    sent: HashMap<u64, Result<(), CommError>>,
    next_id: u64,
}

/// A large message being sent.
#[derive(Debug)]
struct Out {
    id: u64,
    to: u32,
    tag: i32,
    total: usize,
    phase: Phase,
    body: Body,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The announcement waits in its peer's backlog.
    Unannounced,
    /// Announced; no receive has cleared it yet.
    Announced,
    /// Cleared: its pieces go once the sends cleared before it to the same
    /// peer are queued.
    Cleared,
}

#[derive(Debug)]
enum Body {
    /// Framed pieces, copied by `isend`, queued by any wait or test.
    Owned(VecDeque<Vec<u8>>),
    /// The caller's data, framed piece by piece by its blocking `send`;
    /// `sent` bytes of it are queued.
    Borrowed { sent: usize },
}

/// A large message being received.
#[derive(Debug)]
struct Assembly {
    /// The receive it completes; `None` once that receive has been
    /// withdrawn or has failed: what still comes is dropped.
    recv: Option<u64>,
    from: u32,
    id: u64,
    tag: i32,
    total: usize,
    /// Bytes arrived so far.
    got: usize,
    buf: Vec<u8>,
}

/// What the trailer of a message says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// A message of the application, whole, with its tag.
    Small {
        tag: i32,
    },
    Announce {
        id: u64,
        total: u64,
        tag: i32,
    },
    Clear {
        id: u64,
    },
    Piece {
        id: u64,
        offset: u64,
    },
    Withdraw {
        id: u64,
    },
    Malformed(&'static str),
}

/// Reads the trailer of `data` (at least [`TAG_LEN`] bytes).
fn frame(data: &[u8]) -> Frame {
    let len = data.len();
    let tag = i32::from_le_bytes(data[len - TAG_LEN..].try_into().expect("4 bytes"));
    if tag != MARK {
        return Frame::Small { tag };
    }
    if len < TRAILER {
        return Frame::Malformed("a framed message shorter than its trailer");
    }
    let t = &data[len - TRAILER..];
    let word = |at: usize| u64::from_le_bytes(t[at..at + 8].try_into().expect("8 bytes"));
    let (id, value) = (word(0), word(8));
    let tag = i32::from_le_bytes(t[16..20].try_into().expect("4 bytes"));
    match u32::from_le_bytes(t[20..24].try_into().expect("4 bytes")) {
        ANNOUNCE if len == TRAILER => Frame::Announce { id, total: value, tag },
        ANNOUNCE => Frame::Malformed("an announcement of a large message carries data"),
        CLEAR => Frame::Clear { id },
        PIECE => Frame::Piece { id, offset: value },
        WITHDRAW => Frame::Withdraw { id },
        _ => Frame::Malformed("a framed message of an unknown kind"),
    }
}

/// `payload` with a trailer.
fn framed(payload: &[u8], id: u64, value: u64, tag: i32, kind: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + TRAILER);
    v.extend_from_slice(payload);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&value.to_le_bytes());
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&MARK.to_le_bytes());
    v
}

/// The job as this process sees it.
pub struct World {
    rt: Runtime,
    matching: Arc<Mutex<Matching>>,
    /// The longest message sent whole: the runtime's largest less the tag.
    small_max: usize,
    /// Bytes of data in a piece of a large message.
    piece: usize,
    /// By rank: reached through shared memory.
    shm_peers: Vec<bool>,
    /// [`Matching::busy`]: while it is false no send waits in a backlog,
    /// and a send may go at once without looking.
    busy: Arc<AtomicBool>,
    /// The last [`World::recv_into`] left messages unread that it had
    /// deferred (the next ones of a stream, read by the receives after it).
    left_unread: AtomicBool,
}

impl World {
    /// Joins the job this process was started in.
    pub fn init() -> Result<World, CommError> {
        let rt = Runtime::from_env()?;
        // Messages come one by one with pauses between them, and nothing
        // need go back: a receiver finds a lost message by the hole the next
        // one shows and prods for it. A sender that probed its last packet
        // one timeout after every message would send each sparse message
        // twice and draw an acknowledgement for it; it probes by its pace
        // (`Endpoint::set_probe_by_pace`): the end of a burst after one
        // timeout, an isolated message only after 2^4. A message of several
        // datagrams sends its tag ahead (`Endpoint::set_tail_ahead`), so
        // that `recv_into` writes into its buffer only the message it is
        // for.
        let max = rt.with(|e| {
            let (ranks, me) = (e.endpoint.config().ranks, e.endpoint.config().rank);
            for peer in (0..ranks).filter(|&p| p != me) {
                e.endpoint.set_probe_by_pace(peer, USER, true);
            }
            e.endpoint.set_tail_ahead(USER, TAG_LEN).expect("a tag is shorter than the most sent ahead");
            Ok(e.endpoint.config().max_message_size)
        })?;
        // Large messages move on while the application computes or waits in
        // another layer: the progress thread, and every wait of the runtime
        // when something arrives, take their clearances and pieces and send
        // what has room (receives are matched by the application's calls).
        let matching = Arc::new(Mutex::new(Matching::default()));
        let busy = matching.lock().unwrap_or_else(|e| e.into_inner()).busy.clone();
        let shared = Arc::downgrade(&matching);
        let waiting = busy.clone();
        rt.add_progress_hook(ProgressHook(Arc::new(move |e: &mut Engine| {
            if !waiting.load(Ordering::Relaxed) {
                return true;
            }
            let Some(matching) = shared.upgrade() else { return false };
            let mut m = matching.lock().unwrap_or_else(|e| e.into_inner());
            if !m.large.idle() {
                take_framed(&mut m, e);
            }
            send_waiting(&mut m, e);
            true
        })));
        let shm_peers = rt.with(|e| {
            let ranks = e.endpoint.config().ranks;
            Ok((0..ranks).map(|p| e.transport(p) == Transport::Shm).collect())
        })?;
        Ok(World {
            rt,
            matching,
            small_max: max - TAG_LEN,
            piece: PIECE_BYTES.min(max - TRAILER),
            shm_peers,
            busy,
            left_unread: AtomicBool::new(false),
        })
    }

    pub fn rank(&self) -> u32 {
        self.rt.rank()
    }

    /// The runtime underneath: counters and addresses, for tools and tests.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    pub fn size(&self) -> u32 {
        self.rt.size()
    }

    /// Seconds since this process joined the job.
    pub fn wtime(&self) -> f64 {
        self.rt.elapsed().as_secs_f64()
    }

    /// The longest message that goes whole, as one message of the runtime:
    /// a longer one goes by rendezvous, in pieces (its blocking send returns
    /// once the receiver has matched it and its last piece is queued).
    pub fn largest_whole(&self) -> usize {
        self.small_max
    }

    fn matching(&self) -> std::sync::MutexGuard<'_, Matching> {
        self.matching.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ----- sends -----------------------------------------------------------

    /// Sends `data` to `to` with `tag`; returns once the data is queued (a
    /// message lent to a peer on this host: once the peer has read it; a
    /// large message: once its receiver has matched it and its last piece
    /// is queued, or read where its pieces are lent).
    pub fn send(&self, to: u32, tag: i32, data: &[u8]) -> Result<(), CommError> {
        if data.len() > self.small_max || tag == MARK {
            return self.send_large(to, tag, data);
        }
        if data.len() >= LEND_FROM && self.send_lent(to, tag, data)? {
            return Ok(());
        }
        if self.send_now(to, tag, data)? {
            return Ok(());
        }
        self.wait(self.isend(to, tag, data)?).map(|_| ())
    }

    /// Sends `data` to `to` with `tag` at once from where it lies, where
    /// that pays: a message of 4 KiB or more that goes whole to a peer
    /// over UDP, whose datagrams leave from `data` before the copy kept
    /// for resending is made ([`Engine::send_then_copy`]). Returns whether
    /// it sent the message, never waiting: `false` for any other message,
    /// or where the send buffer has no room now (send it otherwise then).
    pub fn send_now(&self, to: u32, tag: i32, data: &[u8]) -> Result<bool, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        if data.len() < SEND_THEN_COPY_FROM
            || data.len() > self.small_max
            || tag == MARK
            || self.shm_peers[to as usize]
            || self.backlogged(to)
        {
            return Ok(false);
        }
        self.rt
            .with(|e| Ok(e.send_then_copy(to, USER, data, &tag.to_le_bytes())))?
            .map_err(|err| send_error(err, data.len()))
    }

    /// A blocking send of a message at least half as long as the ring (or
    /// of 256 KiB or more where the ring has no room for it now) to a peer
    /// on this host that reads this process's memory: the peer reads it
    /// from `data` itself, into the buffer its receive returns (the one copy
    /// of the message), and the tag after it from the record. The send
    /// returns once the peer has read it, so the borrow of `data` outlives
    /// every read of it; meanwhile the wait keeps the engine going (the
    /// peer's answer, and its own messages, which it reads as they come,
    /// matched or not: two ranks that send to each other before they
    /// receive both finish their sends). To a peer over UDP, a message of
    /// 256 KiB or more is lent to the endpoint instead, which sends its
    /// packets from `data`, and the send returns once every packet has been
    /// acknowledged. `false` where the message is not lent (sent
    /// otherwise), as where sends to `to` wait for room before it.
    fn send_lent(&self, to: u32, tag: i32, data: &[u8]) -> Result<bool, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        if self.backlogged(to) {
            return Ok(false);
        }
        let loan = self
            .rt
            .with(|e| Ok(e.lend(to, USER, data, &tag.to_le_bytes())))?
            .map_err(|err| send_error(err, data.len()))?;
        let Some(loan) = loan else { return Ok(false) };
        self.await_loans(&[loan])?;
        Ok(true)
    }

    /// Waits until the readers of `loans` have read them. No interrupt ends
    /// the wait (the caller's memory is still to be read); a stop of the job
    /// does, and the end of a reader's process is an error. Either way the
    /// caller's memory is its own again when this returns: what the
    /// endpoint has not sent yet it sends from a copy.
    fn await_loans(&self, loans: &[Loan]) -> Result<(), CommError> {
        let result = self.await_loans_while_running(loans);
        if result.is_err() {
            self.rt.release_loans(loans);
        }
        result
    }

    fn await_loans_while_running(&self, loans: &[Loan]) -> Result<(), CommError> {
        let mut gone = None;
        let mut next = 0;
        let reading = loans.iter().map(Loan::read_time).sum();
        self.rt.wait_uninterruptible(reading, |e| {
            while next < loans.len() {
                match e.loan_returned(&loans[next]) {
                    Ok(true) => next += 1,
                    Ok(false) => {
                        // What else is under way moves on meanwhile.
                        advance(&mut self.matching(), e);
                        return Ok(None);
                    }
                    Err(why) => {
                        gone = Some(why);
                        return Ok(Some(()));
                    }
                }
            }
            Ok(Some(()))
        })?;
        match gone {
            Some(why) => Err(CommError::NotReceived { to: loans[next].to(), why }),
            None => Ok(()),
        }
    }

    /// Starts a send. It copies `data`: the caller may change it at once.
    /// Where the message finds no room now it waits, with any sent after it
    /// to the same peer, until there is; dropping its request does not
    /// take it back (as `MPI_Request_free`).
    pub fn isend(&self, to: u32, tag: i32, data: &[u8]) -> Result<Request, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        if data.len() > self.small_max || tag == MARK {
            return self.isend_large(to, tag, data);
        }
        let backlogged = self.backlogged(to);
        if self.shm_peers[to as usize] && !backlogged {
            // Written into the peer's ring straight from `data` as far as it
            // has room, the rest copied: one copy fewer than framing it first.
            let sent = self.rt.with(|e| Ok(e.send_parts(to, USER, data, &tag.to_le_bytes())))?;
            match sent {
                Ok(()) => return Ok(Request { state: RequestState::Done(Some(Completion::Sent)) }),
                Err(SendError::WouldBlock) => {}
                Err(err) => return Err(send_error(err, data.len())),
            }
        }
        let mut framed = Vec::with_capacity(data.len() + TAG_LEN);
        framed.extend_from_slice(data);
        framed.extend_from_slice(&tag.to_le_bytes());
        let id = self.rt.with(|e| {
            if !backlogged {
                match e.check_send(to, USER, framed.len()) {
                    Ok(()) => return Ok(e.send_owned(to, USER, framed).map(|()| None)),
                    Err(SendError::WouldBlock) => {}
                    Err(err) => return Ok(Err(err)),
                }
            }
            let mut m = self.matching();
            let id = m.next_id;
            m.next_id += 1;
            m.backlog.entry(to).or_default().push_back(Waiting::Whole { id, data: framed });
            send_waiting(&mut m, e);
            Ok(Ok(Some(id)))
        })?;
        let state = match id.map_err(|err| send_error(err, data.len()))? {
            Some(id) => RequestState::Send { to, id },
            None => RequestState::Done(Some(Completion::Sent)),
        };
        Ok(Request { state })
    }

    /// Starts a send that borrows `data` until it completes (the contract
    /// of `MPI_Isend`: the caller leaves the data alone meanwhile, which
    /// the borrow enforces). A message at least half as long as the
    /// shared-memory ring (or of 256 KiB or more where the ring has no room
    /// for it now, or of 64 KiB or more where the peer has yet to read what
    /// went before it: a stream) to a peer on this host that reads this
    /// process's memory is lent: the peer reads it from `data` into the
    /// buffer its receive returns, one copy in all, where [`World::isend`]
    /// copies it first; so is one of 64 KiB or more to a peer over UDP,
    /// whose packets the endpoint sends from `data` until every one is
    /// acknowledged. Any other message goes as [`World::isend`] sends it.
    pub fn isend_borrowed<'a>(&'a self, to: u32, tag: i32, data: &'a [u8]) -> Result<BorrowedSend<'a>, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        if data.len() >= STREAM_LEND_FROM && data.len() <= self.small_max && tag != MARK && !self.backlogged(to) {
            let loan = self
                .rt
                .with(|e| Ok(e.lend_borrowed(to, USER, data, &tag.to_le_bytes())))?
                .map_err(|err| send_error(err, data.len()))?;
            if let Some(loan) = loan {
                return Ok(BorrowedSend { world: self, how: Some(Borrowed::Lent(loan)) });
            }
        }
        let request = self.isend(to, tag, data)?;
        Ok(BorrowedSend { world: self, how: Some(Borrowed::Copied(request)) })
    }

    /// Waits until every one of `sends` has completed (one wait for all
    /// the lent ones); the first error, once all are done with.
    pub fn wait_borrowed<'a>(&'a self, sends: impl IntoIterator<Item = BorrowedSend<'a>>) -> Result<(), CommError> {
        let mut loans = Vec::new();
        let mut first_error = None;
        for mut send in sends {
            match send.how.take() {
                Some(Borrowed::Lent(loan)) => loans.push(loan),
                Some(Borrowed::Copied(request)) => {
                    if let Err(err) = self.wait(request) {
                        first_error.get_or_insert(err);
                    }
                }
                None => {}
            }
        }
        let lent = self.await_loans(&loans);
        match first_error {
            Some(err) => Err(err),
            None => lent,
        }
    }

    /// Whether sends to `to` wait in its backlog ([`Matching::backlog`]):
    /// a later send then joins them rather than go at once.
    fn backlogged(&self, to: u32) -> bool {
        self.busy.load(Ordering::Relaxed) && self.matching().backlog.contains_key(&to)
    }

    /// Lists a large send, to be announced at once if there is room.
    fn start_large(&self, to: u32, tag: i32, len: usize, body: impl FnOnce(u64) -> Body) -> Result<u64, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        if len > LARGEST_MESSAGE {
            return Err(CommError::TooLarge { len, max: LARGEST_MESSAGE });
        }
        let id = {
            let mut m = self.matching();
            m.large.next_id += 1;
            m.large.next_id
        };
        // Pieces are copied before the engine is locked.
        let body = body(id);
        self.rt
            .with(|e| {
                let mut m = self.matching();
                m.large.outs.push(Out { id, to, tag, total: len, phase: Phase::Unannounced, body });
                m.backlog.entry(to).or_default().push_back(Waiting::Announce { id });
                advance(&mut m, e);
                Ok(id)
            })
            .map_err(CommError::from)
    }

    /// [`World::isend`] of a large message: its pieces are copied now.
    fn isend_large(&self, to: u32, tag: i32, data: &[u8]) -> Result<Request, CommError> {
        let piece = self.piece;
        let id = self.start_large(to, tag, data.len(), |id| {
            Body::Owned(
                data.chunks(piece).enumerate().map(|(i, p)| framed(p, id, (i * piece) as u64, tag, PIECE)).collect(),
            )
        })?;
        Ok(Request { state: RequestState::Large { id } })
    }

    /// [`World::send`] of a large message: each piece is lent (see
    /// [`World::send_lent`]) or copied from `data` as it goes.
    fn send_large(&self, to: u32, tag: i32, data: &[u8]) -> Result<(), CommError> {
        let id = self.start_large(to, tag, data.len(), |_| Body::Borrowed { sent: 0 })?;
        let piece = self.piece;
        let mut failure = None;
        let mut loans = Vec::new();
        let result = self.rt.wait(|e| {
            let mut m = self.matching();
            advance(&mut m, e);
            if let Some(result) = m.large.sent.remove(&id) {
                failure = result.err();
                return Ok(Some(()));
            }
            if m.large.streams.get(&to).and_then(|q| q.front()) != Some(&id) {
                return Ok(None);
            }
            let i = m.large.outs.iter().position(|o| o.id == id).expect("a send under way is listed");
            let Body::Borrowed { sent } = &mut m.large.outs[i].body else { unreachable!("a blocking send borrows") };
            while *sent < data.len() {
                let end = data.len().min(*sent + piece);
                if e.lends(to, end - *sent) {
                    let trailer = framed(&[], id, *sent as u64, tag, PIECE);
                    match e.lend(to, USER, &data[*sent..end], &trailer) {
                        Ok(loan) => loans.extend(loan),
                        Err(other) => {
                            failure = Some(send_error(other, data.len()));
                            return Ok(Some(()));
                        }
                    }
                    *sent = end;
                    continue;
                }
                match e.check_send(to, USER, end - *sent + TRAILER) {
                    Ok(()) => {}
                    Err(SendError::WouldBlock) => return Ok(None),
                    Err(other) => {
                        failure = Some(send_error(other, data.len()));
                        return Ok(Some(()));
                    }
                }
                let piece = framed(&data[*sent..end], id, *sent as u64, tag, PIECE);
                if let Err(other) = e.send_owned(to, USER, piece) {
                    failure = Some(send_error(other, data.len()));
                    return Ok(Some(()));
                }
                *sent = end;
            }
            m.large.finish(i);
            m.large.sent.remove(&id);
            Ok(Some(()))
        });
        // The pieces lent are read before the data is the caller's again.
        let lent = self.await_loans(&loans);
        let err = match (result, failure, lent) {
            (Ok(()), None, Ok(())) => return Ok(()),
            (Ok(()), None, Err(err)) => return Err(err),
            (Ok(()), Some(err), _) => err,
            (Err(err), _, _) => err.into(),
        };
        // The data is the caller's again: what was not sent of it never
        // will be, and a receiver that was told of it hears so.
        let mut m = self.matching();
        if let Some(i) = m.large.outs.iter().position(|o| o.id == id) {
            m.large.give_up(i);
        }
        m.large.sent.remove(&id);
        drop(m);
        let _ = self.rt.with(|e| {
            advance(&mut self.matching(), e);
            Ok(())
        });
        Err(err)
    }

    // ----- receives --------------------------------------------------------

    /// Receives the next message from `source` with `tag`.
    pub fn recv(&self, source: Source, tag: Tag) -> Result<(Status, Vec<u8>), CommError> {
        // With no receive posted before it, a blocking receive takes the
        // first matching message itself, without posting: no request to
        // file and find again (a good part of a receive's cost through
        // shared memory). Otherwise it waits its turn behind them.
        // A large message (announced, then sent in pieces) takes the posted
        // path, as does any receive while one is under way.
        let quick = {
            let m = self.matching();
            m.posted.is_empty() && m.large.idle()
        };
        if quick {
            if let Source::Rank(r) = source {
                if r >= self.size() {
                    return Err(CommError::NoSuchRank { to: r, size: self.size() });
                }
            }
            // The first matching message decides: an announcement of a
            // large message ends the quick way (it is left where it is).
            let got = self.take_first(
                source,
                tag,
                |_, _| {},
                |e| {
                    // None only where a lent message could not be read (its
                    // sender's process ended), which stops the job.
                    let Some(mut msg) = e.take(|msg| matches(source, tag, msg)) else {
                        let why = e.failure.clone().unwrap_or_default();
                        return Err(CommError::Runtime(RuntimeError::Stopped(why)));
                    };
                    let tag = message_tag(&msg);
                    msg.data.truncate(msg.data.len() - TAG_LEN);
                    Ok((Status { source: msg.from, tag, len: msg.data.len() }, msg.data))
                },
            )?;
            if let Some(received) = got {
                return Ok(received);
            }
            // A large message is first: the posted path takes it.
        }
        match self.wait(self.irecv(source, tag)?)? {
            Completion::Received(status, data) => Ok((status, data)),
            Completion::Sent => unreachable!("a receive request completes as a receive"),
        }
    }

    /// Receives the next message from `source` with `tag` into `buf`, as
    /// `MPI_Recv` does, and returns its status (its length is
    /// `status.len`; the rest of `buf` is left as it was). A message
    /// longer than `buf` is an error, [`CommError::Truncated`], once its
    /// first `buf.len()` bytes are in `buf`.
    ///
    /// From a peer on this host, into a buffer of 16 KiB or more: a
    /// message it lends (at least half as long as the shared-memory ring) is
    /// read from the sender's memory straight into `buf`, one copy in all,
    /// into memory the caller has already touched, where [`World::recv`]
    /// reads it into a buffer of its own; a shorter one from a given source
    /// that comes while the receive waits is written into `buf` as it comes
    /// out of the ring. From a given peer over UDP, a message that comes
    /// in several datagrams while the receive waits is reassembled in `buf`
    /// as they come (read there straight from the socket where they come in
    /// order; what came of it before the receive began is copied there
    /// first), if it is the receive's: its first datagram carries its tag
    /// ahead of it, so no byte past the received message's length is
    /// written, whatever comes first. Any other message
    /// (one datagram, from any source over UDP, or one that came before the
    /// receive) is copied into `buf` as it is taken.
    pub fn recv_into(&self, source: Source, tag: Tag, buf: &mut [u8]) -> Result<Status, CommError> {
        if let Source::Rank(r) = source {
            if r >= self.size() {
                return Err(CommError::NoSuchRank { to: r, size: self.size() });
            }
        }
        let quick = {
            let m = self.matching();
            m.posted.is_empty() && m.large.idle()
        };
        if quick {
            // Messages lent to this receive are left unread when they come
            // (only while it waits: a sender blocked on a loan to this
            // process, crossing its own blocking send, is read as ever).
            // A buffer too short for a lent message, or for a ring
            // message whose copy would cost more than setting this up, is
            // filled by a copy. From one peer over UDP, a message of
            // several datagrams is reassembled in `buf` as they come; from
            // any source, only peers on this host lend or write there.
            let placeable = match source {
                Source::Rank(_) => true,
                Source::Any => self.shm_peers.iter().any(|&on| on),
            };
            let over_udp = matches!(source, Source::Rank(r) if !self.shm_peers[r as usize]);
            let mut deferral = (buf.len() >= PLACE_FROM && placeable).then(|| Deferral {
                channel: USER,
                from: match source {
                    Source::Rank(r) => Some(r),
                    Source::Any => None,
                },
                tail: TAG_LEN,
                filter: TailFilter {
                    ends_with: match tag {
                        Tag::Is(t) => Some(t.to_le_bytes().to_vec()),
                        Tag::Any => None,
                    },
                    // Not the pieces of large messages (whose trailer ends so).
                    not_ending_with: Some(MARK.to_le_bytes().to_vec()),
                },
            });
            // From one source, with no matching message here yet, also: the
            // next message from it that comes through the ring is written
            // into `buf` as it comes, rather than copied there once whole.
            // Set at the wait's first turn and ended at its last, under the
            // lock those take anyway (or before the wait, below).
            let (ptr, len) = (buf.as_mut_ptr(), buf.len());
            let deferring = std::cell::Cell::new(false);
            let defer = |e: &mut Engine, deferral: Deferral| {
                match source {
                    Source::Rank(_) if !e.inbox.iter().any(|msg| matches(source, tag, msg)) => {
                        // SAFETY: `buf` is this call's until it returns, and
                        // the deferral ends before that.
                        unsafe { e.defer_into(deferral, ptr, len) }
                    }
                    // Nothing of a peer over UDP is left unread.
                    _ if over_udp => false,
                    _ => e.defer(deferral),
                }
            };
            // Set before the wait where a message lent may come (the wait's
            // first turn would read one as it came, before the wait could
            // say otherwise; so too what the last receive left unread), and
            // where one source may write into `buf` (that first turn would
            // move its next message out of the ring into a buffer of its
            // own, and the rest of a stream behind it).
            let one_source = matches!(source, Source::Rank(_));
            if len >= LEND_FROM || one_source || self.left_unread.load(Ordering::Relaxed) {
                if let Some(deferral) = deferral.take() {
                    deferring.set(self.rt.with(|e| Ok(defer(e, deferral)))?);
                }
            }
            let turn = |e: &mut Engine, done: bool| {
                if let Some(deferral) = deferral.take() {
                    deferring.set(defer(e, deferral));
                } else if done && deferring.replace(false) {
                    e.end_deferral();
                    self.left_unread.store(e.unread() > 0, Ordering::Relaxed);
                }
            };
            let got = self.take_into(source, tag, ptr, len, turn);
            // A wait that ended otherwise (the job stopped, an interrupt).
            if deferring.get() {
                self.rt.end_deferral();
            }
            if let Some(status) = got? {
                return Ok(status);
            }
        }
        // A large message, or receives posted before this one: the message
        // comes whole, then is copied.
        let (status, data) = match self.wait(self.irecv(source, tag)?)? {
            Completion::Received(status, data) => (status, data),
            Completion::Sent => unreachable!("a receive request completes as a receive"),
        };
        fill(buf, status, &data)
    }

    /// The quick way of [`World::recv_into`]: the first matching message,
    /// unless it is the announcement of a large one (`None`: left where it
    /// is).
    /// (The buffer is the `len` bytes at `ptr`, which the engine may be
    /// writing a message into meanwhile: it is made a slice only to take
    /// the message.)
    fn take_into(
        &self,
        source: Source,
        tag: Tag,
        ptr: *mut u8,
        len: usize,
        turn: impl FnMut(&mut Engine, bool),
    ) -> Result<Option<Status>, CommError> {
        let got = self.take_first(source, tag, turn, |e| {
            let mut msg = e.take_lent(|msg| matches(source, tag, msg)).expect("just found");
            let status = Status { source: msg.from, tag: message_tag(&msg), len: msg.len() - TAG_LEN };
            // The message without its tag, or as much as fits.
            let n = len.min(status.len);
            // SAFETY: the caller's buffer, `len` bytes at `ptr`.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
            e.read_lent(&mut msg, buf).map_err(|why| CommError::Broken { from: msg.from, why })?;
            e.recycle(msg.data);
            Ok(status)
        })?;
        match got {
            Some(status) if status.len > len => {
                Err(CommError::Truncated { from: status.source, len: status.len, capacity: len })
            }
            got => Ok(got),
        }
    }

    /// The quick way of a blocking receive: waits for the first message
    /// that matches and hands the engine to `take`, which takes it; `None`
    /// where that message is the announcement of a large one (left where
    /// it is, for the posted path). `turn` has the engine at every turn of
    /// the wait, first (`false`), and once more as it ends (`true`).
    fn take_first<T>(
        &self,
        source: Source,
        tag: Tag,
        mut turn: impl FnMut(&mut Engine, bool),
        mut take: impl FnMut(&mut Engine) -> Result<T, CommError>,
    ) -> Result<Option<T>, CommError> {
        let me = self.rank();
        let mut failure = None;
        let got = self.rt.wait(|e| {
            turn(e, false);
            match e.inbox.iter().find(|msg| matches(source, tag, msg)) {
                Some(msg) if message_tag(msg) == MARK => {}
                Some(_) => match take(e) {
                    Ok(taken) => {
                        turn(e, true);
                        return Ok(Some(Some(taken)));
                    }
                    Err(err) => failure = Some(err),
                },
                None => match never_matched(e, source, me) {
                    Some(why) => failure = Some(CommError::NeverMatched { from: source, tag, why }),
                    None => return Ok(None),
                },
            }
            turn(e, true);
            Ok(Some(None))
        })?;
        match failure {
            Some(err) => Err(err),
            None => Ok(got),
        }
    }

    /// Posts a receive.
    pub fn irecv(&self, source: Source, tag: Tag) -> Result<Request, CommError> {
        if let Source::Rank(r) = source {
            if r >= self.size() {
                return Err(CommError::NoSuchRank { to: r, size: self.size() });
            }
        }
        let mut m = self.matching();
        let id = m.next_id;
        m.next_id += 1;
        m.posted.push_back(Posted { id, source, tag });
        Ok(Request { state: RequestState::Recv { id } })
    }

    // ----- completion ------------------------------------------------------

    /// Completes `request` if it can be completed now.
    pub fn test(&self, request: &mut Request) -> Result<Option<Completion>, CommError> {
        if let RequestState::Done(done) = &mut request.state {
            return done.take().map(Some).ok_or(CommError::Completed);
        }
        self.rt.with(|e| Ok(self.step(e, &mut request.state)))?
    }

    /// Waits until `request` completes.
    pub fn wait(&self, mut request: Request) -> Result<Completion, CommError> {
        if let RequestState::Done(done) = &mut request.state {
            return done.take().ok_or(CommError::Completed);
        }
        let mut failure = None;
        let completion = self.rt.wait(|e| match self.step(e, &mut request.state) {
            Ok(c) => Ok(c),
            Err(err) => {
                failure = Some(err);
                Ok(Some(Completion::Sent))
            }
        });
        match (completion, failure) {
            (Ok(completion), None) => Ok(completion),
            (Ok(_), Some(err)) => self.withdraw(request, err),
            (Err(err), _) => self.withdraw(request, err.into()),
        }
    }

    /// A wait that failed (interrupted, say) takes its receive back, so that
    /// no later message is matched to it and lost; one matched meanwhile is
    /// delivered after all. A large message that was coming into it is
    /// dropped as the rest of it comes. (A large `isend` goes on.)
    fn withdraw(&self, request: Request, err: CommError) -> Result<Completion, CommError> {
        if let RequestState::Recv { id } = request.state {
            let mut m = self.matching();
            if let Some(result) = m.done.remove(&id) {
                return result.map(|(status, data)| Completion::Received(status, data));
            }
            m.posted.retain(|p| p.id != id);
            if let Some(a) = m.large.ins.iter_mut().find(|a| a.recv == Some(id)) {
                a.recv = None;
                a.buf = Vec::new();
            }
        }
        Err(err)
    }

    fn step(&self, e: &mut Engine, state: &mut RequestState) -> Result<Option<Completion>, CommError> {
        match state {
            RequestState::Send { to, id } => {
                let (to, id) = (*to, *id);
                // Receives and large messages move on too, which the peer
                // may need before it makes room.
                let mut m = self.matching();
                advance(&mut m, e);
                if let Some(err) = m.unsent.remove(&id) {
                    *state = RequestState::Done(None);
                    return Err(err);
                }
                let waits = |w: &Waiting| matches!(w, Waiting::Whole { id: w, .. } if *w == id);
                if m.backlog.get(&to).is_some_and(|queue| queue.iter().any(waits)) {
                    return Ok(None);
                }
                *state = RequestState::Done(None);
                Ok(Some(Completion::Sent))
            }
            RequestState::Large { id } => {
                let id = *id;
                let mut m = self.matching();
                advance(&mut m, e);
                match m.large.sent.remove(&id) {
                    Some(result) => {
                        *state = RequestState::Done(None);
                        result.map(|()| Some(Completion::Sent))
                    }
                    None => Ok(None),
                }
            }
            RequestState::Recv { id } => {
                let id = *id;
                let mut m = self.matching();
                advance(&mut m, e);
                if let Some(result) = m.done.remove(&id) {
                    *state = RequestState::Done(None);
                    return result.map(|(status, data)| Some(Completion::Received(status, data)));
                }
                if let Some(posted) = m.posted.iter().find(|p| p.id == id) {
                    if let Some(why) = never_matched(e, posted.source, self.rank()) {
                        return Err(CommError::NeverMatched { from: posted.source, tag: posted.tag, why });
                    }
                } else if let Some(i) = m.large.ins.iter().position(|a| a.recv == Some(id)) {
                    // Matched, and its pieces are coming: unless their sender
                    // has left with nothing more of it on its way.
                    let from = m.large.ins[i].from;
                    if from != self.rank() && e.finished[from as usize] && !e.inbox.iter().any(|x| x.from == from) {
                        m.large.ins.remove(i);
                        *state = RequestState::Done(None);
                        let why = format!("rank {from} finished before the whole message came");
                        return Err(CommError::Broken { from, why });
                    }
                }
                Ok(None)
            }
            RequestState::Done(_) => Err(CommError::Completed),
        }
    }

    // ----- collectives -----------------------------------------------------

    /// Returns when every rank has entered the barrier: where every rank
    /// is on this host (up to [`BOARD_BARRIER_MAX`] of them), each posts
    /// its arrival on its board in shared memory and waits until it sees
    /// everyone's, with no message; elsewhere the dissemination algorithm
    /// (⌈log2 p⌉ rounds of one message each way), each round waited for
    /// as collectives wait, spinning a while before it blocks (`bench
    /// scale --transport udp`, two runs each: 63.6-74.5 / 149-255 /
    /// 686-752 us at 4 / 8 / 16 processes on 2 cores against 93.7-122.3 /
    /// 276-317 / 856-860 with a plain wait, which blocks at once there).
    pub fn barrier(&self) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        if size > 1 && size <= BOARD_BARRIER_MAX && self.rt.with(|e| Ok(e.on_board()))? {
            return self.barrier_on_board();
        }
        let epoch = {
            let mut m = self.matching();
            m.barrier_epoch = m.barrier_epoch.wrapping_add(1);
            m.barrier_epoch
        };
        let mut distance = 1;
        let mut round = 0u32;
        while distance < size {
            let to = (rank + distance) % size;
            let from = (rank + size - distance) % size;
            let mut token = [0u8; 8];
            token[..4].copy_from_slice(&epoch.to_le_bytes());
            token[4..].copy_from_slice(&round.to_le_bytes());
            let mut pending = Some(token.to_vec());
            self.rt.wait_collective(|e| {
                // Pieces of large messages keep coming into the inbox while
                // this process is in the barrier: taken, they leave room for
                // the tokens.
                advance(&mut self.matching(), e);
                if let Some(data) = pending.take() {
                    match e.send_owned(to, COLLECTIVE, data.clone()) {
                        Ok(()) => {}
                        Err(SendError::WouldBlock) => pending = Some(data),
                        Err(other) => return Err(RuntimeError::Stopped(other.to_string())),
                    }
                }
                let got = e.take(|m| m.from == from && m.channel == COLLECTIVE && m.data == token);
                if got.is_none() && e.finished[from as usize] {
                    return Err(RuntimeError::Stopped(format!("rank {from} finished without entering the barrier")));
                }
                Ok((got.is_some() && pending.is_none()).then_some(()))
            })?;
            distance *= 2;
            round += 1;
        }
        Ok(())
    }

    /// The barrier on the board ([`World::barrier`]).
    fn barrier_on_board(&self) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        let seq = self.rt.with(|e| e.post(PostKind::Barrier, &[]).map_err(RuntimeError::Stopped))?;
        let mut heard: Vec<bool> = (0..size).map(|r| r == rank).collect();
        let mut post = Vec::new();
        self.rt.wait_collective(|e| {
            advance(&mut self.matching(), e);
            for r in 0..size {
                if heard[r as usize] {
                    continue;
                }
                match e.read_post(r, seq, PostKind::Barrier, &mut post) {
                    Ok(true) => heard[r as usize] = true,
                    Ok(false) if e.finished[r as usize] => {
                        return Err(RuntimeError::Stopped(format!("rank {r} finished without entering the barrier")))
                    }
                    Ok(false) => {}
                    Err(why) => return Err(RuntimeError::Stopped(format!("rank {r} in the barrier: {why}"))),
                }
            }
            Ok(heard.iter().all(|&h| h).then_some(()))
        })?;
        Ok(())
    }

    /// Leaves the job: waits until every message sent has been delivered and
    /// every rank has finished. Sends that wait for room go first, to peers
    /// that have not finished; large messages under way are finished (those
    /// being received, and the pieces of sends already cleared); large
    /// sends that no receive has matched yet are withdrawn.
    pub fn finalize(self) -> Result<(), CommError> {
        let under_way = {
            let m = self.matching();
            !m.large.idle() || !m.backlog.is_empty()
        };
        if under_way {
            self.rt.wait(|e| {
                let mut m = self.matching();
                let l = &mut m.large;
                while let Some(i) = l.outs.iter().position(|o| o.phase != Phase::Cleared) {
                    l.give_up(i);
                }
                advance(&mut m, e);
                let l = &m.large;
                let settled = l.control.is_empty()
                    && l.outs.iter().all(|o| e.finished[o.to as usize])
                    && l.ins.iter().all(|a| e.finished[a.from as usize])
                    && m.backlog.keys().all(|&to| e.finished[to as usize]);
                Ok(settled.then_some(()))
            })?;
        }
        Ok(self.rt.finish()?)
    }

    /// Tells the launcher this rank failed; the job stops with `reason`.
    pub fn abort(&self, reason: &str) {
        self.rt.fail(reason);
    }
}

impl Matching {
    /// Notes whether a large message is under way or a send waits.
    fn note_busy(&self) {
        let busy = !self.large.idle() || !self.backlog.is_empty();
        // Written only when it changes: the progress thread reads it.
        if self.busy.load(Ordering::Relaxed) != busy {
            self.busy.store(busy, Ordering::Relaxed);
        }
    }
}

impl Large {
    /// Nothing under way: receives then only match.
    fn idle(&self) -> bool {
        self.outs.is_empty() && self.ins.is_empty() && self.control.is_empty()
    }

    /// Removes `outs[i]`, wholly queued, and lets the next send to its peer go.
    fn finish(&mut self, i: usize) {
        let out = self.outs.remove(i);
        self.unstream(&out);
        self.sent.insert(out.id, Ok(()));
    }

    /// Removes `outs[i]`, failed with `err`.
    fn fail(&mut self, i: usize, err: CommError) {
        let out = self.outs.remove(i);
        self.unstream(&out);
        self.sent.insert(out.id, Err(err));
    }

    /// Removes `outs[i]` without a word to its request; its receiver, if it
    /// was announced, hears that it will not come.
    fn give_up(&mut self, i: usize) {
        let out = self.outs.remove(i);
        self.unstream(&out);
        if out.phase != Phase::Unannounced {
            self.control.push_back((out.to, framed(&[], out.id, 0, out.tag, WITHDRAW)));
        }
    }

    fn unstream(&mut self, out: &Out) {
        if let Some(queue) = self.streams.get_mut(&out.to) {
            queue.retain(|&id| id != out.id);
            if queue.is_empty() {
                self.streams.remove(&out.to);
            }
        }
    }

    /// A receive took the announcement of message `id` from `from`; `recv`
    /// is that receive. Clears the sender, and returns the message if it is
    /// complete already (empty), or why it cannot be taken.
    fn announced(&mut self, recv: u64, from: u32, id: u64, total: u64, tag: i32) -> Option<Received> {
        let broken = |why: String| Some(Err(CommError::Broken { from, why }));
        if total > LARGEST_MESSAGE as u64 {
            return broken(format!("it announced {total} bytes, more than the largest message ({LARGEST_MESSAGE})"));
        }
        if self.ins.iter().any(|a| a.from == from && a.id == id) {
            return broken(format!("it announced message {id} twice"));
        }
        let total = total as usize;
        let mut buf = Vec::new();
        if buf.try_reserve_exact(total).is_err() {
            return broken(format!("no memory for its {total} bytes"));
        }
        self.control.push_back((from, framed(&[], id, 0, tag, CLEAR)));
        if total == 0 {
            return Some(Ok((Status { source: from, tag, len: 0 }, buf)));
        }
        self.ins.push(Assembly { recv: Some(recv), from, id, tag, total, got: 0, buf });
        None
    }

    /// Queues what waits and what now has room: clearances and withdrawals,
    /// and the pieces of owned sends (to each peer one message after
    /// another; announcements go by the backlog). A send to a peer that has
    /// finished fails.
    fn push(&mut self, e: &mut Engine) {
        while let Some((to, msg)) = self.control.front() {
            match e.check_send(*to, USER, msg.len()) {
                Err(SendError::WouldBlock) => break,
                Ok(()) => {
                    let (to, msg) = self.control.pop_front().expect("looked at");
                    // Anything but room is the job stopping, which the wait sees.
                    let _ = e.send_owned(to, USER, msg);
                }
                Err(_) => drop(self.control.pop_front()),
            }
        }
        let mut i = 0;
        while i < self.outs.len() {
            let to = self.outs[i].to;
            if to != e.endpoint.config().rank && e.finished[to as usize] {
                let why = format!("rank {to} finished without taking it");
                self.fail(i, CommError::NotReceived { to, why });
                continue;
            }
            i += 1;
        }
        let peers: Vec<u32> = self.streams.keys().copied().collect();
        for to in peers {
            while let Some(&id) = self.streams.get(&to).and_then(|q| q.front()) {
                let i = self.outs.iter().position(|o| o.id == id).expect("a streaming send is listed");
                let Body::Owned(pieces) = &mut self.outs[i].body else { break };
                let mut error = None;
                while let Some(piece) = pieces.front() {
                    match e.check_send(to, USER, piece.len()) {
                        Ok(()) => {}
                        Err(SendError::WouldBlock) => break,
                        Err(err) => {
                            error = Some(err);
                            break;
                        }
                    }
                    let piece = pieces.pop_front().expect("looked at");
                    if let Err(err) = e.send_owned(to, USER, piece) {
                        error = Some(err);
                        break;
                    }
                }
                let empty = pieces.is_empty();
                match error {
                    // The next send to this peer goes.
                    Some(err) => self.fail(i, CommError::Runtime(RuntimeError::Stopped(err.to_string()))),
                    None if empty => self.finish(i),
                    None => break,
                }
            }
        }
    }

    /// Message `id` to `to` is cleared.
    fn cleared(&mut self, to: u32, id: u64) {
        // A clearance of no message listed is of one given up meanwhile.
        if let Some(out) = self.outs.iter_mut().find(|o| o.id == id && o.to == to && o.phase == Phase::Announced) {
            out.phase = Phase::Cleared;
            self.streams.entry(to).or_default().push_back(id);
        }
    }
}

/// Receives move on, and large messages with them (when any is under way):
/// clearances and pieces are taken from the inbox, posted receives matched,
/// and what waits for room sent.
fn advance(m: &mut Matching, e: &mut Engine) {
    if !m.large.idle() {
        take_framed(m, e);
    }
    match_posted(m, e);
    send_waiting(m, e);
}

/// Sends what waits for room: the backlogs, then what large messages have
/// to send; notes whether anything is still under way.
fn send_waiting(m: &mut Matching, e: &mut Engine) {
    if !m.backlog.is_empty() {
        send_backlog(m, e);
    }
    if !m.large.idle() {
        m.large.push(e);
    }
    m.note_busy();
}

/// Sends each peer's backlog from its front as far as there is room. A
/// send that fails is reported to its request, and the next goes; an
/// announcement whose message was given up meanwhile is dropped.
fn send_backlog(m: &mut Matching, e: &mut Engine) {
    let (large, unsent) = (&mut m.large, &mut m.unsent);
    m.backlog.retain(|&to, queue| {
        while let Some(front) = queue.front_mut() {
            match front {
                Waiting::Whole { id, data } => {
                    let (id, len) = (*id, data.len());
                    let sent = e.check_send(to, USER, len).and_then(|()| e.send_owned(to, USER, std::mem::take(data)));
                    match sent {
                        Err(SendError::WouldBlock) => break,
                        Ok(()) => {}
                        Err(err) => drop(unsent.insert(id, send_error(err, len - TAG_LEN))),
                    }
                }
                Waiting::Announce { id } => {
                    let id = *id;
                    if let Some(i) = large.outs.iter().position(|o| o.id == id && o.phase == Phase::Unannounced) {
                        let out = &large.outs[i];
                        let announcement = framed(&[], id, out.total as u64, out.tag, ANNOUNCE);
                        match e.check_send(to, USER, TRAILER).and_then(|()| e.send_owned(to, USER, announcement)) {
                            Err(SendError::WouldBlock) => break,
                            Ok(()) => large.outs[i].phase = Phase::Announced,
                            Err(err) => large.fail(i, CommError::Runtime(RuntimeError::Stopped(err.to_string()))),
                        }
                    }
                }
            }
            queue.pop_front();
        }
        !queue.is_empty()
    });
}

/// Takes the clearances, pieces and withdrawals that came; pieces go into
/// their messages, in the order each sender sent them.
fn take_framed(m: &mut Matching, e: &mut Engine) {
    let framing = |x: &Inbound| {
        x.channel == USER
            && x.data.len() >= TRAILER
            && matches!(frame(&x.data), Frame::Clear { .. } | Frame::Piece { .. } | Frame::Withdraw { .. })
    };
    while let Some(msg) = e.take(framing) {
        let from = msg.from;
        match frame(&msg.data) {
            Frame::Clear { id } => m.large.cleared(from, id),
            Frame::Piece { id, offset } => {
                let payload = &msg.data[..msg.data.len() - TRAILER];
                match m.large.piece(from, id, offset, payload) {
                    Some(Some((recv, result))) => drop(m.done.insert(recv, result)),
                    Some(None) => {}
                    // Not announced, or not cleared: no receive can tell.
                    None => drop(e.failure.get_or_insert_with(|| {
                        format!("rank {from} broke the protocol: a piece of its message {id}, which no receive took")
                    })),
                }
            }
            Frame::Withdraw { id } => {
                if let Some(i) = m.large.ins.iter().position(|a| a.from == from && a.id == id) {
                    let a = m.large.ins.remove(i);
                    if let Some(recv) = a.recv {
                        let why = "its sender gave it up before the whole of it came".to_string();
                        m.done.insert(recv, Err(CommError::Broken { from, why }));
                    }
                } else {
                    // Not matched yet: it goes as though it had never been sent.
                    let announcement = |x: &Inbound| {
                        x.from == from
                            && x.channel == USER
                            && x.data.len() == TRAILER
                            && matches!(frame(&x.data), Frame::Announce { id: a, .. } if a == id)
                    };
                    e.take(announcement);
                }
            }
            _ => unreachable!("taken as framed"),
        }
    }
}

impl Large {
    /// A piece of message `id` from `from` at `offset`: copied into place.
    /// `None` if no such message is being received; else the receive it
    /// finishes, if it finishes one, with its message or why it failed. A
    /// piece that is not where the message needs it fails the receive, and
    /// what comes after it of the same message is dropped.
    fn piece(&mut self, from: u32, id: u64, offset: u64, payload: &[u8]) -> Option<Option<(u64, Received)>> {
        let i = self.ins.iter().position(|a| a.from == from && a.id == id)?;
        let a = &mut self.ins[i];
        let mut failed = None;
        if let Some(recv) = a.recv {
            if offset == a.got as u64 && payload.len() <= a.total - a.got {
                make_pages(&mut a.buf, payload.len());
                a.buf.extend_from_slice(payload);
            } else {
                let why = if offset != a.got as u64 {
                    format!("a piece at byte {offset} of {} where byte {} was due", a.total, a.got)
                } else {
                    format!("its pieces come to more than the {} bytes it announced", a.total)
                };
                failed = Some((recv, Err(CommError::Broken { from, why })));
                a.recv = None;
                a.buf = Vec::new();
            }
        }
        a.got = a.got.saturating_add(payload.len());
        if a.got < a.total {
            return Some(failed);
        }
        let a = self.ins.remove(i);
        let Some(recv) = a.recv else { return Some(failed) };
        Some(Some((recv, Ok((Status { source: from, tag: a.tag, len: a.total }, a.buf)))))
    }
}

/// Copies a message received whole into a receive's buffer.
fn fill(buf: &mut [u8], status: Status, data: &[u8]) -> Result<Status, CommError> {
    let n = buf.len().min(data.len());
    buf[..n].copy_from_slice(&data[..n]);
    match data.len() > buf.len() {
        true => Err(CommError::Truncated { from: status.source, len: data.len(), capacity: buf.len() }),
        false => Ok(status),
    }
}

/// Makes the pages of the next `len` bytes of `buf`'s spare capacity by
/// one system call (`MADV_POPULATE_WRITE`) rather than a page fault each
/// as they are written: on a 2-core virtual machine a fresh buffer of
/// 2 GiB took 1.1 s to fill by faults, 0.7 s made first. A message of
/// 2 GiB between two processes (`a_message_of_2_gib` in
/// `crates/cli/tests/job.rs`, four alternating pairs of runs on a busy
/// host) came through shared memory in 1.29-1.72 s so against 1.58-3.64 s
/// by faults, over UDP in 1.20-1.87 against 1.49-3.39 s. Making 4 or 8 MiB
/// ahead at a time made UDP slower: the longer call keeps the process
/// from its socket. Where the kernel cannot (before Linux 5.14), the
/// pages are made by faults as ever.
fn make_pages(buf: &mut Vec<u8>, len: usize) {
    let len = len.min(buf.capacity() - buf.len());
    if len == 0 {
        return;
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let at = buf.as_mut_ptr() as usize + buf.len();
    let from = at / page * page;
    // SAFETY: the range lies within the allocation of `buf`, but for the
    // start of its first page, which is in the same mapping; making pages
    // changes no byte of them.
    unsafe { libc::madvise(from as *mut libc::c_void, at + len - from, libc::MADV_POPULATE_WRITE) };
}

/// What the failure of a send of `len` bytes of the application's is.
fn send_error(err: SendError, len: usize) -> CommError {
    match err {
        SendError::TooLarge { max, .. } => CommError::TooLarge { len, max: max - TAG_LEN },
        SendError::NoSuchRank { to, ranks } => CommError::NoSuchRank { to, size: ranks },
        other => CommError::Runtime(RuntimeError::Stopped(other.to_string())),
    }
}

fn matches(source: Source, tag: Tag, m: &Inbound) -> bool {
    if m.channel != USER || m.data.len() < TAG_LEN {
        return false;
    }
    let source_ok = match source {
        Source::Any => true,
        Source::Rank(r) => m.from == r,
    };
    let tag_ok = |t: i32| match tag {
        Tag::Any => true,
        Tag::Is(want) => t == want,
    };
    source_ok
        && match message_tag(m) {
            MARK => match frame(&m.data) {
                Frame::Announce { tag, .. } => tag_ok(tag),
                // The first receive that could take it hears why it is broken.
                Frame::Malformed(_) => true,
                _ => false,
            },
            t => tag_ok(t),
        }
}

fn message_tag(m: &Inbound) -> i32 {
    let at = m.data.len() - TAG_LEN;
    i32::from_le_bytes(m.data[at..].try_into().expect("length checked"))
}

/// Gives inbox messages to posted receives: each receive, in the order it
/// was posted, takes the earliest matching message. One that takes the
/// announcement of a large message completes when the last piece comes.
fn match_posted(m: &mut Matching, e: &mut Engine) {
    let mut index = 0;
    while index < m.posted.len() {
        let p = &m.posted[index];
        let (source, tag, id) = (p.source, p.tag, p.id);
        match e.take(|msg| matches(source, tag, msg)) {
            Some(mut msg) => {
                let tag = message_tag(&msg);
                if tag != MARK {
                    msg.data.truncate(msg.data.len() - TAG_LEN);
                    let status = Status { source: msg.from, tag, len: msg.data.len() };
                    m.done.insert(id, Ok((status, msg.data)));
                } else {
                    let from = msg.from;
                    let done = match frame(&msg.data) {
                        Frame::Announce { id: message, .. } if withdrawn(e, from, message) => {
                            // Given up before it was matched: as though it had
                            // never been sent; the receive looks further.
                            continue;
                        }
                        Frame::Announce { id: message, total, tag } => m.large.announced(id, from, message, total, tag),
                        Frame::Malformed(why) => Some(Err(CommError::Broken { from, why: why.into() })),
                        _ => unreachable!("matched as an announcement or a malformed message"),
                    };
                    if let Some(done) = done {
                        m.done.insert(id, done);
                    }
                }
                m.posted.remove(index);
            }
            None => index += 1,
        }
    }
}

/// Takes the withdrawal of message `id` from `from` if it has come.
fn withdrawn(e: &mut Engine, from: u32, id: u64) -> bool {
    let withdrawal = |x: &Inbound| {
        x.from == from
            && x.channel == USER
            && x.data.len() >= TRAILER
            && matches!(frame(&x.data), Frame::Withdraw { id: w } if w == id)
    };
    e.take(withdrawal).is_some()
}

impl BorrowedSend<'_> {
    /// Waits until the send has completed: the data is the caller's again.
    pub fn wait(mut self) -> Result<(), CommError> {
        let world = self.world;
        match self.how.take() {
            Some(Borrowed::Lent(loan)) => world.await_loans(&[loan]),
            Some(Borrowed::Copied(request)) => world.wait(request).map(|_| ()),
            None => Err(CommError::Completed),
        }
    }

    /// Whether the send has completed, after a turn of progress (the
    /// peer's answer comes through it); an error is reported once.
    pub fn test(&mut self) -> Result<bool, CommError> {
        let world = self.world;
        let done = match &mut self.how {
            None => return Err(CommError::Completed),
            Some(Borrowed::Lent(loan)) => {
                let loan = &*loan;
                world
                    .rt
                    .with(|e| {
                        e.progress();
                        Ok(e.loan_returned(loan))
                    })?
                    .map_err(|why| CommError::NotReceived { to: loan.to(), why })
            }
            Some(Borrowed::Copied(request)) => world.test(request).map(|c| c.is_some()),
        };
        if !matches!(done, Ok(false)) {
            self.how = None;
        }
        done
    }
}

impl std::fmt::Debug for BorrowedSend<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BorrowedSend").field("how", &self.how).finish()
    }
}

impl Drop for BorrowedSend<'_> {
    /// The data may not go before the peer has read it: an unfinished
    /// send is waited for.
    fn drop(&mut self) {
        if let Some(how) = self.how.take() {
            let _ = match how {
                Borrowed::Lent(loan) => self.world.await_loans(&[loan]),
                Borrowed::Copied(request) => self.world.wait(request).map(|_| ()),
            };
        }
    }
}

/// Why a receive from `source` can never be matched, if it cannot.
fn never_matched(e: &Engine, source: Source, me: u32) -> Option<String> {
    match source {
        Source::Rank(r) if r != me && e.finished[r as usize] => Some(format!("rank {r} has finished")),
        Source::Any if e.finished.iter().enumerate().all(|(r, &f)| f || r as u32 == me) && e.finished.len() > 1 => {
            Some("every other rank has finished".into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(from: u32, data: Vec<u8>) -> Inbound {
        Inbound::new(from, USER, data, 0)
    }

    fn small(data: &[u8], tag: i32) -> Vec<u8> {
        let mut v = data.to_vec();
        v.extend_from_slice(&tag.to_le_bytes());
        v
    }

    #[test]
    fn trailers_round_trip_and_small_messages_keep_their_tag() {
        assert_eq!(frame(&small(b"abc", 7)), Frame::Small { tag: 7 });
        assert_eq!(frame(&small(b"", -1)), Frame::Small { tag: -1 });
        let a = framed(&[], 5, 40 << 20, 9, ANNOUNCE);
        assert_eq!(a.len(), TRAILER);
        assert_eq!(frame(&a), Frame::Announce { id: 5, total: 40 << 20, tag: 9 });
        assert_eq!(frame(&framed(&[], 5, 0, 9, CLEAR)), Frame::Clear { id: 5 });
        assert_eq!(frame(&framed(b"xyz", 5, 1 << 33, 9, PIECE)), Frame::Piece { id: 5, offset: 1 << 33 });
        assert_eq!(frame(&framed(&[], 5, 0, 9, WITHDRAW)), Frame::Withdraw { id: 5 });
        assert!(matches!(frame(&framed(b"x", 5, 0, 9, ANNOUNCE)), Frame::Malformed(_)));
        assert!(matches!(frame(&framed(&[], 5, 0, 9, 77)), Frame::Malformed(_)));
        // The mark with less than a trailer before it.
        assert!(matches!(frame(&small(b"short", MARK)), Frame::Malformed(_)));
    }

    #[test]
    fn receives_match_announcements_by_tag_and_never_pieces_or_clearances() {
        let announce = inbound(2, framed(&[], 1, 20 << 20, 9, ANNOUNCE));
        assert!(matches(Source::Any, Tag::Any, &announce));
        assert!(matches(Source::Rank(2), Tag::Is(9), &announce));
        assert!(!matches(Source::Rank(1), Tag::Is(9), &announce));
        assert!(!matches(Source::Any, Tag::Is(8), &announce));
        for other in [framed(b"data", 1, 0, 9, PIECE), framed(&[], 1, 0, 9, CLEAR), framed(&[], 1, 0, 9, WITHDRAW)] {
            assert!(!matches(Source::Any, Tag::Any, &inbound(2, other.clone())));
            assert!(!matches(Source::Any, Tag::Is(9), &inbound(2, other)));
        }
        // A broken framed message goes to the first receive that could take
        // it, which reports it.
        assert!(matches(Source::Rank(2), Tag::Is(3), &inbound(2, small(b"short", MARK))));
        // Small messages as ever.
        assert!(matches(Source::Any, Tag::Is(4), &inbound(0, small(b"hi", 4))));
        assert!(!matches(Source::Any, Tag::Is(4), &inbound(0, small(b"hi", 5))));
        assert!(!matches(Source::Any, Tag::Any, &inbound(0, vec![1, 2])));
    }

    /// `Large::announced` then pieces as `take_framed` gives them.
    fn receive(total: usize, pieces: &[(u64, &[u8])]) -> Vec<Option<Option<(u64, Received)>>> {
        let mut l = Large::default();
        assert!(l.announced(7, 3, 11, total as u64, 5).is_none());
        assert_eq!(l.control.len(), 1, "the sender is cleared");
        assert_eq!(frame(&l.control[0].1), Frame::Clear { id: 11 });
        pieces.iter().map(|&(offset, p)| l.piece(3, 11, offset, p)).collect()
    }

    #[test]
    fn pieces_in_order_make_the_message_in_one_buffer() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut l = Large::default();
        assert!(l.announced(7, 3, 11, 1000, 5).is_none());
        let capacity = l.ins[0].buf.capacity();
        assert_eq!(capacity, 1000, "allocated once, whole");
        for (k, chunk) in data.chunks(300).enumerate() {
            let got = l.piece(3, 11, (k * 300) as u64, chunk).expect("a message being received");
            if k < 3 {
                assert!(got.is_none());
                assert_eq!(l.ins[0].buf.capacity(), capacity, "never grown");
            } else {
                let (recv, result) = got.expect("finished");
                let (status, message) = result.unwrap();
                assert_eq!((recv, status), (7, Status { source: 3, tag: 5, len: 1000 }));
                assert_eq!(message, data);
            }
        }
        assert!(l.idle() || l.ins.is_empty());
        // A piece of a message nobody receives is for the caller to report.
        assert!(l.piece(3, 11, 0, b"more").is_none());
        assert!(l.piece(4, 11, 0, b"more").is_none());
    }

    #[test]
    fn pieces_that_do_not_add_up_fail_the_receive() {
        // A gap.
        let got = receive(100, &[(0, &[1; 40]), (50, &[2; 50]), (90, &[3; 10])]);
        assert!(matches!(&got[0], Some(None)));
        let Some(Some((7, Err(CommError::Broken { from: 3, why })))) = &got[1] else { panic!("{got:?}") };
        assert!(why.contains("at byte 50") && why.contains("byte 40 was due"), "{why}");
        // What follows of it is dropped, without a second answer.
        assert!(matches!(&got[2], Some(None)), "{got:?}");
        // More than announced.
        let got = receive(100, &[(0, &[1; 60]), (60, &[2; 60])]);
        let Some(Some((7, Err(CommError::Broken { why, .. })))) = &got[1] else { panic!("{got:?}") };
        assert!(why.contains("more than the 100 bytes"), "{why}");
        // A repeated piece.
        let got = receive(100, &[(0, &[1; 60]), (0, &[1; 60])]);
        assert!(matches!(&got[1], Some(Some((7, Err(CommError::Broken { .. }))))), "{got:?}");
    }

    #[test]
    fn an_absurd_announcement_is_an_error_not_an_allocation() {
        let mut l = Large::default();
        let got = l.announced(7, 3, 11, (LARGEST_MESSAGE as u64) + 1, 5);
        let Some(Err(CommError::Broken { from: 3, why })) = got else { panic!("{got:?}") };
        assert!(why.contains("more than the largest message"), "{why}");
        let got = l.announced(7, 3, 12, u64::MAX, 5);
        assert!(matches!(got, Some(Err(CommError::Broken { .. }))), "{got:?}");
        assert!(l.idle(), "nothing cleared, nothing kept");
        // Twice the same message while it comes.
        assert!(l.announced(7, 3, 13, 100, 5).is_none());
        assert!(matches!(l.announced(8, 3, 13, 100, 5), Some(Err(CommError::Broken { .. }))));
        // An empty one (a tag of MARK) is complete at once.
        let got = l.announced(9, 4, 1, 0, MARK);
        assert!(matches!(got, Some(Ok((Status { source: 4, tag: MARK, len: 0 }, _)))), "{got:?}");
    }

    #[test]
    fn cleared_sends_go_one_after_another_per_peer() {
        let mut l = Large::default();
        for (id, to) in [(1, 2), (2, 2), (3, 5)] {
            l.outs.push(Out { id, to, tag: 0, total: 1, phase: Phase::Announced, body: Body::Owned(VecDeque::new()) });
        }
        // Cleared out of order: the order of clearances counts.
        l.cleared(2, 2);
        l.cleared(2, 1);
        l.cleared(5, 3);
        // A clearance of nothing listed (given up), or from the wrong peer, is ignored.
        l.cleared(2, 99);
        l.cleared(5, 1);
        assert_eq!(l.streams[&2], VecDeque::from([2, 1]));
        assert_eq!(l.streams[&5], VecDeque::from([3]));
        l.finish(l.outs.iter().position(|o| o.id == 2).unwrap());
        assert_eq!(l.streams[&2], VecDeque::from([1]));
        assert!(matches!(l.sent.get(&2), Some(Ok(()))));
        l.give_up(l.outs.iter().position(|o| o.id == 1).unwrap());
        assert!(!l.streams.contains_key(&2));
        assert_eq!(frame(&l.control[0].1), Frame::Withdraw { id: 1 });
        assert_eq!(l.control[0].0, 2);
    }
}
