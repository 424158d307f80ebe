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
