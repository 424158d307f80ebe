//! A switched network: every host on a port of one non-blocking switch.
//!
//! A datagram leaves its host's interface at the link rate, crosses the
//! cable to the switch, waits in the drop-tail queue of the output port of
//! its destination and crosses the cable to it. Hosts contend for the
//! ports they send to (many to one fills the receiver's port queue), never
//! inside the switch. State grows with the hosts, not with their pairs as
//! in [`crate::LinkNetwork`], so a thousand hosts cost a thousand ports.

use std::collections::VecDeque;
use std::time::Duration;

use bulkwire_proto::Time;
use bulkwire_wire::PacketType;

use crate::network::{Datagram, Delivery, NetStats, Network};
use crate::rng::SimRng;

/// The switch and its cables.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchParams {
    /// Propagation of one cable, host to switch or switch to host (with
    /// the switch's own latency): a datagram crosses two.
    pub hop_delay: Duration,
    /// Rate of every cable and port, bits per second.
    pub rate_bps: u64,
    /// Datagrams an output port queues; more are dropped.
    pub queue_packets: usize,
}

impl Default for SwitchParams {
    /// 1 Gbit/s, 25 us a hop (50 us host to host before transmission, as
    /// [`crate::LinkParams`]'s default link), 1,000 datagrams a port.
    fn default() -> Self {
        SwitchParams { hop_delay: Duration::from_micros(25), rate_bps: 1_000_000_000, queue_packets: 1000 }
    }
}

#[derive(Debug, Default)]
struct Port {
    busy_until: Time,
    /// When the datagrams in the queue finish transmission.
    in_queue: VecDeque<Time>,
}

/// Hosts on one switch (see the module's documentation).
#[derive(Debug)]
pub struct SwitchNetwork {
    params: SwitchParams,
    nic_busy: Vec<Time>,
    ports: Vec<Port>,
    stats: NetStats,
}

impl SwitchNetwork {
    pub fn new(hosts: usize, params: SwitchParams) -> SwitchNetwork {
        SwitchNetwork {
            params,
            nic_busy: vec![Time::ZERO; hosts],
            ports: (0..hosts).map(|_| Port::default()).collect(),
            stats: NetStats::default(),
        }
    }

    /// Datagrams in the queue of `host`'s port when the last one reached it.
    pub fn queued(&self, host: usize) -> usize {
        self.ports.get(host).map_or(0, |p| p.in_queue.len())
    }
}

fn transmission(bytes: usize, bps: u64) -> Duration {
    // IP and UDP headers count on the wire too (as in `LinkNetwork`).
    Duration::from_nanos(((bytes as u64 + 28) * 8 * 1_000_000_000) / bps.max(1))
}

impl Network for SwitchNetwork {
    fn send(&mut self, now: Time, datagram: Datagram, _rng: &mut SimRng, out: &mut Vec<Delivery>) {
        let Datagram { from, to, path, bytes } = datagram;
        let hosts = self.ports.len();
        if from >= hosts || to >= hosts || from == to {
            return;
        }
        let p = &self.params;
        let wire = transmission(bytes.len(), p.rate_bps);
        let left = now.max(self.nic_busy[from]) + wire;
        self.nic_busy[from] = left;
        self.stats.sent += 1;
        let at_switch = left + p.hop_delay;
        let port = &mut self.ports[to];
        while port.in_queue.front().is_some_and(|&done| done <= at_switch) {
            port.in_queue.pop_front();
        }
        if port.in_queue.len() >= p.queue_packets {
            self.stats.queue_drops += 1;
            // The simulator may peek at the unauthenticated type byte, for statistics only.
            self.stats.data_lost += u64::from(bytes.get(1) == Some(&(PacketType::Data as u8)));
            return;
        }
        port.busy_until = at_switch.max(port.busy_until) + wire;
        port.in_queue.push_back(port.busy_until);
        self.stats.delivered += 1;
        out.push(Delivery { at: port.busy_until + p.hop_delay, to, path, bytes });
    }

    fn ready_at(&self, now: Time, host: usize) -> Time {
        self.nic_busy.get(host).map_or(now, |&t| t.max(now))
    }

    fn stats(&self) -> NetStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkwire_proto::Path;

    fn datagram(from: usize, to: usize, len: usize) -> Datagram {
        Datagram { from, to, path: Path::Ordinary, bytes: vec![0; len] }
    }

    #[test]
    fn a_datagram_crosses_two_hops_and_senders_queue_at_the_receivers_port() {
        let params = SwitchParams { queue_packets: 2, ..SwitchParams::default() };
        let mut net = SwitchNetwork::new(4, params);
        let mut rng = crate::rng::stream(1, crate::rng::Stream::Simulator);
        let mut out = Vec::new();
        // 972 bytes + 28 of headers: 8 us at 1 Gbit/s.
        net.send(Time::ZERO, datagram(0, 3, 972), &mut rng, &mut out);
        assert_eq!(out[0].at, Time::ZERO + Duration::from_micros(8 + 25 + 8 + 25));
        // Two more senders to the same port at once: they wait for it, and
        // the third in the queue is dropped.
        net.send(Time::ZERO, datagram(1, 3, 972), &mut rng, &mut out);
        net.send(Time::ZERO, datagram(2, 3, 972), &mut rng, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].at, out[0].at + Duration::from_micros(8));
        assert_eq!((net.stats().sent, net.stats().delivered, net.stats().queue_drops), (3, 2, 1));
        assert_eq!(net.queued(3), 2);
        // Another port is free.
        net.send(Time::ZERO, datagram(3, 1, 972), &mut rng, &mut out);
        assert_eq!(out[2].at, out[0].at);
        // A dropped datagram took its sender's interface all the same.
        assert_eq!(net.ready_at(Time::ZERO, 2), Time::ZERO + Duration::from_micros(8));
    }
}
