//! The message pattern of empty BSP syncs on p processes, each a real
//! `proto::Endpoint`, on one simulated switch ([`SwitchNetwork`]): how the
//! sync's time, its messages and datagrams, and each endpoint's memory
//! grow with p.
//!
//! Each process runs the barrier of bsp's sync: a dissemination of fan-out
//! k ([`Shape`]), in which a process sends its message to k partners in a
//! round and waits for the k messages of that round before the next; the
//! next sync starts as the last round ends, as empty syncs back to back
//! do. As in bsp (`bsp/src/sync.rs`), the channel is receiver-driven, a
//! process that waits for a partner tells its endpoint so
//! ([`Endpoint::awaiting`]), and once a barrier completes what was sent
//! before it is acknowledged by it ([`Endpoint::acknowledge_below`]). The
//! messages are `message_len` bytes: bsp's reduction, or a token.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bulkwire_proto::{Config, Endpoint, Event, Footprint, Path, SendError, Time, Transmit};
use bulkwire_wire::JobKey;

use crate::engine::{Host, Simulator};
use crate::network::Network;
use crate::switch::{SwitchNetwork, SwitchParams};

/// The channel the syncs use (bsp's is 2 of the runtime's 6; one is enough here).
const CHANNEL: u16 = 0;
/// Bytes of the sync and round numbers at the head of every message.
const HEAD: usize = 8;

/// The shape of the dissemination for `p` processes with fan-out `k`: in
/// round r a process tells the processes m·(k+1)^r ahead (m = 1..=k, below
/// p) and hears from as many behind; after ⌈log_(k+1) p⌉ rounds everyone
/// has heard from everyone. The same as bsp's `Dissemination`
/// (`bsp/src/reduction.rs`), which bsp does not export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub p: u32,
    pub k: u32,
}

impl Shape {
    pub fn new(p: u32, fanout: u32) -> Shape {
        Shape { p, k: fanout.clamp(1, p.saturating_sub(1).max(1)) }
    }

    /// (k+1)^round, or `None` once it reaches p.
    fn stride(&self, round: u32) -> Option<u64> {
        let stride = u64::from(self.k + 1).checked_pow(round)?;
        (stride < u64::from(self.p)).then_some(stride)
    }

    pub fn rounds(&self) -> u32 {
        (0..).find(|&r| self.stride(r).is_none()).expect("strides grow past p")
    }

    /// The distances of `round`: m·(k+1)^round for m = 1..=k, below p.
    pub fn distances(&self, round: u32) -> Vec<u32> {
        let Some(stride) = self.stride(round) else { return Vec::new() };
        (1..=u64::from(self.k)).map(|m| m * stride).take_while(|&d| d < u64::from(self.p)).map(|d| d as u32).collect()
    }

    /// Messages each process sends (and receives) per sync: k per round,
    /// fewer in a last round that reaches past p.
    pub fn messages(&self) -> u32 {
        (0..self.rounds()).map(|r| self.distances(r).len() as u32).sum()
    }
}

/// One run: p processes making `syncs` empty syncs in a row.
#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    pub procs: u32,
    pub fanout: u32,
    /// Bytes of each barrier message.
    pub message_len: usize,
    pub syncs: u32,
    pub switch: SwitchParams,
    /// The endpoints' packet buffers (the runtime sizes them from the
    /// socket buffers: 1,024 with its default).
    pub packet_buffers: usize,
}

impl Setup {
    pub fn new(seed: u64, procs: u32, fanout: u32, message_len: usize, syncs: u32) -> Setup {
        Setup {
            seed,
            procs,
            fanout,
            message_len: message_len.max(HEAD),
            syncs: syncs.max(1),
            switch: SwitchParams::default(),
            packet_buffers: 1024,
        }
    }

    fn config(&self, rank: u32) -> Config {
        let key = JobKey::new(std::array::from_fn(|i| (self.seed as u8).wrapping_add(i as u8)));
        let mut c = Config::new(0x5ca1_e000 ^ self.seed, key, rank, self.procs);
        c.packet_buffers = self.packet_buffers;
        c.max_message_size = c.max_message_size.max(self.message_len);
        c.send_buffer_bytes = c.send_buffer_bytes.max(self.message_len * self.fanout as usize * 2);
        c.recv_buffer_bytes = c.recv_buffer_bytes.max(self.message_len * self.fanout as usize * 2);
        c.initial_rtt = self.switch.hop_delay * 4;
        c
    }
}

