//! Behaviour of the reliable channels, driven packet by packet between two
//! endpoints with a virtual clock and a scriptable loss filter.

use std::time::Duration;

use bulkwire_proto::{Config, Endpoint, Event, SendError, Strategy, Time};
use bulkwire_wire::{encode, job_tag, Header, JobKey, PacketType};

const JOB: u64 = 77;
const DELAY: Duration = Duration::from_micros(50);

fn config(rank: u32) -> Config {
    let mut c = Config::new(JOB, JobKey::new([3; 32]), rank, 2);
    c.initial_rtt = DELAY * 2;
    c
}

/// What the loss filter sees of a datagram.
#[derive(Clone, Copy, Debug)]
struct Seen {
    from: usize,
    packet_type: u8,
    sequence: u64,
    retransmission: bool,
}

/// Two endpoints joined by a link with a fixed delay in each direction.
struct Pair {
    ends: [Endpoint; 2],
    now: Time,
    in_flight: Vec<(Time, usize, Vec<u8>)>,
    drop: Box<dyn FnMut(&Seen) -> bool>,
    /// One-way delay of each datagram (DELAY unless a test says otherwise).
    delay: Box<dyn FnMut(&Seen) -> Duration>,
    received: [Vec<Vec<u8>>; 2],
    violations: Vec<&'static str>,
}

impl Pair {
    fn new(a: Config, b: Config) -> Pair {
        Pair {
            ends: [Endpoint::new(a).unwrap(), Endpoint::new(b).unwrap()],
            now: Time::ZERO,
            in_flight: Vec::new(),
            drop: Box::new(|_| false),
            delay: Box::new(|_| DELAY),
            received: [Vec::new(), Vec::new()],
            violations: Vec::new(),
        }
    }

    fn default() -> Pair {
        Pair::new(config(0), config(1))
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 65_536];
        for i in 0..2 {
            loop {
                // `has_transmit` false promises that nothing is to send.
                let announced = self.ends[i].has_transmit();
                let Some(t) = self.ends[i].poll_transmit(self.now, &mut buf) else { break };
                assert!(announced, "a datagram that has_transmit did not announce");
                let bytes = buf[..t.len].to_vec();
                let seen = Seen {
                    from: i,
                    packet_type: bytes[1],
                    sequence: bulkwire_wire::Header::named_sequence(&bytes).unwrap(),
                    retransmission: bytes[2] & 4 != 0,
                };
                if !(self.drop)(&seen) {
                    let delay = (self.delay)(&seen);
                    self.in_flight.push((self.now + delay, 1 - i, bytes));
                }
            }
            while let Some(e) = self.ends[i].poll_event() {
                match e {
                    Event::Message { data, .. } => self.received[i].push(data),
                    Event::ProtocolViolation { reason, .. } => self.violations.push(reason),
                    Event::ModeChanged { .. } => unreachable!("the latency engines are off in these tests"),
                    Event::Placed { .. } => unreachable!("no receive's buffer is given in these tests"),
                    Event::Aimed { .. } => unreachable!("no aim is given in these tests"),
                }
            }
        }
    }

    /// Advances to the next arrival or timer; false when nothing is left.
    fn step(&mut self) -> bool {
        self.step_until(None)
    }

    /// [`Pair::step`], but no later than `limit` (then it only moves the
    /// clock there).
    fn step_until(&mut self, limit: Option<Time>) -> bool {
        self.flush();
        let arrival = self.in_flight.iter().map(|p| p.0).min();
        let timer = self.ends.iter().filter_map(|e| e.poll_timeout()).min();
        let next = match (arrival, timer) {
            (Some(a), Some(t)) => a.min(t),
            (a, t) => match a.or(t) {
                Some(x) => x,
                None => return false,
            },
        };
        if let Some(limit) = limit.filter(|&l| next > l) {
            self.now = self.now.max(limit);
            return true;
        }
        self.now = self.now.max(next);
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.in_flight).into_iter().partition(|p| p.0 <= self.now);
        self.in_flight = later;
        for (_, to, bytes) in due {
            self.ends[to].handle_datagram(self.now, &bytes);
        }
        for e in &mut self.ends {
            e.handle_timeout(self.now);
        }
        self.flush();
        true
    }

    fn run(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.now < end && !(self.ends[0].is_idle() && self.ends[1].is_idle() && self.in_flight.is_empty()) {
            if !self.step() {
                break;
            }
        }
    }
}

/// A data packet's payload in the pair's datagrams of 1,472 bytes.
const PAYLOAD: usize = 1472 - bulkwire_wire::OVERHEAD;

fn msg(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn hole_filling_resends_exactly_the_missing_packets() {
    let mut p = Pair::default();
    // A packet's payload is PAYLOAD (1,412) bytes; 1000-byte messages go one per packet.
    p.drop = Box::new(|s| s.packet_type == 1 && !s.retransmission && [2, 3, 7, 8].contains(&s.sequence));
    for i in 0..10 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        if i == 9 {
            p.ends[0].end_phase(1, 0);
        }
        p.flush(); // one packet per message
    }
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1], (0..10).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert_eq!(s.data_sent, 10);
    assert_eq!(s.retransmissions, 4, "exactly the four lost packets, each once: {s:?}");
    assert!(p.ends[0].is_idle());
}

#[test]
fn a_data_packet_whose_acknowledgement_waits_leaves_nothing_to_transmit() {
    // A ping-pong's message: once handled, the receiver has nothing to
    // send until its answer (or its acknowledgement's timer) is due.
    let mut p = Pair::default();
    let mut buf = vec![0u8; 65_536];
    p.ends[0].send(1, 0, &msg(0, 8)).unwrap();
    let t = p.ends[0].poll_transmit(p.now, &mut buf).unwrap();
    p.ends[1].handle_datagram(p.now + DELAY, &buf[..t.len]);
    assert!(!p.ends[1].has_transmit(), "nothing is due right after a data packet");
    assert!(p.ends[1].poll_transmit(p.now + DELAY, &mut buf).is_none());
    assert!(matches!(p.ends[1].poll_event(), Some(Event::Message { .. })));
    // The answer carries the acknowledgement; the sender frees its packet.
    p.now = p.now + DELAY;
    p.ends[1].send(0, 0, &msg(1, 8)).unwrap();
    assert!(p.ends[1].has_transmit());
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[0].len(), 1);
    assert!(p.ends[0].is_idle() && p.ends[1].is_idle());
    // Alone, a data packet is still acknowledged once its timer runs.
    p.ends[0].send(1, 0, &msg(2, 8)).unwrap();
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 1);
    assert!(p.ends[0].is_idle(), "the lone packet was acknowledged");
    assert!(p.ends[1].channel_stats(0, 0).unwrap().explicit_acks_sent >= 1);
}

#[test]
fn symmetric_traffic_piggybacks_and_does_not_resend_twice_per_round_trip() {
    let mut p = Pair::default();
    p.drop = Box::new(|s| s.from == 0 && s.packet_type == 1 && !s.retransmission && s.sequence == 5);
    for round in 0..40 {
        p.ends[0].send(1, 0, &msg(round, 1000)).unwrap();
        p.ends[1].send(0, 0, &msg(round, 1000)).unwrap();
        if round == 39 {
            p.ends[0].end_phase(1, 0);
            p.ends[1].end_phase(0, 0);
        }
        p.step();
    }
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 40);
    assert_eq!(p.received[0].len(), 40);
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    // Every reverse packet reports the hole until the resend lands, yet the
    // packet goes again once.
    assert_eq!(s.retransmissions, 1, "{s:?}");
    assert!(s.implicit_acks > 0, "{s:?}");
    assert_eq!(p.ends[1].channel_stats(0, 0).unwrap().prods_sent, 0, "reverse traffic makes prods unnecessary");
}

