//! One reliable channel between this process and a peer: a sender half and a
//! receiver half that share the packets flowing both ways.
//!
//! Loss recovery is hole filling (seed 002 §4.3): every packet carries the
//! receiver's cumulative acknowledgement `ack` and `end_of_hole`, the first
//! packet it holds beyond the hole; the sender resends exactly `[ack,
//! end_of_hole)`, never the same packet twice within one round trip. A
//! receiver that waits for a hole and has nothing to send back prods the
//! sender, backing off exponentially. Explicit acknowledgements are rare: only
//! when the sender asks (its buffers run low, or the last packet of a phase)
//! and, for buffer pressure, only after n/(2p) arrivals since the last one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bulkwire_wire::{
    job_tag, record_header, seal, seal_parts, AckPayload, Flags, Header, LatencyStatus, MissingRanges, PacketType,
    Records, WireMode, HEADER_LEN, LSTAT_FIXED_LEN, MISSING_RANGE_LEN, RECORD_HEADER_LEN, SEQUENCE_LIMIT,
};

use crate::config::{Config, Strategy};
use crate::ece::Decision;
use crate::event::Event;
use crate::path::Path;
use crate::pool::{Admission, BufferPool, RecvBudget};
use crate::rtt::RttEstimator;
use crate::stats::ChannelStats;
use crate::time::Time;

/// Longest exponential back-off of prods and tail probes (2^16 timeouts,
/// further bounded by `max_rto`).
const MAX_BACKOFF: u32 = 16;

/// On a receiver-driven channel the tail probe is a last resort, for a
/// receiver that does not wait: it starts at 2^4 retransmission timeouts.
const RECEIVER_DRIVEN_BACKOFF: u32 = 4;

/// A receiver that waits with no hole known ([`Channel::awaiting`]) first
/// prods after 2^1 retransmission timeouts: the data may be on its way,
/// paced or queued behind other traffic, and a prod too early only makes
/// the sender answer (or resend what was not lost).
const AWAIT_BACKOFF: u32 = 1;

/// What the channel borrows from its endpoint while it works.
pub(crate) struct Shared<'a> {
    pub cfg: &'a Config,
    pub send_pool: &'a mut BufferPool,
    pub recv_pool: &'a mut BufferPool,
    pub events: &'a mut VecDeque<Event>,
    /// Bytes of received messages held for the application.
    pub recv: &'a mut RecvBudget,
    /// Bytes queued by `send` and not yet packetised, over all channels.
    pub pending_bytes: &'a mut usize,
    pub send_rate: &'a mut SendRate,
    /// Where data to this peer goes now: the ECE's mode (always the ordinary
    /// path while the latency engines are off).
    pub data_path: Path,
    /// The packet being handled may leave its first message in its
    /// datagram ([`Endpoint::handle_datagram_owned`](crate::Endpoint::handle_datagram_owned)),
    /// and where it did.
    pub in_place: bool,
    pub claimed: Option<InPlace>,
    /// A receive's buffer that the next message for it is reassembled
    /// into ([`crate::Endpoint::place`]).
    pub placement: &'a mut Option<Placement>,
    /// Whether a data packet may leave now (the peer's pacer under rate
    /// control has a token; always while rate control is off).
    pub data_allowed: bool,
    /// Whether data packets to this peer are flagged for Warp feedback.
    pub rate_controlled: bool,
}

/// A message delivered in the datagram it came in: its event in the
/// queue waits for the datagram's buffer, and the message is `len` bytes
/// behind the packet header and the first record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InPlace {
    pub event: usize,
    pub len: usize,
}

/// The least size of a message delivered in place: below it, a copy costs
/// less than a buffer of the largest datagram size taken and replaced.
const IN_PLACE_MIN: usize = 4096;

/// How many new data packets this process puts on the wire per round trip,
/// to foresee when its free send buffers will run out within one.
///
/// Counts packets in consecutive windows of one round trip and takes the
/// larger of the current and the previous window.
#[derive(Debug, Default)]
pub(crate) struct SendRate {
    window_start: Time,
    current: u32,
    previous: u32,
}

impl SendRate {
    fn record(&mut self, now: Time, rtt: Duration) {
        let elapsed = now.since(self.window_start);
        if elapsed >= rtt {
            self.previous = if elapsed < rtt * 2 { self.current } else { 0 };
            self.current = 0;
            self.window_start = now;
        }
        self.current += 1;
    }

    fn per_round_trip(&self) -> u32 {
        self.current.max(self.previous)
    }
}

/// Where an acknowledgement field came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Info {
    /// Piggybacked on a data packet.
    Piggyback,
    /// An explicit acknowledgement answering our packet sent at `echo`.
    Reply { echo: Time },
    /// A prod: the peer waits for a hole. `seen`, when the prod says it:
    /// the time (our clock) before which what we sent should have arrived
    /// when the peer wrote the prod.
    Prod { seen: Option<Time> },
    /// An LSTAT: its missing ranges say more than the hole fields.
    Status,
}

/// A data packet's payload, kept for resending and shared with the
/// datagram that carries it rather than copied into it (see
/// [`Endpoint::poll_transmit_shared`](crate::Endpoint::poll_transmit_shared)):
/// a buffer of its own, or a record header and a piece of a large
/// message's buffer, which every packet of the message shares.
#[derive(Clone, Debug)]
pub struct SharedPayload {
    bytes: Held,
    range: std::ops::Range<usize>,
    /// Sent before `bytes[range]`: the record header of a piece (and, in
    /// the first packet of a lent message, the message's prefix).
    head: Option<Head>,
    /// Sent after `bytes[range]`: the bytes of a lent message past its lent
    /// memory (a layer's trailer), where the piece ends the message.
    tail: Option<Tail>,
}

/// The most bytes of a lent message's own that the packet carrying the
/// end of its lent memory carries behind it ([`SharedPayload::parts`]).
pub const LENT_TAIL_MAX: usize = 16;

/// A lent message's last bytes, past its lent memory, kept inline.
#[derive(Clone, Copy, Debug)]
struct Tail {
    bytes: [u8; LENT_TAIL_MAX],
    len: u8,
}

