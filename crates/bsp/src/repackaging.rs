//! Phase 3 of the sync: repackaging (seed 002 §3).
//!
//! Every put, send and get reply for one destination is appended, as it
//! is made, to that destination's stream of records; at the sync the stream
//! is cut into pieces that fill one datagram each. A thousand 8-byte puts
//! to one process thus travel in one packet, not a thousand.
//!
//! Records in a stream (little-endian):
//!
//! | kind | fields |
//! | --- | --- |
//! | put | `1`, slot u32, offset u64, len u64, data |
//! | send | `2`, tag length u32, payload length u64, tag, payload |
//! | get reply | `3`, len u64, data (replies come in the order of the requests) |
//! | hpput | `4`, as put (an error at the receiver then names `bsp_hpput`) |
//! | direct put | `5`, flags u8 (1: hpput, 2: in the arena), slot u32, offset u64, len u64, address u64 |
//! | get reply in the arena | `6`, len u64, address u64 (in the sender's arena) |
//! | send in the arena | `7`, tag length u32, payload length u64, address u64 (in the sender's arena), tag |
//!
//! A direct put is a put to a process on this host whose bytes the receiver
//! reads where they lie in the sender. A large one (from
//! [`crate::DIRECT_PUT_MIN`]) to a process that reads the sender's memory
//! says where the `len` bytes are in the sender (its copy of a `bsp_put`'s
//! source, or a `bsp_hpput`'s source itself), and the receiver copies them
//! from there into the destination area with one `process_vm_readv` as it
//! lands the stream, then says so (the sender keeps the bytes in place
//! until it hears it). A smaller one (from [`crate::ARENA_PUT_MIN`]) was
//! copied by the sender into its arena in shared memory, which the
//! receiver maps: the address is where in the arena, and the receiver
//! copies from there with `memcpy`. The sender writes the same half of its
//! arena again two supersteps later, when every receiver has landed it
//! (the barrier in between holds every process until all have); a next
//! computation on the same runtime, which starts again from half 0, begins
//! only once every process has ended this one (`bsp_begin`'s handshake on
//! a shared runtime). The put's bytes are then copied once (hpput) or
//! twice (put), not three or four times. A get's reply from 1 KiB to a process on this host goes through
//! the arena the same way, and so does a `bsp_send`'s payload, which the
//! receiver's queue then reads where it lies (until the next sync, before
//! which the sender does not write that half again).
//!
//! Get requests travel earlier, in phase 2, so that they are served before
//! any put lands: [`Counts`].
//!
//! A stream is built in an [`OutStream`], with room in front for the
//! headers of the data message that will carry it: a stream that goes in
//! one piece then travels in the buffer it was built in, and the protocol
//! keeps that buffer for resending, so its bytes are copied on their way
//! only into the datagram. Over UDP the pieces of a longer stream are lent
//! to the protocol from the buffer ([`OutStream::lend`]), and a large
//! `bsp_hpput`'s bytes stay in its source, from where its pieces are lent
//! ([`OutStream::hpput_in_place`]): the receiver sees the same records.

use std::ops::Range;
use std::sync::Arc;

use bulkwire_wire::RECORD_HEADER_LEN;

use crate::reduction::Reader;

pub(crate) const PUT: u8 = 1;
const SEND: u8 = 2;
const REPLY: u8 = 3;
pub(crate) const HPPUT: u8 = 4;
const DIRECT: u8 = 5;
const REPLY_AT: u8 = 6;
const SEND_AT: u8 = 7;
const REPLY_FROM: u8 = 8;

pub const PUT_HEADER: usize = 1 + 4 + 8 + 8;
pub const SEND_HEADER: usize = 1 + 4 + 8;
const REPLY_HEADER: usize = 1 + 8;
const DIRECT_LEN: usize = 1 + 1 + 4 + 8 + 8 + 8;
const REPLY_AT_LEN: usize = 1 + 8 + 8;
/// A direct put's flags: made by `bsp_hpput`; its bytes in the sender's arena.
const FLAG_HP: u8 = 1;
const FLAG_ARENA: u8 = 2;

/// Streams of at least this many bytes keep their buffer for the next
/// superstep's ([`OutStream::take_buffer`]).
pub const REUSE_FROM: usize = 1 << 20;

/// Buffers of at least this many bytes are not offered to a stream
/// ([`OutStream::offer`]): a datagram's buffer, which the runtime keeps.
const OFFER_BELOW: usize = 64 << 10;

/// The headers of the data message that carries a piece of a stream,
/// which the sync writes: kind u8, superstep u64, last u8. The stream's
/// format owns their size because a stream is built with room for them
/// in front (see [`OutStream::hand_off`]).
pub(crate) const DATA_HEADER: usize = 1 + 8 + 1;

/// Room in front of a stream for the headers of its data message: the
/// protocol's record header, then the sync's.
const HEADROOM: usize = RECORD_HEADER_LEN + DATA_HEADER;
/// One destination's stream as the calls build it.
#[derive(Debug, Default)]
pub struct OutStream {
    /// Empty, or [`HEADROOM`] bytes and then the bytes of the stream that
    /// have not been handed off.
    buf: Vec<u8>,
    /// That buffer, once pieces of it were lent to the runtime to send
    /// where they lie ([`OutStream::lend`]; `buf` is then empty).
    lent: Option<Arc<Vec<u8>>>,
    /// A buffer lent in an earlier superstep, kept for this one's stream
    /// ([`OutStream::reuse`]): taken back when the stream starts, if the
    /// runtime has let go of it by then.
    waiting: Option<Arc<Vec<u8>>>,
    /// A buffer lent two supersteps ago: one the runtime still held when a
    /// stream started in the buffer lent after it, which it then took
    /// instead (see [`OutStream::extend`]).
    older: Option<Arc<Vec<u8>>>,
    /// Bytes of the stream left where the caller has them (large hpputs to
    /// a process over UDP, [`OutStream::hpput_in_place`]), in the order of
    /// their positions; `buf` holds the rest.
    external: Vec<External>,
    /// How many bytes of the stream were handed off, in front of `buf`'s.
    handed_off: usize,
    /// Spare capacity kept behind the stream, so that the small messages
    /// that share its packet (a barrier's, on one host) fit without the
    /// buffer growing.
    slack: usize,
    /// Bytes of the direct puts in the stream, which the receiver reads
    /// from where their records say.
    referenced: u64,
}

