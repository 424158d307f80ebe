//! Warp rate control on the wire (seed 003 §3): the parts of
//! [`crate::warp`] joined to the channels of an endpoint.
//!
//! A sender under rate control flags its data datagrams
//! ([`Flags::RATE_CONTROLLED`](bulkwire_wire::Flags::RATE_CONTROLLED)) and
//! paces them to a peer with a token bucket filled at its rate λ, counted in
//! datagrams per second. The receiver feeds every flagged datagram's stamp
//! and arrival to its [`WarpEstimator`] and, once the samples from a source
//! span [`RateControl::feedback_interval`] of that source's clock and at
//! least [`RateControl::MIN_SAMPLES`] datagrams, returns one
//! [`WarpFeedback`]: the warp of the whole stretch (the sum of the arrival
//! spacings over the sum of the stamp spacings, which is what the
//! per-datagram samples telescope to), its span and the number of sources it
//! hears. The sender takes the RAP step of [`WarpRate::adjust`] over that
//! span.
//!
//! # Loss is warp too
//!
//! A drop-tail queue that stays full holds the delay constant, so the
//! spacings agree and warp is 1 while the port drops what the senders send
//! beyond its rate. The receiver therefore counts the datagrams of the
//! stretch that never came (gaps in a channel's sequence numbers, not
//! filled by a retransmission) and scales the warp by (arrived + lost) /
//! arrived: the ratio of the rate the source sent at to the rate at which
//! its datagrams came through. For a FCFS port that is full, that is
//! λ/μ = ρ again, as warp is for a port whose queue grows.
//!
//! # Where senders start, and the fair share
//!
//! Warp only throttles: on a path whose queue is empty warp is 1, so a
//! sender never rises above where it started ([`crate::warp`], Stability).
//! Every sender therefore starts at the capacity C of the bottleneck
//! ([`RateControl::capacity`]) and stays below it. Senders that start
//! together at K times the capacity are beyond what equation 2 can settle,
//! so the receiver also says how many sources n it hears, and (our own
//! additions, not the paper's):
//!
//! - a sender whose n changes scales its rate by n_before/n_now: K senders
//!   that arrive at once come down to C/K at their first feedback, and when
//!   one leaves the others take up its share;
//! - the fairness term of [`WarpRate::share`] pulls λᵢ toward the fair share
//!   C/n, always from above, and from below only while warp ≤ 1 (the queue
//!   is not growing). Without it a sender that Warp slowed once (a burst of
//!   traffic from outside the job) would stay slow for ever; with it the
//!   senders probe back up to their share and Warp holds them where the
//!   queue stops growing.
//!
//! The fairness term of [`crate::warp`] moves senders toward the mean rate
//! the receiver measures from their stamps instead. On the wire that
//! measure mixes a source's rate with the order in which the sources'
//! datagrams met at the port, with stalls for loss recovery, and with the
//! last datagrams of a source that has finished; the share C/n needs no
//! measure, since C is given and n is counted.
//!
//! Neither half reads a clock; the endpoint passes `now`.

use std::time::Duration;

use bulkwire_wire::WarpFeedback;

use crate::time::Time;
use crate::warp::{WarpConfig, WarpEstimator, WarpRate};

/// Warp rate control of a sender (an endpoint's whole job, or one peer:
/// [`crate::Endpoint::set_rate_control`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RateControl {
    /// The capacity of the bottleneck the senders share (a receiver's port,
    /// a rate-limited link), bytes per second. A sender never goes faster.
    pub capacity: f64,
    /// The loop delay τ of equation 2: from a datagram's departure to its
    /// sender acting on the feedback it produced. ε and the fairness gain are
    /// set from it ([`WarpConfig::for_path`]).
    pub loop_delay: Duration,
    /// A receiver returns feedback once its samples from a source span this
    /// much of the source's clock.
    pub feedback_interval: Duration,
    /// How far ahead of its rate a sender may be, as time at the rate: the
    /// depth of its token bucket (at least [`RateControl::MIN_BURST`]
    /// datagrams), so that pacing survives a coarse timer.
    pub burst: Duration,
}

impl RateControl {
    /// The least depth of the token bucket, in datagrams.
    pub const MIN_BURST: f64 = 4.0;
    /// The least number of datagrams one feedback covers, unless they span
    /// this many feedback intervals (a slow sender): the warp of fewer is
    /// the order in which the sources' datagrams met at the port.
    pub const MIN_SAMPLES: u32 = 8;
    /// How long a receiver counts a source it no longer hears among the
    /// sources that share it, in loop delays: long enough that a sender
    /// stalled by a loss is not taken for gone.
    pub const COUNT_TIMEOUT_LOOPS: u32 = 8;