#[test]
fn prods_back_off_exponentially() {
    let mut p = Pair::default();
    // The first packet arrives, the rest never do, nor anything back: the
    // receiver knows of a hole (packet 2 arrives, 1 does not) and prods.
    p.drop =
        Box::new(|s| !(s.from == 0 && s.packet_type == 1 && (s.sequence == 0 || s.sequence == 2) && !s.retransmission));
    for i in 0..3 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
    }
    p.run(Duration::from_secs(10));
    let prods = p.ends[1].channel_stats(0, 0).unwrap().prods_sent;
    // 10 s at a 200 us minimum would be 50,000 prods; back-off to the 1 s cap
    // makes it about 10 + 10.
    assert!((5..=30).contains(&prods), "prods sent: {prods}");
    let probes = p.ends[0].channel_stats(1, 0).unwrap().timeouts;
    assert!((5..=30).contains(&probes), "tail probes sent: {probes}");
}

#[test]
fn a_missing_packet_is_prodded_for_and_resent() {
    let mut p = Pair::default();
    // Packet 1 never arrives the first time: the receiver holds 2, knows of
    // the hole and prods; the sender resends.
    p.drop = Box::new(|s| s.from == 0 && s.packet_type == 1 && s.sequence == 1 && !s.retransmission);
    for i in 0..3 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
    }
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 3);
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert!(r.prods_sent >= 1, "{r:?}");
    assert_eq!(s.prods_received, r.prods_sent);
    assert!(s.retransmissions >= 1);
}

#[test]
fn a_prod_with_nothing_missing_is_answered_by_an_ack() {
    let mut p = Pair::default();
    for i in 0..3 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
    }
    p.ends[0].end_phase(1, 0);
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 3);
    let before = p.ends[0].channel_stats(1, 0).unwrap();
    // A late prod from a receiver that has everything (it ran ahead, or the
    // prod was delayed): nothing is resent, an acknowledgement says so.
    let mut h = Header::new(PacketType::Prod);
    h.job = job_tag(JOB);
    h.source = 1;
    h.destination = 0;
    h.ack = before.data_sent;
    h.end_of_hole = before.data_sent;
    h.timestamp = p.now.as_nanos();
    let mut buf = vec![0; 200];
    let n = encode(&h, &[], &JobKey::new([3; 32]), &mut buf).unwrap();
    p.ends[0].handle_datagram(p.now, &buf[..n]);
    let mut out = vec![0; 65_536];
    let t = p.ends[0].poll_transmit(p.now, &mut out).expect("an answer");
    assert_eq!(out[1], PacketType::Ack as u8, "the answer is an acknowledgement");
    assert_eq!(t.to, 1);
    let after = p.ends[0].channel_stats(1, 0).unwrap();
    assert_eq!(after.retransmissions, before.retransmissions, "nothing is resent");
    assert_eq!(after.explicit_acks_sent, before.explicit_acks_sent + 1);
    assert_eq!(after.prods_received, before.prods_received + 1);
}

#[test]
fn explicit_acks_are_rare_on_a_one_way_bulk_transfer() {
    let mut p = Pair::default();
    let mut sent = 0;
    while sent < 3000 {
        match p.ends[0].send(1, 0, &msg(sent, PAYLOAD - bulkwire_wire::RECORD_HEADER_LEN)) {
            Ok(()) => sent += 1,
            Err(SendError::WouldBlock) => assert!(p.step()),
            Err(e) => panic!("{e}"),
        }
    }
    p.ends[0].end_phase(1, 0);
    p.run(Duration::from_secs(5));
    assert_eq!(p.received[1].len(), 3000);
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    assert_eq!(s.data_sent, 3000);
    assert!(r.explicit_acks_sent * 100 < s.data_sent * 10, "{r:?}");
    assert!(r.explicit_acks_sent >= 1, "the last packet of the phase is acknowledged");
}

#[test]
fn sender_asks_for_acks_when_its_buffers_run_low() {
    let mut a = config(0);
    let mut b = config(1);
    a.packet_buffers = 16; // 8 send buffers
    b.packet_buffers = 16;
    let mut p = Pair::new(a, b);
    let mut sent = 0;
    while sent < 200 {
        match p.ends[0].send(1, 0, &msg(sent, 1000)) {
            Ok(()) => sent += 1,
            Err(SendError::WouldBlock) => assert!(p.step()),
            Err(e) => panic!("{e}"),
        }
        p.flush();
    }
    p.run(Duration::from_secs(5));
    assert_eq!(p.received[1].len(), 200);
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    assert!(s.ack_requests > 0, "{s:?}");
    // n/(2p) = 16/4 = 4 packets between explicit acks at least.
    assert!(r.explicit_acks_sent <= 200 / 4 + 1, "{r:?}");
    assert!(p.ends[0].memory().send_packets <= 8);
}

#[test]
fn large_messages_fragment_and_small_ones_pack() {
    let mut p = Pair::default();
    let big = msg(1, 10_000);
    p.ends[0].send(1, 0, &big).unwrap();
    for i in 0..100 {
        p.ends[0].send(1, 0, &msg(i, 8)).unwrap();
    }
    p.ends[0].send(1, 0, &[]).unwrap();
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 102);
    assert_eq!(p.received[1][0], big);
    assert_eq!(p.received[1][100], msg(99, 8));
    assert!(p.received[1][101].is_empty());
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    // 10,000 + 10 bytes of record header over 1,412-byte payloads: 8 packets;
    // 100 records of 18 bytes fill about 1.3 more.
    assert!(s.data_sent <= 10, "{s:?}");
}

/// `data` behind room for its record header, as `send_framed` takes it.
fn framed(data: &[u8]) -> Vec<u8> {
    let mut f = vec![0xEE; bulkwire_wire::RECORD_HEADER_LEN];
    f.extend_from_slice(data);
    f
}

#[test]
fn framed_messages_arrive_intact_whole_fragmented_and_resent() {
    let mut p = Pair::default();
    // The first packet, a framed message kept as it was given with a small
    // message packed behind it, is lost once and resent from that buffer.
    p.drop = Box::new(|s| s.from == 0 && s.packet_type == 1 && s.sequence == 0 && !s.retransmission);
    let (first, big) = (msg(1, 1000), msg(2, 5000));
    p.ends[0].send_framed(1, 0, framed(&first)).unwrap();
    p.ends[0].send(1, 0, b"tail").unwrap();
    p.flush();
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert_eq!((s.data_sent, s.messages_sent, s.bytes_sent), (1, 2, 1004), "one packet, headroom not counted: {s:?}");
    // Larger than a packet: fragmented like any message, headroom skipped.
    p.ends[0].send_framed(1, 0, framed(&big)).unwrap();
    p.ends[0].send_framed(1, 0, framed(&[])).unwrap();
    p.ends[0].end_phase(1, 0);
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1], vec![first, b"tail".to_vec(), big, Vec::new()]);
    assert_eq!(p.ends[0].channel_stats(1, 0).unwrap().retransmissions, 1);
    assert!(p.ends[0].is_idle());
    assert_eq!(p.ends[0].memory().send_packets, 0, "every packet's buffer went back");
    // To oneself the headroom is taken off; without any, the call fails.
    p.ends[0].send_framed(0, 0, framed(b"me")).unwrap();
    assert_eq!(p.ends[0].poll_event(), Some(Event::Message { from: 0, channel: 0, data: b"me".to_vec(), start: 0 }));
    assert_eq!(p.ends[0].send_framed(1, 0, vec![0; 9]), Err(SendError::NoHeadroom { len: 9 }));
}

#[test]
fn a_framed_message_that_fills_its_packet_is_the_payload_itself() {
    let mut p = Pair::default();
    let mut buf = vec![0u8; 65_536];
    let given = framed(&msg(1, 1000));
    let at = given.as_ptr();
    p.ends[0].send_framed(1, 0, given).unwrap();
    let (_, shared) = p.ends[0].poll_transmit_shared(p.now, &mut buf).unwrap();
    assert_eq!(shared.expect("a data packet").parts()[1].as_ptr(), at, "the framed buffer was copied");
    // Larger than a packet, it is cut into pieces copied from it.
    let given = framed(&msg(2, 3000));
    let at = given.as_ptr();
    p.ends[0].send_framed(1, 0, given).unwrap();
    let (_, shared) = p.ends[0].poll_transmit_shared(p.now, &mut buf).unwrap();
    assert_ne!(shared.expect("a data packet").parts()[1].as_ptr(), at);
}

