//! The membership protocol under random requests and every order of
//! delivery the channels below allow (each pair's messages in order,
//! different pairs' in any order), over many seeds: every member sees the
//! same views in the same order, with no gaps from the view that added it
//! to the one it left in, and every request is answered.

use std::collections::{BTreeMap, VecDeque};

use bulkwire_groups::codec::{Reader, Writer};
use bulkwire_groups::membership::{Event, GroupId, Membership, Message, RequestKind, View, WORLD};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

struct Net {
    procs: Vec<Membership>,
    /// In flight, per (from, to) pair, in order.
    links: BTreeMap<(u32, u32), VecDeque<Message>>,
    /// What each process was told, in order.
    events: Vec<Vec<Event>>,
}

impl Net {
    fn new(n: u32) -> Net {
        Net {
            procs: (0..n).map(|r| Membership::new(r, n)).collect(),
            links: BTreeMap::new(),
            events: vec![Vec::new(); n as usize],
        }
    }

    /// Moves what the processes want sent into the links (through the
    /// encoding, as on the wire) and what they were told into `events`.
    fn collect(&mut self) {
        for (from, p) in self.procs.iter_mut().enumerate() {
            while let Some((to, m)) = p.poll_transmit() {
                let mut w = Writer::new();
                m.encode(&mut w);
                let decoded = Message::decode(&mut Reader::new(&w.bytes)).unwrap();
                assert_eq!(decoded, m);
                self.links.entry((from as u32, to)).or_default().push_back(decoded);
            }
            while let Some(e) = p.poll_event() {
                self.events[from].push(e);
            }
        }
    }

    fn deliver_one(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let busy: Vec<(u32, u32)> = self.links.iter().filter(|(_, q)| !q.is_empty()).map(|(k, _)| *k).collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[rng.random_range(0..busy.len())];
        let m = self.links.get_mut(&(from, to)).unwrap().pop_front().unwrap();
        if std::env::var("TRACE").is_ok() {
            eprintln!("{from} -> {to}: {m:?}");
        }
        self.procs[to as usize].handle(from, m).expect("a correct peer's message is accepted");
        self.collect();
        true
    }
}

#[derive(Debug)]
enum Asked {
    Create(String),
    Join(String),
    Leave(GroupId),
    Destroy(GroupId),
}

fn run(seed: u64, n: u32, steps: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut net = Net::new(n);
    let mut asked: Vec<Vec<Asked>> = (0..n).map(|_| Vec::new()).collect();
    let names = ["a", "b", "c"];
    for _ in 0..steps {
        if rng.random_bool(0.3) {
            let p = rng.random_range(0..n) as usize;
            let member_of: Vec<GroupId> = net.procs[p].groups().map(|v| v.group).filter(|&g| g != WORLD).collect();
            match rng.random_range(0..4) {
                0 => {
                    let name = names[rng.random_range(0..names.len())].to_string();
                    let members: Vec<u32> = (0..rng.random_range(0..n)).map(|_| rng.random_range(0..n)).collect();
                    net.procs[p].create(&name, &members).unwrap();
                    asked[p].push(Asked::Create(name));
                }
                1 => {
                    let name = names[rng.random_range(0..names.len())].to_string();
                    net.procs[p].join(&name).unwrap();
                    asked[p].push(Asked::Join(name));
                }
                2 if !member_of.is_empty() => {
                    let g = member_of[rng.random_range(0..member_of.len())];
                    net.procs[p].leave(g).unwrap();
                    asked[p].push(Asked::Leave(g));
                }
                3 if !member_of.is_empty() => {
                    let g = member_of[rng.random_range(0..member_of.len())];
                    net.procs[p].destroy(g).unwrap();
                    asked[p].push(Asked::Destroy(g));
                }
                _ => {}
            }
            net.collect();
        } else {
            net.deliver_one(&mut rng);
        }
    }
    let mut delivered = 0;
    while net.deliver_one(&mut rng) {
        delivered += 1;
        if delivered > 999_980 {
            eprintln!(
                "views: {:?}",
                net.procs.iter().map(|p| p.groups().cloned().collect::<Vec<_>>()).collect::<Vec<_>>()
            );
        }
        assert!(delivered < 1_000_000, "seed {seed}: messages go round and round");
    }
    check(&net, &asked, seed);
}

