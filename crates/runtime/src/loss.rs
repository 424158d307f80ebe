//! Injected receive loss: a test facility, off unless asked for.
//!
//! `BULKWIRE_TEST_DROP=F` (0 <= F < 1) makes every process of the job
//! discard a fraction F of the datagrams it reads, before the protocol sees
//! them, as if the network or the receiving socket had lost them. The
//! choice is pseudo-random and reproducible: `BULKWIRE_TEST_DROP_SEED=N`
//! (default 1) seeds it, and each rank draws from its own stream of that
//! seed so that ranks lose different datagrams. It exists so that tests of
//! the layers above (comm, bsp) run their programs over a lossy network; it
//! is not a way to shape traffic.

use std::io;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Fraction of received datagrams to discard.
pub const DROP: &str = "BULKWIRE_TEST_DROP";
/// Seed of the choice of datagrams.
pub const DROP_SEED: &str = "BULKWIRE_TEST_DROP_SEED";

#[derive(Clone, Debug)]
pub struct LossInjector {
    /// Drop a datagram when the next random number is below this.
    threshold: u64,
    /// ChaCha, portable: a seed drops the same datagrams on every platform.
    rng: ChaCha8Rng,
    /// Datagrams discarded so far.
    pub dropped: u64,
}

impl LossInjector {
    /// The injector asked for by the environment, if any.
    pub fn from_env(rank: u32) -> io::Result<Option<LossInjector>> {
        let Ok(text) = std::env::var(DROP) else { return Ok(None) };
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{DROP}={text:?}: {why}"));
        let fraction: f64 = text.trim().parse().map_err(|_| invalid("not a number"))?;
        if !(0.0..1.0).contains(&fraction) {
            return Err(invalid("must be at least 0 and below 1"));
        }
        let seed = match std::env::var(DROP_SEED) {
            Ok(s) => s.trim().parse::<u64>().map_err(|_| invalid(&format!("{DROP_SEED}={s:?} is not a number")))?,
            Err(_) => 1,
        };
        Ok((fraction > 0.0).then(|| LossInjector::new(fraction, seed, rank)))
    }

    /// Drops `fraction` of the datagrams read by `rank`, chosen by `seed`.
    pub fn new(fraction: f64, seed: u64, rank: u32) -> LossInjector {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Each rank draws from its own stream of the seed, independent of the
        // others', so that ranks lose different datagrams.
        rng.set_stream(u64::from(rank));
        LossInjector { threshold: (fraction * u64::MAX as f64) as u64, rng, dropped: 0 }
    }

    /// Whether to discard the datagram just read.
    pub fn drops(&mut self) -> bool {
        let drop = self.rng.next_u64() < self.threshold;
        self.dropped += u64::from(drop);
        drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_about_the_fraction_asked_reproducibly() {
        let mut a = LossInjector::new(0.1, 7, 3);
        let mut b = LossInjector::new(0.1, 7, 3);
        let picks: Vec<bool> = (0..100_000).map(|_| a.drops()).collect();
        assert!(picks.iter().all(|&p| p == b.drops()));
        assert!((9_000..11_000).contains(&a.dropped), "{}", a.dropped);
        assert!(!LossInjector::new(0.0, 7, 3).drops());
        // Another rank, same seed: other datagrams.
        let mut c = LossInjector::new(0.1, 7, 4);
        assert!(picks.iter().any(|&p| p != c.drops()));
    }
}
