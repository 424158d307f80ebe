//! The sync, in the phases of seed 002 §3 and §4.4.
//!
//! `Bsp::superstep_end` reads like the specification: each phase is one
//! step below, numbered as in the crate documentation. What moves is
//! carried by the runtime's reliable channel number 2 (hole-filling
//! retransmission, seed 002 §4.3), in three kinds of message:
//!
//! | kind | after the header (kind u8, superstep u64) |
//! | --- | --- |
//! | reduce | round u32, the [`Reduction`] so far |
//! | counts | the sender's [`Counts`]: its get requests (sent only by askers) |
//! | data | last u8 (below), a piece of the stream |
//!
//! A data piece's `last` is 0 when more of the stream follows, [`LAST`] on
//! its last piece, and [`EAGER_LAST`] on the last piece of a stream sent
//! before the barrier (on one host, see [`Bsp::eager`]): whole unless the
//! receiver asked for gets, whose replies follow after the barrier.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use bulkwire_proto::SendError;
use bulkwire_runtime::{Engine, Runtime};
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

use crate::error::{BspError, Call, Reason};
use crate::landing::{Areas, Fed, Lander};
use crate::pacing::Pacer;
use crate::reduction::{Barrier, Dissemination, Reduction};
use crate::registry::{Area, Registry};
use crate::repackaging::{self, Counts, OutStream, Record, DATA_HEADER};
use crate::schedule;
use crate::schedule::PerProcess;
use crate::stats::SuperstepProfile;
use crate::{pacing, Bsp, GetTarget, Queue};
use bulkwire_runtime::PostKind;

/// The runtime channel of bsp's supersteps (0 and 1 are comm's).
pub(crate) const CHANNEL: u16 = 2;

const REDUCE: u8 = 1;
const COUNTS: u8 = 2;
const DATA: u8 = 3;
/// "I have read the direct puts you sent me in this superstep."
const READ_DONE: u8 = 4;
/// A data piece ends its stream.
const LAST: u8 = 1;
/// A data piece sent before the barrier ends its stream, unless the
/// receiver asked the sender for gets: their replies follow.
const EAGER_LAST: u8 = 2;
const HEADER: usize = 1 + 8;
/// A data message's headers are the header and the piece's `last` mark:
/// the room the stream format keeps for them must be exactly that.
const _: () = assert!(DATA_HEADER == HEADER + 1);
/// Supersteps in a row of total exchanges sent before the barrier after
/// which the barrier takes one round (see `Bsp::reduce`).
const ONE_ROUND_AFTER: u32 = 2;

/// A received stream: the data pieces of one sender, in order. The first
/// piece's message becomes the stream as it is, its headers skipped rather
/// than copied off (a stream of one piece, as on one host, is then never
/// copied). A later piece that fills at least half of its buffer (a
/// datagram of loopback's size, a large piece through shared memory, the
/// piece of an Ethernet-sized datagram that the protocol copied out of a
/// coalesced read) stays in its buffer as a part of its own, and records
/// are read across the parts; a piece under 1 KiB, or one in a buffer
/// more than twice its size (a small datagram read alone into a buffer
/// for any datagram), is copied behind the last part.
///
/// Positions in the stream (the ranges of [`Stream::records`]) run from
/// `start` in the first buffer on through the parts, as if each part's
/// bytes followed the previous one's: [`Stream::flatten`] makes that so.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stream {
    bytes: Vec<u8>,
    /// Where the stream starts in `bytes`.
    start: usize,
    /// The later parts: each a buffer and where the stream goes on in it.
    more: Vec<(Vec<u8>, usize)>,
    /// The stream's bytes in those parts.
    more_len: usize,
}

/// A stream's parts, inline up to a few (most streams have one).
type Parts<'a> = SmallVec<[&'a [u8]; 4]>;

/// A received stream's parts, each with the position it starts at.
pub(crate) struct View<'a> {
    parts: SmallVec<[(usize, &'a [u8]); 4]>,
}

impl View<'_> {
    /// Copies the stream's bytes at positions `range` into `dst`, which is
    /// as long (the ranges of [`Stream::records`] are within the stream).
    pub fn copy_out(&self, range: Range<usize>, dst: &mut [u8]) {
        debug_assert_eq!(range.len(), dst.len());
        // The part that holds the range's first byte (or, for an empty
        // range, any part before it).
        let first = self.parts.partition_point(|&(at, _)| at <= range.start).saturating_sub(1);
        for &(at, part) in &self.parts[first..] {
            if at >= range.end {
                break;
            }
            let (lo, hi) = (range.start.max(at), range.end.min(at + part.len()));
            if lo < hi {
                dst[lo - range.start..hi - range.start].copy_from_slice(&part[lo - at..hi - at]);
            }
        }
    }
}

/// A piece stays in its buffer from this many bytes, if it fills at least
/// half of it; a smaller one costs less to copy than a part costs to keep.
/// A datagram's piece between hosts (1,402 B at an MTU of 1,500, in a
/// buffer of its own) is kept: copied into a larger part, as it was with
/// this at 8 KiB, a put of 64 MiB each way between two test-bed hosts at
/// 10 Gbit/s ran at 627-832 MB/s, falling to about 630 in three runs of
/// eight, against 773-800 kept (eight alternating pairs, `bench --hosts …
/// put --sizes 67108864 --repetitions 5 --no-mpi`); the total exchange of
/// 16 KiB per pair among 8 hosts took 1,071-1,461 us by the paced latin
/// square against 1,019-1,091 (four pairs).
const OWN_PART_FROM: usize = 1 << 10;
/// The room of a part started for smaller pieces: the stream's length so
/// far, within these bounds.
const COPIED_PART: usize = 64 << 10;
const COPIED_PART_MAX: usize = 4 << 20;

impl Stream {
    /// The stream `bytes[start..]` (this process's own puts).
    pub fn new(bytes: Vec<u8>, start: usize) -> Stream {
        Stream { bytes, start, more: Vec::new(), more_len: 0 }
    }

    /// Appends the data of a piece: `message` from `start` on. Returns the
    /// message's buffer where the piece was copied out of it.
    fn push(&mut self, message: Vec<u8>, start: usize) -> Option<Vec<u8>> {
        if self.len() == 0 {
            *self = Stream::new(message, start);
            return None;
        }
        let piece = message.len() - start;
        if piece >= OWN_PART_FROM && 2 * piece >= message.capacity() {
            self.more.push((message, start));
            self.more_len += piece;
            return None;
        }
        let so_far = self.len();
        let first = self.more.is_empty();
        let last = match self.more.last_mut() {
            Some((last, _)) => last,
            None => &mut self.bytes,
        };
        // Behind the last part while it has room (or while the stream is
        // small enough that growing its one buffer copies little); else
        // into a new part, as large as the stream so far within bounds, so
        // that no part is ever copied to grow.
        if last.capacity() - last.len() >= piece || (first && so_far < OWN_PART_FROM) {
            last.extend_from_slice(&message[start..]);
            self.more_len += if first { 0 } else { piece };
        } else {
            let mut part = Vec::with_capacity(piece.max(so_far.clamp(COPIED_PART, COPIED_PART_MAX)));
            part.extend_from_slice(&message[start..]);
            self.more.push((part, 0));
            self.more_len += piece;
        }
        Some(message)
    }

    pub fn len(&self) -> usize {
        self.bytes.len() - self.start + self.more_len
    }

    #[cfg(test)]
    fn content(&self) -> Vec<u8> {
        self.parts().concat()
    }

    /// The stream's bytes, part by part.
    fn parts(&self) -> Parts<'_> {
        std::iter::once(&self.bytes[self.start..]).chain(self.more.iter().map(|(b, s)| &b[*s..])).collect()
    }

    /// The stream's records, their ranges in the stream's positions.
    #[cfg(test)]
    pub fn records(&self) -> Result<Vec<Record>, String> {
        let mut records = Vec::new();
        self.records_into(&mut records)?;
        Ok(records)
    }

    /// [`Stream::records`] into `records`, emptied first.
    pub fn records_into(&self, records: &mut Vec<Record>) -> Result<(), String> {
        records.clear();
        if self.start > self.bytes.len() {
            return Err("a stream that starts past its end".into());
        }
        repackaging::parse_parts_into(&self.parts(), self.start, records)
    }

    /// The stream's parts by position, for copying out of.
    pub fn view(&self) -> View<'_> {
        let mut at = self.start;
        let parts = self
            .parts()
            .into_iter()
            .map(|part| {
                at += part.len();
                (at - part.len(), part)
            })
            .collect();
        View { parts }
    }

    /// Joins the parts into the first buffer: the stream's positions then
    /// index [`Stream::bytes`] (the emptied parts' buffers are kept for
    /// [`Stream::into_first`]).
    pub fn flatten(&mut self) {
        self.bytes.reserve(self.more_len);
        for (part, start) in &mut self.more {
            self.bytes.extend_from_slice(&part[*start..]);
            part.clear();
            *start = 0;
        }
        self.more_len = 0;
    }

    /// The first buffer, which the positions index once the stream is
    /// flat ([`Stream::flatten`]).
    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The buffers: the first, then the parts'.
    #[cfg(test)]
    pub fn into_buffers(self) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut parts = Vec::new();
        let first = self.into_first(&mut parts);
        (first, parts)
    }

    /// The first buffer; the parts' are appended to `parts`.
    pub fn into_first(self, parts: &mut Vec<Vec<u8>>) -> Vec<u8> {
        parts.extend(self.more.into_iter().map(|(b, _)| b));
        self.bytes
    }
}

/// What has arrived for the syncs, sorted by kind.
#[derive(Debug)]
pub(crate) struct Net {
    /// Reductions by (superstep, round, sender): a fast process may already
    /// be in the next superstep's barrier.
    reduce: HashMap<(u64, u32, u32), (Vec<u8>, usize)>,
    counts: HashMap<(u64, u32), Vec<u8>>,
    /// The current superstep's streams by sender, and the `last` of each
    /// one's latest piece.
    streams: Vec<Stream>,
    ends: Vec<u8>,
    /// The same for the next superstep: a process that has finished this
    /// sync may send its next stream eagerly while this one still waits.
    next_streams: Vec<Stream>,
    next_ends: Vec<u8>,
    /// The vector of streams the last sync landed, emptied, for the
    /// next superstep's ([`Net::take_streams`], [`Net::give_back_streams`]).
    spare_streams: Vec<Stream>,
    /// A malformed message: the sync fails with it.
    broken: Option<Reason>,
    /// Messages to send as soon as the runtime has room, in order: every
    /// wait of the sync pushes them first.
    outgoing: VecDeque<Outgoing>,
    /// The largest data piece after its headers, and the packets a
    /// receiver buffers (the runtime's configuration, read once).
    max_payload: usize,
    receiver_packets: usize,
    /// Buffers of pieces copied as they were sorted, given back to the
    /// runtime at the next chance to read datagrams into
    /// ([`Engine::recycle`]).
    spare: Vec<Vec<u8>>,
    /// Buffers of the streams that landed, given back likewise, all at
    /// once ([`Engine::recycle_many`]): the runtime keeps as many for the
    /// next superstep's streams.
    landed: Vec<Vec<u8>>,
    /// One past the latest superstep in which each process said it had
    /// read this one's direct puts.
    read_done: Vec<u64>,
    /// The buffer of the last large stream from each sender, emptied, for
    /// its next one: otherwise a stream of many pieces grows in new pages,
    /// each faulted in and cleared by the kernel, and is copied as it grows.
    kept: Vec<Option<Vec<u8>>>,
    /// The senders whose streams land as they come in this superstep's
    /// transfer (see `landing`), and their pieces sorted but not yet
    /// landed, in order: `data[start..]`, or, for a piece whose bytes were
    /// read straight into the area of the put they belong to (`Net::aim`),
    /// how many there were.
    landers: Vec<Option<Lander>>,
    early: Vec<Early>,
    /// Small buffers of landed streams, for streams that ride in board
    /// posts: at most one per process.
    board_buffers: Vec<Vec<u8>>,
    /// Whether the runtime was last told to read into an area
    /// ([`Net::aim`]): the transfer then ends by telling it to stop.
    aimed: bool,
    /// Bytes of puts landed so in this superstep.
    landed_early: u64,
    /// The most buffers given back at once so far (see `Net::pump`).
    most_given: usize,
}

