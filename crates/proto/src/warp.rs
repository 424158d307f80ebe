//! Warp rate control (seed 003 §3 and §6.2): a sender throttles its message
//! rate from a timestamp-based estimate of the network's state.
//!
//! Three parts, each usable alone, none reading a clock:
//!
//! - [`WarpEstimator`], at the receiver, one history per source (the paper's
//!   message decoding protocol, MDP). For a message stamped `ts` by its sender
//!   (the message encoding protocol, MEP) and arriving at `t2`,
//!
//!   ```text
//!   warp = (t2 − last_in) / (ts − last_out)
//!   ```
//!
//!   where `last_in` and `last_out` are the arrival time and the stamp of the
//!   previous message from the same source. It is the ratio of the spacing of
//!   two messages at the receiver to their spacing at the sender, so it is
//!   1 + (change of one-way delay) / (time between the sends): above 1 while
//!   queues grow, below 1 while they drain. Only differences of each clock
//!   enter it, so the two clocks need no common epoch (a rate difference
//!   between them scales warp by that ratio, footnote 4 of the paper). When
//!   the bottleneck is a FCFS server that stays busy between two messages of
//!   a source, the spacing at the receiver is the work that arrived between
//!   them divided by the service rate, and warp = ρ = λ/μ exactly; when the
//!   server idles in between, warp is larger than ρ, and over a stationary
//!   stretch its mean is 1 whatever ρ < 1 is (the delay does not trend).
//!
//! - [`WarpRate`], at the sender: the rate adjustment protocol (RAP),
//!   λ ← max(0, λ + ε(1 − warp)), the discrete form of the control law
//!   dλ/dt = ε(1 − warp) (equation 1 of the paper). Each step is weighted by
//!   the sending interval its sample covers, so ε is a rate change per second
//!   and equation 1 holds whatever the message rate (see [`WarpRate::adjust`]).
//!   Optionally with the fairness term below.
//!
//! - [`BufferedSubmission`], at the sender: the paper's implemented scheme.
//!   Messages wait in a buffer B, and B is handed to the network in one piece
//!   when |B| > Λb. Λ acts against λ (a larger Λ means rarer, larger
//!   submissions), so it moves with the opposite sign of ε.
//!
//! # Stability
//!
//! With the total rate λ = Σ λᵢ of the senders sharing a bottleneck of mean
//! service rate μ̄, and warp ≈ ρ = λ/μ̄ seen after a loop delay τ (from a send
//! to the sender acting on the warp it produced: propagation to the
//! bottleneck, queueing, the way to the receiver and the feedback back),
//! equation 1 becomes dλ/dt = ε(1 − λ(t − τ)/μ̄). Around λ = μ̄ this is
//! x'(t) = −(ε/μ̄) x(t − τ), which is asymptotically stable exactly when
//!
//! ```text
//! 0 < τ ε / μ̄ < π/2        (equation 2 of the paper)
//! ```
//!
//! Here ε is the sum of the senders' εᵢ (each sender adds its own εᵢ(1 − warp)).
//! Beyond π/2 the deviation grows until the nonlinearities (an empty queue,
//! the floor and the ceiling of the rate) bound it: the rate oscillates
//! instead of settling. [`stability_product`] computes τε/μ̄ and [`is_stable`]
//! checks the bound; [`WarpConfig::for_path`] picks ε at a quarter of it.
//!
//! τ includes the standing queue, and Warp sets that queue itself. The steps a
//! sender takes add up to λᵢ(t) = λᵢ(0) − εᵢ·(dᵢ(t) − dᵢ(0)), with dᵢ the
//! one-way delay of its latest message (the sum of span × (1 − warp)
//! telescopes), so senders that start at Σλᵢ(0) > μ̄ settle, if they settle,
//! with a queue of (Σλᵢ(0) − μ̄)/ε seconds, and
//!
//! ```text
//! τ ε / μ̄ = τ₀ ε / μ̄ + (Σλᵢ(0)/μ̄ − 1)
//! ```
//!
//! with τ₀ the loop delay of empty queues. Senders that start more than π/2
//! above capacity are unstable whatever ε; senders that start at the fair
//! share (the default `initial_rate`) see τ ≈ τ₀. The same sum shows the
//! other limit of the estimator: on a path whose queue is empty warp is 1, so
//! senders that start below capacity stay where they started.
//!
//! # Fairness
//!
//! The paper asks that the variation of the senders' rates, Eᵢ{(λᵢ − λ̄)²}, be
//! kept small (§6.2) and refers to [Par93] for the protocol, which is not among
//! our sources. The mechanism here is our own. Without one, the telescoped sum
//! above shifts every sender sharing the queue by the same amount, so the
//! differences the senders started with persist.
//!
//! The receiver knows every source's sending rate from the timestamps (the
//! running mean of its stamp spacing). With each warp it returns to source i
//! its gap to the mean of the sources it hears, gᵢ = λ̄ − λᵢ, both as measured
//! at that moment ([`WarpEstimator::fair_share_gap`]), and the sender adds
//! γ·gᵢ per second ([`WarpRate::share`]): dλᵢ/dt = εᵢ(1 − warp) + γ·gᵢ(t − τ).
//! The gaps sum to zero at every instant, so the term moves rate between the
//! senders without adding any to their total: the queue, and equation 2, are
//! left alone. The differences obey x'(t) = −γ x(t − τ), stable for
//! 0 < γτ < π/2 by the argument of equation 2, where τ is the loop delay
//! (standing queue included) plus the receiver's `rate_window`.
//!
//! (Moving towards a returned mean λ̄ from the sender's own current rate
//! instead would make differences decay without delay, but λ̄ is measured
//! late and through the spacing of stamps, so the terms do not sum to zero;
//! Warp has no reference delay to pull back to, so that bias accumulates in
//! the standing queue, which grows without bound.)