/// `len` bytes at `addr` in this process that are the stream's from
/// position `at` on; `before`: the stream's external bytes in front of
/// them; `tag`: the caller's name for them.
#[derive(Clone, Copy, Debug)]
struct External {
    at: usize,
    addr: usize,
    len: usize,
    before: usize,
    tag: usize,
}

/// The external bytes of a piece: `len` at `addr`, which are bytes
/// `from..from + len` of the external bytes the caller named `tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalPart {
    pub addr: usize,
    pub len: usize,
    pub tag: usize,
    pub from: usize,
}

/// At most this many bytes of a stream's own go in front of its external
/// bytes in one piece (the put's header, in the prefix of the message that
/// carries them, [`bulkwire_proto::LENT_PREFIX_MAX`]); more end the piece
/// before the external bytes.
pub const OWN_BEFORE_EXTERNAL: usize = bulkwire_proto::LENT_PREFIX_MAX - DATA_HEADER;

/// What a piece of a stream ([`OutStream::piece_end`]) is made of: bytes of
/// the stream's buffer, then, if any, bytes in the caller's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceParts {
    pub own: Range<usize>,
    pub external: Option<ExternalPart>,
}

/// A stream's buffer kept for the next superstep's stream to the same
/// destination ([`OutStream::take_buffer`]): its own, or one still lent
/// to the runtime (its last packets not yet acknowledged).
#[derive(Debug)]
pub enum Kept {
    Own(Vec<u8>),
    Lent(Arc<Vec<u8>>),
}

impl OutStream {
    pub fn new(slack: usize) -> OutStream {
        OutStream { slack, ..OutStream::default() }
    }

    /// The buffer: `buf`, or the lent one.
    fn data(&self) -> &[u8] {
        self.lent.as_deref().unwrap_or(&self.buf)
    }

    pub fn len(&self) -> usize {
        self.handed_off + self.data().len().saturating_sub(HEADROOM) + self.external_len()
    }

    fn external_len(&self) -> usize {
        self.external.last().map_or(0, |e| e.before + e.len)
    }

    /// A put of `bsp_hpput` to a process over UDP whose source stays where
    /// it is: the stream holds the put's header and where the `len` bytes
    /// are, and its pieces are sent from there ([`OutStream::piece_parts`],
    /// which names the source `tag`).
    ///
    /// # Safety
    ///
    /// `len` bytes at `addr` stay readable and unchanged while the stream
    /// is read and while any piece lent from them is held.
    pub unsafe fn hpput_in_place(&mut self, slot: u32, offset: u64, addr: usize, len: usize, tag: usize) {
        put_header(self.extend(PUT_HEADER), true, slot, offset, len as u64);
        let before = self.external_len();
        self.external.push(External { at: self.len(), addr, len, before, tag });
    }

    /// Whether some of the stream's bytes are where the caller has them.
    pub fn has_external(&self) -> bool {
        !self.external.is_empty()
    }

    /// Of the externals, the first that ends after `pos`.
    fn external_after(&self, pos: usize) -> Option<&External> {
        self.external.get(self.external.partition_point(|e| e.at + e.len <= pos))
    }

    /// Where the stream's own byte at position `pos` is in the buffer.
    fn own_index(&self, pos: usize) -> usize {
        let before = self.external_after(pos).map_or(self.external_len(), |e| e.before);
        HEADROOM + pos - self.handed_off - before
    }

    /// Where a piece that starts at `start` and would end at `end` ends:
    /// a piece is the stream's own bytes, or a few of them and then bytes
    /// in the caller's memory, or those alone ([`OutStream::piece_parts`]).
    pub fn piece_end(&self, start: usize, end: usize) -> usize {
        match self.external_after(start) {
            Some(e) if e.at < end => {
                if e.at <= start || e.at - start <= OWN_BEFORE_EXTERNAL {
                    end.min(e.at + e.len)
                } else {
                    e.at
                }
            }
            _ => end,
        }
    }

    /// What the piece `range` (cut by [`OutStream::piece_end`]) is made
    /// of: its own bytes, as a range of the buffer, then its external ones.
    pub fn piece_parts(&self, range: Range<usize>) -> PieceParts {
        match self.external_after(range.start) {
            Some(e) if e.at < range.end => {
                // The own bytes right in front of the external ones.
                let own_end = e.at.max(range.start);
                let at_external = HEADROOM + e.at - self.handed_off - e.before;
                let own = at_external - (own_end - range.start)..at_external;
                let from = own_end - e.at;
                let len = range.end.min(e.at + e.len) - own_end;
                PieceParts { own, external: Some(ExternalPart { addr: e.addr + from, len, tag: e.tag, from }) }
            }
            _ => {
                let start = self.own_index(range.start);
                PieceParts { own: start..start + range.len(), external: None }
            }
        }
    }

    /// Bytes `range` of the buffer (the own part of a piece,
    /// [`OutStream::piece_parts`]).
    pub fn own_bytes(&self, range: Range<usize>) -> &[u8] {
        &self.data()[range]
    }