impl Net {
    pub fn new(p: u32, max_payload: usize, receiver_packets: usize) -> Net {
        Net {
            reduce: HashMap::default(),
            counts: HashMap::default(),
            streams: vec![Stream::default(); p as usize],
            ends: vec![0; p as usize],
            next_streams: vec![Stream::default(); p as usize],
            next_ends: vec![0; p as usize],
            spare_streams: Vec::new(),
            broken: None,
            outgoing: VecDeque::new(),
            max_payload,
            receiver_packets,
            spare: Vec::new(),
            landed: Vec::new(),
            read_done: vec![0; p as usize],
            kept: vec![None; p as usize],
            landers: (0..p).map(|_| None).collect(),
            early: Vec::new(),
            aimed: false,
            board_buffers: Vec::new(),
            landed_early: 0,
            most_given: 0,
        }
    }

    /// Queues `message` for `to`.
    fn queue(&mut self, to: u32, message: Vec<u8>) {
        self.outgoing.push_back(Outgoing { to, message, framed: false });
    }

    /// Hands the runtime what it has room for, in order.
    fn push_outgoing(&mut self, e: &mut Engine) -> Result<(), Reason> {
        while let Some(Outgoing { to, message, framed }) = self.outgoing.pop_front() {
            if let Some(message) = try_send(e, to, message, framed)? {
                self.outgoing.push_front(Outgoing { to, message, framed });
                break;
            }
        }
        Ok(())
    }

    /// Sorts every bsp message the runtime holds (first giving back the
    /// buffers of landed streams).
    fn pump(&mut self, e: &mut Engine, superstep: u64) {
        // Pieces that land as they arrive give their buffers back here, as
        // many as were read since the last pump, while as many more were
        // read: the runtime keeps twice the most given back at once, not
        // only two batches' worth (fewer took new buffers every superstep).
        if self.spare.len() > self.most_given {
            self.most_given = self.spare.len();
            e.keep_receive_buffers(2 * self.most_given);
        }
        for buffer in self.spare.drain(..) {
            e.recycle(buffer);
        }
        if !self.landed.is_empty() {
            e.recycle_many(self.landed.drain(..));
        }
        // A computation's begin message (see `agree_on_maxprocs`) is the
        // next computation's, on a runtime that outlives this one: left
        // for it.
        while let Some(m) = e.take(|m| m.channel == CHANNEL && m.data.get(m.start) != Some(&crate::BEGIN)) {
            let from = m.from;
            if let Err(why) = self.file(m.from, m.data, m.start, m.aimed, superstep) {
                self.broken.get_or_insert(Reason::Malformed { peer: from, why });
            }
        }
        self.aim(e);
    }

    /// Where a stream lands as it comes and is inside a put whose area
    /// lies at an address, has the runtime read the next pieces of that
    /// put's data that fill a datagram straight to where they go
    /// (`Engine::aim`): past the bytes of the pieces sorted and not yet
    /// landed, which every piece delivered is (the runtime aims only when
    /// the inbox holds none of the stream's). Elsewhere, no aim. A
    /// datagram read there that is not the next piece leaves its bytes
    /// within the put's data, which the put's own bytes overwrite as they
    /// land.
    fn aim(&mut self, e: &mut Engine) {
        let early = &self.early;
        let target = self.landers.iter().enumerate().find_map(|(j, lander)| {
            let (addr, left) = lander.as_ref()?.place()?;
            let pending: usize = early.iter().filter(|x| x.from as usize == j).map(Early::len).sum();
            (left > pending).then(|| (j as u32, addr + pending, left - pending))
        });
        match target {
            // SAFETY: the put's data is `left` bytes at `addr` in an area
            // registered by address, which the caller of the sync keeps
            // while it runs and nothing else in this process touches then;
            // the bytes before `addr + pending` are the ones the lander
            // writes (out of the engine's lock, apart from these), and the
            // aim ends when the transfer does (`Engine::unaim` after it).
            Some((from, addr, len)) => unsafe {
                e.aim(from, CHANNEL, DATA_HEADER, addr as *mut u8, len);
                self.aimed = true;
            },
            None => {
                e.unaim();
                self.aimed = false;
            }
        }
    }

    /// Keeps `buffer`, a landed stream's from `from`, for that sender's next
    /// stream if it is large, or gives it back to the runtime.
    fn keep(&mut self, from: usize, mut buffer: Vec<u8>) {
        if buffer.capacity() >= repackaging::REUSE_FROM && from < self.kept.len() {
            buffer.clear();
            self.kept[from] = Some(buffer);
        } else if buffer.capacity() <= BOARD_BUFFER_MAX && self.board_buffers.len() < self.streams.len() {
            // For a stream that rides in a board post (`file_board_stream`).
            self.board_buffers.push(buffer);
        } else {
            self.landed.push(buffer);
        }
    }

    /// Whether the stream from `from` is whole; `asked`: this process asked
    /// `from` for gets, whose replies end it.
    fn whole(&self, from: usize, asked: bool) -> bool {
        self.ends[from] == LAST || (self.ends[from] == EAGER_LAST && !asked)
    }

    /// Files `bytes`, the stream that `from` posted on the board to this
    /// process, as the start of its stream of this superstep: all of it,
    /// sent before the barrier (get replies, after it, come behind it as
    /// messages, which may already have come).
    fn file_board_stream(&mut self, from: usize, bytes: &[u8]) -> Result<(), String> {
        if from >= self.streams.len() {
            return Err("a stream from a process outside the job".into());
        }
        if self.ends[from] == EAGER_LAST {
            return Err("a stream both on the board and sent before the barrier".into());
        }
        let mut buffer = match self.board_buffers.pop() {
            Some(b) if b.capacity() >= bytes.len() => b,
            other => {
                self.landed.extend(other);
                Vec::with_capacity(bytes.len())
            }
        };
        buffer.clear();
        buffer.extend_from_slice(bytes);
        let after = std::mem::replace(&mut self.streams[from], Stream::new(buffer, 0));
        let Stream { bytes: first, start, more, .. } = after;
        for (part, at) in std::iter::once((first, start)).chain(more).filter(|(b, at)| b.len() > *at) {
            if let Some(copied) = self.streams[from].push(part, at) {
                self.spare.push(copied);
            }
        }
        if self.ends[from] == 0 {
            self.ends[from] = EAGER_LAST;
        }
        Ok(())
    }

    /// Takes this superstep's streams, making the next superstep's the
    /// current ones.
    fn take_streams(&mut self) -> Vec<Stream> {
        let p = self.streams.len();
        std::mem::swap(&mut self.ends, &mut self.next_ends);
        self.next_ends.fill(0);
        let mut spare = std::mem::take(&mut self.spare_streams);
        spare.clear();
        spare.resize_with(p, Stream::default);
        let next = std::mem::replace(&mut self.next_streams, spare);
        std::mem::replace(&mut self.streams, next)
    }

    /// Keeps the vector [`Net::take_streams`] returned, once its streams
    /// are gone, for the next superstep's.
    fn give_back_streams(&mut self, streams: Vec<Stream>) {
        debug_assert!(streams.is_empty());
        self.spare_streams = streams;
    }

    /// Starts landing the streams of `senders` as they come, first what
    /// has come of them already.
    fn start_landing(&mut self, senders: &[usize], areas: &mut impl Areas) {
        self.landed_early = 0;
        for &j in senders {
            let mut stream = std::mem::take(&mut self.streams[j]);
            let mut lander = Lander::default();
            // Where the lander stopped, if it did: at a record's start in
            // the stream's first part, from where the stream goes on as it
            // is; else the rest of the stream, copied (a stream that came
            // in parts before the transfer and carries more than puts).
            let mut at_first: Option<usize> = None;
            let mut rest: Option<Vec<u8>> = None;
            for (i, part) in stream.parts().into_iter().enumerate() {
                match &mut rest {
                    Some(rest) => rest.extend_from_slice(part),
                    None => match lander.feed(part, areas) {
                        Fed::All => {}
                        Fed::Stopped { header, at } if i == 0 && header.is_empty() => {
                            at_first = Some(at);
                            break;
                        }
                        Fed::Stopped { header, at } => {
                            let mut r = header;
                            r.extend_from_slice(&part[at..]);
                            rest = Some(r);
                        }
                    },
                }
            }
            if let Some(at) = at_first {
                self.landed_early += lander.landed;
                stream.start += at;
                self.streams[j] = stream;
                continue;
            }
            // Given back one by one, as landed pieces' are (see `pump`).
            let first = stream.into_first(&mut self.spare);
            if first.capacity() > 0 {
                self.spare.push(first);
            }
            match rest {
                Some(rest) => {
                    self.landed_early += lander.landed;
                    self.streams[j] = Stream::new(rest, 0);
                }
                None => self.landers[j] = Some(lander),
            }
        }
    }

    /// Lands the pieces sorted for the landers, in order; a stream whose
    /// lander stopped goes on as a stream from there.
    fn land_early(&mut self, areas: &mut impl Areas) {
        let mut early = std::mem::take(&mut self.early);
        for Early { from, data, start, aimed } in early.drain(..) {
            let j = from as usize;
            if aimed > 0 {
                // Read into the put's area where the lander stood (see
                // `Net::aim`): between those bytes and the lander there
                // were only pieces of the same put.
                if !self.landers[j].as_mut().is_some_and(|l| l.skip(aimed)) {
                    self.broken.get_or_insert(Reason::Malformed {
                        peer: from,
                        why: "a piece read in place outside the put it was read for".into(),
                    });
                }
                continue;
            }
            let fed = match &mut self.landers[j] {
                Some(lander) => lander.feed(&data[start..], areas),
                None => Fed::Stopped { header: Vec::new(), at: 0 },
            };
            let (data, start) = match fed {
                Fed::All => {
                    self.spare.push(data);
                    continue;
                }
                Fed::Stopped { header, at } => {
                    if let Some(lander) = self.landers[j].take() {
                        self.landed_early += lander.landed;
                    }
                    if header.is_empty() {
                        (data, start + at)
                    } else {
                        let mut rest = header;
                        rest.extend_from_slice(&data[start + at..]);
                        self.spare.push(data);
                        (rest, 0)
                    }
                }
            };
            if let Some(copied) = self.streams[j].push(data, start) {
                self.spare.push(copied);
            }
        }
        self.early = early;
    }

    /// Ends this superstep's landing as pieces come: the bytes landed so.
    /// A stream that ended inside a put is malformed.
    fn finish_landing(&mut self) -> Result<u64, Reason> {
        let mut broken = None;
        for (j, lander) in self.landers.iter_mut().enumerate() {
            if let Some(lander) = lander.take() {
                self.landed_early += lander.landed;
                if !lander.between_records() {
                    broken.get_or_insert(Reason::Malformed {
                        peer: j as u32,
                        why: "a stream that ends inside a put".into(),
                    });
                }
            }
        }
        // Left only by a transfer that failed.
        self.early.clear();
        broken.map_or(Ok(self.landed_early), Err)
    }

    /// Files the message `data[start..]` from `from`.
    #[cfg(test)]
    fn sort(&mut self, from: u32, data: Vec<u8>, start: usize, superstep: u64) -> Result<(), String> {
        self.file(from, data, start, 0, superstep)
    }

    /// Files the message from `from` that is `data[start..]` and, where it
    /// was read in place (`Net::aim`), `aimed` more bytes already in the
    /// area of the put they belong to.
    fn file(&mut self, from: u32, data: Vec<u8>, start: usize, aimed: usize, superstep: u64) -> Result<(), String> {
        let m = data.get(start..).unwrap_or_default();
        if m.len() < HEADER || from as usize >= self.streams.len() {
            return Err("a message too short for its header".into());
        }
        if aimed > 0 && (m.len() != DATA_HEADER || m[0] != DATA) {
            return Err("a message read in place that is no data piece".into());
        }
        let step = u64::from_le_bytes(m[1..HEADER].try_into().expect("8 bytes"));
        match m[0] {
            REDUCE if m.len() >= HEADER + 4 => {
                let round = u32::from_le_bytes(m[HEADER..HEADER + 4].try_into().expect("4 bytes"));
                // Kept as it came: the reduction is read where it lies.
                self.reduce.insert((step, round, from), (data, start + HEADER + 4));
            }
            COUNTS => {
                self.counts.insert((step, from), m[HEADER..].to_vec());
            }
            READ_DONE => {
                let done = &mut self.read_done[from as usize];
                *done = (*done).max(step.saturating_add(1));
            }
            DATA if m.len() >= DATA_HEADER && (step == superstep || step == superstep + 1) => {
                let (streams, ends) = if step == superstep {
                    (&mut self.streams, &mut self.ends)
                } else {
                    (&mut self.next_streams, &mut self.next_ends)
                };
                let last = m[HEADER];
                if last > EAGER_LAST {
                    return Err(format!("a data piece marked {last}"));
                }
                if ends[from as usize] == LAST {
                    return Err("data after the last piece of its stream".into());
                }
                ends[from as usize] = last;
                if step == superstep && self.landers[from as usize].is_some() {
                    self.early.push(Early { from, data, start: start + DATA_HEADER, aimed });
                    return Ok(());
                }
                if aimed > 0 {
                    return Err("a piece read in place where no stream lands".into());
                }
                let stream = &mut streams[from as usize];
                // The first piece of a stream of several, if small for its
                // buffer (see `Stream`): into the buffer of this sender's
                // last large stream, if there is one (see `Net::keep`),
                // instead of growing from the piece's own.
                let kept = &mut self.kept[from as usize];
                let small = 2 * (m.len() - DATA_HEADER) < data.capacity();
                if stream.len() == 0 && last == 0 && small && kept.is_some() {
                    let mut buf = kept.take().expect("checked");
                    buf.extend_from_slice(&data[start + DATA_HEADER..]);
                    *stream = Stream::new(buf, 0);
                    self.spare.push(data);
                } else if let Some(copied) = stream.push(data, start + DATA_HEADER) {
                    self.spare.push(copied);
                }
            }
            DATA => return Err(format!("data of superstep {step} in superstep {superstep}")),
            other => return Err(format!("unknown message kind {other}")),
        }
        Ok(())
    }
}

