//! Traffic of one task of a parallel program, in place of the GENESIS traces
//! of seed 000 §4.1, which are not available.
//!
//! All the paper says of them: PDE1 (red-black SOR on a 3-D grid) sends
//! relatively long bursts of around 8 KB, PDE2 (2-D multigrid) much shorter
//! bursts of 50–100 bytes, with computation between bursts. The generators
//! follow that and nothing more:
//!
//! - a burst is one message to the neighbouring task (a boundary plane for
//!   PDE1, a coarse-grid value set for PDE2), its size uniform in
//!   [`TraceParams::burst_bytes`];
//! - between the starts of two bursts the task computes for a time uniform
//!   in `[0.5, 1.5] ×` [`TraceParams::mean_gap`]: the iterations of a solver
//!   are alike, so the gaps vary, but not wildly;
//! - the trace is open-loop, as a recorded trace replayed is: a burst is sent
//!   at its time whatever happened to the previous one.
//!
//! The mean gaps set the task's rate. The paper's Tables 3 and 4 show the
//! task sending about 275 Kb/s (PDE1) and 289 Kb/s (PDE2) of cells with
//! premium only. Its one-cell frames carry roughly 38 bytes of data per
//! 53-byte cell (Figure 3's fields take the rest), so the applications send
//! about 200 Kb/s of data: 8 KB every 0.33 s for PDE1 and 75 bytes every
//! 2.9 ms for PDE2. Those are the defaults.

use std::ops::RangeInclusive;
use std::time::Duration;

use bulkwire_proto::Time;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::SimRng;

/// Which parallel code a trace imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum TraceKind {
    /// Long bursts of about 8 KB.
    Pde1,
    /// Short bursts of 50–100 bytes.
    Pde2,
}

impl TraceKind {
    pub const ALL: [TraceKind; 2] = [TraceKind::Pde1, TraceKind::Pde2];

    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Pde1 => "PDE1",
            TraceKind::Pde2 => "PDE2",
        }
    }

    pub fn params(self) -> TraceParams {
        match self {
            TraceKind::Pde1 => TraceParams { burst_bytes: 7 * 1024..=9 * 1024, mean_gap: Duration::from_millis(330) },
            TraceKind::Pde2 => TraceParams { burst_bytes: 50..=100, mean_gap: Duration::from_micros(2900) },
        }
    }
}

/// The shape of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceParams {
    /// Size of a burst (one message), bytes, drawn uniformly.
    pub burst_bytes: RangeInclusive<usize>,
    /// Mean time from the start of one burst to the start of the next.
    pub mean_gap: Duration,
}

impl TraceParams {
    /// Mean bytes per second the task sends.
    pub fn mean_rate(&self) -> f64 {
        (*self.burst_bytes.start() + *self.burst_bytes.end()) as f64 / 2.0 / self.mean_gap.as_secs_f64()
    }
}

/// One message of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceMessage {
    /// When the task hands it to the communication layer.
    pub at: Time,
    pub len: usize,
}

/// The messages a task sends from `start` until `end`, from `seed`.
pub fn generate(params: &TraceParams, start: Time, end: Time, seed: u64) -> Vec<TraceMessage> {
    let mut rng = SimRng::seed_from_u64(seed ^ 0x7ace_0000);
    let mut out = Vec::new();
    // A random phase, so that repetitions do not all start a burst at `start`.
    let mut at = start + params.mean_gap.mul_f64(rng.random::<f64>());
    while at < end {
        out.push(TraceMessage { at, len: rng.random_range(params.burst_bytes.clone()) });
        at = at + params.mean_gap.mul_f64(rng.random_range(0.5..1.5));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_have_the_papers_sizes_and_the_configured_rate() {
        for kind in TraceKind::ALL {
            let p = kind.params();
            let seconds = match kind {
                TraceKind::Pde1 => 2000,
                TraceKind::Pde2 => 20,
            };
            let trace = generate(&p, Time::ZERO, Time::from_nanos(seconds * 1_000_000_000), 9);
            assert!(trace.iter().all(|m| p.burst_bytes.contains(&m.len)), "{kind:?}");
            let mean_len = trace.iter().map(|m| m.len as f64).sum::<f64>() / trace.len() as f64;
            let rate = trace.iter().map(|m| m.len as f64).sum::<f64>() / seconds as f64;
            match kind {
                TraceKind::Pde1 => assert!((mean_len - 8192.0).abs() < 200.0, "PDE1 bursts of about 8 KB: {mean_len}"),
                TraceKind::Pde2 => assert!((mean_len - 75.0).abs() < 3.0, "PDE2 bursts of 50-100 B: {mean_len}"),
            }
            assert!((rate / p.mean_rate() - 1.0).abs() < 0.05, "{kind:?}: {rate} B/s against {}", p.mean_rate());
            assert!(trace.windows(2).all(|w| w[1].at > w[0].at), "computation gaps between bursts");
        }
    }

    #[test]
    fn a_seed_gives_one_trace() {
        let p = TraceKind::Pde2.params();
        let end = Time::from_nanos(1_000_000_000);
        assert_eq!(generate(&p, Time::ZERO, end, 4), generate(&p, Time::ZERO, end, 4));
        assert_ne!(generate(&p, Time::ZERO, end, 4), generate(&p, Time::ZERO, end, 5));
    }
}
