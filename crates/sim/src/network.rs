//! Network models.

use std::collections::VecDeque;
use std::time::Duration;

use bulkwire_proto::{Path, Time};
use bulkwire_wire::PacketType;
use rand::Rng;
use serde::Serialize;

use crate::rng::SimRng;

/// A datagram arriving at a host.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub at: Time,
    pub to: usize,
    pub path: Path,
    pub bytes: Vec<u8>,
}

/// A datagram a host hands to the network.
#[derive(Clone, Debug)]
pub struct Datagram {
    pub from: usize,
    pub to: usize,
    pub path: Path,
    pub bytes: Vec<u8>,
}

/// How datagrams travel between hosts.
pub trait Network {
    /// A host hands `datagram` to the network at `now`; what arrives (zero,
    /// one or more copies) is pushed to `out`.
    fn send(&mut self, now: Time, datagram: Datagram, rng: &mut SimRng, out: &mut Vec<Delivery>);

    /// When `host`'s interface can take its next datagram. The simulator does
    /// not poll a host before then: a sender is held back by its own
    /// interface, as a blocking socket would be, instead of losing packets.
    fn ready_at(&self, now: Time, host: usize) -> Time;

    fn stats(&self) -> NetStats;
}

/// Loss on a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossModel {
    None,
    /// Each datagram lost independently with this probability.
    Random(f64),
    /// Gilbert-Elliott in continuous time: the link alternates between a
    /// good state without loss and a bad state that loses every datagram,
    /// each lasting an exponentially distributed time with these means.
    /// Time-based rather than per-datagram, as congestion episodes are: a
    /// burst lasts as long whether a datagram passes every microsecond or
    /// every second.
    Bursty {
        mean_good: Duration,
        mean_bad: Duration,
    },
}

impl LossModel {
    /// Bursty loss that loses the fraction `rate` of the time, in episodes of
    /// `mean_burst` on average.
    pub fn bursty(rate: f64, mean_burst: Duration) -> LossModel {
        let rate = rate.clamp(1e-9, 1.0 - 1e-9);
        LossModel::Bursty { mean_good: mean_burst.mul_f64((1.0 - rate) / rate), mean_bad: mean_burst }
    }
}

fn exponential(rng: &mut SimRng, mean: Duration) -> Duration {
    let u: f64 = 1.0 - rng.random::<f64>();
    mean.mul_f64(-u.ln())
}

/// Faults injected on a link, besides loss.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    pub loss: LossModel,
    /// Probability that a datagram arrives twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back by `reorder_delay`, so later
    /// ones overtake it.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Probability that one bit of a datagram is flipped (the MAC must catch it).
    pub corrupt: f64,
    /// Intervals during which the link delivers nothing; each heals at its end.
    pub partitions: Vec<(Time, Time)>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            loss: LossModel::None,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            corrupt: 0.0,
            partitions: Vec::new(),
        }
    }
}

impl Faults {
    /// The time after which no partition is in force.
    pub fn healed_at(&self) -> Time {
        self.partitions.iter().map(|&(_, end)| end).max().unwrap_or(Time::ZERO)
    }
}

/// One direction between two hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    /// Propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter)` per datagram.
    pub jitter: Duration,
    /// Bottleneck rate of the link in bits per second.
    pub rate_bps: u64,
    /// Datagrams the link queue holds; more are dropped (drop-tail).
    pub queue_packets: usize,
    /// Rate of each host's network interface, in bits per second.
    pub nic_bps: u64,
    pub faults: Faults,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            delay: Duration::from_micros(50),
            jitter: Duration::ZERO,
            rate_bps: 1_000_000_000,
            queue_packets: 1000,
            nic_bps: 1_000_000_000,
            faults: Faults::default(),
        }
    }
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    /// Data packets (as opposed to control packets) that never arrived intact.
    pub data_lost: u64,
    /// Dropped by the loss model.
    pub lost: u64,
    /// Dropped by a full link queue.
    pub queue_drops: u64,
    /// Dropped by a partition.
    pub partitioned: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

impl NetStats {
    /// Datagrams that never arrived intact: what the protocol must recover.
    pub fn lost_total(&self) -> u64 {
        self.lost + self.queue_drops + self.partitioned + self.corrupted
    }

    fn add(&mut self, o: &NetStats) {
        self.sent += o.sent;
        self.delivered += o.delivered;
        self.data_lost += o.data_lost;
        self.lost += o.lost;
        self.queue_drops += o.queue_drops;
        self.partitioned += o.partitioned;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.corrupted += o.corrupted;
    }
}

#[derive(Debug)]
struct Link {
    params: LinkParams,
    /// Gilbert-Elliott state, and when it next changes.
    bad: bool,
    state_until: Option<Time>,
    busy_until: Time,
    /// Times at which the datagrams in the queue finish transmission.
    in_queue: VecDeque<Time>,
    stats: NetStats,
}