/// A large message goes in pieces of its own buffer: each packet's payload
/// is a record header and a piece, read where it lies, which the receiver
/// takes as any datagram; its buffer is freed with its last packet, never
/// kept by the pool. Small pieces (Ethernet's datagrams) are copied.
#[test]
fn a_large_message_goes_in_pieces_of_its_own_buffer() {
    let (mut a, mut b) = in_place_pair(20_000);
    let now = Time::ZERO;
    let message = msg(9, 50_000);
    let given = message.clone();
    let at = given.as_ptr() as usize;
    a.send_owned(1, 0, given).unwrap();
    let mut buf = vec![0u8; 20_000];
    let mut pieces = Vec::new();
    while let Some((t, shared)) = a.poll_transmit_shared(now, &mut buf) {
        let payload = shared.expect("a data packet");
        let [head, rest, tail] = payload.parts();
        assert!(tail.is_empty(), "an owned message's pieces carry nothing behind them");
        assert_eq!(head.len(), bulkwire_wire::RECORD_HEADER_LEN, "a piece carries its record header apart");
        let offset = rest.as_ptr() as usize - at;
        assert!(offset + rest.len() <= message.len(), "the piece lies in the message's buffer");
        let (h, mac) = buf[..t.len].split_at(bulkwire_wire::HEADER_LEN);
        pieces.push([h, head, rest, mac].concat());
        assert!(payload.holders() >= 2, "the packet and the datagram share it");
    }
    assert_eq!(pieces.len(), 3, "50,000 bytes in pieces of 19,914");
    for d in &pieces {
        b.handle_datagram(now, d);
    }
    let mut got = Vec::new();
    while let Some(Event::Message { data, start, .. }) = b.poll_event() {
        got.push(data[start..].to_vec());
    }
    assert_eq!(got, vec![message]);
    // Acknowledged, the packets let go of the message's buffer; the pool
    // keeps none of it (its free buffers stay one datagram each).
    while let Some(t) = b.poll_transmit(now, &mut buf) {
        a.handle_datagram(now, &buf[..t.len]);
    }
    b.end_phase(0, 0);
    a.end_phase(1, 0);
    let mut p = Pair::new(config(0), config(1));
    p.ends = [a, b];
    p.run(Duration::from_secs(1));
    assert_eq!(p.ends[0].memory().send_packets, 0, "every packet freed");
    // Ethernet's datagrams carry pieces that fill them where they lie too;
    // datagrams of less than 1 KiB of data copy them into the packets.
    // The last piece, which does not fill its packet, is copied, and the
    // next message goes behind it.
    let (mut a, _) = in_place_pair(1_500);
    a.send_owned(1, 0, msg(10, 5_000)).unwrap();
    a.send_owned(1, 0, msg(11, 100)).unwrap();
    let room = 1_500 - bulkwire_wire::OVERHEAD - bulkwire_wire::RECORD_HEADER_LEN;
    let mut kinds = Vec::new();
    while let Some((_, shared)) = a.poll_transmit_shared(now, &mut buf) {
        let payload = shared.expect("a data packet");
        kinds.push((payload.parts()[0].len(), payload.len()));
    }
    let head = bulkwire_wire::RECORD_HEADER_LEN;
    let last = head + (5_000 - 3 * room) + head + 100;
    assert_eq!(kinds, vec![(head, head + room); 3].into_iter().chain([(0, last)]).collect::<Vec<_>>());
    let (mut a, _) = in_place_pair(1_000);
    a.send_owned(1, 0, msg(10, 5_000)).unwrap();
    let (_, shared) = a.poll_transmit_shared(now, &mut buf).unwrap();
    assert_eq!(shared.unwrap().parts()[0].len(), 0, "a small piece is copied into its packet");
}

#[test]
fn a_shared_payload_makes_the_same_datagram_and_may_outlive_its_packet() {
    let mut p = Pair::default();
    p.ends[0].send(1, 0, &msg(0, 1000)).unwrap();
    p.ends[0].end_phase(1, 0);
    let mut buf = vec![0u8; 65_536];
    let (t, shared) = p.ends[0].poll_transmit_shared(p.now, &mut buf).unwrap();
    let payload = shared.expect("a data packet shares its payload");
    assert_eq!(t.len, bulkwire_wire::OVERHEAD);
    let (head, mac) = buf[..t.len].split_at(bulkwire_wire::HEADER_LEN);
    let [first, second, third] = payload.parts();
    let datagram = [head, first, second, third, mac].concat();
    // The receiver takes it like any datagram, and its acknowledgement
    // frees the packet while the payload is still held here (a datagram
    // its socket did not take yet).
    p.ends[1].handle_datagram(p.now, &datagram);
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1], vec![msg(0, 1000)]);
    assert!(p.ends[0].is_idle());
    assert_eq!(p.ends[0].memory().send_packets, 0);
    assert_eq!(payload.holders(), 1, "only the caller holds it now");
}

/// Two endpoints sending datagrams of up to `max_datagram` bytes; the
/// second takes channel 0's messages in place.
fn in_place_pair(max_datagram: usize) -> (Endpoint, Endpoint) {
    let big = |c: Config| Config { max_datagram, ..c };
    let (a, mut b) = (Endpoint::new(big(config(0))).unwrap(), Endpoint::new(big(config(1))).unwrap());
    b.set_in_place(0, true);
    (a, b)
}

#[test]
fn large_messages_are_delivered_in_the_datagram_they_came_in() {
    let (mut a, mut b) = in_place_pair(20_000);
    let now = Time::ZERO;
    // One packet each: a large message with a small one behind it; a small
    // one alone; then (out of order) two large ones.
    let sent = [msg(1, 8000), msg(2, 100), msg(3, 50), msg(4, 9000), msg(5, 5000)];
    let mut datagrams = Vec::new();
    for group in [&sent[..2], &sent[2..3], &sent[3..4], &sent[4..]] {
        for m in group {
            a.send(1, 0, m).unwrap();
        }
        let mut buf = vec![0u8; 20_000];
        let t = a.poll_transmit(now, &mut buf).unwrap();
        buf.truncate(t.len);
        datagrams.push(buf);
        assert!(a.poll_transmit(now, &mut vec![0u8; 20_000]).is_none(), "one packet per group");
    }
    let last = datagrams.pop().unwrap();
    for mut d in datagrams.into_iter().take(2) {
        b.handle_datagram_owned(now, &mut d);
    }
    let mut held = Vec::new();
    let take = |b: &mut Endpoint, got: &mut Vec<(Vec<u8>, usize, usize)>| {
        while let Some(Event::Message { data, start, .. }) = b.poll_event() {
            got.push((data[start..].to_vec(), start, data.capacity()));
        }
    };
    take(&mut b, &mut held);
    // The fourth packet arrives before the third, which a copy delivers
    // later with it (nothing holds a datagram's buffer out of order).
    let mut fourth = last;
    b.handle_datagram_owned(now, &mut fourth);
    assert!(!fourth.is_empty(), "held out of order, so copied");
    let mut third = {
        let mut buf = vec![0u8; 20_000];
        // The third packet went missing: it is resent after a prod.
        b.handle_timeout(now + Duration::from_secs(1));
        let t = b.poll_transmit(now + Duration::from_secs(1), &mut buf).unwrap();
        a.handle_datagram(now + Duration::from_secs(1), &buf[..t.len]);
        let t = a.poll_transmit(now + Duration::from_secs(1), &mut buf).unwrap();
        buf.truncate(t.len);
        buf
    };
    b.handle_datagram_owned(now, &mut third);
    take(&mut b, &mut held);
    let messages: Vec<Vec<u8>> = held.iter().map(|(m, _, _)| m.clone()).collect();
    assert_eq!(messages, sent.to_vec());
    let starts: Vec<usize> = held.iter().map(|(_, s, _)| *s).collect();
    let behind = bulkwire_wire::HEADER_LEN + bulkwire_wire::RECORD_HEADER_LEN;
    assert_eq!(
        starts,
        vec![behind, 0, 0, behind, 0],
        "in place: the large first record of a packet delivered in order"
    );
    assert!(held[0].2 <= 4 * (behind + 8000), "the buffer kept no more than four times the message");
    assert_eq!(b.memory().ready_bytes, 0, "the receive budget counts messages, not headers");
}

