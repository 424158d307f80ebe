//! Warp rate control (seed 003 §3, §6.2) in a queueing model: n senders share
//! one FCFS server, the receiver computes warp with `proto`'s
//! [`WarpEstimator`] and returns it, and each sender runs `proto`'s
//! [`WarpRate`].
//!
//! This is its own small event loop rather than the packet-level
//! [`crate::Simulator`]: the question is the dynamics of the control law
//! against a queue, which needs only message stamps and arrival times.
//!
//! The model:
//!
//! - a sender is greedy: its application offers `demand` messages/s, which is
//!   also its starting rate and its ceiling (Warp only throttles). It paces its
//!   messages at its current rate λᵢ, from a random phase;
//! - a message reaches the server `forward_delay` after its stamp; the server
//!   serves in arrival order at mean rate μ, with exponential (a shared network
//!   of mixed message sizes) or fixed service times; the receiver sits right
//!   behind the server;
//! - the receiver computes warp for each message and sends it back, with the
//!   sender's gap to the mean rate of all senders when fairness is on; the
//!   feedback travels `feedback_delay` on an uncongested path (the premium
//!   path of the design).
//!
//! Three experiments use it: [`warp_vs_load`] (does warp track ρ?),
//! [`convergence`] (λ against the stability bound) and [`fairness`] (ten
//! senders with and without the fairness term, the paper's Figure 6). Every
//! random draw comes from one [`SimRng`] seeded per run, so a seed gives the
//! same figures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use bulkwire_proto::{critical_epsilon, stability_product, Time, WarpConfig, WarpEstimator, WarpRate, WarpSample};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::SimRng;

/// How long the server takes for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Service {
    /// Always 1/μ.
    Fixed,
    /// Exponential with mean 1/μ.
    Exponential,
}

/// One sender.
#[derive(Clone, Debug, PartialEq)]
pub struct SenderSpec {
    /// Messages/s its application offers: the ceiling of its rate.
    pub demand: f64,
    /// Its rate before any warp has been seen (at most `demand`).
    pub initial_rate: f64,
}

/// One run of the model.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    /// μ, messages/s.
    pub service_rate: f64,
    pub service: Service,
    /// Sender to server.
    pub forward_delay: Duration,
    /// Receiver to sender.
    pub feedback_delay: Duration,
    pub senders: Vec<SenderSpec>,
    /// Warp control of every sender (`epsilon`, floor, fairness gain; rates
    /// come from the `SenderSpec`s), or `None`: the senders keep their rates.
    pub control: Option<WarpConfig>,
    /// The receiver returns each sender's gap to the mean rate and the sender
    /// closes it (the fairness term).
    pub fairness: bool,
    /// Messages queued at the server at time 0, from no sender.
    pub backlog: usize,
    pub duration: Duration,
    /// The rates are recorded this often.
    pub record_every: Duration,
    /// Statistics (warp, loop delay, throughput) count from this time on.
    pub measure_from: Duration,
}

impl Scenario {
    /// The common shape of the experiments: `rates` in messages/s, μ = 10,000
    /// messages/s with exponential service, 10 ms to the server, 10 ms of
    /// feedback.
    pub fn new(seed: u64, rates: &[f64], duration: Duration) -> Scenario {
        Scenario {
            seed,
            service_rate: SERVICE_RATE,
            service: Service::Exponential,
            forward_delay: Duration::from_millis(10),
            feedback_delay: Duration::from_millis(10),
            senders: rates.iter().map(|&r| SenderSpec { demand: r, initial_rate: r }).collect(),
            control: None,
            fairness: false,
            backlog: 0,
            duration,
            record_every: Duration::from_millis(5),
            measure_from: Duration::ZERO,
        }
    }

    /// Forward plus feedback delay: the loop delay with empty queues.
    pub fn base_loop_delay(&self) -> Duration {
        self.forward_delay + self.feedback_delay
    }
}

/// μ of the experiments, messages/s (e.g. 1 KB messages on an 80 Mbit/s
/// bottleneck).
pub const SERVICE_RATE: f64 = 10_000.0;
/// Senders in the experiments.
pub const SENDERS: usize = 10;