/// A piece of a stream that lands as it comes, sorted and not yet landed
/// (`Net::early`).
#[derive(Debug)]
struct Early {
    from: u32,
    data: Vec<u8>,
    start: usize,
    aimed: usize,
}

impl Early {
    /// The stream's bytes it carries.
    fn len(&self) -> usize {
        self.data.len() - self.start + self.aimed
    }
}

/// A message waiting for room in the runtime; `framed`: with room in
/// front for the protocol's record header (see [`OutStream::hand_off`]).
#[derive(Debug)]
struct Outgoing {
    to: u32,
    message: Vec<u8>,
    framed: bool,
}

/// One destination of the transfer as phases 4 and 5 planned it: where,
/// how many packets may be in flight, and at what rate (bits per second)
/// if the rate is paced.
#[derive(Clone, Copy, Debug)]
struct Visit {
    to: u32,
    window: usize,
    rate: Option<f64>,
}

fn header(kind: u8, superstep: u64, capacity: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER + capacity);
    m.push(kind);
    m.extend_from_slice(&superstep.to_le_bytes());
    m
}

/// The headers of a data message: a piece of a stream, marked 0,
/// [`LAST`] or [`EAGER_LAST`].
fn data_header(superstep: u64, last: u8) -> [u8; DATA_HEADER] {
    let mut h = [0; DATA_HEADER];
    h[0] = DATA;
    h[1..HEADER].copy_from_slice(&superstep.to_le_bytes());
    h[HEADER] = last;
    h
}

/// The most bytes that may follow a stream in its packet, so that its
/// buffer can take them without growing: a barrier's message with its
/// record header, in a job of `p` processes, at its longest.
pub(crate) fn shares_packet_with_stream(p: u32) -> usize {
    bulkwire_wire::RECORD_HEADER_LEN + HEADER + 4 + Reduction::max_encoded_len(p)
}

/// Bytes of a barrier message of an empty sync of `p` processes (no puts,
/// messages or gets, no registrations, the tag size unchanged): its header
/// and the reduction, as long as any process's in any round (the checks'
/// process numbers take the most bytes at process p − 1).
pub fn empty_sync_message_len(p: u32) -> usize {
    let last = p.saturating_sub(1);
    let reduction = Reduction::local(p.max(1), last, |_| false, 0, false, Registry::default().digest(), (0, 0))
        .eager_to_all(last, false);
    HEADER + 4 + reduction.encode().len()
}

/// A data message's headers, with room behind them for a piece of `len`
/// bytes.
fn data_message(superstep: u64, last: u8, len: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(DATA_HEADER + len);
    m.extend_from_slice(&data_header(superstep, last));
    m
}

/// The message that carries bytes `piece` of `stream`, marked `last_mark`
/// if the piece ends the stream (0 if not), and whether it is framed: the
/// stream's own buffer when the piece is all that is left of it, else a
/// copy of the piece.
fn piece_message(stream: &mut OutStream, piece: Range<usize>, superstep: u64, last_mark: u8) -> (Vec<u8>, bool) {
    let last = piece.end == stream.len();
    let mark = if last { last_mark } else { 0 };
    if last {
        if let Some(message) = stream.hand_off(piece.start, &data_header(superstep, mark)) {
            return (message, true);
        }
    }
    let mut message = data_message(superstep, mark, piece.len());
    stream.copy_range(piece, &mut message);
    (message, false)
}

/// The largest buffer kept for a stream that rides in a board post (a
/// post is smaller).
const BOARD_BUFFER_MAX: usize = 4096;

/// Bytes of a stream's entry in a board post besides the stream: its
/// destination and its length, u32 each.
const STREAM_ENTRY: usize = 8;

/// Room for streams in a board post of `p` processes: what the largest
/// reduction leaves of a post.
fn board_stream_room(p: u32) -> usize {
    bulkwire_runtime::POST_MAX.saturating_sub(4 + Reduction::max_encoded_len(p))
}

/// A board post's parts: the reduction, then the streams that ride in it.
/// The post is the reduction's length (u32), the reduction, then for each
/// stream its destination (u32), its length (u32) and its bytes.
fn split_post(post: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let len = post.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
    match len {
        Some(len) if post.len() - 4 >= len => Ok((&post[4..4 + len], &post[4 + len..])),
        _ => Err(format!("a board post of {} bytes shorter than its reduction", post.len())),
    }
}

/// The first stream of a board post's streams: its destination, its bytes,
/// and the streams after it.
fn next_board_stream(streams: &[u8]) -> Result<(u32, &[u8], &[u8]), String> {
    let field = |at: usize| streams.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let (Some(to), Some(len)) = (field(0), field(4)) else {
        return Err("a stream's entry in a board post cut short".into());
    };
    let rest = &streams[STREAM_ENTRY..];
    match rest.len() >= len as usize {
        true => Ok((to, &rest[..len as usize], &rest[len as usize..])),
        false => Err(format!("a stream of {len} bytes in a board post of {} left", rest.len())),
    }
}

/// Waits in the runtime until `step` returns `Some`, sorting what arrives
/// before each try. Whoever waits for a process that has left the job
/// learns it here instead of waiting forever.
fn wait<R>(
    rt: &Runtime,
    net: &mut Net,
    superstep: u64,
    mut step: impl FnMut(&mut Engine, &mut Net) -> Result<Option<R>, Reason>,
) -> Result<R, Reason> {
    let mut failure = None;
    let result = rt.wait_collective(|e| {
        net.pump(e, superstep);
        let outcome = match net.broken.take() {
            Some(reason) => Err(reason),
            None => net.push_outgoing(e).and_then(|()| step(e, net)),
        };
        match outcome {
            Ok(Some(r)) => Ok(Some(Some(r))),
            Ok(None) => Ok(None),
            Err(reason) => {
                failure = Some(reason);
                Ok(Some(None))
            }
        }
    });
    match result {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(failure.expect("a failed step says why")),
        Err(e) => Err(Reason::Runtime(e.to_string())),
    }
}

/// The data piece for a process on this host (through shared memory): one
/// system call of the receiver's reads it from this process's memory.
const SHM_PIECE: usize = 4 << 20;

/// Queues `message` for `to` if the runtime has room; gives it back if
/// not. A `framed` message has room in front for the protocol's record
/// header.
fn try_send(e: &mut Engine, to: u32, message: Vec<u8>, framed: bool) -> Result<Option<Vec<u8>>, Reason> {
    let headroom = if framed { bulkwire_wire::RECORD_HEADER_LEN } else { 0 };
    match e.check_send(to, CHANNEL, message.len() - headroom) {
        Ok(()) => {}
        Err(SendError::WouldBlock) => return Ok(Some(message)),
        Err(other) => return Err(Reason::Runtime(other.to_string())),
    }
    let sent = if framed { e.send_framed(to, CHANNEL, message) } else { e.send_owned(to, CHANNEL, message) };
    sent.map_err(|e| Reason::Runtime(e.to_string()))?;
    Ok(None)
}

/// Works on the engine once (it fails only when the job is stopping).
fn rt_with(rt: &Option<crate::Held>, f: impl FnOnce(&mut Engine)) -> Result<(), Reason> {
    let rt = rt.as_ref().expect("the runtime is there until end");
    rt.with(|e| {
        f(e);
        Ok(())
    })
    .map_err(|e| Reason::Runtime(e.to_string()))
}

/// Called while this process waits for `peer`: fails if the peer has left
/// the job, and otherwise tells the protocol that more is awaited from it,
/// so that a lost last packet is prodded for (seed 002 §4.3).
fn waiting_for(e: &mut Engine, peer: u32, superstep: u64, phase: &'static str) -> Result<(), Reason> {
    gone(e, peer, superstep, phase)?;
    e.awaiting(peer, CHANNEL);
    Ok(())
}

fn gone(e: &Engine, peer: u32, superstep: u64, phase: &'static str) -> Result<(), Reason> {
    match e.finished.get(peer as usize) {
        Some(true) => Err(Reason::PeerGone { peer, superstep, phase }),
        _ => Ok(()),
    }
}

impl Bsp {
    /// The sync (and, with `call == End`, the last one). One that fails
    /// with pieces of hpputs' sources still lent to the runtime makes it
    /// read copies of them instead: the caller may change the sources once
    /// the sync has returned.
    pub(crate) fn superstep_end(&mut self, call: Call) -> Result<(), BspError> {
        let result = self.sync_once(call);
        if !self.loans.is_empty() {
            let loans = std::mem::take(&mut self.loans);
            if let Some(rt) = &self.rt {
                // Released whatever state the job is in.
                rt.release_loans(&loans);
            }
        }
        result
    }

