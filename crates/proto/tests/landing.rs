//! Data read straight into the buffer of the message it continues
//! ([`Endpoint::landing`], [`Endpoint::handle_landed`]): one receiver takes
//! every datagram as a whole, another as the runtime's reads would leave
//! them when aimed at a landing (header, data in the message's buffer, the
//! rest), for the same stream with losses, duplicates, reordering,
//! corruption and two channels interleaved. Both deliver the same
//! messages, and the second reads data in place; where it is given a
//! receive's buffer ([`Endpoint::place`]), the messages that fit it are
//! reassembled there, and taking the buffer back halfway
//! ([`Endpoint::unplace`]) loses nothing. Where the buffer takes only the
//! messages whose end, sent ahead ([`Endpoint::set_tail_ahead`]), passes a
//! filter, no byte of another is ever written there. Where the receiver
//! aims a channel's next whole messages at a region ([`Endpoint::aim`]),
//! those that fill a datagram are read there one after the other, and a
//! datagram read there out of turn is written over by the right one.

use std::time::Duration;

use bulkwire_proto::{Config, Endpoint, Event, Landed, TailFilter, Time};
use bulkwire_wire::{Coverage, JobKey, HEADER_LEN, RECORD_HEADER_LEN};
use proptest::prelude::*;

const JOB: u64 = 91;
/// Datagrams read one per slot (loopback's sort).
const DATAGRAM: usize = 20_000;
/// Datagrams of an Ethernet frame, read in place only as runs the kernel
/// coalesced ([`Endpoint::read_runs`]).
const FRAME: usize = 1_472;

fn config(rank: u32, coverage: Coverage, datagram: usize) -> Config {
    let mut c = Config::new(JOB, JobKey::new([5; 32]).covering(coverage), rank, 2);
    c.channels = 2;
    c.max_datagram = datagram;
    c.initial_rtt = Duration::from_micros(100);
    c
}

/// A receiver of datagrams of `datagram` bytes that reads runs of them
/// as the runtime does where the kernel coalesces them (a buffer of 64
/// KiB) where they are too small to be read one per slot.
fn receiver(coverage: Coverage, datagram: usize) -> Endpoint {
    let mut b = Endpoint::new(config(1, coverage, datagram)).unwrap();
    if datagram < 8 << 10 {
        b.read_runs(Some(65_536));
    }
    b
}

/// A message of `len` bytes that says which it is.
fn message(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + n * 13) as u8 ^ (i >> 8) as u8).collect()
}

/// Messages, by channel.
type ByChannel = [Vec<Vec<u8>>; 2];

/// Messages delivered, by channel.
fn drain(b: &mut Endpoint, got: &mut ByChannel) {
    while let Some(event) = b.poll_event() {
        if let Event::Message { channel, data, start, .. } = event {
            got[channel as usize].push(data[start..].to_vec());
        }
    }
}

/// The last byte of the messages a filtered receive takes
/// ([`Asked::filter`]); the others end with its complement.
const MINE: u8 = 0xA5;

/// What a receive asks for ([`run_placing`]): its buffer of `cap` bytes
/// for the messages on `channel`, all but their last `tail` bytes, taken
/// back and given again every `every` rounds (0: never); with `filter`,
/// only those ending with [`MINE`], which are the messages whose bit is set
/// in it (the others end otherwise). The sender sends the last `ahead`
/// bytes of its messages ahead on both channels.
#[derive(Clone, Copy, Debug)]
struct Asked {
    channel: u16,
    cap: usize,
    tail: usize,
    every: usize,
    filter: Option<u16>,
    ahead: usize,
}

impl Asked {
    fn plain(channel: u16, cap: usize, tail: usize, every: usize) -> Asked {
        Asked { channel, cap, tail, every, filter: None, ahead: 0 }
    }
}

/// A receive's buffer given to an endpoint ([`Endpoint::place`]) for the
/// messages on `channel` from rank 0, all but their last `tail` bytes.
struct Receive {
    channel: u16,
    buf: Vec<u8>,
    tail: usize,
    filter: Option<TailFilter>,
    /// Messages delivered in it.
    placed: usize,
}

