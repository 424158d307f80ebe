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
//! copies its data and completes as soon as the data is queued.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bulkwire_proto::SendError;
use bulkwire_runtime::{Engine, Inbound, Runtime, RuntimeError};

/// Channel of application messages.
const USER: u16 = 0;
/// Channel of the library's own collective traffic, so it never meets the
/// application's receives.
const COLLECTIVE: u16 = 1;
/// Bytes of tag after every application message: at the end, a receive
/// removes it by shortening the message instead of moving all of it.
const TAG_LEN: usize = 4;

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
    #[error("request was already completed")]
    Completed,
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// A non-blocking operation in progress.
#[derive(Debug)]
pub struct Request {
    state: RequestState,
}

#[derive(Debug)]
enum RequestState {
    /// A send waiting for buffer space.
    Send {
        to: u32,
        data: Vec<u8>,
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

#[derive(Debug, Default)]
struct Matching {
    posted: VecDeque<Posted>,
    done: HashMap<u64, (Status, Vec<u8>)>,
    next_id: u64,
    barrier_epoch: u32,
}

/// The job as this process sees it.
pub struct World {
    rt: Runtime,
    matching: Mutex<Matching>,
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
        // timeout, an isolated message only after 2^4.
        rt.with(|e| {
            let (ranks, me) = (e.endpoint.config().ranks, e.endpoint.config().rank);
            for peer in (0..ranks).filter(|&p| p != me) {
                e.endpoint.set_probe_by_pace(peer, USER, true);
            }
            Ok(())
        })?;
        Ok(World { rt, matching: Mutex::new(Matching::default()) })
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

    fn matching(&self) -> std::sync::MutexGuard<'_, Matching> {
        self.matching.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ----- sends -----------------------------------------------------------

    /// Sends `data` to `to` with `tag`; returns once the data is queued.
    pub fn send(&self, to: u32, tag: i32, data: &[u8]) -> Result<(), CommError> {
        self.wait(self.isend(to, tag, data)?).map(|_| ())
    }

    /// Starts a send.
    pub fn isend(&self, to: u32, tag: i32, data: &[u8]) -> Result<Request, CommError> {
        if to >= self.size() {
            return Err(CommError::NoSuchRank { to, size: self.size() });
        }
        let mut framed = Vec::with_capacity(data.len() + TAG_LEN);
        framed.extend_from_slice(data);
        framed.extend_from_slice(&tag.to_le_bytes());
        let mut state = RequestState::Send { to, data: framed };
        let queued = self.rt.with(|e| Ok(try_send(e, &mut state)))?.map_err(|err| self.send_error(err, data.len()))?;
        if queued {
            state = RequestState::Done(Some(Completion::Sent));
        }
        Ok(Request { state })
    }

    fn send_error(&self, err: SendError, len: usize) -> CommError {
        match err {
            SendError::TooLarge { max, .. } => CommError::TooLarge { len, max: max - TAG_LEN },
            SendError::NoSuchRank { to, ranks } => CommError::NoSuchRank { to, size: ranks },
            other => CommError::Runtime(RuntimeError::Stopped(other.to_string())),
        }
    }

    // ----- receives --------------------------------------------------------

    /// Receives the next message from `source` with `tag`.
    pub fn recv(&self, source: Source, tag: Tag) -> Result<(Status, Vec<u8>), CommError> {
        // With no receive posted before it, a blocking receive takes the
        // first matching message itself, without posting: no request to
        // file and find again (a good part of a receive's cost through
        // shared memory). Otherwise it waits its turn behind them.
        if self.matching().posted.is_empty() {
            if let Source::Rank(r) = source {
                if r >= self.size() {
                    return Err(CommError::NoSuchRank { to: r, size: self.size() });
                }
            }
            let me = self.rank();
            let mut failure = None;
            let got = self.rt.wait(|e| {
                if let Some(mut msg) = e.take(|msg| matches(source, tag, msg)) {
                    let tag = message_tag(&msg);
                    msg.data.truncate(msg.data.len() - TAG_LEN);
                    return Ok(Some(Some((Status { source: msg.from, tag, len: msg.data.len() }, msg.data))));
                }
                if let Some(why) = never_matched(e, source, me) {
                    failure = Some(CommError::NeverMatched { from: source, tag, why });
                    return Ok(Some(None));
                }
                Ok(None)
            })?;
            return match (got, failure) {
                (Some(received), _) => Ok(received),
                (None, Some(err)) => Err(err),
                (None, None) => unreachable!("a wait that ends without a message says why"),
            };
        }
        match self.wait(self.irecv(source, tag)?)? {
            Completion::Received(status, data) => Ok((status, data)),
            Completion::Sent => unreachable!("a receive request completes as a receive"),
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
    /// delivered after all.
    fn withdraw(&self, request: Request, err: CommError) -> Result<Completion, CommError> {
        if let RequestState::Recv { id } = request.state {
            let mut m = self.matching();
            if let Some((status, data)) = m.done.remove(&id) {
                return Ok(Completion::Received(status, data));
            }
            m.posted.retain(|p| p.id != id);
        }
        Err(err)
    }

    fn step(&self, e: &mut Engine, state: &mut RequestState) -> Result<Option<Completion>, CommError> {
        match state {
            RequestState::Send { .. } => match try_send(e, state).map_err(|err| self.send_error(err, 0))? {
                true => {
                    *state = RequestState::Done(None);
                    Ok(Some(Completion::Sent))
                }
                false => Ok(None),
            },
            RequestState::Recv { id } => {
                let id = *id;
                let mut m = self.matching();
                match_posted(&mut m, e);
                if let Some((status, data)) = m.done.remove(&id) {
                    *state = RequestState::Done(None);
                    return Ok(Some(Completion::Received(status, data)));
                }
                let posted = m.posted.iter().find(|p| p.id == id).expect("a pending receive is posted");
                if let Some(why) = never_matched(e, posted.source, self.rank()) {
                    return Err(CommError::NeverMatched { from: posted.source, tag: posted.tag, why });
                }
                Ok(None)
            }
            RequestState::Done(_) => Err(CommError::Completed),
        }
    }

    // ----- collectives -----------------------------------------------------

    /// Returns when every rank has entered the barrier (dissemination
    /// algorithm: ⌈log2 p⌉ rounds of one message each way).
    pub fn barrier(&self) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
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
            self.rt.wait(|e| {
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

    /// Leaves the job: waits until every message sent has been delivered and
    /// every rank has finished.
    pub fn finalize(self) -> Result<(), CommError> {
        Ok(self.rt.finish()?)
    }

    /// Tells the launcher this rank failed; the job stops with `reason`.
    pub fn abort(&self, reason: &str) {
        self.rt.fail(reason);
    }
}

/// Queues a pending send if there is room; `Ok(true)` once it is queued.
fn try_send(e: &mut Engine, state: &mut RequestState) -> Result<bool, SendError> {
    let RequestState::Send { to, data } = state else { return Ok(false) };
    match e.check_send(*to, USER, data.len()) {
        Ok(()) => {
            e.send_owned(*to, USER, std::mem::take(data))?;
            Ok(true)
        }
        Err(SendError::WouldBlock) => Ok(false),
        Err(other) => Err(other),
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
    let tag_ok = match tag {
        Tag::Any => true,
        Tag::Is(t) => message_tag(m) == t,
    };
    source_ok && tag_ok
}

fn message_tag(m: &Inbound) -> i32 {
    let at = m.data.len() - TAG_LEN;
    i32::from_le_bytes(m.data[at..].try_into().expect("length checked"))
}

/// Gives inbox messages to posted receives: each receive, in the order it
/// was posted, takes the earliest matching message.
fn match_posted(m: &mut Matching, e: &mut Engine) {
    let mut index = 0;
    while index < m.posted.len() {
        let p = &m.posted[index];
        let (source, tag, id) = (p.source, p.tag, p.id);
        match e.take(|msg| matches(source, tag, msg)) {
            Some(mut msg) => {
                let tag = message_tag(&msg);
                msg.data.truncate(msg.data.len() - TAG_LEN);
                let status = Status { source: msg.from, tag, len: msg.data.len() };
                m.done.insert(id, (status, msg.data));
                m.posted.remove(index);
            }
            None => index += 1,
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