    /// Appends bytes `range` of the stream to `out`, wherever they are.
    pub fn copy_range(&self, range: Range<usize>, out: &mut Vec<u8>) {
        let mut at = range.start;
        while at < range.end {
            let end = self.piece_end(at, range.end);
            let parts = self.piece_parts(at..end);
            out.extend_from_slice(self.own_bytes(parts.own));
            if let Some(x) = parts.external {
                // SAFETY: whoever made the stream's externals promised
                // their bytes readable while it is read (`hpput_in_place`).
                out.extend_from_slice(unsafe { std::slice::from_raw_parts(x.addr as *const u8, x.len) });
            }
            at = end;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes the stream delivers: its own, and those of its direct
    /// puts (its share of the superstep's h-relation).
    pub fn delivers(&self) -> u64 {
        self.len() as u64 + self.referenced
    }

    pub fn put(&mut self, slot: u32, offset: u64, data: &[u8]) {
        put(self.extend(PUT_HEADER + data.len()), slot, offset, data);
    }

    /// A put of `bsp_hpput`, whose source is read at the sync.
    pub fn hpput(&mut self, slot: u32, offset: u64, data: &[u8]) {
        let buf = self.extend(PUT_HEADER + data.len());
        put_header(buf, true, slot, offset, data.len() as u64);
        buf.extend_from_slice(data);
    }

    /// A direct put: `len` bytes at `addr` in this process, which the
    /// receiver reads from there (see the module's docs).
    pub fn direct(&mut self, hp: bool, slot: u32, offset: u64, len: u64, addr: u64) {
        self.direct_record(u8::from(hp) * FLAG_HP, slot, offset, len, addr);
    }

    /// A put whose `len` bytes this process copied to `at` in its arena,
    /// from where the receiver reads them (see the module's docs).
    pub fn in_arena(&mut self, hp: bool, slot: u32, offset: u64, len: u64, at: u64) {
        self.direct_record((u8::from(hp) * FLAG_HP) | FLAG_ARENA, slot, offset, len, at);
    }

    fn direct_record(&mut self, flags: u8, slot: u32, offset: u64, len: u64, addr: u64) {
        self.referenced += len;
        let buf = self.extend(DIRECT_LEN);
        buf.push(DIRECT);
        buf.push(flags);
        buf.extend_from_slice(&slot.to_le_bytes());
        buf.extend_from_slice(&offset.to_le_bytes());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&addr.to_le_bytes());
    }

    pub fn send(&mut self, tag: &[u8], payload: &[u8]) {
        send(self.extend(SEND_HEADER + tag.len() + payload.len()), tag, payload);
    }

    /// A `bsp_send` whose payload of `len` bytes this process copied to `at`
    /// in its arena.
    pub fn send_in_arena(&mut self, tag: &[u8], len: u64, at: u64) {
        self.referenced += len;
        let buf = self.extend(1 + 4 + 8 + 8 + tag.len());
        buf.push(SEND_AT);
        buf.extend_from_slice(&(tag.len() as u32).to_le_bytes());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&at.to_le_bytes());
        buf.extend_from_slice(tag);
    }

    /// A get's reply of `len` bytes that this process copied to `at` in its
    /// arena.
    pub fn reply_in_arena(&mut self, len: u64, at: u64) {
        self.reply_elsewhere(REPLY_AT, len, at);
    }

    /// A get's reply of `len` bytes at `addr` in this process (its stage),
    /// which the receiver reads from there, as a direct put's.
    pub fn reply_from(&mut self, len: u64, addr: u64) {
        self.reply_elsewhere(REPLY_FROM, len, addr);
    }