impl Receive {
    fn give(&mut self, b: &mut Endpoint) {
        // SAFETY: the buffer is neither moved nor touched until it is taken
        // back, or its message delivered (then given again).
        unsafe { b.place(0, self.channel, self.buf.as_mut_ptr(), self.buf.len(), self.tail, self.filter.clone()) };
    }

    /// [`drain`], the messages placed put together from the buffer, which
    /// is given again for the next.
    fn drain(&mut self, b: &mut Endpoint, got: &mut ByChannel) {
        while let Some(event) = b.poll_event() {
            match event {
                Event::Message { channel, data, start, .. } => got[channel as usize].push(data[start..].to_vec()),
                Event::Placed { from, channel, placed, end } => {
                    assert_eq!((from, channel), (0, self.channel), "placed where it was not asked");
                    assert_eq!(end.len(), self.tail, "all but its last bytes in the buffer");
                    assert!(self.filter.as_ref().is_none_or(|f| f.accepts(&end)), "placed but not asked for");
                    assert!(self.buf[placed..].iter().all(|&b| b == 0xEE), "written beyond the message");
                    got[channel as usize].push([&self.buf[..placed], &end[..]].concat());
                    self.placed += 1;
                    // Written over, to show a message that is not there.
                    self.buf.fill(0xEE);
                    self.give(b);
                }
                _ => {}
            }
        }
    }
}

/// Hands `batch` to `b` as the runtime does with a landing: each datagram
/// scattered as a read would scatter it, then handled in place or put
/// together again. Returns how many were handled in place.
fn feed_landing(b: &mut Endpoint, now: Time, batch: &[Vec<u8>], slots: usize) -> usize {
    let mut in_place = 0;
    let mut i = 0;
    while i < batch.len() {
        let Some(landing) = b.landing(slots) else {
            b.handle_datagram(now, &batch[i]);
            i += 1;
            continue;
        };
        let n = landing.slots().min(batch.len() - i);
        // What the read does: the header and record header, then the
        // region, then the rest.
        let pieces: Vec<(Vec<u8>, usize, Vec<u8>)> = (0..n)
            .map(|k| {
                let d = &batch[i + k];
                let (place, room) = landing.region(k);
                let head = d.len().min(landing.head());
                let data = (d.len() - head).min(room);
                // SAFETY: the region lies in the spare room of the message's
                // buffer, which the endpoint lends until the next call.
                unsafe { std::ptr::copy_nonoverlapping(d[head..].as_ptr(), place, data) };
                (d[..head].to_vec(), data, d[head + data..].to_vec())
            })
            .collect();
        let mut k = 0;
        while k < n {
            let (head, data, tail) = &pieces[k];
            // SAFETY: the landing is fresh, slots go in order, and the read
            // above wrote `data` bytes of the region.
            match unsafe { b.handle_landed(now, &landing, k, head, *data, tail) } {
                Landed::InPlace => {
                    in_place += 1;
                    k += 1;
                }
                Landed::Elsewhere => break,
                Landed::Ended => panic!("no channel fails here"),
            }
        }
        // The rest put together before any is handled.
        let rest: Vec<Vec<u8>> = (k..n)
            .map(|k| {
                let (head, data, tail) = &pieces[k];
                let (place, _) = landing.region(k);
                // SAFETY: written above, and nothing freed the buffer.
                let region = unsafe { std::slice::from_raw_parts(place.cast_const(), *data) };
                [&head[..], region, &tail[..]].concat()
            })
            .collect();
        for d in &rest {
            b.handle_datagram(now, d);
        }
        i += n;
    }
    in_place
}

#[derive(Clone, Debug)]
enum Fault {
    None,
    Drop,
    Duplicate,
    SwapWithNext,
    Flip(usize),
}

/// Messages: their channel and length (within one datagram, or several).
fn sizes() -> impl Strategy<Value = Vec<(u16, usize)>> {
    prop::collection::vec((0u16..2, prop_oneof![1usize..3000, 3000usize..200_000]), 1..12)
}