    fn sync_once(&mut self, call: Call) -> Result<(), BspError> {
        // The clock only for the profile (two reads a sync otherwise).
        let entered = self.profile.is_some().then(Instant::now);
        let computation = entered.map(|t| t.duration_since(self.computation_started));
        let before = self.profile.is_some().then(|| self.packet_stats());
        let (me, p, s) = (self.pid, self.nprocs, self.superstep);
        let fail = |reason: Reason| BspError { pid: me, call, reason };

        // hpput sources may be read at any time until the sync ends: now.
        self.read_hpputs();
        // The counts go out now, before the barrier, to the processes asked
        // for gets: they learn the requests while the barrier runs, not in
        // a round of their own after it (phase 2 only collects them).
        for j in (0..p).filter(|&j| j != me && !self.outboxes[j as usize].requests.is_empty()) {
            let o = &self.outboxes[j as usize];
            let mut m = header(COUNTS, s, 64);
            Counts { requests: o.requests.clone() }.encode(&mut m);
            self.net.queue(j, m);
        }
        // Packets of this superstep carry its colour. Everything sent before
        // it (in the last sync) is proven delivered once this barrier
        // completes: every process has then finished that sync, having
        // consumed all it was sent. The marks below are where this
        // superstep's packets begin (the coarse-grained acknowledgement of
        // §4.4, applied after phase 1).
        let net = &mut self.net;
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        // (Peers through shared memory have neither: their messages never
        // touch the protocol's channels. How each peer is reached is fixed
        // when the runtime starts.)
        let udp = self.udp_peers.get_or_insert_with(|| {
            rt.with_no_send(|e| {
                Ok((0..p).filter(|&q| q != me && e.transport(q) == bulkwire_runtime::Transport::Udp).collect())
            })
            .unwrap_or_default()
        });
        let marks: Vec<(u32, u64)> = if udp.is_empty() && net.outgoing.is_empty() {
            Vec::new()
        } else {
            rt.with(|e| {
                let marks: Vec<(u32, u64)> =
                    udp.iter().map(|&q| (q, e.endpoint.next_sequence(q, CHANNEL).unwrap_or(0))).collect();
                for &peer in udp.iter() {
                    e.endpoint.set_colour(peer, CHANNEL, (s & 1) as u8);
                }
                Ok(net.push_outgoing(e).map(|()| marks))
            })
            .map_err(|e| fail(Reason::Runtime(e.to_string())))?
            .map_err(fail)?
        };

        // Phase 1: the barrier is the OR reduction of the communication
        // bit-matrix; the same messages carry what all must agree on.
        let out_bytes: u64 = (0..p).filter(|&q| q != me).map(|q| self.outboxes[q as usize].stream.delivers()).sum();
        let sends_to = |to| to != me && !self.outboxes[to as usize].stream.is_empty();
        let (ending, digest) = (call == Call::End, self.registry.digest());
        let tagsize = (self.next_tagsize as u64, self.tagsize_calls);
        let mut local = self.spare_reduction.take().unwrap_or_else(|| Box::new(Reduction::empty()));
        local.rewrite(p, me, sends_to, out_bytes, ending, digest, tagsize);
        local.ask(me, |to| to != me && !self.outboxes[to as usize].requests.is_empty());
        if self.registry.undecided() {
            local.set_undecided_registrations();
        }
        let eager = self.eager_streams(call);
        let eager_to_all = p > 1 && (0..p).all(|q| q == me || eager[q as usize] > 0);
        local.set_eager_to_all(me, eager_to_all);
        let global = self.reduce(local, &eager).map_err(fail)?;
        if !marks.is_empty() {
            rt_with(&self.rt, |e| {
                let now = e.now();
                for &(peer, mark) in &marks {
                    e.endpoint.acknowledge_below(now, peer, CHANNEL, mark);
                }
            })
            .map_err(fail)?;
        }
        if let Some(reason) = global.disagreement(s) {
            return Err(fail(reason));
        }
        if self.registry.undecided() {
            // Pops of NULL take the registrations the others popped (or,
            // where every process popped NULL, the most recent, as all did).
            let agreed = if global.registrations.any() { global.registrations } else { global.registrations_all };
            if !self.registry.settle(agreed.min.value) {
                let (_, pushes, pops) = self.registry.digest();
                let w = agreed.min;
                let detail = format!(
                    "process {me} popped NULL while several registrations of NULL were in effect, and no choice \
                     of them makes its {pushes} bsp_push_reg and {pops} bsp_pop_reg in superstep {s} match \
                     process {}'s {} and {}",
                    w.pid,
                    w.detail >> 32,
                    w.detail & 0xffff_ffff
                );
                return Err(fail(Reason::RegistrationsDiffer { detail }));
            }
        }
        self.eager_to_all_streak =
            if global.all_eager_to_all() { self.eager_to_all_streak.saturating_add(1) } else { 0 };

        // A superstep in which nobody puts, sends or asks anything of
        // another (every row of both matrices empty) and this process asks
        // no gets of itself has nothing to exchange, serve, schedule or
        // transfer: phases 2 to 6 are skipped (an empty sync of 2 processes
        // on one host: 0.68-0.72 us against 0.81-0.85).
        let quiet = global.quiet() && self.net.outgoing.is_empty() && self.outboxes[me as usize].requests.is_empty();
        let (h_in, h_out) = if quiet {
            (0, 0)
        } else {
            // Phase 2: the exchange of counts. The bytes every process
            // sends came with the barrier (the global load), and each
            // stream marks its last piece, so what is left to exchange is
            // the get requests, between the processes that ask and those
            // asked. They are served at once, so they read the values of
            // the end of the computation, before any put lands.
            let asked =
                (0..p).any(|j| j != me && global.asks(j, me)) || !self.outboxes[me as usize].requests.is_empty();
            if asked || !self.net.outgoing.is_empty() {
                let counts = self.exchange_counts(&global).map_err(fail)?;
                self.serve_gets(&counts).map_err(fail)?;
            }

            // Phase 3: repackaging. The streams were built as the calls were
            // made; here they are cut into pieces of one full datagram each.
            let packet = self.net.max_payload - bulkwire_wire::RECORD_HEADER_LEN - DATA_HEADER;

            // Phase 4: destination scheduling.
            let sends = |from: u32, to: u32| {
                if from == me {
                    !self.outboxes[to as usize].stream.is_empty()
                } else {
                    global.streams(from, to)
                }
            };
            let visits = schedule::schedule(self.order, me, p, s, sends);

            // Phase 5: pacing. Each visit may keep its share of the receiver's
            // buffer in flight and, where the link rate is known, inject at its
            // share of the receiver's port, its share being 1 / (senders at it
            // at once).
            let receiver_packets = self.net.receiver_packets;
            let plan: PerProcess<Visit> = visits
                .iter()
                .map(|v| Visit {
                    to: v.to,
                    window: pacing::window(receiver_packets, v.contention, self.pacing),
                    rate: self.rate.filter(|_| self.pacing).map(|link| pacing::share(link, v.contention)),
                })
                .collect();

            // Phase 6: the transfer. The protocol acknowledges by buffer pressure
            // (fine-grained): the piece that fills the pacing window asks for an
            // acknowledgement at once. The last piece to each destination does
            // not: the receiver knows it waits for it and prods if it is lost,
            // and the next superstep's barrier acknowledges it (coarse-grained).
            // Only in the last superstep, which no barrier follows, does it ask.
            // The first sender's puts land as they come, where that keeps
            // the standard's order (see `landing`).
            let expected: PerProcess<bool> = (0..p).map(|j| j != me && global.streams(j, me)).collect();
            self.keep_early_puts_off();
            let early = self.early_senders(&global);
            let areas = &mut Owned { registry: &self.registry, owned: &mut self.owned, off_limits: &self.off_limits };
            self.net.start_landing(&early, areas);
            let moved = self.transfer(&plan, packet, &expected, &eager, call == Call::End);
            // Nothing is read into an area after the transfer, whatever
            // became of it or of the job (see `Net::aim`).
            if let (Some(rt), true) = (&self.rt, std::mem::take(&mut self.net.aimed)) {
                rt.unaim();
            }
            let landed_early = self.net.finish_landing();
            moved.map_err(fail)?;
            let landed_early = landed_early.map_err(fail)?;
            self.landed_early += landed_early;
            let h_in: u64 = self.net.streams.iter().map(|s| s.len() as u64).sum::<u64>() + landed_early;
            let h_out: u64 = plan.iter().map(|v| self.outboxes[v.to as usize].stream.delivers()).sum();
            (h_in, h_out)
        };

        // Then the data lands: get replies, puts, sends; registrations take
        // effect; the new tag size applies. Direct puts are read from their
        // senders' memory, which each sender keeps until its readers say
        // they are done.
        let lent = self.land().map_err(fail)?;
        let lent_in = lent.referenced;
        self.await_reads(&lent).map_err(fail)?;
        self.await_loans().map_err(fail)?;
        // The buffers wait for the next superstep with direct puts, which
        // they replace (a superstep without them keeps them).
        if !lent.buffers.is_empty() {
            self.spare_lent = lent.buffers;
            self.spare_lent.iter_mut().for_each(Vec::clear);
        }
        self.staging.read();
        for index in self.registry.apply() {
            self.owned[index] = None;
        }
        self.tagsize = self.next_tagsize;
        self.tagsize_calls = 0;
        self.superstep += 1;
        if let Some(arena) = &mut self.arena {
            arena.used = 0;
        }

        // Phase 7: statistics (Table 5 at the end, the profile per superstep).
        if let (Some(before), true) = (before, self.profile.is_some()) {
            let after = self.packet_stats();
            let record = SuperstepProfile {
                pid: me,
                superstep: s,
                call: if call == Call::End { "end" } else { "sync" },
                order: self.order.name(),
                computation_s: computation.unwrap_or_default().as_secs_f64(),
                communication_s: entered.map(|t| t.elapsed()).unwrap_or_default().as_secs_f64(),
                h_out,
                h_in: h_in + lent_in,
                h_out_max: global.out_bytes.iter().copied().max().unwrap_or(0),
                packets_sent: after.sent - before.sent,
                packets_received: after.received - before.received,
                retransmissions: after.retransmissions - before.retransmissions,
                barrier_rounds: self.barrier_rounds,
            };
            if let Some(profile) = &mut self.profile {
                profile.write(&record).map_err(|e| fail(Reason::Runtime(format!("writing the profile: {e}"))))?;
            }
        }
        if self.profile.is_some() {
            self.computation_started = Instant::now();
        }
        self.keep_reduction(global);
        Ok(())
    }

    /// The senders whose streams land as their pieces arrive: puts land
    /// by sender in pid order, so only the first sender's (this process's
    /// own puts counting). Get replies land before puts, and an hpput's
    /// source is read while the sync runs: the lander stops at a put that
    /// would land on a get's target or an hpput's source
    /// ([`Owned::resolve`]), and that put and the rest land after the
    /// transfer as before. (The sources of other direct puts and of get
    /// replies are copies.)
    fn early_senders(&self, global: &Reduction) -> PerProcess<usize> {
        let me = self.pid;
        if !self.land_early {
            return PerProcess::new();
        }
        let own = !self.outboxes[me as usize].stream.is_empty();
        (0..self.nprocs)
            .find(|&j| if j == me { own } else { global.streams(j, me) })
            .filter(|&j| j != me)
            .map(|j| smallvec::smallvec![j as usize])
            .unwrap_or_default()
    }

    fn read_hpputs(&mut self) {
        self.off_limits.clear();
        for h in std::mem::take(&mut self.hpputs) {
            if self.reads_here(h.to, h.len) {
                self.off_limits.push(h.src..h.src + h.len);
                // The receiver reads the source itself, before this sync ends.
                let outbox = &mut self.outboxes[h.to as usize];
                outbox.stream.direct(true, h.slot, h.offset, h.len as u64, h.src as u64);
                outbox.direct = true;
                continue;
            }
            if h.len >= crate::DIRECT_PUT_MIN {
                // Sent from the source itself, lent to the runtime: the
                // sync ends once every packet that carries a piece of it is
                // acknowledged (`await_loans`), or, if it fails, once the
                // runtime has taken a copy (`release_loans`).
                // SAFETY: the caller of hpput_raw promised `len` readable
                // bytes at `src` until the sync ends.
                let source = unsafe { std::slice::from_raw_parts(h.src as *const u8, h.len) };
                // SAFETY: as above: the loan ends before the sync does.
                let lend = |e: &mut Engine| Ok(unsafe { e.lend_region(h.to, source) });
                if let Some(loan) = self.rt.as_ref().and_then(|rt| rt.with(lend).ok()).flatten() {
                    let tag = self.loans.len();
                    self.loans.push(loan);
                    self.off_limits.push(h.src..h.src + h.len);
                    // SAFETY: as above.
                    unsafe { self.outboxes[h.to as usize].stream.hpput_in_place(h.slot, h.offset, h.src, h.len, tag) };
                    continue;
                }
            }
            let data = if h.len > 0 {
                // SAFETY: the caller of hpput_raw promised `len` readable
                // bytes at `src` until the sync ends.
                unsafe { std::slice::from_raw_parts(h.src as *const u8, h.len) }
            } else {
                &[]
            };
            if let Some(at) = self.copy_to_arena(h.to, data) {
                self.outboxes[h.to as usize].stream.in_arena(true, h.slot, h.offset, data.len() as u64, at);
                continue;
            }
            self.outboxes[h.to as usize].stream.hpput(h.slot, h.offset, data);
        }
    }

    /// Adds the targets of this superstep's gets to the memory early puts
    /// keep off ([`Owned::resolve`]), and sorts it.
    fn keep_early_puts_off(&mut self) {
        for o in &self.outboxes {
            for (q, target) in o.requests.iter().zip(&o.targets) {
                let at = match *target {
                    GetTarget::Raw(addr) => Some(addr),
                    GetTarget::Owned { index, at } => {
                        self.owned.get(index).and_then(Option::as_ref).map(|a| a.bytes().as_ptr() as usize + at)
                    }
                };
                if let Some(at) = at {
                    self.off_limits.push(at..at + q.len as usize);
                }
            }
        }
        self.off_limits = merged(std::mem::take(&mut self.off_limits));
    }

    /// The bytes of each destination's stream that go before the barrier
    /// (all of it or none): streams of at most [`Bsp::eager`] bytes, and
    /// no more than the receiver's buffer can take from every other
    /// process at once; none in the last superstep (whose last pieces ask
    /// for acknowledgements), nor when pacing keeps to a link rate.
    fn eager_streams(&self, call: Call) -> PerProcess<usize> {
        let room = self.net.receiver_packets * self.net.max_payload / (self.nprocs as usize).saturating_sub(1).max(1);
        let limit = match call {
            Call::End => 0,
            _ if self.pacing && self.rate.is_some() => 0,
            _ => self.eager.min(room),
        };
        (0..self.nprocs as usize)
            .map(|j| match self.outboxes[j].stream.len() {
                len if j != self.pid as usize && len <= limit => len,
                _ => 0,
            })
            .collect()
    }

