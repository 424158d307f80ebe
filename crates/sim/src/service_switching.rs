//! Latency-adaptive service switching (seed 000 §4): one task of a parallel
//! program sends a trace ([`crate::traces`]) to another task across the cell
//! switch of [`crate::atm`], whose output port toward the receiver also
//! carries background traffic of load ρ. Three ways of using the network:
//!
//! - [`Mode::OrdinaryOnly`]: data on the ordinary (UBR) class, as the
//!   endpoint does by default;
//! - [`Mode::PremiumOnly`]: all data on the premium (ABR) class;
//! - [`Mode::Switching`]: the endpoint's LME/ECE moves data between the two
//!   as the latency it monitors on the ordinary path rises and falls
//!   (Table 2's thresholds).
//!
//! In every mode the endpoint's acknowledgements and other control packets
//! travel in the feedback (VBR) class. Each run measures what the paper's
//! Figures 7–9 and Tables 3–4 show: the mean task-to-task latency of a
//! message, the cell loss ratio of the task's data cells, the share of its
//! data cells sent as premium, and the bandwidth of each class. Runs are
//! repeated with different seeds; the three modes of one repetition see the
//! same background and the same trace.

use std::sync::Arc;
use std::time::Duration;

use bulkwire_proto::{Config, LatencyConfig, Time};
use bulkwire_wire::JobKey;
use rand::{RngCore, SeedableRng};
use serde::Serialize;

use crate::atm::{AtmConfig, AtmNetwork, CellClass, DataClass, CELL_BYTES};
use crate::engine::Simulator;
use crate::rng::SimRng;
use crate::traces::{generate, TraceKind};
use crate::workload::{Plan, PlannedMessage, WorkloadHost};

/// How the task uses the two classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Mode {
    OrdinaryOnly,
    PremiumOnly,
    Switching,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::OrdinaryOnly, Mode::PremiumOnly, Mode::Switching];

    pub fn name(self) -> &'static str {
        match self {
            Mode::OrdinaryOnly => "ordinary only",
            Mode::PremiumOnly => "premium only",
            Mode::Switching => "LME/ECE",
        }
    }

    fn data_class(self) -> DataClass {
        match self {
            Mode::PremiumOnly => DataClass::AllPremium,
            Mode::OrdinaryOnly | Mode::Switching => DataClass::ByPath,
        }
    }
}

/// Largest datagram the task's endpoint sends: five cells. The 60 bytes of
/// header and MAC leave 180 bytes, 170 of them a record's, so every PDE2
/// burst fits one datagram and an 8 KB PDE1 burst takes 49.
pub const TASK_MAX_DATAGRAM: usize = 5 * crate::atm::CELL_PAYLOAD;

/// The loads of the paper's Tables 3 (PDE1) and 4 (PDE2).
pub fn table_loads(trace: TraceKind) -> [f64; 2] {
    match trace {
        TraceKind::Pde1 => [0.7, 1.0],
        TraceKind::Pde2 => [0.65, 1.0],
    }
}

/// How much to simulate.
#[derive(Clone, Debug, Serialize)]
pub struct Lengths {
    /// ρ of the sweep (Figures 7–9); the table loads are added per trace.
    pub loads: Vec<f64>,
    pub repetitions: usize,
    /// Span of the trace: the task's execution period.
    pub duration: Duration,
    /// After the trace ends, time left for the last messages to arrive.
    pub drain: Duration,
}

impl Lengths {
    pub fn full() -> Lengths {
        Lengths {
            loads: (3..=11).map(|k| k as f64 / 10.0).collect(),
            repetitions: 10,
            duration: Duration::from_secs(30),
            drain: Duration::from_secs(5),
        }
    }

    pub fn quick() -> Lengths {
        Lengths {
            loads: vec![0.5, 1.0],
            repetitions: 2,
            duration: Duration::from_secs(2),
            drain: Duration::from_secs(2),
        }
    }

    /// The loads run for `trace`: the sweep and the table loads, in order.
    pub fn loads_for(&self, trace: TraceKind) -> Vec<f64> {
        let mut loads = self.loads.clone();
        for l in table_loads(trace) {
            if !loads.iter().any(|&x| (x - l).abs() < 1e-9) {
                loads.push(l);
            }
        }
        loads.sort_by(f64::total_cmp);
        loads
    }