use std::f64::consts::FRAC_PI_2;
use std::time::Duration;

use crate::Time;

/// The upper bound of τε/μ̄ for asymptotic stability (equation 2): π/2.
pub const STABILITY_LIMIT: f64 = FRAC_PI_2;

/// The fraction of [`STABILITY_LIMIT`] at which [`WarpConfig::for_path`]
/// places τε/μ̄ and γτ: far enough inside for a loop delay that is twice
/// what was measured.
pub const DEFAULT_STABILITY_FRACTION: f64 = 0.25;

/// τε/μ̄ of equation 2: `loop_delay` τ, `epsilon` the sum of the εᵢ of the
/// senders sharing the bottleneck (messages/s per second), `mean_service_rate`
/// μ̄ of the bottleneck (messages/s).
pub fn stability_product(loop_delay: Duration, epsilon: f64, mean_service_rate: f64) -> f64 {
    loop_delay.as_secs_f64() * epsilon / mean_service_rate
}

/// Whether the control law is asymptotically stable: 0 < τε/μ̄ < π/2.
pub fn is_stable(loop_delay: Duration, epsilon: f64, mean_service_rate: f64) -> bool {
    let p = stability_product(loop_delay, epsilon, mean_service_rate);
    p > 0.0 && p < STABILITY_LIMIT
}

/// The largest total ε for which equation 2 holds: (π/2)·μ̄/τ.
pub fn critical_epsilon(loop_delay: Duration, mean_service_rate: f64) -> f64 {
    STABILITY_LIMIT * mean_service_rate / loop_delay.as_secs_f64()
}

/// One step of the paper's rate adjustment protocol, as written:
/// λ ← max(0, λ + ε(1 − warp)).
pub fn rap_step(rate: f64, epsilon: f64, warp: f64) -> f64 {
    (rate + epsilon * (1.0 - warp)).max(0.0)
}

