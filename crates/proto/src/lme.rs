//! The Latency Monitoring Engine (seed 000 §3.3).
//!
//! The sender stamps a probe every monitoring interval and sends it on the
//! ordinary path, whatever the mode ([`ProbeSchedule`]). The receiver
//! ([`LatencyMonitor`]) maps the sender's timestamp onto its own clock (the
//! clock estimate of [`crate::clock`]) and takes the difference to the
//! arrival as the one-way latency: the receiver measures, so the return path
//! plays no part. Data packets on the ordinary path carry a timestamp too and
//! give samples between probes, which makes the engine react faster.
//!
//! A probe is expected at its sender timestamp mapped onto the receiver's
//! clock; the next one, an interval after the last one seen. A probe not
//! seen TL after that time counts as lost. What to do about a sample or a
//! loss is for the ECE to judge ([`crate::ece`]).

use std::time::Duration;

use bulkwire_wire::ProbePayload;

use crate::clock::ClockEstimate;
use crate::time::Time;

/// Shortest probe interval a receiver believes; a peer announcing less
/// would make it count losses at an absurd rate.
const MIN_INTERVAL: Duration = Duration::from_micros(1);

/// The sender's side: when the next probe leaves, and its number.
#[derive(Clone, Debug, Default)]
pub struct ProbeSchedule {
    next_at: Option<Time>,
    due: bool,
    number: u64,
    /// When the last probe left.
    last_at: Option<Time>,
}

impl ProbeSchedule {
    /// Starts probing: the first probe leaves at the next timeout.
    pub fn start(&mut self) {
        if self.next_at.is_none() && !self.due {
            self.next_at = Some(Time::ZERO);
        }
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        if self.due {
            return None;
        }
        self.next_at
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.next_at.is_some_and(|at| now >= at) {
            self.due = true;
            self.next_at = None;
        }
    }

    /// Brings the next probe forward to at most `within` after the last
    /// one, or to now if none has left yet. A probe earlier than its
    /// predecessor announced is harmless to the receiver: only a late one
    /// counts as lost.
    pub fn hasten(&mut self, within: Duration) {
        match (self.next_at, self.last_at) {
            (Some(at), Some(last)) => self.next_at = Some(at.min(last + within)),
            (Some(_), None) => self.next_at = Some(Time::ZERO),
            (None, _) => {} // due already, or not started
        }
    }

    /// When the last probe left.
    pub fn last_sent(&self) -> Option<Time> {
        self.last_at
    }

    pub fn is_due(&self) -> bool {
        self.due
    }

    /// The probe to send now, if one is due; the next one is an interval
    /// after this one really leaves, which is what its timestamp says.
    pub fn poll_probe(&mut self, now: Time, interval: Duration, applied_epoch: u32) -> Option<ProbePayload> {
        if !std::mem::take(&mut self.due) {
            return None;
        }
        self.next_at = Some(now + interval);
        self.last_at = Some(now);
        let number = self.number;
        self.number += 1;
        Some(ProbePayload { number, interval: interval.as_nanos().min(u64::MAX as u128) as u64, applied_epoch })
    }
}

/// What the monitor learnt from an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A latency sample from a probe or a data packet stamped `timestamp`.
    Sample { latency: Duration, timestamp: u64 },
    /// `count` probes were lost; the first carried (would have carried)
    /// sender timestamp `timestamp`.
    Lost { count: u64, timestamp: u64 },
}

/// The receiver's side for one peer: which probe comes next and when, and
/// the latency seen.
#[derive(Clone, Debug, Default)]
pub struct LatencyMonitor {
    /// Probes below this number are accounted for (arrived or lost).
    next_number: u64,
    /// Sender timestamp the next probe should carry, once one was seen.
    expected_timestamp: Option<u64>,
    interval: u64,
    /// Local time after which the next probe is lost.
    deadline: Option<Time>,
    last_latency: Option<Duration>,
    /// The newest probe that arrived, whatever its deadline said.
    last_arrived: Option<u64>,
}

impl LatencyMonitor {
    /// The last latency measured.
    pub fn last_latency(&self) -> Option<Duration> {
        self.last_latency
    }

