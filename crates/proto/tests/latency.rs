//! The latency engines between two endpoints: probes and their loss, the
//! hysteresis of the mode, a switch while packets are missing, and clocks
//! that disagree. Each endpoint reads its own clock, an affine function of
//! the harness's true time, and each path has its own delay, a function of
//! true time.
//!
//! The first tests are of the paper's engine (samples believed until the
//! next); the last ones of samples that age
//! (`LatencyConfig::sample_lifetime`).

use std::time::Duration;

use bulkwire_proto::{Config, Endpoint, Event, LatencyConfig, Mode, Path, Time};
use bulkwire_wire::{JobKey, PacketType};

const JOB: u64 = 78;
const BASE: Duration = Duration::from_micros(50);
const MS: u64 = 1_000_000;

/// Probes every 10 ms, TL 10 ms, TM 200 us, Tm 150 us; clocks trusted.
fn latency_config() -> LatencyConfig {
    LatencyConfig {
        monitor_interval: Duration::from_millis(10),
        loss_threshold: Duration::from_millis(10),
        high_threshold: Duration::from_micros(200),
        low_threshold: Duration::from_micros(150),
        calibration_samples: 0,
        least_base: Duration::ZERO,
        poll_interval: Duration::from_millis(10),
        clock_sync_period: None,
        sample_lifetime: None,
    }
}

/// The same, with samples believed for 5 ms.
fn short_lived_config() -> LatencyConfig {
    LatencyConfig { sample_lifetime: Some(Duration::from_millis(5)), ..latency_config() }
}

fn config(rank: u32, latency: LatencyConfig) -> Config {
    let mut c = Config::new(JOB, JobKey::new([4; 32]), rank, 2);
    c.initial_rtt = BASE * 2;
    c.latency = Some(latency);
    c
}

/// A clock: `local = true * (1 + drift) + offset`.
#[derive(Clone, Copy, Debug)]
struct Clock {
    offset: f64,
    drift: f64,
}

impl Clock {
    const TRUE: Clock = Clock { offset: 0.0, drift: 0.0 };

    fn local(&self, t: Time) -> Time {
        Time::from_nanos((t.as_nanos() as f64 * (1.0 + self.drift) + self.offset).round() as u64)
    }

    /// The first true time at which this clock reads `local` or later.
    fn true_time(&self, local: Time) -> Time {
        let mut t = ((local.as_nanos() as f64 - self.offset) / (1.0 + self.drift)).floor().max(0.0) as u64;
        while self.local(Time::from_nanos(t)) < local {
            t += 1;
        }
        Time::from_nanos(t)
    }
}

/// What the harness sees of a datagram.
#[derive(Clone, Copy, Debug)]
struct Seen {
    from: usize,
    path: Path,
    packet_type: u8,
    sequence: u64,
    retransmission: bool,
    /// The header's low flag bits.
    flags: u8,
    at: Time,
}

type DelayFn = Box<dyn Fn(usize, Path, Time) -> Duration>;

struct Pair {
    ends: [Endpoint; 2],
    clocks: [Clock; 2],
    now: Time,
    /// When each datagram is read (true time), when it arrived, to whom.
    in_flight: Vec<(Time, Time, usize, Vec<u8>)>,
    delay: DelayFn,
    drop: Box<dyn FnMut(&Seen) -> bool>,
    /// Every datagram sent, dropped or not.
    log: Vec<Seen>,
    received: [Vec<Vec<u8>>; 2],
    /// The paths each end's data took after each `Event::ModeChanged`.
    data_paths: [Vec<Path>; 2],
    /// How late an end comes to read a datagram that reached it at a true
    /// time (a process descheduled on a busy host).
    late: Box<dyn Fn(usize, Time) -> Duration>,
    /// Ends tell their endpoints when each datagram reached them
    /// (`Endpoint::set_arrival`, as the runtime does from the kernel's
    /// receive stamps).
    stamps: bool,
}

impl Pair {
    fn new(a: Config, b: Config) -> Pair {
        Pair {
            ends: [Endpoint::new(a).unwrap(), Endpoint::new(b).unwrap()],
            clocks: [Clock::TRUE; 2],
            now: Time::ZERO,
            in_flight: Vec::new(),
            delay: Box::new(|_, _, _| BASE),
            drop: Box::new(|_| false),
            log: Vec::new(),
            received: [Vec::new(), Vec::new()],
            data_paths: [Vec::new(), Vec::new()],
            late: Box::new(|_, _| Duration::ZERO),
            stamps: false,
        }
    }