    /// Runs [`Report::measure`] makes.
    pub fn runs(&self) -> usize {
        TraceKind::ALL.iter().map(|&t| self.loads_for(t).len()).sum::<usize>() * Mode::ALL.len() * self.repetitions
    }
}

/// One run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub seed: u64,
    pub trace: TraceKind,
    pub mode: Mode,
    pub load: f64,
    pub duration: Duration,
    pub drain: Duration,
    /// [`LatencyConfig::sample_lifetime`] of LME/ECE.
    pub sample_lifetime: Option<Duration>,
}

/// bulkwire's sample lifetime with Table 2's values: a fifth of the
/// monitoring interval, as [`LatencyConfig::from_base_latency`] sets it.
pub fn default_sample_lifetime() -> Option<Duration> {
    Some(LatencyConfig::table2().monitor_interval / 5)
}

/// Kb/s by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ClassRates {
    /// Ordinary (UBR): data and latency probes.
    pub ordinary: f64,
    /// Premium (ABR) data.
    pub premium: f64,
    /// Feedback (VBR): acknowledgements, prods, status and LSTAT.
    pub feedback: f64,
    /// RM cells of the task's premium connection.
    pub rm: f64,
}

/// What one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutcome {
    pub messages: usize,
    pub delivered: usize,
    /// Mean time from a message handed to the endpoint to its delivery, seconds.
    pub latency_mean: f64,
    pub latency_max: f64,
    /// Data cells (first sends and retransmissions) and how many were dropped.
    pub data_cells: u64,
    pub data_cells_lost: u64,
    pub premium_data_cells: u64,
    pub rates: ClassRates,
    /// Times the sender changed mode (LME/ECE).
    pub mode_switches: u64,
    pub retransmissions: u64,
    /// Of the background: the ordinary cells' loss ratio.
    pub background_ordinary_loss: f64,
    /// The port's utilisation.
    pub utilisation: f64,
}

impl RunOutcome {
    pub fn cell_loss(&self) -> f64 {
        self.data_cells_lost as f64 / self.data_cells.max(1) as f64
    }

    pub fn premium_share(&self) -> f64 {
        self.premium_data_cells as f64 / self.data_cells.max(1) as f64
    }
}

/// The endpoint configuration of task `rank` in `mode`; `sample_lifetime`
/// is LME/ECE's ([`LatencyConfig::sample_lifetime`]; `None` is the paper's
/// engine).
pub fn task_config(seed: u64, rank: u32, mode: Mode, sample_lifetime: Option<Duration>) -> Config {
    let key = JobKey::new(std::array::from_fn(|i| (seed as u8).wrapping_mul(7).wrapping_add(i as u8)));
    let mut c = Config::new(0x5e41_0000 ^ seed, key, rank, 2);
    c.max_datagram = TASK_MAX_DATAGRAM;
    c.initial_rtt = Duration::from_micros(100);
    if mode == Mode::Switching {
        // The LME/ECE with the paper's Table 2, clocks taken as perfect.
        c.latency = Some(LatencyConfig { sample_lifetime, ..LatencyConfig::table2() });
    }
    c
}