fn faults() -> impl Strategy<Value = Vec<Fault>> {
    prop::collection::vec(fault(), 0..400)
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        12 => Just(Fault::None),
        1 => Just(Fault::Drop),
        1 => Just(Fault::Duplicate),
        1 => Just(Fault::SwapWithNext),
        1 => any::<usize>().prop_map(Fault::Flip),
    ]
}

/// `batch` as the network passes it on under `faults`, from fault `*f`
/// on (moved past those used).
fn apply_faults(batch: &[Vec<u8>], faults: &[Fault], f: &mut usize, coverage: Coverage) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut j = 0;
    while j < batch.len() {
        let fault = faults.get(*f).cloned().unwrap_or(Fault::None);
        *f += 1;
        match fault {
            Fault::None => out.push(batch[j].clone()),
            Fault::Drop => {}
            Fault::Duplicate => out.extend([batch[j].clone(), batch[j].clone()]),
            Fault::SwapWithNext if j + 1 < batch.len() => {
                out.extend([batch[j + 1].clone(), batch[j].clone()]);
                j += 1;
            }
            Fault::SwapWithNext => out.push(batch[j].clone()),
            Fault::Flip(at) => {
                let mut d = batch[j].clone();
                // Under header coverage only the header is authenticated
                // (loopback): flip there, as nothing else could.
                let span = if coverage == Coverage::Header { HEADER_LEN } else { d.len() };
                d[at % span] ^= 0x10;
                out.push(d);
            }
        }
        j += 1;
    }
    out
}

fn run(sizes: &[(u16, usize)], faults: &[Fault], slots: usize, coverage: Coverage) -> usize {
    run_placing(sizes, faults, slots, coverage, DATAGRAM, None).0
}