    /// Phase 1: the rounds of the dissemination reduction. The streams
    /// sent `eager`ly (bytes per destination) leave after the first
    /// round's messages, in the destination order.
    ///
    /// When in the last two supersteps every process sent a stream to
    /// every other one before the barrier (a total exchange of small
    /// streams), this one is expected to do the same, and the barrier
    /// takes one round: each process's message to each other one goes in
    /// the same datagram as the stream to it, so the round costs no
    /// datagram of its own, and no process waits for a second round. Every
    /// process knows this from the reductions, so all take the same shape.
    /// Two supersteps, not one, so that a program alternating exchanges
    /// with empty syncs keeps the usual shape for both. (With 8 processes
    /// on 2 cores, where the fan-out is 2 and the barrier two rounds, 3,000
    /// total exchanges of 16 KiB per pair back to back took 314-345 us each
    /// against 349-370 us without this, five alternating runs; without
    /// eager streams one round was no faster, and an empty sync in one
    /// round took three times as long, hence the prediction.)
    fn reduce(&mut self, mut acc: Box<Reduction>, eager: &[usize]) -> Result<Box<Reduction>, Reason> {
        let (me, p, s) = (self.pid, self.nprocs, self.superstep);
        // The eager streams go first: a stream in one piece then starts its
        // packet, as it must to travel in its own buffer, and the barrier's
        // message to the same process rides behind it.
        let packet = self.net.max_payload - bulkwire_wire::RECORD_HEADER_LEN - DATA_HEADER;
        let order =
            if eager.iter().any(|&e| e > 0) { schedule::rounds(self.order, me, p, s) } else { PerProcess::new() };
        // On the board, the eager streams that fit ride in this process's
        // post instead (see `reduce_board`).
        let board = self.barrier == Barrier::Board && p > 1 && self.board_streams;
        let mut room = if board { board_stream_room(p) } else { 0 };
        let mut on_board = PerProcess::<u32>::new();
        for to in order.into_iter().filter(|&to| eager[to as usize] > 0) {
            let stream = &mut self.outboxes[to as usize].stream;
            if board && STREAM_ENTRY + stream.len() <= room {
                room -= STREAM_ENTRY + stream.len();
                on_board.push(to);
                continue;
            }
            let mut offset = 0;
            while offset < stream.len() {
                let piece = repackaging::piece(offset, stream.len(), packet);
                offset = piece.end;
                let (message, framed) = piece_message(stream, piece, s, EAGER_LAST);
                debug_assert!(!framed || message.capacity() - message.len() >= shares_packet_with_stream(p));
                self.net.outgoing.push_back(Outgoing { to, message, framed });
            }
        }
        let fanout = match self.barrier {
            Barrier::Board => return self.reduce_board(acc, &on_board),
            _ if self.eager_to_all_streak >= ONE_ROUND_AFTER => p.saturating_sub(1),
            Barrier::Star => return self.reduce_star(acc),
            Barrier::Dissemination(k) => k,
        };
        let shape = Dissemination::new(p, fanout);
        self.barrier_rounds = shape.rounds();
        for round in 0..shape.rounds() {
            let partners: Vec<(u32, u32)> = shape.partners(me, round).collect();
            self.tell(round, &acc, partners.iter().map(|&(to, _)| to));
            let from: Vec<u32> = partners.iter().map(|&(_, from)| from).collect();
            self.hear(round, &from, |bytes| acc.merge_encoded(bytes))?;
        }
        Ok(acc)
    }

    /// The reduction as a star ([`Barrier::Star`]): every process sends
    /// its reduction to process 0, which merges them and sends the result,
    /// everyone's, back.
    fn reduce_star(&mut self, mut acc: Box<Reduction>) -> Result<Box<Reduction>, Reason> {
        const UP: u32 = 0;
        const DOWN: u32 = 1;
        let (me, p) = (self.pid, self.nprocs);
        self.barrier_rounds = if p > 1 { 2 } else { 0 };
        if me != 0 {
            self.tell(UP, &acc, [0]);
            let mut global = None;
            self.hear(DOWN, &[0], |bytes| {
                global = Some(Box::new(Reduction::decode(bytes, p)?));
                Ok(())
            })?;
            return Ok(global.expect("process 0 was heard"));
        }
        let others: Vec<u32> = (1..p).collect();
        self.hear(UP, &others, |bytes| acc.merge_encoded(bytes))?;
        self.tell(DOWN, &acc, others);
        Ok(acc)
    }

    /// The reduction on the board ([`Barrier::Board`]): every process
    /// posts its reduction in shared memory and reads everyone else's
    /// post, in one step, without a message. Where every post's reduction
    /// is what it was at the last barrier (a program repeating its pattern
    /// of communication, empty syncs), the merged reduction is the last
    /// one; else the posts are merged. The streams to `on_board` ride in
    /// the post behind the reduction ([`split_post`]): each reader takes
    /// the one to it, and no message carries them.
    fn reduce_board(&mut self, mut acc: Box<Reduction>, on_board: &[u32]) -> Result<Box<Reduction>, Reason> {
        let (me, p, s) = (self.pid, self.nprocs, self.superstep);
        self.barrier_rounds = u32::from(p > 1);
        if p == 1 {
            return Ok(acc);
        }
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        let memo = &mut self.board;
        memo.current = false;
        memo.posts.resize_with(p as usize, Vec::new);
        // This process's own reduction is encoded anew only where it
        // changed since the last barrier; the streams behind it are
        // written anew each time.
        let unchanged = memo.own.as_ref() == Some(&acc);
        let own = &mut memo.posts[me as usize];
        match split_post(own) {
            Ok((reduction, _)) if unchanged => own.truncate(4 + reduction.len()),
            _ => {
                own.clear();
                own.extend_from_slice(&[0; 4]);
                acc.encode_into(own);
                let len = (own.len() - 4) as u32;
                own[..4].copy_from_slice(&len.to_le_bytes());
                match &mut memo.own {
                    Some(kept) => kept.copy_from(&acc),
                    None => memo.own = Some(acc.clone()),
                }
            }
        }
        for &to in on_board {
            let stream = &self.outboxes[to as usize].stream;
            own.extend_from_slice(&to.to_le_bytes());
            own.extend_from_slice(&(stream.len() as u32).to_le_bytes());
            stream.copy_range(0..stream.len(), own);
        }
        // (A post sends nothing: it is written where the peers read it,
        // and those asleep are woken at once.)
        let seq = rt
            .with_no_send(|e| Ok(e.post(PostKind::BspSync, &memo.posts[me as usize])))
            .map_err(|e| Reason::Runtime(e.to_string()))?
            .map_err(|why| Reason::Runtime(format!("posting the barrier's reduction: {why}")))?;
        // Posts are read into a kept buffer, each swapped for the one it
        // replaces.
        let mut post = std::mem::take(&mut memo.scratch);
        let mut same = memo.merged.is_some() && unchanged;
        let mut heard = std::mem::take(&mut memo.heard);
        heard.clear();
        heard.extend((0..p).map(|j| j == me));
        let result = wait(rt, &mut self.net, s, |e, _| {
            let mut all = true;
            for j in 0..p {
                if heard[j as usize] {
                    continue;
                }
                match e.read_post(j, seq, PostKind::BspSync, &mut post) {
                    Ok(true) => {
                        same &= matches!(
                            (split_post(&memo.posts[j as usize]), split_post(&post)),
                            (Ok((old, _)), Ok((new, _))) if old == new
                        );
                        std::mem::swap(&mut memo.posts[j as usize], &mut post);
                        heard[j as usize] = true;
                    }
                    Ok(false) => {
                        waiting_for(e, j, s, "the barrier")?;
                        all = false;
                    }
                    Err(why) => return Err(Reason::Malformed { peer: j, why }),
                }
            }
            Ok(all.then_some(()))
        });
        memo.scratch = post;
        memo.heard = heard;
        result?;
        // The streams to this process that rode in the posts.
        for (j, post) in memo.posts.iter().enumerate().filter(|&(j, _)| j != me as usize) {
            let malformed = |why: String| Reason::Malformed { peer: j as u32, why };
            let (_, mut streams) = split_post(post).map_err(malformed)?;
            while !streams.is_empty() {
                let (to, stream, rest) = next_board_stream(streams).map_err(malformed)?;
                streams = rest;
                if to == me {
                    self.net.file_board_stream(j, stream).map_err(malformed)?;
                }
            }
        }
        if same {
            if let Some(merged) = memo.merged.take() {
                memo.current = true;
                self.spare_reduction = Some(acc);
                return Ok(merged);
            }
        }
        memo.merged = None;
        for (j, post) in memo.posts.iter().enumerate().filter(|&(j, _)| j != me as usize) {
            let (reduction, _) = split_post(post).map_err(|why| Reason::Malformed { peer: j as u32, why })?;
            acc.merge_encoded(reduction).map_err(|why| Reason::Malformed { peer: j as u32, why })?;
        }
        memo.current = true;
        Ok(acc)
    }

    /// Keeps the superstep's merged reduction, at the end of its sync: as
    /// the board's last merge if it is one (see [`BoardMemo`]), else for
    /// the next sync's own reduction to be written over.
    fn keep_reduction(&mut self, global: Box<Reduction>) {
        if std::mem::take(&mut self.board.current) {
            self.board.merged = Some(global);
        } else {
            self.spare_reduction = Some(global);
        }
    }

    /// Queues `acc` as this superstep's reduce message of `round` to `to`.
    fn tell(&mut self, round: u32, acc: &Reduction, to: impl IntoIterator<Item = u32>) {
        let mut message = header(REDUCE, self.superstep, 4 + 64);
        message.extend_from_slice(&round.to_le_bytes());
        acc.encode_into(&mut message);
        for to in to {
            self.net.queue(to, message.clone());
        }
    }

    /// Waits for the reduce messages of `round` from `from` and hands each
    /// encoded reduction to `take`, in the order of `from`.
    fn hear(
        &mut self,
        round: u32,
        from: &[u32],
        mut take: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), Reason> {
        let s = self.superstep;
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        let mut heard: Vec<Option<(Vec<u8>, usize)>> = vec![None; from.len()];
        wait(rt, &mut self.net, s, |e, net| {
            let mut all = true;
            for (slot, &from) in heard.iter_mut().zip(from).filter(|(h, _)| h.is_none()) {
                *slot = net.reduce.remove(&(s, round, from));
                if slot.is_none() {
                    waiting_for(e, from, s, "the barrier")?;
                    all = false;
                }
            }
            Ok(all.then_some(()))
        })?;
        for (message, &from) in heard.iter().zip(from) {
            let (bytes, at) = message.as_ref().expect("every process was heard");
            take(&bytes[*at..]).map_err(|why| Reason::Malformed { peer: from, why })?;
        }
        Ok(())
    }

    /// Phase 2: collects what every process that sends to this one
    /// announced (sent before the barrier) and finishes sending ours.
    fn exchange_counts(&mut self, global: &Reduction) -> Result<PerProcess<Option<Counts>>, Reason> {
        let (me, p, s) = (self.pid, self.nprocs, self.superstep);
        let mut got: PerProcess<Option<Counts>> = smallvec::smallvec![None; p as usize];
        let mine = &self.outboxes[me as usize];
        got[me as usize] = Some(Counts { requests: mine.requests.clone() });
        let senders: PerProcess<u32> = (0..p).filter(|&j| j != me && global.asks(j, me)).collect();
        if senders.is_empty() && self.net.outgoing.is_empty() {
            return Ok(got);
        }
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        wait(rt, &mut self.net, s, |e, net| {
            let mut missing = false;
            for &j in &senders {
                if got[j as usize].is_some() {
                    continue;
                }
                match net.counts.remove(&(s, j)) {
                    Some(bytes) => {
                        let c = Counts::decode(&bytes).map_err(|why| Reason::Malformed { peer: j, why })?;
                        got[j as usize] = Some(c);
                    }
                    None => {
                        waiting_for(e, j, s, "the exchange of counts")?;
                        missing = true;
                    }
                }
            }
            Ok((!missing && net.outgoing.is_empty()).then_some(()))
        })?;
        Ok(got)
    }

    /// Reads the areas that gets ask for and appends the replies to the
    /// askers' streams. No put has landed yet.
    fn serve_gets(&mut self, counts: &[Option<Counts>]) -> Result<(), Reason> {
        for (j, c) in counts.iter().enumerate() {
            let Some(c) = c else { continue };
            for q in &c.requests {
                let area =
                    self.registry.area(q.slot).ok_or(Reason::UnknownRegistration { slot: q.slot, owner: self.pid })?;
                let (offset, len) = self.check_access(area, q.slot, q.offset, q.len, || {
                    format!("{} by process {j}", if q.hp { "bsp_hpget" } else { "bsp_get" })
                })?;
                let data = read_area(&self.owned, area, offset, len);
                // From 256 KiB to a process on this host that reads this
                // one's memory: through the stage, as a direct put; from
                // 1 KiB: through the arena.
                if self.reads_here(j as u32, len) {
                    if let Some(addr) = self.staging.copy(&self.rt, data) {
                        self.outboxes[j].stream.reply_from(len as u64, addr);
                        self.outboxes[j].direct = true;
                        continue;
                    }
                }
                let stream = &mut self.outboxes[j].stream;
                match self.arena.as_mut().filter(|_| self.arena_readers[j]).and_then(|a| a.copy(self.superstep, data)) {
                    Some(at) => stream.reply_in_arena(data.len() as u64, at),
                    None => stream.reply(data),
                }
            }
        }
        Ok(())
    }