/// Parameters of Warp rate control. Rates are in messages per second.
/// [`WarpConfig::for_path`] derives them from what is known of the path;
/// `Default` is `for_path` of [`WarpConfig::REFERENCE_SERVICE_RATE`] and
/// [`WarpConfig::REFERENCE_LOOP_DELAY`] with one sender.
#[derive(Clone, Debug, PartialEq)]
pub struct WarpConfig {
    /// εᵢ: rate change, messages/s per second, for a warp one away from 1.
    /// Default: [`DEFAULT_STABILITY_FRACTION`] of the critical ε of the path
    /// shared by the number of senders.
    pub epsilon: f64,
    /// λᵢ(0), the rate before any warp has been seen. Default: the fair share
    /// μ̄/n.
    pub initial_rate: f64,
    /// The floor of λᵢ. The paper's floor is 0, but a sender at rate 0 sends
    /// nothing, hears no warp and would stay silent for ever, so the default is
    /// 1% of the fair share.
    pub min_rate: f64,
    /// The ceiling of λᵢ (the rate the sender's interface can reach). Default:
    /// unbounded.
    pub max_rate: f64,
    /// γ, per second: how fast a sender closes its gap to the mean rate of
    /// all senders (the fairness term); 0 turns fairness off. Stable for
    /// 0 < γτ < π/2. Default: [`DEFAULT_STABILITY_FRACTION`] × (π/2)/τ.
    pub fairness_gain: f64,
    /// Time constant of the receiver's running mean of a source's stamp
    /// spacing, from which it knows that source's rate: a spacing of `span`
    /// has weight min(1, span/window). It adds to the delay of the fairness
    /// loop. Default: a quarter of the loop delay.
    pub rate_window: Duration,
    /// A source not heard from for this long is left out of the mean rate and
    /// the fair-share gaps.
    /// Default: 8 loop delays.
    pub source_timeout: Duration,
    /// b of buffered submission: B is flushed when |B| > Λb. Default 20, the
    /// value of the paper's implementation ("buffer size used for each message
    /// sent is 20Λ").
    pub buffer_quantum: f64,
    /// Λ(0). Default 1.
    pub initial_buffer_scale: f64,
    /// ε of Λ, per second (Λ moves against λ: Λ ← max(0, Λ − ε_Λ(1 − warp))
    /// per second of samples). The paper does not give its value; default 1.
    pub buffer_epsilon: f64,
    /// Largest number of messages B holds; `push` refuses more (back-pressure).
    /// Default 4096.
    pub buffer_capacity: usize,
}

impl WarpConfig {
    /// A 1 Gbit/s path carrying 1,500-byte datagrams: about 83,000 per second.
    pub const REFERENCE_SERVICE_RATE: f64 = 1e9 / 8.0 / 1500.0;
    /// The loop delay of a LAN path under load.
    pub const REFERENCE_LOOP_DELAY: Duration = Duration::from_micros(200);

    /// Parameters for `senders` sources sharing a bottleneck of mean service
    /// rate `mean_service_rate` (messages/s), with a measured loop delay
    /// `loop_delay` (a round trip under load is a fair stand-in).
    ///
    /// ε is set so that τΣεᵢ/μ̄ = [`DEFAULT_STABILITY_FRACTION`] × π/2, and γ so
    /// that γτ is the same fraction of π/2.
    pub fn for_path(mean_service_rate: f64, loop_delay: Duration, senders: usize) -> WarpConfig {
        let senders = senders.max(1) as f64;
        let tau = loop_delay.as_secs_f64().max(1e-9);
        let share = mean_service_rate / senders;
        WarpConfig {
            epsilon: DEFAULT_STABILITY_FRACTION * critical_epsilon(loop_delay, mean_service_rate) / senders,
            initial_rate: share,
            min_rate: 0.01 * share,
            max_rate: f64::INFINITY,
            fairness_gain: DEFAULT_STABILITY_FRACTION * STABILITY_LIMIT / tau,
            rate_window: loop_delay / 4,
            source_timeout: loop_delay * 8,
            buffer_quantum: 20.0,
            initial_buffer_scale: 1.0,
            buffer_epsilon: 1.0,
            buffer_capacity: 4096,
        }
    }

    /// τε/μ̄ for `senders` senders that all use this configuration.
    pub fn stability_product(&self, loop_delay: Duration, mean_service_rate: f64, senders: usize) -> f64 {
        stability_product(loop_delay, self.epsilon * senders as f64, mean_service_rate)
    }

