//! What an endpoint tells its application.
//!
//! Channels produce these events and the endpoint hands them out, so they
//! live apart from both.

/// What the endpoint tells its application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole message, delivered exactly once and in order per channel:
    /// `data[start..]`. `start` is 0 unless the channel takes its messages
    /// in place ([`Endpoint::set_in_place`](crate::Endpoint::set_in_place)): then a large message may come
    /// as the datagram it arrived in, its headers in front.
    Message { from: u32, channel: u16, data: Vec<u8>, start: usize },
    /// An authenticated peer broke the protocol; its channel is closed.
    ProtocolViolation { peer: u32, channel: u16, reason: &'static str },
}