    /// Checks that `len` bytes at `offset` lie inside `area`.
    fn check_access(
        &self,
        area: Area,
        slot: u32,
        offset: u64,
        len: u64,
        access: impl FnOnce() -> String,
    ) -> Result<(usize, usize), Reason> {
        match offset.checked_add(len) {
            Some(end) if end <= area.len as u64 => Ok((offset as usize, len as usize)),
            _ => Err(Reason::OutOfBounds { access: access(), offset, len, size: area.len, owner: self.pid, slot }),
        }
    }

    /// Phase 6: sends the streams in schedule order, at most a window of
    /// packets in flight, and waits until every expected stream is whole.
    /// What went `eager`ly (bytes per destination) is not sent again. With
    /// `ask_last`, the last piece to each destination asks for an
    /// acknowledgement at once.
    fn transfer(
        &mut self,
        plan: &[Visit],
        packet: usize,
        expected: &[bool],
        eager: &[usize],
        ask_last: bool,
    ) -> Result<(), Reason> {
        let s = self.superstep;
        if plan.is_empty() && !expected.contains(&true) {
            return Ok(());
        }
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        let outboxes = &mut self.outboxes;
        let loans = &self.loans;
        let (registry, owned, off_limits) = (&self.registry, &mut self.owned, &self.off_limits);
        let asked: PerProcess<bool> = outboxes.iter().map(|o| !o.requests.is_empty()).collect();
        // Every stream went before the barrier, every one expected came
        // while it ran, and nothing waits to go or to land: a total
        // exchange of small streams has no transfer left, and no turn of
        // the runtime is needed to see so.
        let net = &self.net;
        if plan.iter().all(|v| eager[v.to as usize] == outboxes[v.to as usize].stream.len())
            && expected.iter().enumerate().all(|(j, &x)| !x || net.whole(j, asked[j]))
            && net.outgoing.is_empty()
            && net.early.is_empty()
            && net.broken.is_none()
        {
            return Ok(());
        }
        // Each visit starts after what went eagerly.
        let start = |visit: usize| plan.get(visit).map_or(0, |v| eager[v.to as usize]);
        let (mut visit, mut offset) = (0, start(0));
        let mut pacer: Option<Pacer> = None;
        loop {
            let done = wait(rt, &mut self.net, s, |e, net| {
                while let Some(&Visit { to, window, rate }) = plan.get(visit) {
                    let stream = &mut outboxes[to as usize].stream;
                    if offset == stream.len() {
                        visit += 1;
                        offset = start(visit);
                        continue;
                    }
                    // A process on this host takes large pieces through shared
                    // memory, neither windowed nor paced (no network between):
                    // the runtime's send budget holds the sender back.
                    let local = e.transport(to) == bulkwire_runtime::Transport::Shm;
                    let memory = e.endpoint.memory();
                    let in_flight = pacing::in_flight(memory.send_packets, memory.pending_bytes, packet);
                    if in_flight >= window && !local {
                        break;
                    }
                    let piece = repackaging::piece(offset, stream.len(), if local { SHM_PIECE } else { packet });
                    // A piece ends where an hpput's source left in place begins,
                    // unless only its header comes before it.
                    let piece = piece.start..stream.piece_end(piece.start, piece.end);
                    if let (Some(rate), false) = (rate, local) {
                        let now = Instant::now();
                        let pacer = pacer.get_or_insert_with(|| Pacer::new(rate, packet, now));
                        // What the piece costs on the wire: its headers, the
                        // protocol's, and IP's and UDP's.
                        let wire =
                            DATA_HEADER + piece.len() + bulkwire_wire::RECORD_HEADER_LEN + bulkwire_wire::OVERHEAD + 28;
                        if let Err(wait) = pacer.take(wire, rate, now) {
                            e.wake_within(wait);
                            break;
                        }
                    }
                    let end = piece.end;
                    let last = end == stream.len();
                    if !e.can_send(to, CHANNEL, DATA_HEADER + piece.len()) {
                        break;
                    }
                    // Over UDP a piece goes where it lies in the stream (the
                    // protocol keeps it until acknowledged), unless it is the
                    // whole stream: that goes in its own buffer as it is.
                    let whole = last && stream.hands_off_at(piece.start);
                    let runtime = |err: SendError| Reason::Runtime(err.to_string());
                    if !local && !whole {
                        let header = data_header(s, if last { LAST } else { 0 });
                        let parts = stream.piece_parts(piece.clone());
                        if let Some(x) = parts.external {
                            // The piece's own bytes (a put's header) go in the
                            // prefix, the source's from where they lie, a part
                            // of the source's loan (see `read_hpputs`).
                            let prefix = [&header[..], stream.own_bytes(parts.own)].concat();
                            e.send_lent_part(&loans[x.tag], CHANNEL, &prefix, x.from..x.from + x.len)
                                .map_err(runtime)?;
                        } else {
                            let body = stream.lend(piece);
                            e.send_shared(to, CHANNEL, &header, body).map_err(runtime)?;
                        }
                    } else {
                        let (message, framed) = piece_message(stream, piece, s, LAST);
                        if let Some(message) = try_send(e, to, message, framed)? {
                            // Not after `can_send`; if it were, the piece goes next.
                            net.outgoing.push_back(Outgoing { to, message, framed });
                        }
                    }
                    offset = end;
                    // The last piece of a stream sent partly from hpputs'
                    // sources asks for an acknowledgement at once too: the sync
                    // waits for it.
                    let ask = ask_last || stream.has_external();
                    if !local && ((last && ask) || in_flight + 1 >= window) {
                        e.end_phase(to, CHANNEL);
                    }
                }
                let mut whole = true;
                for (j, _) in expected.iter().enumerate().filter(|&(j, &x)| x && !net.whole(j, asked[j])) {
                    waiting_for(e, j as u32, s, "the data transfer")?;
                    whole = false;
                }
                if whole && visit == plan.len() {
                    return Ok(Some(true));
                }
                // Pieces to land: out of the engine, which the progress
                // thread may need meanwhile.
                Ok((!net.early.is_empty()).then_some(false))
            })?;
            self.net.land_early(&mut Owned { registry, owned: &mut owned[..], off_limits });
            if done {
                return Ok(());
            }
        }
    }

    /// The data lands, in the standard's order: get replies, then puts (by
    /// sender, then in the order they were made), then the sent messages
    /// make the new queue.
    fn land(&mut self) -> Result<Lent, Reason> {
        let (me, p) = (self.pid as usize, self.nprocs as usize);
        // Nothing came, and nothing was sent or asked for here: nothing
        // lands, the queue empties, and the outboxes serve the next
        // superstep as they are (an empty sync; most of its own work was
        // making p new outboxes and reading p empty streams).
        if self.outboxes.iter().all(crate::Outbox::is_idle) && self.net.streams.iter().all(|s| s.len() == 0) {
            let mut streams = self.net.take_streams();
            for (j, stream) in streams.drain(..).enumerate() {
                let first = stream.into_first(&mut self.net.landed);
                if first.capacity() > 0 {
                    match j == me {
                        true => self.net.landed.push(first),
                        false => self.net.keep(j, first),
                    }
                }
            }
            self.net.give_back_streams(streams);
            let old = std::mem::take(&mut self.queue);
            self.net.landed.extend(old.into_buffers());
            return Ok(Lent { readers: Vec::new(), buffers: Vec::new(), referenced: 0 });
        }
        let mut streams = self.net.take_streams();
        let (own, start) = std::mem::take(&mut self.outboxes[me].stream).into_bytes();
        streams[me] = Stream::new(own, start);
        let fresh = match std::mem::take(&mut self.spare_outboxes) {
            spare if spare.len() == p => spare,
            _ => crate::Outbox::all(p as u32),
        };
        let mut outboxes = std::mem::replace(&mut self.outboxes, fresh);
        // A large stream's buffer serves the next superstep's to the same
        // destination (one superstep's streams at most are kept).
        for (old, new) in outboxes.iter_mut().zip(self.outboxes.iter_mut()) {
            if let Some(kept) = old.stream.take_buffer() {
                new.stream.reuse(kept);
                if let Some(older) = old.stream.take_older() {
                    new.stream.reuse_older(older);
                }
            }
        }
        let mut lent = Lent {
            readers: (0..p as u32).filter(|&j| outboxes[j as usize].direct).collect(),
            buffers: outboxes.iter_mut().flat_map(|o| std::mem::take(&mut o.lent)).collect(),
            referenced: 0,
        };
        // Each sender's records, in vectors kept from sync to sync.
        let mut records = std::mem::take(&mut self.records);
        records.resize_with(p, Vec::new);
        for (j, s) in streams.iter().enumerate() {
            s.records_into(&mut records[j]).map_err(|why| Reason::Malformed { peer: j as u32, why })?;
        }
        // Each sender's view of its stream, made where a record needs it
        // (a stream of arena records alone needs none).
        let mut views: Vec<Option<View<'_>>> = Vec::new();

        let mut read_from: PerProcess<bool> = smallvec::smallvec![false; p];
        for (j, recs) in records.iter().enumerate() {
            let mut replies = recs
                .iter()
                .filter(|r| matches!(r, Record::Reply { .. } | Record::ReplyAt { .. } | Record::ReplyFrom { .. }));
            for (q, target) in outboxes[j].requests.iter().zip(&outboxes[j].targets) {
                let reply = replies
                    .next()
                    .ok_or_else(|| Reason::Malformed { peer: j as u32, why: "a get reply is missing".into() })?;
                let len = match reply {
                    Record::Reply { data } => data.len() as u64,
                    &Record::ReplyAt { len, .. } | &Record::ReplyFrom { len, .. } => len,
                    _ => unreachable!("filtered"),
                };
                if len != q.len {
                    return Err(Reason::Malformed { peer: j as u32, why: "a get reply of the wrong length".into() });
                }
                match reply {
                    Record::Reply { data } => {
                        self.write_target(*target, view_of(&mut views, &streams, j), data.clone())
                    }
                    &Record::ReplyAt { len, at } => {
                        let dst = target_mut(&mut self.owned, *target, len as usize);
                        read_arena(&self.rt, j as u32, self.superstep, at, dst).map_err(|why| Reason::DirectRead {
                            peer: j as u32,
                            what: "a get's reply",
                            why,
                        })?;
                        lent.referenced += len;
                        self.arena_reads += 1;
                    }
                    &Record::ReplyFrom { len, addr } => {
                        let dst = target_mut(&mut self.owned, *target, len as usize);
                        read_memory(&self.rt, j as u32, addr, dst).map_err(|why| Reason::DirectRead {
                            peer: j as u32,
                            what: "a get's reply",
                            why,
                        })?;
                        lent.referenced += len;
                        read_from[j] = true;
                    }
                    _ => unreachable!("filtered"),
                }
            }
            if replies.next().is_some() {
                return Err(Reason::Malformed { peer: j as u32, why: "a get reply nobody asked for".into() });
            }
        }
        let mut entries = Vec::new();
        for (j, recs) in records.iter().enumerate() {
            for r in recs {
                match r {
                    Record::Put { hp, slot, offset, data } => {
                        let area = self
                            .registry
                            .area(*slot)
                            .ok_or(Reason::UnknownRegistration { slot: *slot, owner: me as u32 })?;
                        let (at, len) = self.check_access(area, *slot, *offset, data.len() as u64, || {
                            format!("{} from process {j}", if *hp { "bsp_hpput" } else { "bsp_put" })
                        })?;
                        write_area(
                            &mut self.owned,
                            area,
                            at,
                            view_of(&mut views, &streams, j),
                            data.start..data.start + len,
                        );
                    }
                    Record::Send { tag, payload } => entries.push(crate::queue::Entry {
                        buffer: j,
                        tag: tag.clone(),
                        payload: payload.clone(),
                        elsewhere: None,
                    }),
                    &Record::SendAt { ref tag, len, at } => {
                        // Read where it lies, until the next sync.
                        let at = arena_view(&self.rt, j as u32, self.superstep, at, len)
                            .map_err(|why| Reason::DirectRead { peer: j as u32, what: "a message", why })?;
                        entries.push(crate::queue::Entry {
                            buffer: j,
                            tag: tag.clone(),
                            payload: 0..0,
                            elsewhere: Some((at, len as usize)),
                        });
                        lent.referenced += len;
                        self.arena_reads += 1;
                    }
                    Record::Reply { .. } | Record::ReplyAt { .. } | Record::ReplyFrom { .. } => {}
                    &Record::Direct { hp, arena, slot, offset, len, addr } => {
                        let area =
                            self.registry.area(slot).ok_or(Reason::UnknownRegistration { slot, owner: me as u32 })?;
                        let (at, len) = self.check_access(area, slot, offset, len, || {
                            format!("{} from process {j}", if hp { "bsp_hpput" } else { "bsp_put" })
                        })?;
                        let dst = area_mut(&mut self.owned, area, at, len);
                        match arena {
                            true => read_arena(&self.rt, j as u32, self.superstep, addr, dst),
                            false => read_memory(&self.rt, j as u32, addr, dst),
                        }
                        .map_err(|why| Reason::DirectRead {
                            peer: j as u32,
                            what: "a put",
                            why,
                        })?;
                        lent.referenced += len as u64;
                        // An arena's sender needs no word: it writes this
                        // half again two supersteps on, past a barrier that
                        // this process enters after landing.
                        match arena {
                            true => self.arena_reads += 1,
                            false => {
                                read_from[j] = true;
                                self.direct_puts_read += 1;
                            }
                        }
                    }
                }
            }
        }
        // Their senders wait until they hear that their bytes were read.
        for j in (0..p).filter(|&j| read_from[j]) {
            self.net.queue(j as u32, header(READ_DONE, self.superstep, 0));
        }
        let net = &mut self.net;
        if !net.outgoing.is_empty() {
            rt_with(&self.rt, |e| {
                if let Err(reason) = net.push_outgoing(e) {
                    net.broken.get_or_insert(reason);
                }
            })?;
        }
        drop(views);
        // The streams' buffers (most were read from the network in place)
        // hold the new queue's messages, each stream's in one (a stream in
        // parts that carries messages is joined); with none, they are
        // given back to the runtime now, and the old queue's are given
        // back in any case.
        let mut carries: PerProcess<bool> = smallvec::smallvec![false; p];
        for e in &entries {
            carries[e.buffer] = true;
        }
        let mut buffers = Vec::with_capacity(p);
        for (mut stream, carries) in streams.drain(..).zip(carries) {
            if carries {
                stream.flatten();
            }
            buffers.push(stream.into_first(&mut self.net.landed));
        }
        self.net.give_back_streams(streams);
        self.records = records;
        let old = if entries.is_empty() {
            for (j, buffer) in buffers.into_iter().enumerate() {
                // A small one for the next stream to its sender (this
                // process's own puts: to itself).
                match (self.outboxes[j].stream.offer(buffer), j == me) {
                    (None, _) => {}
                    (Some(buffer), true) => self.net.landed.push(buffer),
                    (Some(buffer), false) => self.net.keep(j, buffer),
                }
            }
            std::mem::take(&mut self.queue)
        } else {
            std::mem::replace(&mut self.queue, Queue::new(buffers, entries))
        };
        self.net.landed.extend(old.into_buffers());
        // The old outboxes, emptied, are the next superstep's.
        let slack = shares_packet_with_stream(p as u32);
        outboxes.iter_mut().for_each(|o| o.reset(slack));
        self.spare_outboxes = outboxes;
        Ok(lent)
    }