#[test]
fn a_message_in_place_keeps_its_buffer_s_room_unless_it_fills_under_a_quarter() {
    let (mut a, mut b) = in_place_pair(60_000);
    let now = Time::ZERO;
    let mut rooms = Vec::new();
    for (i, len) in [(0, 20_000), (1, 5_000)] {
        a.send(1, 0, &msg(i, len)).unwrap();
        // Read as the runtime reads: into a buffer with room for any datagram.
        let mut datagram = vec![0u8; 65_536];
        let t = a.poll_transmit(now, &mut datagram).unwrap();
        datagram.truncate(t.len);
        b.handle_datagram_owned(now, &mut datagram);
        assert!(datagram.is_empty(), "delivered in place");
        let Some(Event::Message { data, start, .. }) = b.poll_event() else { panic!("no message") };
        assert_eq!(data[start..], msg(i, len)[..]);
        rooms.push(data.capacity());
    }
    assert_eq!(rooms[0], 65_536, "20,000 bytes fill more than a quarter: the room stays for the next datagram");
    assert!(rooms[1] < 2 * 5_100, "5,000 bytes fill less: the rest is given back ({} bytes kept)", rooms[1]);
}

#[test]
fn back_pressure_when_the_send_buffer_is_full() {
    let mut a = config(0);
    a.send_buffer_bytes = 10_000;
    a.max_message_size = 5_000;
    let mut p = Pair::new(a, config(1));
    p.ends[0].send(1, 0, &msg(0, 5000)).unwrap();
    p.ends[0].send(1, 0, &msg(1, 5000)).unwrap();
    assert_eq!(p.ends[0].send(1, 0, &msg(2, 1)), Err(SendError::WouldBlock));
    assert!(!p.ends[0].can_send(1, 0, 1));
    p.flush(); // packetising frees the byte budget
    assert!(p.ends[0].can_send(1, 0, 5000));
    assert_eq!(p.ends[0].send(1, 0, &msg(3, 5001)), Err(SendError::TooLarge { len: 5001, max: 5000 }));
    assert_eq!(p.ends[0].send(5, 0, &[]), Err(SendError::NoSuchRank { to: 5, ranks: 2 }));
    assert_eq!(p.ends[0].send(1, 3, &[]), Err(SendError::NoSuchChannel { channel: 3, channels: 1 }));
}

#[test]
fn a_slow_application_holds_back_delivery_not_memory() {
    let mut b = config(1);
    b.recv_buffer_bytes = 4 << 20;
    b.max_message_size = 1 << 20;
    let mut p = Pair::new(config(0), b);
    for i in 0..12 {
        p.ends[0].send(1, 0, &msg(i, 1 << 19)).unwrap();
    }
    // Run without taking events at the receiver.
    let mut buf = vec![0u8; 65_536];
    for _ in 0..200_000 {
        let mut moved = false;
        for i in 0..2 {
            while let Some(t) = p.ends[i].poll_transmit(p.now, &mut buf) {
                p.in_flight.push((p.now + DELAY, 1 - i, buf[..t.len].to_vec()));
                moved = true;
            }
        }
        if !moved && p.in_flight.is_empty() {
            break;
        }
        p.now = p.now + DELAY;
        for (_, to, bytes) in std::mem::take(&mut p.in_flight) {
            p.ends[to].handle_datagram(p.now, &bytes);
        }
        p.ends.iter_mut().for_each(|e| e.handle_timeout(p.now));
        let m = p.ends[1].memory();
        assert!(m.ready_bytes <= (4 << 20) + PAYLOAD, "{m:?}");
    }
    assert!(p.ends[1].stats().channels.drops > 0, "the receiver dropped what it had no room for");
    p.run(Duration::from_secs(5));
    assert_eq!(p.received[1].len(), 12);
    assert_eq!(p.received[1][11], msg(11, 1 << 19));
}

#[test]
fn go_back_n_resends_everything_from_the_hole() {
    let mut a = config(0);
    let mut b = config(1);
    a.strategy = Strategy::GoBackN;
    b.strategy = Strategy::GoBackN;
    let mut p = Pair::new(a, b);
    p.drop = Box::new(|s| s.packet_type == 1 && !s.retransmission && s.sequence == 2);
    for i in 0..10 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        if i == 9 {
            p.ends[0].end_phase(1, 0);
        }
        p.flush();
    }
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1], (0..10).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    assert_eq!(s.retransmissions, 8, "packets 2..=9 again: {s:?}");
    assert_eq!(r.drops, 7, "3..=9 discarded out of order: {r:?}");
}

/// A pair whose channel 0 is best effort at both ends.
fn best_effort_pair() -> Pair {
    let mut p = Pair::default();
    p.ends[0].set_strategy(1, 0, Strategy::BestEffort).unwrap();
    p.ends[1].set_strategy(0, 0, Strategy::BestEffort).unwrap();
    p
}

#[test]
fn best_effort_sends_each_packet_once_and_delivers_what_arrives_in_order() {
    let mut p = best_effort_pair();
    let from_receiver = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = from_receiver.clone();
    p.drop = Box::new(move |s| {
        if s.from == 1 {
            seen.set(seen.get() + 1);
        }
        s.packet_type == 1 && [2, 5].contains(&s.sequence)
    });
    for i in 0..10 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        if i == 9 {
            p.ends[0].end_phase(1, 0);
        }
        p.flush();
        // The sender keeps nothing: its buffers are free at once.
        assert!(p.ends[0].is_idle());
    }
    p.run(Duration::from_secs(1));
    p.ends[1].awaiting(p.now, 0, 0);
    p.run(Duration::from_secs(1));
    let expect: Vec<Vec<u8>> = [0, 1, 3, 4, 6, 7, 8, 9].iter().map(|&i| msg(i, 1000)).collect();
    assert_eq!(p.received[1], expect);
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    assert_eq!((s.data_sent, s.retransmissions, s.timeouts), (10, 0, 0), "{s:?}");
    assert_eq!((r.skipped, r.messages_abandoned, r.data_received), (2, 0, 8), "{r:?}");
    assert_eq!(from_receiver.get(), 0, "the receiver sent no acknowledgement or prod");
    assert!(p.violations.is_empty(), "{:?}", p.violations);
}

#[test]
fn best_effort_drops_a_message_with_a_piece_missing_and_a_packet_that_comes_late() {
    let mut p = best_effort_pair();
    // Message 0 takes 8 packets (0..=7); its fourth is lost. Message 1
    // (packet 8) arrives; message 2 (packet 9) is overtaken by message 3
    // (packet 10) and comes after it.
    p.drop = Box::new(|s| s.packet_type == 1 && s.sequence == 3);
    p.delay = Box::new(|s| if s.sequence == 9 { DELAY * 3 } else { DELAY });
    p.ends[0].send(1, 0, &msg(0, 10_000)).unwrap();
    p.flush();
    for i in 1..4 {
        p.ends[0].send(1, 0, &msg(i, 500)).unwrap();
        p.flush();
    }
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1], vec![msg(1, 500), msg(3, 500)]);
    let r = p.ends[1].channel_stats(0, 0).unwrap();
    assert_eq!(r.messages_abandoned, 1, "{r:?}");
    assert_eq!(r.skipped, 2, "packet 3 lost, packet 9 late: {r:?}");
    assert_eq!(p.ends[1].memory().partial_bytes, 0, "the abandoned message's reservation is released");
    assert!(p.violations.is_empty(), "{:?}", p.violations);
}