    /// Control for a bottleneck of `capacity` bytes per second, with the
    /// other parameters at their defaults: τ 4 ms (a LAN round trip under
    /// load and the stretch a feedback covers), feedback every millisecond
    /// (and [`RateControl::MIN_SAMPLES`] datagrams), a burst of a
    /// millisecond.
    pub fn with_capacity(capacity: f64) -> RateControl {
        RateControl {
            capacity,
            loop_delay: Duration::from_millis(4),
            feedback_interval: Duration::from_millis(1),
            burst: Duration::from_millis(1),
        }
    }

    /// The Warp parameters for senders of `datagram` bytes, `senders` of
    /// which may share the bottleneck: rates in datagrams per second,
    /// starting at the capacity and never above it.
    ///
    pub fn warp_config(&self, datagram: usize, senders: u32) -> WarpConfig {
        let capacity = self.capacity_datagrams(datagram);
        let path = WarpConfig::for_path(capacity, self.loop_delay, senders.max(1) as usize);
        WarpConfig { initial_rate: capacity, max_rate: capacity, ..path }
    }

    /// C in datagrams of `datagram` bytes per second.
    fn capacity_datagrams(&self, datagram: usize) -> f64 {
        self.capacity / datagram.max(1) as f64
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if !(self.capacity.is_finite() && self.capacity > 0.0) {
            return Err("rate control needs a positive capacity");
        }
        if self.loop_delay.is_zero() || self.feedback_interval.is_zero() {
            return Err("rate control needs a positive loop delay and feedback interval");
        }
        Ok(())
    }
}

impl Default for RateControl {
    /// A gigabit bottleneck.
    fn default() -> RateControl {
        RateControl::with_capacity(1e9 / 8.0)
    }
}

/// What one peer's pacing has done, for `run --stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateStats {
    /// λ now, datagrams per second (0 while the peer is not under control).
    pub rate: f64,
    /// The least λ so far.
    pub min_rate: f64,
    /// Feedback datagrams received from the peer (as a sender) and sent to
    /// it (as a receiver).
    pub feedback_received: u64,
    pub feedback_sent: u64,
    /// The last warp the peer returned.
    pub last_warp: f64,
    /// Times a datagram waited for the token bucket.
    pub paced: u64,
}

/// The sending half: λ and the token bucket, for one peer.
#[derive(Clone, Debug)]
pub(crate) struct Pacer {
    rate: WarpRate,
    /// Datagrams that may leave now; may fall to −1 (a datagram that left
    /// on the last token).
    tokens: f64,
    refilled: Time,
    burst: Duration,
    /// The receiver's count of sources at the last feedback.
    sources: u32,
    /// C, datagrams per second.
    capacity: f64,
    pub(crate) stats: RateStats,
}

impl Pacer {
    pub(crate) fn new(control: &RateControl, datagram: usize, senders: u32) -> Pacer {
        let rate = WarpRate::new(&control.warp_config(datagram, senders));
        let mut pacer = Pacer {
            capacity: control.capacity_datagrams(datagram),
            stats: RateStats { rate: rate.rate(), min_rate: rate.rate(), ..RateStats::default() },
            rate,
            tokens: 0.0,
            refilled: Time::ZERO,
            burst: control.burst,
            sources: 1,
        };
        pacer.tokens = pacer.depth();
        pacer
    }

    fn depth(&self) -> f64 {
        (self.rate.rate() * self.burst.as_secs_f64()).max(RateControl::MIN_BURST)
    }

    fn refill(&mut self, now: Time) {
        if now > self.refilled {
            let earned = self.rate.rate() * now.since(self.refilled).as_secs_f64();
            self.tokens = (self.tokens + earned).min(self.depth());
            self.refilled = now;
        }
    }

    /// Whether a datagram may leave now.
    pub(crate) fn may_send(&mut self, now: Time) -> bool {
        self.refill(now);
        self.tokens > 0.0
    }

    /// A data datagram left.
    pub(crate) fn sent(&mut self) {
        self.tokens -= 1.0;
    }

    /// A datagram waited for a token.
    pub(crate) fn waited(&mut self) {
        self.stats.paced += 1;
    }

    /// When the next datagram may leave.
    pub(crate) fn next_send(&self) -> Time {
        if self.tokens > 0.0 {
            return self.refilled;
        }
        let rate = self.rate.rate().max(f64::MIN_POSITIVE);
        // A nanosecond past the instant the bucket crosses zero.
        self.refilled + Duration::from_secs_f64(((-self.tokens) / rate).min(1e6)) + Duration::from_nanos(1)
    }