fn check(net: &Net, asked: &[Vec<Asked>], seed: u64) {
    // One view per (group, number), whoever saw it.
    let mut views: BTreeMap<(GroupId, u32), View> = BTreeMap::new();
    for (p, events) in net.events.iter().enumerate() {
        let mut last: BTreeMap<GroupId, u32> = BTreeMap::new();
        for e in events {
            match e {
                Event::View(v) => {
                    assert!(v.contains(p as u32), "seed {seed}: rank {p} got a view it is not in: {v:?}");
                    if let Some(seen) = views.get(&(v.group, v.number)) {
                        assert_eq!(seen, v, "seed {seed}: two different views numbered {}", v.number);
                    }
                    views.insert((v.group, v.number), v.clone());
                    if let Some(&before) = last.get(&v.group) {
                        assert_eq!(v.number, before + 1, "seed {seed}: rank {p} skipped a view of {:?}", v.group);
                    }
                    last.insert(v.group, v.number);
                }
                Event::Left { group, after, .. } => {
                    assert_eq!(last.remove(group), Some(*after), "seed {seed}: rank {p} left after another view");
                }
                Event::Destroyed { group, .. } => {
                    assert!(last.remove(group).is_some(), "seed {seed}: rank {p} told of a group it was not in");
                }
                Event::Refused { .. } => {}
            }
        }
        // Still a member: the last view it saw is the group's last.
        for (g, number) in last {
            let newest = views.range((g, 0)..=(g, u32::MAX)).next_back().map(|(k, _)| k.1).unwrap();
            assert_eq!(number, newest, "seed {seed}: rank {p} is behind in {g:?}");
            assert_eq!(net.procs[p].view(g).unwrap().number, number);
        }
    }
    // Consecutive views differ by the one change their server made.
    for ((g, number), v) in &views {
        if let Some(next) = views.get(&(*g, number + 1)) {
            let d = next.members.len() as i64 - v.members.len() as i64;
            assert!(d == 1 || d == -1, "seed {seed}: views {number} and {} of {g:?}: {v:?} {next:?}", number + 1);
        }
    }
    // Every request was answered.
    for (p, asks) in asked.iter().enumerate() {
        let events = &net.events[p];
        for a in asks {
            let answered = events.iter().any(|e| match (a, e) {
                (Asked::Create(n) | Asked::Join(n), Event::View(v)) => &v.name == n,
                (Asked::Create(n), Event::Refused { kind: RequestKind::Create, name, .. }) => name == n,
                (Asked::Join(n), Event::Refused { kind: RequestKind::Join, name, .. }) => name == n,
                (Asked::Leave(g), Event::Left { group, .. } | Event::Destroyed { group, .. }) => group == g,
                (Asked::Leave(_), Event::Refused { kind: RequestKind::Leave, .. }) => true,
                (Asked::Destroy(g), Event::Destroyed { group, .. }) => group == g,
                (Asked::Destroy(_), Event::Refused { kind: RequestKind::Destroy, .. }) => true,
                _ => false,
            });
            assert!(answered, "seed {seed}: rank {p}'s {a:?} was never answered: {events:?}");
        }
    }
}

#[test]
fn random_requests_in_every_order_give_every_member_the_same_views() {
    for seed in 0..2000 {
        run(seed, 2 + (seed % 7) as u32, 100 + (seed % 5) as usize * 100);
    }
}

#[test]
fn a_server_that_leaves_hands_the_group_to_the_next_member() {
    let mut net = Net::new(4);
    net.procs[1].create("g", &[2, 3]).unwrap();
    net.collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    while net.deliver_one(&mut rng) {}
    let g = net.procs[2].view(GroupId(1)).unwrap().group;
    net.procs[1].leave(g).unwrap();
    net.collect();
    while net.deliver_one(&mut rng) {}
    let v = net.procs[3].view(g).unwrap();
    assert_eq!((v.number, v.members.clone(), v.server), (2, vec![2, 3], 2));
    // A join goes through the directory, which now names rank 2.
    net.procs[0].join("g").unwrap();
    net.collect();
    while net.deliver_one(&mut rng) {}
    assert_eq!(net.procs[3].view(g).unwrap().members, vec![2, 3, 0]);
    assert!(net.procs[1].view(g).is_none());
}

#[test]
fn misuse_is_refused_with_the_reason() {
    let mut net = Net::new(3);
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    net.procs[1].create("g", &[]).unwrap();
    net.procs[2].create("g", &[]).unwrap();
    net.collect();
    while net.deliver_one(&mut rng) {}
    let refused = |net: &Net, p: usize| {
        net.events[p].iter().rev().find_map(|e| match e {
            Event::Refused { why, .. } => Some(why.to_string()),
            _ => None,
        })
    };
    let winner = if net.procs[1].view(GroupId(1)).is_some() { 1 } else { 2 };
    assert_eq!(refused(&net, 3 - winner).as_deref(), Some("a group of that name exists"));
    net.procs[winner].join("g").unwrap();
    net.procs[0].join("nothing").unwrap();
    net.collect();
    while net.deliver_one(&mut rng) {}
    assert_eq!(refused(&net, winner).as_deref(), Some("this process is already a member"));
    assert_eq!(refused(&net, 0).as_deref(), Some("no group has that name"));
    assert!(net.procs[0].leave(GroupId(1)).is_err());
    assert!(net.procs[0].leave(WORLD).is_err());
    assert!(net.procs[0].create("", &[]).is_err());
    assert!(net.procs[0].create("x", &[9]).is_err());
}

/// Bytes from the network that are not a message are refused, whatever
/// they are; nothing panics.
#[test]
fn any_bytes_decode_to_a_message_or_an_error() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..20_000 {
        let len = rng.random_range(0..40);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if !bytes.is_empty() {
            bytes[0] = rng.random_range(0..11);
        }
        if let Ok(m) = Message::decode(&mut Reader::new(&bytes)) {
            let mut p = Membership::new(0, 4);
            let _ = p.handle(1, m);
        }
    }
}