    /// Waits until every process this one sent direct puts to has read
    /// them, then keeps their buffers for the next superstep's.
    fn await_reads(&mut self, lent: &Lent) -> Result<(), Reason> {
        let s = self.superstep;
        if !lent.readers.is_empty() {
            let rt = self.rt.as_ref().expect("the runtime is there until end");
            // The streams were taken: what comes now is the next superstep's.
            wait(rt, &mut self.net, s + 1, |e, net| {
                for &j in &lent.readers {
                    if net.read_done[j as usize] <= s {
                        waiting_for(e, j, s, "its reads of this process's direct puts")?;
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            })?;
        }
        Ok(())
    }

    /// Writes a get's reply, the stream's bytes at `data`, where the get
    /// asked.
    /// Waits until the runtime has let go of every piece of an hpput's
    /// source it was lent (every packet acknowledged; the last piece to
    /// each destination asked for that at once).
    fn await_loans(&mut self) -> Result<(), Reason> {
        if self.loans.is_empty() {
            return Ok(());
        }
        let s = self.superstep;
        let rt = self.rt.as_ref().expect("the runtime is there until end");
        let loans = &self.loans;
        // Those returned are not looked at again.
        let mut returned = 0;
        // The streams were taken: what comes now is the next superstep's.
        wait(rt, &mut self.net, s + 1, |e, _| {
            while let Some(loan) = loans.get(returned) {
                if !e.loan_returned(loan).map_err(Reason::Runtime)? {
                    waiting_for(e, loan.to(), s, "acknowledgements of the hpputs sent from their sources")?;
                    return Ok(None);
                }
                returned += 1;
            }
            Ok(Some(()))
        })?;
        self.loans.clear();
        Ok(())
    }

    fn write_target(&mut self, target: GetTarget, view: &View<'_>, data: Range<usize>) {
        let dst = target_mut(&mut self.owned, target, data.len());
        if dst.len() == data.len() {
            view.copy_out(data, dst);
        }
    }
}

/// Where a get's reply of `len` bytes goes (empty where the area is gone).
fn target_mut(owned: &mut [Option<Box<dyn crate::OwnedArea>>], target: GetTarget, len: usize) -> &mut [u8] {
    match target {
        GetTarget::Raw(_) if len == 0 => &mut [],
        // SAFETY: the caller of get_raw promised `len` writable bytes at
        // `dst` until the sync ends.
        GetTarget::Raw(addr) => unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) },
        GetTarget::Owned { index, at } => match &mut owned[index] {
            Some(area) => &mut area.bytes_mut()[at..at + len],
            None => &mut [],
        },
    }
}

/// Copies `dst.len()` bytes from `at` in process `peer`'s arena, which must
/// lie in the half that superstep `superstep` writes.
fn read_arena(rt: &Option<crate::Held>, peer: u32, superstep: u64, at: u64, dst: &mut [u8]) -> Result<(), String> {
    let rt = rt.as_ref().ok_or("the computation has ended")?;
    rt.with_no_send(|e| {
        Ok(in_half(e.peer_arena_len(peer), superstep, at, dst.len() as u64)
            .and_then(|()| e.read_peer_arena(peer, at, dst)))
    })
    .map_err(|e| e.to_string())?
}

/// The address in this process of `len` bytes at `at` in process `peer`'s
/// arena, which must lie in the half that superstep `superstep` writes.
fn arena_view(rt: &Option<crate::Held>, peer: u32, superstep: u64, at: u64, len: u64) -> Result<usize, String> {
    let rt = rt.as_ref().ok_or("the computation has ended")?;
    rt.with_no_send(|e| {
        Ok(match e.peer_arena(peer) {
            Some((base, arena)) => in_half(arena, superstep, at, len).map(|()| base as usize + at as usize),
            None => Err(format!("process {peer} is not on this host")),
        })
    })
    .map_err(|e| e.to_string())?
}

/// Whether `len` bytes at `at` lie in the half of an arena of `arena`
/// bytes that superstep `superstep` writes.
fn in_half(arena: usize, superstep: u64, at: u64, len: u64) -> Result<(), String> {
    let half = (arena / 2) as u64;
    let from = (superstep & 1) * half;
    match at >= from && at.checked_add(len).is_some_and(|end| end <= from + half) {
        true => Ok(()),
        false => Err(format!(
            "{len} bytes at {at} are not in the half of its arena for superstep {superstep} ({from} to {})",
            from + half
        )),
    }
}

/// Copies `dst.len()` bytes at `addr` in process `peer`'s memory.
fn read_memory(rt: &Option<crate::Held>, peer: u32, addr: u64, dst: &mut [u8]) -> Result<(), String> {
    let rt = rt.as_ref().ok_or("the computation has ended")?;
    rt.with(|e| Ok(e.read_peer_memory(peer, addr, dst))).map_err(|e| e.to_string())?
}

fn read_area(owned: &[Option<Box<dyn crate::OwnedArea>>], area: Area, offset: usize, len: usize) -> &[u8] {
    if len == 0 {
        return &[];
    }
    match area.owned {
        Some(index) => owned[index].as_ref().map_or(&[][..], |a| &a.bytes()[offset..offset + len]),
        // SAFETY: whoever registered the raw area promised it valid for its
        // length while registered; the access was checked against it.
        None => unsafe { std::slice::from_raw_parts((area.addr + offset) as *const u8, len) },
    }
}

/// The `len` bytes at `offset` of `area`, to write into.
fn area_mut(owned: &mut [Option<Box<dyn crate::OwnedArea>>], area: Area, offset: usize, len: usize) -> &mut [u8] {
    if len == 0 {
        return &mut [];
    }
    match area.owned {
        Some(index) => owned[index].as_mut().map_or(&mut [][..], |a| &mut a.bytes_mut()[offset..offset + len]),
        // SAFETY: as in `read_area`; nothing else in this process touches
        // the area during the sync.
        None => unsafe { std::slice::from_raw_parts_mut((area.addr + offset) as *mut u8, len) },
    }
}

/// The last barrier on the board: each process's post, by process, and
/// the reduction they merged into (`None` until one merged without error).
///
/// A sync takes `merged` and gives it back at its end (`current` says the
/// reduction it got is that merge): the reduction is not copied.
#[derive(Default)]
pub(crate) struct BoardMemo {
    posts: Vec<Vec<u8>>,
    merged: Option<Box<Reduction>>,
    current: bool,
    /// This process's own reduction as it posted it last.
    own: Option<Box<Reduction>>,
    /// Kept for the next barrier: the buffer a post is read into, and
    /// which processes were heard.
    scratch: Vec<u8>,
    heard: Vec<bool>,
}

/// What this process lent its readers in a superstep (direct puts): who
/// reads, and the buffers of put copies they read from.
pub(crate) struct Lent {
    readers: Vec<u32>,
    buffers: Vec<Vec<u8>>,
    /// Bytes of the direct puts landed (read from where their records
    /// said, not carried in the streams).
    referenced: u64,
}

/// This process's areas, for puts that land as they arrive.
struct Owned<'a> {
    registry: &'a Registry,
    owned: &'a mut [Option<Box<dyn crate::OwnedArea>>],
    /// This process's memory puts keep off (`Bsp::off_limits`).
    off_limits: &'a [Range<usize>],
}

impl Areas for Owned<'_> {
    /// The put's place, unless it lies outside its area or overlaps an
    /// hpput's source (which must go out as it was before the sync) or a
    /// get's target (whose reply lands first).
    fn resolve(&self, slot: u32, offset: u64, len: u64) -> Option<(Area, usize)> {
        let area = self.registry.area(slot)?;
        let end = offset.checked_add(len)?;
        if end > area.len as u64 {
            return None;
        }
        if len > 0 && !self.off_limits.is_empty() {
            let base = match area.owned {
                Some(i) => self.owned.get(i)?.as_ref()?.bytes().as_ptr() as usize,
                None => area.addr,
            };
            let (start, end) = (base + offset as usize, base + end as usize);
            // The first range kept off that ends after the put starts (they
            // are sorted and apart: `merged`).
            let i = self.off_limits.partition_point(|r| r.end <= start);
            if self.off_limits.get(i).is_some_and(|r| r.start < end) {
                return None;
            }
        }
        Some((area, offset as usize))
    }

    fn write(&mut self, area: Area, at: usize, bytes: &[u8]) {
        let dst = area_mut(self.owned, area, at, bytes.len());
        // An owned area gone since it was resolved takes nothing.
        if dst.len() == bytes.len() {
            dst.copy_from_slice(bytes);
        }
    }

    /// An area registered by address (`bsp_push_reg`): its caller keeps it
    /// there until the sync ends. One the library owns is written through
    /// a borrow of the whole, so not while another writes part of it.
    fn address(&self, area: Area, at: usize) -> Option<usize> {
        area.owned.is_none().then(|| area.addr + at)
    }
}

