//! The latency engines end to end in the simulator: the ordinary path's delay
//! rises, holds (losing some datagrams) and falls again, while one rank sends
//! bursts to another. The sender must move its data to the premium path and
//! back, and every message must arrive exactly once, intact and in order.

use std::sync::Arc;
use std::time::Duration;

use bulkwire_proto::{LatencyConfig, Mode, Path, Time};
use bulkwire_sim::workload::{Plan, PlannedMessage, Scenario, WorkloadHost};
use bulkwire_sim::{Datagram, Delivery, LinkNetwork, LinkParams, NetStats, Network, SimRng, Simulator};
use rand::Rng;

const MS: u64 = 1_000_000;

fn ms(m: u64) -> Time {
    Time::from_nanos(m * MS)
}

/// Extra queueing on the ordinary path: none, a ramp up to 2 ms from 500 to
/// 600 ms, 2 ms until 1500 ms, a ramp down to none by 1600 ms.
fn congestion(t: Time) -> Duration {
    let t = t.as_nanos();
    let peak = 2 * MS;
    let extra = match t {
        _ if t < 500 * MS => 0,
        _ if t < 600 * MS => peak * (t - 500 * MS) / (100 * MS),
        _ if t < 1500 * MS => peak,
        _ if t < 1600 * MS => peak * (1600 * MS - t) / (100 * MS),
        _ => 0,
    };
    Duration::from_nanos(extra)
}

/// Two link networks, one per path class; the ordinary one congested as
/// [`congestion`] says, losing 5% of its datagrams while the queue is full.
struct TwoPaths {
    ordinary: LinkNetwork,
    premium: LinkNetwork,
    congestion_losses: u64,
}

impl Network for TwoPaths {
    fn send(&mut self, now: Time, datagram: Datagram, rng: &mut SimRng, out: &mut Vec<Delivery>) {
        if datagram.path == Path::Premium {
            return self.premium.send(now, datagram, rng, out);
        }
        let extra = congestion(now);
        if extra >= Duration::from_millis(2) && rng.random_bool(0.05) {
            self.congestion_losses += 1;
            return;
        }
        let first = out.len();
        self.ordinary.send(now, datagram, rng, out);
        for d in &mut out[first..] {
            d.at = d.at + extra;
        }
    }

    fn ready_at(&self, now: Time, host: usize) -> Time {
        self.ordinary.ready_at(now, host).max(self.premium.ready_at(now, host))
    }

    fn stats(&self) -> NetStats {
        self.ordinary.stats()
    }
}

/// Rank 0 sends a burst of four 1000-byte messages to rank 1 every 5 ms, and
/// rank 1 answers each burst with a small message.
fn plan(until: Time) -> Plan {
    let mut sends = vec![Vec::new(), Vec::new()];
    let mut at = ms(1);
    while at < until {
        for i in 0..4 {
            sends[0].push(PlannedMessage { to: 1, channel: 0, len: 1000, at, end_phase: i == 3 });
        }
        sends[1].push(PlannedMessage { to: 0, channel: 0, len: 40, at, end_phase: true });
        at = at + Duration::from_millis(5);
    }
    Plan { ranks: 2, channels: 1, sends }
}

#[test]
fn congestion_moves_data_to_premium_and_back_with_every_message_delivered_once() {
    let seed = 11;
    let link = LinkParams::default(); // 50 us, 1 Gb/s
    let scenario = Scenario::new(seed, plan(ms(2000)), link.clone());
    // Unloaded one-way latency: propagation, and a 1 KB packet through the
    // interface and the link.
    let base = Duration::from_micros(70);
    let hosts: Vec<WorkloadHost> = (0..2)
        .map(|r| {
            let mut c = scenario.config(r);
            c.latency = Some(LatencyConfig::from_base_latency(base));
            WorkloadHost::new(c, Arc::new(scenario.plan.clone()), seed).unwrap()
        })
        .collect();
    let network = TwoPaths {
        ordinary: LinkNetwork::uniform(2, link.clone()),
        premium: LinkNetwork::uniform(2, link),
        congestion_losses: 0,
    };
    let mut sim = Simulator::new(seed, hosts, network);

    let mut modes = Vec::new();
    for checkpoint in [400, 1000, 2500] {
        sim.run_until(ms(checkpoint), |_| false);
        modes.push(sim.hosts()[0].endpoint.mode(1));
    }
    assert_eq!(modes, vec![Mode::LowLatency, Mode::HighLatency, Mode::LowLatency]);

    let hosts = sim.hosts();
    for h in hosts {
        assert!(h.errors.is_empty(), "{:?}", h.errors);
        assert!(h.finished(), "{}", h.endpoint.describe());
    }
    assert!(sim.network().congestion_losses > 0, "the congestion lost nothing");

    let sender = hosts[0].endpoint.latency_stats(1).unwrap();
    assert_eq!((sender.switches_to_high, sender.switches_to_low), (1, 1), "{sender:?}");
    let stats = hosts[0].endpoint.stats();
    let (ordinary, premium) = (stats.ordinary.data.packets, stats.premium.data.packets);
    // The congested second of a two-second run went on premium: about half.
    let share = premium as f64 / (ordinary + premium) as f64;
    assert!((0.3..0.7).contains(&share), "premium share of data {share:.2} ({premium} of {})", ordinary + premium);
    // Feedback is a small part of what goes on premium.
    let receiver = hosts[1].endpoint.stats();
    assert!(receiver.premium.control.bytes * 10 < stats.premium.data.bytes, "{receiver:?}");
    // Rank 1's replies follow its own mode, decided by rank 0.
    assert_eq!(hosts[1].endpoint.latency_stats(0).unwrap().switches(), 2);
}

/// The fault sweep's random workloads and faulty networks (loss, duplicates,
/// reordering, corruption, partitions) with the latency engines on and
/// clocks resynchronised: still exactly once, intact, in order, within the
/// memory bounds, and no stall.
#[test]
fn random_faulty_workloads_with_the_engines_on() {
    let seeds: u64 = std::env::var("BULKWIRE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut switches = 0;
    for seed in 0..seeds {
        let scenario = bulkwire_sim::workload::random_scenario(seed);
        let plan = Arc::new(scenario.plan.clone());
        let hosts: Vec<WorkloadHost> = (0..plan.ranks)
            .map(|r| {
                let mut c = scenario.config(r);
                let mut latency = LatencyConfig::from_base_latency(scenario.link.delay);
                latency.clock_sync_period = Some(latency.monitor_interval * 2);
                c.latency = Some(latency);
                WorkloadHost::new(c, plan.clone(), seed).unwrap()
            })
            .collect();
        let network = LinkNetwork::uniform(plan.ranks as usize, scenario.link.clone());
        let deadline = network.healed_at() + Duration::from_secs(30);
        let mut sim = Simulator::new(seed, hosts, network);
        let done = sim.run_until(deadline, |hosts| {
            hosts.iter().all(|h| h.finished() && h.endpoint.is_idle()) || hosts.iter().any(|h| !h.errors.is_empty())
        });
        for h in sim.hosts() {
            assert!(h.errors.is_empty(), "seed {seed}: {:?}", h.errors);
            assert_eq!(h.endpoint.stats().protocol_violations, 0, "seed {seed}");
            switches += h.endpoint.stats().latency.switches();
        }
        let diagnosis: String = sim.hosts().iter().map(|h| h.endpoint.describe()).collect();
        assert!(done, "seed {seed}: stalled\n{diagnosis}");
    }
    assert!(switches > 0, "no scenario ever switched");
}