/// The rates at one instant.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// Seconds.
    pub time: f64,
    /// λᵢ of each sender, messages/s.
    pub rates: Vec<f64>,
    /// Messages at the server (queued or in service).
    pub queue: usize,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub records: Vec<Record>,
    /// Mean and standard deviation of the warp samples of messages stamped
    /// after `measure_from`.
    pub warp_mean: f64,
    pub warp_std: f64,
    pub warp_samples: u64,
    /// Mean time from a message's stamp to its sender acting on its warp,
    /// seconds (after `measure_from`).
    pub loop_delay: f64,
    /// Messages of the senders served per second after `measure_from`.
    pub throughput: f64,
    /// Mean time from stamp to service completion of the messages served
    /// after `measure_from`, seconds.
    pub one_way_delay: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Record,
    /// Sender i sends, if `generation` is still its current one.
    Send {
        sender: usize,
        generation: u64,
    },
    /// A message stamped `sent` (ns) reaches the server.
    AtServer {
        sender: usize,
        sent: u64,
    },
    /// Service of a message ends and the receiver gets it.
    Served {
        sender: usize,
        sent: u64,
    },
    /// The warp of feedback `index` reaches its sender.
    Feedback {
        index: usize,
    },
}

struct Loop {
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    order: u64,
}

