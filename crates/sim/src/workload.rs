//! Message workloads run over simulated networks, with every delivery checked.
//!
//! A [`Plan`] says which messages each rank sends, when, to whom and how long
//! they are; message contents are a function of `(seed, source, index)`, so a
//! receiver can check each message it gets without any side channel.
//! [`WorkloadHost`] runs a real `proto::Endpoint` under a plan and records
//! every departure from "exactly once, intact, in order per channel" and from
//! the configured memory bounds. [`run`] puts it together.

use std::sync::Arc;
use std::time::Duration;

use bulkwire_proto::{
    ChannelStats, Config, Endpoint, EndpointStats, Event, Memory, Path, SendError, Strategy, Time, Transmit,
};
use bulkwire_wire::JobKey;
use rand::{Rng, RngCore, SeedableRng};

use crate::engine::{Host, Simulator};
use crate::network::{Faults, LinkNetwork, LinkParams, LossModel, NetStats, Network};
use crate::rng::{self, SimRng, Stream};

/// One message a rank will send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMessage {
    pub to: u32,
    pub channel: u16,
    pub len: usize,
    /// Not sent before this time.
    pub at: Time,
    /// The last message of a burst to this destination.
    pub end_phase: bool,
}

/// The messages of every rank, in the order each rank sends them.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub ranks: u32,
    pub channels: u16,
    pub sends: Vec<Vec<PlannedMessage>>,
}

impl Plan {
    pub fn total_messages(&self) -> usize {
        self.sends.iter().map(Vec::len).sum()
    }

    pub fn total_bytes(&self) -> usize {
        self.sends.iter().flatten().map(|m| m.len).sum()
    }

    /// What `rank` should receive from each `(source, channel)`, in order: the
    /// sender-side index and length of each message.
    fn expectations(&self, rank: u32) -> Vec<Vec<(usize, usize)>> {
        let channels = self.channels as usize;
        let mut expect = vec![Vec::new(); self.ranks as usize * channels];
        for (source, sends) in self.sends.iter().enumerate() {
            for (index, m) in sends.iter().enumerate() {
                if m.to == rank && source as u32 != rank {
                    expect[source * channels + m.channel as usize].push((index, m.len));
                }
            }
        }
        expect
    }

    /// One-way bulk transfer: rank 0 sends `count` messages of `len` bytes
    /// to rank 1, all at once, as one phase.
    pub fn bulk(count: usize, len: usize) -> Plan {
        let sends = (0..count)
            .map(|i| PlannedMessage { to: 1, channel: 0, len, at: Time::ZERO, end_phase: i + 1 == count })
            .collect();
        Plan { ranks: 2, channels: 1, sends: vec![sends, Vec::new()] }
    }
}

/// The bytes of message `index` from `source`: random, so any corruption,
/// truncation, swap or duplicate shows, and a stretch of the source's
/// stream that no other message uses, entered directly, so a receiver
/// recomputes any message from `(seed, source, index)` alone.
pub fn message_bytes(seed: u64, source: u32, index: usize, len: usize) -> Vec<u8> {
    let mut rng = rng::stream(seed, Stream::Messages(source));
    // 2^32 words (16 GiB) of the stream per message, more than any message.
    rng.set_word_pos((index as u128) << 32);
    let mut out = vec![0; len];
    rng.fill_bytes(&mut out);
    out
}

/// A simulated process: a `proto::Endpoint` driven by a [`Plan`].
pub struct WorkloadHost {
    pub endpoint: Endpoint,
    plan: Arc<Plan>,
    seed: u64,
    rank: u32,
    next_send: usize,
    expect: Vec<Vec<(usize, usize)>>,
    received: Vec<usize>,
    expected_total: usize,
    pub delivered: usize,
    /// Every violation of the delivery contract or of the memory bounds.
    pub errors: Vec<String>,
    pub memory_peak: Memory,
    pub last_delivery: Time,
    /// Every message delivered: its source, its index in the source's plan,
    /// and when (for latency measurements).
    pub arrivals: Vec<(u32, usize, Time)>,
    stepped_at: Option<Time>,
}