    /// A reply record of `kind` whose `len` bytes are at `at`.
    fn reply_elsewhere(&mut self, kind: u8, len: u64, at: u64) {
        self.referenced += len;
        let buf = self.extend(REPLY_AT_LEN);
        buf.push(kind);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&at.to_le_bytes());
    }

    pub fn reply(&mut self, data: &[u8]) {
        let buf = self.extend(REPLY_HEADER + data.len());
        reply_header(buf, data.len() as u64);
        buf.extend_from_slice(data);
    }

    /// The buffer, ready for `additional` more bytes.
    fn extend(&mut self, additional: usize) -> &mut Vec<u8> {
        if let Some(lent) = self.lent.take() {
            // Added to after pieces went (not done by the sync): the
            // buffer is taken back, or copied while the runtime holds it.
            self.buf = Arc::try_unwrap(lent).unwrap_or_else(|held| (*held).clone());
        }
        if self.buf.is_empty() {
            // The last superstep's buffer, unless the runtime still holds
            // it: the last piece to a destination is acknowledged by the
            // next barrier (seed 002 §4.4), which a put made right after
            // the sync comes before. Then the buffer before it, which that
            // barrier's predecessor let go, and the held one is kept for
            // the next superstep: two buffers taking turns, where a new
            // one each time is new pages, each faulted in and cleared by
            // the kernel (a put of 512 MiB each way between two processes
            // over loopback, landing as it arrives: 0.9-1.2 s a superstep
            // with a new buffer every other one, against 0.4-0.5).
            let taken = match self.waiting.take().map(Arc::try_unwrap) {
                Some(Ok(buf)) => Some(buf),
                Some(Err(held)) => {
                    let older = self.older.replace(held).map(Arc::try_unwrap);
                    older.and_then(Result::ok)
                }
                None => None,
            };
            if let Some(mut buf) = taken {
                buf.clear();
                self.buf = buf;
            }
            self.buf.reserve(HEADROOM + additional + self.slack);
            self.buf.resize(HEADROOM, 0);
        } else {
            self.buf.reserve(additional + self.slack);
        }
        &mut self.buf
    }

    /// Bytes `range` of the stream (none of them handed off, all in its
    /// buffer).
    #[cfg(test)]
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.data()[self.at(range)]
    }

    /// Where bytes `range` of the stream, all in its buffer, are there.
    fn at(&self, range: Range<usize>) -> Range<usize> {
        let start = self.own_index(range.start);
        debug_assert_eq!(self.piece_parts(range.clone()).external, None, "bytes outside the buffer");
        start..start + range.len()
    }

    /// Bytes `range` of the stream (none of them handed off), lent to the
    /// runtime to send where they lie: the buffer is shared from now on,
    /// and left unchanged while the runtime holds any piece of it.
    pub fn lend(&mut self, range: Range<usize>) -> Arc<dyn bulkwire_proto::LentBytes> {
        let at = self.at(range);
        let buf = self.lent.get_or_insert_with(|| Arc::new(std::mem::take(&mut self.buf)));
        Arc::new(bulkwire_proto::LentRange { whole: buf.clone(), range: at })
    }

    /// Whether [`OutStream::hand_off`] of the rest from `offset` on would
    /// hand off the buffer.
    pub fn hands_off_at(&self, offset: usize) -> bool {
        offset == self.handed_off && self.lent.is_none() && self.external.is_empty()
    }

    /// The rest of the stream from `offset` on, as one data message whose
    /// headers, `header` behind room for the protocol's record header, go
    /// in front of it, in the buffer it was built in; `None` if some of
    /// that buffer's bytes come before `offset` (they went as copies or
    /// lent). The stream keeps its length; what is added later starts a
    /// new buffer.
    pub fn hand_off(&mut self, offset: usize, header: &[u8; DATA_HEADER]) -> Option<Vec<u8>> {
        if !self.hands_off_at(offset) {
            return None;
        }
        let len = self.len();
        let mut message = std::mem::take(&mut self.buf);
        if message.is_empty() {
            message.resize(HEADROOM, 0);
        }
        message[RECORD_HEADER_LEN..HEADROOM].copy_from_slice(header);
        self.handed_off = len;
        Some(message)
    }

    /// The buffer of a stream of at least [`REUSE_FROM`] bytes that went
    /// as copies or lent (never handed off), or a buffer smaller than
    /// [`OFFER_BELOW`] that a stream stayed in, emptied, for the next
    /// superstep's stream to the same destination ([`OutStream::reuse`]):
    /// a buffer that large is otherwise new pages every superstep, each
    /// one faulted in and cleared by the kernel. A large buffer so kept and
    /// not used (no stream this superstep) is kept again; a smaller one
    /// goes.
    pub fn take_buffer(&mut self) -> Option<Kept> {
        let unused = self.is_empty() && (self.buf.capacity() >= REUSE_FROM || self.waiting.is_some());
        // A small stream's own buffer, never handed off or lent (one that
        // rode in a board post), serves the next one too, if small itself.
        let small_kept = self.handed_off == 0
            && self.lent.is_none()
            && self.waiting.is_none()
            && !self.is_empty()
            && self.buf.capacity() < OFFER_BELOW;
        if self.handed_off > 0 || (self.len() < REUSE_FROM && !unused && !small_kept) {
            return None;
        }
        if let Some(lent) = self.lent.take().or_else(|| self.waiting.take()) {
            return Some(Kept::Lent(lent));
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        Some(Kept::Own(buf))
    }

    /// The buffer before the one [`OutStream::take_buffer`] keeps, if
    /// there is one (see [`OutStream::extend`]), for
    /// [`OutStream::reuse_older`]: taken only with that one.
    pub fn take_older(&mut self) -> Option<Arc<Vec<u8>>> {
        self.older.take()
    }

    pub fn reuse_older(&mut self, older: Arc<Vec<u8>>) {
        self.older = Some(older);
    }

    /// Takes `buffer`, emptied, to build the stream in if the stream has
    /// none yet and the buffer is smaller than a datagram's (the runtime
    /// reads datagrams into those); else hands it back. A small stream
    /// received from the destination serves so the next one to it: each
    /// is otherwise a new allocation, freed once written out.
    pub fn offer(&mut self, mut buffer: Vec<u8>) -> Option<Vec<u8>> {
        let unbuffered = self.buf.capacity() == 0 && self.lent.is_none() && self.waiting.is_none();
        if !unbuffered || self.handed_off > 0 || buffer.capacity() >= OFFER_BELOW {
            return Some(buffer);
        }
        buffer.clear();
        self.buf = buffer;
        None
    }

    /// Builds the stream in `kept` (see [`Kept`]), whose room it keeps.
    pub fn reuse(&mut self, kept: Kept) {
        debug_assert!(self.buf.is_empty() && self.lent.is_none());
        match kept {
            Kept::Own(buf) => self.buf = buf,
            Kept::Lent(lent) => self.waiting = Some(lent),
        }
    }

    /// The stream's buffer and where the stream starts in it, for a stream
    /// that was never handed off or lent (a process's own puts).
    pub fn into_bytes(self) -> (Vec<u8>, usize) {
        debug_assert!(self.handed_off == 0 && self.lent.is_none(), "a process's own stream is never sent");
        debug_assert!(self.external.is_empty(), "a process's own hpputs are copied");
        let start = HEADROOM.min(self.buf.len());
        (self.buf, start)
    }
}

/// Appends a put record of `len` bytes (of `bsp_hpput` if `hp`); the
/// caller appends the data.
pub fn put_header(stream: &mut Vec<u8>, hp: bool, slot: u32, offset: u64, len: u64) {
    stream.push(if hp { HPPUT } else { PUT });
    stream.extend_from_slice(&slot.to_le_bytes());
    stream.extend_from_slice(&offset.to_le_bytes());
    stream.extend_from_slice(&len.to_le_bytes());
}

pub fn put(stream: &mut Vec<u8>, slot: u32, offset: u64, data: &[u8]) {
    stream.reserve(PUT_HEADER + data.len());
    put_header(stream, false, slot, offset, data.len() as u64);
    stream.extend_from_slice(data);
}

pub fn send(stream: &mut Vec<u8>, tag: &[u8], payload: &[u8]) {
    stream.reserve(SEND_HEADER + tag.len() + payload.len());
    stream.push(SEND);
    stream.extend_from_slice(&(tag.len() as u32).to_le_bytes());
    stream.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    stream.extend_from_slice(tag);
    stream.extend_from_slice(payload);
}