    fn local(&self, i: usize) -> Time {
        self.clocks[i].local(self.now)
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 65_536];
        for i in 0..2 {
            let local = self.local(i);
            while let Some(t) = self.ends[i].poll_transmit(local, &mut buf) {
                let bytes = buf[..t.len].to_vec();
                let seen = Seen {
                    from: i,
                    path: t.path,
                    packet_type: bytes[1],
                    sequence: bulkwire_wire::Header::named_sequence(&bytes).unwrap(),
                    retransmission: bytes[2] & 4 != 0,
                    flags: bytes[2],
                    at: self.now,
                };
                self.log.push(seen);
                if !(self.drop)(&seen) {
                    let arrival = self.now + (self.delay)(i, t.path, self.now);
                    let read = arrival + (self.late)(1 - i, arrival);
                    self.in_flight.push((read, arrival, 1 - i, bytes));
                }
            }
            while let Some(e) = self.ends[i].poll_event() {
                match e {
                    Event::Message { data, .. } => self.received[i].push(data),
                    Event::ProtocolViolation { reason, .. } => panic!("protocol violation: {reason}"),
                    Event::ModeChanged { peer, data_path } => {
                        assert_eq!(peer as usize, 1 - i);
                        self.data_paths[i].push(data_path);
                    }
                    Event::Placed { .. } => unreachable!("no receive's buffer is given in these tests"),
                    Event::Aimed { .. } => unreachable!("no aim is given in these tests"),
                }
            }
        }
    }

    /// Advances to the next arrival or timer, not beyond `limit`.
    fn step(&mut self, limit: Time) {
        self.flush();
        let arrival = self.in_flight.iter().map(|p| p.0).min();
        let timers = (0..2).filter_map(|i| self.ends[i].poll_timeout().map(|t| self.clocks[i].true_time(t)));
        let next = arrival.into_iter().chain(timers).min().unwrap_or(limit).min(limit);
        self.now = self.now.max(next);
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.in_flight).into_iter().partition(|p| p.0 <= self.now);
        self.in_flight = later;
        for (_, arrival, to, bytes) in due {
            let local = self.local(to);
            if self.stamps {
                self.ends[to].set_arrival(self.clocks[to].local(arrival));
            }
            self.ends[to].handle_datagram(local, &bytes);
        }
        for i in 0..2 {
            let local = self.local(i);
            self.ends[i].handle_timeout(local);
        }
        self.flush();
    }

    fn run_until(&mut self, end: Time) {
        while self.now < end {
            self.step(end);
        }
    }

    fn send(&mut self, from: usize, data: &[u8]) {
        self.ends[from].send(1 - from as u32, 0, data).unwrap();
    }

    /// Rank 0 sends a message of 200 bytes every 2 ms until `until`, then
    /// the pair runs `settle` more; every message must have arrived.
    /// Returns how many were sent.
    fn stream(&mut self, until: Time, settle: Duration) -> usize {
        let mut i = 0;
        while self.now < until {
            self.send(0, &msg(i, 200));
            i += 1;
            self.run_until(self.now + Duration::from_millis(2));
        }
        self.run_until(self.now + settle);
        assert_eq!(self.received[1].len(), i, "every message arrives");
        i
    }
}

fn ms(m: u64) -> Time {
    Time::from_nanos(m * MS)
}

