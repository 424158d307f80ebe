//! The membership protocol and group posts over real `proto` endpoints in
//! the simulator, with random faults (loss, bursts, duplication,
//! reordering, corruption, partitions that heal), random membership
//! changes and posts, over many seeds: every member sees the same views;
//! every member of a view delivers every post of that view exactly once,
//! one poster's posts of a view in order; nobody delivers a post of a view
//! it was not in. Posts sent best effort (a channel of
//! `Strategy::BestEffort`, as `Group::set_best_effort` uses) arrive at most
//! once, in their poster's order, only at members of their view.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bulkwire_groups::codec::{Reader, Writer};
use bulkwire_groups::membership::{Event, GroupId, Membership, Message, View};
use bulkwire_groups::schedule::post_children;
use bulkwire_proto::{Config, Endpoint, Event as ProtoEvent, Path, SendError, Strategy, Time, Transmit};
use bulkwire_sim::workload::random_scenario;
use bulkwire_sim::{Host, LinkNetwork, Simulator};
use bulkwire_wire::JobKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CONTROL: u16 = 0;
const POSTS: u16 = 1;
const BEST_EFFORT_POSTS: u16 = 2;

#[derive(Clone, Debug)]
enum Act {
    Create(String, Vec<u32>),
    Join(String),
    Leave(String),
    Destroy(String),
    Post(String),
    /// A post on the best-effort channel.
    PostBestEffort(String),
}

/// A post as delivered: group, view, poster, the poster's number for it.
type Delivered = (GroupId, u32, u32, u32);

struct GroupHost {
    rank: u32,
    ep: Endpoint,
    m: Membership,
    script: Vec<(Time, Act)>,
    next: usize,
    /// Messages the endpoint had no room for yet.
    out: Vec<(u32, u16, Vec<u8>)>,
    history: HashMap<GroupId, BTreeMap<u32, Vec<u32>>>,
    /// Posts of views not installed here yet, with their channel.
    early: Vec<(u16, Vec<u8>)>,
    views: Vec<View>,
    events: Vec<Event>,
    sent: Vec<Delivered>,
    delivered: Vec<Delivered>,
    sent_best_effort: Vec<Delivered>,
    delivered_best_effort: Vec<Delivered>,
    posts: u32,
    errors: Vec<String>,
}

impl GroupHost {
    fn send(&mut self, to: u32, channel: u16, bytes: Vec<u8>) {
        self.out.push((to, channel, bytes));
    }