impl Tail {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The most bytes a lent message may carry in front of its lent memory
/// ([`crate::Endpoint::send_lent`]): a layer's header and a few bytes of
/// its own.
pub const LENT_PREFIX_MAX: usize = 64;

/// The most bytes of a message's end that its first packet may carry
/// ahead of its first piece ([`crate::Endpoint::set_tail_ahead`]).
pub const TAIL_AHEAD_MAX: usize = 16;

/// What precedes a piece's bytes that lie in the shared buffer: the
/// message's end sent ahead (a record), where this is its first packet
/// ([`crate::Endpoint::set_tail_ahead`]), the piece's record header, and
/// what of its message's own bytes precede the lent memory: kept inline,
/// copied with every packet.
#[derive(Clone, Copy, Debug)]
struct Head {
    bytes: [u8; HEAD_MAX],
    len: u8,
}

const HEAD_MAX: usize = 2 * RECORD_HEADER_LEN + TAIL_AHEAD_MAX + LENT_PREFIX_MAX;

impl Head {
    /// `ahead` is a whole record (or nothing).
    fn new(ahead: &[u8], record_header: &[u8; RECORD_HEADER_LEN], prefix: &[u8]) -> Head {
        let mut bytes = [0; HEAD_MAX];
        let mut len = 0;
        for part in [ahead, &record_header[..], prefix] {
            bytes[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        Head { bytes, len: len as u8 }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Memory a message is sent from that the endpoint does not own: lent by
/// the layer above until nothing holds it any more, that is until every
/// packet that carries a piece of it has been acknowledged
/// ([`crate::Endpoint::send_lent`]; the lender holds one `Arc` of its own
/// and waits for the count to fall to one).
pub trait LentBytes: AsRef<[u8]> + Send + Sync + std::fmt::Debug {}

/// Bytes `range` of memory shared by several messages, each such range
/// the body of one ([`crate::Endpoint::send_lent`]): the whole is held
/// until no range of it is.
#[derive(Debug)]
pub struct LentRange<T> {
    pub whole: Arc<T>,
    pub range: std::ops::Range<usize>,
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for LentRange<T> {
    fn as_ref(&self) -> &[u8] {
        &(*self.whole).as_ref()[self.range.clone()]
    }
}

impl<T: AsRef<[u8]> + Send + Sync + std::fmt::Debug> LentBytes for LentRange<T> {}

/// The buffer a payload is (a piece of).
#[derive(Clone, Debug)]
enum Held {
    Own(Arc<Vec<u8>>),
    Lent(Arc<dyn LentBytes>),
}

impl Held {
    fn as_slice(&self) -> &[u8] {
        match self {
            Held::Own(a) => a,
            Held::Lent(l) => (**l).as_ref(),
        }
    }

    fn holders(&self) -> usize {
        match self {
            Held::Own(a) => Arc::strong_count(a),
            Held::Lent(l) => Arc::strong_count(l),
        }
    }
}

impl SharedPayload {
    /// A payload of all of `bytes`.
    pub fn whole(bytes: Vec<u8>) -> SharedPayload {
        let range = 0..bytes.len();
        SharedPayload { bytes: Held::Own(Arc::new(bytes)), range, head: None, tail: None }
    }

    fn piece(bytes: Held, range: std::ops::Range<usize>, head: Head, tail: Option<Tail>) -> SharedPayload {
        SharedPayload { bytes, range, head: Some(head), tail }
    }

    /// The payload: these three, one after the other (the first empty but
    /// for a piece of a message, whose record header it is; the last empty
    /// but for the piece that ends a lent message with bytes of its own
    /// past the lent memory).
    pub fn parts(&self) -> [&[u8]; 3] {
        [
            self.head.as_ref().map_or(&[][..], Head::as_slice),
            &self.bytes.as_slice()[self.range.clone()],
            self.tail.as_ref().map_or(&[][..], Tail::as_slice),
        ]
    }

    pub fn len(&self) -> usize {
        self.head.map_or(0, |h| h.len as usize) + self.range.len() + self.tail.map_or(0, |t| t.len as usize)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many hold its buffer, this one included (the packets of a
    /// message all hold the message's).
    pub fn holders(&self) -> usize {
        self.bytes.holders()
    }

    /// The memory it stands for: a buffer of its own, or its piece.
    fn held_bytes(&self) -> usize {
        match (&self.head, &self.bytes) {
            (None, Held::Own(a)) => a.capacity(),
            (h, _) => h.map_or(0, |h| h.len as usize) + self.range.len() + self.tail.map_or(0, |t| t.len as usize),
        }
    }

    /// Gives its buffer back to `pool` once nothing else holds it, or
    /// counts it back in (a piece: a message's buffer is never a pool's).
    fn give_back(self, pool: &mut BufferPool) {
        match (self.head, self.bytes) {
            (None, Held::Own(a)) => pool.give_shared(a),
            _ => pool.give_shared_piece(),
        }
    }
}

/// A message's bytes as queued, then, once a packet carries a piece of it
/// where it lies, shared with those packets.
#[derive(Debug)]
enum MessageBytes {
    Owned(Vec<u8>),
    Shared(Arc<Vec<u8>>),
    /// Lent memory between a few bytes of the endpoint's own (a layer's
    /// header and trailer), sent as one message.
    Lent {
        prefix: Vec<u8>,
        body: Arc<dyn LentBytes>,
        suffix: Vec<u8>,
    },
}

impl MessageBytes {
    fn capacity(&self) -> usize {
        match self {
            MessageBytes::Owned(v) => v.capacity(),
            MessageBytes::Shared(a) => a.capacity(),
            MessageBytes::Lent { prefix, suffix, .. } => prefix.capacity() + suffix.capacity(),
        }
    }

    /// Shared from now on.
    fn share(&mut self) -> Held {
        if let MessageBytes::Owned(v) = self {
            *self = MessageBytes::Shared(Arc::new(std::mem::take(v)));
        }
        match self {
            MessageBytes::Shared(a) => Held::Own(a.clone()),
            MessageBytes::Lent { body, .. } => Held::Lent(body.clone()),
            MessageBytes::Owned(_) => unreachable!("shared above"),
        }
    }
}

/// A packet carries a piece of a large message where it lies, rather than
/// a copy, from this many bytes (a copy of less costs less than the
/// bookkeeping; loopback's datagrams carry 63 KiB, Ethernet's 1.4 KiB);
/// a piece that fills its packet goes where it lies from
/// [`FULL_PIECE_MIN`].
const SHARED_PIECE_MIN: usize = 8 << 10;

/// A piece of a large message that fills its packet, as Ethernet's pieces
/// do, goes where it lies from this many bytes; one that does not (a
/// message's last) is copied from [`SHARED_PIECE_MIN`] down, so that the
/// rest of its packet carries the messages behind it. Between two test-bed hosts
/// whose links outrun the cores (40 Gbit/s), streams of 1 MiB messages ran
/// 1.04-1.25x (median 1.17) and of 64 KiB 1.01-1.36x as fast as with
/// Ethernet's pieces copied, six alternating pairs each; over loopback,
/// and a BSP total exchange among 8 hosts, the same within the noise.
const FULL_PIECE_MIN: usize = 1 << 10;

#[derive(Debug)]
struct SentPacket {
    payload: SharedPayload,
    flags: Flags,
    last_sent: Time,
    /// The path of the last transmission.
    path: Path,
    transmissions: u32,
    /// Already in the retransmission queue.
    queued: bool,
}

#[derive(Debug)]
struct OutMessage {
    /// The message is `data[headroom..]`. A framed message
    /// ([`Endpoint::send_framed`](crate::Endpoint::send_framed)) has room
    /// for its record header in front, so that, whole in one packet, its
    /// buffer becomes the packet's kept payload.
    data: MessageBytes,
    headroom: usize,
    /// How much of the message has gone into packets in pieces.
    offset: usize,
    /// Where its pieces end: its length, or where its end begins once that
    /// went ahead of its first piece ([`Channel::tail_ahead`]).
    end: usize,
}

impl OutMessage {
    fn len(&self) -> usize {
        match &self.data {
            MessageBytes::Owned(v) => v.len() - self.headroom,
            MessageBytes::Shared(a) => a.len() - self.headroom,
            MessageBytes::Lent { prefix, body, suffix } => prefix.len() + (**body).as_ref().len() + suffix.len(),
        }
    }

    /// Of a message in lent memory, its prefix and where that memory ends
    /// in the message (a piece shared where it lies stops there).
    fn lent(&self) -> Option<(&[u8], usize)> {
        match &self.data {
            MessageBytes::Lent { prefix, body, .. } => Some((prefix, prefix.len() + (**body).as_ref().len())),
            _ => None,
        }
    }

    /// Appends the message's bytes in `range` to `out`.
    fn copy_to(&self, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        let parts: [&[u8]; 3] = match &self.data {
            MessageBytes::Owned(v) => [&v[self.headroom..], &[], &[]],
            MessageBytes::Shared(a) => [&a[self.headroom..], &[], &[]],
            MessageBytes::Lent { prefix, body, suffix } => [prefix, (**body).as_ref(), suffix],
        };
        let mut at = 0;
        for part in parts {
            let (lo, hi) = (range.start.max(at), range.end.min(at + part.len()));
            if lo < hi {
                out.extend_from_slice(&part[lo - at..hi - at]);
            }
            at += part.len();
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct AckDue {
    echo: u64,
    arrived: Time,
    /// An answer to a prod or to the last packet of a phase: it must go as an
    /// explicit packet, because the echo measures the round trip and tells
    /// the sender what was lost before it.
    reply: bool,
}

#[derive(Debug)]
struct Reassembly {
    /// The message's bytes; where its start goes into a receive's buffer
    /// (`placed`), only what comes after that.
    data: Vec<u8>,
    total: usize,
    /// Its last bytes, where they came ahead of its first piece
    /// ([`crate::Endpoint::set_tail_ahead`]): its pieces end before them
    /// ([`Reassembly::end`]), and they are added once the pieces are in.
    ahead: Vec<u8>,
    placed: Option<Placed>,
}

/// The first `len` bytes of a message in reassembly, written into the
/// buffer a receive gave ([`crate::Endpoint::place`]) as they come.
#[derive(Debug)]
struct Placed {
    ptr: *mut u8,
    len: usize,
    filled: usize,
}

// SAFETY: the receive's buffer is lent to the endpoint (whichever thread
// holds it) until the receive takes it back (`Endpoint::unplace`).
unsafe impl Send for Placed {}

/// A receive's buffer that the next message of `total` bytes from `peer`
/// on `channel`, if at most `cap + tail` long and at least `tail`, is
/// reassembled into: all but its last `tail` bytes
/// ([`crate::Endpoint::place`]). With a `filter`, only a message whose
/// last `tail` bytes came ahead of it and that the filter accepts.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    pub peer: u32,
    pub channel: u16,
    pub ptr: *mut u8,
    pub cap: usize,
    pub tail: usize,
    pub filter: Option<TailFilter>,
}

/// Which messages a receive's buffer takes, by their end
/// ([`crate::Endpoint::place`]): those that end with `ends_with` where
/// that is given, and not with `not_ending_with` where that is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TailFilter {
    pub ends_with: Option<Vec<u8>>,
    pub not_ending_with: Option<Vec<u8>>,
}

impl TailFilter {
    pub fn accepts(&self, end: &[u8]) -> bool {
        self.ends_with.as_deref().is_none_or(|s| end.ends_with(s))
            && self.not_ending_with.as_deref().is_none_or(|s| !end.ends_with(s))
    }
}

// SAFETY: as `Placed`.
unsafe impl Send for Placement {}

impl Reassembly {
    /// A message of `total` bytes whose last bytes came `ahead` (or none),
    /// into `placement` if it is for it (taken then), else into a buffer of
    /// its own.
    fn new(total: usize, ahead: &[u8], peer: u32, channel: u16, placement: &mut Option<Placement>) -> Reassembly {
        let ahead = ahead.to_vec();
        if placement.as_ref().is_some_and(|p| Reassembly::fits(p, total, &ahead, peer, channel)) {
            let p = placement.take().expect("checked");
            let len = total - p.tail;
            let placed = Placed { ptr: p.ptr, len, filled: 0 };
            return Reassembly { data: Vec::with_capacity(total - len), total, ahead, placed: Some(placed) };
        }
        Reassembly { data: Vec::with_capacity(total), total, ahead, placed: None }
    }

    /// Whether a message of `total` bytes from `peer` on `channel`, whose
    /// last bytes came `ahead`, goes into `p`.
    fn fits(p: &Placement, total: usize, ahead: &[u8], peer: u32, channel: u16) -> bool {
        (p.peer, p.channel) == (peer, channel)
            && total >= p.tail
            && total - p.tail <= p.cap
            && p.filter.as_ref().is_none_or(|f| ahead.len() == p.tail && f.accepts(ahead))
    }

    /// Whether all its pieces came: then [`Reassembly::finish`] makes it
    /// whole.
    fn complete(&self) -> bool {
        self.filled() == self.end()
    }

    /// Where its pieces end: before the end that came ahead.
    fn end(&self) -> usize {
        self.total - self.ahead.len()
    }

    /// Adds the end that came ahead.
    fn finish(&mut self) {
        let ahead = std::mem::take(&mut self.ahead);
        self.extend(&ahead);
    }

    /// Moves what came of the message so far into the receive's buffer of
    /// `p`, where the rest goes too.
    fn adopt(&mut self, p: &Placement) {
        let len = self.total - p.tail;
        let n = self.data.len().min(len);
        // SAFETY: `n <= len <= p.cap`, within the receive's buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr(), p.ptr, n) };
        self.data.drain(..n);
        self.placed = Some(Placed { ptr: p.ptr, len, filled: n });
    }

    /// Bytes of the message's pieces that came.
    fn filled(&self) -> usize {
        self.placed.as_ref().map_or(0, |p| p.filled) + self.data.len()
    }

    /// Appends `bytes`: into the receive's buffer while its part lasts.
    fn extend(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        if let Some(p) = self.placed.as_mut() {
            let n = (p.len - p.filled).min(rest.len());
            // SAFETY: within the `len` bytes of the receive's buffer, which
            // the endpoint holds until `Endpoint::unplace`.
            unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), p.ptr.add(p.filled), n) };
            p.filled += n;
            rest = &rest[n..];
        }
        self.data.extend_from_slice(rest);
    }

    /// Where the next bytes go.
    fn next_region(&mut self) -> *mut u8 {
        match self.placed.as_mut() {
            Some(p) if p.filled < p.len => p.ptr.wrapping_add(p.filled),
            _ => {
                let filled = self.data.len();
                self.data.as_mut_ptr().wrapping_add(filled)
            }
        }
    }

    /// How many bytes fit at [`Reassembly::next_region`] in one piece (up
    /// to the end of the pieces).
    fn room(&self) -> usize {
        let room = match self.placed.as_ref() {
            Some(p) if p.filled < p.len => p.len - p.filled,
            _ => self.data.capacity() - self.data.len(),
        };
        room.min(self.end() - self.filled())
    }

    /// Records `len` bytes written at [`Reassembly::next_region`].
    ///
    /// # Safety
    /// They were written, and `len` is at most that region's length.
    unsafe fn advance(&mut self, len: usize) {
        match self.placed.as_mut() {
            Some(p) if p.filled < p.len => p.filled += len,
            // SAFETY: the caller wrote them within the capacity.
            _ => unsafe { self.data.set_len(self.data.len() + len) },
        }
    }

    /// Whether a buffer of its own has room for all that is not placed (the
    /// end that came ahead included).
    fn has_room(&self) -> bool {
        self.data.capacity() >= self.total - self.placed.as_ref().map_or(0, |p| p.len)
    }

    /// Makes the message's start a buffer's own again (the receive took
    /// its buffer back): `data` holds all that came.
    fn unplace(&mut self) {
        let Some(p) = self.placed.take() else { return };
        let mut data = Vec::with_capacity(self.total);
        // SAFETY: the first `filled` bytes of the receive's buffer were
        // written with this message's start.
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(p.ptr, p.filled) });
        data.extend_from_slice(&self.data);
        self.data = data;
    }
}

/// A data packet's payload: its bytes, or one record of a message in
/// reassembly whose bytes were read straight to their place in the
/// message's buffer ([`crate::Endpoint::handle_landed`]), or one whole
/// message whose bytes after `head` were read where an aim said
/// ([`crate::Endpoint::aim`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Payload<'a> {
    Bytes(&'a [u8]),
    Landed { message_len: u32, offset: u32, len: usize },
    Aimed { head: &'a [u8], len: usize },
}

#[derive(Debug)]
pub(crate) struct Channel {
    pub peer: u32,
    pub id: u16,
    pub strategy: Strategy,
    pub colour: u8,
    /// The channel's data always takes the premium path, whatever the
    /// peer's mode: a control plane (seed 004 §2).
    pub premium: bool,
    pub stats: ChannelStats,
    /// Set when the peer broke the protocol; the channel then stays silent.
    pub failed: bool,
    rtt: RttEstimator,
    /// Reordering tolerated before a hole is prodded, as a fraction of the round trip.
    reorder_fraction: f64,

    // Sender half.
    next_seq: u64,
    /// Oldest unacknowledged sequence number: `unacked[0]`.
    base: u64,
    unacked: VecDeque<SentPacket>,
    retransmit: VecDeque<u64>,
    pending: VecDeque<OutMessage>,
    phase_end: bool,
    /// The last packet of the phase has left and nothing new was queued since.
    phase_closed: bool,
    /// Last time the peer acknowledged something or new data left.
    last_progress: Time,
    /// Since when the oldest unacknowledged packet has waited for the peer.
    waiting_since: Time,
    rto_backoff: u32,
    probe_due: bool,
    /// The receiver prods for what it waits for (seed 002 §4.2: recovery
    /// decided by the receiver's needs, not the sender's timeouts), so the
    /// tail probe waits [`RECEIVER_DRIVEN_BACKOFF`] more doublings.
    pub receiver_driven: bool,
    /// The tail probe waits as [`RECEIVER_DRIVEN_BACKOFF`] more doublings
    /// only when the last packet came more than a timeout after the one
    /// before it ([`crate::Endpoint::set_probe_by_pace`]).
    pub probe_by_pace: bool,
    /// When the newest new data packet left, and how long after the one
    /// before it.
    last_new_at: Time,
    last_new_gap: Duration,
    /// The first packet of a message of several carries its last this many
    /// bytes ahead of its first piece ([`crate::Endpoint::set_tail_ahead`]).
    pub tail_ahead: usize,

    // Receiver half.
    next_expected: u64,
    /// The peer has sent every sequence number below this (as far as we know).
    known_sent: u64,
    /// One past the highest sequence number that actually arrived.
    arrived_beyond: u64,
    held: BTreeMap<u64, Vec<u8>>,
    reassembly: Option<Reassembly>,
    arrivals_since_ack: u32,
    ack_asked: bool,
    ack_due: Option<AckDue>,
    prod_at: Option<Time>,
    prod_backoff: u32,
    prod_due: bool,
    /// The layer above waits for more from the peer ([`Channel::awaiting`])
    /// and has said so since the last prod or arrival.
    awaited: bool,
    /// The newest data packet that arrived: when the peer sent it (its
    /// clock) and when it arrived (ours). A prod echoes it, so the peer can
    /// tell what should have arrived by then from what may be on its way.
    newest_data: Option<(u64, Time)>,
    /// The sequence number and sender's timestamp of the newest data packet
    /// that came on its first transmission, and the sender's gap between
    /// the last two consecutive ones: the pace of a paced stream.
    newest_fresh: Option<(u64, u64)>,
    send_gap: Duration,
    /// The newest data arrival on the premium path, the gap before it (from
    /// the one before, within the longest patience), and whether the last
    /// packet delivered in order came on the premium path. When a sender
    /// moves from the premium path to a faster ordinary one, the ordinary
    /// packets overtake those still on their way; a hole whose lower edge
    /// came on the premium path waits for that path's pace before a prod.
    premium_arrival: Option<Time>,
    premium_gap: Duration,
    frontier_premium: bool,
    /// A mode decision of ours to send to the peer in an LSTAT, with our status.
    lstat_due: Option<Decision>,
}

impl Channel {
    pub(crate) fn new(peer: u32, id: u16, cfg: &Config) -> Channel {
        Channel {
            peer,
            id,
            strategy: cfg.strategy,
            colour: 0,
            premium: false,
            stats: ChannelStats::default(),
            failed: false,
            rtt: RttEstimator::new(cfg.initial_rtt, cfg.min_rto, max_rto(cfg)),
            reorder_fraction: cfg.reorder_fraction,
            next_seq: 0,
            base: 0,
            unacked: VecDeque::new(),
            retransmit: VecDeque::new(),
            pending: VecDeque::new(),
            phase_end: false,
            phase_closed: false,
            last_progress: Time::ZERO,
            waiting_since: Time::ZERO,
            rto_backoff: 0,
            probe_due: false,
            receiver_driven: false,
            probe_by_pace: false,
            last_new_at: Time::ZERO,
            last_new_gap: Duration::MAX,
            tail_ahead: 0,
            next_expected: 0,
            known_sent: 0,
            arrived_beyond: 0,
            held: BTreeMap::new(),
            reassembly: None,
            arrivals_since_ack: 0,
            ack_asked: false,
            ack_due: None,
            prod_at: None,
            prod_backoff: 0,
            prod_due: false,
            awaited: false,
            newest_data: None,
            newest_fresh: None,
            send_gap: Duration::ZERO,
            premium_arrival: None,
            premium_gap: Duration::ZERO,
            frontier_premium: false,
            lstat_due: None,
        }
    }

    pub(crate) fn is_fresh(&self) -> bool {
        self.next_seq == 0 && self.next_expected == 0 && self.pending.is_empty()
    }

    /// Bytes the channel holds on the heap, from its queues' capacities
    /// and the buffers in them: packets kept for resending, messages not
    /// yet packetised, packets held out of order (a B-tree entry counted
    /// at its key and value), a message in reassembly. A packet payload
    /// still shared with a datagram in flight counts here too.
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let unacked = self.unacked.capacity() * size_of::<SentPacket>()
            + self.unacked.iter().map(|p| p.payload.held_bytes()).sum::<usize>();
        let pending = self.pending.capacity() * size_of::<OutMessage>()
            + self.pending.iter().map(|m| m.data.capacity()).sum::<usize>();
        let held = self.held.len() * size_of::<(u64, Vec<u8>)>() + self.held.values().map(Vec::capacity).sum::<usize>();
        let reassembly = self.reassembly.as_ref().map_or(0, |r| r.data.capacity() + r.ahead.capacity());
        unacked + self.retransmit.capacity() * size_of::<u64>() + pending + held + reassembly
    }

    /// Nothing queued, in flight or owed: every message sent has been acknowledged.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.unacked.is_empty() && self.ack_due.is_none() && self.lstat_due.is_none()
    }

    /// How long sent data has waited for any acknowledgement from the peer
    /// (zero when nothing is unacknowledged).
    pub(crate) fn unanswered_for(&self, now: Time) -> Duration {
        if self.unacked.is_empty() {
            return Duration::ZERO;
        }
        now.since(self.waiting_since)
    }

    /// The receiver half knows of packets it has not got.
    pub(crate) fn is_waiting(&self) -> bool {
        self.known_sent > self.next_expected
    }

    /// Queues the message `data[headroom..]` (`headroom` is 0, or
    /// [`RECORD_HEADER_LEN`] for a framed message).
    pub(crate) fn queue(&mut self, data: Vec<u8>, headroom: usize) {
        debug_assert!(headroom == 0 || headroom == RECORD_HEADER_LEN);
        let end = data.len() - headroom;
        self.queue_message(OutMessage { data: MessageBytes::Owned(data), headroom, offset: 0, end });
    }

    /// Queues the message of `body` followed by `suffix`, its pieces sent
    /// from `body` where it lies (see [`LentBytes`]).
    pub(crate) fn queue_lent(&mut self, prefix: Vec<u8>, body: Arc<dyn LentBytes>, suffix: Vec<u8>) {
        let end = prefix.len() + (*body).as_ref().len() + suffix.len();
        let data = MessageBytes::Lent { prefix, body, suffix };
        self.queue_message(OutMessage { data, headroom: 0, offset: 0, end });
    }

    fn queue_message(&mut self, message: OutMessage) {
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += message.len() as u64;
        self.pending.push_back(message);
        self.phase_closed = false;
    }

    /// The layer above waits for more from the peer (it knows more is
    /// coming, for example from a barrier's communication matrix). Unless
    /// something arrives first, the peer is prodded two retransmission
    /// timeouts from now (one if a hole is known; with no hole known, at
    /// least two of the gaps at which the peer sent its last packets, so
    /// that a paced stream is not prodded for between packets), then with exponential
    /// back-off while the wait lasts: a lost last packet is asked for by the one who misses it, and
    /// a peer that is merely late answers with an acknowledgement (seed 002
    /// §4.3). Call it on every turn of the wait; it is cheap.
    pub(crate) fn awaiting(&mut self, now: Time) {
        if self.failed || self.strategy == Strategy::BestEffort {
            return;
        }
        self.awaited = true;
        if self.prod_at.is_none() {
            let patience = if self.is_waiting() {
                self.backoff(self.prod_backoff)
            } else {
                // A stream paced slower than that (seed 002 §3's pacing, a
                // slow link) would be prodded for between every two of its
                // packets: wait two of the sender's last gaps, at most as
                // long as the sender's own tail probe.
                let pace = (self.send_gap * 2).min(self.backoff(RECEIVER_DRIVEN_BACKOFF));
                self.backoff(self.prod_backoff + AWAIT_BACKOFF).max(pace)
            };
            self.prod_at = Some(now + patience);
        }
    }

    /// Asks for an acknowledgement of what is unacknowledged now, at once
    /// (a tail probe without waiting for its timeout). Returns whether
    /// there is a probe to send.
    pub(crate) fn request_acknowledgement(&mut self) -> bool {
        if !self.failed && !self.unacked.is_empty() {
            self.probe_due = true;
        }
        self.probe_due
    }

    pub(crate) fn end_phase(&mut self) {
        // A best-effort channel asks for no acknowledgement at a phase's end.
        if !self.pending.is_empty() && self.strategy != Strategy::BestEffort {
            self.phase_end = true;
        }
    }

    /// Whether `poll_transmit` has something to send now.
    pub(crate) fn has_work(&self, send_buffers_free: bool) -> bool {
        !self.failed
            && (self.ack_due.is_some()
                || self.lstat_due.is_some()
                || self.prod_due
                || self.probe_due
                || !self.retransmit.is_empty()
                || (!self.pending.is_empty() && send_buffers_free))
    }

    /// Whether messages wait for their first packets to leave.
    pub(crate) fn has_new_data(&self) -> bool {
        !self.failed && !self.pending.is_empty()
    }

    pub(crate) fn waits_for_buffers(&self) -> bool {
        !self.pending.is_empty()
    }

    /// A one-line account of the channel's state, for diagnostics.
    pub(crate) fn describe(&self) -> String {
        format!(
            "peer {} ch {}: send next {} base {} unacked {} retx {:?} pending {} probe {} backoff {} | recv next {} known {} held {:?} reassembly {:?} prod_at {:?} prod_backoff {} ack_due {}{}",
            self.peer,
            self.id,
            self.next_seq,
            self.base,
            self.unacked.len(),
            self.retransmit,
            self.pending.len(),
            self.probe_due,
            self.rto_backoff,
            self.next_expected,
            self.known_sent,
            self.held.keys().take(8).collect::<Vec<_>>(),
            self.reassembly.as_ref().map(|r| (r.filled(), r.total)),
            self.prod_at,
            self.prod_backoff,
            self.ack_due.is_some(),
            if self.failed { " FAILED" } else { "" },
        )
    }

    // ----- inputs -------------------------------------------------------

    /// A verified packet from the peer. `Err` means the peer broke the protocol.
    pub(crate) fn handle_packet(
        &mut self,
        now: Time,
        header: &Header,
        payload: Payload<'_>,
        sh: &mut Shared<'_>,
    ) -> Result<(), &'static str> {
        if self.failed {
            return Ok(());
        }
        if header.packet_type == PacketType::Data {
            self.on_peer_info(now, header.ack, header.end_of_hole, Info::Piggyback, sh)?;
            return self.on_data(now, header, payload, sh);
        }
        let Payload::Bytes(payload) = payload else { return Err("a control packet's payload read in place") };
        match header.packet_type {
            PacketType::Ack => {
                let ack = AckPayload::read(payload).map_err(|_| "malformed acknowledgement")?;
                self.stats.explicit_acks_received += 1;
                let echo = Time::from_nanos(ack.echo_timestamp);
                if echo <= now {
                    let held = Duration::from_nanos(ack.delay as u64);
                    self.rtt.sample(now.since(echo).saturating_sub(held));
                }
                self.learn_sent(now, header.sequence);
                self.on_peer_info(now, header.ack, header.end_of_hole, Info::Reply { echo }, sh)?;
            }
            PacketType::Prod => {
                self.stats.prods_received += 1;
                // The newest of our packets the peer had, and how long before
                // the prod it came: what we sent until then, and in the first
                // half of the time since, should be there. (The second half
                // is slack for a transit that varies, as behind a paced and
                // shared port; the receiver waits at least two of our gaps
                // between packets, so a lost last packet is within the first.)
                let seen = match payload.len() {
                    0 => None,
                    _ => {
                        let echo = AckPayload::read(payload).map_err(|_| "malformed prod")?;
                        let seen = Time::from_nanos(echo.echo_timestamp.saturating_add(u64::from(echo.delay) / 2));
                        (seen <= now).then_some(seen)
                    }
                };
                self.learn_sent(now, header.sequence);
                let resent = self.on_peer_info(now, header.ack, header.end_of_hole, Info::Prod { seen }, sh)?;
                if !resent && self.retransmit.is_empty() {
                    // Nothing is missing: say so, and the prodder backs off.
                    self.ack_due = Some(AckDue { echo: header.timestamp, arrived: now, reply: true });
                }
            }
            // The endpoint hands over only data, ack and prod packets.
            _ => {}
        }
        Ok(())
    }

    /// The sequence number the next new data packet will carry.
    pub(crate) fn next_sequence(&self) -> u64 {
        self.next_seq
    }

    /// Frees the packets below `seq`: the layer above knows the peer has
    /// them (seed 002 §4.4, the coarse-grained scheme: once a barrier
    /// shows every process has passed the superstep, its packets are
    /// delivered). Nothing is resent or probed for them any more. Returns
    /// how many were freed.
    pub(crate) fn acknowledge_below(&mut self, now: Time, seq: u64, sh: &mut Shared<'_>) -> u64 {
        let upto = seq.min(self.next_seq);
        let mut freed = 0;
        while self.base < upto {
            let packet = self.unacked.pop_front().expect("base < next_seq");
            packet.payload.give_back(sh.send_pool);
            self.base += 1;
            freed += 1;
        }
        if freed > 0 {
            self.stats.colour_acks += freed;
            self.last_progress = now;
            self.waiting_since = now;
            self.rto_backoff = 0;
        }
        freed
    }

    /// Acknowledgement and end-of-hole fields from the peer, about the packets
    /// we sent. Frees acknowledged buffers and schedules retransmission of the
    /// hole. Returns whether anything was scheduled.
    fn on_peer_info(
        &mut self,
        now: Time,
        ack: u64,
        end_of_hole: u64,
        info: Info,
        sh: &mut Shared<'_>,
    ) -> Result<bool, &'static str> {
        if ack > self.next_seq || end_of_hole > self.next_seq {
            return Err("acknowledges packets never sent");
        }
        if ack > self.base {
            while self.base < ack {
                let packet = self.unacked.pop_front().expect("base < next_seq");
                packet.payload.give_back(sh.send_pool);
                self.base += 1;
            }
            if info == Info::Piggyback {
                self.stats.implicit_acks += 1;
            }
            self.last_progress = now;
            self.waiting_since = now;
            self.rto_backoff = 0;
        }
        let from = ack.max(self.base);
        let mut scheduled = false;
        // The hole [ack, end_of_hole) is known to be missing.
        let hole_end = match self.strategy {
            Strategy::HoleFilling => end_of_hole,
            Strategy::GoBackN if end_of_hole > ack => self.next_seq,
            Strategy::GoBackN => from,
            // Nothing was kept to resend.
            Strategy::BestEffort => from,
        };
        for seq in from..hole_end {
            scheduled |= self.schedule_retransmit(seq, now, sh.data_path);
        }
        // The peer holds nothing beyond `ack`: whatever left before the packet
        // it answers (or more than a round trip ago, for a prod) is lost too.
        if end_of_hole == ack {
            let cutoff = match info {
                Info::Reply { echo } => Some(echo),
                // A prod may have waited in our socket: what left less
                // than a timeout ago may still be on its way, and so may
                // what left after the newest packet the peer had, less the
                // time it then waited (a paced stream queued behind a slow
                // port takes longer than a control packet's round trip).
                Info::Prod { seen } => {
                    let recent = now - self.rtt.rto();
                    Some(seen.map_or(recent, |seen| seen.min(recent)))
                }
                Info::Piggyback | Info::Status => None,
            };
            if let Some(cutoff) = cutoff {
                for seq in from..self.next_seq {
                    if self.unacked[(seq - self.base) as usize].last_sent < cutoff {
                        scheduled |= self.schedule_retransmit(seq, now, sh.data_path);
                    }
                }
            }
        }
        Ok(scheduled)
    }