impl WorkloadHost {
    pub fn new(config: Config, plan: Arc<Plan>, seed: u64) -> Result<WorkloadHost, bulkwire_proto::ConfigError> {
        let rank = config.rank;
        let expect = plan.expectations(rank);
        let expected_total = expect.iter().map(Vec::len).sum();
        Ok(WorkloadHost {
            endpoint: Endpoint::new(config)?,
            received: vec![0; expect.len()],
            expect,
            expected_total,
            plan,
            seed,
            rank,
            next_send: 0,
            delivered: 0,
            errors: Vec::new(),
            memory_peak: Memory::default(),
            last_delivery: Time::ZERO,
            arrivals: Vec::new(),
            stepped_at: None,
        })
    }

    /// Everything planned was sent and everything expected arrived.
    pub fn finished(&self) -> bool {
        self.next_send == self.plan.sends[self.rank as usize].len() && self.delivered == self.expected_total
    }

    fn step(&mut self, now: Time) {
        self.stepped_at = Some(now);
        while let Some(event) = self.endpoint.poll_event() {
            match event {
                Event::Message { from, channel, data, start } => self.check(now, from, channel, &data[start..]),
                Event::ProtocolViolation { peer, channel, reason } => self
                    .errors
                    .push(format!("rank {}: protocol violation by {peer} on channel {channel}: {reason}", self.rank)),
                Event::ModeChanged { .. } => {}
                // The simulation gives no receive's buffer to place into, and aims nowhere.
                Event::Placed { from, .. } | Event::Aimed { from, .. } => {
                    self.errors.push(format!("rank {}: a message from {from} placed in no buffer given", self.rank))
                }
            }
        }
        let sends = &self.plan.sends[self.rank as usize];
        while let Some(m) = sends.get(self.next_send) {
            if m.at > now {
                break;
            }
            let data = message_bytes(self.seed, self.rank, self.next_send, m.len);
            match self.endpoint.send_owned(m.to, m.channel, data) {
                Ok(()) => {
                    if m.end_phase {
                        self.endpoint.end_phase(m.to, m.channel);
                    }
                    self.next_send += 1;
                }
                Err(SendError::WouldBlock) => break,
                Err(e) => {
                    self.errors.push(format!("rank {}: send {} refused: {e}", self.rank, self.next_send));
                    self.next_send += 1;
                }
            }
        }
        self.check_memory();
    }

    fn check(&mut self, now: Time, from: u32, channel: u16, data: &[u8]) {
        let slot = from as usize * self.plan.channels as usize + channel as usize;
        let Some(&(index, len)) = self.expect.get(slot).and_then(|e| e.get(self.received[slot])) else {
            self.errors.push(format!("rank {}: unexpected extra message from {from} on channel {channel}", self.rank));
            return;
        };
        self.received[slot] += 1;
        self.delivered += 1;
        self.last_delivery = now;
        self.arrivals.push((from, index, now));
        if data.len() != len || data != message_bytes(self.seed, from, index, len) {
            self.errors.push(format!(
                "rank {}: message {index} from {from} on channel {channel} is wrong ({} bytes, expected {len}) or out of order",
                self.rank,
                data.len()
            ));
        }
    }

    fn check_memory(&mut self) {
        let m = self.endpoint.memory();
        let c = self.endpoint.config();
        let p = &mut self.memory_peak;
        p.send_packets = p.send_packets.max(m.send_packets);
        p.recv_packets = p.recv_packets.max(m.recv_packets);
        p.pending_bytes = p.pending_bytes.max(m.pending_bytes);
        p.ready_bytes = p.ready_bytes.max(m.ready_bytes);
        p.partial_bytes = p.partial_bytes.max(m.partial_bytes);
        if m.send_packets > c.send_buffers()
            || m.recv_packets > c.recv_buffers()
            || m.pending_bytes > c.send_buffer_bytes
            || m.ready_bytes > c.recv_buffer_bytes + c.max_payload()
            || m.partial_bytes > (c.ranks as usize - 1) * c.channels as usize * c.max_message_size
        {
            self.errors.push(format!("rank {}: memory {m:?} beyond the configured bounds", self.rank));
        }
    }

    fn next_send_at(&self) -> Option<Time> {
        self.plan.sends[self.rank as usize].get(self.next_send).map(|m| m.at)
    }

    /// When the application wants to run next: the next planned send, unless
    /// it is already due and waits for buffer space (then the endpoint's own
    /// progress wakes it, and a timer in the past would spin).
    fn app_timeout(&self) -> Option<Time> {
        self.next_send_at().filter(|&at| self.stepped_at.is_none_or(|s| at > s))
    }
}