/// [`run`], and where `receive` says ([`Asked`]), the receiver that reads
/// in place reassembles messages in a receive's buffer. Returns the
/// datagrams read in place, and the messages placed.
fn run_placing(
    sizes: &[(u16, usize)],
    faults: &[Fault],
    slots: usize,
    coverage: Coverage,
    datagram: usize,
    receive: Option<Asked>,
) -> (usize, usize) {
    let mut a = Endpoint::new(config(0, coverage, datagram)).unwrap();
    let mut whole = Endpoint::new(config(1, coverage, datagram)).unwrap();
    let mut landed = receiver(coverage, datagram);
    let ahead = receive.map_or(0, |r| r.ahead);
    for channel in 0..2 {
        a.set_tail_ahead(channel, ahead).unwrap();
    }
    let mine = |n: usize| receive.and_then(|r| r.filter).map(|bits| bits >> (n % 16) & 1 == 1);
    let mut want: ByChannel = Default::default();
    // Whether a filtered receive asks for each message, by channel.
    let mut asked: [Vec<bool>; 2] = Default::default();
    for (n, &(channel, len)) in sizes.iter().enumerate() {
        let mut m = message(n, len);
        if let (Some(last), Some(is_mine)) = (m.last_mut(), mine(n)) {
            *last = if is_mine { MINE } else { !MINE };
        }
        a.send(1, channel, &m).unwrap();
        asked[channel as usize].push(mine(n) == Some(true) && !m.is_empty());
        want[channel as usize].push(m);
    }
    let (mut got_whole, mut got_landed): (ByChannel, ByChannel) = Default::default();
    let mut now = Time::ZERO;
    let mut in_place = 0;
    let mut f = 0;
    let mut buf = vec![0u8; 65_536];
    let mut receive = receive.map(|asked| {
        let filter = asked.filter.map(|_| TailFilter { ends_with: Some(vec![MINE]), not_ending_with: None });
        let (channel, tail) = (asked.channel, asked.tail);
        let mut r = Receive { channel, buf: vec![0xEE; asked.cap], tail, filter, placed: 0 };
        r.give(&mut landed);
        (r, asked.every)
    });
    for round in 0..2_000 {
        let mut batch = Vec::new();
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            batch.push(buf[..t.len].to_vec());
            if batch.len() == 24 {
                break;
            }
        }
        // The network's faults, the same for both receivers.
        let out = apply_faults(&batch, faults, &mut f, coverage);
        for d in &out {
            whole.handle_datagram(now, d);
        }
        in_place += feed_landing(&mut landed, now, &out, slots);
        drain(&mut whole, &mut got_whole);
        match &mut receive {
            Some((r, every)) => {
                r.drain(&mut landed, &mut got_landed);
                if *every > 0 && round % *every == *every - 1 {
                    landed.unplace();
                    r.buf.fill(0xEE);
                    drain(&mut landed, &mut got_landed);
                    r.give(&mut landed);
                }
            }
            None => drain(&mut landed, &mut got_landed),
        }
        // A filtered receive's buffer holds nothing, or a message it asked
        // for that has not been delivered yet: its start, and nothing
        // beyond the part of it that goes there. (Within that part, a
        // datagram read ahead of its turn may lie where it does not go,
        // until the right one comes.)
        if let Some((r, _)) = receive.as_ref().filter(|(r, _)| r.filter.is_some()) {
            let c = r.channel as usize;
            let written = r.buf.len() - r.buf.iter().rev().take_while(|&&b| b == 0xEE).count();
            let mut pending = want[c].iter().zip(&asked[c]).skip(got_landed[c].len());
            assert!(
                written == 0 || pending.any(|(m, &asked)| asked && written + r.tail <= m.len() && m[0] == r.buf[0]),
                "{written} bytes in the buffer where no message asked for goes"
            );
        }
        // The whole-datagram receiver answers; the other's answers would be
        // the same and are dropped.
        while let Some(t) = whole.poll_transmit(now, &mut buf) {
            a.handle_datagram(now, &buf[..t.len]);
        }
        while landed.poll_transmit(now, &mut buf).is_some() {}
        if got_whole == want && got_landed == want {
            break;
        }
        now = now + Duration::from_millis(1);
        for e in [&mut a, &mut whole, &mut landed] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
    }
    assert_eq!(got_whole, want, "every message, in order, to the receiver of whole datagrams");
    assert_eq!(got_landed, want, "the same to the receiver that reads in place");
    assert_eq!(landed.stats().rejected, whole.stats().rejected, "the same datagrams rejected");
    let placed = receive.map_or(0, |(r, _)| r.placed);
    let counted: u64 = (0..2).filter_map(|c| landed.channel_stats(0, c)).map(|s| s.placed).sum();
    assert_eq!(counted, placed as u64, "every message placed counted");
    (in_place, placed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn reading_in_place_delivers_what_whole_datagrams_deliver(
        sizes in sizes(),
        faults in faults(),
        slots in 1usize..6,
        header_only: bool,
        frames: bool,
    ) {
        let coverage = if header_only { Coverage::Header } else { Coverage::Datagram };
        let datagram = if frames { FRAME } else { DATAGRAM };
        run_placing(&sizes, &faults, slots, coverage, datagram, None);
    }

    /// With a filter or without, the sender's ends ahead (mostly as long
    /// as the receive's tail) or not.
    #[test]
    fn reassembling_in_a_receive_s_buffer_delivers_the_same(
        sizes in sizes(),
        faults in faults(),
        slots in 1usize..6,
        cap in 1usize..200_000,
        tail in 0usize..8,
        every in prop_oneof![Just(0usize), 1usize..20],
        filter: Option<u16>,
        other_ahead in prop::option::weighted(0.2, 0usize..9),
    ) {
        let ahead = other_ahead.unwrap_or(tail);
        let asked = Asked { channel: 0, cap, tail, every, filter, ahead };
        let (_, placed) = run_placing(&sizes, &faults, slots, Coverage::Datagram, DATAGRAM, Some(asked));
        if filter.is_some() && ahead != tail {
            prop_assert_eq!(placed, 0, "placed without its end ahead");
        }
    }
}