    pub(crate) fn on_feedback(&mut self, now: Time, feedback: &WarpFeedback) {
        self.refill(now);
        if feedback.sources != self.sources {
            // The warp of this stretch was made at the rate of the old
            // count; the new count sets the rate, and the next stretch
            // shows what is left to correct.
            let scaled = self.rate.rate() * self.sources as f64 / feedback.sources as f64;
            self.rate.set_rate(scaled);
            self.sources = feedback.sources;
        } else {
            let span = Duration::from_nanos(feedback.span);
            self.rate.adjust(feedback.warp, span);
            let gap = self.capacity / self.sources as f64 - self.rate.rate();
            if gap < 0.0 || feedback.warp <= 1.0 {
                self.rate.share(gap, span);
            }
        }
        self.stats.rate = self.rate.rate();
        self.stats.min_rate = self.stats.min_rate.min(self.stats.rate);
        self.stats.feedback_received += 1;
        self.stats.last_warp = feedback.warp;
    }
}

/// What a receiver has measured of one source since its last feedback.
#[derive(Clone, Copy, Debug, Default)]
struct Stretch {
    arrived: f64,
    sent: f64,
    samples: u32,
    /// Datagrams the sequence numbers say were sent and did not come.
    lost: u32,
}

/// The receiving half: one estimator over every source, and the stretch
/// each source's next feedback covers.
#[derive(Clone, Debug)]
pub(crate) struct FeedbackMaker {
    estimator: WarpEstimator,
    stretches: Vec<Stretch>,
    /// When each source was last heard.
    heard: Vec<Option<Time>>,
    /// The next sequence number expected of each source's channels.
    next_sequence: Vec<u64>,
    channels: usize,
    interval: Duration,
    count_timeout: Duration,
}

impl FeedbackMaker {
    /// Bytes of the per-source state: the estimator's histories, the
    /// stretches, when each was heard, and each source's next sequence
    /// number per channel.
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.estimator.heap_bytes()
            + self.stretches.capacity() * size_of::<Stretch>()
            + self.heard.capacity() * size_of::<Option<Time>>()
            + self.next_sequence.capacity() * size_of::<u64>()
    }

    pub(crate) fn new(ranks: u32, channels: u16, control: &RateControl, datagram: usize) -> FeedbackMaker {
        let cfg = control.warp_config(datagram, ranks.saturating_sub(1));
        FeedbackMaker {
            estimator: WarpEstimator::new(ranks, &cfg),
            stretches: vec![Stretch::default(); ranks as usize],
            heard: vec![None; ranks as usize],
            next_sequence: vec![0; ranks as usize * channels as usize],
            channels: channels as usize,
            interval: control.feedback_interval,
            count_timeout: control.loop_delay * RateControl::COUNT_TIMEOUT_LOOPS,
        }
    }

    /// A flagged datagram from `source` on `channel`, number `sequence`,
    /// stamped `sent`, arrived at `now`. Returns the feedback to send when
    /// the stretch is long enough.
    pub(crate) fn observe(
        &mut self,
        source: u32,
        channel: u16,
        sequence: u64,
        sent: Time,
        now: Time,
    ) -> Option<WarpFeedback> {
        *self.heard.get_mut(source as usize)? = Some(now);
        let next = self.next_sequence.get_mut(source as usize * self.channels + channel as usize)?;
        let lost = sequence.saturating_sub(*next).min(u32::MAX as u64) as u32;
        *next = (*next).max(sequence.saturating_add(1));
        let stretch = &mut self.stretches[source as usize];
        stretch.lost = stretch.lost.saturating_add(lost);
        let sample = self.estimator.observe(source, sent, now)?;
        let stretch = &mut self.stretches[source as usize];
        stretch.sent += sample.span.as_secs_f64();
        stretch.arrived += sample.warp * sample.span.as_secs_f64();
        stretch.samples += 1;
        let interval = self.interval.as_secs_f64();
        let enough =
            stretch.samples >= RateControl::MIN_SAMPLES || stretch.sent >= RateControl::MIN_SAMPLES as f64 * interval;
        if stretch.sent < interval || !enough {
            return None;
        }
        let Stretch { arrived, sent, samples, lost } = std::mem::take(stretch);
        let sources = self.active_sources(now).max(1);
        let through = (samples as f64 + lost as f64) / samples as f64;
        Some(WarpFeedback {
            warp: (arrived / sent * through).max(f64::MIN_POSITIVE),
            span: (sent * 1e9).round().max(1.0) as u64,
            sources,
        })
    }

    /// Sources heard within the count timeout.
    fn active_sources(&self, now: Time) -> u32 {
        self.heard.iter().flatten().filter(|&&t| now.since(t) <= self.count_timeout).count() as u32
    }
}