#[test]
fn best_effort_data_on_a_reliable_channel_is_a_protocol_violation() {
    let mut p = Pair::default();
    p.ends[0].set_strategy(1, 0, Strategy::BestEffort).unwrap();
    p.ends[0].send(1, 0, b"unasked").unwrap();
    p.run(Duration::from_secs(1));
    assert!(p.received[1].is_empty());
    assert_eq!(p.violations, ["best-effort data on a reliable channel"]);
}

#[test]
fn strategy_changes_only_before_use() {
    let mut p = Pair::default();
    assert_eq!(p.ends[0].set_strategy(1, 0, Strategy::GoBackN), Ok(()));
    p.ends[0].send(1, 0, b"x").unwrap();
    assert_eq!(p.ends[0].set_strategy(1, 0, Strategy::HoleFilling), Err(SendError::InUse));
}

#[test]
fn messages_to_oneself_are_delivered_locally() {
    let mut p = Pair::default();
    p.ends[0].send(0, 0, b"me").unwrap();
    assert_eq!(p.ends[0].poll_event(), Some(Event::Message { from: 0, channel: 0, data: b"me".to_vec(), start: 0 }));
}

#[test]
fn bad_datagrams_are_counted_and_dropped() {
    let mut p = Pair::default();
    let e = &mut p.ends[1];
    e.handle_datagram(Time::ZERO, &[]);
    e.handle_datagram(Time::ZERO, &[0xff; 2000]);
    let mut h = Header::new(PacketType::Data);
    h.job = job_tag(JOB);
    h.source = 0;
    h.destination = 1;
    let mut buf = vec![0; 200];
    let n = encode(&h, &[], &JobKey::new([4; 32]), &mut buf).unwrap();
    e.handle_datagram(Time::ZERO, &buf[..n]); // another key
    h.job = job_tag(JOB + 1);
    let n = encode(&h, &[], &JobKey::new([3; 32]), &mut buf).unwrap();
    e.handle_datagram(Time::ZERO, &buf[..n]); // another job
    let r = e.stats().rejected;
    assert_eq!((r.truncated, r.wrong_version, r.bad_mac, r.wrong_job, r.total()), (1, 1, 1, 1, 4), "{r:?}");
    assert!(e.poll_event().is_none());
}

#[test]
fn a_peer_that_breaks_the_protocol_closes_its_channel() {
    let mut p = Pair::default();
    let mut h = Header::new(PacketType::Ack);
    h.job = job_tag(JOB);
    h.source = 0;
    h.destination = 1;
    h.ack = 1000; // acknowledges packets never sent
    h.end_of_hole = 1000;
    let mut buf = vec![0; 200];
    let n = encode(&h, &[0; 12], &JobKey::new([3; 32]), &mut buf).unwrap();
    p.ends[1].handle_datagram(Time::ZERO, &buf[..n]);
    p.flush();
    assert_eq!(p.violations, vec!["acknowledges packets never sent"]);
    assert_eq!(p.ends[1].send(0, 0, b"x"), Err(SendError::Closed { peer: 0 }));
}

#[test]
fn a_silent_peer_is_reported_unresponsive() {
    let mut p = Pair::default();
    p.drop = Box::new(|s| s.from == 0);
    p.ends[0].send(1, 0, b"anyone?").unwrap();
    p.flush();
    assert!(p.ends[0].unresponsive_peers(p.now, Duration::from_secs(1)).is_empty());
    p.run(Duration::from_secs(2));
    assert_eq!(p.ends[0].unresponsive_peers(p.now, Duration::from_secs(1)), vec![1]);
    assert!(p.ends[1].unresponsive_peers(p.now, Duration::from_secs(1)).is_empty());
}

#[test]
fn a_barrier_acknowledges_by_colour_what_no_ack_did() {
    let mut p = Pair::default();
    // Five packets arrive; nothing comes back (every ack is lost).
    p.drop = Box::new(|s| s.from == 1);
    for i in 0..5 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
    }
    let mark = p.ends[0].next_sequence(1, 0).unwrap();
    assert_eq!(mark, 5);
    // Later packets (the next superstep's) are not covered by the mark.
    p.ends[0].send(1, 0, &msg(5, 1000)).unwrap();
    p.flush();
    p.step();
    assert_eq!(p.received[1].len(), 6);
    assert_eq!(p.ends[0].memory().send_packets, 6);

    let freed = p.ends[0].acknowledge_below(p.now, 1, 0, mark);
    assert_eq!(freed, 5);
    assert_eq!(p.ends[0].memory().send_packets, 1, "the packet after the mark still waits");
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert_eq!(s.colour_acks, 5);
    // Marking again, or past what was sent, frees nothing more and breaks nothing.
    assert_eq!(p.ends[0].acknowledge_below(p.now, 1, 0, mark), 0);
    assert_eq!(p.ends[0].acknowledge_below(p.now, 9, 0, 100), 0, "no such peer");

    // The unacknowledged sixth packet is still recovered normally once acks flow.
    p.drop = Box::new(|_| false);
    p.run(Duration::from_secs(1));
    let s = p.ends[0].channel_stats(1, 0).unwrap();
    assert!(p.ends[0].is_idle());
    assert_eq!(p.received[1].len(), 6, "nothing delivered twice");
    // Only the sixth packet is probed for: the freed ones are never resent.
    assert_eq!(s.retransmissions, 1, "{s:?}");
    assert_eq!(s.colour_acks, 5);
}

/// Runs until `wanted` messages have arrived at end 1 or `limit` has
/// passed, end 1 waiting for more from end 0 on channel 0 all along.
fn run_awaiting(p: &mut Pair, wanted: usize, limit: Duration) {
    let end = p.now + limit;
    while p.now < end && p.received[1].len() < wanted {
        p.ends[1].awaiting(p.now, 0, 0);
        if !p.step() {
            break;
        }
    }
}

fn receiver_driven_pair() -> Pair {
    let mut p = Pair::default();
    p.ends[0].set_receiver_driven(1, 0, true);
    p.ends[1].set_receiver_driven(0, 0, true);
    p
}

/// A receiver-driven pair after end 0 sent three packets to end 1, the
/// last of which was lost.
fn three_packets_the_last_lost() -> Pair {
    let mut p = receiver_driven_pair();
    p.drop = Box::new(|s| s.from == 0 && s.packet_type == 1 && !s.retransmission && s.sequence == 2);
    for i in 0..3 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
    }
    p
}