#[test]
fn a_message_that_fits_is_reassembled_in_the_receive_s_buffer() {
    // Messages of 500,000 and 300,004 bytes on channel 0, the buffer 300,000
    // bytes long with 4 left out: the second is placed, read in place as
    // much as without the buffer but for its last datagram (which holds the
    // end that stays out); one on channel 1 between them is not.
    let sizes = [(0, 500_000), (1, 100_000), (0, 300_004)];
    let (in_place, placed) =
        run_placing(&sizes, &[], 16, Coverage::Datagram, DATAGRAM, Some(Asked::plain(0, 300_000, 4, 0)));
    let without = run(&sizes, &[], 16, Coverage::Datagram);
    assert_eq!(placed, 1);
    assert!(in_place + 1 >= without, "{in_place} read in place, {without} without the buffer");
    // Taken back and given again every round: still every byte, in order,
    // and the message half reassembled when the buffer is given again is
    // moved there (what came of it copied).
    let (_, placed) = run_placing(&sizes, &[], 4, Coverage::Datagram, DATAGRAM, Some(Asked::plain(0, 300_000, 4, 1)));
    assert_eq!(placed, 1);
}

#[test]
fn a_filtered_receive_places_the_messages_it_asks_for_and_no_other() {
    // Channel 0: messages 0, 2 and 4 are asked for (300,004 bytes, 1,000,
    // which fits one datagram, and 250,000); 1 and 3 end otherwise, one of
    // them longer than the buffer, and come first. Their ends go ahead.
    let sizes = [(0, 500_000), (0, 300_004), (1, 100_000), (0, 1_000), (0, 299_000), (0, 250_000)];
    let asked = |every| Asked { channel: 0, cap: 300_000, tail: 4, every, filter: Some(0b10_0110), ahead: 4 };
    let (in_place, placed) = run_placing(&sizes, &[], 16, Coverage::Datagram, DATAGRAM, Some(asked(0)));
    assert_eq!(placed, 2, "the two asked for that come in several datagrams");
    let without = run(&sizes, &[], 16, Coverage::Datagram);
    assert!(in_place + 2 >= without, "{in_place} read in place, {without} without the buffer");
    // Taken back and given again every round, with losses.
    let faults = [Fault::None, Fault::Drop, Fault::None, Fault::SwapWithNext, Fault::Duplicate];
    let (_, placed) = run_placing(&sizes, &faults, 4, Coverage::Datagram, DATAGRAM, Some(asked(1)));
    assert!(placed <= 2);
    // The sender does not send ends ahead: nothing is placed.
    let (_, placed) = run_placing(&sizes, &[], 16, Coverage::Datagram, DATAGRAM, Some(Asked { ahead: 0, ..asked(0) }));
    assert_eq!(placed, 0);
}

#[test]
fn a_large_message_is_read_in_place_but_for_its_first_datagram() {
    // 500,000 bytes in datagrams of 19,914 bytes of data: 26 datagrams,
    // the first of which opens the message (a resent one may come between).
    let in_place = run(&[(0, 500_000)], &[], 16, Coverage::Datagram);
    assert!((23..=25).contains(&in_place), "{in_place}");
    // With a message on the other channel interleaved (packet by packet),
    // and losses: a datagram of the other channel ends a landing (the rest
    // of its slots are put together and handled as they came), as does a
    // hole until it is filled; some still land.
    let faults = [Fault::None, Fault::None, Fault::Drop, Fault::None, Fault::SwapWithNext, Fault::Duplicate];
    let in_place = run(&[(0, 300_000), (1, 100_000), (0, 300_000)], &faults, 4, Coverage::Header);
    assert!(in_place > 0, "{in_place}");
}

/// Bytes of a piece's own header ([`run_aimed`]), which stay out of the
/// region.
const SKIP: usize = 10;

/// A sender's stream of messages on channel 0 ([`run_aimed`]): `true` a
/// piece (a header of [`SKIP`] bytes, then a full datagram's worth of the
/// stream), `false` another message (short, or of several datagrams); and
/// on channel 1 another now and then.
fn aimed_messages() -> impl Strategy<Value = Vec<(u16, bool, usize)>> {
    prop::collection::vec(
        prop_oneof![
            6 => Just((0u16, true, 0usize)),
            1 => (0u16..2, 1usize..100).prop_map(|(c, len)| (c, false, len)),
            1 => (0u16..2, 30_000usize..60_000).prop_map(|(c, len)| (c, false, len)),
        ],
        1..40,
    )
}