/// `ranges` sorted, those that overlap or touch made one: a put's place
/// is then checked against them by a binary search.
fn merged(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Sender `j`'s view of its stream in `streams`, made the first time it is
/// asked for.
fn view_of<'v, 's>(views: &'v mut Vec<Option<View<'s>>>, streams: &'s [Stream], j: usize) -> &'v View<'s> {
    if views.len() < streams.len() {
        views.resize_with(streams.len(), || None);
    }
    views[j].get_or_insert_with(|| streams[j].view())
}

/// Writes the stream's bytes at `data` into `area` from `offset` on.
fn write_area(
    owned: &mut [Option<Box<dyn crate::OwnedArea>>],
    area: Area,
    offset: usize,
    view: &View<'_>,
    data: Range<usize>,
) {
    let dst = area_mut(owned, area, offset, data.len());
    // An owned area gone since the access was checked takes nothing.
    if dst.len() == data.len() {
        view.copy_out(data, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A put lands early unless it overlaps memory kept off (an
        /// hpput's source, a get's target): the binary search over the
        /// merged ranges says what a look at every range says.
        #[test]
        fn a_put_over_memory_kept_off_does_not_land_early(
            sources in proptest::collection::vec((0usize..200, 0usize..40), 0..12),
            puts in proptest::collection::vec((0u64..220, 0u64..40), 1..20),
        ) {
            let sources: Vec<Range<usize>> = sources.into_iter().map(|(s, n)| s..s + n).collect();
            let kept = merged(sources.clone());
            proptest::prop_assert!(kept.windows(2).all(|w| w[0].end < w[1].start));
            let mut registry = Registry::default();
            // One area at address 1000 of 260 bytes; sources are offsets.
            let slot = registry.push(Area { addr: 1000, len: 260, owned: None });
            registry.apply();
            let shifted: Vec<Range<usize>> = kept.iter().map(|r| r.start + 1000..r.end + 1000).collect();
            let areas = Owned { registry: &registry, owned: &mut [], off_limits: &shifted };
            for (offset, len) in puts {
                let over = len > 0
                    && sources.iter().any(|r| !r.is_empty() && (r.start as u64) < offset + len && offset < r.end as u64);
                let fits = offset + len <= 260;
                let got = areas.resolve(slot, offset, len).is_some();
                proptest::prop_assert_eq!(got, fits && !over, "put of {} at {}", len, offset);
            }
        }
    }

    fn piece(superstep: u64, last: u8, bytes: &[u8]) -> Vec<u8> {
        let mut m = data_message(superstep, last, bytes.len());
        m.extend_from_slice(bytes);
        m
    }

    #[test]
    fn an_eager_stream_is_whole_unless_its_receiver_asked_for_gets() {
        let mut net = Net::new(3, 1000, 8);
        net.sort(1, piece(4, 0, b"ab"), 0, 4).unwrap();
        assert!(!net.whole(1, false));
        net.sort(1, piece(4, EAGER_LAST, b"cd"), 0, 4).unwrap();
        assert!(net.whole(1, false), "nobody asked: the eager piece ends it");
        assert!(!net.whole(1, true), "the replies to our gets are still to come");
        net.sort(1, piece(4, 0, b"ef"), 0, 4).unwrap();
        net.sort(1, piece(4, LAST, b"gh"), 0, 4).unwrap();
        assert!(net.whole(1, true));
        assert_eq!(net.take_streams()[1].content(), b"abcdefgh");
    }

    #[test]
    fn a_stream_on_the_board_goes_before_the_replies_that_came_first() {
        let mut net = Net::new(3, 1000, 8);
        // The replies to this process's gets, sent after the barrier, were
        // sorted while it still waited there.
        net.sort(1, piece(4, LAST, b"replies"), 0, 4).unwrap();
        net.file_board_stream(1, b"puts ").unwrap();
        assert!(net.whole(1, true), "the last piece came");
        net.file_board_stream(2, b"only").unwrap();
        assert!(net.whole(2, false) && !net.whole(2, true), "as an eager stream: whole unless gets were asked");
        assert!(net.file_board_stream(2, b"again").is_err(), "a second stream from the same sender");
        assert!(net.file_board_stream(3, b"x").is_err(), "a sender outside the job");
        let streams = net.take_streams();
        assert_eq!(streams[1].content(), b"puts replies");
        assert_eq!(streams[2].content(), b"only");
    }

    #[test]
    fn a_board_post_is_its_reduction_then_its_streams() {
        let mut post = 3u32.to_le_bytes().to_vec();
        post.extend_from_slice(b"red");
        for (to, stream) in [(1u32, &b"ab"[..]), (2, b"")] {
            post.extend_from_slice(&to.to_le_bytes());
            post.extend_from_slice(&(stream.len() as u32).to_le_bytes());
            post.extend_from_slice(stream);
        }
        let (reduction, streams) = split_post(&post).unwrap();
        assert_eq!(reduction, b"red");
        let (to, stream, rest) = next_board_stream(streams).unwrap();
        assert_eq!((to, stream), (1, &b"ab"[..]));
        let (to, stream, rest) = next_board_stream(rest).unwrap();
        assert_eq!((to, stream, rest), (2, &b""[..], &b""[..]));
        // Cut anywhere, a post is refused, never read past its end.
        for cut in [0, 2, 6] {
            assert!(split_post(&post[..cut]).is_err(), "{cut}");
        }
        for cut in 1..streams.len() {
            let mut rest = &streams[..cut];
            let mut failed = false;
            while !rest.is_empty() {
                match next_board_stream(rest) {
                    Ok((_, _, after)) => rest = after,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            assert!(failed || cut == 10, "cut at {cut}");
        }
    }

    #[test]
    fn a_large_stream_s_buffer_takes_the_sender_s_next_stream() {
        let mut net = Net::new(3, 1000, 8);
        let big = Vec::with_capacity(repackaging::REUSE_FROM);
        let at = big.as_ptr();
        net.keep(1, big);
        net.keep(2, vec![0; 10]);
        assert!(net.kept[2].is_none(), "a small buffer goes back to the runtime");
        net.sort(1, piece(4, 0, b"ab"), 0, 4).unwrap();
        net.sort(1, piece(4, LAST, b"cd"), 0, 4).unwrap();
        let streams = net.take_streams();
        assert_eq!(streams[1].content(), b"abcd");
        assert_eq!(streams[1].bytes().as_ptr(), at, "in the kept buffer");
        // A stream of one piece stays in its message, and the kept buffer waits.
        net.keep(1, streams.into_iter().nth(1).unwrap().into_buffers().0);
        net.sort(1, piece(5, LAST, b"one"), 0, 5).unwrap();
        assert_eq!(net.take_streams()[1].content(), b"one");
        assert!(net.kept[1].is_some());
    }

    #[test]
    fn the_next_supersteps_stream_waits_for_it() {
        let mut net = Net::new(3, 1000, 8);
        net.sort(2, piece(4, LAST, b"now"), 0, 4).unwrap();
        // Process 2 finished this sync and sends its next stream early.
        net.sort(2, piece(5, EAGER_LAST, b"next"), 0, 4).unwrap();
        assert!(net.whole(2, false));
        assert_eq!(net.take_streams()[2].content(), b"now");
        assert!(net.whole(2, false), "superstep 5's stream is whole as it becomes the current one");
        assert!(!net.whole(1, false));
        assert_eq!(net.take_streams()[2].content(), b"next");
        assert!(!net.whole(2, false));
    }

    #[test]
    fn a_stream_of_one_piece_is_the_message_itself() {
        let mut net = Net::new(3, 1000, 8);
        let message = piece(4, LAST, b"whole");
        let at = message.as_ptr();
        net.sort(2, message, 0, 4).unwrap();
        let streams = net.take_streams();
        assert_eq!(streams[2].content(), b"whole");
        assert_eq!(streams[2].bytes().as_ptr(), at, "the piece was copied");
        assert_eq!(streams[2].len(), 5);
        // Delivered in place: the piece is read behind the datagram's headers.
        let mut datagram = vec![0xEE; 70];
        datagram.extend_from_slice(&piece(4, LAST, b"in place"));
        let at = datagram.as_ptr();
        net.sort(1, datagram, 70, 4).unwrap();
        let streams = net.take_streams();
        assert_eq!((&streams[1].content()[..], streams[1].bytes().as_ptr()), (&b"in place"[..], at));
        assert!(net.sort(1, vec![0; 75], 70, 5).unwrap_err().contains("too short"));
        let records = Stream::new(vec![9], 0).records();
        assert!(records.unwrap_err().contains("unknown record kind 9"));
    }

    /// A data message of `piece` in a buffer of `room` bytes, as read
    /// from a datagram.
    fn piece_in(superstep: u64, last: u8, bytes: &[u8], room: usize) -> Vec<u8> {
        let mut m = Vec::with_capacity(room.max(DATA_HEADER + bytes.len()));
        m.extend_from_slice(&piece(superstep, last, bytes));
        m
    }

    #[test]
    fn large_pieces_stay_where_they_landed_and_records_span_them() {
        // Records that cross every boundary: puts of 7,000 bytes in pieces
        // of 10,000 (each filling its buffer), small pieces behind them.
        let mut out = OutStream::new(0);
        let data: Vec<Vec<u8>> = (0..9u8).map(|i| vec![i; 7_000 + i as usize]).collect();
        for (i, d) in data.iter().enumerate() {
            out.put(1, i as u64 * 8_000, d);
        }
        out.reply(b"tail");
        let whole = out.bytes(0..out.len()).to_vec();
        let cuts: Vec<Range<usize>> =
            (0..whole.len()).step_by(10_000).map(|at| at..(at + 10_000).min(whole.len())).collect();
        let mut net = Net::new(3, 10_000, 8);
        let mut addresses = Vec::new();
        for (k, cut) in cuts.iter().enumerate() {
            // The last piece is small for its buffer: copied behind.
            let small = cut.len() < OWN_PART_FROM;
            let room = if small { 65_536 } else { DATA_HEADER + cut.len() };
            let last = if k + 1 == cuts.len() { LAST } else { 0 };
            let message = piece_in(4, last, &whole[cut.clone()], room);
            addresses.push(message.as_ptr());
            net.sort(1, message, 0, 4).unwrap();
        }
        assert!(net.whole(1, false));
        let stream = net.take_streams().swap_remove(1);
        assert!(stream.more.len() >= cuts.len() - 2, "the large pieces were not copied");
        assert_eq!(stream.more[0].0.as_ptr(), addresses[1]);
        assert_eq!(stream.content(), whole);
        assert_eq!(stream.len(), whole.len());
        let records = stream.records().unwrap();
        let view = stream.view();
        for (i, d) in data.iter().enumerate() {
            let Record::Put { slot: 1, offset, data: ref range, .. } = records[i] else { panic!("{:?}", records[i]) };
            assert_eq!(offset, i as u64 * 8_000);
            let mut got = vec![0; range.len()];
            view.copy_out(range.clone(), &mut got);
            assert_eq!(&got, d, "put {i}");
        }
        let Record::Reply { data: ref range } = records[9] else { panic!() };
        let mut got = [0; 4];
        view.copy_out(range.clone(), &mut got);
        assert_eq!(&got, b"tail");
        // Joined, the same positions index the first buffer.
        let mut flat = stream.clone();
        flat.flatten();
        assert_eq!(flat.len(), whole.len());
        assert_eq!(&flat.bytes()[range.clone()], b"tail");
        assert_eq!(flat.records().unwrap(), records);
        // Cut short anywhere, the stream is malformed, never a panic.
        for cut in [1, 10_000, 10_001, whole.len() - 1] {
            let mut short = Stream::default();
            for piece in whole[..cut].chunks(10_000) {
                let _ = short.push(piece_in(4, 0, piece, 0)[..].to_vec(), DATA_HEADER);
            }
            assert!(short.records().is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn small_pieces_are_copied_into_parts_that_never_grow() {
        let mut stream = Stream::default();
        let mut expected = Vec::new();
        for i in 0..200u32 {
            let piece = vec![i as u8; 1_400];
            expected.extend_from_slice(&piece);
            let copied = stream.push(piece_in(4, 0, &piece, 65_536), DATA_HEADER);
            assert_eq!(copied.is_some(), i > 0, "piece {i}: the first is the stream's first buffer");
        }
        assert_eq!(stream.content(), expected);
        assert_eq!(stream.len(), expected.len());
        let rooms: Vec<usize> = stream.more.iter().map(|(b, _)| b.capacity()).collect();
        assert!(rooms.len() >= 2, "{rooms:?}");
        assert_eq!(stream.bytes.capacity(), 65_536, "the first buffer was filled, not grown");
    }

    #[test]
    fn misplaced_data_is_refused() {
        let mut net = Net::new(3, 1000, 8);
        assert!(net.sort(1, piece(6, LAST, b"x"), 0, 4).unwrap_err().contains("superstep 6 in superstep 4"));
        assert!(net.sort(1, piece(3, LAST, b"x"), 0, 4).unwrap_err().contains("superstep 3 in superstep 4"));
        assert!(net.sort(1, piece(4, 9, b"x"), 0, 4).unwrap_err().contains("marked 9"));
        net.sort(1, piece(4, LAST, b"x"), 0, 4).unwrap();
        assert!(net.sort(1, piece(4, 0, b"y"), 0, 4).unwrap_err().contains("after the last piece"));
        net.sort(1, piece(5, LAST, b"x"), 0, 4).unwrap();
        assert!(net.sort(1, piece(5, 0, b"y"), 0, 4).unwrap_err().contains("after the last piece"));
    }
}
