//! The fixed header that starts every datagram.

/// Wire format version; a datagram with another version is rejected.
/// Version 4: a message's end may come ahead of its first fragment
/// ([`crate::Records`]).
pub const VERSION: u8 = 4;

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 44;

/// Where the header's fields start (the layout in the crate's docs); read
/// and written only through these.
pub(crate) mod at {
    pub const TYPE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const COLOUR: usize = 3;
    pub const CHANNEL: usize = 4;
    pub const PAYLOAD_LEN: usize = 6;
    pub const JOB: usize = 8;
    pub const SOURCE: usize = 12;
    pub const DESTINATION: usize = 16;
    /// 48 bits each.
    pub const SEQUENCE: usize = 20;
    pub const ACK: usize = 26;
    pub const HOLE: usize = 32;
    pub const TIMESTAMP: usize = 36;
}

/// Sequence numbers and acknowledgements travel in 48 bits: a channel
/// carries fewer than 2^48 packets (nine years at a million a second).
pub const SEQUENCE_LIMIT: u64 = 1 << 48;

/// The job id's low 32 bits, which every datagram carries: a datagram of
/// another job is told apart before its MAC is checked (and would fail
/// it, the key being the job's own).
pub const fn job_tag(job: u64) -> u32 {
    job as u32
}

/// What a datagram is. Data packets are sequenced; every other type is an
/// unsequenced control packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Sequenced data: a payload of message records.
    Data = 1,
    /// Explicit acknowledgement (payload: [`crate::AckPayload`]).
    Ack = 2,
    /// A receiver waiting for a hole asks the sender what is missing
    /// (payload: empty, or an [`crate::AckPayload`] echoing the newest data
    /// packet it has and how long ago that came).
    Prod = 3,
    /// Timestamped latency probe on the ordinary path (payload:
    /// [`crate::ProbePayload`]).
    Probe = 4,
    /// Reserved for an SSCOP-style polled status report. The hole-filling
    /// channels need no separate frame for it: the explicit [`PacketType::Ack`]
    /// that answers a request (a poll) is their STAT.
    Stat = 5,
    /// Reserved for an SSCOP-style unsolicited status report; the
    /// [`PacketType::Prod`] a receiver sends on detecting a hole is the
    /// hole-filling channels' USTAT.
    Ustat = 6,
    /// Latency status: a status report that also switches the sender's path
    /// mode (payload: [`crate::LatencyStatus`] and missing ranges).
    Lstat = 7,
    /// Clock resynchronisation exchange (payload: [`crate::ClockSyncPayload`]).
    ClockSync = 8,
    /// Warp rate feedback from a receiver to a sender under rate control
    /// (payload: [`crate::WarpFeedback`]).
    Warp = 9,
}

impl PacketType {
    pub fn from_u8(value: u8) -> Option<PacketType> {
        Some(match value {
            1 => PacketType::Data,
            2 => PacketType::Ack,
            3 => PacketType::Prod,
            4 => PacketType::Probe,
            5 => PacketType::Stat,
            6 => PacketType::Ustat,
            7 => PacketType::Lstat,
            8 => PacketType::ClockSync,
            9 => PacketType::Warp,
            _ => return None,
        })
    }

    pub fn is_data(self) -> bool {
        self == PacketType::Data
    }
}

/// Header flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    /// The sender asks for an explicit acknowledgement (its buffers are low).
    pub const ACK_REQUESTED: Flags = Flags(1 << 0);
    /// The last packet of a communication phase: acknowledge it at once.
    pub const LAST_OF_PHASE: Flags = Flags(1 << 1);
    /// This data packet is a retransmission.
    pub const RETRANSMISSION: Flags = Flags(1 << 2);
    /// An answer to a prod.
    pub const REPLY: Flags = Flags(1 << 3);
    /// This data packet travels on the premium path (high-latency mode), so
    /// its timestamp says nothing about the ordinary path's latency.
    pub const PREMIUM: Flags = Flags(1 << 4);
    /// The sender of this data packet is under Warp rate control: the
    /// receiver returns [`PacketType::Warp`] feedback.
    pub const RATE_CONTROLLED: Flags = Flags(1 << 5);
    /// This data packet is sent once and never again (a best-effort
    /// channel): the receiver delivers what comes and asks for nothing.
    pub const BEST_EFFORT: Flags = Flags(1 << 6);
    /// Every flag this version defines; others must be zero. They fit
    /// the header's one byte of flags.
    pub const ALL: Flags = Flags(0b111_1111);

    pub const fn empty() -> Flags {
        Flags(0)
    }

    pub const fn bits(self) -> u16 {
        self.0
    }

    pub const fn from_bits(bits: u16) -> Option<Flags> {
        if bits & !Self::ALL.0 != 0 {
            return None;
        }
        Some(Flags(bits))
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }

    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// The decoded fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub packet_type: PacketType,
    pub flags: Flags,
    pub channel: u16,
    /// Superstep colour: alternates between supersteps so that a packet of the
    /// next superstep acknowledges the previous one.
    pub colour: u8,
    /// The job's tag ([`job_tag`] of its id).
    pub job: u32,
    pub source: u32,
    pub destination: u32,
    /// Sequence number of a data packet; zero in control packets. Below
    /// [`SEQUENCE_LIMIT`], as are `ack` and `end_of_hole`.
    pub sequence: u64,
    /// Every packet of the reverse direction with a sequence number below this
    /// has arrived (cumulative acknowledgement).
    pub ack: u64,
    /// The first packet the receiver holds beyond the hole that starts at `ack`;
    /// equal to `ack` when nothing is missing. `[ack, end_of_hole)` is the hole;
    /// the wire carries its length in 32 bits (a longer one is sent as
    /// 2^32 - 1 packets: a receiver holds far fewer).
    pub end_of_hole: u64,
    /// The sender's clock when the packet left, in nanoseconds.
    pub timestamp: u64,
    pub payload_len: u16,
}