/// Every ordered pair of hosts joined by its own [`Link`]; every host has a
/// network interface of `nic_bps`.
#[derive(Debug)]
pub struct LinkNetwork {
    hosts: usize,
    links: Vec<Link>,
    nic_busy: Vec<Time>,
}

impl LinkNetwork {
    /// `hosts` hosts, every link with `params`.
    pub fn uniform(hosts: usize, params: LinkParams) -> LinkNetwork {
        Self::with(hosts, |_, _| params.clone())
    }

    /// `hosts` hosts, link `from -> to` with `params(from, to)`.
    pub fn with(hosts: usize, mut params: impl FnMut(usize, usize) -> LinkParams) -> LinkNetwork {
        let links = (0..hosts * hosts)
            .map(|i| Link {
                params: params(i / hosts, i % hosts),
                bad: false,
                state_until: None,
                busy_until: Time::ZERO,
                in_queue: VecDeque::new(),
                stats: NetStats::default(),
            })
            .collect();
        LinkNetwork { hosts, links, nic_busy: vec![Time::ZERO; hosts] }
    }

    pub fn link_stats(&self, from: usize, to: usize) -> NetStats {
        self.links[from * self.hosts + to].stats
    }

    /// The time after which no link is partitioned.
    pub fn healed_at(&self) -> Time {
        self.links.iter().map(|l| l.params.faults.healed_at()).max().unwrap_or(Time::ZERO)
    }
}

fn transmission_time(bytes: usize, bps: u64) -> Duration {
    // IP and UDP headers count on the wire too.
    Duration::from_nanos(((bytes as u64 + 28) * 8 * 1_000_000_000) / bps.max(1))
}

impl Network for LinkNetwork {
    fn send(&mut self, now: Time, datagram: Datagram, rng: &mut SimRng, out: &mut Vec<Delivery>) {
        let Datagram { from, to, path, mut bytes } = datagram;
        if from >= self.hosts || to >= self.hosts || from == to {
            return;
        }
        let nic_bps = self.links[from * self.hosts + to].params.nic_bps;
        let left_nic = now.max(self.nic_busy[from]) + transmission_time(bytes.len(), nic_bps);
        self.nic_busy[from] = left_nic;

        // The simulator may peek at the unauthenticated type byte, for statistics only.
        let is_data = bytes.get(1) == Some(&(PacketType::Data as u8));
        let link = &mut self.links[from * self.hosts + to];
        let p = &link.params;
        link.stats.sent += 1;
        link.stats.data_lost += is_data as u64; // taken back below if it arrives intact
        if p.faults.partitions.iter().any(|&(start, end)| left_nic >= start && left_nic < end) {
            link.stats.partitioned += 1;
            return;
        }
        let lost = match p.faults.loss {
            LossModel::None => false,
            LossModel::Random(rate) => rng.random_bool(rate.clamp(0.0, 1.0)),
            LossModel::Bursty { mean_good, mean_bad } => {
                let mut until = link.state_until.unwrap_or_else(|| Time::ZERO + exponential(rng, mean_good));
                while left_nic >= until {
                    link.bad = !link.bad;
                    until = until + exponential(rng, if link.bad { mean_bad } else { mean_good });
                }
                link.state_until = Some(until);
                link.bad
            }
        };
        if lost {
            link.stats.lost += 1;
            return;
        }
        while link.in_queue.front().is_some_and(|&done| done <= left_nic) {
            link.in_queue.pop_front();
        }
        if link.in_queue.len() >= p.queue_packets {
            link.stats.queue_drops += 1;
            return;
        }
        let start = left_nic.max(link.busy_until);
        link.busy_until = start + transmission_time(bytes.len(), p.rate_bps);
        link.in_queue.push_back(link.busy_until);
        let jitter = if p.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(rng.random_range(0..p.jitter.as_nanos() as u64))
        };
        let mut at = link.busy_until + p.delay + jitter;
        if p.faults.reorder > 0.0 && rng.random_bool(p.faults.reorder) {
            at = at + p.faults.reorder_delay;
            link.stats.reordered += 1;
        }
        if p.faults.corrupt > 0.0 && rng.random_bool(p.faults.corrupt) {
            let bit = rng.random_range(0..bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            link.stats.corrupted += 1;
        } else {
            link.stats.data_lost -= is_data as u64;
        }
        if p.faults.duplicate > 0.0 && rng.random_bool(p.faults.duplicate) {
            link.stats.duplicated += 1;
            out.push(Delivery { at: at + Duration::from_nanos(1), to, path, bytes: bytes.clone() });
        }
        link.stats.delivered += 1;
        out.push(Delivery { at, to, path, bytes });
    }

    fn ready_at(&self, now: Time, host: usize) -> Time {
        self.nic_busy.get(host).map_or(now, |&t| t.max(now))
    }

    fn stats(&self) -> NetStats {
        let mut total = NetStats::default();
        for link in &self.links {
            total.add(&link.stats);
        }
        total
    }
}