/// Appends a reply header of `len` bytes; the caller appends the data.
pub fn reply_header(stream: &mut Vec<u8>, len: u64) {
    stream.push(REPLY);
    stream.extend_from_slice(&len.to_le_bytes());
}

/// A record of a received stream, as ranges of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A put (`hp`: made with `bsp_hpput`).
    Put {
        hp: bool,
        slot: u32,
        offset: u64,
        data: Range<usize>,
    },
    Send {
        tag: Range<usize>,
        payload: Range<usize>,
    },
    Reply {
        data: Range<usize>,
    },
    /// A get's reply: `len` bytes from `at` in the sender's arena.
    ReplyAt {
        len: u64,
        at: u64,
    },
    /// A get's reply: `len` bytes at `addr` in the sender's memory, which
    /// the receiver reads and says so (`READ_DONE`), as a direct put's.
    ReplyFrom {
        len: u64,
        addr: u64,
    },
    /// A message whose payload is `len` bytes from `at` in the sender's
    /// arena.
    SendAt {
        tag: Range<usize>,
        len: u64,
        at: u64,
    },
    /// A direct put: `len` bytes at `addr` in the sender's memory, or, if
    /// `arena`, from `addr` in the sender's arena.
    Direct {
        hp: bool,
        arena: bool,
        slot: u32,
        offset: u64,
        len: u64,
        addr: u64,
    },
}

/// Splits a stream, `stream[start..]`, into its records (ranges of all of
/// `stream`).
#[cfg(test)]
pub fn parse(stream: &[u8], start: usize) -> Result<Vec<Record>, String> {
    let first = stream.get(start..).ok_or("a stream that starts past its end")?;
    parse_parts(&[first], start)
}

/// [`parse_parts_into`] a new vector.
#[cfg(test)]
pub fn parse_parts(parts: &[&[u8]], base: usize) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    parse_parts_into(parts, base, &mut records)?;
    Ok(records)
}

/// Splits a stream that arrived in pieces, `parts` one after the other,
/// into its records, appended to `records` (whose room a sync keeps from
/// one superstep to the next), without joining the pieces: a record may
/// span several. Ranges are in the stream's coordinates, which start at
/// `base` and run on from one part into the next. After an error
/// `records` may hold some of them.
pub fn parse_parts_into(parts: &[&[u8]], base: usize, records: &mut Vec<Record>) -> Result<(), String> {
    let mut r = Chain::new(parts, base);
    while r.left > 0 {
        let record = match r.u8()? {
            kind @ (PUT | HPPUT) => {
                let slot = r.u32()?;
                let offset = r.u64()?;
                let len = length(r.u64()?)?;
                let start = r.at;
                r.skip(len)?;
                Record::Put { hp: kind == HPPUT, slot, offset, data: start..start + len }
            }
            SEND => {
                let tag_len = r.u32()? as usize;
                let len = length(r.u64()?)?;
                let start = r.at;
                r.skip(tag_len)?;
                r.skip(len)?;
                Record::Send { tag: start..start + tag_len, payload: start + tag_len..start + tag_len + len }
            }
            REPLY => {
                let len = length(r.u64()?)?;
                let start = r.at;
                r.skip(len)?;
                Record::Reply { data: start..start + len }
            }
            REPLY_AT => Record::ReplyAt { len: r.u64()?, at: r.u64()? },
            REPLY_FROM => Record::ReplyFrom { len: r.u64()?, addr: r.u64()? },
            SEND_AT => {
                let tag_len = r.u32()? as usize;
                let (len, at) = (r.u64()?, r.u64()?);
                let start = r.at;
                r.skip(tag_len)?;
                Record::SendAt { tag: start..start + tag_len, len, at }
            }
            DIRECT => {
                let flags = r.u8()?;
                if flags > (FLAG_HP | FLAG_ARENA) {
                    return Err(format!("a direct put of kind {flags}"));
                }
                let (hp, arena) = (flags & FLAG_HP != 0, flags & FLAG_ARENA != 0);
                Record::Direct { hp, arena, slot: r.u32()?, offset: r.u64()?, len: r.u64()?, addr: r.u64()? }
            }
            other => return Err(format!("unknown record kind {other}")),
        };
        records.push(record);
    }
    Ok(())
}

/// A reader of a stream in parts: fields are read across the parts'
/// boundaries, data is skipped; `at` is the position in the stream's
/// coordinates.
struct Chain<'a> {
    parts: &'a [&'a [u8]],
    /// The part being read, and the position in it.
    part: usize,
    pos: usize,
    at: usize,
    left: usize,
}

