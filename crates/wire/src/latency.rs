//! Payloads of the latency engines: probes, latency status (LSTAT) and clock
//! synchronisation (seed 000 §3).
//!
//! ```text
//! probe (20 bytes):       probe number (u64) | interval, ns (u64) | applied epoch (u32)
//! clock sync (32 bytes):  kind (u8) | zero (7) | t1 (u64) | t2 (u64) | t3 (u64)
//! LSTAT (32 + 16 n):      epoch (u32) | mode (u8) | reason (u8) | n (u8) | zero (u8)
//!                         probe timestamp (u64) | latency, ns (u64) | known sent (u64)
//!                         n × (first missing (u64), end of missing (u64))
//! ```
//!
//! Every reader checks the exact length and the reserved bytes, and returns a
//! [`DecodeError`] for anything else; none allocates (the missing ranges of an
//! LSTAT are read lazily from the payload).

use crate::header::{u32_at, u64_at};
use crate::packet::DecodeError;

/// Bytes of a [`ProbePayload`].
pub const PROBE_PAYLOAD_LEN: usize = 20;
/// Bytes of a [`ClockSyncPayload`].
pub const CLOCK_SYNC_PAYLOAD_LEN: usize = 32;
/// Bytes of a [`LatencyStatus`] before its missing ranges.
pub const LSTAT_FIXED_LEN: usize = 32;
/// Bytes of one missing range in an LSTAT.
pub const MISSING_RANGE_LEN: usize = 16;
/// Most missing ranges one LSTAT carries: a receiver with more holes reports
/// the first ones, and hole filling recovers the rest.
pub const MAX_MISSING_RANGES: usize = 32;

/// A timestamped latency probe; the timestamp is the header's. It travels on
/// the ordinary path only, whatever the mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbePayload {
    /// Numbers probes from zero, so a receiver sees which ones went missing.
    pub number: u64,
    /// Nanoseconds until the sender's next probe: when the receiver should
    /// expect it, without having to share the sender's configuration.
    pub interval: u64,
    /// The newest LSTAT epoch the sender has applied; a receiver whose LSTAT
    /// was lost sees it here and sends it again.
    pub applied_epoch: u32,
}

impl ProbePayload {
    pub fn write(&self, out: &mut [u8]) -> usize {
        out[..8].copy_from_slice(&self.number.to_be_bytes());
        out[8..16].copy_from_slice(&self.interval.to_be_bytes());
        out[16..20].copy_from_slice(&self.applied_epoch.to_be_bytes());
        PROBE_PAYLOAD_LEN
    }

    pub fn read(payload: &[u8]) -> Result<ProbePayload, DecodeError> {
        if payload.len() != PROBE_PAYLOAD_LEN {
            return Err(DecodeError::MalformedPayload("probe payload has the wrong length"));
        }
        Ok(ProbePayload {
            number: u64_at(payload, 0),
            interval: u64_at(payload, 8),
            applied_epoch: u32_at(payload, 16),
        })
    }
}

/// Which half of an NTP-style exchange a clock sync packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClockSyncKind {
    /// Sent at `t1` on the requester's clock.
    Request = 1,
    /// Echoes `t1`, with the arrival `t2` and departure `t3` of the request
    /// on the replier's clock.
    Reply = 2,
}

/// Payload of a clock synchronisation packet (four-timestamp exchange; the
/// requester reads `t4` from its own clock when the reply arrives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSyncPayload {
    pub kind: ClockSyncKind,
    pub t1: u64,
    /// Zero in a request.
    pub t2: u64,
    /// Zero in a request.
    pub t3: u64,
}

impl ClockSyncPayload {
    pub fn request(t1: u64) -> ClockSyncPayload {
        ClockSyncPayload { kind: ClockSyncKind::Request, t1, t2: 0, t3: 0 }
    }

    pub fn write(&self, out: &mut [u8]) -> usize {
        out[0] = self.kind as u8;
        out[1..8].fill(0);
        out[8..16].copy_from_slice(&self.t1.to_be_bytes());
        out[16..24].copy_from_slice(&self.t2.to_be_bytes());
        out[24..32].copy_from_slice(&self.t3.to_be_bytes());
        CLOCK_SYNC_PAYLOAD_LEN
    }