impl Loop {
    fn at(&mut self, ns: u64, event: Event) {
        self.order += 1;
        self.heap.push(Reverse((ns, self.order, event)));
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round().max(0.0) as u64
}

/// Runs one scenario.
pub fn run(s: &Scenario) -> Outcome {
    let mut rng = SimRng::seed_from_u64(s.seed);
    let n = s.senders.len();
    let control = s.control.clone().unwrap_or_else(|| WarpConfig {
        epsilon: 0.0,
        fairness_gain: 0.0,
        min_rate: 0.0,
        ..WarpConfig::for_path(s.service_rate, s.base_loop_delay(), n)
    });
    let mut rates: Vec<WarpRate> = s
        .senders
        .iter()
        .map(|sp| {
            WarpRate::new(&WarpConfig {
                initial_rate: sp.initial_rate.min(sp.demand),
                max_rate: sp.demand,
                min_rate: control.min_rate.min(sp.demand),
                ..control.clone()
            })
        })
        .collect();
    let mut estimator = WarpEstimator::new(n as u32, &control);
    let mut ev = Loop { heap: BinaryHeap::new(), order: 0 };
    let mut generation = vec![0u64; n];
    let mut last_send: Vec<Option<u64>> = vec![None; n];
    let mut next_send = vec![0u64; n];
    for (i, r) in rates.iter().enumerate() {
        if let Some(gap) = r.interval() {
            let phase = secs_to_ns(rng.random::<f64>() * gap.as_secs_f64());
            next_send[i] = phase;
            ev.at(phase, Event::Send { sender: i, generation: 0 });
        }
    }
    ev.at(0, Event::Record);

    let mean_service = 1.0 / s.service_rate;
    let service_time = |rng: &mut SimRng| match s.service {
        Service::Fixed => mean_service,
        Service::Exponential => -mean_service * (1.0 - rng.random::<f64>()).ln(),
    };
    // The server: when it is next free, and the completion times of what it holds.
    let mut free_at = 0u64;
    let mut held: VecDeque<u64> = VecDeque::new();
    for _ in 0..s.backlog {
        free_at += secs_to_ns(service_time(&mut rng));
        held.push_back(free_at);
    }

    let end = ns(s.duration);
    let from = ns(s.measure_from);
    let mut feedback: Vec<(WarpSample, Option<f64>)> = Vec::new();
    let mut out = Outcome {
        records: Vec::new(),
        warp_mean: 0.0,
        warp_std: 0.0,
        warp_samples: 0,
        loop_delay: 0.0,
        throughput: 0.0,
        one_way_delay: 0.0,
    };
    let (mut warp_sum, mut warp_sq) = (0.0, 0.0);
    let (mut delay_sum, mut delay_count) = (0.0, 0u64);
    let (mut owd_sum, mut served) = (0.0, 0u64);

    while let Some(Reverse((now, _, event))) = ev.heap.pop() {
        if now > end {
            break;
        }
        match event {
            Event::Record => {
                while held.front().is_some_and(|&t| t <= now) {
                    held.pop_front();
                }
                out.records.push(Record {
                    time: now as f64 / 1e9,
                    rates: rates.iter().map(WarpRate::rate).collect(),
                    queue: held.len(),
                });
                ev.at(now + ns(s.record_every).max(1), Event::Record);
            }
            Event::Send { sender, generation: g } => {
                if g != generation[sender] {
                    continue;
                }
                ev.at(now + ns(s.forward_delay), Event::AtServer { sender, sent: now });
                last_send[sender] = Some(now);
                if let Some(gap) = rates[sender].interval() {
                    next_send[sender] = now + ns(gap).max(1);
                    ev.at(next_send[sender], Event::Send { sender, generation: g });
                }
            }
            Event::AtServer { sender, sent } => {
                free_at = free_at.max(now) + secs_to_ns(service_time(&mut rng));
                held.push_back(free_at);
                ev.at(free_at, Event::Served { sender, sent });
            }
            Event::Served { sender, sent } => {
                if now >= from {
                    owd_sum += (now - sent) as f64 / 1e9;
                    served += 1;
                }
                let arrived = Time::from_nanos(now);
                if let Some(sample) = estimator.observe(sender as u32, Time::from_nanos(sent), arrived) {
                    if sent >= from {
                        warp_sum += sample.warp;
                        warp_sq += sample.warp * sample.warp;
                        out.warp_samples += 1;
                    }
                    let gap = if s.fairness { estimator.fair_share_gap(sender as u32, arrived) } else { None };
                    feedback.push((sample, gap));
                    ev.at(now + ns(s.feedback_delay), Event::Feedback { index: feedback.len() - 1 });
                }
            }
            Event::Feedback { index } => {
                let (sample, gap) = feedback[index];
                let i = sample.source as usize;
                rates[i].on_feedback(&sample, gap);
                if sample.sent.as_nanos() >= from {
                    delay_sum += (now - sample.sent.as_nanos()) as f64 / 1e9;
                    delay_count += 1;
                }
                // A faster rate takes effect at once, not after the gap of the old one.
                if let (Some(last), Some(gap)) = (last_send[i], rates[i].interval()) {
                    let due = (last + ns(gap).max(1)).max(now);
                    if due < next_send[i] || next_send[i] < now {
                        generation[i] += 1;
                        next_send[i] = due;
                        ev.at(due, Event::Send { sender: i, generation: generation[i] });
                    }
                }
            }
        }
    }

    if out.warp_samples > 0 {
        let k = out.warp_samples as f64;
        out.warp_mean = warp_sum / k;
        out.warp_std = (warp_sq / k - out.warp_mean * out.warp_mean).max(0.0).sqrt();
    }
    out.loop_delay = delay_sum / delay_count.max(1) as f64;
    out.one_way_delay = owd_sum / served.max(1) as f64;
    out.throughput = served as f64 / (s.duration.saturating_sub(s.measure_from)).as_secs_f64().max(1e-9);
    out
}

/// How long the experiments run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Lengths {
    /// Each point of [`warp_vs_load`].
    pub load: Duration,
    /// Each run of [`convergence`].
    pub convergence: Duration,
    /// Each run of [`fairness`].
    pub fairness: Duration,
}

impl Lengths {
    pub fn full() -> Lengths {
        Lengths {
            load: Duration::from_secs(5),
            convergence: Duration::from_secs(20),
            fairness: Duration::from_secs(60),
        }
    }

    pub fn quick() -> Lengths {
        Lengths {
            load: Duration::from_millis(500),
            convergence: Duration::from_secs(3),
            fairness: Duration::from_secs(4),
        }
    }
}

/// The offered loads of [`warp_vs_load`].
pub const LOADS: [f64; 10] = [0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.6];