fn msg(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

const PROBE: u8 = PacketType::Probe as u8;
const DATA: u8 = PacketType::Data as u8;
const LSTAT: u8 = PacketType::Lstat as u8;

#[test]
fn the_defaults_leave_the_engines_off() {
    let c = Config::new(JOB, JobKey::new([4; 32]), 0, 2);
    assert!(c.latency.is_none());
    let mut e = Endpoint::new(c).unwrap();
    e.send(1, 0, b"x").unwrap();
    let mut buf = vec![0u8; 2000];
    let t = e.poll_transmit(Time::ZERO, &mut buf).unwrap();
    assert_eq!((t.path, buf[1]), (Path::Ordinary, DATA), "no probe, data first");
    assert_eq!(e.stats().ordinary.data.packets, 1);
    assert_eq!(e.latency_stats(1), None);
    assert_eq!(e.mode(1), Mode::LowLatency);
}

#[test]
fn a_probe_not_seen_tl_after_its_expected_time_is_lost() {
    let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
    // From 35 ms the ordinary path is slower, yet below TM: on its own, no
    // reason to switch.
    p.delay =
        Box::new(|_, path, t| if path == Path::Ordinary && t >= ms(35) { Duration::from_micros(180) } else { BASE });
    // The probe that leaves at 40 ms is lost.
    p.drop = Box::new(|s| s.packet_type == PROBE && s.at == ms(40));
    p.send(0, b"start probing");
    p.run_until(ms(50) - Duration::from_nanos(1));
    let seen = p.ends[1].latency_stats(0).unwrap();
    assert_eq!((seen.probes_received, seen.probes_lost), (4, 0), "probes 0..=3 in, 4 not yet overdue: {seen:?}");
    assert_eq!(p.ends[1].requested_mode(0), Mode::LowLatency);

    // Expected at 40 ms, lost at 40 + TL.
    p.run_until(ms(50));
    let seen = p.ends[1].latency_stats(0).unwrap();
    assert_eq!(seen.probes_lost, 1, "{seen:?}");
    assert_eq!(p.ends[1].requested_mode(0), Mode::HighLatency);
    let lstat = p.log.iter().find(|s| s.packet_type == LSTAT).expect("an LSTAT went out");
    assert_eq!((lstat.from, lstat.path, lstat.at), (1, Path::Premium, ms(50)));

    // The sender switches when the LSTAT arrives, and stays in high-latency
    // mode while the latency stays between Tm and TM.
    p.run_until(ms(200));
    assert_eq!(p.ends[0].mode(1), Mode::HighLatency);
    let sender = p.ends[0].latency_stats(1).unwrap();
    assert_eq!((sender.switches_to_high, sender.switches_to_low), (1, 0));
    // Probes keep to the ordinary path in high-latency mode.
    assert!(p.log.iter().filter(|s| s.packet_type == PROBE).all(|s| s.path == Path::Ordinary));
    assert!(p.ends[0].stats().latency.probes_sent >= 20);
}

#[test]
fn latency_between_the_thresholds_does_not_flap() {
    // TM = 200 us, Tm = 150 us. The ordinary path's delay, per 100 ms:
    // wobbling between the thresholds, above TM, wobbling again, below Tm.
    let profile = |t: Time| -> Duration {
        let phase = t.as_nanos() / (100 * MS);
        let wobble = if (t.as_nanos() / (5 * MS)).is_multiple_of(2) { 160 } else { 195 };
        Duration::from_micros(match phase {
            0 => wobble,
            1 => 400,
            2 => wobble,
            _ => 60,
        })
    };
    let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
    p.delay = Box::new(move |_, path, t| if path == Path::Ordinary { profile(t) } else { BASE });
    // A message every 2 ms samples the path between probes.
    let mut i = 0;
    let mut modes = Vec::new();
    while p.now < ms(400) {
        p.send(0, &msg(i, 200));
        i += 1;
        p.run_until(p.now + Duration::from_millis(2));
        if (p.now.as_nanos() / MS) % 100 == 90 {
            modes.push(p.ends[0].mode(1));
        }
    }
    modes.dedup();
    assert_eq!(modes, vec![Mode::LowLatency, Mode::HighLatency, Mode::LowLatency]);
    let s = p.ends[0].latency_stats(1).unwrap();
    assert_eq!((s.switches_to_high, s.switches_to_low), (1, 1), "{s:?}");
    // Each switch is an event for the application.
    assert_eq!(p.data_paths[0], [Path::Premium, Path::Ordinary]);
    // The receiver's decisions went out as LSTATs, counted as feedback.
    let fb = p.ends[1].channel_stats(0, 0).unwrap().feedback;
    assert!(fb.lstats > 0 && fb.probes == 0, "probes belong to no channel: {fb:?}");
    assert!(p.data_paths[1].is_empty(), "the receiver's own data did not move");
    let r = p.ends[1].latency_stats(0).unwrap();
    assert!(r.samples > 100, "data samples the path too: {r:?}");
    assert_eq!(p.received[1].len(), i);
}

#[test]
fn a_switch_resends_the_missing_packets_on_premium_once() {
    let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
    // From 20 ms the ordinary path takes 1 ms: the first data packet to
    // arrive shows it. Three packets of the burst are lost on the way, and
    // the receiver's prods with them, so they are still missing when the
    // decision is made.
    p.delay =
        Box::new(|_, path, t| if path == Path::Ordinary && t >= ms(20) { Duration::from_millis(1) } else { BASE });
    p.drop = Box::new(|s| {
        (s.packet_type == DATA && !s.retransmission && [3, 4, 10].contains(&s.sequence))
            || s.packet_type == PacketType::Prod as u8
    });
    p.send(0, b"start probing");
    p.ends[0].end_phase(1, 0);
    p.run_until(ms(20));
    for i in 0..20 {
        p.send(0, &msg(i, 1000));
        p.flush(); // one packet per message
    }
    p.ends[0].end_phase(1, 0);
    p.run_until(ms(25));
    assert_eq!(p.ends[0].mode(1), Mode::HighLatency);
    let mut expected = vec![b"start probing".to_vec()];
    expected.extend((0..20).map(|i| msg(i, 1000)));
    assert_eq!(p.received[1], expected, "all, in order, once");

    // Each missing packet went again exactly once, on premium. (The tail
    // probe resent the burst's last packet on the slow ordinary path before
    // the LSTAT came: that one arrived twice.)
    let resent: Vec<(u64, Path)> = p
        .log
        .iter()
        .filter(|s| s.from == 0 && s.packet_type == DATA && s.retransmission && s.sequence != 20)
        .map(|s| (s.sequence, s.path))
        .collect();
    assert_eq!(resent, vec![(3, Path::Premium), (4, Path::Premium), (10, Path::Premium)]);
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert_eq!((s.data_sent, s.lstats_received, s.premium.data.packets), (21, 1, 3), "{s:?}");
    let tail_probes = s.retransmissions - 3;
    assert_eq!(p.ends[1].channel_stats(0, 0).unwrap().duplicates, tail_probes);

    // New data now goes on premium too, flagged so it is not taken for a
    // sample of the ordinary path.
    p.send(0, b"after the switch");
    p.run_until(ms(30));
    let last = p.log.iter().rev().find(|s| s.from == 0 && s.packet_type == DATA).unwrap();
    assert_eq!((last.sequence, last.path), (21, Path::Premium));
    assert_eq!(p.received[1].last().unwrap(), b"after the switch");
    assert!(p.ends[0].is_idle());
}

#[test]
fn clock_offset_and_drift_are_estimated() {
    let mut cfg = latency_config();
    cfg.clock_sync_period = Some(Duration::from_millis(20));
    let mut p = Pair::new(config(0, cfg.clone()), config(1, cfg));
    // Rank 1's clock is 7 ms ahead and gains 50 us per second; rank 0's is
    // 1 ms ahead and loses 20 us per second.
    p.clocks = [Clock { offset: 1e6, drift: -20e-6 }, Clock { offset: 7e6, drift: 50e-6 }];
    p.delay = Box::new(|_, path, _| if path == Path::Ordinary { Duration::from_micros(80) } else { BASE });
    p.send(0, b"probe me");
    p.send(1, b"and me");
    p.run_until(ms(1000));

    // Rank 1's clock relative to rank 0's: offset at rank 0's time `l0` is
    // peer(true) - l0 with true = (l0 - 1 ms) / (1 - 20 ppm).
    let l0 = p.local(0);
    let truth_1_minus_0 = p.local(1).as_nanos() as f64 - l0.as_nanos() as f64;
    let e = p.ends[0].clock_estimate(1).unwrap();
    assert!((e.offset_at(l0) - truth_1_minus_0).abs() < 100.0, "offset {} vs {truth_1_minus_0}", e.offset_at(l0));
    let drift_1_per_0 = (1.0 + 50e-6) / (1.0 - 20e-6) - 1.0;
    assert!((e.drift - drift_1_per_0).abs() < 1e-6, "drift {} vs {drift_1_per_0}", e.drift);
    let back = p.ends[1].clock_estimate(0).unwrap();
    assert!((back.offset_at(p.local(1)) + truth_1_minus_0).abs() < 100.0);

    // So the one-way latency is right to within a microsecond, and an offset
    // of 6 ms never looked like congestion.
    for (me, peer) in [(0, 1), (1, 0)] {
        let latency = p.ends[me].last_latency(peer).unwrap();
        assert!(latency.abs_diff(Duration::from_micros(80)) < Duration::from_micros(1), "{latency:?}");
        let s = p.ends[me].latency_stats(peer).unwrap();
        assert_eq!((s.decisions, s.switches()), (0, 0), "{s:?}");
        assert!(s.clock_samples >= 45, "{s:?}");
        // Probes and clock exchanges are feedback, counted in bytes.
        assert!(s.feedback.probes >= s.probes_sent * 60 && s.feedback.clock_sync > 0, "{s:?}");
    }
    // Clock exchanges travel on premium.
    assert!(p.log.iter().filter(|s| s.packet_type == PacketType::ClockSync as u8).all(|s| s.path == Path::Premium));
}

#[test]
fn without_resynchronisation_skewed_clocks_mislead_the_monitor() {
    // The same clocks, resynchronisation off: rank 1 sees rank 0's packets
    // arrive 6 ms "late" and asks for the premium path for nothing. This is
    // why the exchange exists.
    let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
    p.clocks = [Clock { offset: 1e6, drift: 0.0 }, Clock { offset: 7e6, drift: 0.0 }];
    p.send(0, b"probe me");
    p.run_until(ms(50));
    assert_eq!(p.ends[1].requested_mode(0), Mode::HighLatency);
    assert_eq!(p.ends[0].mode(1), Mode::HighLatency);
}

#[test]
fn a_reader_that_comes_late_does_not_take_its_delay_for_the_networks() {
    // Rank 0 streams a message every 2 ms over a quiet ordinary path of
    // 50 us. Rank 1's process is descheduled for 3 ms in every 40 ms: what
    // reaches it meanwhile is read at the end. Told the arrival times (the
    // kernel's stamps), its monitor sees the path as it is; judged by when
    // it reads, it sees 3 ms of latency and sends the data to premium.
    let run = |stamps: bool| {
        let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
        p.stamps = stamps;
        p.late = Box::new(|to, t| {
            let into = Duration::from_nanos(t.as_nanos() % (40 * MS));
            let stall = Duration::from_millis(3);
            if to == 1 && into < stall {
                stall - into
            } else {
                Duration::ZERO
            }
        });
        p.stream(ms(400), Duration::from_millis(20));
        let s = p.ends[0].latency_stats(1).unwrap();
        let r = p.ends[1].latency_stats(0).unwrap();
        (s.switches(), r.samples_high, r.samples)
    };
    let (switches, high, samples) = run(true);
    assert_eq!((switches, high), (0, 0), "of {samples} samples");
    assert!(samples > 100);
    let (switches, high, _) = run(false);
    assert!(switches >= 2 && high > 0, "unstamped: {switches} switches, {high} high samples");
}

#[test]
fn a_lost_lstat_is_sent_again_when_a_probe_shows_it_was_not_applied() {
    let mut p = Pair::new(config(0, latency_config()), config(1, latency_config()));
    p.delay =
        Box::new(|_, path, t| if path == Path::Ordinary && t >= ms(15) { Duration::from_micros(400) } else { BASE });
    let mut lstats = 0;
    p.drop = Box::new(move |s| {
        lstats += (s.packet_type == LSTAT) as u32;
        s.packet_type == LSTAT && lstats == 1
    });
    p.send(0, b"start probing");
    p.ends[0].end_phase(1, 0);
    p.run_until(ms(25));
    assert_eq!(p.ends[1].requested_mode(0), Mode::HighLatency);
    assert_eq!(p.ends[0].mode(1), Mode::LowLatency, "the first LSTAT was lost");
    // The probe of 30 ms still says epoch 0: the decision goes again.
    p.run_until(ms(35));
    assert_eq!(p.ends[0].mode(1), Mode::HighLatency);
    let r = p.ends[1].latency_stats(0).unwrap();
    assert_eq!((r.decisions, r.lstat_repeats), (1, 1), "{r:?}");
}

#[test]
fn premium_only_sends_every_data_packet_on_premium_without_probing() {
    let config = |rank| {
        let mut c = Config::new(JOB, JobKey::new([4; 32]), rank, 2);
        c.initial_rtt = BASE * 2;
        c.premium_only = true;
        c
    };
    let mut p = Pair::new(config(0), config(1));
    for i in 0..20 {
        p.send(0, &msg(i, 3000));
    }
    p.run_until(ms(50));
    assert_eq!(p.received[1].len(), 20);
    let data: Vec<&Seen> = p.log.iter().filter(|s| s.packet_type == DATA).collect();
    assert!(!data.is_empty() && data.iter().all(|s| s.path == Path::Premium), "{data:?}");
    assert!(p.log.iter().all(|s| s.packet_type != PROBE), "no latency monitor");
    assert!(p.data_paths.iter().all(Vec::is_empty));
}

#[test]
fn a_step_of_a_peers_clock_moves_the_pair_once_and_back() {
    // Clocks resynchronised every 20 ms; both ranks stream a message every
    // 2 ms over an ordinary path of 80 us. At 300 ms rank 0's clock steps
    // 5 ms forward (a wall clock set by NTP): rank 1's packets then seem
    // 5 ms late to it until the clock exchanges catch up.
    let mut cfg = latency_config();
    cfg.clock_sync_period = Some(Duration::from_millis(20));
    let mut p = Pair::new(config(0, cfg.clone()), config(1, cfg));
    p.delay = Box::new(|_, path, _| if path == Path::Ordinary { Duration::from_micros(80) } else { BASE });
    let mut i = 0;
    while p.now < ms(1500) {
        if p.now >= ms(300) && p.clocks[0].offset == 0.0 {
            p.clocks[0].offset = 5e6;
        }
        p.send(0, &msg(i, 200));
        p.send(1, &msg(i, 200));
        i += 1;
        p.run_until(p.now + Duration::from_millis(2));
    }
    p.run_until(p.now + Duration::from_millis(50));
    assert_eq!((p.received[0].len(), p.received[1].len()), (i, i), "every message arrives");
    // Rank 1's data moves to premium while rank 0's estimate is wrong,
    // once, and comes back: no storm of switches.
    let s = p.ends[1].latency_stats(0).unwrap();
    assert_eq!((s.switches_to_high, s.switches_to_low), (1, 1), "{s:?}");
    assert_eq!(p.ends[1].mode(0), Mode::LowLatency);
    let r = p.ends[0].latency_stats(1).unwrap();
    assert_eq!(r.switches(), 0, "rank 0's own data is judged by rank 1, whose clock did not move: {r:?}");
    let latency = p.ends[0].last_latency(1).unwrap();
    assert!(latency.abs_diff(Duration::from_micros(80)) < Duration::from_micros(5), "re-synchronised: {latency:?}");
}

#[test]
fn a_path_congested_from_the_start_is_calibrated_from_the_premium_round_trip() {
    // Thresholds calibrated from 8 samples, clocks resynchronised; the
    // ordinary path holds a standing queue of 3 ms from the first packet
    // (a job started into a congested port), the premium path 80 us. The
    // least ordinary sample is 3 ms, which would make TM 6 ms and hide the
    // queue for ever; the clock exchanges' least round trip, 160 us, gives
    // a base of 80 us instead, and the pair moves its data to premium.
    let mut cfg = latency_config();
    cfg.calibration_samples = 8;
    cfg.least_base = Duration::from_micros(50);
    cfg.clock_sync_period = Some(Duration::from_millis(20));
    let mut p = Pair::new(config(0, cfg.clone()), config(1, cfg));
    p.delay = Box::new(|_, path, _| match path {
        Path::Ordinary => Duration::from_millis(3),
        Path::Premium => Duration::from_micros(80),
    });
    p.stream(ms(600), Duration::from_millis(50));
    let s = p.ends[0].latency_stats(1).unwrap();
    assert!(s.switches_to_high >= 1, "{s:?}");
    assert_eq!(p.ends[0].mode(1), Mode::HighLatency, "rank 0's data stays on premium while the queue stands");
}

/// Whether a logged datagram asked for an answer (`Flags::ACK_REQUESTED`).
fn asks(s: &Seen) -> bool {
    s.packet_type == PROBE && s.flags & 1 != 0
}

#[test]
fn after_a_silence_data_starts_on_premium_until_the_receiver_answers() {
    let mut p = Pair::new(config(0, short_lived_config()), config(1, short_lived_config()));
    // A burst after the path was silent (nothing sent yet), a message every
    // 40 us: its first packets go premium, a probe asks, the answer (a
    // round trip, 100 us) brings the rest back.
    for i in 0..10 {
        p.send(0, &msg(i, 1000));
        p.run_until(p.now + Duration::from_micros(40));
    }
    p.run_until(ms(3));
    let data: Vec<Path> = p.log.iter().filter(|s| s.from == 0 && s.packet_type == DATA).map(|s| s.path).collect();
    assert!(data.len() >= 10, "{data:?}");
    assert_eq!(data[0], Path::Premium, "{data:?}");
    assert_eq!(*data.last().unwrap(), Path::Ordinary, "back once the answer came: {data:?}");
    let premium = data.iter().filter(|&&d| d == Path::Premium).count();
    assert!(premium < 5, "only until the answer, a round trip: {data:?}");
    let asked: Vec<Seen> = p.log.iter().filter(|s| asks(s)).copied().collect();
    assert_eq!(asked.len(), 1, "one probe asked");
    assert_eq!((asked[0].from, asked[0].path), (0, Path::Ordinary));
    let answer = p.log.iter().find(|s| s.packet_type == LSTAT).expect("an answer");
    assert_eq!((answer.from, answer.path), (1, Path::Premium));
    // The mode never changed: no event, no switch.
    assert!(p.data_paths[0].is_empty());
    let (s, r) = (p.ends[0].latency_stats(1).unwrap(), p.ends[1].latency_stats(0).unwrap());
    assert_eq!((s.confirmations, s.switches(), r.answers), (1, 0, 1), "{s:?} {r:?}");

    // Messages every millisecond keep the path sampled: no more asking.
    for i in 10..20 {
        p.send(0, &msg(i, 100));
        p.run_until(p.now + Duration::from_millis(1));
    }
    assert_eq!(p.ends[0].latency_stats(1).unwrap().confirmations, 1);
    // Probes every 10 ms: a silence of 8 ms after one of them is longer
    // than a sample lives, so the next message asks again.
    let last_probe = p.log.iter().rev().find(|s| s.packet_type == PROBE).unwrap().at;
    p.run_until(last_probe.max(p.now) + Duration::from_millis(8));
    let quiet = p.log.iter().rev().find(|s| s.from == 0).unwrap().at;
    assert!(p.now.since(quiet) > Duration::from_millis(5), "silent since {quiet:?}");
    p.send(0, &msg(20, 100));
    p.run_until(p.now + Duration::from_millis(2));
    assert_eq!(p.ends[0].latency_stats(1).unwrap().confirmations, 2);
    let last = p.log.iter().rev().find(|s| s.from == 0 && s.packet_type == DATA).unwrap();
    assert_eq!(last.path, Path::Premium);
    let expected: Vec<Vec<u8>> = (0..10).map(|i| msg(i, 1000)).chain((10..21).map(|i| msg(i, 100))).collect();
    assert_eq!(p.received[1], expected, "all, in order, once");
}

#[test]
fn a_burst_after_a_silence_does_not_meet_a_queue_that_built_up_unseen() {
    // From 12 ms the ordinary path holds a queue of 1 ms (above TM), after
    // the probe of 10 ms saw it quiet. A burst at 14 ms: with the paper's
    // engine it goes on the ordinary path until the receiver, seeing its
    // first packets late, switches it; with samples that age, the probe
    // that asks sees the queue and none of the burst takes the ordinary path.
    let run = |cfg: LatencyConfig| {
        let mut p = Pair::new(config(0, cfg.clone()), config(1, cfg));
        p.delay =
            Box::new(|_, path, t| if path == Path::Ordinary && t >= ms(12) { Duration::from_millis(1) } else { BASE });
        p.send(0, b"start probing");
        p.run_until(ms(14));
        let before = p.log.len();
        for i in 0..20 {
            p.send(0, &msg(i, 1000));
        }
        p.run_until(ms(30));
        let ordinary =
            p.log[before..].iter().filter(|s| s.from == 0 && s.packet_type == DATA && s.path == Path::Ordinary).count();
        assert_eq!(p.received[1].len(), 21, "every message arrives");
        assert_eq!(p.ends[0].mode(1), Mode::HighLatency);
        ordinary
    };
    assert!(run(latency_config()) >= 10, "the paper's engine sends the burst into the queue");
    assert_eq!(run(short_lived_config()), 0, "none of the burst on the congested path");
}

#[test]
fn in_high_latency_mode_probes_follow_the_data_and_bring_it_back_soon() {
    // The ordinary path is congested (1 ms) from 5 ms to 42 ms. Messages
    // every millisecond: in high-latency mode the probes leave every 5 ms
    // (the sample lifetime) instead of every 10, and the data returns to
    // the ordinary path within about 5 ms of the queue draining, before
    // the paper's engine, whose next probe is at 50 ms.
    const DRAINED: u64 = 42;
    let run = |cfg: LatencyConfig| {
        let mut p = Pair::new(config(0, cfg.clone()), config(1, cfg));
        p.delay = Box::new(|_, path, t| {
            if path == Path::Ordinary && t >= ms(5) && t < ms(DRAINED) {
                Duration::from_millis(1)
            } else {
                BASE
            }
        });
        let mut back = None;
        let mut i = 0;
        while p.now < ms(100) {
            p.send(0, &msg(i, 200));
            i += 1;
            p.run_until(p.now + Duration::from_millis(1));
            if back.is_none() && p.now > ms(DRAINED) && p.ends[0].mode(1) == Mode::LowLatency {
                back = Some(p.now);
            }
        }
        p.run_until(p.now + Duration::from_millis(20));
        assert_eq!(p.received[1].len(), i, "every message arrives");
        let probes = p.log.iter().filter(|s| s.packet_type == PROBE && s.at >= ms(10) && s.at < ms(40)).count();
        (probes, back.unwrap())
    };
    let (paper_probes, paper_back) = run(latency_config());
    let (probes, back) = run(short_lived_config());
    assert!(paper_probes <= 3, "{paper_probes}");
    assert!(probes >= 5, "{probes}");
    assert!(back <= ms(DRAINED + 6), "back at {back:?}");
    assert!(paper_back > ms(49), "the paper's engine waits for its probe at 50 ms: {paper_back:?}");
}

#[test]
fn a_hole_left_by_the_slower_premium_path_is_not_prodded_at_every_arrival() {
    // The premium path paces packets 300 us apart (a rate-limited class);
    // the ordinary path is quick. A burst after a silence starts on
    // premium and moves to the ordinary path at the answer: ordinary
    // packets overtake premium ones still on their way. The receiver's
    // prods wait for the premium path's pace instead of asking at every
    // premium arrival (and the sender answering each).
    let mut p = Pair::new(config(0, short_lived_config()), config(1, short_lived_config()));
    let next_free = std::cell::Cell::new(Time::ZERO);
    p.delay = Box::new(move |from, path, t| {
        if from == 0 && path == Path::Premium {
            let leave = next_free.get().max(t);
            next_free.set(leave + Duration::from_micros(300));
            leave.since(t) + BASE
        } else {
            BASE
        }
    });
    // Premium packets earlier in the run teach the receiver their pace.
    p.send(0, b"start");
    p.run_until(ms(1));
    // Bursts 8 ms after a probe (probes every 10 ms): longer than a sample
    // lives. A message every 40 us.
    for _ in 0..4 {
        p.run_until(p.now + Duration::from_millis(12));
        let last_probe = p.log.iter().rev().find(|s| s.packet_type == PROBE).unwrap().at;
        p.run_until(last_probe + Duration::from_millis(8));
        for i in 0..30 {
            p.send(0, &msg(i, 1000));
            p.run_until(p.now + Duration::from_micros(40));
        }
    }
    p.run_until(p.now + Duration::from_millis(20));
    assert_eq!(p.ends[0].latency_stats(1).unwrap().confirmations, 5);
    assert_eq!(p.received[1].len(), 121);
    let premium = p.log.iter().filter(|s| s.from == 0 && s.packet_type == DATA && s.path == Path::Premium).count();
    assert!(premium >= 8, "some of each burst went premium: {premium}");
    let prods = p.ends[1].channel_stats(0, 0).unwrap().prods_sent;
    // One, in the first burst, before the receiver knew the pace (four
    // without waiting for it).
    assert!(prods <= 1, "{prods} prods for {premium} premium packets");
}
