//! The random numbers of a simulation.
//!
//! The network draws from them (loss, jitter, corruption) and so do the
//! models that feed it, so they sit below both the event loop and the
//! network models rather than in either.
//!
//! Everything random is ChaCha8 keyed by a seed. ChaCha is portable and
//! stable across versions, so a seed means the same run everywhere, and one
//! key gives 2^64 independent streams, each of which can be entered at any
//! position. A part of a run that must be reproducible on its own, whatever
//! the rest of the run draws, takes a [`Stream`] of the run's seed.

use rand::SeedableRng;

/// A random stream of a simulation.
pub type SimRng = rand_chacha::ChaCha8Rng;

/// The streams of a run's seed, one per use, so that no two uses draw the
/// same numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    /// The simulator's own draws: the faults and delays of the network.
    Simulator,
    /// The background traffic of the switch port toward host `h`.
    Port(usize),
    /// The bytes of the messages sent by rank `r`.
    Messages(u32),
}

impl Stream {
    /// ChaCha's stream number: the kind of use in the high half, which one
    /// in the low half.
    fn number(self) -> u64 {
        match self {
            Stream::Simulator => 0,
            Stream::Port(h) => (1 << 32) | h as u64,
            Stream::Messages(r) => (2 << 32) | u64::from(r),
        }
    }
}

/// `stream` of `seed`, from its start.
pub(crate) fn stream(seed: u64, stream: Stream) -> SimRng {
    let mut rng = SimRng::seed_from_u64(seed);
    rng.set_stream(stream.number());
    rng
}
