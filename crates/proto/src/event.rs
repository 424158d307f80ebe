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
    /// A whole message whose first `placed` bytes were reassembled into the
    /// buffer given to [`Endpoint::place`](crate::Endpoint::place); the
    /// rest of it is `end`.
    Placed { from: u32, channel: u16, placed: usize, end: Vec<u8> },
    /// A whole message that came in one datagram read where an aim said
    /// ([`Endpoint::aim`](crate::Endpoint::aim)): its first bytes are
    /// `head`, and its other `len` bytes were written at the aim.
    Aimed { from: u32, channel: u16, head: Vec<u8>, len: usize },
    /// An authenticated peer broke the protocol; its channel is closed.
    ProtocolViolation { peer: u32, channel: u16, reason: &'static str },
    /// The path that carries this endpoint's data to `peer` changed (the
    /// peer's latency monitor asked for it, seed 000 §3.2): `Premium` while
    /// the ordinary path's latency is high, `Ordinary` when it is low again.
    ModeChanged { peer: u32, data_path: crate::Path },
}