/// Runs one task pair over the switch.
pub fn run(spec: &RunSpec) -> RunOutcome {
    let end = Time::ZERO + spec.duration;
    // Task 0 replays the trace to task 1 as a program's sends through
    // `comm` go: no burst ends a phase (none asks for an answer at once),
    // and the sender probes by its pace: the end of a burst after one
    // timeout, an isolated message only after 2^4, since the next one will
    // show its loss as a hole.
    let sends = generate(&spec.trace.params(), Time::ZERO, end, spec.seed)
        .into_iter()
        .map(|m| PlannedMessage { to: 1, channel: 0, len: m.len, at: m.at, end_phase: false })
        .collect();
    let plan = Arc::new(Plan { ranks: 2, channels: 1, sends: vec![sends, Vec::new()] });
    let mut hosts: Vec<WorkloadHost> = (0..2)
        .map(|rank| {
            WorkloadHost::new(task_config(spec.seed, rank, spec.mode, spec.sample_lifetime), plan.clone(), spec.seed)
        })
        .collect::<Result<_, _>>()
        .expect("valid task config");
    hosts[0].endpoint.set_probe_by_pace(1, 0, true);
    let network = AtmNetwork::new(AtmConfig::paper(spec.seed, spec.load, spec.mode.data_class()));
    let mut sim = Simulator::new(spec.seed, hosts, network);
    let messages = plan.sends[0].len();
    sim.run_until(end + spec.drain, |hosts| hosts[1].finished() || hosts.iter().any(|h| !h.errors.is_empty()));
    let (hosts, network) = (sim.hosts(), sim.network());
    let errors: Vec<&String> = hosts.iter().flat_map(|h| &h.errors).collect();
    assert!(errors.is_empty(), "the task's messages must arrive exactly once and intact: {errors:?}");
    let latencies: Vec<f64> =
        hosts[1].arrivals.iter().map(|&(_, index, at)| at.since(plan.sends[0][index].at).as_secs_f64()).collect();
    let stats = network.task_stats();
    let seconds = spec.duration.as_secs_f64();
    let kbps = |cells: u64| cells as f64 * (CELL_BYTES * 8) as f64 / seconds / 1e3;
    let class_cells = |c: CellClass| stats.class(c).data_cells + stats.class(c).control_cells;
    let data_cells: u64 = CellClass::ALL.iter().map(|&c| stats.class(c).data_cells).sum();
    let port = network.port(1).stats();
    let ordinary_bg = port.background[2];
    let sender = hosts[0].endpoint.stats();
    RunOutcome {
        messages,
        delivered: latencies.len(),
        latency_mean: latencies.iter().sum::<f64>() / latencies.len().max(1) as f64,
        latency_max: latencies.iter().copied().fold(0.0, f64::max),
        data_cells,
        data_cells_lost: CellClass::ALL.iter().map(|&c| stats.class(c).data_cells_lost).sum(),
        premium_data_cells: stats.class(CellClass::Premium).data_cells,
        rates: ClassRates {
            ordinary: kbps(class_cells(CellClass::Ordinary)),
            premium: kbps(class_cells(CellClass::Premium)),
            feedback: kbps(class_cells(CellClass::Feedback)),
            rm: kbps(stats.rm_cells),
        },
        mode_switches: sender.latency.switches_to_high + sender.latency.switches_to_low,
        retransmissions: sender.channels.retransmissions,
        background_ordinary_loss: ordinary_bg.dropped as f64 / ordinary_bg.arrived.max(1) as f64,
        utilisation: port.busy_slots as f64 / port.slots.max(1) as f64,
    }
}

/// A mean over repetitions and the half-width of its 90% confidence interval
/// (Student's t).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub ci90: f64,
}

impl Estimate {
    pub fn of(samples: &[f64]) -> Estimate {
        let n = samples.len();
        if n == 0 {
            return Estimate::default();
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Estimate { mean, ci90: 0.0 };
        }
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Estimate { mean, ci90: t_90(n - 1) * (var / n as f64).sqrt() }
    }
}

/// The 95th percentile of Student's t with `dof` degrees of freedom (two-sided 90%).
fn t_90(dof: usize) -> f64 {
    const TABLE: [f64; 30] = [
        6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753, 1.746,
        1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
    ];
    TABLE.get(dof.max(1) - 1).copied().unwrap_or(1.645)
}

/// One (trace, mode, ρ) over its repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub trace: TraceKind,
    pub mode: Mode,
    pub load: f64,
    /// Milliseconds.
    pub latency_ms: Estimate,
    pub cell_loss: Estimate,
    pub premium_share: Estimate,
    /// Kb/s, means over repetitions.
    pub rates: ClassRates,
    pub mode_switches: f64,
    pub retransmissions: f64,
    /// Messages not delivered by the end of the run, over all repetitions.
    pub undelivered: usize,
    pub messages: usize,
    pub background_ordinary_loss: f64,
    pub utilisation: f64,
}

/// Everything the experiment measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub lengths: Lengths,
    pub sample_lifetime: Option<Duration>,
    pub network: AtmConfig,
    pub points: Vec<Point>,
}