    /// Whether `senders` senders with this configuration meet equation 2.
    pub fn is_stable(&self, loop_delay: Duration, mean_service_rate: f64, senders: usize) -> bool {
        is_stable(loop_delay, self.epsilon * senders as f64, mean_service_rate)
    }
}

impl Default for WarpConfig {
    fn default() -> WarpConfig {
        WarpConfig::for_path(Self::REFERENCE_SERVICE_RATE, Self::REFERENCE_LOOP_DELAY, 1)
    }
}

/// One warp value, computed at the receiver for a message from `source`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarpSample {
    pub source: u32,
    /// (t2 − last_in) / (ts − last_out).
    pub warp: f64,
    /// ts − last_out: the sending interval the sample covers.
    pub span: Duration,
    /// ts, the sender's stamp of the message.
    pub sent: Time,
    /// t2, its arrival.
    pub arrived: Time,
}

/// `hist[k]` of the paper: what the receiver remembers of source k.
#[derive(Clone, Copy, Debug, Default)]
struct SourceHistory {
    /// Whether a message from this source has been seen.
    seen: bool,
    last_in: Time,
    last_out: Time,
    /// Running mean of the stamp spacing, seconds (0 before the first sample).
    mean_spacing: f64,
}

/// The receiver's per-source warp estimator (MDP), for sources `0..sources`.
#[derive(Clone, Debug)]
pub struct WarpEstimator {
    sources: Vec<SourceHistory>,
    rate_window: Duration,
    source_timeout: Duration,
}

impl WarpEstimator {
    /// Bytes of the per-source histories.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.sources.capacity() * std::mem::size_of::<SourceHistory>()
    }

    pub fn new(sources: u32, config: &WarpConfig) -> WarpEstimator {
        WarpEstimator {
            sources: vec![SourceHistory::default(); sources as usize],
            rate_window: config.rate_window,
            source_timeout: config.source_timeout,
        }
    }

    /// A message from `source` stamped `sent` by its sender arrived at
    /// `arrived`. Returns the warp it gives, or `None` for the first message
    /// of a source, an unknown source, and a message not stamped after the
    /// previous one (reordered or duplicated: the history keeps the newest
    /// stamp, so the next in-order message spans the gap). A lost message
    /// leaves no gap either: the next sample covers two intervals.
    pub fn observe(&mut self, source: u32, sent: Time, arrived: Time) -> Option<WarpSample> {
        let window = self.rate_window.as_secs_f64();
        let h = self.sources.get_mut(source as usize)?;
        if !h.seen {
            *h = SourceHistory { seen: true, last_in: arrived, last_out: sent, mean_spacing: 0.0 };
            return None;
        }
        if sent <= h.last_out || arrived < h.last_in {
            return None;
        }
        let span = sent.since(h.last_out);
        let warp = arrived.since(h.last_in).as_secs_f64() / span.as_secs_f64();
        h.last_in = arrived;
        h.last_out = sent;
        let spacing = span.as_secs_f64();
        let weight = if h.mean_spacing == 0.0 || window <= spacing { 1.0 } else { spacing / window };
        h.mean_spacing += weight * (spacing - h.mean_spacing);
        Some(WarpSample { source, warp, span, sent, arrived })
    }

    /// The sending rate of `source` seen in its stamps, messages/s.
    pub fn source_rate(&self, source: u32) -> Option<f64> {
        let h = self.sources.get(source as usize)?;
        (h.mean_spacing > 0.0).then(|| 1.0 / h.mean_spacing)
    }

    /// The mean sending rate λ̄ of the sources heard from within the source
    /// timeout before `now`.
    pub fn mean_rate(&self, now: Time) -> Option<f64> {
        let (sum, count) = self
            .sources
            .iter()
            .filter(|h| self.is_active(h, now))
            .fold((0.0, 0usize), |(s, c), h| (s + 1.0 / h.mean_spacing, c + 1));
        (count > 0).then(|| sum / count as f64)
    }

    /// gᵢ = λ̄ − λᵢ for `source`, both measured now, over the sources heard
    /// within the timeout (what the fairness term of the source's [`WarpRate`]
    /// needs). The gaps of those sources sum to zero. `None` for a source not
    /// among them.
    pub fn fair_share_gap(&self, source: u32, now: Time) -> Option<f64> {
        let h = self.sources.get(source as usize)?;
        if !self.is_active(h, now) {
            return None;
        }
        Some(self.mean_rate(now)? - 1.0 / h.mean_spacing)
    }

    /// Whether `source` counts among the sources of [`WarpEstimator::mean_rate`]
    /// at `now`: its rate is known and it was heard within the timeout.
    pub fn is_active_source(&self, source: u32, now: Time) -> bool {
        self.sources.get(source as usize).is_some_and(|h| self.is_active(h, now))
    }

    fn is_active(&self, h: &SourceHistory, now: Time) -> bool {
        h.seen && h.mean_spacing > 0.0 && now.since(h.last_in) <= self.source_timeout
    }

    /// Drops what is known of `source` (it left); its next message starts anew.
    pub fn forget(&mut self, source: u32) {
        if let Some(h) = self.sources.get_mut(source as usize) {
            *h = SourceHistory::default();
        }
    }
}

