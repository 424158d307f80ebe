//! Clock resynchronisation (seed 000 §3.3, the "resynchronizing task").
//!
//! One-way latency compares a peer's timestamp with the local clock, so the
//! receiver must know how the two clocks differ. A periodic NTP-style
//! exchange on the premium path gives samples of the offset: the requester
//! sends at `t1` (its clock), the peer notes arrival `t2` and departure `t3`
//! (its clock), the reply arrives at `t4`; then
//!
//! ```text
//! offset = ((t2 - t1) + (t3 - t4)) / 2      (peer clock minus local clock)
//! delay  = (t4 - t1) - (t3 - t2)            (round trip on the wire)
//! ```
//!
//! A sample is exact when the two directions take equally long; queueing on
//! one direction shifts it by half the extra delay. So, as NTP's clock
//! filter does, the samples with the smallest round trips are trusted: of the
//! last [`MAX_SAMPLES`], the better half by delay. A straight line fitted
//! through them by least squares gives offset and drift (crystal clocks run
//! at slightly different rates), so the estimate stays good between
//! exchanges.

use std::collections::VecDeque;
use std::time::Duration;

use bulkwire_wire::{ClockSyncKind, ClockSyncPayload};

use crate::time::Time;

/// Samples kept for the fit.
pub const MAX_SAMPLES: usize = 16;

/// Exchanges made at once when the peer is first heard from, a twentieth of
/// the period apart, as NTP's initial burst does: one or two samples fit a
/// drift badly (two samples 1 ms apart with 0.1 us of error each already
/// give 100 ppm), and latency is judged on the estimate from the start.
pub const BURST: usize = 8;

/// Largest drift believed, as a fraction (1000 ppm): anything beyond is a
/// bad fit, not a clock.
const MAX_DRIFT: f64 = 1e-3;

/// How the peer's clock relates to ours: `peer = local + offset + drift *
/// (local - at)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockEstimate {
    /// Nanoseconds the peer's clock is ahead of ours at local time `at`.
    pub offset: f64,
    /// Nanoseconds the offset grows per nanosecond of local time.
    pub drift: f64,
    pub at: Time,
}

impl ClockEstimate {
    /// Perfect clocks: no offset, no drift.
    pub const PERFECT: ClockEstimate = ClockEstimate { offset: 0.0, drift: 0.0, at: Time::ZERO };

    /// The offset at local time `now`, in nanoseconds.
    pub fn offset_at(&self, now: Time) -> f64 {
        self.offset + self.drift * (now.as_nanos() as f64 - self.at.as_nanos() as f64)
    }

    /// How long ago a packet stamped `peer_timestamp` by the peer left, seen
    /// from local time `now`: the one-way latency (zero if the estimate puts
    /// the departure in the future).
    pub fn latency(&self, peer_timestamp: u64, now: Time) -> Duration {
        let sent_local = peer_timestamp as f64 - self.offset_at(now);
        let latency = now.as_nanos() as f64 - sent_local;
        if latency.is_finite() && latency > 0.0 {
            Duration::from_nanos(latency.min(u64::MAX as f64) as u64)
        } else {
            Duration::ZERO
        }
    }