impl Report {
    /// Runs every (trace, ρ, mode, repetition), LME/ECE with
    /// `sample_lifetime`; `progress` is called after each run with a
    /// description of it.
    pub fn measure(
        seed: u64,
        lengths: &Lengths,
        sample_lifetime: Option<Duration>,
        progress: &mut dyn FnMut(&str),
    ) -> Report {
        let mut points = Vec::new();
        for (t, &trace) in TraceKind::ALL.iter().enumerate() {
            for load in lengths.loads_for(trace) {
                let mut outcomes: Vec<Vec<RunOutcome>> = vec![Vec::new(); Mode::ALL.len()];
                for rep in 0..lengths.repetitions {
                    // The modes of a repetition share the background and the trace.
                    let run_seed = seed_of_run(seed, t, load, rep);
                    for (m, &mode) in Mode::ALL.iter().enumerate() {
                        let spec = RunSpec {
                            seed: run_seed,
                            trace,
                            mode,
                            load,
                            duration: lengths.duration,
                            drain: lengths.drain,
                            sample_lifetime,
                        };
                        outcomes[m].push(run(&spec));
                        progress(&format!("{} ρ={load:.2} {} #{}", trace.name(), mode.name(), rep + 1));
                    }
                }
                for (m, &mode) in Mode::ALL.iter().enumerate() {
                    points.push(Point::from_runs(trace, mode, load, &outcomes[m]));
                }
            }
        }
        Report {
            seed,
            lengths: lengths.clone(),
            sample_lifetime,
            network: AtmConfig::paper(seed, 0.0, DataClass::ByPath),
            points,
        }
    }

    pub fn point(&self, trace: TraceKind, mode: Mode, load: f64) -> Option<&Point> {
        self.points.iter().find(|p| p.trace == trace && p.mode == mode && (p.load - load).abs() < 1e-9)
    }
}

impl Point {
    fn from_runs(trace: TraceKind, mode: Mode, load: f64, runs: &[RunOutcome]) -> Point {
        let each = |f: &dyn Fn(&RunOutcome) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let mean = |f: &dyn Fn(&RunOutcome) -> f64| Estimate::of(&each(f)).mean;
        Point {
            trace,
            mode,
            load,
            latency_ms: Estimate::of(&each(&|r| r.latency_mean * 1e3)),
            cell_loss: Estimate::of(&each(&RunOutcome::cell_loss)),
            premium_share: Estimate::of(&each(&RunOutcome::premium_share)),
            rates: ClassRates {
                ordinary: mean(&|r| r.rates.ordinary),
                premium: mean(&|r| r.rates.premium),
                feedback: mean(&|r| r.rates.feedback),
                rm: mean(&|r| r.rates.rm),
            },
            mode_switches: mean(&|r| r.mode_switches as f64),
            retransmissions: mean(&|r| r.retransmissions as f64),
            undelivered: runs.iter().map(|r| r.messages - r.delivered).sum(),
            messages: runs.iter().map(|r| r.messages).sum(),
            background_ordinary_loss: mean(&|r| r.background_ordinary_loss),
            utilisation: mean(&|r| r.utilisation),
        }
    }
}

/// A run's seed from the experiment's seed and the run's coordinates: number
/// `rep` of the experiment's stream for (trace, load), entered directly, so
/// that a run's seed does not depend on which other runs the experiment makes.
fn seed_of_run(seed: u64, trace: usize, load: f64, rep: usize) -> u64 {
    let mut rng = SimRng::seed_from_u64(seed);
    rng.set_stream(((trace as u64) << 32) | (load * 1000.0).round() as u64);
    // A u64 is two of ChaCha's 32-bit words.
    rng.set_word_pos(2 * rep as u128);
    rng.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_delivers_the_trace_and_repeats_itself() {
        let spec = RunSpec {
            seed: 4,
            trace: TraceKind::Pde2,
            mode: Mode::OrdinaryOnly,
            load: 0.9,
            duration: Duration::from_millis(500),
            drain: Duration::from_secs(1),
            sample_lifetime: default_sample_lifetime(),
        };
        let a = run(&spec);
        assert!(a.messages > 100);
        assert_eq!(a.delivered, a.messages);
        assert_eq!(a.premium_data_cells, 0);
        let b = run(&spec);
        assert_eq!(
            (a.latency_mean, a.data_cells, a.data_cells_lost),
            (b.latency_mean, b.data_cells, b.data_cells_lost)
        );
        let premium = run(&RunSpec { mode: Mode::PremiumOnly, ..spec });
        assert_eq!(premium.delivered, premium.messages);
        assert_eq!(premium.premium_share(), 1.0);
        assert_eq!(premium.data_cells_lost, 0, "premium cells push ordinary ones out");
    }

    #[test]
    fn confidence_intervals_use_students_t() {
        let e = Estimate::of(&[1.0, 2.0, 3.0]);
        assert_eq!(e.mean, 2.0);
        assert!((e.ci90 - 2.920 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(Estimate::of(&[5.0]).ci90, 0.0);
    }
}
