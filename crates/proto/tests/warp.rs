//! Warp rate control against a deterministic FCFS queue whose behaviour is
//! known exactly: warp must equal the expected ratio, the rate must settle for
//! ε inside the stability bound and keep oscillating outside it, buffered
//! submission must flush by its rule, and the fairness term must bring the
//! senders' rates together.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use bulkwire_proto::{
    critical_epsilon, is_stable, stability_product, BufferedSubmission, Time, WarpConfig, WarpEstimator, WarpRate,
    WarpSample, STABILITY_LIMIT,
};

fn secs(t: Time) -> f64 {
    t.as_secs_f64()
}

fn at_secs(s: f64) -> Time {
    Time::from_nanos((s * 1e9).round() as u64)
}

/// Messages arriving at a FCFS server of fixed service time, in order of
/// arrival: their departure times (Lindley's recursion).
fn fcfs(arrivals: &[f64], service: f64) -> Vec<f64> {
    let mut free = f64::NEG_INFINITY;
    arrivals
        .iter()
        .map(|&a| {
            free = free.max(a) + service;
            free
        })
        .collect()
}

#[test]
fn one_sender_faster_than_the_server_sees_warp_equal_to_rho() {
    // λ = 1250/s into μ = 1000/s: the queue grows and every message leaves
    // 1/μ after the previous one, so warp = (1/μ)/(1/λ) = ρ = 1.25.
    let sends: Vec<f64> = (0..200).map(|k| k as f64 / 1250.0).collect();
    let departures = fcfs(&sends, 1.0 / 1000.0);
    let mut est = WarpEstimator::new(1, &WarpConfig::default());
    let warps: Vec<f64> = sends
        .iter()
        .zip(&departures)
        .filter_map(|(&s, &d)| est.observe(0, at_secs(s), at_secs(d)))
        .map(|w| w.warp)
        .collect();
    assert_eq!(warps.len(), 199);
    for w in warps {
        assert!((w - 1.25).abs() < 1e-6, "warp {w}");
    }
}

#[test]
fn one_sender_slower_than_the_server_sees_warp_one() {
    // With the server idle between messages, the delay does not change.
    let sends: Vec<f64> = (0..100).map(|k| k as f64 / 800.0).collect();
    let departures = fcfs(&sends, 1.0 / 1000.0);
    let mut est = WarpEstimator::new(1, &WarpConfig::default());
    for (&s, &d) in sends.iter().zip(&departures) {
        if let Some(w) = est.observe(0, at_secs(s), at_secs(d)) {
            assert!((w.warp - 1.0).abs() < 1e-6, "warp {}", w.warp);
        }
    }
}