/// The structures of an endpoint of process 0 of `p`, with `channels`
/// per pair, as it is made (see [`Endpoint::footprint`]).
pub fn new_footprint(p: u32, channels: u16) -> Footprint {
    let mut c = Setup::new(0, p, 1, HEAD, 1).config(0);
    c.channels = channels;
    Endpoint::new(c).expect("a valid configuration").footprint()
}

/// One process: an endpoint making the syncs.
struct SyncHost {
    endpoint: Endpoint,
    rank: u32,
    p: u32,
    /// (to, from) of each round.
    partners: Vec<Vec<(u32, u32)>>,
    message_len: usize,
    syncs: u32,
    sync: u32,
    round: u32,
    told: bool,
    /// Messages the endpoint had no room for yet, in order.
    outbox: VecDeque<(u32, Vec<u8>)>,
    /// Who was heard in each (sync, round): a partner may be a round or a
    /// sync ahead.
    heard: BTreeMap<(u32, u32), Vec<u32>>,
    /// Where this sync's packets begin, per peer (bsp's marks).
    marks: Vec<u64>,
    finished: Vec<Time>,
    messages_sent: u64,
    errors: Vec<String>,
}

impl SyncHost {
    fn new(setup: &Setup, rank: u32) -> SyncHost {
        let shape = Shape::new(setup.procs, setup.fanout);
        let p = setup.procs;
        let partners = (0..shape.rounds())
            .map(|r| shape.distances(r).into_iter().map(|d| ((rank + d) % p, (rank + p - d) % p)).collect())
            .collect();
        let mut endpoint = Endpoint::new(setup.config(rank)).expect("a valid configuration");
        for peer in (0..p).filter(|&q| q != rank) {
            endpoint.set_receiver_driven(peer, CHANNEL, true);
        }
        let mut host = SyncHost {
            endpoint,
            rank,
            p,
            partners,
            message_len: setup.message_len,
            syncs: setup.syncs,
            sync: 0,
            round: 0,
            told: false,
            outbox: VecDeque::new(),
            heard: BTreeMap::new(),
            marks: Vec::new(),
            finished: Vec::new(),
            messages_sent: 0,
            errors: Vec::new(),
        };
        host.take_marks();
        host
    }

    fn done(&self) -> bool {
        self.sync == self.syncs
    }

    fn take_marks(&mut self) {
        self.marks = (0..self.p).map(|q| self.endpoint.next_sequence(q, CHANNEL).unwrap_or(0)).collect();
    }

