//! The random numbers of a simulation.
//!
//! The network draws from them (loss, jitter, corruption) and so do the
//! models that feed it, so they sit below both the event loop and the
//! network models rather than in either.

/// The one random stream of a simulation. ChaCha is portable and stable
/// across versions, so a seed means the same run everywhere.
pub type SimRng = rand_chacha::ChaCha8Rng;
