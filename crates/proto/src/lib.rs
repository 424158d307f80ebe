//! Protocol state machines of bulkwire, free of I/O.
//!
//! An [`Endpoint`] is one process's end of every reliable channel of a job. It
//! never touches a socket or a clock: the caller passes time in and moves
//! datagrams (the sans-IO contract, as in quinn-proto):
//!
//! - inputs: [`Endpoint::handle_datagram`], [`Endpoint::handle_timeout`],
//!   [`Endpoint::send`] and [`Endpoint::end_phase`];
//! - outputs, polled: [`Endpoint::poll_transmit`], [`Endpoint::poll_timeout`],
//!   [`Endpoint::poll_event`].
//!
//! The same inputs in the same order give the same outputs, which is what lets
//! the simulator reproduce any run from its seed.
//!
//! Inside, each [`Endpoint`] holds one hole-filling channel per peer and
//! channel id (`channel`), and, when [`Config::latency`] is set, the latency
//! engines of seed 000 §3 for each peer: the Latency Monitoring Engine
//! (`lme`: timestamped probes on the ordinary path, one-way latency, probe
//! loss after TL), the clock resynchronisation it relies on (`clock`: NTP-style
//! exchanges on the premium path, offset and drift), and the Effective
//! Communication Engine (`ece`: the mode decision with hysteresis between TM
//! and Tm, sent in LSTATs, which moves the peer's data between the ordinary
//! and the premium path). Warp rate control (`warp`, the toolbox) runs on the
//! wire when [`Config::rate_control`] is set or a peer is put under it
//! (`rate`: paced senders, receivers that return warp feedback).

mod channel;
mod clock;
mod config;
mod ece;
mod endpoint;
mod event;
mod lme;
mod path;
mod pool;
mod rate;
mod rtt;
mod stats;
mod time;
mod timers;
mod warp;

pub use channel::{LentBytes, LentRange, SharedPayload, TailFilter, LENT_PREFIX_MAX, TAIL_AHEAD_MAX};
pub use clock::ClockEstimate;
pub use config::{Config, ConfigError, LatencyConfig, Strategy};
pub use ece::Mode;
pub use endpoint::{Endpoint, Footprint, Landed, Landing, Memory, SendError, Transmit, LANDING_MIN_CHUNK};
pub use event::Event;
pub use path::Path;
pub use rate::{RateControl, RateStats};
pub use stats::{ChannelStats, EndpointStats, FeedbackBytes, LatencyStats, PathCounters, PathStats};
pub use time::Time;
pub use warp::{
    critical_epsilon, is_stable, rap_step, stability_product, BufferedSubmission, WarpConfig, WarpEstimator, WarpRate,
    WarpSample, DEFAULT_STABILITY_FRACTION, STABILITY_LIMIT,
};
