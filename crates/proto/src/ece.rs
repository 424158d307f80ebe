//! The Effective Communication Engine (seed 000 §3.2): which path carries a
//! peer's data, decided by the receiver from what the latency monitor sees.
//!
//! - Low-latency mode: data and retransmissions on the ordinary path.
//! - High-latency mode: all of them on the premium path.
//!
//! The receiver judges each observation of the ordinary path ([`ModeJudge`]):
//! in low-latency mode a latency above TM or a lost probe asks for
//! high-latency mode; in high-latency mode a latency below Tm asks for
//! low-latency mode again. Between Tm and TM nothing changes, which is what
//! keeps a latency near one threshold from making the sender flap. A decision
//! travels in an LSTAT on the premium path, with the receiver's status, and
//! the sender switches and resends what the status shows missing
//! ([`SendingMode`]). Probes and their samples always use the ordinary path.
//!
//! The mode belongs to a pair of ranks, not to one of their channels: all
//! channels between two ranks share the same two paths, so one monitor
//! measures them all and one decision moves them all, instead of probing
//! each channel and letting channels of one pair disagree about one queue.
//! The status in an LSTAT is per channel, so a decision goes out on the
//! pair's first channel and on every other channel that waits for a packet.
//!
//! [`PeerLink`] puts the engines of one peer together: probe schedule,
//! monitor, clock exchange, judge and sending mode.

use std::time::Duration;

use bulkwire_wire::{
    job_tag, seal, ClockSyncKind, ClockSyncPayload, Flags, Header, LatencyStatus, LstatReason, PacketType,
    ProbePayload, WireMode, HEADER_LEN,
};

use crate::clock::{self, ClockEstimate, ClockSync};
use crate::config::{Config, LatencyConfig, Thresholds};
use crate::lme::{LatencyMonitor, Observation, ProbeSchedule};
use crate::path::Path;
use crate::stats::LatencyStats;
use crate::time::Time;

/// The path mode of the data sent to one peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Data and retransmissions on the ordinary path.
    #[default]
    LowLatency,
    /// Data and retransmissions on the premium path.
    HighLatency,
}

impl Mode {
    /// The path that data takes in this mode.
    pub fn data_path(self) -> Path {
        match self {
            Mode::LowLatency => Path::Ordinary,
            Mode::HighLatency => Path::Premium,
        }
    }

    fn to_wire(self) -> WireMode {
        match self {
            Mode::LowLatency => WireMode::Low,
            Mode::HighLatency => WireMode::High,
        }
    }

    fn from_wire(mode: WireMode) -> Mode {
        match mode {
            WireMode::Low => Mode::LowLatency,
            WireMode::High => Mode::HighLatency,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::LowLatency => "low-latency",
            Mode::HighLatency => "high-latency",
        })
    }
}

/// A mode decision of the receiver, as an LSTAT carries it (each channel adds
/// its own status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub epoch: u32,
    pub mode: Mode,
    pub reason: LstatReason,
    pub probe_timestamp: u64,
    pub latency: Duration,
}

impl Decision {
    pub(crate) fn status(&self, known_sent: u64) -> LatencyStatus {
        LatencyStatus {
            epoch: self.epoch,
            mode: self.mode.to_wire(),
            reason: self.reason,
            probe_timestamp: self.probe_timestamp,
            latency: self.latency.as_nanos().min(u64::MAX as u128) as u64,
            known_sent,
        }
    }
}

/// Calibration of a peer's thresholds: the least of the first samples, or
/// half the least round trip of the clock exchanges if that is less.
#[derive(Clone, Copy, Debug, Default)]
struct Calibration {
    samples: u32,
    least: Option<Duration>,
    done: Option<Thresholds>,
}

/// The receiver's judgement of the ordinary path of one peer, with
/// hysteresis between TM and Tm.
#[derive(Clone, Debug, Default)]
pub(crate) struct ModeJudge {
    requested: Mode,
    epoch: u32,
    last: Option<Decision>,
    issued_at: Option<Time>,
}

impl ModeJudge {
    pub(crate) fn requested(&self) -> Mode {
        self.requested
    }