    /// Queues `seq` for resending on `path` (where data goes now).
    fn schedule_retransmit(&mut self, seq: u64, now: Time, path: Path) -> bool {
        let srtt = self.rtt.srtt();
        let packet = &mut self.unacked[(seq - self.base) as usize];
        if packet.queued {
            return false;
        }
        // Stale hole reports still in flight must not resend a packet twice
        // within one round trip (seed 002 §4.3). On the other path they may:
        // after a switch to the premium path, a resend stuck in the ordinary
        // path's queue is no reason to wait.
        if packet.transmissions > 1 && now < packet.last_sent + srtt && packet.path == path {
            return false;
        }
        packet.queued = true;
        self.retransmit.push_back(seq);
        true
    }

    /// An LSTAT from the peer, whose mode decision the endpoint has applied
    /// (`sh.data_path` is the new path). Like a STAT it acknowledges and
    /// shows what is missing; all of that is resent, on the new path.
    pub(crate) fn handle_lstat(
        &mut self,
        now: Time,
        header: &Header,
        status: &LatencyStatus,
        ranges: MissingRanges<'_>,
        sh: &mut Shared<'_>,
    ) -> Result<(), &'static str> {
        if self.failed {
            return Ok(());
        }
        if status.known_sent > self.next_seq {
            return Err("status reports packets never sent");
        }
        self.stats.lstats_received += 1;
        self.learn_sent(now, header.sequence);
        self.on_peer_info(now, header.ack, header.end_of_hole, Info::Status, sh)?;
        if self.strategy == Strategy::HoleFilling {
            for (start, end) in ranges {
                for seq in start.max(self.base)..end {
                    self.schedule_retransmit(seq, now, sh.data_path);
                }
            }
        }
        // The peer knows nothing of the packets from `known_sent` on. Those
        // that left on the ordinary path before the offending probe are at
        // least as late as it was, or lost: when switching to the premium
        // path, send them again there.
        if status.mode == WireMode::High {
            let cutoff = Time::from_nanos(status.probe_timestamp);
            for seq in status.known_sent.max(self.base)..self.next_seq {
                let packet = &self.unacked[(seq - self.base) as usize];
                if packet.path == Path::Ordinary && packet.last_sent < cutoff {
                    self.schedule_retransmit(seq, now, sh.data_path);
                }
            }
        }
        Ok(())
    }

