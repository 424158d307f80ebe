//! The shared memory over real `proto` endpoints in the simulator, with
//! random faults (loss, bursts, duplication, reordering, corruption,
//! partitions that heal), random programs of slow, PRAM and coherent
//! writes, reads and fences, over many seeds. A history checker verifies,
//! from every replica's log of the writes it applied in order and from
//! every read the programs made:
//!
//! - slow: one writer's writes to one location are applied everywhere in
//!   the order issued (some skipped), its last one always;
//! - PRAM: every write of a writer is applied everywhere, in the order
//!   issued; a read that sees a writer's write never sees, at a location
//!   that writer wrote before, a value older than that earlier write;
//! - coherent: every replica applies every coherent write in one order
//!   (the same sequence everywhere), and a writer's call returns only once
//!   its write is applied at its own replica;
//! - fence: when a fence ends at a replica, every write issued anywhere
//!   before the fence is applied there (a slow one or one that replaced it);
//! - a read returns the last value its replica applied, and the writes to
//!   segments a replica had not mapped yet wait until it maps them.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bulkwire_dsm::history;
use bulkwire_dsm::{Applied, Config, ElemType, Flush, Replica, SegId, Semantics, Ticket};
use bulkwire_proto::{Config as ProtoConfig, Endpoint, Event as ProtoEvent, Path, SendError, Time, Transmit};
use bulkwire_sim::workload::random_scenario;
use bulkwire_sim::{Host, LinkNetwork, Simulator};
use bulkwire_wire::JobKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CHANNEL: u16 = 0;
/// Segments of every program: (name, length).
const SEGMENTS: [(&str, usize); 2] = [("a", 6), ("b", 3)];

#[derive(Clone, Copy, Debug)]
enum Op {
    Write { seg: u32, index: u64, semantics: Semantics },
    Read { seg: u32, index: u64 },
    Fence,
    Flush,
}

/// What a program did, in its order: its writes (by value), its reads (and
/// what they returned), and its fences (with the log length when each ended).
#[derive(Clone, Debug)]
enum Did {
    Wrote { seg: u32, index: u64, bits: u64, semantics: Semantics },
    Read { seg: u32, index: u64, bits: u64, log_at: usize },
    FenceEnded { log_at: usize },
}

enum Waiting {
    Coherent(Ticket),
    Fence(u64),
}

struct DsmHost {
    rank: u32,
    ep: Endpoint,
    r: Replica,
    /// When this replica maps its segments (some map late).
    map_at: Time,
    mapped: Vec<SegId>,
    script: Vec<(Time, Op)>,
    next: usize,
    waiting: Option<Waiting>,
    out: Vec<(u32, Vec<u8>)>,
    writes: u64,
    did: Vec<Did>,
    log: Vec<Applied>,
    errors: Vec<String>,
}

/// A write's value: its writer and its number there (never 0).
fn value(writer: u32, n: u64) -> u64 {
    (u64::from(writer) << 40) | n
}

fn writer_of(bits: u64) -> u32 {
    (bits >> 40) as u32
}

impl DsmHost {
    fn flush_out(&mut self) {
        while let Some((to, bytes)) = self.r.poll_transmit() {
            self.out.push((to, bytes));
        }
        while let Some((to, bytes)) = self.out.first().cloned() {
            match self.ep.send_owned(to, CHANNEL, bytes) {
                Ok(()) => {
                    self.out.remove(0);
                }
                Err(SendError::WouldBlock) => return,
                Err(e) => {
                    self.errors.push(format!("rank {}: send: {e}", self.rank));
                    self.out.remove(0);
                }
            }
        }
    }

    fn take_log(&mut self) {
        self.log.extend(self.r.take_log());
    }

    fn act(&mut self, now: Time, op: Op) {
        match op {
            Op::Write { seg, index, semantics } => {
                self.writes += 1;
                let bits = value(self.rank, self.writes);
                match self.r.write(now, self.mapped[seg as usize], index, bits, semantics) {
                    Ok(ticket) => {
                        self.did.push(Did::Wrote { seg, index, bits, semantics });
                        if let Some(t) = ticket {
                            self.waiting = Some(Waiting::Coherent(t));
                        }
                    }
                    Err(e) => self.errors.push(format!("rank {}: write: {e}", self.rank)),
                }
            }
            Op::Read { seg, index } => {
                let storage = self.r.storage(self.mapped[seg as usize]).expect("mapped");
                let bits = storage.load(index as usize);
                self.take_log();
                self.did.push(Did::Read { seg, index, bits, log_at: self.log.len() });
            }
            Op::Fence => {
                let epoch = self.r.fence(now);
                self.waiting = Some(Waiting::Fence(epoch));
            }
            Op::Flush => self.r.flush(now),
        }
    }