    pub fn read(payload: &[u8]) -> Result<ClockSyncPayload, DecodeError> {
        if payload.len() != CLOCK_SYNC_PAYLOAD_LEN {
            return Err(DecodeError::MalformedPayload("clock sync payload has the wrong length"));
        }
        let kind = match payload[0] {
            1 => ClockSyncKind::Request,
            2 => ClockSyncKind::Reply,
            _ => return Err(DecodeError::MalformedPayload("unknown clock sync kind")),
        };
        if payload[1..8].iter().any(|&b| b != 0) {
            return Err(DecodeError::MalformedPayload("clock sync reserved bytes are not zero"));
        }
        Ok(ClockSyncPayload { kind, t1: u64_at(payload, 8), t2: u64_at(payload, 16), t3: u64_at(payload, 24) })
    }
}

/// The path mode an LSTAT asks the sender to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WireMode {
    /// Data on the ordinary path.
    #[default]
    Low = 0,
    /// Data on the premium path.
    High = 1,
}

/// Why the receiver sent an LSTAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LstatReason {
    /// A sample's latency exceeded the high threshold TM.
    LatencyHigh = 1,
    /// A probe was not seen TL after its expected time.
    ProbeLost = 2,
    /// A sample's latency fell below the low threshold Tm.
    LatencyLow = 3,
}

/// The fixed part of an LSTAT: a mode decision of the receiver, and the
/// sample that caused it. The receiver's status (what it has, what is
/// missing) is in the header's acknowledgement fields and in the missing
/// ranges that follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyStatus {
    /// Numbers the receiver's decisions; the sender applies only a newer
    /// one, so a reordered or repeated LSTAT cannot undo a later decision.
    pub epoch: u32,
    pub mode: WireMode,
    pub reason: LstatReason,
    /// The sender's timestamp of the offending probe (for a lost probe, the
    /// timestamp it was expected to carry).
    pub probe_timestamp: u64,
    /// The latency measured, in nanoseconds (zero for a lost probe).
    pub latency: u64,
    /// One past the highest sequence number the receiver knows the sender
    /// used: it knows nothing of the packets from here on.
    pub known_sent: u64,
}

impl LatencyStatus {
    /// Writes the status and `ranges` (at most [`MAX_MISSING_RANGES`] are
    /// taken), returns the payload length. `out` must hold
    /// `LSTAT_FIXED_LEN + MISSING_RANGE_LEN * MAX_MISSING_RANGES` bytes.
    pub fn write(&self, ranges: impl IntoIterator<Item = (u64, u64)>, out: &mut [u8]) -> usize {
        let mut len = LSTAT_FIXED_LEN;
        let mut count = 0u8;
        for (start, end) in ranges.into_iter().take(MAX_MISSING_RANGES) {
            out[len..len + 8].copy_from_slice(&start.to_be_bytes());
            out[len + 8..len + 16].copy_from_slice(&end.to_be_bytes());
            len += MISSING_RANGE_LEN;
            count += 1;
        }
        out[0..4].copy_from_slice(&self.epoch.to_be_bytes());
        out[4] = self.mode as u8;
        out[5] = self.reason as u8;
        out[6] = count;
        out[7] = 0;
        out[8..16].copy_from_slice(&self.probe_timestamp.to_be_bytes());
        out[16..24].copy_from_slice(&self.latency.to_be_bytes());
        out[24..32].copy_from_slice(&self.known_sent.to_be_bytes());
        len
    }