/// Sends `messages` from 0 to 1 under `faults`; the receiver, as an
/// application that knows where the stream's pieces go (a BSP put's
/// area), aims channel 0 at what is left of its region after every
/// delivery, and copies what came otherwise. Returns the pieces read in
/// place. Every message arrives, in order, and the region holds every
/// piece's stream bytes in order.
fn run_aimed(messages: &[(u16, bool, usize)], faults: &[Fault], slots: usize, datagram: usize) -> usize {
    let mut a = Endpoint::new(config(0, Coverage::Datagram, datagram)).unwrap();
    let mut b = receiver(Coverage::Datagram, datagram);
    let chunk = a.config().max_payload() - RECORD_HEADER_LEN - SKIP;
    let mut want: ByChannel = Default::default();
    let mut stream = Vec::new();
    for (n, &(channel, piece, len)) in messages.iter().enumerate() {
        let m = match piece {
            true => message(n, SKIP + chunk),
            false => message(n, len),
        };
        if piece {
            stream.extend_from_slice(&m[SKIP..]);
        }
        a.send(1, channel, &m).unwrap();
        want[channel as usize].push(m);
    }
    // The region, as it would be were nothing read there out of turn.
    let mut region = vec![0xEE_u8; stream.len()];
    let mut landed = 0;
    let mut got: ByChannel = Default::default();
    let (mut now, mut f, mut in_place) = (Time::ZERO, 0, 0);
    let mut buf = vec![0u8; 65_536];
    for _ in 0..20_000 {
        // What came: a piece whole in the region, or copied there.
        while let Some(event) = b.poll_event() {
            match event {
                Event::Aimed { from, channel, head, len } => {
                    assert_eq!((from, channel, head.len(), len), (0, 0, SKIP, chunk));
                    let mut m = head;
                    m.extend_from_slice(&region[landed..landed + len]);
                    landed += len;
                    got[0].push(m);
                }
                Event::Message { channel, data, start, .. } => {
                    let m = data[start..].to_vec();
                    if channel == 0 && m.len() == SKIP + chunk {
                        region[landed..landed + chunk].copy_from_slice(&m[SKIP..]);
                        landed += chunk;
                    }
                    got[channel as usize].push(m);
                }
                other => panic!("{other:?}"),
            }
        }
        // SAFETY: the region is neither moved nor touched by this test
        // until the next events are drained, past the end of the aim.
        let rest = region.len() - landed;
        assert!(unsafe { b.aim(0, 0, SKIP, region.as_mut_ptr().add(landed), rest) });
        let mut batch = Vec::new();
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            batch.push(buf[..t.len].to_vec());
            if batch.len() == slots {
                break;
            }
        }
        let out = apply_faults(&batch, faults, &mut f, Coverage::Datagram);
        in_place += feed_landing(&mut b, now, &out, slots);
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(now, &buf[..t.len]);
        }
        if got == want && landed == stream.len() {
            break;
        }
        now = now + Duration::from_micros(50);
        for e in [&mut a, &mut b] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
    }
    b.unaim();
    assert_eq!(got, want, "every message, in order");
    assert!(region == stream, "the region holds the stream's pieces in order");
    in_place
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn aimed_pieces_land_in_the_region_and_every_message_arrives(
        messages in aimed_messages(),
        faults in faults(),
        slots in 1usize..6,
        frames: bool,
    ) {
        run_aimed(&messages, &faults, slots, if frames { FRAME } else { DATAGRAM });
    }
}