    fn step(&mut self, now: Time) {
        if self.mapped.is_empty() && now >= self.map_at {
            for (name, len) in SEGMENTS {
                match self.r.map(name, ElemType::U64, len) {
                    Ok(id) => self.mapped.push(id),
                    Err(e) => self.errors.push(format!("rank {}: map: {e}", self.rank)),
                }
            }
        }
        loop {
            let mut progress = false;
            while let Some(e) = self.ep.poll_event() {
                progress = true;
                match e {
                    ProtoEvent::Message { from, data, .. } => self.r.handle(now, from, &data),
                    ProtoEvent::ProtocolViolation { reason, .. } => self.errors.push(reason.to_string()),
                    ProtoEvent::ModeChanged { .. } => {}
                    ProtoEvent::Placed { .. } => unreachable!("no receive's buffer is given here"),
                    ProtoEvent::Aimed { .. } => unreachable!("no aim is given here"),
                }
            }
            if let Some(e) = self.r.failure() {
                self.errors.push(format!("rank {}: {e}", self.rank));
            }
            self.r.handle_timeout(now);
            match self.waiting {
                Some(Waiting::Coherent(t)) if self.r.is_done(t) => {
                    self.waiting = None;
                    progress = true;
                }
                Some(Waiting::Fence(epoch)) if self.r.fence_done(epoch) => {
                    self.take_log();
                    self.did.push(Did::FenceEnded { log_at: self.log.len() });
                    self.waiting = None;
                    progress = true;
                }
                _ => {}
            }
            while self.waiting.is_none()
                && !self.mapped.is_empty()
                && self.next < self.script.len()
                && self.script[self.next].0 <= now
            {
                let op = self.script[self.next].1;
                self.next += 1;
                self.act(now, op);
                progress = true;
            }
            self.flush_out();
            if !progress {
                break;
            }
        }
        self.take_log();
    }

    fn finished(&self) -> bool {
        self.next == self.script.len() && self.waiting.is_none() && self.out.is_empty() && self.ep.is_idle()
    }
}