/// Mean warp at one offered load.
#[derive(Clone, Debug, Serialize)]
pub struct LoadPoint {
    /// ρ = λ/μ offered by the senders (fixed rates, no control).
    pub rho: f64,
    /// Starting with an empty server: mean and standard deviation of warp.
    pub warp_empty: f64,
    pub warp_empty_std: f64,
    /// Starting behind a backlog that keeps the server busy throughout.
    pub warp_busy: f64,
    pub warp_busy_std: f64,
    /// Served messages/s over μ, from the empty start.
    pub utilisation: f64,
}

/// Does warp track ρ? Ten senders at fixed, equal rates offering ρμ, once from
/// an empty server and once behind a backlog that keeps the server busy for
/// the whole run (1.1 × (1 − ρ)μ × duration messages, plus 5% of μ × duration).
/// Warp is averaged over the messages stamped after the first tenth.
pub fn warp_vs_load(seed: u64, duration: Duration, progress: &mut dyn FnMut(&str)) -> Vec<LoadPoint> {
    LOADS
        .iter()
        .enumerate()
        .map(|(k, &rho)| {
            let rates = vec![rho * SERVICE_RATE / SENDERS as f64; SENDERS];
            let mut s = Scenario::new(seed.wrapping_add(k as u64), &rates, duration);
            s.measure_from = duration / 10;
            let empty = run(&s);
            progress(&format!("warp vs load: ρ = {rho}, empty server"));
            s.backlog = ((1.1 * (1.0 - rho).max(0.0) + 0.05) * SERVICE_RATE * duration.as_secs_f64()).ceil() as usize;
            let busy = run(&s);
            progress(&format!("warp vs load: ρ = {rho}, busy server"));
            LoadPoint {
                rho,
                warp_empty: empty.warp_mean,
                warp_empty_std: empty.warp_std,
                warp_busy: busy.warp_mean,
                warp_busy_std: busy.warp_std,
                utilisation: empty.throughput / SERVICE_RATE,
            }
        })
        .collect()
}

/// ε of [`convergence`], as multiples of the critical ε of the base loop delay.
pub const EPSILON_MULTIPLES: [f64; 7] = [0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 3.0];

/// One run of [`convergence`].
#[derive(Clone, Debug, Serialize)]
pub struct ConvergenceRun {
    pub label: String,
    pub service: Service,
    /// Σεᵢ over the critical ε of the base loop delay (20 ms).
    pub epsilon_multiple: f64,
    /// Σεᵢ, messages/s per second.
    pub epsilon: f64,
    /// Σλᵢ(0)/μ (the senders' demand is 1.5μ, or the start if higher).
    pub start: f64,
    /// τε/μ̄ with τ the base loop delay.
    pub product_base: f64,
    /// τε/μ̄ at the equilibrium Warp would reach: with the standing queue
    /// (Σλᵢ(0) − μ)/ε added to the base loop delay, i.e.
    /// product_base + max(0, Σλᵢ(0)/μ − 1) (see `bulkwire_proto::WarpRate`).
    pub product_predicted: f64,
    /// The loop delay the senders saw (second half), seconds.
    pub loop_delay: f64,
    /// τε/μ̄ with that loop delay.
    pub product_measured: f64,
    /// Σλᵢ/μ over the second half: mean, standard deviation, minimum, maximum.
    pub rate_mean: f64,
    pub rate_std: f64,
    pub rate_min: f64,
    pub rate_max: f64,
    /// Served messages/s over μ, second half.
    pub utilisation: f64,
    /// Mean warp, second half.
    pub warp_mean: f64,
    /// Mean stamp-to-service delay, seconds, second half.
    pub one_way_delay: f64,
    /// (time, Σλᵢ/μ, queue) through the run (not in JSON: it is long).
    #[serde(skip)]
    pub trace: Vec<(f64, f64, usize)>,
}