    fn step(&mut self, now: Time) {
        while let Some(event) = self.endpoint.poll_event() {
            match event {
                Event::Message { from, data, start, .. } => {
                    let m = &data[start..];
                    if m.len() != self.message_len {
                        self.errors.push(format!("rank {}: a message of {} bytes from {from}", self.rank, m.len()));
                        continue;
                    }
                    let sync = u32::from_le_bytes(m[..4].try_into().expect("4 bytes"));
                    let round = u32::from_le_bytes(m[4..8].try_into().expect("4 bytes"));
                    let expected = self.partners.get(round as usize).is_some_and(|r| r.iter().any(|&(_, f)| f == from));
                    if !expected || sync < self.sync || sync >= self.syncs {
                        self.errors
                            .push(format!("rank {}: unexpected sync {sync} round {round} from {from}", self.rank));
                    }
                    self.heard.entry((sync, round)).or_default().push(from);
                }
                Event::ProtocolViolation { peer, reason, .. } => {
                    self.errors.push(format!("rank {}: protocol violation by {peer}: {reason}", self.rank))
                }
                Event::ModeChanged { .. } => {}
                // The simulation gives no receive's buffer to place into, and aims nowhere.
                Event::Placed { from, .. } | Event::Aimed { from, .. } => {
                    self.errors.push(format!("rank {}: a message from {from} placed in no buffer given", self.rank))
                }
            }
        }
        loop {
            while let Some(&(to, ref message)) = self.outbox.front() {
                match self.endpoint.check_send(to, CHANNEL, message.len()) {
                    Ok(()) => {}
                    // The endpoint's progress frees room and steps again.
                    Err(SendError::WouldBlock) => return,
                    Err(e) => {
                        self.errors.push(format!("rank {}: send refused: {e}", self.rank));
                        return;
                    }
                }
                let (to, message) = self.outbox.pop_front().expect("looked at");
                match self.endpoint.send_owned(to, CHANNEL, message) {
                    Ok(()) => self.messages_sent += 1,
                    Err(e) => {
                        self.errors.push(format!("rank {}: send refused: {e}", self.rank));
                        return;
                    }
                }
            }
            if self.done() {
                return;
            }
            let round = self.round as usize;
            if self.partners.is_empty() {
                // One process: nothing to wait for.
                self.complete(now);
                continue;
            }
            if !self.told {
                self.told = true;
                for i in 0..self.partners[round].len() {
                    let to = self.partners[round][i].0;
                    let message = self.message(self.sync, self.round);
                    self.outbox.push_back((to, message));
                }
                continue;
            }
            let heard = self.heard.get(&(self.sync, self.round)).map_or(0, Vec::len);
            if heard < self.partners[round].len() {
                let heard = self.heard.get(&(self.sync, self.round)).cloned().unwrap_or_default();
                for &(_, from) in &self.partners[round] {
                    if !heard.contains(&from) {
                        self.endpoint.awaiting(now, from, CHANNEL);
                    }
                }
                return;
            }
            self.heard.remove(&(self.sync, self.round));
            self.round += 1;
            self.told = false;
            if self.round as usize == self.partners.len() {
                self.complete(now);
            }
        }
    }

    /// The barrier of this sync completed.
    fn complete(&mut self, now: Time) {
        for peer in (0..self.p).filter(|&q| q != self.rank) {
            self.endpoint.acknowledge_below(now, peer, CHANNEL, self.marks[peer as usize]);
        }
        self.finished.push(now);
        self.sync += 1;
        self.round = 0;
        self.told = false;
        self.take_marks();
    }

    fn message(&self, sync: u32, round: u32) -> Vec<u8> {
        let mut m = vec![0; self.message_len];
        m[..4].copy_from_slice(&sync.to_le_bytes());
        m[4..8].copy_from_slice(&round.to_le_bytes());
        m
    }
}

impl Host for SyncHost {
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
        if t.is_some() && !self.outbox.is_empty() {
            self.step(now);
        }
        t
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        self.endpoint.poll_timeout()
    }
}

/// What a run showed.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub setup: Setup,
    pub shape: Shape,
    /// Every process finished every sync, with no error.
    pub completed: bool,
    pub errors: Vec<String>,
    /// When the last process finished the first sync.
    pub first_sync: Duration,
    /// Per sync after the first, at the last process to finish them (the
    /// first when there is one sync).
    pub per_sync: Duration,
    /// Per process and sync: messages, datagrams (data and control), bytes
    /// of datagrams, retransmitted packets.
    pub messages: f64,
    pub datagrams: f64,
    pub data_datagrams: f64,
    pub bytes: f64,
    pub retransmissions: f64,
    /// Datagrams the switch dropped (full port queues), in all.
    pub queue_drops: u64,
    /// Per process and sync: the endpoint's calls that look at every
    /// channel (none: `poll_timeout` and `handle_timeout` keep their
    /// deadlines in a heap), and the channels' and links' deadlines its
    /// timers looked at ([`Endpoint::timer_visits`]).
    pub scans: f64,
    pub channel_visits: f64,
    /// The largest endpoint at the end (by total), and one as it was made.
    pub footprint: Footprint,
    pub footprint_new: Footprint,
    /// Events the simulator processed, and the simulated time at the end.
    pub events: u64,
    pub ended: Time,
}