    /// A probe arrived at `now`, stamped `timestamp` by the sender. Returns
    /// the probes found missing by its number (older than it, not yet
    /// counted), then its sample; an old or repeated probe gives nothing.
    pub fn on_probe(
        &mut self,
        now: Time,
        timestamp: u64,
        probe: &ProbePayload,
        clock: Option<&ClockEstimate>,
        loss_threshold: Duration,
    ) -> (Option<Observation>, Option<Observation>) {
        if self.last_arrived.is_some_and(|n| probe.number <= n) {
            return (None, None); // old or repeated
        }
        self.last_arrived = Some(probe.number);
        let interval = probe.interval.max(MIN_INTERVAL.as_nanos() as u64);
        // Probes skipped since the last one accounted for are lost; a probe
        // already counted lost at its deadline may still come, late.
        let gap = probe.number.saturating_sub(self.next_number);
        let lost = (gap > 0 && self.expected_timestamp.is_some())
            .then(|| Observation::Lost { count: gap, timestamp: self.expected_timestamp.unwrap_or(timestamp) });
        self.next_number = self.next_number.max(probe.number + 1);
        self.interval = interval;
        // The probes still awaited are due an interval apart from this one's
        // real departure, late or not: a sender's probes leave a little
        // later than an interval apart, and deadlines that only added
        // intervals would run ahead of them, declare every probe lost before
        // it came and never hear of the path again.
        let ahead = self.next_number - probe.number;
        self.expected_timestamp = Some(timestamp.saturating_add(ahead.saturating_mul(interval)));
        let Some(clock) = clock else {
            // Without a clock estimate there is nothing to compare with yet.
            self.deadline = None;
            return (lost, None);
        };
        self.arm(now, clock, loss_threshold);
        (lost, Some(self.sample(now, timestamp, clock)))
    }

    /// A data packet that travelled on the ordinary path, stamped `timestamp`.
    pub fn on_data(&mut self, now: Time, timestamp: u64, clock: &ClockEstimate) -> Observation {
        self.sample(now, timestamp, clock)
    }

    fn sample(&mut self, now: Time, timestamp: u64, clock: &ClockEstimate) -> Observation {
        let latency = clock.latency(timestamp, now);
        self.last_latency = Some(latency);
        Observation::Sample { latency, timestamp }
    }

    fn arm(&mut self, now: Time, clock: &ClockEstimate, loss_threshold: Duration) {
        self.deadline = self.expected_timestamp.map(|ts| clock.to_local(ts, now) + loss_threshold);
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        self.deadline
    }