    fn flush(&mut self) {
        while let Some((to, channel, bytes)) = self.out.first().cloned() {
            match self.ep.send_owned(to, channel, bytes) {
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

    fn group(&self, name: &str) -> Option<View> {
        self.m.groups().find(|v| v.name == name).cloned()
    }

    fn act(&mut self, act: Act) {
        // Requests a process cannot make are skipped, as a program would
        // not make them.
        let _ = match act {
            Act::Create(name, members) => self.m.create(&name, &members),
            Act::Join(name) => self.m.join(&name),
            Act::Leave(name) => match self.group(&name) {
                Some(v) => self.m.leave(v.group),
                None => Ok(()),
            },
            Act::Destroy(name) => match self.group(&name) {
                Some(v) => self.m.destroy(v.group),
                None => Ok(()),
            },
            Act::Post(ref name) | Act::PostBestEffort(ref name) => {
                let channel = if matches!(act, Act::Post(_)) { POSTS } else { BEST_EFFORT_POSTS };
                if let Some(v) = self.group(name) {
                    self.posts += 1;
                    let mut w = Writer::new();
                    w.u32(v.group.0).u32(v.number).u32(self.rank).u32(self.posts);
                    let post = (v.group, v.number, self.rank, self.posts);
                    match channel {
                        POSTS => self.sent.push(post),
                        _ => self.sent_best_effort.push(post),
                    }
                    for c in post_children(&v.members, self.rank, self.rank).unwrap() {
                        self.send(c, channel, w.bytes.clone());
                    }
                }
                Ok(())
            }
        };
    }

    fn on_post(&mut self, channel: u16, bytes: Vec<u8>) -> bool {
        let mut r = Reader::new(&bytes);
        let (g, v, origin, n) = (GroupId(r.u32().unwrap()), r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap());
        let Some(members) = self.history.get(&g).and_then(|h| h.get(&v)).cloned() else { return false };
        match post_children(&members, origin, self.rank) {
            Some(children) => {
                // Passed on the way it came.
                for c in children {
                    self.send(c, channel, bytes.clone());
                }
                match channel {
                    POSTS => self.delivered.push((g, v, origin, n)),
                    _ => self.delivered_best_effort.push((g, v, origin, n)),
                }
            }
            None => self.errors.push(format!("rank {}: a post of a view it is not in", self.rank)),
        }
        true
    }

    fn step(&mut self, now: Time) {
        while self.next < self.script.len() && self.script[self.next].0 <= now {
            let act = self.script[self.next].1.clone();
            self.next += 1;
            self.act(act);
        }
        loop {
            let mut progress = false;
            while let Some(e) = self.ep.poll_event() {
                progress = true;
                match e {
                    ProtoEvent::Message { from, channel: CONTROL, data, .. } => {
                        match Message::decode(&mut Reader::new(&data)) {
                            Ok(msg) => {
                                if let Err(why) = self.m.handle(from, msg) {
                                    self.errors.push(format!("rank {}: {why}", self.rank));
                                }
                            }
                            Err(e) => self.errors.push(format!("rank {}: {e}", self.rank)),
                        }
                    }
                    ProtoEvent::Message { channel, data, .. } => self.early.push((channel, data)),
                    ProtoEvent::ProtocolViolation { reason, .. } => self.errors.push(reason.to_string()),
                    ProtoEvent::ModeChanged { .. } => {}
                    ProtoEvent::Placed { .. } => unreachable!("no receive's buffer is given here"),
                    ProtoEvent::Aimed { .. } => unreachable!("no aim is given here"),
                }
            }
            while let Some((to, msg)) = self.m.poll_transmit() {
                let mut w = Writer::new();
                msg.encode(&mut w);
                self.send(to, CONTROL, w.bytes);
            }
            while let Some(ev) = self.m.poll_event() {
                progress = true;
                if let Event::View(v) = &ev {
                    self.history.entry(v.group).or_default().insert(v.number, v.members.clone());
                    self.views.push(v.clone());
                }
                self.events.push(ev);
            }
            for (channel, bytes) in std::mem::take(&mut self.early) {
                if !self.on_post(channel, bytes.clone()) {
                    self.early.push((channel, bytes));
                } else {
                    progress = true;
                }
            }
            self.flush();
            if !progress {
                break;
            }
        }
    }
}

impl Host for GroupHost {
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
            self.flush();
        }
        t
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        let app = self.script.get(self.next).map(|a| a.0);
        match (self.ep.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn script(rng: &mut ChaCha8Rng, n: u32) -> Vec<(Time, Act)> {
    let names = ["a", "b"];
    let mut at = Time::ZERO;
    let mut acts = Vec::new();
    for _ in 0..rng.random_range(10..40) {
        at = at + Duration::from_micros(rng.random_range(0..3000));
        let name = names[rng.random_range(0..names.len())].to_string();
        let act = match rng.random_range(0..10) {
            0 => Act::Create(name, (0..rng.random_range(0..n)).map(|_| rng.random_range(0..n)).collect()),
            1 | 2 => Act::Join(name),
            3 => Act::Leave(name),
            4 if rng.random_bool(0.3) => Act::Destroy(name),
            5 | 6 => Act::PostBestEffort(name),
            _ => Act::Post(name),
        };
        acts.push((at, act));
    }
    acts
}

/// What one seed did: views made, posts delivered, and best-effort posts
/// delivered out of those that would reach a member with no loss.
struct Outcome {
    views: usize,
    delivered: usize,
    best_effort: (usize, usize),
}

/// Runs one seed.
fn run(seed: u64) -> Outcome {
    let scenario = random_scenario(seed);
    let n = scenario.plan.ranks.max(3);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hosts: Vec<GroupHost> = (0..n)
        .map(|rank| {
            let key = JobKey::new([seed as u8; 32]);
            let mut c = Config::new(0x9e0 ^ seed, key, rank, n);
            c.channels = 3;
            c.max_datagram = scenario.max_datagram;
            c.initial_rtt = (scenario.link.delay * 2).max(Duration::from_micros(10));
            let mut ep = Endpoint::new(c).unwrap();
            for peer in (0..n).filter(|&p| p != rank) {
                ep.set_strategy(peer, BEST_EFFORT_POSTS, Strategy::BestEffort).unwrap();
            }
            GroupHost {
                rank,
                ep,
                m: Membership::new(rank, n),
                script: script(&mut rng, n),
                next: 0,
                out: Vec::new(),
                history: HashMap::new(),
                early: Vec::new(),
                views: Vec::new(),
                events: Vec::new(),
                sent: Vec::new(),
                delivered: Vec::new(),
                sent_best_effort: Vec::new(),
                delivered_best_effort: Vec::new(),
                posts: 0,
                errors: Vec::new(),
            }
        })
        .collect();
    let network = LinkNetwork::uniform(n as usize, scenario.link.clone());
    let deadline = network.healed_at() + Duration::from_secs(30);
    let mut sim = Simulator::new(seed, hosts, network);
    let quiet = sim.run_until(deadline, |hosts| {
        hosts.iter().all(|h| h.next == h.script.len() && h.out.is_empty() && h.ep.is_idle() && h.early.is_empty())
    });
    let hosts = sim.hosts();
    for h in hosts {
        assert!(h.errors.is_empty(), "seed {seed}: {:?}", h.errors);
    }
    if !quiet {
        for h in hosts.iter().filter(|h| !h.early.is_empty()) {
            let mut r = Reader::new(&h.early[0].1);
            let (g, v, o) = (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap());
            eprintln!("rank {} holds a post of group {g} view {v} from {o}; its events: {:?}", h.rank, h.events);
        }
    }
    assert!(
        quiet,
        "seed {seed}: the job did not settle: {:?}",
        hosts.iter().map(|h| h.early.len()).collect::<Vec<_>>()
    );
    // One view per (group, number), whoever saw it; no gaps per member.
    let mut all: BTreeMap<(GroupId, u32), View> = BTreeMap::new();
    for h in hosts {
        let mut last: BTreeMap<GroupId, u32> = BTreeMap::new();
        for e in &h.events {
            match e {
                Event::View(v) => {
                    if let Some(seen) = all.get(&(v.group, v.number)) {
                        assert_eq!(seen, v, "seed {seed}");
                    }
                    all.insert((v.group, v.number), v.clone());
                    if let Some(&before) = last.get(&v.group) {
                        assert_eq!(v.number, before + 1, "seed {seed}: rank {} skipped a view", h.rank);
                    }
                    last.insert(v.group, v.number);
                }
                Event::Left { group, .. } | Event::Destroyed { group, .. } => {
                    last.remove(group);
                }
                Event::Refused { .. } => {}
            }
        }
    }
    // Every post of a view reaches every other member of that view once,
    // each poster's in order, and no one else.
    let mut expected: BTreeMap<u32, Vec<Delivered>> = BTreeMap::new();
    for h in hosts {
        for &(g, v, origin, k) in &h.sent {
            for &m in &all[&(g, v)].members {
                if m != origin {
                    expected.entry(m).or_default().push((g, v, origin, k));
                }
            }
        }
    }
    for h in hosts {
        let mut got = h.delivered.clone();
        let mut want = expected.remove(&h.rank).unwrap_or_default();
        // One poster's posts of one view in the poster's order: its
        // numbers rise. (Posts of different views take different trees.)
        for &(g, v, origin, _) in &got {
            let mine: Vec<u32> = got.iter().filter(|d| (d.0, d.1, d.2) == (g, v, origin)).map(|d| d.3).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: rank {} got {origin}'s posts out of order",
                h.rank
            );
        }
        got.sort();
        want.sort();
        assert_eq!(got, want, "seed {seed}: rank {}'s posts", h.rank);
    }
    // Best-effort posts: at most once, in order, only at members of their
    // view; some may be lost.
    let mut reachable: BTreeMap<u32, Vec<Delivered>> = BTreeMap::new();
    for h in hosts {
        for &(g, v, origin, k) in &h.sent_best_effort {
            for &m in all[&(g, v)].members.iter().filter(|&&m| m != origin) {
                reachable.entry(m).or_default().push((g, v, origin, k));
            }
        }
    }
    let (mut got_best_effort, mut could) = (0, 0);
    for h in hosts {
        let want = reachable.remove(&h.rank).unwrap_or_default();
        let got = &h.delivered_best_effort;
        for d in got {
            assert!(want.contains(d), "seed {seed}: rank {} got a best-effort post it should not: {d:?}", h.rank);
            let mine: Vec<u32> = got.iter().filter(|e| (e.0, e.1, e.2) == (d.0, d.1, d.2)).map(|e| e.3).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: rank {} got {}'s best-effort posts twice or out of order",
                h.rank,
                d.2
            );
        }
        got_best_effort += got.len();
        could += want.len();
    }
    let delivered: usize = hosts.iter().map(|h| h.delivered.len()).sum();
    Outcome { views: all.len(), delivered, best_effort: (got_best_effort, could) }
}

#[test]
fn groups_over_faulty_networks_agree_and_deliver_every_post_once() {
    let seeds: u64 = std::env::var("BULKWIRE_GROUP_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let (mut views, mut posts, mut best_effort, mut could) = (0, 0, 0, 0);
    for seed in 0..seeds {
        let o = run(seed);
        views += o.views;
        posts += o.delivered;
        best_effort += o.best_effort.0;
        could += o.best_effort.1;
    }
    // The runs did something: groups were made and changed, posts went,
    // and most best-effort posts arrived in spite of the faults.
    assert!(views > seeds as usize && posts > seeds as usize, "{views} views, {posts} posts over {seeds} seeds");
    assert!(best_effort * 2 > could, "{best_effort} of {could} best-effort posts arrived");
    eprintln!("{seeds} seeds: {views} views, {posts} posts delivered; best effort {best_effort} of {could}");
}