/// Runs `setup` until every process made its syncs, or `limit` of
/// simulated time passed.
pub fn run(setup: &Setup, limit: Duration) -> Outcome {
    let p = setup.procs;
    let hosts: Vec<SyncHost> = (0..p).map(|r| SyncHost::new(setup, r)).collect();
    let footprint_new = hosts[0].endpoint.footprint();
    let network = SwitchNetwork::new(p as usize, setup.switch.clone());
    let mut sim = Simulator::new(setup.seed, hosts, network);
    for h in 0..p as usize {
        sim.hosts_mut()[h].step(Time::ZERO);
        sim.poke(h);
    }
    let finished = sim.run_until(Time::ZERO + limit, |hosts| {
        hosts.iter().all(SyncHost::done) || hosts.iter().any(|h| !h.errors.is_empty())
    });
    let hosts = sim.hosts();
    let errors: Vec<String> = hosts.iter().flat_map(|h| h.errors.iter().cloned()).collect();
    let completed = finished && errors.is_empty() && hosts.iter().all(SyncHost::done);
    let last = |s: usize| hosts.iter().filter_map(|h| h.finished.get(s)).max().copied().unwrap_or(sim.now());
    let syncs = setup.syncs as usize;
    let first_sync = last(0).since(Time::ZERO);
    let per_sync = if syncs > 1 { last(syncs - 1).since(last(0)) / (syncs as u32 - 1) } else { first_sync };
    let per = |total: f64| total / f64::from(p) / syncs as f64;
    let (mut datagrams, mut data, mut bytes, mut retransmissions) = (0u64, 0u64, 0u64, 0u64);
    for h in hosts {
        let s = h.endpoint.stats();
        for path in [s.ordinary, s.premium] {
            datagrams += path.data.packets + path.control.packets;
            data += path.data.packets;
            bytes += path.data.bytes + path.control.bytes;
        }
        retransmissions += s.channels.retransmissions;
    }
    let visits: u64 = hosts.iter().map(|h| h.endpoint.timer_visits()).sum();
    let footprint = hosts.iter().map(|h| h.endpoint.footprint()).max_by_key(Footprint::total).unwrap_or_default();
    Outcome {
        setup: setup.clone(),
        shape: Shape::new(p, setup.fanout),
        completed,
        errors,
        first_sync,
        per_sync,
        messages: per(hosts.iter().map(|h| h.messages_sent).sum::<u64>() as f64),
        datagrams: per(datagrams as f64),
        data_datagrams: per(data as f64),
        bytes: per(bytes as f64),
        retransmissions: per(retransmissions as f64),
        queue_drops: sim.network().stats().queue_drops,
        scans: 0.0,
        channel_visits: per(visits as f64),
        footprint,
        footprint_new,
        events: sim.events_processed(),
        ended: sim.now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_is_bsps_dissemination() {
        let rounds = |p, k| Shape::new(p, k).rounds();
        assert_eq!(
            [rounds(1, 7), rounds(2, 7), rounds(8, 7), rounds(9, 7), rounds(64, 7), rounds(65, 7)],
            [0, 1, 1, 2, 2, 3]
        );
        assert_eq!([rounds(2, 1), rounds(8, 1), rounds(9, 1), rounds(1000, 1)], [1, 3, 4, 10]);
        assert_eq!(Shape::new(10, 7).distances(1), [8]);
        assert_eq!(Shape::new(16, 7).messages(), 7 + 1);
        assert_eq!(Shape::new(64, 3).messages(), 3 * 3);
    }

    #[test]
    fn every_process_makes_every_sync_with_k_messages_a_round() {
        for (p, k) in [(2, 7), (5, 2), (16, 1), (27, 2)] {
            let out = run(&Setup::new(1, p, k, 100, 4), Duration::from_secs(1));
            assert!(out.completed, "p {p} k {k}: {:?}", out.errors);
            assert_eq!(out.messages, f64::from(out.shape.messages()), "p {p} k {k}");
            // One datagram a message at least; acknowledgements come on top.
            assert!(out.data_datagrams >= out.messages && out.datagrams >= out.data_datagrams, "{out:?}");
            assert!(out.per_sync > Duration::from_micros(50 * u64::from(out.shape.rounds())), "{out:?}");
            assert_eq!(out.retransmissions, 0.0);
        }
        let a = run(&Setup::new(7, 12, 3, 2000, 3), Duration::from_secs(1));
        let b = run(&Setup::new(7, 12, 3, 2000, 3), Duration::from_secs(1));
        assert_eq!((a.per_sync, a.datagrams, a.events), (b.per_sync, b.datagrams, b.events), "same seed, same run");
    }
}