#[test]
fn a_stream_of_pieces_is_read_where_it_is_aimed() {
    // Twenty pieces alone: read in place but where a packet resent on the
    // sender's timer takes a slot and the rest of its read.
    let pieces = vec![(0, true, 0); 20];
    let in_place = run_aimed(&pieces, &[], 4, DATAGRAM);
    assert!((15..=20).contains(&in_place), "{in_place}");
    // Another message between them ends the aim where it comes (read
    // there, then written over), as does a datagram of another channel, or
    // one message in reassembly (read to its own buffer); the next aim
    // takes the rest.
    let mut mixed = pieces.clone();
    mixed.insert(5, (0, false, 40));
    mixed.insert(12, (1, false, 40_000));
    mixed.insert(15, (0, false, 40_000));
    let in_place = run_aimed(&mixed, &[], 4, DATAGRAM);
    assert!((1..20).contains(&in_place), "{in_place}");
    // A loss ends it until the hole is filled.
    let faults = [Fault::None, Fault::None, Fault::Drop, Fault::None, Fault::SwapWithNext, Fault::Flip(30)];
    let in_place = run_aimed(&pieces, &faults, 4, DATAGRAM);
    assert!((1..20).contains(&in_place), "{in_place}");
}

#[test]
fn no_aim_while_a_message_of_its_channel_waits() {
    let mut a = Endpoint::new(config(0, Coverage::Datagram, DATAGRAM)).unwrap();
    let mut b = Endpoint::new(config(1, Coverage::Datagram, DATAGRAM)).unwrap();
    let mut buf = vec![0u8; 65_536];
    a.send(1, 0, b"waiting").unwrap();
    while let Some(t) = a.poll_transmit(Time::ZERO, &mut buf) {
        b.handle_datagram(Time::ZERO, &buf[..t.len]);
    }
    let mut region = vec![0u8; 100_000];
    // SAFETY: nothing is aimed (checked), and the region outlives the test.
    assert!(!unsafe { b.aim(0, 0, SKIP, region.as_mut_ptr(), region.len()) }, "a message of channel 0 waits");
    // Another channel's aim follows from what was taken.
    assert!(unsafe { b.aim(0, 1, SKIP, region.as_mut_ptr(), region.len()) });
    b.unaim();
    assert!(matches!(b.poll_event(), Some(Event::Message { .. })));
    assert!(unsafe { b.aim(0, 0, SKIP, region.as_mut_ptr(), region.len()) });
    // Where what a datagram would bring to the region is under 8 KiB, no;
    // unless the caller reads runs of them.
    assert!(!unsafe { b.aim(0, 0, 15_000, region.as_mut_ptr(), region.len()) });
    b.read_runs(Some(65_536));
    assert!(unsafe { b.aim(0, 0, 15_000, region.as_mut_ptr(), region.len()) });
    b.unaim();
}

#[test]
fn frames_are_read_in_place_as_runs() {
    // Datagrams of an Ethernet frame, where the receiver reads runs: a
    // message of 300,000 bytes (215 of them) read in place but for its
    // first and the runs that a packet resent on the sender's timer leads
    // (the test's clock moves 1 ms a round of 24 datagrams, and the last
    // one sent is resent at the head of every other round: seen 120); a
    // stream of pieces (seen all 100). Nothing without runs.
    let sizes = [(0, 300_000)];
    let (in_place, _) = run_placing(&sizes, &[], 16, Coverage::Datagram, FRAME, None);
    assert!((100..=214).contains(&in_place), "{in_place}");
    let pieces = vec![(0, true, 0); 100];
    let in_place = run_aimed(&pieces, &[], 4, FRAME);
    assert!((80..=100).contains(&in_place), "{in_place}");
    let mut a = Endpoint::new(config(0, Coverage::Datagram, FRAME)).unwrap();
    let mut b = Endpoint::new(config(1, Coverage::Datagram, FRAME)).unwrap();
    let mut buf = vec![0u8; 65_536];
    a.send(1, 0, &message(0, 300_000)).unwrap();
    let t = a.poll_transmit(Time::ZERO, &mut buf).unwrap();
    b.handle_datagram(Time::ZERO, &buf[..t.len]);
    assert!(b.landing(16).is_none(), "frames read one by one are not read in place");
    b.read_runs(Some(65_536));
    let landing = b.landing(16).expect("a landing once runs are read");
    assert!(landing.run());
    assert_eq!(landing.slots(), 65_536 / FRAME, "as many slots as frames fit the read");
}