impl<'a> Chain<'a> {
    fn new(parts: &'a [&'a [u8]], base: usize) -> Chain<'a> {
        Chain { parts, part: 0, pos: 0, at: base, left: parts.iter().map(|p| p.len()).sum() }
    }

    fn truncated(&self, n: usize) -> String {
        format!("truncated: {n} bytes wanted, {} left", self.left)
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        if n > self.left {
            return Err(self.truncated(n));
        }
        self.at += n;
        self.left -= n;
        let mut n = n;
        while n > 0 {
            let here = (self.parts[self.part].len() - self.pos).min(n);
            n -= here;
            self.pos += here;
            if self.pos == self.parts[self.part].len() {
                (self.part, self.pos) = (self.part + 1, 0);
            }
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if N > self.left {
            return Err(self.truncated(N));
        }
        // Most fields lie within one part.
        let part = self.parts[self.part];
        if let Some(bytes) = part.get(self.pos..self.pos + N) {
            let out: [u8; N] = bytes.try_into().expect("N bytes");
            self.pos += N;
            self.at += N;
            self.left -= N;
            if self.pos == part.len() {
                (self.part, self.pos) = (self.part + 1, 0);
            }
            return Ok(out);
        }
        let mut out = [0; N];
        let mut filled = 0;
        while filled < N {
            let part = self.parts[self.part];
            let here = (part.len() - self.pos).min(N - filled);
            out[filled..filled + here].copy_from_slice(&part[self.pos..self.pos + here]);
            filled += here;
            self.pos += here;
            self.at += here;
            self.left -= here;
            if self.pos == part.len() {
                (self.part, self.pos) = (self.part + 1, 0);
            }
        }
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
}

fn length(len: u64) -> Result<usize, String> {
    usize::try_from(len).map_err(|_| format!("length {len} does not fit in memory"))
}

/// The piece of a stream of `len` bytes that starts at `offset`: a full
/// packet's worth, or the rest.
pub fn piece(offset: usize, len: usize, packet: usize) -> Range<usize> {
    offset..(offset + packet.max(1)).min(len)
}

/// A get request: `len` bytes at `offset` of registration `slot` (made
/// with `bsp_hpget` if `hp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetRequest {
    pub hp: bool,
    pub slot: u32,
    pub offset: u64,
    pub len: u64,
}

/// Bytes of one encoded get request.
const REQUEST_LEN: usize = 1 + 4 + 8 + 8;

/// Phase 2's message from one process to another: the gets it asks the
/// receiver to serve. (How many bytes each process sends travels with the
/// barrier; each stream marks its own last piece.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: Vec<GetRequest>,
}