fn summarise(label: String, multiple: f64, epsilon: f64, s: &Scenario, o: &Outcome) -> ConvergenceRun {
    let mu = s.service_rate;
    let half = s.duration.as_secs_f64() / 2.0;
    let totals: Vec<f64> =
        o.records.iter().filter(|r| r.time >= half).map(|r| r.rates.iter().sum::<f64>() / mu).collect();
    let mean = totals.iter().sum::<f64>() / totals.len().max(1) as f64;
    let var = totals.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / totals.len().max(1) as f64;
    ConvergenceRun {
        label,
        service: s.service,
        epsilon_multiple: multiple,
        epsilon,
        start: s.senders.iter().map(|x| x.initial_rate).sum::<f64>() / mu,
        product_base: stability_product(s.base_loop_delay(), epsilon, mu),
        product_predicted: stability_product(s.base_loop_delay(), epsilon, mu)
            + (s.senders.iter().map(|x| x.initial_rate).sum::<f64>() / mu - 1.0).max(0.0),
        loop_delay: o.loop_delay,
        product_measured: stability_product(Duration::from_secs_f64(o.loop_delay), epsilon, mu),
        rate_mean: mean,
        rate_std: var.sqrt(),
        rate_min: totals.iter().cloned().fold(f64::INFINITY, f64::min),
        rate_max: totals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        utilisation: o.throughput / mu,
        warp_mean: o.warp_mean,
        one_way_delay: o.one_way_delay,
        trace: o.records.iter().map(|r| (r.time, r.rates.iter().sum::<f64>() / mu, r.queue)).collect(),
    }
}

/// The cases of [`convergence`] for one kind of service: (label, multiple of
/// the critical ε, Σλᵢ(0)/μ, Σ demand/μ).
fn convergence_cases() -> Vec<(String, f64, f64, f64)> {
    let mut cases: Vec<(String, f64, f64, f64)> =
        EPSILON_MULTIPLES.iter().map(|&m| (format!("ε ×{m}"), m, 1.5, 1.5)).collect();
    cases.push(("ε ×0.1, from 2.5μ".into(), 0.1, 2.5, 2.5));
    cases.push(("ε ×0.25, from 0.5μ".into(), 0.25, 0.5, 1.5));
    cases
}

/// λ against the stability bound: ten equal greedy senders whose applications
/// offer 1.5μ in all and who start at that rate, each with
/// εᵢ = (multiple × critical ε)/10 for the multiples of [`EPSILON_MULTIPLES`];
/// one run that starts at (and offers) 2.5μ, and one at a quarter of the
/// bound that starts at 0.5μ (below capacity) while offering 1.5μ. Each with
/// fixed and with exponential service times.
pub fn convergence(seed: u64, duration: Duration, progress: &mut dyn FnMut(&str)) -> Vec<ConvergenceRun> {
    let mut runs = Vec::new();
    for (j, service) in [Service::Fixed, Service::Exponential].into_iter().enumerate() {
        for (k, (label, multiple, start, demand)) in convergence_cases().into_iter().enumerate() {
            let share = SERVICE_RATE / SENDERS as f64;
            let mut s =
                Scenario::new(seed.wrapping_add(100 + 20 * j as u64 + k as u64), &[demand * share; SENDERS], duration);
            s.service = service;
            for sp in &mut s.senders {
                sp.initial_rate = start * share;
            }
            s.measure_from = duration / 2;
            let epsilon = multiple * critical_epsilon(s.base_loop_delay(), s.service_rate);
            s.control = Some(WarpConfig {
                epsilon: epsilon / SENDERS as f64,
                fairness_gain: 0.0,
                ..WarpConfig::for_path(s.service_rate, s.base_loop_delay(), SENDERS)
            });
            let o = run(&s);
            progress(&format!("convergence: {label}, {service:?} service"));
            runs.push(summarise(label, multiple, epsilon, &s, &o));
        }
    }
    runs
}

