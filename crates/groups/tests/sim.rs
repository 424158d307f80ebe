//! The membership protocol and group posts over real `proto` endpoints in
//! the simulator, with random faults (loss, bursts, duplication,
//! reordering, corruption, partitions that heal), random membership
//! changes and posts, over many seeds: every member sees the same views;
//! every member of a view delivers every post of that view exactly once,
//! one poster's posts of a view in order; nobody delivers a post of a view
//! it was not in.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bulkwire_groups::codec::{Reader, Writer};
use bulkwire_groups::membership::{Event, GroupId, Membership, Message, View};
use bulkwire_groups::schedule::post_children;
use bulkwire_proto::{Config, Endpoint, Event as ProtoEvent, Path, SendError, Time, Transmit};
use bulkwire_sim::workload::random_scenario;
use bulkwire_sim::{Host, LinkNetwork, Simulator};
use bulkwire_wire::JobKey;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CONTROL: u16 = 0;
const POSTS: u16 = 1;

#[derive(Clone, Debug)]
enum Act {
    Create(String, Vec<u32>),
    Join(String),
    Leave(String),
    Destroy(String),
    Post(String),
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
    /// Posts of views not installed here yet.
    early: Vec<(u32, Vec<u8>)>,
    views: Vec<View>,
    events: Vec<Event>,
    sent: Vec<Delivered>,
    delivered: Vec<Delivered>,
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
            Act::Post(name) => {
                if let Some(v) = self.group(&name) {
                    self.posts += 1;
                    let mut w = Writer::new();
                    w.u32(v.group.0).u32(v.number).u32(self.rank).u32(self.posts);
                    self.sent.push((v.group, v.number, self.rank, self.posts));
                    for c in post_children(&v.members, self.rank, self.rank).unwrap() {
                        self.send(c, POSTS, w.bytes.clone());
                    }
                }
                Ok(())
            }
        };
    }

    fn on_post(&mut self, bytes: Vec<u8>) -> bool {
        let mut r = Reader::new(&bytes);
        let (g, v, origin, n) = (GroupId(r.u32().unwrap()), r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap());
        let Some(members) = self.history.get(&g).and_then(|h| h.get(&v)).cloned() else { return false };
        match post_children(&members, origin, self.rank) {
            Some(children) => {
                for c in children {
                    self.send(c, POSTS, bytes.clone());
                }
                self.delivered.push((g, v, origin, n));
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
                    ProtoEvent::Message { from, data, .. } => {
                        let _ = from;
                        self.early.push((from, data));
                    }
                    ProtoEvent::ProtocolViolation { reason, .. } => self.errors.push(reason.to_string()),
                    ProtoEvent::ModeChanged { .. } => {}
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
            for (from, bytes) in std::mem::take(&mut self.early) {
                if !self.on_post(bytes.clone()) {
                    self.early.push((from, bytes));
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
            _ => Act::Post(name),
        };
        acts.push((at, act));
    }
    acts
}

/// Runs one seed; returns the views made and the posts delivered.
fn run(seed: u64) -> (usize, usize) {
    let scenario = random_scenario(seed);
    let n = scenario.plan.ranks.max(3);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hosts: Vec<GroupHost> = (0..n)
        .map(|rank| {
            let key = JobKey::new([seed as u8; 32]);
            let mut c = Config::new(0x9e0 ^ seed, key, rank, n);
            c.channels = 2;
            c.max_datagram = scenario.max_datagram;
            c.initial_rtt = (scenario.link.delay * 2).max(Duration::from_micros(10));
            GroupHost {
                rank,
                ep: Endpoint::new(c).unwrap(),
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
    let delivered: usize = hosts.iter().map(|h| h.delivered.len()).sum();
    (all.len(), delivered)
}

#[test]
fn groups_over_faulty_networks_agree_and_deliver_every_post_once() {
    let seeds: u64 = std::env::var("BULKWIRE_GROUP_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let (mut views, mut posts) = (0, 0);
    for seed in 0..seeds {
        let (v, p) = run(seed);
        views += v;
        posts += p;
    }
    // The runs did something: groups were made and changed, posts went.
    assert!(views > seeds as usize && posts > seeds as usize, "{views} views, {posts} posts over {seeds} seeds");
    eprintln!("{seeds} seeds: {views} views, {posts} posts delivered");
}
