//! Whole datagrams: encode, seal with the MAC, decode and verify.

use crate::header::{at, job_tag, u16_at, u32_at, u48_at, u64_at, Flags, Header, PacketType, HEADER_LEN, VERSION};
use crate::mac::{JobKey, MAC_LEN};

/// Header plus MAC: the bytes every datagram spends on the protocol.
pub const OVERHEAD: usize = HEADER_LEN + MAC_LEN;
/// The largest UDP payload over IPv4; nothing longer is ever valid.
pub const MAX_DATAGRAM: usize = 65_507;
/// The largest payload a datagram can carry.
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - OVERHEAD;

/// Why a datagram was rejected. Each variant is counted by [`RejectCounters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("datagram of {0} bytes is shorter than a header and MAC")]
    Truncated(usize),
    #[error("datagram of {0} bytes exceeds the largest datagram")]
    Oversized(usize),
    #[error("wire version {0} is not supported (this is version {VERSION})")]
    UnsupportedVersion(u8),
    #[error("datagram belongs to the job tagged {0:#x}")]
    WrongJob(u32),
    #[error("MAC does not match: forged or corrupted datagram")]
    BadMac,
    #[error("payload length {declared} does not match the {actual} bytes present")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    #[error("undefined flag bits {0:#04x}")]
    UnknownFlags(u16),
    #[error("datagram addressed to rank {to} from rank {from} is not for this process")]
    Misaddressed { from: u32, to: u32 },
    #[error("channel {0} does not exist")]
    UnknownChannel(u16),
    #[error("malformed payload: {0}")]
    MalformedPayload(&'static str),
}

/// Why a datagram could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("payload of {0} bytes exceeds the largest payload")]
    PayloadTooLarge(usize),
    #[error("output buffer of {have} bytes cannot hold a {need}-byte datagram")]
    BufferTooSmall { need: usize, have: usize },
    #[error("a sequence number or acknowledgement is beyond the 48 bits the wire carries")]
    SequenceSpent,
}

/// A verified datagram. The payload borrows the input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub header: Header,
    pub payload: &'a [u8],
}

/// What a receiver accepts: its job, its own rank, how many ranks and
/// channels exist. Checked after the MAC, so a mismatch means a bug or a
/// replayed datagram of this job, not noise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    pub job: u64,
    pub destination: u32,
    pub ranks: u32,
    pub channels: u16,
}

/// Encodes header and payload into `out`, returns the datagram length.
/// `header.payload_len` is taken from `payload`.
pub fn encode(header: &Header, payload: &[u8], key: &JobKey, out: &mut [u8]) -> Result<usize, EncodeError> {
    let need = check_room(payload.len(), out.len())?;
    out[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
    seal(header, payload.len(), key, &mut out[..need])
}

/// Writes the header and MAC around a payload that the caller already placed
/// at `out[HEADER_LEN..HEADER_LEN + payload_len]` (no copy of the payload).
pub fn seal(header: &Header, payload_len: usize, key: &JobKey, out: &mut [u8]) -> Result<usize, EncodeError> {
    let need = check_room(payload_len, out.len())?;
    let mut header = *header;
    header.payload_len = payload_len as u16;
    let head: &mut [u8; HEADER_LEN] = (&mut out[..HEADER_LEN]).try_into().expect("length checked");
    if !header.write(head) {
        return Err(EncodeError::SequenceSpent);
    }
    let body = HEADER_LEN + payload_len;
    let tag = key.datagram_tag(&out[..body]);
    out[body..need].copy_from_slice(&tag);
    Ok(need)
}

/// [`seal`] for a payload kept elsewhere, sent without being copied: writes
/// the header and then the MAC at `out[..OVERHEAD]`. The datagram is
/// `out[..HEADER_LEN]`, then `payload`, then `out[HEADER_LEN..OVERHEAD]`.
pub fn seal_split(header: &Header, payload: &[u8], key: &JobKey, out: &mut [u8]) -> Result<usize, EncodeError> {
    seal_parts(header, &[payload], key, out)
}

/// [`seal_split`] for a payload kept in `parts`, one after the other.
pub fn seal_parts(header: &Header, parts: &[&[u8]], key: &JobKey, out: &mut [u8]) -> Result<usize, EncodeError> {
    let len = parts.iter().map(|p| p.len()).sum::<usize>();
    check_room(len, out.len() + len)?;
    let mut header = *header;
    header.payload_len = len as u16;
    let head: &mut [u8; HEADER_LEN] = (&mut out[..HEADER_LEN]).try_into().expect("length checked");
    if !header.write(head) {
        return Err(EncodeError::SequenceSpent);
    }
    let tag = key.datagram_tag_parts(head, parts);
    out[HEADER_LEN..OVERHEAD].copy_from_slice(&tag);
    Ok(OVERHEAD)
}

fn check_room(payload_len: usize, out_len: usize) -> Result<usize, EncodeError> {
    if payload_len > MAX_PAYLOAD {
        return Err(EncodeError::PayloadTooLarge(payload_len));
    }
    let need = OVERHEAD + payload_len;
    if out_len < need {
        return Err(EncodeError::BufferTooSmall { need, have: out_len });
    }
    Ok(need)
}

/// Decodes and authenticates one datagram. Cheap checks (length, version, job)
/// come first so that noise costs little; the MAC is checked before any field
/// is trusted further.
pub fn decode<'a>(datagram: &'a [u8], key: &JobKey, accept: &Accept) -> Result<Packet<'a>, DecodeError> {
    let len = datagram.len();
    let head = first_checks(datagram, len, accept)?;
    let body = HEADER_LEN + (len - OVERHEAD);
    if !key.verify_datagram(&datagram[..body], &datagram[body..]) {
        return Err(DecodeError::BadMac);
    }
    let header = last_checks(head, len - OVERHEAD, accept)?;
    Ok(Packet { header, payload: &datagram[HEADER_LEN..body] })
}

