//! Message records inside a data payload.
//!
//! A data payload is a sequence of records, each a fragment of one message:
//!
//! ```text
//!  message length (u32) | fragment offset (u32) | fragment length (u16) | bytes
//! ```
//!
//! Many small messages pack into one packet as whole-message records; a large
//! message spans several packets as consecutive fragments. A zero-length
//! message is the record `(0, 0, 0)`. A channel may send a large message's
//! last bytes (at most 16) ahead of it: a record that ends the message,
//! right before the record of its first fragment in the same payload; its
//! fragments then stop where those bytes begin.

use crate::packet::DecodeError;

/// Bytes of a record header.
pub const RECORD_HEADER_LEN: usize = 10;

/// One fragment of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub message_len: u32,
    pub offset: u32,
    pub data: &'a [u8],
}

impl Record<'_> {
    pub fn starts_message(&self) -> bool {
        self.offset == 0
    }

    pub fn ends_message(&self) -> bool {
        self.offset as usize + self.data.len() == self.message_len as usize
    }
}

/// Iterates over the records of a payload, without allocating. A malformed
/// record ends the iteration with an error.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Records<'a> {
    pub fn new(payload: &'a [u8]) -> Records<'a> {
        Records { rest: payload, failed: false }
    }

    /// Checks a whole payload without yielding it.
    pub fn validate(payload: &[u8]) -> Result<(), DecodeError> {
        Records::new(payload).try_for_each(|r| r.map(|_| ()))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let fail = |this: &mut Self, why| {
            this.failed = true;
            Some(Err(DecodeError::MalformedPayload(why)))
        };
        if self.rest.len() < RECORD_HEADER_LEN {
            return fail(self, "truncated record header");
        }
        let r = self.rest;
        let message_len = u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
        let offset = u32::from_be_bytes([r[4], r[5], r[6], r[7]]);
        let len = u16::from_be_bytes([r[8], r[9]]) as usize;
        if r.len() - RECORD_HEADER_LEN < len {
            return fail(self, "record longer than the payload");
        }
        if offset as u64 + len as u64 > message_len as u64 {
            return fail(self, "fragment beyond the end of its message");
        }
        if len == 0 && message_len != 0 {
            return fail(self, "empty fragment of a non-empty message");
        }
        let data = &r[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len];
        self.rest = &r[RECORD_HEADER_LEN + len..];
        Some(Ok(Record { message_len, offset, data }))
    }
}

/// Appends records to a payload buffer.
#[derive(Debug)]
pub struct RecordWriter<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl<'a> RecordWriter<'a> {
    pub fn new(out: &'a mut [u8]) -> RecordWriter<'a> {
        RecordWriter { out, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many message bytes the next record can carry (0 if not even a
    /// record header fits).
    pub fn room(&self) -> usize {
        (self.out.len() - self.len).saturating_sub(RECORD_HEADER_LEN).min(u16::MAX as usize)
    }

    /// Appends a fragment; the caller keeps `data.len() <= self.room()`.
    pub fn push(&mut self, message_len: u32, offset: u32, data: &[u8]) {
        assert!(data.len() <= self.room(), "record does not fit");
        let o = &mut self.out[self.len..];
        o[..RECORD_HEADER_LEN].copy_from_slice(&record_header(message_len, offset, data.len() as u16));
        o[RECORD_HEADER_LEN..RECORD_HEADER_LEN + data.len()].copy_from_slice(data);
        self.len += RECORD_HEADER_LEN + data.len();
    }
}

/// A record's header read back: `(message_len, offset, len)`.
pub fn read_record_header(h: &[u8; RECORD_HEADER_LEN]) -> (u32, u32, u16) {
    let message_len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let offset = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    (message_len, offset, u16::from_be_bytes([h[8], h[9]]))
}

/// The header of a record of `len` bytes at `offset` of a message of
/// `message_len` bytes: for a record whose bytes are already in place
/// behind room left for it.
pub fn record_header(message_len: u32, offset: u32, len: u16) -> [u8; RECORD_HEADER_LEN] {
    let mut h = [0; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&message_len.to_be_bytes());
    h[4..8].copy_from_slice(&offset.to_be_bytes());
    h[8..10].copy_from_slice(&len.to_be_bytes());
    h
}