    /// The local time at which a peer timestamp falls.
    pub fn to_local(&self, peer_timestamp: u64, now: Time) -> Time {
        let local = peer_timestamp as f64 - self.offset_at(now);
        if local.is_finite() && local > 0.0 {
            Time::from_nanos(local.min(u64::MAX as f64) as u64)
        } else {
            Time::ZERO
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Local time halfway through the exchange.
    at: u64,
    offset: f64,
    delay: u64,
}

/// The requester's side of the exchange with one peer, and the estimate it
/// keeps. The peer answers with [`reply`].
#[derive(Clone, Debug)]
pub struct ClockSync {
    period: Duration,
    next_request: Time,
    request_due: bool,
    /// `t1` of the request in flight; a reply to any other is stale.
    outstanding: Option<u64>,
    samples: VecDeque<Sample>,
    estimate: Option<ClockEstimate>,
    /// The least round trip of any exchange so far.
    least_delay: Option<u64>,
}

impl ClockSync {
    /// The first exchange starts at once.
    pub fn new(period: Duration) -> ClockSync {
        ClockSync {
            period,
            next_request: Time::ZERO,
            request_due: false,
            outstanding: None,
            samples: VecDeque::with_capacity(MAX_SAMPLES),
            estimate: None,
            least_delay: None,
        }
    }

    /// The current estimate; `None` until a first reply arrived.
    pub fn estimate(&self) -> Option<ClockEstimate> {
        self.estimate
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        (!self.request_due).then_some(self.next_request)
    }

    /// Bytes of the kept exchanges.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.samples.capacity() * std::mem::size_of::<Sample>()
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if now >= self.next_request {
            self.request_due = true;
            let gap = if self.settled() { self.period } else { self.period / 20 };
            self.next_request = now + gap;
        }
    }

    /// The least round trip of the exchanges so far (on the premium path,
    /// where they travel): twice the least one-way delay of the path
    /// between the two hosts, queues aside.
    pub fn least_round_trip(&self) -> Option<Duration> {
        self.least_delay.map(Duration::from_nanos)
    }

    /// Whether the initial burst of exchanges has given its samples.
    pub fn settled(&self) -> bool {
        self.samples.len() >= BURST
    }

    pub fn has_request(&self) -> bool {
        self.request_due
    }

    /// The request to send now, if one is due. An unanswered earlier request
    /// is forgotten: its reply, if it comes, is ignored.
    pub fn poll_request(&mut self, now: Time) -> Option<ClockSyncPayload> {
        if !std::mem::take(&mut self.request_due) {
            return None;
        }
        self.outstanding = Some(now.as_nanos());
        Some(ClockSyncPayload::request(now.as_nanos()))
    }

    /// A reply arrived at `now` (`t4`). Returns whether it gave a sample.
    pub fn on_reply(&mut self, now: Time, reply: &ClockSyncPayload) -> bool {
        if reply.kind != ClockSyncKind::Reply || self.outstanding != Some(reply.t1) {
            return false;
        }
        self.outstanding = None;
        let t4 = now.as_nanos();
        let (t1, t2, t3) = (reply.t1, reply.t2, reply.t3);
        if t4 < t1 || t3 < t2 || t4 - t1 < t3 - t2 {
            return false; // a peer that held the request longer than the round trip
        }
        let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) as f64 / 2.0;
        let delay = (t4 - t1) - (t3 - t2);
        self.least_delay = Some(self.least_delay.map_or(delay, |l| l.min(delay)));
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample { at: t1 + (t4 - t1) / 2, offset, delay });
        self.estimate = Some(fit(&self.samples));
        true
    }
}

/// The peer's answer to a request that arrived at `arrived` (`t2`), sent
/// at `now` (`t3`).
pub fn reply(request: &ClockSyncPayload, arrived: Time, now: Time) -> ClockSyncPayload {
    ClockSyncPayload { kind: ClockSyncKind::Reply, t1: request.t1, t2: arrived.as_nanos(), t3: now.as_nanos() }
}

