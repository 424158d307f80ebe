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

mod channel;
mod clock;
mod config;
mod ece;
mod endpoint;
mod lme;
mod pool;
mod rtt;
mod stats;
mod time;
mod warp;

pub use clock::ClockEstimate;
pub use config::{Config, ConfigError, LatencyConfig, Strategy};
pub use ece::Mode;
pub use endpoint::{Endpoint, Event, Memory, Path, SendError, Transmit};
pub use stats::{ChannelStats, EndpointStats, LatencyStats, PathCounters, PathStats};
pub use time::Time;
pub use warp::{
    critical_epsilon, is_stable, rap_step, stability_product, BufferedSubmission, WarpConfig, WarpEstimator, WarpRate,
    WarpSample, DEFAULT_STABILITY_FRACTION, STABILITY_LIMIT,
};