impl Host for DsmHost {
    fn handle_datagram(&mut self, now: Time, _path: Path, bytes: &[u8]) {
        self.ep.handle_datagram(now, bytes);
        self.step(now);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.ep.handle_timeout(now);
        self.step(now);
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit> {
        let t = self.ep.poll_transmit(now, buf);
        if t.is_some() && !self.out.is_empty() {
            self.flush_out();
        }
        t
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        let app = if self.waiting.is_some() || self.mapped.is_empty() {
            None
        } else {
            self.script.get(self.next).map(|a| a.0)
        };
        let map = self.mapped.is_empty().then_some(self.map_at);
        [self.ep.poll_timeout(), app, self.r.poll_timeout(), map].into_iter().flatten().min()
    }
}

/// A random program; every program has the same number of fences, the
/// last at the end.
fn script(rng: &mut ChaCha8Rng, fences: usize) -> Vec<(Time, Op)> {
    let mut at = Time::ZERO;
    let mut ops = Vec::new();
    for f in 0..=fences {
        for _ in 0..rng.random_range(3..25) {
            at = at + Duration::from_micros(rng.random_range(0..800));
            let seg = rng.random_range(0..SEGMENTS.len() as u32);
            let index = rng.random_range(0..SEGMENTS[seg as usize].1 as u64);
            let op = match rng.random_range(0..20) {
                0..=5 => Op::Write { seg, index, semantics: Semantics::Slow },
                6..=11 => Op::Write { seg, index, semantics: Semantics::Pram },
                12..=13 => Op::Write { seg, index, semantics: Semantics::Coherent },
                14 => Op::Flush,
                _ => Op::Read { seg, index },
            };
            ops.push((at, op));
        }
        if f < fences {
            ops.push((at, Op::Fence));
        }
    }
    ops.push((at, Op::Fence));
    ops
}

fn run(seed: u64) -> (usize, usize) {
    let scenario = random_scenario(seed);
    let n = scenario.plan.ranks.clamp(2, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd5a);
    let fences = rng.random_range(0..3);
    let hosts: Vec<DsmHost> = (0..n)
        .map(|rank| {
            let key = JobKey::new([seed as u8; 32]);
            let mut c = ProtoConfig::new(0xd50 ^ seed, key, rank, n);
            c.channels = 1;
            c.max_datagram = scenario.max_datagram;
            c.initial_rtt = (scenario.link.delay * 2).max(Duration::from_micros(10));
            let flush = match rng.random_range(0..3) {
                0 => Flush::Fixed(rng.random_range(0..6)),
                1 => Flush::Fixed(1000),
                _ => Flush::warp(rng.random_range(0.05..0.5)),
            };
            let max_delay = Duration::from_micros(rng.random_range(50..5000));
            let mut r = Replica::new(Config { flush, max_delay, ..Config::new(rank, n) });
            r.record();
            DsmHost {
                rank,
                ep: Endpoint::new(c).unwrap(),
                r,
                map_at: Time::ZERO
                    + Duration::from_micros(if rng.random_bool(0.3) { rng.random_range(0..3000) } else { 0 }),
                mapped: Vec::new(),
                script: script(&mut rng, fences),
                next: 0,
                waiting: None,
                out: Vec::new(),
                writes: 0,
                did: Vec::new(),
                log: Vec::new(),
                errors: Vec::new(),
            }
        })
        .collect();
    let network = LinkNetwork::uniform(n as usize, scenario.link.clone());
    let deadline = network.healed_at() + Duration::from_secs(60);
    let mut sim = Simulator::new(seed, hosts, network);
    let done = sim.run_until(deadline, |hosts| hosts.iter().all(DsmHost::finished));
    let hosts = sim.hosts();
    for h in hosts {
        assert!(h.errors.is_empty(), "seed {seed}: {:?}", h.errors);
    }
    assert!(
        done,
        "seed {seed}: the programs did not finish: {:?}",
        hosts.iter().map(|h| (h.next, h.script.len(), h.waiting.is_some(), h.r.held())).collect::<Vec<_>>()
    );
    check(seed, hosts);
    let writes = hosts.iter().map(|h| h.writes as usize).sum();
    let applied = hosts.iter().map(|h| h.log.len()).sum();
    (writes, applied)
}

/// Each writer's writes by kind, in issue order: (seg, index, bits).
struct Issued {
    slow: Vec<(u32, u64, u64)>,
    pram: Vec<(u32, u64, u64)>,
    coherent: Vec<(u32, u64, u64)>,
    /// How many writes of each kind were issued before the program's k-th fence.
    before_fence: Vec<(usize, usize, usize)>,
}

fn issued(h: &DsmHost) -> Issued {
    let mut i = Issued { slow: vec![], pram: vec![], coherent: vec![], before_fence: vec![] };
    for d in &h.did {
        match *d {
            Did::Wrote { seg, index, bits, semantics } => match semantics {
                Semantics::Slow => i.slow.push((seg, index, bits)),
                Semantics::Pram => i.pram.push((seg, index, bits)),
                Semantics::Coherent => i.coherent.push((seg, index, bits)),
            },
            Did::FenceEnded { .. } => i.before_fence.push((i.slow.len(), i.pram.len(), i.coherent.len())),
            Did::Read { .. } => {}
        }
    }
    i
}

fn check(seed: u64, hosts: &[DsmHost]) {
    let issued: Vec<Issued> = hosts.iter().map(issued).collect();
    let kind: HashMap<u64, Semantics> = hosts
        .iter()
        .flat_map(|h| {
            h.did.iter().filter_map(|d| match *d {
                Did::Wrote { bits, semantics, .. } => Some((bits, semantics)),
                _ => None,
            })
        })
        .collect();
    // What every replica applied: the shared checker (PRAM, slow, coherent).
    let programs: Vec<Vec<history::Issued>> = hosts
        .iter()
        .map(|h| {
            h.did
                .iter()
                .filter_map(|d| match *d {
                    Did::Wrote { seg, index, bits, semantics } => Some(history::Issued { seg, index, bits, semantics }),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let logs: Vec<Vec<Applied>> = hosts.iter().map(|h| h.log.clone()).collect();
    if let Err(e) = history::check(&programs, &logs) {
        panic!("seed {seed}: {e}");
    }
    // What the programs saw: reads and fences.
    for h in hosts {
        let rank = h.rank;
        // Reads return the last value applied to their location before them.
        for d in &h.did {
            if let Did::Read { seg, index, bits, log_at } = *d {
                let last = h.log[..log_at]
                    .iter()
                    .rev()
                    .find(|a| (a.entry.seg, a.entry.index) == (seg, index))
                    .map_or(0, |a| a.entry.bits);
                assert_eq!(bits, last, "seed {seed}: rank {rank} read {seg}[{index}]");
            }
        }
        // PRAM, from the reads: having seen write k of w, never an older
        // value than w's last PRAM write before k at a location.
        let mut seen: Vec<Option<usize>> = vec![None; hosts.len()];
        for d in &h.did {
            if let Did::Read { seg, index, bits, .. } = *d {
                if bits != 0 && kind[&bits] == Semantics::Pram {
                    let w = writer_of(bits) as usize;
                    let k = issued[w].pram.iter().position(|p| p.2 == bits).expect("issued");
                    seen[w] = Some(seen[w].map_or(k, |s| s.max(k)));
                }
                for (w, s) in seen.iter().enumerate() {
                    let Some(k) = *s else { continue };
                    let Some(&(_, _, due)) = issued[w].pram[..=k].iter().rev().find(|p| (p.0, p.1) == (seg, index))
                    else {
                        continue;
                    };
                    // (A write of another kind is ordered with PRAM writes
                    // only by fences.)
                    if bits == 0 || (kind[&bits] == Semantics::Pram && writer_of(bits) as usize == w && bits < due) {
                        panic!("seed {seed}: rank {rank} read {seg}[{index}] = {bits:#x} after seeing rank {w}'s PRAM write {k}, which follows {due:#x}");
                    }
                }
            }
        }
        // Fences: every write issued before fence e anywhere is applied here
        // when e ends here.
        let mut fence = 0;
        for d in &h.did {
            if let Did::FenceEnded { log_at } = *d {
                let applied: std::collections::HashSet<u64> = h.log[..log_at].iter().map(|a| a.entry.bits).collect();
                for (w, iss) in issued.iter().enumerate() {
                    let (slow, pram, coherent) = iss.before_fence.get(fence).copied().unwrap_or_default();
                    for &(_, _, bits) in iss.pram[..pram].iter().chain(&iss.coherent[..coherent]) {
                        assert!(
                            applied.contains(&bits),
                            "seed {seed}: fence {fence} ended at rank {rank} before rank {w}'s {bits:#x}"
                        );
                    }
                    // The last slow write of each location before the fence.
                    let mut last: BTreeMap<(u32, u64), u64> = BTreeMap::new();
                    for &(seg, index, bits) in &iss.slow[..slow] {
                        last.insert((seg, index), bits);
                    }
                    for bits in last.values() {
                        assert!(
                            applied.contains(bits),
                            "seed {seed}: fence {fence} ended at rank {rank} before rank {w}'s slow {bits:#x}"
                        );
                    }
                }
                fence += 1;
            }
        }
    }
}

#[test]
fn shared_memory_over_faulty_networks_keeps_each_semantics() {
    let seeds: u64 = std::env::var("BULKWIRE_DSM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let (mut writes, mut applied) = (0, 0);
    for seed in 0..seeds {
        let (w, a) = run(seed);
        writes += w;
        applied += a;
    }
    assert!(writes > seeds as usize, "{writes} writes over {seeds} seeds");
    eprintln!("{seeds} seeds: {writes} writes issued, {applied} applied across replicas");
}

#[test]
fn a_segment_mapped_differently_is_an_error_naming_both() {
    let mut a = Replica::new(Config::new(0, 2));
    let mut b = Replica::new(Config::new(1, 2));
    a.map("x", ElemType::F64, 10).unwrap();
    b.map("x", ElemType::F64, 12).unwrap();
    let (_, bytes) = b.poll_transmit().unwrap();
    a.handle(Time::ZERO, 1, &bytes);
    let e = a.failure().expect("a mismatch").to_string();
    assert!(e.contains("\"x\" of 10 f64 here but \"x\" of 12 f64 at rank 1"), "{e}");
}

#[test]
fn writes_out_of_range_and_to_unmapped_segments_are_refused() {
    let mut a = Replica::new(Config::new(0, 2));
    let s = a.map("x", ElemType::U8, 4).unwrap();
    let e = a.write(Time::ZERO, s, 4, 1, Semantics::Slow).unwrap_err().to_string();
    assert!(e.contains("write: index 4 is out of range: segment \"x\" has 4 elements"), "{e}");
    let e = a.write(Time::ZERO, SegId(3), 0, 1, Semantics::Pram).unwrap_err().to_string();
    assert!(e.contains("no segment 3 is mapped"), "{e}");
}

#[test]
fn nothing_from_the_network_panics_or_writes_out_of_range() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut r = Replica::new(Config::new(1, 3));
    r.map("x", ElemType::U64, 4).unwrap();
    for _ in 0..20_000 {
        let len = rng.random_range(0..80);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if let Some(b) = bytes.first_mut() {
            *b = rng.random_range(0..7);
        }
        r.handle(Time::ZERO, rng.random_range(0..4), &bytes);
    }
    // A batch that names a location out of range is refused whole.
    let mut r = Replica::new(Config::new(1, 2));
    let s = r.map("x", ElemType::U64, 4).unwrap();
    let bad = bulkwire_dsm::codec::encode(&bulkwire_dsm::codec::Message::Batch {
        sent: 1,
        entries: vec![
            bulkwire_dsm::codec::Entry { seg: 0, index: 1, bits: 7 },
            bulkwire_dsm::codec::Entry { seg: 0, index: 4, bits: 7 },
        ],
    });
    r.handle(Time::ZERO, 0, &bad);
    assert_eq!(r.storage(s).unwrap().load(1), 0, "nothing of a bad batch is applied");
    assert!(r.failure().unwrap().to_string().contains("out of its range"));
}