impl Header {
    /// The source rank a datagram names, unchecked (no MAC is verified):
    /// for counting what arrived, never for acting on it.
    pub fn named_source(datagram: &[u8]) -> Option<u32> {
        Some(u32_at(datagram.get(..at::SOURCE + 4)?, at::SOURCE))
    }

    /// The length on the wire (header, payload and MAC) a datagram's
    /// header names, unchecked (no MAC is verified): where a read of
    /// several datagrams laid end to end by the kernel came without the
    /// size of each, the first one's names it (every one but the last is
    /// that long), and the MAC of each piece then decides.
    pub fn named_length(datagram: &[u8]) -> Option<usize> {
        let head = datagram.get(..at::PAYLOAD_LEN + 2)?;
        let len = u16::from_be_bytes([head[at::PAYLOAD_LEN], head[at::PAYLOAD_LEN + 1]]);
        Some(HEADER_LEN + len as usize + crate::mac::MAC_LEN)
    }

    /// A header with every field zero but the type.
    pub fn new(packet_type: PacketType) -> Header {
        Header {
            packet_type,
            flags: Flags::empty(),
            channel: 0,
            colour: 0,
            job: 0,
            source: 0,
            destination: 0,
            sequence: 0,
            ack: 0,
            end_of_hole: 0,
            timestamp: 0,
            payload_len: 0,
        }
    }

    /// The sequence number a datagram's header names, unchecked (no MAC
    /// is verified): for tests and traces that look at datagrams.
    pub fn named_sequence(datagram: &[u8]) -> Option<u64> {
        Some(u48_at(datagram.get(..at::SEQUENCE + 6)?, at::SEQUENCE))
    }

    /// Writes the header; `false` where a sequence number or
    /// acknowledgement does not fit its 48 bits.
    pub(crate) fn write(&self, out: &mut [u8; HEADER_LEN]) -> bool {
        if self.sequence >= SEQUENCE_LIMIT || self.ack >= SEQUENCE_LIMIT || self.end_of_hole >= SEQUENCE_LIMIT {
            return false;
        }
        let hole = self.end_of_hole.saturating_sub(self.ack).min(u32::MAX as u64) as u32;
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &[VERSION]);
        put(at::TYPE, &[self.packet_type as u8]);
        put(at::FLAGS, &[self.flags.bits() as u8]);
        put(at::COLOUR, &[self.colour]);
        put(at::CHANNEL, &self.channel.to_be_bytes());
        put(at::PAYLOAD_LEN, &self.payload_len.to_be_bytes());
        put(at::JOB, &self.job.to_be_bytes());
        put(at::SOURCE, &self.source.to_be_bytes());
        put(at::DESTINATION, &self.destination.to_be_bytes());
        put(at::SEQUENCE, &self.sequence.to_be_bytes()[2..]);
        put(at::ACK, &self.ack.to_be_bytes()[2..]);
        put(at::HOLE, &hole.to_be_bytes());
        put(at::TIMESTAMP, &self.timestamp.to_be_bytes());
        true
    }
}

const _: () = assert!(Flags::ALL.bits() <= u8::MAX as u16, "the flags fit one byte");
const _: () = assert!(at::TIMESTAMP + 8 == HEADER_LEN, "the fields fill the header");

pub(crate) fn u16_at(b: &[u8; HEADER_LEN], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn u48_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word[2..].copy_from_slice(&b[at..at + 6]);
    u64::from_be_bytes(word)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(word)
}