    /// A new decision if the observation calls for one, against TM and Tm.
    pub(crate) fn judge(&mut self, now: Time, observation: Observation, thresholds: Thresholds) -> Option<Decision> {
        let Thresholds { high, low } = thresholds;
        let (mode, reason, probe_timestamp, latency) = match (self.requested, observation) {
            (Mode::LowLatency, Observation::Sample { latency, timestamp }) if latency > high => {
                (Mode::HighLatency, LstatReason::LatencyHigh, timestamp, latency)
            }
            (Mode::LowLatency, Observation::Lost { timestamp, .. }) => {
                (Mode::HighLatency, LstatReason::ProbeLost, timestamp, Duration::ZERO)
            }
            (Mode::HighLatency, Observation::Sample { latency, timestamp }) if latency < low => {
                (Mode::LowLatency, LstatReason::LatencyLow, timestamp, latency)
            }
            _ => return None,
        };
        Some(self.decide(now, mode, reason, probe_timestamp, latency))
    }

    /// An answer to a probe that asked for one: the mode the judge wants
    /// now, as a new decision (a new epoch), so that the sender, waiting on
    /// the premium path, learns it at once.
    pub(crate) fn confirm(&mut self, now: Time, timestamp: u64, latency: Duration) -> Decision {
        let reason = match self.requested {
            Mode::LowLatency => LstatReason::LatencyLow,
            Mode::HighLatency => LstatReason::LatencyHigh,
        };
        self.decide(now, self.requested, reason, timestamp, latency)
    }

    /// Records a decision for `mode` under a new epoch, issued `now`.
    fn decide(
        &mut self,
        now: Time,
        mode: Mode,
        reason: LstatReason,
        probe_timestamp: u64,
        latency: Duration,
    ) -> Decision {
        self.requested = mode;
        self.epoch = self.epoch.wrapping_add(1).max(1);
        let decision = Decision { epoch: self.epoch, mode, reason, probe_timestamp, latency };
        self.last = Some(decision);
        self.issued_at = Some(now);
        decision
    }

    /// The last decision again, if the sender shows (in a probe) that it has
    /// not applied it and it was issued at least `after` ago: the LSTAT or
    /// its copies were lost.
    pub(crate) fn repeat(&mut self, now: Time, applied_epoch: u32, after: Duration) -> Option<Decision> {
        let last = self.last?;
        if applied_epoch == last.epoch || self.issued_at.is_some_and(|at| now < at + after) {
            return None;
        }
        self.issued_at = Some(now);
        Some(last)
    }
}

/// The sender's mode toward one peer.
#[derive(Clone, Debug, Default)]
pub(crate) struct SendingMode {
    mode: Mode,
    applied_epoch: u32,
}

impl SendingMode {
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Applies a newer decision; returns the new mode if it changed. An older
    /// or repeated LSTAT (reordered, duplicated) changes nothing.
    pub(crate) fn apply(&mut self, status: &LatencyStatus) -> Option<Mode> {
        // Epochs count up from 1; wrapping is out of reach (one per decision).
        if status.epoch <= self.applied_epoch {
            return None;
        }
        self.applied_epoch = status.epoch;
        let mode = Mode::from_wire(status.mode);
        (mode != self.mode).then(|| {
            self.mode = mode;
            mode
        })
    }
}

/// The latency engines for one peer.
#[derive(Debug, Default)]
pub(crate) struct PeerLink {
    probes: ProbeSchedule,
    monitor: LatencyMonitor,
    /// Created by the first probe from the peer: only a receiver of probes
    /// needs the peer's clock. `None` too while resynchronisation is off.
    clock: Option<ClockSync>,
    /// A clock request to answer: the request and its arrival.
    clock_reply: Option<(ClockSyncPayload, Time)>,
    judge: ModeJudge,
    calibration: Calibration,
    sending: SendingMode,
    /// In low-latency mode, data waits on the premium path for the receiver
    /// to answer a probe: the ordinary path was silent for longer than a
    /// sample lives ([`LatencyConfig::sample_lifetime`]).
    confirming: bool,
    /// When a packet (data or probe) last left on the ordinary path: the
    /// newest state of that path the receiver could have judged.
    last_ordinary: Option<Time>,
    /// When data last left, on either path.
    last_data: Option<Time>,
    pub(crate) stats: LatencyStats,
    /// Queued in the endpoint's list of links with something to send.
    pub(crate) in_ready: bool,
}