#[test]
fn a_receiver_that_waits_prods_for_a_lost_last_packet() {
    // The last packet of the phase is lost, and nobody asked for an ack.
    let mut p = three_packets_the_last_lost();
    let start = p.now;
    run_awaiting(&mut p, 3, Duration::from_millis(2));
    assert_eq!(p.received[1], (0..3).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    let (sender, receiver) = (p.ends[0].channel_stats(1, 0).unwrap(), p.ends[1].channel_stats(0, 0).unwrap());
    assert!(receiver.prods_sent >= 1, "{receiver:?}");
    assert_eq!(sender.timeouts, 0, "the receiver asked; the sender's timer did not have to: {sender:?}");
    assert_eq!(sender.retransmissions, 1, "{sender:?}");
    assert!(p.now.since(start) < Duration::from_millis(2));
}

#[test]
fn without_a_waiting_receiver_the_long_tail_probe_still_recovers() {
    let mut p = three_packets_the_last_lost();
    let start = p.now;
    p.run(Duration::from_secs(1));
    assert_eq!(p.received[1].len(), 3);
    let sender = p.ends[0].channel_stats(1, 0).unwrap();
    assert!(sender.timeouts >= 1, "{sender:?}");
    // 16 retransmission timeouts of at least the 200 us minimum.
    assert!(p.now.since(start) >= Duration::from_micros(16 * 200), "{:?}", p.now.since(start));
    assert!(p.ends[0].is_idle() && p.ends[1].is_idle());
}

#[test]
fn a_receiver_that_runs_ahead_is_answered_and_backs_off() {
    let mut p = receiver_driven_pair();
    // The receiver waits 50 ms for a sender that has sent nothing yet.
    run_awaiting(&mut p, 1, Duration::from_millis(50));
    let prods = p.ends[1].channel_stats(0, 0).unwrap().prods_sent;
    assert!((3..=12).contains(&prods), "exponential back-off, not one prod per timeout: {prods}");
    let answers = p.ends[0].channel_stats(1, 0).unwrap().explicit_acks_sent;
    assert!(answers + 1 >= prods && answers <= prods, "each prod is answered: {answers} answers, {prods} prods");
    // Then the data comes, and the wait ends without a prod more.
    p.ends[0].send(1, 0, &msg(0, 10)).unwrap();
    run_awaiting(&mut p, 1, Duration::from_millis(50));
    assert_eq!(p.received[1], vec![msg(0, 10)]);
    assert!(p.ends[1].channel_stats(0, 0).unwrap().prods_sent <= prods + 1);
    // A wait that is over is not prodded for.
    let before = p.ends[1].channel_stats(0, 0).unwrap().prods_sent;
    p.run(Duration::from_millis(100));
    assert_eq!(p.ends[1].channel_stats(0, 0).unwrap().prods_sent, before);
}

/// End 0 sends `n` packets to end 1, one every `gap`; end 1 waits for
/// them all along. Returns a gap after the last was sent.
fn paced_stream(p: &mut Pair, n: usize, gap: Duration) {
    for i in 0..n {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
        let next = p.now + gap;
        while p.now < next {
            p.ends[1].awaiting(p.now, 0, 0);
            if !p.step_until(Some(next)) {
                p.now = next;
            }
        }
    }
}

#[test]
fn a_paced_stream_is_not_prodded_for_between_its_packets() {
    // A packet every 2 ms, ten times the retransmission timeout: a receiver
    // that waits two timeouts after each arrival would prod before each.
    let mut p = receiver_driven_pair();
    let gap = Duration::from_millis(2);
    paced_stream(&mut p, 12, gap);
    run_awaiting(&mut p, 12, Duration::from_millis(50));
    assert_eq!(p.received[1], (0..12).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    let receiver = p.ends[1].channel_stats(0, 0).unwrap();
    // Before the second packet the pace is not known.
    assert!(receiver.prods_sent <= 3, "prods between paced packets: {receiver:?}");
    assert_eq!(p.ends[0].channel_stats(1, 0).unwrap().retransmissions, 0);

    // The last packet of the next paced stream is lost: the receiver still
    // asks for it, within about two gaps.
    p.drop = Box::new(|s| s.from == 0 && s.packet_type == 1 && !s.retransmission && s.sequence == 17);
    p.received[1].clear();
    paced_stream(&mut p, 6, gap);
    let sent_last = p.now - gap;
    run_awaiting(&mut p, 6, Duration::from_millis(50));
    assert_eq!(p.received[1], (0..6).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    assert_eq!(p.ends[0].channel_stats(1, 0).unwrap().retransmissions, 1);
    let took = p.now.since(sent_last);
    assert!(took < gap * 3, "recovered {took:?} after the lost packet left");
}

#[test]
fn acknowledgements_asked_for_come_at_once() {
    let mut p = receiver_driven_pair();
    p.ends[0].send(1, 0, &msg(0, 1000)).unwrap();
    p.flush();
    // Deliver what is on the way, well before any timer.
    for _ in 0..10 {
        if p.in_flight.is_empty() {
            break;
        }
        p.step();
    }
    assert!(p.in_flight.is_empty(), "nothing else on the way that could wake the sender");
    assert_eq!(p.received[1].len(), 1);
    assert!(!p.ends[0].is_idle(), "nothing asked for an acknowledgement yet");
    let start = p.now;
    p.ends[0].request_acknowledgements();
    p.flush();
    assert!(p.in_flight.iter().any(|&(_, to, _)| to == 1), "the request goes out at once, unprompted");
    p.run(Duration::from_secs(1));
    assert!(p.ends[0].is_idle());
    assert!(p.now.since(start) <= DELAY * 3, "one round trip, not a timeout: {:?}", p.now.since(start));
    assert_eq!(p.received[1].len(), 1, "the probe's resend is not delivered twice");
}

#[test]
fn a_prod_does_not_resend_what_is_still_on_its_way() {
    // A port becomes slow: data takes 3 ms one way, control packets still
    // 50 us, and the sender's round-trip estimate is a control packet's.
    // A paced stream: a packet every 250 us, then every millisecond. The
    // receiver waits, so once the pace slows it prods between arrivals (its
    // patience follows the sender's last gap). Once a packet of the stream
    // has come, the prods say so, and the sender must not take what it sent
    // after it for lost. (Before that, a prod cannot tell slow from lost.)
    let mut p = receiver_driven_pair();
    p.ends[0].send(1, 0, &msg(99, 10)).unwrap();
    p.ends[0].end_phase(1, 0);
    p.run(Duration::from_millis(20));
    assert_eq!(p.received[1].len(), 1);
    p.received[1].clear();
    p.now = p.now + Duration::from_millis(5);
    p.delay = Box::new(|s| if s.packet_type == 1 { Duration::from_millis(3) } else { DELAY });
    let resent = |p: &Pair| p.ends[0].channel_stats(1, 0).unwrap().retransmissions;
    let prods = |p: &Pair| p.ends[1].channel_stats(0, 0).unwrap().prods_sent;
    let mut before_first = None;
    for i in 0..8 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
        let next = p.now + if i < 4 { Duration::from_micros(250) } else { Duration::from_millis(1) };
        while p.now < next {
            if before_first.is_none() && !p.received[1].is_empty() {
                before_first = Some((resent(&p), prods(&p)));
            }
            p.ends[1].awaiting(p.now, 0, 0);
            if !p.step_until(Some(next)) {
                p.now = next;
            }
        }
    }
    run_awaiting(&mut p, 8, Duration::from_millis(50));
    assert_eq!(p.received[1], (0..8).map(|i| msg(i, 1000)).collect::<Vec<_>>());
    let (resent_before, prods_before) = before_first.expect("the stream's first packet came");
    assert_eq!(resent(&p), resent_before, "after the first packet came, nothing was resent");
    let (after, before) = (prods(&p), prods_before);
    assert!(after >= before + 2, "the receiver prodded between arrivals: {before} prods, then {after}");
}

#[test]
fn probing_by_pace_spares_a_sparse_stream_and_ends_a_burst_promptly() {
    // A message every 3 ms, many timeouts apart (but fewer than 2^4): each
    // would be probed (resent) one timeout after it left; by pace, none is.
    let sparse = |by_pace: bool| {
        let mut p = Pair::default();
        p.ends[0].set_probe_by_pace(1, 0, by_pace);
        for i in 0..40 {
            p.ends[0].send(1, 0, &msg(i, 100)).unwrap();
            let until = p.now + Duration::from_millis(3);
            while p.now < until && p.step_until(Some(until)) {}
        }
        assert_eq!(p.received[1].len(), 40);
        p.ends[0].channel_stats(1, 0).unwrap().retransmissions
    };
    assert!(sparse(false) >= 39, "a probe after each message without it");
    assert_eq!(sparse(true), 0, "none by pace");
    // A burst of ten packets whose last is lost: its tail came right after
    // the packet before it, so the probe goes one timeout later, not 2^4.
    let mut p = Pair::default();
    p.ends[0].set_probe_by_pace(1, 0, true);
    p.drop = Box::new(|s| s.packet_type == 1 && !s.retransmission && s.sequence == 9);
    for i in 0..10 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
        p.flush();
    }
    let start = p.now;
    while p.received[1].len() < 10 && p.step() {}
    assert_eq!(p.received[1].len(), 10);
    let took = p.now.since(start);
    assert!(took < Duration::from_millis(2), "the lost tail came back after {took:?}");
}

/// A channel set premium sends its data on the premium path while the
/// pair's other channels stay on the ordinary one (a control plane beside
/// a data plane, seed 004 §2).
#[test]
fn a_premium_channel_sends_its_data_on_the_premium_path() {
    let mut c = config(0);
    c.channels = 2;
    let mut a = Endpoint::new(c).unwrap();
    a.set_premium(1, 1, true);
    a.send(1, 0, b"data plane").unwrap();
    a.send(1, 1, b"control plane").unwrap();
    let mut buf = vec![0u8; 65_536];
    let mut paths = Vec::new();
    while let Some(t) = a.poll_transmit(Time::ZERO, &mut buf) {
        if buf[1] == PacketType::Data as u8 {
            paths.push((u16::from_be_bytes(buf[4..6].try_into().unwrap()), t.path));
        }
    }
    paths.sort_by_key(|p| p.0);
    assert_eq!(paths, [(0, bulkwire_proto::Path::Ordinary), (1, bulkwire_proto::Path::Premium)]);
}

/// An endpoint keeps a channel per rank and channel id whatever it sends:
/// its fixed part grows in proportion to the job; what it holds on the
/// heap grows with what is in flight and goes when it is acknowledged.
#[test]
fn the_footprint_grows_with_the_ranks_and_counts_what_is_in_flight() {
    let fixed = |ranks: u32, channels: u16| {
        let mut c = Config::new(JOB, JobKey::new([3; 32]), 0, ranks);
        c.channels = channels;
        Endpoint::new(c).unwrap().footprint()
    };
    let (small, large) = (fixed(16, 2), fixed(64, 2));
    assert_eq!((small.channels, large.channels), (32, 128));
    assert_eq!(large.channel_structs, 4 * small.channel_structs);
    assert!(large.peer_state > 3 * small.peer_state && large.peer_state < 5 * small.peer_state, "{large:?}");
    assert_eq!(fixed(16, 6).channel_structs, 3 * small.channel_structs);
    assert_eq!((small.channel_heap, small.events), (0, 0));
    assert!(large.total() > large.channel_structs + large.peer_state);

    let mut p = Pair::default();
    let idle = p.ends[0].footprint().channel_heap;
    for i in 0..20 {
        p.ends[0].send(1, 0, &msg(i, 1000)).unwrap();
    }
    p.flush();
    let sending = p.ends[0].footprint();
    assert!(sending.channel_heap >= idle + 20 * 1000, "{sending:?}");
    p.run(Duration::from_millis(50));
    assert_eq!(p.received[1].len(), 20);
    let after = p.ends[0].footprint();
    // The packets went back to the pool, whose free list keeps them.
    assert!(after.free_buffers > 0, "{after:?}");
    assert!(after.channel_heap < sending.channel_heap, "{after:?} after {sending:?}");
}

/// Memory lent to the endpoint: a test's own vector.
#[derive(Debug)]
struct Lent(Vec<u8>);

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl bulkwire_proto::LentBytes for Lent {}

/// A lent message goes in pieces of the lent memory (resent from it where
/// lost), followed by its suffix; the endpoint lets go of the memory once
/// every packet has been acknowledged, and not before.
#[test]
fn a_lent_message_arrives_whole_and_is_let_go_once_acknowledged() {
    let mut pair = Pair::default();
    let dropped = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = dropped.clone();
    pair.drop = Box::new(move |s| {
        // The third data packet, once: resent from the lent memory.
        let lose = s.from == 0 && s.packet_type == PacketType::Data as u8 && s.sequence == 2 && !s.retransmission;
        seen.set(seen.get() + lose as u32);
        lose
    });
    for (i, len) in [(1usize, 300_000usize), (2, 5_000), (3, 0)] {
        let body = std::sync::Arc::new(Lent(msg(i, len)));
        let lent: std::sync::Arc<dyn bulkwire_proto::LentBytes> = body.clone();
        pair.ends[0].send_lent(1, 0, &[], lent, &[i as u8; 4]).unwrap();
        assert!(std::sync::Arc::strong_count(&body) > 1, "held while queued");
        pair.run(Duration::from_secs(5));
        assert_eq!(std::sync::Arc::strong_count(&body), 1, "let go once acknowledged");
        let got = pair.received[1].pop().expect("delivered");
        assert_eq!(got.len(), len + 4);
        assert!(got[..len] == msg(i, len)[..] && got[len..] == [i as u8; 4]);
    }
    assert_eq!(dropped.get(), 1, "a packet of the first message was lost");
    assert!(pair.ends[0].is_idle());
    assert!(pair.violations.is_empty());
    // Past the send buffer's limit (the memory is the caller's): queued all
    // the same, and delivered in order with what was queued before it.
    let owned: Vec<Vec<u8>> = (0..2).map(|k| vec![k as u8 + 1; 3 << 20]).collect();
    for m in &owned {
        pair.ends[0].send_owned(1, 0, m.clone()).unwrap();
    }
    assert_eq!(pair.ends[0].send_owned(1, 0, vec![0; 3 << 20]), Err(SendError::WouldBlock), "a copy waits");
    let big = std::sync::Arc::new(Lent(msg(7, 3 << 20)));
    pair.ends[0].send_lent(1, 0, &[], big.clone(), b"big").unwrap();
    pair.run(Duration::from_secs(5));
    assert_eq!(std::sync::Arc::strong_count(&big), 1);
    let got: Vec<Vec<u8>> = pair.received[1].drain(..).collect();
    assert_eq!(got.len(), 3);
    assert!(got[..2] == owned[..] && got[2] == [&msg(7, 3 << 20)[..], b"big"].concat());
    // To itself: copied at once.
    let body = std::sync::Arc::new(Lent(msg(9, 70_000)));
    pair.ends[0].send_lent(0, 0, &[], body.clone(), b"end").unwrap();
    assert_eq!(std::sync::Arc::strong_count(&body), 1);
    pair.flush();
    assert_eq!(pair.received[0].pop().unwrap(), [&msg(9, 70_000)[..], b"end"].concat());
}

/// A lent message's suffix (a layer's tag) rides behind the last piece of
/// its lent memory where it fits: a message that fits one datagram takes
/// one, not a second for its suffix; a longer one takes as many as its
/// bytes need; a lost last piece is resent with it.
#[test]
fn a_lent_message_s_suffix_rides_behind_its_last_piece() {
    let big = |rank| Config { max_datagram: 65_000, ..config(rank) };
    let mut pair = Pair::new(big(0), big(1));
    let data = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let seen = data.clone();
    pair.drop = Box::new(move |s| {
        let fresh = s.from == 0 && s.packet_type == PacketType::Data as u8 && !s.retransmission;
        seen.set(seen.get() + fresh as u32);
        // The last packet of the 200,000 B message, once.
        fresh && s.sequence == 7
    });
    let room = Config { max_datagram: 65_000, ..config(0) }.max_payload() - bulkwire_wire::RECORD_HEADER_LEN;
    // (length, prefix, suffix, datagrams)
    let cases: [(usize, &[u8], &[u8], u32); 5] = [
        (20_000, b"", b"tag!", 1),
        (20_000, b"head", b"tag!", 1),
        (room - 4, b"", b"tag!", 1),
        (room - 3, b"", b"tag!", 2),
        (200_000, b"", &[9; 16], 4),
    ];
    for (i, &(len, prefix, suffix, datagrams)) in cases.iter().enumerate() {
        let before = data.get();
        let body = std::sync::Arc::new(Lent(msg(i, len)));
        let lent: std::sync::Arc<dyn bulkwire_proto::LentBytes> = body.clone();
        pair.ends[0].send_lent(1, 0, prefix, lent, suffix).unwrap();
        pair.run(Duration::from_secs(5));
        assert_eq!(std::sync::Arc::strong_count(&body), 1, "let go once acknowledged");
        assert_eq!(data.get() - before, datagrams, "message {i}: {len} B");
        let got = pair.received[1].pop().expect("delivered");
        assert_eq!(got, [prefix, &msg(i, len), suffix].concat(), "message {i}");
    }
    assert!(pair.violations.is_empty());
}

/// A lent message with a prefix (a layer's header): the first packet
/// carries the prefix in front of the lent memory, whatever the sizes, and
/// a lost packet is resent the same way.
#[test]
fn a_lent_message_s_prefix_goes_in_front_of_its_memory() {
    // Datagrams of loopback's size: pieces go where they lie.
    let big = |rank| Config { max_datagram: 65_000, ..config(rank) };
    let mut pair = Pair::new(big(0), big(1));
    pair.drop = Box::new(|s| {
        s.from == 0 && s.packet_type == PacketType::Data as u8 && s.sequence % 3 == 0 && !s.retransmission
    });
    let prefix = *b"0123456789";
    for (i, len) in [(1usize, 300_000usize), (2, 20_000), (3, 5_000), (4, 0)] {
        let body = std::sync::Arc::new(Lent(msg(i, len)));
        let lent: std::sync::Arc<dyn bulkwire_proto::LentBytes> = body.clone();
        pair.ends[0].send_lent(1, 0, &prefix, lent, &[i as u8; 2]).unwrap();
        pair.run(Duration::from_secs(5));
        assert_eq!(std::sync::Arc::strong_count(&body), 1, "let go once acknowledged");
        let got = pair.received[1].pop().expect("delivered");
        assert_eq!(got, [&prefix[..], &msg(i, len), &[i as u8; 2]].concat(), "message {i}");
    }
    assert!(pair.violations.is_empty());
    let too_long = [0; bulkwire_proto::LENT_PREFIX_MAX + 1];
    let body: std::sync::Arc<dyn bulkwire_proto::LentBytes> = std::sync::Arc::new(Lent(msg(5, 10)));
    assert!(matches!(pair.ends[0].send_lent(1, 0, &too_long, body, &[]), Err(SendError::TooLarge { .. })));
}

/// Messages on a channel that sends their end ahead
/// ([`Endpoint::set_tail_ahead`]): whatever the sizes, the datagrams, the
/// losses and the way a message is given (copied, framed, lent with a
/// prefix and a suffix, packed behind others), every message arrives whole
/// and in order.
#[test]
fn messages_whose_end_goes_ahead_arrive_whole_and_in_order() {
    for (max_datagram, n) in [(1_472, 4), (1_472, 1), (65_000, 4), (65_000, 16), (200, 16)] {
        let cfg = |rank| Config { max_datagram, ..config(rank) };
        let mut p = Pair::new(cfg(0), cfg(1));
        p.ends[0].set_tail_ahead(0, n).unwrap();
        p.drop = Box::new(|s| {
            s.from == 0 && s.packet_type == PacketType::Data as u8 && s.sequence % 3 == 1 && !s.retransmission
        });
        let payload = max_datagram - bulkwire_wire::OVERHEAD;
        let head = bulkwire_wire::RECORD_HEADER_LEN;
        let mut want = Vec::new();
        let sizes = [0, 1, n, n + 1, 100, payload - head, payload - head + 1, payload, 3 * payload, 300_000];
        for (i, &len) in sizes.iter().enumerate() {
            // Behind a small message, and alone.
            let small = msg(100 + i, 7);
            p.ends[0].send(1, 0, &small).unwrap();
            let m = msg(i, len);
            p.ends[0].send(1, 0, &m).unwrap();
            p.ends[0].send_framed(1, 0, framed(&m)).unwrap();
            let body = std::sync::Arc::new(Lent(m.clone()));
            p.ends[0].send_lent(1, 0, b"prefix", body, b"tag!").unwrap();
            want.extend([small, m.clone(), m.clone(), [&b"prefix"[..], &m, b"tag!"].concat()]);
            p.run(Duration::from_secs(5));
        }
        assert!(p.violations.is_empty(), "{:?}", p.violations);
        assert_eq!(p.received[1].len(), want.len(), "datagrams of {max_datagram}, {n} bytes ahead");
        for (k, (got, want)) in p.received[1].iter().zip(&want).enumerate() {
            assert!(got == want, "message {k}: {} bytes for {}", got.len(), want.len());
        }
        assert!(p.ends[0].is_idle());
    }
}

/// The first datagram of a message that does not fit it carries the
/// message's last bytes as a record of their own, ahead of its first piece
/// (a copied one, or one that lies in the message's buffer).
#[test]
fn a_message_s_end_goes_ahead_of_its_first_piece() {
    use bulkwire_wire::{decode, Accept, Records};
    let accept = Accept { job: JOB, destination: 1, ranks: 2, channels: 1 };
    let key = JobKey::new([3; 32]);
    let records = |datagram: &[u8]| -> Vec<(u32, u32, Vec<u8>)> {
        let packet = decode(datagram, &key, &accept).unwrap();
        Records::new(packet.payload).map(|r| r.unwrap()).map(|r| (r.message_len, r.offset, r.data.to_vec())).collect()
    };
    let mut buf = vec![0u8; 65_536];
    // Copied into the packet, behind a small message.
    let mut a = Endpoint::new(config(0)).unwrap();
    a.set_tail_ahead(0, 4).unwrap();
    let m = msg(1, 10_000);
    a.send(1, 0, b"hi").unwrap();
    a.send(1, 0, &m).unwrap();
    let t = a.poll_transmit(Time::ZERO, &mut buf).unwrap();
    let got = records(&buf[..t.len]);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0], (2, 0, b"hi".to_vec()));
    assert_eq!(got[1], (10_000, 9_996, m[9_996..].to_vec()), "the end ahead");
    assert_eq!((got[2].0, got[2].1), (10_000, 0));
    assert_eq!(got[2].2, m[..got[2].2.len()]);
    // The pieces stop where the end begins.
    let mut covered = got[2].2.len();
    while let Some(t) = a.poll_transmit(Time::ZERO, &mut buf) {
        for (len, offset, data) in records(&buf[..t.len]) {
            assert_eq!((len, offset as usize), (10_000, covered));
            covered += data.len();
        }
    }
    assert_eq!(covered, 9_996);
    // A piece that lies in the message's buffer: the end and the piece's
    // record header go before it.
    let (mut a, _) = in_place_pair(65_000);
    a.set_tail_ahead(0, 4).unwrap();
    a.send_owned(1, 0, msg(2, 300_000)).unwrap();
    let (_, shared) = a.poll_transmit_shared(Time::ZERO, &mut buf).unwrap();
    let shared = shared.expect("a data packet");
    let [head, ..] = shared.parts();
    assert_eq!(head.len(), 2 * bulkwire_wire::RECORD_HEADER_LEN + 4);
    assert_eq!(bulkwire_wire::read_record_header(head[..10].try_into().unwrap()), (300_000, 299_996, 4));
    // At most 16 bytes go ahead.
    assert_eq!(a.set_tail_ahead(0, 17), Err(bulkwire_proto::ConfigError::TailAheadTooLong(17)));
}

