//! A deterministic discrete-event network in which the real `proto` code runs.
//!
//! - [`Simulator`]: the event loop. It owns the hosts and a [`Network`], moves
//!   datagrams between them and fires their timers, in simulated time.
//! - [`Host`]: anything with the sans-IO shape (`handle_datagram`,
//!   `handle_timeout`, `poll_transmit`, `poll_timeout`); [`workload`] has a host
//!   that runs a `proto::Endpoint` under a message workload and checks every
//!   delivery.
//! - [`Network`]: how datagrams travel. [`LinkNetwork`] gives every ordered
//!   pair of hosts a link with delay, jitter, rate, a bounded drop-tail queue
//!   and fault injection ([`Faults`]); [`atm::AtmNetwork`] is the cell switch
//!   of seed 000 §4 (priorities, a shared buffer, push-out, ERICA, ON-OFF
//!   background), and [`SwitchNetwork`] every host on a port of one
//!   switch (state per host, not per pair: for a thousand hosts), behind
//!   the same trait.
//! - [`scale`]: empty BSP syncs' barrier on p endpoints, to a thousand.
//!
//! Everything random draws from ChaCha streams of one seed, so the same
//! seed gives the same run, bit for bit.

pub mod atm;
mod engine;
mod network;
mod rng;
pub mod scale;
pub mod service_switching;
mod switch;
pub mod traces;
pub mod warp;
pub mod workload;

pub use engine::{Host, Simulator};
pub use network::{Datagram, Delivery, Faults, LinkNetwork, LinkParams, LossModel, NetStats, Network};
pub use rng::SimRng;
pub use switch::{SwitchNetwork, SwitchParams};