    /// Sends a mode decision to the peer with the next packet.
    pub(crate) fn queue_lstat(&mut self, decision: Decision) {
        if !self.failed {
            self.lstat_due = Some(decision);
        }
    }

    fn learn_sent(&mut self, now: Time, peer_next_seq: u64) {
        if peer_next_seq > self.known_sent {
            self.known_sent = peer_next_seq;
            self.update_hole(now, false);
        }
    }

    fn on_data(
        &mut self,
        now: Time,
        header: &Header,
        payload: Payload<'_>,
        sh: &mut Shared<'_>,
    ) -> Result<(), &'static str> {
        let seq = header.sequence;
        // The last number of the wire's 48 bits would take the
        // acknowledgement past what a header can carry.
        if seq >= SEQUENCE_LIMIT - 1 {
            return Err("sequence number space exhausted");
        }
        if let Payload::Bytes(bytes) = payload {
            Records::validate(bytes).map_err(|_| "malformed data payload")?;
        }
        let best_effort = self.strategy == Strategy::BestEffort;
        if header.flags.contains(Flags::BEST_EFFORT) != best_effort {
            return Err(if best_effort {
                "reliable data on a best-effort channel"
            } else {
                "best-effort data on a reliable channel"
            });
        }
        if best_effort {
            let Payload::Bytes(bytes) = payload else { return Err("best-effort data read in place") };
            return self.on_best_effort_data(seq, bytes, sh);
        }
        self.arrivals_since_ack += 1;
        if self.newest_data.is_none_or(|(sent, _)| header.timestamp > sent) {
            self.newest_data = Some((header.timestamp, now));
        }
        if !header.flags.contains(Flags::RETRANSMISSION) {
            if let Some((last, sent)) = self.newest_fresh {
                if seq == last + 1 && header.timestamp > sent {
                    // A pause longer than the longest patience is one between
                    // phases (the sender computed), not the stream's pace.
                    let gap = Duration::from_nanos(header.timestamp - sent);
                    if gap <= self.backoff(RECEIVER_DRIVEN_BACKOFF) {
                        self.send_gap = gap;
                    }
                }
            }
            if self.newest_fresh.is_none_or(|(last, _)| seq > last) {
                self.newest_fresh = Some((seq, header.timestamp));
            }
        }
        if header.flags.contains(Flags::ACK_REQUESTED) {
            self.ack_asked = true;
        }
        let premium = header.flags.contains(Flags::PREMIUM);
        if premium {
            if let Some(last) = self.premium_arrival {
                let gap = now.since(last);
                if gap <= self.backoff(RECEIVER_DRIVEN_BACKOFF) {
                    self.premium_gap = gap;
                }
            }
            self.premium_arrival = Some(now);
        }
        if seq == self.next_expected {
            self.frontier_premium = premium;
        }
        let progressed = if seq < self.next_expected || self.held.contains_key(&seq) {
            self.stats.duplicates += 1;
            false
        } else if seq == self.next_expected {
            let delivered = match payload {
                Payload::Bytes(bytes) => self.deliver(bytes, sh.in_place, sh)?,
                Payload::Landed { message_len, offset, len } => self.deliver_landed(message_len, offset, len, sh)?,
                Payload::Aimed { head, len } => self.deliver_aimed(head, len, sh)?,
            };
            if delivered {
                self.stats.data_received += 1;
                self.next_expected += 1;
                self.drain_held(sh)?;
                true
            } else {
                self.stats.drops += 1;
                false
            }
        } else {
            match payload {
                Payload::Bytes(bytes) => self.hold(seq, bytes, sh),
                // Only the next expected packet is read in place.
                Payload::Landed { .. } | Payload::Aimed { .. } => return Err("data read in place out of order"),
            }
            false
        };
        self.known_sent = self.known_sent.max(seq + 1);
        self.arrived_beyond = self.arrived_beyond.max(seq + 1);