impl Host for WorkloadHost {
    fn handle_datagram(&mut self, now: Time, _path: Path, bytes: &[u8]) {
        self.endpoint.handle_datagram(now, bytes);
        self.step(now);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.endpoint.handle_timeout(now);
        self.step(now);
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.endpoint.poll_transmit(now, buf);
        // Sending may free room for the next planned message.
        if t.is_some() && self.next_send_at().is_some_and(|at| at <= now) {
            self.step(now);
        }
        t
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        let app = self.app_timeout();
        match (self.endpoint.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A complete experiment: who sends what over which network, with which
/// protocol settings.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub plan: Plan,
    pub link: LinkParams,
    pub strategy: Strategy,
    pub packet_buffers: usize,
    pub recv_buffer_bytes: usize,
    pub send_buffer_bytes: usize,
    pub max_message_size: usize,
    pub max_datagram: usize,
}

impl Scenario {
    pub fn new(seed: u64, plan: Plan, link: LinkParams) -> Scenario {
        Scenario {
            seed,
            plan,
            link,
            strategy: Strategy::HoleFilling,
            packet_buffers: 1024,
            recv_buffer_bytes: 8 << 20,
            send_buffer_bytes: 8 << 20,
            max_message_size: 4 << 20,
            max_datagram: 1472,
        }
    }

    pub fn config(&self, rank: u32) -> Config {
        let key = JobKey::new(std::array::from_fn(|i| (self.seed as u8).wrapping_add(i as u8)));
        let mut c = Config::new(0xb01c_0000 ^ self.seed, key, rank, self.plan.ranks);
        c.channels = self.plan.channels;
        c.strategy = self.strategy;
        c.packet_buffers = self.packet_buffers;
        c.recv_buffer_bytes = self.recv_buffer_bytes;
        c.send_buffer_bytes = self.send_buffer_bytes;
        c.max_message_size = self.max_message_size;
        c.max_datagram = self.max_datagram;
        c.initial_rtt = (self.link.delay * 2).max(Duration::from_micros(10));
        c
    }
}

/// What a run showed.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub expected: usize,
    pub delivered: usize,
    pub errors: Vec<String>,
    /// Every message delivered and every sender's data acknowledged.
    pub completed: bool,
    /// When the last message arrived.
    pub completion: Time,
    /// When the run stopped (at completion, idle, or the deadline).
    pub ended: Time,
    pub network: NetStats,
    pub protocol: ChannelStats,
    pub endpoints: Vec<EndpointStats>,
    pub memory_peak: Vec<Memory>,
    pub events: u64,
    /// The state of every endpoint at the end, for a run that did not complete.
    pub diagnosis: String,
}

/// Runs a scenario until every message is delivered and acknowledged, or
/// until `limit` of simulated time after the network heals.
pub fn run(scenario: &Scenario, limit: Duration) -> Outcome {
    let plan = Arc::new(scenario.plan.clone());
    let hosts: Vec<WorkloadHost> = (0..plan.ranks)
        .map(|r| WorkloadHost::new(scenario.config(r), plan.clone(), scenario.seed).expect("valid scenario config"))
        .collect();
    let network = LinkNetwork::uniform(plan.ranks as usize, scenario.link.clone());
    let deadline = network.healed_at() + limit;
    let mut sim = Simulator::new(scenario.seed, hosts, network);
    let completed = sim.run_until(deadline, |hosts| {
        hosts.iter().all(|h| h.finished() && h.endpoint.is_idle()) || hosts.iter().any(|h| !h.errors.is_empty())
    });
    let hosts = sim.hosts();
    let errors: Vec<String> = hosts.iter().flat_map(|h| h.errors.iter().cloned()).collect();
    let mut protocol = ChannelStats::default();
    for h in hosts {
        protocol.add(&h.endpoint.stats().channels);
    }
    Outcome {
        expected: plan.sends.iter().flatten().count(),
        delivered: hosts.iter().map(|h| h.delivered).sum(),
        completed: completed && errors.is_empty(),
        errors,
        completion: hosts.iter().map(|h| h.last_delivery).max().unwrap_or(Time::ZERO),
        ended: sim.now(),
        network: sim.network().stats(),
        protocol,
        endpoints: hosts.iter().map(|h| h.endpoint.stats()).collect(),
        memory_peak: hosts.iter().map(|h| h.memory_peak).collect(),
        events: sim.events_processed(),
        diagnosis: if completed { String::new() } else { hosts.iter().map(|h| h.endpoint.describe()).collect() },
    }
}

/// A random scenario for the fault tests: 2 to 6 ranks, up to 3 channels,
/// messages from 0 bytes to several packets in bursts, random and bursty
/// loss, duplication, reordering, corruption, jitter, partitions that heal,
/// and sometimes buffers small enough to force back-pressure.
pub fn random_scenario(seed: u64) -> Scenario {
    let mut rng = SimRng::seed_from_u64(seed ^ 0x5ce7_a410);
    let ranks = rng.random_range(2..=6u32);
    let channels = rng.random_range(1..=3u16);
    let max_datagram = *[200usize, 576, 1472, 9000].get(rng.random_range(0..4)).unwrap();
    let payload = max_datagram - bulkwire_wire::OVERHEAD;
    let small_buffers = rng.random_bool(0.3);
    let max_message_size = payload * 6;

    let mut sends = vec![Vec::new(); ranks as usize];
    let bursts = rng.random_range(1..=4);
    for (source, out) in sends.iter_mut().enumerate() {
        let mut at = Time::ZERO;
        for _ in 0..bursts {
            at = at + Duration::from_micros(rng.random_range(0..2000));
            let count = rng.random_range(0..=12);
            let first = out.len();
            for _ in 0..count {
                let mut to = rng.random_range(0..ranks - 1);
                if to >= source as u32 {
                    to += 1;
                }
                let len = match rng.random_range(0..10) {
                    0 => 0,
                    1..=4 => rng.random_range(1..=64),
                    5..=6 => rng.random_range(payload - 20..=payload + 20),
                    _ => rng.random_range(1..=max_message_size),
                };
                out.push(PlannedMessage { to, channel: rng.random_range(0..channels), len, at, end_phase: false });
            }
            // The last message to each destination in the burst ends its phase.
            for i in (first..out.len()).rev() {
                let (to, ch) = (out[i].to, out[i].channel);
                if !out[i + 1..].iter().any(|m| m.to == to && m.channel == ch) {
                    out[i].end_phase = rng.random_bool(0.8);
                }
            }
        }
    }
    let plan = Plan { ranks, channels, sends };

    let loss = match rng.random_range(0..4) {
        0 => LossModel::None,
        1 | 2 => LossModel::Random(rng.random_range(0.0..0.2)),
        _ => LossModel::bursty(rng.random_range(0.01..0.15), Duration::from_micros(rng.random_range(10..500))),
    };
    let mut partitions = Vec::new();
    if rng.random_bool(0.2) {
        let start = Time::from_nanos(rng.random_range(0..3_000_000));
        partitions.push((start, start + Duration::from_micros(rng.random_range(100..20_000))));
    }
    let link = LinkParams {
        delay: Duration::from_micros(rng.random_range(1..300)),
        jitter: Duration::from_micros(rng.random_range(0..50)),
        rate_bps: *[10_000_000u64, 100_000_000, 1_000_000_000].get(rng.random_range(0..3)).unwrap(),
        queue_packets: rng.random_range(4..200),
        nic_bps: 1_000_000_000,
        faults: Faults {
            loss,
            duplicate: if rng.random_bool(0.3) { rng.random_range(0.0..0.05) } else { 0.0 },
            reorder: if rng.random_bool(0.3) { rng.random_range(0.0..0.1) } else { 0.0 },
            reorder_delay: Duration::from_micros(rng.random_range(10..500)),
            corrupt: if rng.random_bool(0.3) { rng.random_range(0.0..0.05) } else { 0.0 },
            partitions,
        },
    };
    let mut scenario = Scenario::new(seed, plan, link);
    scenario.strategy = if rng.random_bool(0.25) { Strategy::GoBackN } else { Strategy::HoleFilling };
    scenario.max_datagram = max_datagram;
    scenario.max_message_size = max_message_size;
    if small_buffers {
        scenario.packet_buffers = rng.random_range(4..64);
        scenario.recv_buffer_bytes = max_message_size + rng.random_range(0..max_message_size);
        scenario.send_buffer_bytes = max_message_size + rng.random_range(0..max_message_size);
    }
    scenario
}