    /// The deadline passed: every probe whose deadline is past is lost (more
    /// than one if the caller was late), and the next is expected an
    /// interval later.
    pub fn handle_timeout(
        &mut self,
        now: Time,
        clock: &ClockEstimate,
        loss_threshold: Duration,
    ) -> Option<Observation> {
        let deadline = self.deadline.filter(|&d| now >= d)?;
        let expected = self.expected_timestamp?;
        let count = 1 + now.since(deadline).as_nanos() as u64 / self.interval;
        self.next_number = self.next_number.saturating_add(count);
        self.expected_timestamp = Some(expected.saturating_add(count.saturating_mul(self.interval)));
        self.arm(now, clock, loss_threshold);
        Some(Observation::Lost { count, timestamp: expected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn probe(number: u64) -> ProbePayload {
        ProbePayload { number, interval: 100 * MS, applied_epoch: 0 }
    }

    #[test]
    fn schedule_sends_one_probe_per_interval() {
        let mut s = ProbeSchedule::default();
        assert_eq!(s.poll_timeout(), None);
        s.start();
        s.handle_timeout(Time::from_nanos(5));
        let p = s.poll_probe(Time::from_nanos(5), Duration::from_millis(100), 2).unwrap();
        assert_eq!((p.number, p.applied_epoch), (0, 2));
        assert!(s.poll_probe(Time::from_nanos(6), Duration::from_millis(100), 2).is_none());
        assert_eq!(s.poll_timeout(), Some(Time::from_nanos(5 + 100 * MS)));
    }

    #[test]
    fn latency_is_measured_against_the_expected_arrival() {
        let mut m = LatencyMonitor::default();
        let clock = ClockEstimate { offset: 1000.0, drift: 0.0, at: Time::ZERO };
        // Stamped 10 ms on the sender's clock (9.999 ms here), seen at 10.2 ms.
        let (lost, sample) = m.on_probe(
            Time::from_nanos(10 * MS + 200_000),
            10 * MS,
            &probe(0),
            Some(&clock),
            Duration::from_millis(100),
        );
        assert_eq!(lost, None);
        assert_eq!(sample, Some(Observation::Sample { latency: Duration::from_nanos(201_000), timestamp: 10 * MS }));
        // The next is expected at 110 ms (sender clock), lost 100 ms later.
        assert_eq!(m.poll_timeout(), Some(Time::from_nanos(210 * MS - 1000)));
    }

    #[test]
    fn a_probe_not_seen_tl_after_its_expected_time_is_lost() {
        let tl = Duration::from_millis(100);
        let clock = ClockEstimate::PERFECT;
        let mut m = LatencyMonitor::default();
        m.on_probe(Time::from_nanos(50_000), 0, &probe(0), Some(&clock), tl);
        let deadline = m.poll_timeout().unwrap();
        assert_eq!(deadline, Time::from_nanos(200 * MS));
        // Not before.
        assert_eq!(m.handle_timeout(Time::from_nanos(200 * MS - 1), &clock, tl), None);
        assert_eq!(m.handle_timeout(deadline, &clock, tl), Some(Observation::Lost { count: 1, timestamp: 100 * MS }));
        // Woken 150 ms late: two more gone.
        assert_eq!(
            m.handle_timeout(Time::from_nanos(450 * MS), &clock, tl),
            Some(Observation::Lost { count: 2, timestamp: 200 * MS })
        );
        // Probe 4 arrives: nothing more is counted lost, and it is sampled.
        let (lost, sample) = m.on_probe(Time::from_nanos(400 * MS + 60_000), 400 * MS, &probe(4), Some(&clock), tl);
        assert_eq!(lost, None);
        assert!(matches!(sample, Some(Observation::Sample { .. })));
        // Old and repeated probes are ignored.
        assert_eq!(m.on_probe(Time::from_nanos(401 * MS), 300 * MS, &probe(3), Some(&clock), tl), (None, None));
        assert_eq!(m.on_probe(Time::from_nanos(401 * MS), 400 * MS, &probe(4), Some(&clock), tl), (None, None));
    }

    #[test]
    fn a_gap_in_probe_numbers_is_loss_without_waiting() {
        let tl = Duration::from_millis(500);
        let clock = ClockEstimate::PERFECT;
        let mut m = LatencyMonitor::default();
        m.on_probe(Time::from_nanos(50_000), 0, &probe(0), Some(&clock), tl);
        let (lost, _) = m.on_probe(Time::from_nanos(300 * MS), 300 * MS, &probe(3), Some(&clock), tl);
        assert_eq!(lost, Some(Observation::Lost { count: 2, timestamp: 100 * MS }));
    }

    #[test]
    fn an_absurd_interval_cannot_spin() {
        let clock = ClockEstimate::PERFECT;
        let mut m = LatencyMonitor::default();
        let p = ProbePayload { number: 0, interval: 0, applied_epoch: 0 };
        m.on_probe(Time::ZERO, 0, &p, Some(&clock), Duration::from_nanos(1));
        let lost = m.handle_timeout(Time::from_nanos(u64::MAX / 2), &clock, Duration::from_nanos(1));
        assert!(matches!(lost, Some(Observation::Lost { count, .. }) if count > 1_000_000));
        assert!(m.poll_timeout().unwrap() > Time::from_nanos(u64::MAX / 2));
    }

    #[test]
    fn probes_late_past_their_deadlines_still_set_the_schedule() {
        // The sender's probes leave 10.5 ms apart (an interval of 10 ms
        // after each really left, a little late); TL is 10 ms.
        let mut m = LatencyMonitor::default();
        let clock = ClockEstimate::PERFECT;
        let tl = Duration::from_millis(10);
        let p = |number| ProbePayload { number, interval: 10 * MS, applied_epoch: 0 };
        let sent = |n: u64| n * 10_500_000;
        let mut heard_after_the_queue = 0;
        for n in 0..=80 {
            // Probes 1 to 30 wait 25 ms in a queue; the others 0.1 ms.
            let delay = if (1..=30).contains(&n) { 25 * MS } else { MS / 10 };
            let arrival = Time::from_nanos(sent(n) + delay);
            while let Some(d) = m.poll_timeout().filter(|&d| d <= arrival) {
                m.handle_timeout(d, &clock, tl);
            }
            let (_, sample) = m.on_probe(arrival, sent(n), &p(n), Some(&clock), tl);
            if (1..=30).contains(&n) {
                let late =
                    matches!(sample, Some(Observation::Sample { latency, .. }) if latency >= Duration::from_millis(25));
                assert!(sample.is_none() || late, "probe {n}: {sample:?}");
            } else {
                heard_after_the_queue += u32::from(sample.is_some());
            }
        }
        // Every probe after the queue gives its sample: the deadlines did
        // not run ahead of the probes for good.
        assert_eq!(heard_after_the_queue, 51);
        // A probe already heard gives nothing again.
        assert_eq!(m.on_probe(Time::from_nanos(sent(80) + MS), sent(80), &p(80), Some(&clock), tl), (None, None));
    }
}