/// Least-squares line through the better half of the samples by delay.
fn fit(samples: &VecDeque<Sample>) -> ClockEstimate {
    let mut best: Vec<Sample> = samples.iter().copied().collect();
    best.sort_by_key(|s| (s.delay, s.at));
    best.truncate(best.len().div_ceil(2).max(1));
    let newest = samples.back().map_or(0, |s| s.at);
    let n = best.len() as f64;
    // Times relative to the newest sample keep the sums small and exact enough.
    let x = |s: &Sample| s.at as f64 - newest as f64;
    let mean_x = best.iter().map(x).sum::<f64>() / n;
    let mean_y = best.iter().map(|s| s.offset).sum::<f64>() / n;
    let sxx: f64 = best.iter().map(|s| (x(s) - mean_x).powi(2)).sum();
    let sxy: f64 = best.iter().map(|s| (x(s) - mean_x) * (s.offset - mean_y)).sum();
    let drift = if best.len() >= 2 && sxx > 0.0 { (sxy / sxx).clamp(-MAX_DRIFT, MAX_DRIFT) } else { 0.0 };
    // The line through the means, read at the newest sample.
    ClockEstimate { offset: mean_y - drift * mean_x, drift, at: Time::from_nanos(newest) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer clock `peer = true * (1 + drift) + offset` and a local clock
    /// equal to true time; one-way delays `up` and `down`.
    fn exchange(sync: &mut ClockSync, t: u64, offset: f64, drift: f64, up: u64, down: u64) {
        let peer = |true_ns: u64| (true_ns as f64 * (1.0 + drift) + offset) as u64;
        let now = Time::from_nanos(t);
        sync.handle_timeout(now);
        let request = sync.poll_request(now).expect("due");
        let arrived = peer(t + up);
        let answer = ClockSyncPayload { kind: ClockSyncKind::Reply, t1: request.t1, t2: arrived, t3: arrived + 1000 };
        // The peer's 1000 ns of holding are as long on the local clock, to within a fraction of a nanosecond.
        let back = t + up + 1000 + down;
        assert!(sync.on_reply(Time::from_nanos(back), &answer));
    }

    #[test]
    fn offset_alone_is_exact_with_symmetric_delays() {
        let mut sync = ClockSync::new(Duration::from_millis(100));
        exchange(&mut sync, 1_000_000, 5e6, 0.0, 40_000, 40_000);
        let e = sync.estimate().unwrap();
        assert!((e.offset - 5e6).abs() < 1.0, "{e:?}");
        assert_eq!(e.drift, 0.0);
    }

    #[test]
    fn drift_is_fitted_and_slow_samples_are_ignored() {
        let drift = 80e-6;
        let mut sync = ClockSync::new(Duration::from_millis(100));
        for i in 0..MAX_SAMPLES as u64 {
            // Every third exchange meets a queue on the way out.
            let up = if i % 3 == 0 { 2_000_000 } else { 30_000 };
            exchange(&mut sync, 10_000_000 + i * 100_000_000, -3e6, drift, up, 30_000);
        }
        let e = sync.estimate().unwrap();
        assert!((e.drift - drift).abs() < 2e-6, "drift {e:?}");
        // Predict the offset half a second after the last exchange.
        let later = Time::from_nanos(10_000_000 + 15 * 100_000_000 + 500_000_000);
        let truth = -3e6 + drift * later.as_nanos() as f64;
        assert!((e.offset_at(later) - truth).abs() < 1_000.0, "{} vs {truth}", e.offset_at(later));
    }

    #[test]
    fn stale_and_impossible_replies_are_ignored() {
        let mut sync = ClockSync::new(Duration::from_millis(100));
        sync.handle_timeout(Time::ZERO);
        let first = sync.poll_request(Time::from_nanos(10)).unwrap();
        sync.handle_timeout(Time::from_nanos(200_000_000));
        let second = sync.poll_request(Time::from_nanos(200_000_000)).unwrap();
        let stale = ClockSyncPayload { kind: ClockSyncKind::Reply, t1: first.t1, t2: 5, t3: 6 };
        assert!(!sync.on_reply(Time::from_nanos(200_000_100), &stale));
        // Held longer than the whole round trip: a lie.
        let held = ClockSyncPayload { kind: ClockSyncKind::Reply, t1: second.t1, t2: 0, t3: 1_000_000_000 };
        assert!(!sync.on_reply(Time::from_nanos(200_000_100), &held));
        assert!(sync.estimate().is_none());
    }

    #[test]
    fn latency_maps_peer_timestamps() {
        let e = ClockEstimate { offset: 1_000.0, drift: 0.0, at: Time::ZERO };
        // Sent at peer time 11_000 = local 10_000, seen at local 10_500.
        assert_eq!(e.latency(11_000, Time::from_nanos(10_500)), Duration::from_nanos(500));
        assert_eq!(e.latency(20_000, Time::from_nanos(10_500)), Duration::ZERO);
        assert_eq!(e.to_local(11_000, Time::from_nanos(10_500)), Time::from_nanos(10_000));
    }

    #[test]
    fn the_first_exchanges_come_in_a_burst_then_one_a_period() {
        let period = Duration::from_millis(100);
        let mut sync = ClockSync::new(period);
        let mut at = Vec::new();
        while at.len() < BURST + 2 {
            let due = sync.poll_timeout().expect("a next exchange");
            at.push(due.as_nanos());
            exchange(&mut sync, due.as_nanos(), 1e6, 0.0, 30_000, 30_000);
            assert_eq!(sync.settled(), at.len() >= BURST);
        }
        let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let burst = (period / 20).as_nanos() as u64;
        assert!(gaps[..BURST - 1].iter().all(|&g| g == burst), "{gaps:?}");
        assert_eq!(gaps[BURST], period.as_nanos() as u64, "{gaps:?}");
    }
}