/// Four senders at 200/s each, staggered, into μ = 1000/s (ρ = 0.8), behind
/// a backlog of `backlog` messages queued at time 0.
fn four_senders_behind_a_backlog(backlog: usize) -> Vec<(f64, f64)> {
    let (n, rate, mu) = (4usize, 200.0, 1000.0);
    let mut arrivals: Vec<(f64, Option<usize>)> = (0..backlog).map(|_| (0.0, None)).collect();
    for k in 0..400 {
        for i in 0..n {
            arrivals.push(((k as f64 + (i as f64 + 0.5) / n as f64) / rate, Some(i)));
        }
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let times: Vec<f64> = arrivals.iter().map(|a| a.0).collect();
    let departures = fcfs(&times, 1.0 / mu);
    let mut est = WarpEstimator::new(n as u32, &WarpConfig::default());
    let mut out = Vec::new();
    for ((sent, source), departed) in arrivals.iter().zip(departures) {
        if let Some(i) = source {
            if let Some(w) = est.observe(*i as u32, at_secs(*sent), at_secs(departed)) {
                out.push((*sent, w.warp));
            }
        }
    }
    out
}

#[test]
fn warp_equals_rho_while_the_server_stays_busy_and_one_once_it_idles() {
    // The backlog of 300 drains at (1 − ρ)μ = 200/s: busy for 1.5 s. In that
    // time, between two messages of a source the server serves exactly the
    // four messages that arrived between them: warp = 4/μ ÷ 1/200 = 0.8.
    let samples = four_senders_behind_a_backlog(300);
    let busy: Vec<f64> = samples.iter().filter(|(t, _)| *t > 0.01 && *t < 1.4).map(|s| s.1).collect();
    let idle: Vec<f64> = samples.iter().filter(|(t, _)| *t > 1.6).map(|s| s.1).collect();
    assert!(busy.len() > 1000 && idle.len() > 100);
    for w in busy {
        assert!((w - 0.8).abs() < 1e-6, "busy: warp {w}");
    }
    for w in idle {
        assert!((w - 1.0).abs() < 1e-6, "idle: warp {w}");
    }
    // Without a backlog the delay never trends: warp is 1 throughout.
    for (_, w) in four_senders_behind_a_backlog(0) {
        assert!((w - 1.0).abs() < 1e-6, "no backlog: warp {w}");
    }
}

#[test]
fn clock_offset_cancels_and_the_mean_rate_comes_from_the_stamps() {
    let cfg = WarpConfig::for_path(1000.0, Duration::from_millis(10), 2);
    let mut est = WarpEstimator::new(2, &cfg);
    // Source 0's clock is 994.5 s ahead of the receiver's; source 1's is 5 s behind it.
    for k in 0..50u64 {
        let t = k as f64 * 0.01;
        let w0 = est.observe(0, at_secs(1000.0 + t), at_secs(5.5 + t + 0.003));
        let w1 = est.observe(1, at_secs(t * 2.0), at_secs(5.0 + t * 2.0 + 0.004));
        if k > 0 {
            assert!((w0.unwrap().warp - 1.0).abs() < 1e-6);
            assert!((w1.unwrap().warp - 1.0).abs() < 1e-6);
        }
    }
    assert!((est.source_rate(0).unwrap() - 100.0).abs() < 1e-6);
    assert!((est.source_rate(1).unwrap() - 50.0).abs() < 1e-6);
    // Both were heard within the timeout (80 ms) before 6.0 s on the receiver's
    // clock (last at 5.993 s and 5.984 s).
    assert!((est.mean_rate(at_secs(6.0)).unwrap() - 75.0).abs() < 1e-6);
    // At 6.07 s only source 0 is still counted.
    assert!((est.mean_rate(at_secs(6.07)).unwrap() - 100.0).abs() < 1e-6);
    // The gaps to the mean of the sources heard sum to zero.
    let g0 = est.fair_share_gap(0, at_secs(6.0)).unwrap();
    let g1 = est.fair_share_gap(1, at_secs(6.0)).unwrap();
    assert!((g0 + 25.0).abs() < 1e-6 && (g1 - 25.0).abs() < 1e-6);
    assert_eq!(est.fair_share_gap(1, at_secs(6.07)), None, "timed out");
    assert_eq!(est.fair_share_gap(0, at_secs(6.07)), Some(0.0));
    est.forget(0);
    assert_eq!(est.mean_rate(at_secs(6.07)), None);
}

#[test]
fn stability_condition() {
    let tau = Duration::from_millis(20);
    let mu = 10_000.0;
    let crit = critical_epsilon(tau, mu);
    assert!((stability_product(tau, crit, mu) - STABILITY_LIMIT).abs() < 1e-9);
    assert!(is_stable(tau, 0.99 * crit, mu));
    assert!(!is_stable(tau, 1.01 * crit, mu));
    assert!(!is_stable(tau, 0.0, mu), "ε must be positive");
    assert!(!is_stable(tau, -1.0, mu));
    // The defaults sit at a quarter of the bound, whatever the number of senders.
    for n in [1, 4, 10] {
        let cfg = WarpConfig::for_path(mu, tau, n);
        assert!((cfg.stability_product(tau, mu, n) - STABILITY_LIMIT / 4.0).abs() < 1e-9);
        assert!(cfg.is_stable(tau, mu, n));
        assert!(!cfg.is_stable(tau * 4, mu, n), "four times the delay is just outside");
    }
    assert!(WarpConfig::default().is_stable(WarpConfig::REFERENCE_LOOP_DELAY, WarpConfig::REFERENCE_SERVICE_RATE, 1));
}

#[test]
fn rate_steps_are_weighted_by_span_and_bounded() {
    let mut cfg = WarpConfig::for_path(1000.0, Duration::from_millis(10), 1);
    cfg.epsilon = 100.0;
    cfg.initial_rate = 500.0;
    cfg.min_rate = 10.0;
    cfg.max_rate = 2000.0;
    let mut r = WarpRate::new(&cfg);
    r.adjust(0.5, Duration::from_millis(100)); // + 100 × 0.1 × 0.5
    assert!((r.rate() - 505.0).abs() < 1e-9);
    r.adjust(3.0, Duration::from_secs(1)); // − 200
    assert!((r.rate() - 305.0).abs() < 1e-9);
    r.adjust(100.0, Duration::from_secs(1));
    assert_eq!(r.rate(), 10.0, "floor");
    r.adjust(-1e6, Duration::from_secs(1));
    assert_eq!(r.rate(), 2000.0, "ceiling");
    r.adjust(f64::INFINITY, Duration::from_secs(1));
    assert_eq!(r.rate(), 2000.0, "a meaningless warp is ignored");
    assert_eq!(r.interval(), Some(Duration::from_micros(500)));
    // The fairness term closes the gap at γ per second, never past it.
    r.set_rate(500.0);
    r.share(100.0, Duration::from_millis(10)); // γ = π/8 / 10 ms ≈ 39.3/s: 39%
    assert!((r.rate() - (500.0 + 100.0 * cfg.fairness_gain * 0.01)).abs() < 1e-9);
    r.set_rate(500.0);
    r.share(100.0, Duration::from_secs(100));
    assert_eq!(r.rate(), 600.0);
}

#[test]
fn buffered_submission_flushes_when_the_buffer_exceeds_lambda_b() {
    let cfg = WarpConfig {
        buffer_quantum: 20.0,
        initial_buffer_scale: 1.0,
        buffer_capacity: 50,
        buffer_epsilon: 2.0,
        ..WarpConfig::default()
    };
    let mut b = BufferedSubmission::new(&cfg);
    assert_eq!(b.threshold(), 20.0);
    for k in 0..20 {
        b.push(k).unwrap();
        assert_eq!(b.poll_flush(), None, "|B| = {} is not above Λb", k + 1);
    }
    b.push(20).unwrap();
    assert_eq!(b.poll_flush(), Some((0..21).collect::<Vec<_>>()), "|B| = 21 > 20: all of B, in order");
    assert!(b.is_empty());
    // Λ moves against the rate: congestion (warp > 1) makes submissions rarer.
    b.adjust(1.5, Duration::from_secs(1)); // Λ ← 1 + 2 × 0.5
    assert!((b.scale() - 2.0).abs() < 1e-9);
    assert_eq!(b.threshold(), 40.0);
    b.adjust(0.5, Duration::from_millis(500)); // Λ ← 2 − 2 × 0.5 × 0.5
    assert!((b.scale() - 1.5).abs() < 1e-9);
    b.adjust(0.0, Duration::from_secs(10));
    assert_eq!(b.scale(), 0.0, "Λ never goes below zero");
    // A threshold above the capacity: B is handed over when full, and refuses more.
    b.set_scale(10.0);
    for k in 0..50 {
        b.push(k).unwrap();
        if k < 49 {
            assert_eq!(b.poll_flush(), None);
        }
    }
    assert_eq!(b.push(99), Err(99));
    assert_eq!(b.poll_flush().map(|v| v.len()), Some(50));
    b.push(1).unwrap();
    assert_eq!(b.flush_all(), vec![1]);
}

/// n paced senders under Warp control share a FCFS server with a fixed service
/// time; the receiver returns each warp (and, with fairness, the mean rate)
/// after a feedback delay.
struct Loop {
    mu: f64,
    forward: f64,
    feedback: f64,
    fairness: bool,
    configs: Vec<WarpConfig>,
}

#[derive(Debug)]
struct Trace {
    /// (time, rate of each sender), every millisecond.
    rates: Vec<(f64, Vec<f64>)>,
    /// Mean of (feedback time − send time) over the second half.
    loop_delay: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Record,
    Send(usize),
    AtServer(usize, u64),
    Feedback(usize, u64),
}

impl Loop {
    fn run(&self, duration: f64) -> Trace {
        let n = self.configs.len();
        let mut rates: Vec<WarpRate> = self.configs.iter().map(WarpRate::new).collect();
        let mut est = WarpEstimator::new(n as u32, &self.configs[0]);
        let mut heap = BinaryHeap::new();
        let mut seq = 0u64;
        let mut push = |heap: &mut BinaryHeap<_>, t: f64, ev: Ev| {
            seq += 1;
            heap.push(Reverse(((t * 1e9).round() as u64, seq, ev)));
        };
        for i in 0..n {
            push(&mut heap, i as f64 * 1e-4, Ev::Send(i));
        }
        push(&mut heap, 0.0, Ev::Record);
        let mut free = 0.0f64;
        let mut feedback: Vec<(WarpSample, Option<f64>)> = Vec::new();
        let mut trace = Trace { rates: Vec::new(), loop_delay: 0.0 };
        let (mut delay_sum, mut delay_count) = (0.0, 0u64);
        while let Some(Reverse((t_ns, _, ev))) = heap.pop() {
            let now = t_ns as f64 / 1e9;
            if now > duration {
                break;
            }
            match ev {
                Ev::Record => {
                    trace.rates.push((now, rates.iter().map(WarpRate::rate).collect()));
                    push(&mut heap, now + 1e-3, Ev::Record);
                }
                Ev::Send(i) => {
                    push(&mut heap, now + self.forward, Ev::AtServer(i, t_ns));
                    let gap = rates[i].interval().expect("floor above zero").as_secs_f64();
                    push(&mut heap, now + gap, Ev::Send(i));
                }
                Ev::AtServer(i, sent) => {
                    free = free.max(now) + 1.0 / self.mu;
                    let arrived = at_secs(free);
                    if let Some(s) = est.observe(i as u32, Time::from_nanos(sent), arrived) {
                        let gap = if self.fairness { est.fair_share_gap(i as u32, arrived) } else { None };
                        feedback.push((s, gap));
                        push(&mut heap, free + self.feedback, Ev::Feedback(i, feedback.len() as u64 - 1));
                    }
                }
                Ev::Feedback(i, k) => {
                    let (s, gap) = feedback[k as usize];
                    rates[i].on_feedback(&s, gap);
                    if now > duration / 2.0 {
                        delay_sum += now - secs(s.sent);
                        delay_count += 1;
                    }
                }
            }
        }
        trace.loop_delay = delay_sum / delay_count.max(1) as f64;
        trace
    }
}

/// Mean and peak-to-peak of the total rate over μ in the last quarter.
fn tail(trace: &Trace, mu: f64) -> (f64, f64) {
    let end = trace.rates.last().unwrap().0;
    let totals: Vec<f64> =
        trace.rates.iter().filter(|(t, _)| *t > 0.75 * end).map(|(_, r)| r.iter().sum::<f64>() / mu).collect();
    let mean = totals.iter().sum::<f64>() / totals.len() as f64;
    let max = totals.iter().cloned().fold(f64::MIN, f64::max);
    let min = totals.iter().cloned().fold(f64::MAX, f64::min);
    (mean, max - min)
}

/// One sender starting at 1.5μ, with ε a multiple of the critical ε of the
/// base loop delay (forward 10 ms + feedback 10 ms).
fn one_sender(multiple: f64) -> (Trace, f64) {
    let mu = 1000.0;
    let base = Duration::from_millis(20);
    let mut cfg = WarpConfig::for_path(mu, base, 1);
    cfg.epsilon = multiple * critical_epsilon(base, mu);
    cfg.initial_rate = 1.5 * mu;
    cfg.max_rate = 1.5 * mu;
    let l = Loop { mu, forward: 0.01, feedback: 0.01, fairness: false, configs: vec![cfg.clone()] };
    (l.run(20.0), cfg.epsilon)
}

#[test]
fn rate_settles_at_the_service_rate_inside_the_bound_and_oscillates_outside() {
    let mu = 1000.0;
    for multiple in [0.1, 0.3, 0.6, 0.9, 1.2, 2.0, 4.0] {
        let (trace, epsilon) = one_sender(multiple);
        let (mean, swing) = tail(&trace, mu);
        // Equation 2 with the loop delay the sender actually saw: the base
        // delay plus the standing queue the control leaves, (λ(0) − μ)/ε, so
        // ×0.9 of the critical ε of the base delay is already outside.
        let tau = Duration::from_secs_f64(trace.loop_delay);
        let product = stability_product(tau, epsilon, mu);
        let what = format!(
            "×{multiple}: τ = {:.1} ms, τε/μ = {product:.2}, mean {mean:.3}, swing {swing:.3}",
            tau.as_secs_f64() * 1e3
        );
        if is_stable(tau, epsilon, mu) {
            assert!(swing < 0.01 && (mean - 1.0).abs() < 0.01, "settles: {what}");
        } else {
            // A limit cycle between the floor and the demand (1.5μ).
            assert!(swing > 0.9, "oscillates: {what}");
        }
        assert_eq!(is_stable(tau, epsilon, mu), multiple < 0.8, "{what}");
    }
}

/// Ten senders starting at shares of 0.05 to 0.23 of μ (1.4μ in all).
fn ten_senders(fairness: bool) -> Trace {
    let mu = 2000.0;
    let base = Duration::from_millis(20);
    let configs = (0..10)
        .map(|i| {
            let mut c = WarpConfig::for_path(mu, base, 10);
            c.initial_rate = mu * (0.05 + 0.02 * i as f64);
            if !fairness {
                c.fairness_gain = 0.0;
            }
            c
        })
        .collect();
    Loop { mu, forward: 0.01, feedback: 0.01, fairness, configs }.run(20.0)
}

#[test]
fn fairness_brings_the_rates_together_and_keeps_the_total() {
    let mu = 2000.0;
    for fairness in [false, true] {
        let trace = ten_senders(fairness);
        let (mean, swing) = tail(&trace, mu);
        assert!((mean - 1.0).abs() < 0.02 && swing < 0.05, "fairness {fairness}: total {mean:.3}, swing {swing:.3}");
        // Each sender's mean rate over the last quarter.
        let end = trace.rates.last().unwrap().0;
        let tail: Vec<&Vec<f64>> = trace.rates.iter().filter(|(t, _)| *t > 0.75 * end).map(|(_, r)| r).collect();
        let means: Vec<f64> = (0..10).map(|i| tail.iter().map(|r| r[i]).sum::<f64>() / tail.len() as f64).collect();
        let (lo, hi) = (means.iter().cloned().fold(f64::MAX, f64::min), means.iter().cloned().fold(f64::MIN, f64::max));
        let share = mu / 10.0;
        if fairness {
            assert!(hi - lo < 0.05 * share, "with fairness: rates {lo:.1} to {hi:.1}");
        } else {
            // Without it every sender shifts by the same amount: the initial
            // spread of 0.18μ stays.
            assert!((hi - lo - 0.18 * mu).abs() < 0.05 * share, "without fairness: rates {lo:.1} to {hi:.1}");
        }
    }
}