impl PeerLink {
    /// Bytes the link holds on the heap (the clock's exchanges).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.clock.as_ref().map_or(0, ClockSync::heap_bytes)
    }

    pub(crate) fn mode(&self) -> Mode {
        self.sending.mode()
    }

    /// The path data takes now: the mode's, or premium while confirming.
    pub(crate) fn data_path(&self) -> Path {
        match self.confirming {
            true => Path::Premium,
            false => self.sending.mode().data_path(),
        }
    }

    /// Data is about to leave for the peer. In low-latency mode, after the
    /// ordinary path was silent for longer than a sample lives, the data
    /// starts on the premium path and a probe asks the receiver whether the
    /// ordinary path is still quiet; the answer (an LSTAT) moves the rest
    /// where it says. Holding the data for the answer instead would cost a
    /// round trip, or up to TM past it on a congested path, on every first
    /// message after a silence. Returns whether a probe became due.
    pub(crate) fn before_data(&mut self, now: Time, cfg: &LatencyConfig) -> bool {
        let Some(lifetime) = cfg.sample_lifetime else { return false };
        let stale = self.last_ordinary.is_none_or(|at| now.since(at) > lifetime);
        // While calibrating, the mode is low by construction: nothing to ask.
        if self.confirming || self.sending.mode() != Mode::LowLatency || !stale || self.thresholds(cfg).is_none() {
            return false;
        }
        self.confirming = true;
        self.stats.confirmations += 1;
        self.probes.hasten(Duration::ZERO);
        self.probes.handle_timeout(now);
        self.probes.is_due()
    }

    /// A packet left for the peer on `path`. Data on the premium path while
    /// samples are short-lived brings the next probe to within a lifetime
    /// of the last, so the ordinary path is looked at while data flows.
    pub(crate) fn sent(&mut self, now: Time, path: Path, data: bool, cfg: &LatencyConfig) {
        if path == Path::Ordinary {
            self.last_ordinary = Some(now);
        }
        if !data {
            return;
        }
        self.last_data = Some(now);
        if let (Some(lifetime), Path::Premium) = (cfg.sample_lifetime, path) {
            self.probes.hasten(lifetime);
        }
    }

    pub(crate) fn requested_mode(&self) -> Mode {
        self.judge.requested()
    }

    pub(crate) fn last_latency(&self) -> Option<Duration> {
        self.monitor.last_latency()
    }

    /// How the peer's clock maps onto ours: perfect clocks while
    /// resynchronisation is off, `None` until a first exchange completed.
    pub(crate) fn clock_estimate(&self, cfg: &LatencyConfig) -> Option<ClockEstimate> {
        match (&self.clock, cfg.clock_sync_period) {
            (_, None) => Some(ClockEstimate::PERFECT),
            (Some(sync), Some(_)) => sync.estimate(),
            (None, Some(_)) => None,
        }
    }

    /// Data is about to flow to the peer: start probing its path.
    pub(crate) fn activate(&mut self) {
        self.probes.start();
    }

    /// A probe from the peer; `answer`: it asks for the mode at once.
    pub(crate) fn on_probe(
        &mut self,
        now: Time,
        timestamp: u64,
        probe: &ProbePayload,
        answer: bool,
        cfg: &LatencyConfig,
    ) -> Option<Decision> {
        if let (None, Some(period)) = (&self.clock, cfg.clock_sync_period) {
            self.clock = Some(ClockSync::new(period));
        }
        let clock = self.clock_estimate(cfg);
        let (lost, sample) = self.monitor.on_probe(now, timestamp, probe, clock.as_ref(), cfg.loss_threshold);
        if lost.is_none() && sample.is_none() && clock.is_some() {
            return None; // an old or repeated probe
        }
        self.stats.probes_received += 1;
        let mut decision = None;
        if let Some(lost) = lost {
            decision = self.observe(now, lost, cfg);
        }
        // A loss that just switched the mode is not undone by the sample that
        // revealed it: the next probe judges again.
        if let (None, Some(sample)) = (decision, sample) {
            decision = self.observe(now, sample, cfg);
        }
        if let (None, true, Some(Observation::Sample { latency, timestamp })) = (decision, answer, sample) {
            // Answered whatever the judgement: the sender waits for it.
            self.stats.answers += 1;
            return Some(self.judge.confirm(now, timestamp, latency));
        }
        if decision.is_none() {
            decision = self.judge.repeat(now, probe.applied_epoch, cfg.monitor_interval);
            self.stats.lstat_repeats += decision.is_some() as u64;
        }
        decision
    }

    /// A data packet that came on the ordinary path.
    pub(crate) fn on_data(&mut self, now: Time, timestamp: u64, cfg: &LatencyConfig) -> Option<Decision> {
        let clock = self.clock_estimate(cfg)?;
        let sample = self.monitor.on_data(now, timestamp, &clock);
        self.observe(now, sample, cfg)
    }

    /// TM and Tm for this peer: as configured, or once calibrated, from
    /// the least latency of the first samples; `None` while calibrating.
    pub(crate) fn thresholds(&self, cfg: &LatencyConfig) -> Option<Thresholds> {
        match cfg.calibration_samples {
            0 => Some(Thresholds::of(cfg)),
            _ => self.calibration.done,
        }
    }

    fn observe(&mut self, now: Time, observation: Observation, cfg: &LatencyConfig) -> Option<Decision> {
        if let Observation::Lost { count, .. } = observation {
            self.stats.probes_lost += count;
        }
        if let (Observation::Sample { latency, .. }, None) = (observation, self.thresholds(cfg)) {
            // Calibrating: no decision until the path's base latency is
            // known, from samples taken on a settled clock estimate.
            self.stats.samples += 1;
            if self.clock.as_ref().is_some_and(|c| !c.settled()) {
                return None;
            }
            let c = &mut self.calibration;
            c.samples += 1;
            c.least = Some(c.least.map_or(latency, |l| l.min(latency)));
            if c.samples >= cfg.calibration_samples {
                // A path congested from the start never shows its base
                // latency on the ordinary path; half the least round trip
                // of the clock exchanges, on the premium path between the
                // same hosts, bounds it from below.
                let premium = self.clock.as_ref().and_then(ClockSync::least_round_trip).map(|rt| rt / 2);
                let base = c.least.into_iter().chain(premium).min();
                c.done = base.map(|base| Thresholds::for_base(base.max(cfg.least_base)));
            }
            return None;
        }
        let thresholds = self.thresholds(cfg)?;
        if let Observation::Sample { latency, .. } = observation {
            self.stats.samples += 1;
            self.stats.samples_high += (latency > thresholds.high) as u64;
            self.stats.samples_low += (latency < thresholds.low) as u64;
        }
        let decision = self.judge.judge(now, observation, thresholds);
        self.stats.decisions += decision.is_some() as u64;
        decision
    }

    /// An LSTAT from the peer: returns the new sending mode if it changed.
    pub(crate) fn on_lstat(&mut self, status: &LatencyStatus) -> Option<Mode> {
        let changed = self.sending.apply(status);
        if self.sending.applied_epoch == status.epoch {
            // A newer decision, whichever: the wait is over.
            self.confirming = false;
        }
        match changed {
            Some(Mode::HighLatency) => self.stats.switches_to_high += 1,
            Some(Mode::LowLatency) => self.stats.switches_to_low += 1,
            None => {}
        }
        changed
    }

    pub(crate) fn on_clock_sync(&mut self, now: Time, payload: &ClockSyncPayload) {
        match payload.kind {
            ClockSyncKind::Request => self.clock_reply = Some((*payload, now)),
            ClockSyncKind::Reply => {
                if let Some(sync) = &mut self.clock {
                    self.stats.clock_samples += sync.on_reply(now, payload) as u64;
                }
            }
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        [self.probes.poll_timeout(), self.monitor.poll_timeout(), self.clock.as_ref().and_then(ClockSync::poll_timeout)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Timers due at `now`; a lost probe may call for a decision.
    pub(crate) fn handle_timeout(&mut self, now: Time, cfg: &LatencyConfig) -> Option<Decision> {
        self.probes.handle_timeout(now);
        if let Some(sync) = &mut self.clock {
            sync.handle_timeout(now);
        }
        let clock = self.clock_estimate(cfg)?;
        let lost = self.monitor.handle_timeout(now, &clock, cfg.loss_threshold)?;
        self.observe(now, lost, cfg)
    }

    pub(crate) fn has_work(&self) -> bool {
        self.probes.is_due() || self.clock_reply.is_some() || self.clock.as_ref().is_some_and(ClockSync::has_request)
    }

    /// Writes the next probe or clock packet for `peer` into `buf`.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Time,
        peer: u32,
        cfg: &Config,
        buf: &mut [u8],
    ) -> Option<(Path, usize)> {
        let latency = cfg.latency.as_ref()?;
        // While data flows on the premium path and samples are short-lived,
        // the next probe follows within a lifetime; otherwise a monitoring
        // interval later, which is what this probe announces.
        let flowing = self.last_data.is_some_and(|at| self.probes.last_sent().is_none_or(|p| at >= p));
        let interval = match latency.sample_lifetime {
            Some(lifetime) if flowing && self.data_path() == Path::Premium => lifetime.min(latency.monitor_interval),
            _ => latency.monitor_interval,
        };
        let mut flags = Flags::empty();
        let (packet_type, path, len) = if let Some(probe) =
            self.probes.poll_probe(now, interval, self.sending.applied_epoch)
        {
            self.stats.probes_sent += 1;
            if self.confirming {
                flags.insert(Flags::ACK_REQUESTED);
            }
            self.last_ordinary = Some(now);
            (PacketType::Probe, Path::Ordinary, probe.write(&mut buf[HEADER_LEN..]))
        } else if let Some((request, arrived)) = self.clock_reply.take() {
            (PacketType::ClockSync, Path::Premium, clock::reply(&request, arrived, now).write(&mut buf[HEADER_LEN..]))
        } else if let Some(request) = self.clock.as_mut().and_then(|c| c.poll_request(now)) {
            self.stats.clock_requests += 1;
            (PacketType::ClockSync, Path::Premium, request.write(&mut buf[HEADER_LEN..]))
        } else {
            return None;
        };
        let mut header = Header::new(packet_type);
        header.flags = flags;
        header.job = job_tag(cfg.job);
        header.source = cfg.rank;
        header.destination = peer;
        header.timestamp = now.as_nanos();
        Some((path, seal(&header, len, &cfg.key, buf).expect("buffer checked by the endpoint")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LatencyConfig {
        LatencyConfig::table2()
    }

    fn sample(us: u64) -> Observation {
        Observation::Sample { latency: Duration::from_micros(us), timestamp: us }
    }

    #[test]
    fn hysteresis_does_not_flap_between_the_thresholds() {
        // TM = 100 us, Tm = 90 us.
        let mut j = ModeJudge::default();
        let now = Time::ZERO;
        for us in [50, 95, 99, 100, 91, 60] {
            assert_eq!(j.judge(now, sample(us), Thresholds::of(&cfg())), None, "{us} us stays low");
        }
        let d = j.judge(now, sample(101), Thresholds::of(&cfg())).unwrap();
        assert_eq!((d.mode, d.reason, d.epoch), (Mode::HighLatency, LstatReason::LatencyHigh, 1));
        // Hovering between Tm and TM, above and below either by a hair, in high mode.
        for us in [150, 100, 95, 90, 99, 90, 500] {
            assert_eq!(j.judge(now, sample(us), Thresholds::of(&cfg())), None, "{us} us stays high");
        }
        let lost = Observation::Lost { count: 1, timestamp: 7 };
        assert_eq!(j.judge(now, lost, Thresholds::of(&cfg())), None, "a loss in high mode changes nothing");
        let d = j.judge(now, sample(89), Thresholds::of(&cfg())).unwrap();
        assert_eq!((d.mode, d.reason, d.epoch), (Mode::LowLatency, LstatReason::LatencyLow, 2));
        for us in [95, 99, 100, 90] {
            assert_eq!(j.judge(now, sample(us), Thresholds::of(&cfg())), None, "{us} us stays low");
        }
        let d = j.judge(now, lost, Thresholds::of(&cfg())).unwrap();
        assert_eq!((d.mode, d.reason, d.probe_timestamp, d.epoch), (Mode::HighLatency, LstatReason::ProbeLost, 7, 3));
    }

    #[test]
    fn a_decision_is_repeated_until_applied_but_not_faster_than_asked() {
        let mut j = ModeJudge::default();
        assert_eq!(j.repeat(Time::ZERO, 0, Duration::from_millis(100)), None, "nothing decided yet");
        let d = j.judge(Time::ZERO, sample(200), Thresholds::of(&cfg())).unwrap();
        let ms = |m: u64| Time::from_nanos(m * 1_000_000);
        assert_eq!(j.repeat(ms(50), 0, Duration::from_millis(100)), None, "too soon");
        assert_eq!(j.repeat(ms(100), 0, Duration::from_millis(100)), Some(d));
        assert_eq!(j.repeat(ms(150), 0, Duration::from_millis(100)), None, "too soon after the repeat");
        assert_eq!(j.repeat(ms(500), d.epoch, Duration::from_millis(100)), None, "applied");
    }

    #[test]
    fn the_sender_applies_only_newer_decisions() {
        let mut s = SendingMode::default();
        let status = |epoch, mode| {
            Decision { epoch, mode, reason: LstatReason::LatencyHigh, probe_timestamp: 0, latency: Duration::ZERO }
                .status(0)
        };
        assert_eq!(s.apply(&status(1, Mode::HighLatency)), Some(Mode::HighLatency));
        assert_eq!(s.apply(&status(1, Mode::HighLatency)), None, "duplicate");
        assert_eq!(s.apply(&status(3, Mode::LowLatency)), Some(Mode::LowLatency));
        assert_eq!(s.apply(&status(2, Mode::HighLatency)), None, "overtaken by a newer decision");
        assert_eq!(s.mode(), Mode::LowLatency);
        assert_eq!(s.apply(&status(4, Mode::LowLatency)), None, "no change, but applied");
        assert_eq!(s.applied_epoch, 4);
    }

    #[test]
    fn thresholds_follow_the_least_of_the_first_samples() {
        // Perfect clocks (table 2); three samples calibrate, 250 us at least.
        let cfg = LatencyConfig { calibration_samples: 3, least_base: Duration::from_micros(250), ..cfg() };
        let mut link = PeerLink::default();
        let at = |latency_us: u64| (Time::ZERO + Duration::from_millis(10), 10_000_000 - latency_us * 1000);
        assert_eq!(link.thresholds(&cfg), None);
        for us in [900, 400, 700] {
            let (now, stamp) = at(us);
            assert_eq!(link.on_data(now, stamp, &cfg), None, "no decision while calibrating");
        }
        // The least was 400 us: TM 800 us, Tm 600 us.
        let t = link.thresholds(&cfg).unwrap();
        assert_eq!((t.high, t.low), (Duration::from_micros(800), Duration::from_micros(600)));
        let (now, stamp) = at(700);
        assert_eq!(link.on_data(now, stamp, &cfg), None, "between Tm and TM");
        let (now, stamp) = at(801);
        assert_eq!(link.on_data(now, stamp, &cfg).map(|d| d.mode), Some(Mode::HighLatency));
        // Below the floor, the floor counts.
        let mut quiet = PeerLink::default();
        for us in [20, 30, 25] {
            let (now, stamp) = at(us);
            quiet.on_data(now, stamp, &cfg);
        }
        assert_eq!(quiet.thresholds(&cfg).map(|t| t.high), Some(Duration::from_micros(500)));
        // Without calibration, the configured thresholds from the start.
        assert_eq!(PeerLink::default().thresholds(&LatencyConfig::table2()), Some(Thresholds::of(&cfg)));
    }
}