/// A sender's rate λᵢ under Warp control (RAP), with the optional fairness term.
#[derive(Clone, Debug)]
pub struct WarpRate {
    rate: f64,
    epsilon: f64,
    min_rate: f64,
    max_rate: f64,
    fairness_gain: f64,
}

impl WarpRate {
    pub fn new(config: &WarpConfig) -> WarpRate {
        let min_rate = config.min_rate.max(0.0);
        let max_rate = config.max_rate.max(min_rate);
        WarpRate {
            rate: config.initial_rate.clamp(min_rate, max_rate),
            epsilon: config.epsilon,
            min_rate,
            max_rate,
            fairness_gain: config.fairness_gain.max(0.0),
        }
    }

    /// λᵢ, messages/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The time between two sends at the current rate; `None` at rate 0.
    pub fn interval(&self) -> Option<Duration> {
        (self.rate > 0.0).then(|| Duration::from_secs_f64((1.0 / self.rate).min(1e9)))
    }

    /// Sets λᵢ (within the floor and the ceiling), e.g. when a sender joins.
    pub fn set_rate(&mut self, rate: f64) {
        self.rate = rate.clamp(self.min_rate, self.max_rate);
    }

    /// The RAP step for a warp whose sample covers `span` of sending time:
    /// λ ← max(floor, λ + ε·span·(1 − warp)), i.e. [`rap_step`] with ε scaled
    /// by the span in seconds.
    ///
    /// The paper adds ε(1 − warp) per received message. Scaling by the span
    /// makes ε a rate per second, so that equation 1 and its stability bound
    /// hold whatever the message rate; with one message per second the two
    /// are the same.
    pub fn adjust(&mut self, warp: f64, span: Duration) {
        if !warp.is_finite() {
            return;
        }
        let stepped = rap_step(self.rate, self.epsilon * span.as_secs_f64(), warp);
        self.rate = stepped.clamp(self.min_rate, self.max_rate);
    }

    /// The fairness term over `elapsed`: λᵢ ← λᵢ + γ·elapsed·gᵢ, with `gap`
    /// gᵢ = λ̄ − λᵢ as the receiver measured it. The step is capped at the
    /// whole gap, so a long `elapsed` never overshoots.
    pub fn share(&mut self, gap: f64, elapsed: Duration) {
        if self.fairness_gain == 0.0 || !gap.is_finite() {
            return;
        }
        let weight = (self.fairness_gain * elapsed.as_secs_f64()).min(1.0);
        self.set_rate(self.rate + weight * gap);
    }