/// One run of [`fairness`].
#[derive(Clone, Debug, Serialize)]
pub struct FairnessRun {
    pub fairness: bool,
    /// Demands (starting rates) of the senders over μ.
    pub demands: Vec<f64>,
    /// Over the second half, of the per-sender mean rates: Jain's index
    /// (Σλ)²/(nΣλ²), 1 when equal; coefficient of variation; smallest and
    /// largest over μ.
    pub jain: f64,
    pub cv: f64,
    pub min_rate: f64,
    pub max_rate: f64,
    /// Σλᵢ/μ and served/μ over the second half.
    pub total: f64,
    pub utilisation: f64,
    /// Mean stamp-to-service delay, seconds, second half.
    pub one_way_delay: f64,
    /// (time, λᵢ/μ of every sender) through the run (not in JSON: it is long).
    #[serde(skip)]
    pub trace: Vec<(f64, Vec<f64>)>,
}

/// Ten greedy senders whose applications offer between 0.1μ and 0.2μ each
/// (drawn from the seed), with the default ε (a quarter of the bound for the
/// base loop delay), without and with the fairness term (seed 003 Figure 6).
pub fn fairness(seed: u64, duration: Duration, progress: &mut dyn FnMut(&str)) -> Vec<FairnessRun> {
    let mut rng = SimRng::seed_from_u64(seed ^ 0x6a17);
    let demands: Vec<f64> = (0..SENDERS).map(|_| SERVICE_RATE * (0.1 + 0.1 * rng.random::<f64>())).collect();
    [false, true]
        .into_iter()
        .map(|fair| {
            let mut s = Scenario::new(seed.wrapping_add(200), &demands, duration);
            s.measure_from = duration / 2;
            s.fairness = fair;
            let mut cfg = WarpConfig::for_path(s.service_rate, s.base_loop_delay(), SENDERS);
            if !fair {
                cfg.fairness_gain = 0.0;
            }
            s.control = Some(cfg);
            let o = run(&s);
            progress(&format!("fairness: {}", if fair { "with" } else { "without" }));
            let mu = s.service_rate;
            let half = duration.as_secs_f64() / 2.0;
            let tail: Vec<&Record> = o.records.iter().filter(|r| r.time >= half).collect();
            let means: Vec<f64> = (0..SENDERS)
                .map(|i| tail.iter().map(|r| r.rates[i]).sum::<f64>() / tail.len().max(1) as f64 / mu)
                .collect();
            let sum: f64 = means.iter().sum();
            let sq: f64 = means.iter().map(|x| x * x).sum();
            let mean = sum / SENDERS as f64;
            let var = sq / SENDERS as f64 - mean * mean;
            FairnessRun {
                fairness: fair,
                demands: demands.iter().map(|d| d / mu).collect(),
                jain: sum * sum / (SENDERS as f64 * sq),
                cv: var.max(0.0).sqrt() / mean,
                min_rate: means.iter().cloned().fold(f64::INFINITY, f64::min),
                max_rate: means.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                total: sum,
                utilisation: o.throughput / mu,
                one_way_delay: o.one_way_delay,
                trace: o.records.iter().map(|r| (r.time, r.rates.iter().map(|x| x / mu).collect())).collect(),
            }
        })
        .collect()
}

/// Everything `bulkwire sim warp` measures.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub lengths: Lengths,
    pub service_rate: f64,
    pub senders: usize,
    pub base_loop_delay: f64,
    pub load: Vec<LoadPoint>,
    pub convergence: Vec<ConvergenceRun>,
    pub fairness: Vec<FairnessRun>,
}

impl Report {
    /// How many runs [`Report::measure`] makes (for a progress bar).
    pub fn runs() -> usize {
        2 * LOADS.len() + 2 * convergence_cases().len() + 2
    }

    pub fn measure(seed: u64, lengths: Lengths, progress: &mut dyn FnMut(&str)) -> Report {
        let base = Scenario::new(seed, &[], lengths.load).base_loop_delay();
        Report {
            seed,
            lengths,
            service_rate: SERVICE_RATE,
            senders: SENDERS,
            base_loop_delay: base.as_secs_f64(),
            load: warp_vs_load(seed, lengths.load, progress),
            convergence: convergence(seed, lengths.convergence, progress),
            fairness: fairness(seed, lengths.fairness, progress),
        }
    }
}