/// A peer whose records misuse the end ahead breaks the protocol.
#[test]
fn a_message_s_end_ahead_out_of_place_breaks_the_protocol() {
    use bulkwire_wire::record_header;
    let record =
        |len: u32, offset: u32, data: &[u8]| [&record_header(len, offset, data.len() as u16)[..], data].concat();
    let cases: [(Vec<u8>, &str); 5] = [
        (record(100, 96, &[1; 4]), "a message's end ahead of nothing"),
        ([record(100, 96, &[1; 4]), record(50, 0, &[2; 50])].concat(), "a message's end ahead of another message"),
        ([record(100, 96, &[1; 4]), record(100, 0, &[2; 97])].concat(), "fragment out of place"),
        ([record(100, 83, &[1; 17]), record(100, 0, &[2; 50])].concat(), "fragment without the start of its message"),
        (
            [record(100, 96, &[1; 4]), record(100, 96, &[1; 4]), record(100, 0, &[2; 50])].concat(),
            "fragment without the start of its message",
        ),
    ];
    for (payload, reason) in cases {
        let mut p = Pair::default();
        let mut h = Header::new(PacketType::Data);
        h.job = job_tag(JOB);
        h.source = 0;
        h.destination = 1;
        let mut buf = vec![0; 400];
        let n = encode(&h, &payload, &JobKey::new([3; 32]), &mut buf).unwrap();
        p.ends[1].handle_datagram(Time::ZERO, &buf[..n]);
        p.flush();
        assert_eq!(p.violations, vec![reason]);
        assert!(p.received[1].is_empty());
    }
}
