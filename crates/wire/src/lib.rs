//! Packet formats of bulkwire.
//!
//! Every datagram is a fixed 44-byte header, a payload of at most
//! [`MAX_PAYLOAD`] bytes and a 16-byte MAC keyed by the job key over header and
//! payload (over the header alone where every socket of the job is on
//! loopback: [`Coverage::Header`]). All integers are big-endian.
//!
//! ```text
//!  0 ver (u8)   1 type (u8)   2 flags (u8)   3 colour (u8)
//!  4 channel (u16)            6 payload length (u16)
//!  8 job tag: the job id's low 32 bits (u32)
//! 12 source rank (u32)       16 destination rank (u32)
//! 20 sequence (u48)          26 acknowledgement (u48)
//! 32 length of the hole from the acknowledgement, packets (u32)
//! 36 sender timestamp, ns (u64)
//! 44 payload …  then 16 bytes of MAC
//! ```
//!
//! Decoding never allocates and never panics: every malformed input gives a
//! [`DecodeError`], which [`RejectCounters`] can tally.

mod control;
mod header;
mod latency;
mod mac;
mod packet;
mod polyval;
mod records;

pub use control::{AckPayload, WarpFeedback, ACK_PAYLOAD_LEN, WARP_FEEDBACK_LEN};
pub use header::{job_tag, Flags, Header, PacketType, HEADER_LEN, SEQUENCE_LIMIT, VERSION};
pub use latency::{
    ClockSyncKind, ClockSyncPayload, LatencyStatus, LstatReason, MissingRanges, ProbePayload, WireMode,
    CLOCK_SYNC_PAYLOAD_LEN, LSTAT_FIXED_LEN, MAX_MISSING_RANGES, MISSING_RANGE_LEN, PROBE_PAYLOAD_LEN,
};
pub use mac::{mac_polyval, Coverage, JobKey, MAC_LEN};
pub use packet::{
    decode, decode_split, encode, seal, seal_parts, seal_split, Accept, DecodeError, EncodeError, Packet,
    RejectCounters, MAX_DATAGRAM, MAX_PAYLOAD, OVERHEAD,
};
pub use records::{read_record_header, record_header, Record, RecordWriter, Records, RECORD_HEADER_LEN};