impl Counts {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.requests.len() as u32).to_le_bytes());
        for q in &self.requests {
            out.push(u8::from(q.hp));
            out.extend_from_slice(&q.slot.to_le_bytes());
            out.extend_from_slice(&q.offset.to_le_bytes());
            out.extend_from_slice(&q.len.to_le_bytes());
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Counts, String> {
        let mut r = Reader(bytes);
        let n = r.u32()? as usize;
        if n > r.0.len() / REQUEST_LEN {
            return Err(format!("{n} get requests announced in {} bytes", r.0.len()));
        }
        let requests = (0..n)
            .map(|_| {
                let hp = match r.u8()? {
                    0 => false,
                    1 => true,
                    other => return Err(format!("a get request of kind {other}")),
                };
                Ok(GetRequest { hp, slot: r.u32()?, offset: r.u64()?, len: r.u64()? })
            })
            .collect::<Result<_, String>>()?;
        if !r.0.is_empty() {
            return Err("trailing bytes after the counts".into());
        }
        Ok(Counts { requests })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut s = Vec::new();
        put(&mut s, 3, 16, b"abcd");
        send(&mut s, b"tg", b"payload");
        reply_header(&mut s, 2);
        s.extend_from_slice(b"xy");
        put(&mut s, 0, 0, b"");
        let hp_at = s.len();
        put_header(&mut s, true, 5, 1, 2);
        s.extend_from_slice(b"hp");
        let records = parse(&s, 0).unwrap();
        assert_eq!(records.len(), 5);
        assert_eq!(records[0], Record::Put { hp: false, slot: 3, offset: 16, data: PUT_HEADER..PUT_HEADER + 4 });
        assert_eq!(records[4], Record::Put { hp: true, slot: 5, offset: 1, data: hp_at + PUT_HEADER..s.len() });
        let Record::Send { tag, payload } = &records[1] else { panic!() };
        assert_eq!((&s[tag.clone()], &s[payload.clone()]), (&b"tg"[..], &b"payload"[..]));
        let Record::Reply { data } = &records[2] else { panic!() };
        assert_eq!(&s[data.clone()], b"xy");
        // Truncated or unknown records are errors, not panics.
        for cut in 0..s.len() - PUT_HEADER {
            let _ = parse(&s[..cut], 0);
        }
        assert!(parse(&s[..s.len() - 1], 0).is_err());
        assert!(parse(&[9], 0).is_err());
        let mut huge = Vec::new();
        put_header(&mut huge, false, 0, 0, u64::MAX);
        assert!(parse(&huge, 0).is_err());
    }

    #[test]
    fn a_direct_put_says_where_its_bytes_are() {
        let mut s = OutStream::new(0);
        s.direct(true, 7, 64, 1 << 30, 0x7f00_dead_0000);
        s.put(1, 0, b"ab");
        s.in_arena(false, 3, 8, 4096, 1 << 20);
        s.in_arena(true, 3, 8, 4096, 0);
        s.reply_in_arena(2048, 64);
        assert_eq!(s.delivers(), s.len() as u64 + (1 << 30) + 2 * 4096 + 2048);
        s.send_in_arena(b"tg", 5000, 128);
        let (bytes, start) = s.into_bytes();
        let records = parse(&bytes, start).unwrap();
        let direct =
            Record::Direct { hp: true, arena: false, slot: 7, offset: 64, len: 1 << 30, addr: 0x7f00_dead_0000 };
        assert_eq!(records[0], direct);
        assert!(matches!(records[1], Record::Put { hp: false, slot: 1, .. }));
        let arena = Record::Direct { hp: false, arena: true, slot: 3, offset: 8, len: 4096, addr: 1 << 20 };
        assert_eq!(records[2], arena);
        assert!(matches!(records[3], Record::Direct { hp: true, arena: true, addr: 0, .. }));
        assert_eq!(records[4], Record::ReplyAt { len: 2048, at: 64 });
        let Record::SendAt { tag, len: 5000, at: 128 } = &records[5] else { panic!("{:?}", records[5]) };
        assert_eq!(&bytes[tag.clone()], b"tg");
        for cut in 1..1 + 4 + 8 + 8 + 2 {
            assert!(parse(&bytes[bytes.len() - 23..bytes.len() - 23 + cut], 0).is_err());
        }
        let reply = bytes.len() - 23 - REPLY_AT_LEN;
        for cut in 1..REPLY_AT_LEN {
            assert!(parse(&bytes[reply..reply + cut], 0).is_err());
        }
        let mut bad = bytes[start..start + DIRECT_LEN].to_vec();
        bad[1] = 4;
        assert!(parse(&bad, 0).unwrap_err().contains("kind 4"));
        for cut in 0..DIRECT_LEN {
            assert!(parse(&bytes[start..start + cut], 0).is_err() || cut == 0);
        }
        // A reply in the sender's memory (its stage), counted as delivered.
        let mut s = OutStream::new(0);
        s.reply_from(300_000, 0x7f00_0000_0040);
        assert_eq!(s.delivers(), s.len() as u64 + 300_000);
        let (bytes, start) = s.into_bytes();
        assert_eq!(parse(&bytes, start).unwrap(), [Record::ReplyFrom { len: 300_000, addr: 0x7f00_0000_0040 }]);
        for cut in 1..REPLY_AT_LEN {
            assert!(parse(&bytes[start..start + cut], 0).is_err());
        }
        assert!(parse(&[9], 0).unwrap_err().contains("unknown record kind 9"));
    }

    #[test]
    fn a_stream_travels_in_its_own_buffer_and_goes_on_after_it() {
        let mut s = OutStream::new(64);
        s.put(1, 0, b"abcd");
        let len = s.len();
        assert_eq!(len, PUT_HEADER + 4);
        let header = [7; DATA_HEADER];
        assert_eq!(s.hand_off(1, &header), None, "part of the buffer went as a copy");
        let message = s.hand_off(0, &header).unwrap();
        assert_eq!(&message[RECORD_HEADER_LEN..HEADROOM], &header);
        assert_eq!(parse(&message, HEADROOM).unwrap().len(), 1);
        assert!(message.capacity() - message.len() >= 64, "room for what shares the packet");
        // Handed off, the stream keeps its length; get replies added later
        // continue it in a new buffer.
        assert_eq!(s.len(), len);
        s.reply(b"xy");
        assert_eq!(s.len(), len + REPLY_HEADER + 2);
        assert_eq!(s.bytes(len + REPLY_HEADER..s.len()), b"xy");
        let rest = s.hand_off(len, &header).unwrap();
        assert_eq!(parse(&rest, HEADROOM).unwrap(), vec![Record::Reply { data: HEADROOM + REPLY_HEADER..rest.len() }]);
        // A stream never handed off (a process's own) starts behind the room.
        let mut own = OutStream::new(0);
        own.send(b"t", b"p");
        let (bytes, start) = own.into_bytes();
        assert_eq!((start, bytes.len()), (HEADROOM, HEADROOM + SEND_HEADER + 2));
        assert_eq!(OutStream::new(0).into_bytes(), (Vec::new(), 0));
    }

    #[test]
    fn a_large_stream_s_buffer_is_kept_while_unused_and_dropped_for_a_small_one() {
        let mut s = OutStream::new(0);
        s.put(1, 0, &vec![7; REUSE_FROM]);
        let Some(Kept::Own(buf)) = s.take_buffer() else { panic!("a large stream's buffer") };
        assert!(buf.is_empty() && buf.capacity() >= REUSE_FROM);
        let mut next = OutStream::new(0);
        next.reuse(Kept::Own(buf));
        // Unused in a superstep: kept again.
        let buf = next.take_buffer().expect("kept while unused");
        let mut small = OutStream::new(0);
        small.reuse(buf);
        small.put(1, 0, b"ab");
        assert!(small.take_buffer().is_none(), "a small stream's large buffer goes");
        // A small buffer that a stream stayed in (one that rode in a board
        // post) is kept.
        let mut posted = OutStream::new(0);
        posted.put(1, 0, b"ab");
        let Some(Kept::Own(buf)) = posted.take_buffer() else { panic!("a small stream's own small buffer") };
        assert!(buf.is_empty() && buf.capacity() > 0);
        // One handed off is the runtime's.
        let mut sent = OutStream::new(0);
        sent.put(1, 0, &vec![7; REUSE_FROM]);
        sent.hand_off(0, &[0; DATA_HEADER]).unwrap();
        assert!(sent.take_buffer().is_none());
    }

    #[test]
    fn two_buffers_take_turns_while_the_last_one_is_still_held() {
        let lent_at = |s: &mut OutStream| {
            let piece = s.lend(0..s.len());
            let at = (*piece).as_ref().as_ptr();
            (piece, at)
        };
        let mut one = OutStream::new(0);
        one.put(1, 0, &vec![1; REUSE_FROM]);
        let (held_a, a) = lent_at(&mut one);
        // The next superstep's put comes while the runtime holds A's last
        // piece: a new buffer, B, and A is kept.
        let mut two = OutStream::new(0);
        two.reuse(one.take_buffer().expect("large"));
        two.put(1, 0, &vec![2; REUSE_FROM]);
        let (held_b, b) = lent_at(&mut two);
        assert_ne!(a, b);
        // The barrier let go of A; B is held: A again, B kept.
        drop(held_a);
        let mut three = OutStream::new(0);
        three.reuse(two.take_buffer().expect("large"));
        three.reuse_older(two.take_older().expect("A, kept"));
        three.put(1, 0, &vec![3; REUSE_FROM]);
        let (held_a, at) = lent_at(&mut three);
        assert_eq!(at, a, "A taken back");
        assert_eq!((*held_a).as_ref()[PUT_HEADER..], vec![3; REUSE_FROM][..]);
        // And B after it.
        drop(held_b);
        let mut four = OutStream::new(0);
        four.reuse(three.take_buffer().expect("large"));
        four.reuse_older(three.take_older().expect("B, kept"));
        four.put(1, 0, &vec![4; REUSE_FROM]);
        assert_eq!(lent_at(&mut four).1, b, "B taken back");
        // Both let go: the last one is taken, and no other is kept.
        drop(held_a);
        let mut five = OutStream::new(0);
        five.reuse(four.take_buffer().expect("large"));
        five.put(1, 0, b"small");
        assert!(five.take_older().is_none(), "nothing held: no older buffer");
    }

    #[test]
    fn a_lent_stream_s_buffer_is_taken_back_once_the_runtime_lets_go() {
        let mut s = OutStream::new(0);
        s.put(1, 0, &vec![7; REUSE_FROM]);
        s.put(2, 0, b"tail");
        let len = s.len();
        let first = s.lend(0..1000);
        let second = s.lend(1000..len);
        assert_eq!((*first).as_ref(), s.bytes(0..1000));
        assert!((*second).as_ref().ends_with(b"tail"));
        assert!(!s.hands_off_at(0), "lent: never handed off");
        assert_eq!(s.hand_off(0, &[0; DATA_HEADER]), None);
        let at = (*first).as_ref().as_ptr();
        let Some(Kept::Lent(kept)) = s.take_buffer() else { panic!("a large lent stream's buffer") };
        // Still held by the runtime when the next stream starts: a new buffer.
        let mut next = OutStream::new(0);
        next.reuse(Kept::Lent(kept.clone()));
        next.put(1, 0, b"ab");
        assert_ne!(next.bytes(0..2).as_ptr(), at);
        drop(next);
        // Let go by then: the same buffer, emptied.
        let mut again = OutStream::new(0);
        again.reuse(Kept::Lent(kept));
        drop((first, second));
        again.put(3, 0, b"cd");
        assert_eq!(again.bytes(0..PUT_HEADER + 2).as_ptr(), at, "the lent buffer, taken back");
        assert_eq!(again.len(), PUT_HEADER + 2);
        // Added to while lent (the sync never does): copied, not changed under the runtime.
        let mut s = OutStream::new(0);
        s.put(1, 0, b"abcd");
        let piece = s.lend(0..s.len());
        let before = (*piece).as_ref().to_vec();
        s.put(2, 0, b"more");
        assert_eq!((*piece).as_ref(), &before[..]);
        assert_eq!(s.bytes(0..before.len()), &before[..]);
    }

    #[test]
    fn an_hpput_left_in_place_goes_in_pieces_from_its_source() {
        let sources: Vec<Vec<u8>> = (0..2u8).map(|i| (0..100_000u32).map(|k| (k as u8) ^ i).collect()).collect();
        let mut s = OutStream::new(0);
        let mut copied = OutStream::new(0);
        s.put(1, 0, &[9; 100]);
        copied.put(1, 0, &[9; 100]);
        for (i, src) in sources.iter().enumerate() {
            // SAFETY: `sources` outlives the stream.
            unsafe { s.hpput_in_place(2, i as u64, src.as_ptr() as usize, src.len(), 10 + i) };
            copied.hpput(2, i as u64, src);
        }
        s.reply(b"xy");
        copied.reply(b"xy");
        assert!(s.has_external());
        assert_eq!(s.len(), copied.len());
        assert!(!s.hands_off_at(0), "never handed off");
        let whole = copied.bytes(0..copied.len()).to_vec();
        let mut gathered = Vec::new();
        s.copy_range(0..s.len(), &mut gathered);
        assert_eq!(gathered, whole);
        // Cut into pieces of 30,000 bytes: each is the stream's own bytes,
        // or at most a put's header of them and then its source's bytes.
        let (mut at, mut sent, mut from_sources) = (0, Vec::new(), 0);
        while at < s.len() {
            let end = s.piece_end(at, (at + 30_000).min(s.len()));
            assert!(end > at && end - at <= 30_000);
            let parts = s.piece_parts(at..end);
            sent.extend_from_slice(s.own_bytes(parts.own.clone()));
            if let Some(x) = parts.external {
                assert!(parts.own.len() <= OWN_BEFORE_EXTERNAL, "{parts:?}");
                let source = &sources[x.tag - 10];
                assert_eq!(x.addr, source.as_ptr() as usize + x.from, "{parts:?}");
                from_sources += x.len;
                sent.extend_from_slice(&source[x.from..x.from + x.len]);
            }
            let mut piece = Vec::new();
            s.copy_range(at..end, &mut piece);
            assert_eq!(piece, whole[at..end]);
            at = end;
        }
        assert_eq!(sent, whole);
        assert_eq!(from_sources, 200_000, "every source byte from its source");
        assert_eq!(parse(&sent, 0).unwrap(), parse(&whole, 0).unwrap());
        // A lent piece of the stream's own bytes is where they are.
        let last = s.len() - REPLY_HEADER - 2;
        assert_eq!(s.piece_parts(last..s.len()).external, None);
        assert_eq!((*s.lend(last..s.len())).as_ref(), &whole[last..]);
    }

    #[test]
    fn pieces_fill_packets() {
        let mut pieces = vec![];
        let mut at = 0;
        while at < 2500 {
            let r = piece(at, 2500, 1000);
            at = r.end;
            pieces.push(r);
        }
        assert_eq!(pieces, vec![0..1000, 1000..2000, 2000..2500]);
        assert_eq!(piece(0, 1000, 1000), 0..1000);
    }

    #[test]
    fn counts_round_trip() {
        let c = Counts {
            requests: vec![
                GetRequest { hp: false, slot: 1, offset: 2, len: 3 },
                GetRequest { hp: true, slot: 4, offset: 5, len: 6 },
            ],
        };
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(Counts::decode(&b).unwrap(), c);
        assert!(Counts::decode(&b[..b.len() - 1]).is_err());
        let mut lie = b.clone();
        lie[0] = 200;
        assert!(Counts::decode(&lie).is_err());
        let mut kind = b.clone();
        kind[4] = 2;
        assert!(Counts::decode(&kind).unwrap_err().contains("kind 2"));
    }
}