        if header.flags.contains(Flags::LAST_OF_PHASE) {
            self.ack_due = Some(AckDue { echo: header.timestamp, arrived: now, reply: true });
        } else if self.ack_asked && self.arrivals_since_ack >= sh.cfg.explicit_ack_threshold() && self.ack_due.is_none()
        {
            self.ack_due = Some(AckDue { echo: header.timestamp, arrived: now, reply: false });
        }
        self.update_hole(now, progressed);
        Ok(())
    }

    /// A data packet of a best-effort channel: delivered if it is the
    /// newest yet, after going past the packets before it that have not
    /// come (and the message one of them held a piece of); dropped if it
    /// comes after a later one, or finds no room in the receive buffer.
    /// Nothing is held, prodded for or acknowledged.
    fn on_best_effort_data(&mut self, seq: u64, payload: &[u8], sh: &mut Shared<'_>) -> Result<(), &'static str> {
        if seq < self.next_expected {
            // Already counted in `skipped` when a later one came.
            return Ok(());
        }
        let gap = seq > self.next_expected;
        let mut counted = false;
        if gap {
            self.stats.skipped += seq - self.next_expected;
            counted = self.abandon(sh);
        }
        // A message begun in a packet that did not come: its last pieces
        // open this one, and go with it.
        let mut start = 0;
        if self.reassembly.is_none() {
            for record in Records::new(payload) {
                let record = record.map_err(|_| "malformed data payload")?;
                if record.offset == 0 {
                    break;
                }
                start += RECORD_HEADER_LEN + record.data.len();
            }
        }
        self.next_expected = seq + 1;
        self.known_sent = self.known_sent.max(seq + 1);
        self.arrived_beyond = self.arrived_beyond.max(seq + 1);
        // Counted once per gap: a message dropped is counted where its
        // missing piece shows, not in each packet of the rest of it.
        if start > 0 && gap && !counted {
            self.stats.messages_abandoned += 1;
        }
        if start < payload.len() && !self.deliver(&payload[start..], false, sh)? {
            // No room: this packet goes too, and the message it continues.
            self.stats.drops += 1;
            self.abandon(sh);
            return Ok(());
        }
        self.stats.data_received += 1;
        Ok(())
    }

    /// Drops the message in reassembly, if any, and its reservation of
    /// the receive budget; returns whether there was one.
    fn abandon(&mut self, sh: &mut Shared<'_>) -> bool {
        let Some(r) = self.reassembly.take() else { return false };
        sh.recv.partial -= r.total;
        self.stats.messages_abandoned += 1;
        true
    }

    /// Keeps an out-of-order packet if a buffer is free; under pressure only
    /// the next expected packet is accepted (its acknowledgement fields were
    /// read all the same).
    fn hold(&mut self, seq: u64, payload: &[u8], sh: &mut Shared<'_>) {
        let too_far = seq - self.next_expected > sh.recv_pool.limit() as u64;
        if self.strategy == Strategy::GoBackN || too_far {
            self.stats.drops += 1;
            return;
        }
        match sh.recv_pool.take() {
            Some(mut buf) => {
                buf.extend_from_slice(payload);
                self.held.insert(seq, buf);
                self.stats.data_received += 1;
            }
            None => self.stats.drops += 1,
        }
    }

    /// Delivers held packets that are now in sequence.
    pub(crate) fn drain_held(&mut self, sh: &mut Shared<'_>) -> Result<(), &'static str> {
        while self.held.first_key_value().is_some_and(|(&seq, _)| seq == self.next_expected) {
            let (seq, buf) = self.held.pop_first().expect("checked above");
            match self.deliver(&buf, false, sh) {
                Ok(true) => {
                    sh.recv_pool.give(buf);
                    self.next_expected += 1;
                }
                Ok(false) => {
                    self.held.insert(seq, buf);
                    break;
                }
                Err(reason) => {
                    sh.recv_pool.give(buf);
                    return Err(reason);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn blocked_on_recv_buffer(&self) -> bool {
        self.held.first_key_value().is_some_and(|(&seq, _)| seq == self.next_expected)
    }

    /// Hands the messages of an in-sequence payload to the application, or
    /// returns `false` (touching nothing) if they do not fit in the receive
    /// buffer now. With `in_place`, a large message in the first record is
    /// left where it is, for the caller to deliver in its datagram.
    fn deliver(&mut self, payload: &[u8], in_place: bool, sh: &mut Shared<'_>) -> Result<bool, &'static str> {
        // First pass: check that the records continue the message stream and
        // see what they would do to the receive budget. A message's end
        // that came ahead (a record that ends it, where none is open, right
        // before its start) moves where its pieces end.
        let mut open = self.reassembly.as_ref().map(|r| (r.total, r.end(), r.filled(), false));
        let mut ahead: Option<(u32, usize)> = None;
        let mut admission = Admission::default();
        for record in Records::new(payload) {
            let record = record.map_err(|_| "malformed data payload")?;
            let len = record.data.len();
            open = match open {
                None if record.offset != 0 => {
                    let end_ahead = ahead.is_none()
                        && record.ends_message()
                        && (1..=TAIL_AHEAD_MAX).contains(&len)
                        && len < record.message_len as usize;
                    if !end_ahead {
                        return Err("fragment without the start of its message");
                    }
                    ahead = Some((record.message_len, len));
                    None
                }
                None => {
                    let total = record.message_len as usize;
                    if total > sh.cfg.max_message_size {
                        return Err("message larger than max_message_size");
                    }
                    let end = match ahead.take() {
                        Some((message_len, n)) if message_len == record.message_len => total - n,
                        Some(_) => return Err("a message's end ahead of another message"),
                        None => total,
                    };
                    if len > end {
                        return Err("fragment out of place");
                    }
                    if len == end {
                        admission.completes += total;
                        None
                    } else {
                        admission.starts = total;
                        Some((total, end, len, true))
                    }
                }
                Some((total, end, filled, started_here)) => {
                    if record.message_len as usize != total || record.offset as usize != filled || filled + len > end {
                        return Err("fragment out of place");
                    }
                    if filled + len < end {
                        Some((total, end, filled + len, started_here))
                    } else {
                        admission.completes += total;
                        if started_here {
                            admission.starts = 0;
                        } else {
                            admission.finishes = total;
                        }
                        None
                    }
                }
            };
        }
        if ahead.is_some() {
            return Err("a message's end ahead of nothing");
        }
        if !sh.recv.admits(&admission) {
            return Ok(false);
        }
        sh.recv.apply(&admission);
        // Second pass: apply. A reassembly buffer has room for its whole
        // message from the first piece on: the budget has counted the whole
        // (`admission.starts`), and a buffer that grew by doubling copied
        // each byte about once more (a 1 MiB message in 63 KiB datagrams:
        // five reallocations).
        let mut ahead: &[u8] = &[];
        for (i, record) in Records::new(payload).flatten().enumerate() {
            let mut r = match self.reassembly.take() {
                Some(r) => r,
                None if record.offset != 0 => {
                    // Checked above: the end of the message that starts next.
                    ahead = record.data;
                    continue;
                }
                None if i == 0 && in_place && record.ends_message() && record.data.len() >= IN_PLACE_MIN => {
                    // The event waits for the datagram's buffer.
                    self.emit(Vec::new(), sh);
                    self.stats.bytes_received += record.data.len() as u64;
                    sh.claimed = Some(InPlace { event: sh.events.len() - 1, len: record.data.len() });
                    continue;
                }
                None if record.ends_message() => {
                    self.emit(record.data.to_vec(), sh);
                    continue;
                }
                None => {
                    // Not where a message may be dropped halfway.
                    let mut none = None;
                    let placement = match self.strategy {
                        Strategy::BestEffort => &mut none,
                        _ => &mut *sh.placement,
                    };
                    let ahead = std::mem::take(&mut ahead);
                    Reassembly::new(record.message_len as usize, ahead, self.peer, self.id, placement)
                }
            };
            r.extend(record.data);
            if r.complete() {
                self.emit_reassembled(r, sh);
            } else {
                self.reassembly = Some(r);
            }
        }
        Ok(true)
    }

    /// [`Channel::deliver`] of one record whose `len` bytes the caller has
    /// written where they go: behind what the message in reassembly holds.
    fn deliver_landed(
        &mut self,
        message_len: u32,
        offset: u32,
        len: usize,
        sh: &mut Shared<'_>,
    ) -> Result<bool, &'static str> {
        let Some(r) = self.reassembly.as_mut() else { return Err("fragment without the start of its message") };
        let filled = r.filled();
        if message_len as usize != r.total || offset as usize != filled || len == 0 || filled + len > r.end() {
            return Err("fragment out of place");
        }
        if r.room() < len {
            return Err("data read in place beyond its buffer");
        }
        let completes = filled + len == r.end();
        let admission = match completes {
            true => Admission { completes: r.total, finishes: r.total, ..Admission::default() },
            false => Admission::default(),
        };
        if !sh.recv.admits(&admission) {
            return Ok(false);
        }
        sh.recv.apply(&admission);
        // SAFETY: within the region (checked above); the caller of
        // `Endpoint::handle_landed` wrote these `len` bytes (a read of the
        // datagram into the region `Endpoint::landing` gave it).
        unsafe { r.advance(len) };
        self.stats.read_in_place += 1;
        if completes {
            let r = self.reassembly.take().expect("open");
            self.emit_reassembled(r, sh);
        }
        Ok(true)
    }

    /// [`Channel::deliver`] of one whole message whose bytes after `head`,
    /// `len` of them, the caller has written where an aim said.
    fn deliver_aimed(&mut self, head: &[u8], len: usize, sh: &mut Shared<'_>) -> Result<bool, &'static str> {
        if self.reassembly.is_some() {
            return Err("a message read in place inside another");
        }
        let total = head.len() + len;
        if total > sh.cfg.max_message_size {
            return Err("message larger than max_message_size");
        }
        let admission = Admission { completes: total, ..Admission::default() };
        if !sh.recv.admits(&admission) {
            return Ok(false);
        }
        sh.recv.apply(&admission);
        self.stats.read_in_place += 1;
        self.stats.messages_received += 1;
        self.stats.bytes_received += total as u64;
        sh.events.push_back(Event::Aimed { from: self.peer, channel: self.id, head: head.to_vec(), len });
        Ok(true)
    }

    /// The sequence number of the next packet to deliver.
    pub(crate) fn next_expected(&self) -> u64 {
        self.next_expected
    }

    /// Whether packet `seq` may be read in place as a whole message: a
    /// reliable channel, no message in reassembly, and `seq` next.
    pub(crate) fn takes_whole(&self, seq: u64) -> bool {
        !self.failed && self.strategy != Strategy::BestEffort && self.reassembly.is_none() && seq == self.next_expected
    }

    /// The message in reassembly, if data may be read in place for it: a
    /// reliable channel, its buffer with room for the whole, and no packet
    /// waiting out of order (delivering one would write where later data
    /// was read to).
    fn landable(&self) -> Option<&Reassembly> {
        if self.failed || self.strategy == Strategy::BestEffort || !self.held.is_empty() {
            return None;
        }
        self.reassembly.as_ref().filter(|r| r.has_room())
    }

    /// Whether the message in reassembly, if any, may take data in place.
    pub(crate) fn may_land(&self) -> bool {
        self.landable().is_some()
    }

    /// Whether a datagram of this channel with sequence `seq` and one
    /// record (`len` bytes at `offset` of a message of `message_len`) can
    /// be read in place: it is the next expected and continues the message
    /// in reassembly where it stands.
    pub(crate) fn lands(&self, seq: u64, message_len: u32, offset: u32, len: usize) -> bool {
        self.landable().is_some_and(|r| {
            let filled = r.filled();
            seq == self.next_expected
                && message_len as usize == r.total
                && offset as usize == filled
                && len > 0
                && filled + len <= r.end()
                && len <= r.room()
        })
    }

    /// The message in reassembly, if data may be read in place for it
    /// ([`Channel::landable`]): the next expected sequence number, the bytes
    /// held, where the place the next bytes go to ends (the whole, or the
    /// end of the part that goes into a receive's buffer), and where it
    /// begins.
    pub(crate) fn reassembling(&mut self) -> Option<(u64, usize, usize, *mut u8)> {
        self.landable()?;
        let next = self.next_expected;
        let r = self.reassembly.as_mut()?;
        let filled = r.filled();
        Some((next, filled, filled + r.room(), r.next_region()))
    }

    /// Takes the receive's buffer of `p` for the message in reassembly, if
    /// there is one that fits (on a reliable channel): what came of it is
    /// copied there, and the rest goes there as it comes.
    pub(crate) fn adopt(&mut self, p: &Placement) -> bool {
        if self.failed || self.strategy == Strategy::BestEffort {
            return false;
        }
        match self.reassembly.as_mut() {
            Some(r) if r.placed.is_none() && Reassembly::fits(p, r.total, &r.ahead, self.peer, self.id) => {
                r.adopt(p);
                true
            }
            _ => false,
        }
    }

    /// Makes a message in reassembly into a receive's buffer a buffer's own
    /// again ([`crate::Endpoint::unplace`]).
    pub(crate) fn unplace(&mut self) {
        if let Some(r) = self.reassembly.as_mut() {
            r.unplace();
        }
    }

    fn emit(&mut self, data: Vec<u8>, sh: &mut Shared<'_>) {
        self.stats.messages_received += 1;
        self.stats.bytes_received += data.len() as u64;
        sh.events.push_back(Event::Message { from: self.peer, channel: self.id, data, start: 0 });
    }

    /// Delivers a message whose pieces all came, made whole: its start in
    /// a receive's buffer where it was placed there.
    fn emit_reassembled(&mut self, mut r: Reassembly, sh: &mut Shared<'_>) {
        r.finish();
        let Some(placed) = r.placed else { return self.emit(r.data, sh) };
        self.stats.messages_received += 1;
        self.stats.placed += 1;
        self.stats.bytes_received += r.total as u64;
        let (from, channel) = (self.peer, self.id);
        sh.events.push_back(Event::Placed { from, channel, placed: placed.len, end: r.data });
    }

    /// Arms, re-arms or cancels the prod timer after the receive state changed.
    fn update_hole(&mut self, now: Time, progressed: bool) {
        if progressed {
            // What the layer above waited for may have come: it says again
            // if it still waits.
            self.awaited = false;
        }
        if self.known_sent <= self.next_expected {
            if !self.awaited {
                self.prod_at = None;
                self.prod_backoff = 0;
            }
            return;
        }
        if progressed {
            self.prod_backoff = 0;
            self.prod_at = None;
        }
        if self.prod_at.is_none() {
            let mut tolerance = self.rtt.srtt().mul_f64(self.reorder_fraction);
            if self.frontier_premium {
                tolerance = tolerance.max(self.premium_gap * 2);
            }
            self.prod_at = Some(now + tolerance);
        }
    }

    // ----- timers -------------------------------------------------------

    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        if self.failed {
            return None;
        }
        let rto = (!self.unacked.is_empty() && !self.probe_due).then(|| self.last_progress + self.probe_backoff());
        match (rto, self.prod_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn backoff(&self, exponent: u32) -> Duration {
        (self.rtt.rto() * (1u32 << exponent.min(MAX_BACKOFF))).min(self.rtt.max_rto())
    }

    /// How long after the last progress the tail probe goes.
    fn probe_backoff(&self) -> Duration {
        let sparse = self.probe_by_pace && self.last_new_gap > self.rtt.rto();
        let extra = if self.receiver_driven || sparse { RECEIVER_DRIVEN_BACKOFF } else { 0 };
        self.backoff(self.rto_backoff + extra)
    }

    pub(crate) fn handle_timeout(&mut self, now: Time) {
        if self.failed {
            return;
        }
        if !self.unacked.is_empty() && !self.probe_due && now >= self.last_progress + self.probe_backoff() {
            self.probe_due = true;
            self.rto_backoff = (self.rto_backoff + 1).min(MAX_BACKOFF);
            // The next probe waits a longer back-off from this one.
            self.last_progress = now;
        }
        if self.prod_at.is_some_and(|at| now >= at) {
            let hole = self.known_sent > self.next_expected;
            if hole || self.awaited {
                self.prod_due = true;
                self.prod_backoff = (self.prod_backoff + 1).min(MAX_BACKOFF);
                self.prod_at = Some(now + self.backoff(self.prod_backoff));
                // A wait must be renewed to be prodded for again.
                self.awaited = false;
            } else {
                self.prod_at = None;
                self.prod_backoff = 0;
            }
        }
    }

    // ----- output -------------------------------------------------------

    /// Writes the next packet of this channel into `buf`: all of it, or,
    /// for a data packet, its header and MAC around the shared payload
    /// returned (see [`bulkwire_wire::seal_split`]).
    pub(crate) fn poll_transmit(
        &mut self,
        now: Time,
        buf: &mut [u8],
        sh: &mut Shared<'_>,
    ) -> Option<(Path, usize, Option<SharedPayload>)> {
        if self.failed {
            return None;
        }
        if let Some(decision) = self.lstat_due.take() {
            let (path, len) = self.send_lstat(&decision, now, buf, sh);
            return Some((path, len, None));
        }
        if let Some(due) = self.ack_due.take() {
            let ack = AckPayload {
                echo_timestamp: due.echo,
                delay: now.since(due.arrived).as_nanos().min(u32::MAX as u128) as u32,
            };
            let len = ack.write(&mut buf[HEADER_LEN..]);
            let mut flags = Flags::empty();
            if due.reply {
                flags.insert(Flags::REPLY);
            }
            let header = self.header(PacketType::Ack, flags, self.next_seq, now, sh.cfg);
            self.stats.explicit_acks_sent += 1;
            self.after_reporting(now);
            return Some((Path::Premium, self.seal(&header, len, buf, sh.cfg), None));
        }
        if self.prod_due {
            self.prod_due = false;
            // The newest packet we have and how long ago it came, unless
            // that is too long ago to say (then the sender goes by its
            // timeout alone).
            let since = self.newest_data.map(|(sent, arrived)| (sent, now.since(arrived).as_nanos()));
            let len = match since {
                Some((sent, delay)) if delay <= u32::MAX as u128 => {
                    AckPayload { echo_timestamp: sent, delay: delay as u32 }.write(&mut buf[HEADER_LEN..])
                }
                _ => 0,
            };
            let header = self.header(PacketType::Prod, Flags::empty(), self.next_seq, now, sh.cfg);
            self.stats.prods_sent += 1;
            self.after_reporting(now);
            return Some((Path::Premium, self.seal(&header, len, buf, sh.cfg), None));
        }
        if !sh.data_allowed {
            return None;
        }
        if self.probe_due {
            // Tail probe: resend the newest packet and ask for an answer at
            // once; the answer shows what is missing.
            self.probe_due = false;
            if !self.unacked.is_empty() {
                self.stats.timeouts += 1;
                let seq = self.next_seq - 1;
                return Some(self.resend(seq, Flags::LAST_OF_PHASE, now, buf, sh));
            }
        }
        while let Some(seq) = self.retransmit.pop_front() {
            if seq < self.base {
                continue;
            }
            self.unacked[(seq - self.base) as usize].queued = false;
            // After the phase has ended, the last resend of a recovery round is
            // the phase's last packet again: it asks for an answer at once, so
            // the sender learns of the next hole, or of the end, without
            // waiting for a timeout.
            let last = self.phase_closed && self.retransmit.iter().all(|&s| s < self.base);
            let extra = if last { Flags::LAST_OF_PHASE } else { Flags::empty() };
            return Some(self.resend(seq, extra, now, buf, sh));
        }
        if self.pending.is_empty() {
            return None;
        }
        let payload = sh.send_pool.take()?;
        Some(self.send_new(payload, now, buf, sh))
    }

    /// An LSTAT: the decision, our status and what we miss, on the premium
    /// path like every status report.
    fn send_lstat(&mut self, decision: &Decision, now: Time, buf: &mut [u8], sh: &mut Shared<'_>) -> (Path, usize) {
        let known = self.known_sent.max(self.arrived_beyond).max(self.next_expected);
        let room = (sh.cfg.max_payload() - LSTAT_FIXED_LEN) / MISSING_RANGE_LEN;
        let ranges = self.missing_ranges(known).take(room);
        let len = decision.status(known).write(ranges, &mut buf[HEADER_LEN..]);
        let header = self.header(PacketType::Lstat, Flags::empty(), self.next_seq, now, sh.cfg);
        self.stats.lstats_sent += 1;
        self.after_reporting(now);
        (Path::Premium, self.seal(&header, len, buf, sh.cfg))
    }

    /// The ranges `[start, end)` below `known` that have not arrived, in order.
    fn missing_ranges(&self, known: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut from = self.next_expected;
        let held = self.held.keys().copied().chain(std::iter::once(known));
        held.filter_map(move |seq| {
            let range = (seq > from).then_some((from, seq));
            from = from.max(seq.saturating_add(1));
            range
        })
    }

    fn send_new(
        &mut self,
        mut payload: Vec<u8>,
        now: Time,
        buf: &mut [u8],
        sh: &mut Shared<'_>,
    ) -> (Path, usize, Option<SharedPayload>) {
        let max = sh.cfg.max_payload();
        // Data room for one more record behind `used` bytes of payload.
        let room = |used: usize| max.saturating_sub(used + RECORD_HEADER_LEN).min(u16::MAX as usize);
        // A framed message that fits the packet whole is its payload as it
        // is: its bytes are then not copied at all here (the datagram
        // shares the payload). The pool's buffer goes back unused (the
        // packet still counts as one out of the pool).
        if let Some(msg) = self.pending.front() {
            if msg.headroom == RECORD_HEADER_LEN && msg.offset == 0 && msg.len() <= room(0) {
                let msg = self.pending.pop_front().expect("looked at above");
                let len = msg.len();
                let MessageBytes::Owned(data) = msg.data else {
                    unreachable!("a message is shared only once a piece of it has gone")
                };
                sh.send_pool.recycle(std::mem::replace(&mut payload, data));
                payload[..RECORD_HEADER_LEN].copy_from_slice(&record_header(len as u32, 0, len as u16));
                *sh.pending_bytes -= len;
            }
        }
        // The end of a message that does not fit the packet goes ahead of
        // its first piece, as a record of its own, where the channel asks
        // for that: a receive then knows the message for its own (or not)
        // before it writes any of it into its buffer. Its bytes, at most
        // `TAIL_AHEAD_MAX`, are copied; its pieces then stop before it.
        let tail_ahead = if self.strategy == Strategy::BestEffort { 0 } else { self.tail_ahead };
        let ahead_of = |msg: &OutMessage, room: usize| {
            let fresh = msg.offset == 0 && msg.end == msg.len();
            if tail_ahead > 0 && fresh && msg.len() > room.max(tail_ahead) {
                tail_ahead
            } else {
                0
            }
        };
        let write_ahead = |msg: &OutMessage, n: usize, out: &mut Vec<u8>| {
            let len = msg.len();
            out.extend_from_slice(&record_header(len as u32, (len - n) as u32, n as u16));
            msg.copy_to(len - n..len, out);
        };
        // A large piece of a message that starts the packet goes where it
        // lies: the packet shares the message's buffer (as the datagram
        // then does), and the pool's buffer goes back unused.
        let mut piece = None;
        if let Some(msg) = self.pending.front_mut().filter(|_| payload.is_empty()) {
            let n = ahead_of(msg, room(0));
            let mut ahead = Vec::new();
            if n > 0 {
                write_ahead(msg, n, &mut ahead);
            }
            let room = room(ahead.len());
            let mut take = (msg.end - n - msg.offset).min(room);
            // Of a lent message, the first packet carries its prefix in
            // front of the lent memory, and lent memory ends before the
            // message's own trailer.
            let (prefix, carried) = match msg.lent() {
                Some((prefix, end)) => {
                    take = take.min(end.saturating_sub(msg.offset));
                    (prefix.len(), if msg.offset == 0 { prefix } else { &[][..] })
                }
                None => (0, &[][..]),
            };
            let lies = msg.offset == 0 || msg.offset >= prefix;
            let least = if take == room { FULL_PIECE_MIN } else { SHARED_PIECE_MIN };
            if lies && take >= carried.len() + least && self.strategy != Strategy::BestEffort {
                // A piece that reaches the end of lent memory carries the
                // message's few bytes past it behind it, where they fit,
                // rather than leave them to a packet of their own.
                let trailer = msg.end - n - msg.offset - take;
                let tail = match msg.lent() {
                    Some((_, end)) if msg.offset + take == end && (1..=LENT_TAIL_MAX).contains(&trailer) => {
                        (take + trailer <= room).then(|| {
                            let mut bytes = Vec::with_capacity(trailer);
                            msg.copy_to(end..end + trailer, &mut bytes);
                            let mut tail = Tail { bytes: [0; LENT_TAIL_MAX], len: trailer as u8 };
                            tail.bytes[..trailer].copy_from_slice(&bytes);
                            tail
                        })
                    }
                    _ => None,
                };
                let carried_tail = tail.map_or(0, |t| t.len as usize);
                let header = record_header(msg.len() as u32, msg.offset as u32, (take + carried_tail) as u16);
                let head = Head::new(&ahead, &header, carried);
                // Where the piece's bytes after the head start in the
                // shared buffer (lent memory starts behind the prefix).
                let start = msg.headroom + msg.offset + carried.len() - prefix;
                let len = take - carried.len();
                piece = Some(SharedPayload::piece(msg.data.share(), start..start + len, head, tail));
                let take = take + carried_tail;
                msg.end -= n;
                msg.offset += take;
                *sh.pending_bytes -= n + take;
                if msg.offset == msg.end {
                    self.pending.pop_front();
                }
                sh.send_pool.recycle(std::mem::take(&mut payload));
            }
        }
        // Other messages are packed behind it, or into the pool's buffer
        // (which holds a whole packet, so it does not grow).
        while let Some(msg) = self.pending.front_mut().filter(|_| piece.is_none()) {
            // The end ahead, and a piece of some length behind it, or both
            // in the next packet (one too short for that, alone, carries
            // the message without its end ahead).
            let n = ahead_of(msg, room(payload.len()));
            let mut opened = false;
            if n > 0 {
                let behind = room(payload.len() + RECORD_HEADER_LEN + n);
                if behind >= 64 || (payload.is_empty() && behind > 0) {
                    write_ahead(msg, n, &mut payload);
                    msg.end -= n;
                    *sh.pending_bytes -= n;
                    opened = true;
                } else if !payload.is_empty() {
                    break;
                }
            }
            let room = room(payload.len());
            let left = msg.end - msg.offset;
            if room == 0 || (!opened && left > 0 && room < left.min(64) && !payload.is_empty()) {
                break; // full, or only a sliver left: start the rest in the next packet
            }
            let take = left.min(room);
            payload.extend_from_slice(&record_header(msg.len() as u32, msg.offset as u32, take as u16));
            msg.copy_to(msg.offset..msg.offset + take, &mut payload);
            msg.offset += take;
            *sh.pending_bytes -= take;
            if msg.offset == msg.end {
                self.pending.pop_front();
            }
        }

        let mut flags = Flags::empty();
        if sh.rate_controlled {
            flags.insert(Flags::RATE_CONTROLLED);
        }
        if self.strategy == Strategy::BestEffort {
            return self.send_once(payload, flags, now, buf, sh);
        }
        let payload = piece.unwrap_or_else(|| SharedPayload::whole(payload));
        if self.pending.is_empty() && std::mem::take(&mut self.phase_end) {
            flags.insert(Flags::LAST_OF_PHASE);
            self.phase_closed = true;
        }
        sh.send_rate.record(now, self.rtt.srtt());
        // Ask for an acknowledgement when the free buffers would run out
        // within a round trip at the current sending rate.
        if sh.send_pool.available() <= sh.send_rate.per_round_trip() as usize {
            flags.insert(Flags::ACK_REQUESTED);
            self.stats.ack_requests += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.data_sent += 1;
        self.last_new_gap = if seq == 0 { Duration::MAX } else { now.since(self.last_new_at) };
        self.last_new_at = now;
        if self.unacked.is_empty() {
            self.waiting_since = now;
        }
        let path = sh.data_path;
        let header = self.header(PacketType::Data, with_path(flags, path), seq, now, sh.cfg);
        let len = self.seal_split(&header, &payload, buf, sh.cfg);
        self.unacked.push_back(SentPacket {
            payload: payload.clone(),
            flags,
            last_sent: now,
            path,
            transmissions: 1,
            queued: false,
        });
        self.last_progress = now;
        self.after_reporting(now);
        (path, len, Some(payload))
    }

    /// Sends a best-effort packet: it is not kept, so its buffer goes back
    /// to the pool at once (freed once the datagram has left).
    fn send_once(
        &mut self,
        payload: Vec<u8>,
        flags: Flags,
        now: Time,
        buf: &mut [u8],
        sh: &mut Shared<'_>,
    ) -> (Path, usize, Option<SharedPayload>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.base = self.next_seq;
        self.stats.data_sent += 1;
        let path = sh.data_path;
        let payload = SharedPayload::whole(payload);
        let header = self.header(PacketType::Data, with_path(flags.union(Flags::BEST_EFFORT), path), seq, now, sh.cfg);
        let len = self.seal_split(&header, &payload, buf, sh.cfg);
        payload.clone().give_back(sh.send_pool);
        self.after_reporting(now);
        (path, len, Some(payload))
    }

    fn resend(
        &mut self,
        seq: u64,
        extra: Flags,
        now: Time,
        buf: &mut [u8],
        sh: &mut Shared<'_>,
    ) -> (Path, usize, Option<SharedPayload>) {
        let index = (seq - self.base) as usize;
        let packet = &mut self.unacked[index];
        let path = sh.data_path;
        packet.transmissions += 1;
        packet.last_sent = now;
        packet.path = path;
        let mut flags = with_path(packet.flags.union(extra).union(Flags::RETRANSMISSION), path);
        flags.remove(Flags::RATE_CONTROLLED);
        if sh.rate_controlled {
            flags.insert(Flags::RATE_CONTROLLED);
        }
        let payload = packet.payload.clone();
        self.stats.retransmissions += 1;
        let header = self.header(PacketType::Data, flags, seq, now, sh.cfg);
        self.after_reporting(now);
        (path, self.seal_split(&header, &payload, buf, sh.cfg), Some(payload))
    }

    /// Every packet we send reports our receive state: that is the
    /// piggybacked acknowledgement, and it makes a pending prod unnecessary
    /// for a round trip.
    fn after_reporting(&mut self, now: Time) {
        self.arrivals_since_ack = 0;
        self.ack_asked = false;
        if self.ack_due.is_some_and(|d| !d.reply) {
            self.ack_due = None;
        }
        if self.prod_at.is_some() {
            self.prod_at = Some(now + self.backoff(self.prod_backoff));
        }
    }

    fn end_of_hole(&self) -> u64 {
        match self.strategy {
            Strategy::HoleFilling => self.held.first_key_value().map_or(self.next_expected, |(&seq, _)| seq),
            Strategy::GoBackN => self.arrived_beyond.max(self.next_expected),
            Strategy::BestEffort => self.next_expected,
        }
    }

    fn header(&self, packet_type: PacketType, flags: Flags, sequence: u64, now: Time, cfg: &Config) -> Header {
        Header {
            packet_type,
            flags,
            channel: self.id,
            colour: self.colour,
            job: job_tag(cfg.job),
            source: cfg.rank,
            destination: self.peer,
            sequence,
            ack: self.next_expected,
            end_of_hole: self.end_of_hole(),
            timestamp: now.as_nanos(),
            payload_len: 0,
        }
    }

    fn seal(&self, header: &Header, payload_len: usize, buf: &mut [u8], cfg: &Config) -> usize {
        seal(header, payload_len, &cfg.key, buf).expect("buffer checked by the endpoint")
    }

    fn seal_split(&self, header: &Header, payload: &SharedPayload, buf: &mut [u8], cfg: &Config) -> usize {
        seal_parts(header, &payload.parts(), &cfg.key, buf).expect("payloads are at most max_payload")
    }
}

/// Data on the premium path says so, so the receiver does not take its
/// timestamp for a sample of the ordinary path.
fn with_path(flags: Flags, path: Path) -> Flags {
    match path {
        Path::Ordinary => flags,
        Path::Premium => flags.union(Flags::PREMIUM),
    }
}

/// With the latency engines on, the sender asks for status at least every
/// poll interval (the SSCOP POLL): the tail probe's back-off stops there.
fn max_rto(cfg: &Config) -> Duration {
    match &cfg.latency {
        Some(latency) => cfg.max_rto.min(latency.poll_interval).max(cfg.min_rto),
        None => cfg.max_rto,
    }
}