    /// Reads an LSTAT payload. The ranges are checked here: each non-empty,
    /// in increasing order, not overlapping, and below `known_sent`.
    pub fn read(payload: &[u8]) -> Result<(LatencyStatus, MissingRanges<'_>), DecodeError> {
        if payload.len() < LSTAT_FIXED_LEN {
            return Err(DecodeError::MalformedPayload("LSTAT payload is truncated"));
        }
        let count = payload[6] as usize;
        if count > MAX_MISSING_RANGES || payload.len() != LSTAT_FIXED_LEN + count * MISSING_RANGE_LEN {
            return Err(DecodeError::MalformedPayload("LSTAT range count does not match its length"));
        }
        let mode = match payload[4] {
            0 => WireMode::Low,
            1 => WireMode::High,
            _ => return Err(DecodeError::MalformedPayload("unknown LSTAT mode")),
        };
        let reason = match payload[5] {
            1 => LstatReason::LatencyHigh,
            2 => LstatReason::ProbeLost,
            3 => LstatReason::LatencyLow,
            _ => return Err(DecodeError::MalformedPayload("unknown LSTAT reason")),
        };
        if payload[7] != 0 {
            return Err(DecodeError::MalformedPayload("LSTAT reserved byte is not zero"));
        }
        let status = LatencyStatus {
            epoch: u32_at(payload, 0),
            mode,
            reason,
            probe_timestamp: u64_at(payload, 8),
            latency: u64_at(payload, 16),
            known_sent: u64_at(payload, 24),
        };
        let ranges = MissingRanges { rest: &payload[LSTAT_FIXED_LEN..] };
        let mut previous_end = 0;
        for (start, end) in ranges.clone() {
            if start >= end || start < previous_end || end > status.known_sent {
                return Err(DecodeError::MalformedPayload("LSTAT missing ranges are not ordered and bounded"));
            }
            previous_end = end;
        }
        Ok((status, ranges))
    }
}

/// The missing ranges `[start, end)` of a decoded LSTAT, in increasing order.
#[derive(Clone, Debug)]
pub struct MissingRanges<'a> {
    rest: &'a [u8],
}

impl Iterator for MissingRanges<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if self.rest.len() < MISSING_RANGE_LEN {
            return None;
        }
        let range = (u64_at(self.rest, 0), u64_at(self.rest, 8));
        self.rest = &self.rest[MISSING_RANGE_LEN..];
        Some(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_clock_sync_round_trip() {
        let p = ProbePayload { number: 7, interval: 100_000_000, applied_epoch: 3 };
        let mut b = [0u8; PROBE_PAYLOAD_LEN];
        assert_eq!(p.write(&mut b), PROBE_PAYLOAD_LEN);
        assert_eq!(ProbePayload::read(&b), Ok(p));
        assert!(ProbePayload::read(&b[..19]).is_err());

        let c = ClockSyncPayload { kind: ClockSyncKind::Reply, t1: 1, t2: u64::MAX, t3: 42 };
        let mut b = [0u8; CLOCK_SYNC_PAYLOAD_LEN];
        assert_eq!(c.write(&mut b), CLOCK_SYNC_PAYLOAD_LEN);
        assert_eq!(ClockSyncPayload::read(&b), Ok(c));
        b[3] = 1;
        assert!(ClockSyncPayload::read(&b).is_err());
        b[3] = 0;
        b[0] = 3;
        assert!(ClockSyncPayload::read(&b).is_err());
    }

    #[test]
    fn lstat_round_trip_and_range_checks() {
        let s = LatencyStatus {
            epoch: 9,
            mode: WireMode::High,
            reason: LstatReason::ProbeLost,
            probe_timestamp: 123,
            latency: 0,
            known_sent: 50,
        };
        let mut b = vec![0u8; LSTAT_FIXED_LEN + MISSING_RANGE_LEN * MAX_MISSING_RANGES];
        let n = s.write([(3, 5), (7, 8), (40, 50)], &mut b);
        assert_eq!(n, LSTAT_FIXED_LEN + 3 * MISSING_RANGE_LEN);
        let (read, ranges) = LatencyStatus::read(&b[..n]).unwrap();
        assert_eq!(read, s);
        assert_eq!(ranges.collect::<Vec<_>>(), vec![(3, 5), (7, 8), (40, 50)]);
        assert!(LatencyStatus::read(&b[..n - 1]).is_err());

        let mut bad = |ranges: &[(u64, u64)]| {
            let n = s.write(ranges.iter().copied(), &mut b);
            LatencyStatus::read(&b[..n]).is_err()
        };
        assert!(bad(&[(5, 5)]), "empty range");
        assert!(bad(&[(3, 6), (5, 8)]), "overlap");
        assert!(bad(&[(7, 8), (3, 5)]), "out of order");
        assert!(bad(&[(40, 51)]), "beyond what arrived");
        assert!(!bad(&[]));

        let many: Vec<(u64, u64)> = (0..40).map(|i| (i * 2, i * 2 + 1)).collect();
        let s = LatencyStatus { known_sent: 100, ..s };
        let n = s.write(many.iter().copied(), &mut b);
        assert_eq!(LatencyStatus::read(&b[..n]).unwrap().1.count(), MAX_MISSING_RANGES);
    }
}