    /// What a sender does with the feedback of one message: the RAP step, then,
    /// if the receiver sent its fair-share gap, the fairness term over the
    /// same span.
    pub fn on_feedback(&mut self, sample: &WarpSample, fair_share_gap: Option<f64>) {
        self.adjust(sample.warp, sample.span);
        if let Some(gap) = fair_share_gap {
            self.share(gap, sample.span);
        }
    }
}

/// The paper's buffered submission: messages wait in B, and all of B goes to
/// the network at once when |B| > Λb. Λ is adjusted by warp with the sign of
/// ε reversed (a larger Λ submits less often).
#[derive(Clone, Debug)]
pub struct BufferedSubmission<T> {
    buffer: Vec<T>,
    scale: f64,
    quantum: f64,
    epsilon: f64,
    capacity: usize,
}

impl<T> BufferedSubmission<T> {
    pub fn new(config: &WarpConfig) -> BufferedSubmission<T> {
        BufferedSubmission {
            buffer: Vec::new(),
            scale: config.initial_buffer_scale.max(0.0),
            quantum: config.buffer_quantum.max(0.0),
            epsilon: config.buffer_epsilon,
            capacity: config.buffer_capacity.max(1),
        }
    }

    /// |B|.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Λ.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    pub fn set_scale(&mut self, scale: f64) {
        self.scale = scale.max(0.0);
    }

    /// Λb: B is flushed once it holds more than this.
    pub fn threshold(&self) -> f64 {
        self.scale * self.quantum
    }

    /// Queues a message; gives it back when B is full (back-pressure).
    pub fn push(&mut self, message: T) -> Result<(), T> {
        if self.buffer.len() >= self.capacity {
            return Err(message);
        }
        self.buffer.push(message);
        Ok(())
    }

    /// All of B, in order, once |B| > Λb, or once B is full (a threshold above
    /// the capacity would otherwise never be crossed). `None` otherwise.
    pub fn poll_flush(&mut self) -> Option<Vec<T>> {
        let len = self.buffer.len();
        if len == 0 || (len as f64 <= self.threshold() && len < self.capacity) {
            return None;
        }
        Some(std::mem::take(&mut self.buffer))
    }

    /// All of B whatever its size (the end of a phase).
    pub fn flush_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.buffer)
    }

    /// Λ ← max(0, Λ − ε_Λ·span·(1 − warp)): the RAP with the sign of ε
    /// reversed, weighted by the span like [`WarpRate::adjust`].
    pub fn adjust(&mut self, warp: f64, span: Duration) {
        if warp.is_finite() {
            self.scale = rap_step(self.scale, -self.epsilon * span.as_secs_f64(), warp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn rap_step_is_the_paper_formula() {
        assert_eq!(rap_step(10.0, 2.0, 0.5), 11.0);
        assert_eq!(rap_step(10.0, 2.0, 1.5), 9.0);
        assert_eq!(rap_step(1.0, 2.0, 3.0), 0.0, "never below zero");
    }

    #[test]
    fn first_message_reordered_and_unknown_sources_give_no_sample() {
        let mut e = WarpEstimator::new(2, &WarpConfig::default());
        assert_eq!(e.observe(0, at(0), at(5)), None);
        assert_eq!(e.observe(7, at(0), at(5)), None);
        let s = e.observe(0, at(10), at(25)).unwrap();
        assert!((s.warp - 2.0).abs() < 1e-12);
        assert_eq!(s.span, Duration::from_millis(10));
        assert_eq!(e.observe(0, at(8), at(30)), None, "stamped before the last one");
        assert_eq!(e.observe(0, at(10), at(31)), None, "same stamp");
        // The next in-order message is measured against the newest one kept.
        let s = e.observe(0, at(20), at(35)).unwrap();
        assert!((s.warp - 1.0).abs() < 1e-12);
    }

    #[test]
    fn buffer_threshold_of_zero_flushes_every_message() {
        let cfg = WarpConfig { initial_buffer_scale: 0.0, ..WarpConfig::default() };
        let mut b = BufferedSubmission::new(&cfg);
        b.push(1).unwrap();
        assert_eq!(b.poll_flush(), Some(vec![1]));
        assert_eq!(b.poll_flush(), None);
    }
}