/// [`decode`] of a datagram read in three pieces: `head` (the header and
/// the payload's first bytes), `rest` (the rest of the payload) and `mac`.
/// Returns the header; the payload is `head[HEADER_LEN..]` then `rest`.
pub fn decode_split(
    head: &[u8],
    rest: &[u8],
    mac: &[u8],
    key: &JobKey,
    accept: &Accept,
) -> Result<Header, DecodeError> {
    let len = head.len() + rest.len() + mac.len();
    if head.len() < HEADER_LEN || mac.len() != MAC_LEN {
        // Only a whole header before and a MAC after make a datagram here.
        return Err(DecodeError::Truncated(len));
    }
    let header = first_checks(head, len, accept)?;
    if !key.verify_datagram_parts(header, &[&head[HEADER_LEN..], rest], mac) {
        return Err(DecodeError::BadMac);
    }
    last_checks(header, len - OVERHEAD, accept)
}

/// The checks of a datagram of `len` bytes that come before its MAC
/// (length, version, job, declared payload length); its header.
fn first_checks<'a>(start: &'a [u8], len: usize, accept: &Accept) -> Result<&'a [u8; HEADER_LEN], DecodeError> {
    if len > MAX_DATAGRAM {
        return Err(DecodeError::Oversized(len));
    }
    if len < OVERHEAD || start.len() < HEADER_LEN {
        return Err(DecodeError::Truncated(len));
    }
    let head: &[u8; HEADER_LEN] = start[..HEADER_LEN].try_into().expect("length checked");
    if head[0] != VERSION {
        return Err(DecodeError::UnsupportedVersion(head[0]));
    }
    let job = u32_at(head, at::JOB);
    if job != job_tag(accept.job) {
        return Err(DecodeError::WrongJob(job));
    }
    let payload_len = u16_at(head, at::PAYLOAD_LEN) as usize;
    if OVERHEAD + payload_len != len {
        return Err(DecodeError::LengthMismatch { declared: payload_len, actual: len - OVERHEAD });
    }
    Ok(head)
}

/// The checks after the MAC: the fields, trusted now, make sense.
fn last_checks(head: &[u8; HEADER_LEN], payload_len: usize, accept: &Accept) -> Result<Header, DecodeError> {
    let packet_type = PacketType::from_u8(head[at::TYPE]).ok_or(DecodeError::UnknownType(head[at::TYPE]))?;
    let flag_bits = head[at::FLAGS] as u16;
    let flags = Flags::from_bits(flag_bits).ok_or(DecodeError::UnknownFlags(flag_bits))?;
    let ack = u48_at(head, at::ACK);
    let header = Header {
        packet_type,
        flags,
        channel: u16_at(head, at::CHANNEL),
        colour: head[at::COLOUR],
        job: u32_at(head, at::JOB),
        source: u32_at(head, at::SOURCE),
        destination: u32_at(head, at::DESTINATION),
        sequence: u48_at(head, at::SEQUENCE),
        ack,
        end_of_hole: ack + u32_at(head, at::HOLE) as u64,
        timestamp: u64_at(head, at::TIMESTAMP),
        payload_len: payload_len as u16,
    };
    if header.destination != accept.destination || header.source >= accept.ranks || header.source == accept.destination
    {
        return Err(DecodeError::Misaddressed { from: header.source, to: header.destination });
    }
    if header.channel >= accept.channels {
        return Err(DecodeError::UnknownChannel(header.channel));
    }
    Ok(header)
}

/// Counts of rejected datagrams, one per [`DecodeError`] kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectCounters {
    pub truncated: u64,
    pub oversized: u64,
    pub wrong_version: u64,
    pub wrong_job: u64,
    pub bad_mac: u64,
    pub length_mismatch: u64,
    pub unknown_type: u64,
    pub malformed: u64,
    pub misaddressed: u64,
}

impl RejectCounters {
    pub fn record(&mut self, error: &DecodeError) {
        let counter = match error {
            DecodeError::Truncated(_) => &mut self.truncated,
            DecodeError::Oversized(_) => &mut self.oversized,
            DecodeError::UnsupportedVersion(_) => &mut self.wrong_version,
            DecodeError::WrongJob(_) => &mut self.wrong_job,
            DecodeError::BadMac => &mut self.bad_mac,
            DecodeError::LengthMismatch { .. } => &mut self.length_mismatch,
            DecodeError::UnknownType(_) => &mut self.unknown_type,
            DecodeError::UnknownFlags(_) | DecodeError::MalformedPayload(_) => &mut self.malformed,
            DecodeError::Misaddressed { .. } | DecodeError::UnknownChannel(_) => &mut self.misaddressed,
        };
        *counter += 1;
    }

    pub fn total(&self) -> u64 {
        self.truncated
            + self.oversized
            + self.wrong_version
            + self.wrong_job
            + self.bad_mac
            + self.length_mismatch
            + self.unknown_type
            + self.malformed
            + self.misaddressed
    }

    pub fn add(&mut self, other: &RejectCounters) {
        self.truncated += other.truncated;
        self.oversized += other.oversized;
        self.wrong_version += other.wrong_version;
        self.wrong_job += other.wrong_job;
        self.bad_mac += other.bad_mac;
        self.length_mismatch += other.length_mismatch;
        self.unknown_type += other.unknown_type;
        self.malformed += other.malformed;
        self.misaddressed += other.misaddressed;
    }
}
