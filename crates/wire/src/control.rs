//! Payloads of control packets.

use crate::packet::DecodeError;

/// Bytes of an [`AckPayload`].
pub const ACK_PAYLOAD_LEN: usize = 12;

/// Payload of an explicit acknowledgement: it echoes the timestamp of the
/// packet that asked for it and says how long the receiver held it, so the
/// sender measures the round trip without synchronised clocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckPayload {
    pub echo_timestamp: u64,
    /// Nanoseconds between the arrival of the echoed packet and this ack,
    /// saturated at `u32::MAX`.
    pub delay: u32,
}

impl AckPayload {
    pub fn write(&self, out: &mut [u8]) -> usize {
        out[..8].copy_from_slice(&self.echo_timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.delay.to_be_bytes());
        ACK_PAYLOAD_LEN
    }

    pub fn read(payload: &[u8]) -> Result<AckPayload, DecodeError> {
        if payload.len() != ACK_PAYLOAD_LEN {
            return Err(DecodeError::MalformedPayload("ack payload has the wrong length"));
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&payload[..8]);
        let mut delay = [0u8; 4];
        delay.copy_from_slice(&payload[8..12]);
        Ok(AckPayload { echo_timestamp: u64::from_be_bytes(ts), delay: u32::from_be_bytes(delay) })
    }
}

/// Bytes of a [`WarpFeedback`].
pub const WARP_FEEDBACK_LEN: usize = 20;

/// Warp feedback (seed 003 §3): what a receiver measured of a sender's
/// datagrams since its last feedback, for the sender's rate adjustment.
///
/// ```text
/// warp (f64) | span, ns (u64) | sources (u32)
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarpFeedback {
    /// Spacing at the receiver over spacing at the sender of the datagrams
    /// the feedback covers: above 1 while a queue on the way grows.
    pub warp: f64,
    /// Nanoseconds of the sender's clock the feedback covers.
    pub span: u64,
    /// How many sources the receiver hears from now, this one included.
    pub sources: u32,
}

impl WarpFeedback {
    pub fn write(&self, out: &mut [u8]) -> usize {
        out[..8].copy_from_slice(&self.warp.to_bits().to_be_bytes());
        out[8..16].copy_from_slice(&self.span.to_be_bytes());
        out[16..20].copy_from_slice(&self.sources.to_be_bytes());
        WARP_FEEDBACK_LEN
    }

    /// Reads and checks a feedback payload: a warp that is not a finite
    /// positive number, no sources or an empty span are malformed.
    pub fn read(payload: &[u8]) -> Result<WarpFeedback, DecodeError> {
        if payload.len() != WARP_FEEDBACK_LEN {
            return Err(DecodeError::MalformedPayload("warp feedback has the wrong length"));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[at..at + 8]);
            u64::from_be_bytes(b)
        };
        let warp = f64::from_bits(u64_at(0));
        let span = u64_at(8);
        let mut b = [0u8; 4];
        b.copy_from_slice(&payload[16..20]);
        let sources = u32::from_be_bytes(b);
        if !(warp.is_finite() && warp > 0.0) {
            return Err(DecodeError::MalformedPayload("warp feedback: warp is not a positive number"));
        }
        if span == 0 || sources == 0 {
            return Err(DecodeError::MalformedPayload("warp feedback: empty span or no sources"));
        }
        Ok(WarpFeedback { warp, span, sources })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warp_feedback_round_trips_and_rejects_nonsense() {
        let f = WarpFeedback { warp: 1.25, span: 1_000_000, sources: 4 };
        let mut buf = [0u8; WARP_FEEDBACK_LEN];
        assert_eq!(f.write(&mut buf), WARP_FEEDBACK_LEN);
        assert_eq!(WarpFeedback::read(&buf), Ok(f));
        assert!(WarpFeedback::read(&buf[..19]).is_err());
        for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0] {
            WarpFeedback { warp: bad, ..f }.write(&mut buf);
            assert!(WarpFeedback::read(&buf).is_err(), "warp {bad}");
        }
        WarpFeedback { span: 0, ..f }.write(&mut buf);
        assert!(WarpFeedback::read(&buf).is_err());
        WarpFeedback { sources: 0, ..f }.write(&mut buf);
        assert!(WarpFeedback::read(&buf).is_err());
    }
}
