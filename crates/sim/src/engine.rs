//! The event loop.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bulkwire_proto::{Path, Time, Transmit};

use crate::network::{Datagram, Delivery, Network};
use crate::rng::{self, SimRng, Stream};

/// A simulated process: the sans-IO shape of `proto::Endpoint`.
pub trait Host {
    fn handle_datagram(&mut self, now: Time, path: Path, bytes: &[u8]);
    fn handle_timeout(&mut self, now: Time);
    fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit>;
    fn poll_timeout(&mut self) -> Option<Time>;
}

#[derive(Debug)]
enum Action {
    Deliver(Delivery),
    /// The host's timer, valid only if it still equals `wake_at[host]`.
    Wake(usize),
    /// The host's network interface can take another datagram.
    NicFree(usize),
}

#[derive(Debug)]
struct Scheduled {
    at: Time,
    /// Insertion order breaks ties, so equal times replay identically.
    order: u64,
    action: Action,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// Hosts, a network and a clock.
pub struct Simulator<H: Host, N: Network> {
    now: Time,
    queue: BinaryHeap<Reverse<Scheduled>>,
    order: u64,
    hosts: Vec<H>,
    wake_at: Vec<Option<Time>>,
    nic_wake: Vec<Option<Time>>,
    network: N,
    rng: SimRng,
    buf: Vec<u8>,
    deliveries: Vec<Delivery>,
    events_processed: u64,
}

impl<H: Host, N: Network> Simulator<H, N> {
    pub fn new(seed: u64, hosts: Vec<H>, network: N) -> Self {
        let n = hosts.len();
        let mut sim = Simulator {
            now: Time::ZERO,
            queue: BinaryHeap::new(),
            order: 0,
            hosts,
            wake_at: vec![None; n],
            nic_wake: vec![None; n],
            network,
            rng: rng::stream(seed, Stream::Simulator),
            buf: vec![0; bulkwire_wire::MAX_DATAGRAM],
            deliveries: Vec::new(),
            events_processed: 0,
        };
        for h in 0..n {
            sim.service(h);
        }
        sim
    }

    pub fn now(&self) -> Time {
        self.now
    }

    pub fn hosts(&self) -> &[H] {
        &self.hosts
    }

    pub fn hosts_mut(&mut self) -> &mut [H] {
        &mut self.hosts
    }

    pub fn network(&self) -> &N {
        &self.network
    }

    pub fn events_processed(&self) -> u64 {
        self.events_processed
    }

    /// Lets a host act on something changed from outside (for instance an
    /// application command given through `hosts_mut`).
    pub fn poke(&mut self, host: usize) {
        self.service(host);
    }

    /// Runs until `done` holds, nothing is left to do, or simulated time
    /// would pass `deadline`. Returns whether `done` held.
    pub fn run_until(&mut self, deadline: Time, mut done: impl FnMut(&[H]) -> bool) -> bool {
        loop {
            if done(&self.hosts) {
                return true;
            }
            let Some(Reverse(next)) = self.queue.peek() else { return false };
            if next.at > deadline {
                self.now = deadline;
                return false;
            }
            let Reverse(next) = self.queue.pop().expect("peeked");
            self.now = next.at;
            self.events_processed += 1;
            match next.action {
                Action::Deliver(d) => {
                    self.hosts[d.to].handle_datagram(self.now, d.path, &d.bytes);
                    self.service(d.to);
                }
                Action::Wake(h) => {
                    if self.wake_at[h] == Some(self.now) {
                        self.wake_at[h] = None;
                        self.hosts[h].handle_timeout(self.now);
                        self.service(h);
                    }
                }
                Action::NicFree(h) => {
                    if self.nic_wake[h] == Some(self.now) {
                        self.nic_wake[h] = None;
                        self.service(h);
                    }
                }
            }
        }
    }

    /// Drains a host's transmissions while its interface takes them, then
    /// re-arms its timer.
    fn service(&mut self, h: usize) {
        loop {
            let ready = self.network.ready_at(self.now, h);
            if ready > self.now {
                if self.nic_wake[h].is_none_or(|t| t > ready) {
                    self.nic_wake[h] = Some(ready);
                    self.schedule(ready, Action::NicFree(h));
                }
                break;
            }
            let Some(t) = self.hosts[h].poll_transmit(self.now, &mut self.buf) else { break };
            let bytes = self.buf[..t.len].to_vec();
            self.network.send(
                self.now,
                Datagram { from: h, to: t.to as usize, path: t.path, bytes },
                &mut self.rng,
                &mut self.deliveries,
            );
            for d in std::mem::take(&mut self.deliveries) {
                self.schedule(d.at, Action::Deliver(d));
            }
        }
        let wake = self.hosts[h].poll_timeout().map(|t| t.max(self.now));
        if wake != self.wake_at[h] {
            self.wake_at[h] = wake;
            if let Some(t) = wake {
                self.schedule(t, Action::Wake(h));
            }
        }
    }

    fn schedule(&mut self, at: Time, action: Action) {
        self.order += 1;
        self.queue.push(Reverse(Scheduled { at, order: self.order, action }));
    }
}
