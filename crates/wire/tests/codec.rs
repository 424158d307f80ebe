use bulkwire_wire::*;
use proptest::prelude::*;

const JOB: u64 = 0x5eed_0000_0000_0001;

fn key() -> JobKey {
    JobKey::new([7; 32])
}

fn accept() -> Accept {
    Accept { job: JOB, destination: 1, ranks: 4, channels: 2 }
}

fn header(packet_type: PacketType) -> Header {
    let mut h = Header::new(packet_type);
    h.job = job_tag(JOB);
    h.source = 0;
    h.destination = 1;
    h
}

fn sample() -> Vec<u8> {
    let mut h = header(PacketType::Data);
    h.sequence = 42;
    h.ack = 7;
    h.end_of_hole = 9;
    let mut out = vec![0; 200];
    let n = encode(&h, b"hello world", &key(), &mut out).unwrap();
    out.truncate(n);
    out
}

fn arb_type() -> impl Strategy<Value = PacketType> {
    (1u8..=9).prop_map(|t| PacketType::from_u8(t).unwrap())
}

proptest! {
    #[test]
    fn round_trip(
        packet_type in arb_type(),
        flags in 0u16..=Flags::ALL.bits(),
        channel in 0u16..2,
        colour: u8,
        source in prop::sample::select(vec![0u32, 2, 3]),
        sequence in 0..SEQUENCE_LIMIT,
        ack in 0..SEQUENCE_LIMIT - 1000,
        hole in 0u64..1000,
        timestamp: u64,
        payload in prop::collection::vec(any::<u8>(), 0..3000),
    ) {
        let mut h = header(packet_type);
        h.flags = Flags::from_bits(flags).unwrap();
        h.channel = channel;
        h.colour = colour;
        h.source = source;
        h.sequence = sequence;
        h.ack = ack;
        h.end_of_hole = ack + hole;
        h.timestamp = timestamp;
        let mut out = vec![0; OVERHEAD + payload.len()];
        let n = encode(&h, &payload, &key(), &mut out).unwrap();
        prop_assert_eq!(n, out.len());
        let p = decode(&out, &key(), &accept()).unwrap();
        h.payload_len = payload.len() as u16;
        prop_assert_eq!(p.header, h);
        prop_assert_eq!(p.payload, &payload[..]);
    }

    #[test]
    fn any_single_bit_flip_is_rejected(bit in 0usize..(OVERHEAD + 11) * 8) {
        let mut d = sample();
        d[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode(&d, &key(), &accept()).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&bytes, &key(), &accept());
        for r in Records::new(&bytes) {
            let _ = r;
        }
    }

    #[test]
    fn latency_payloads_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
        let _ = ProbePayload::read(&bytes);
        let _ = ClockSyncPayload::read(&bytes);
        if let Ok((status, ranges)) = LatencyStatus::read(&bytes) {
            // Whatever decodes is ordered, bounded and writes back byte for byte.
            let ranges: Vec<(u64, u64)> = ranges.collect();
            prop_assert!(ranges.len() <= MAX_MISSING_RANGES);
            prop_assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
            prop_assert!(ranges.iter().all(|&(a, b)| a < b && b <= status.known_sent));
            let mut out = vec![0u8; LSTAT_FIXED_LEN + MISSING_RANGE_LEN * MAX_MISSING_RANGES];
            let n = status.write(ranges, &mut out);
            prop_assert_eq!(&out[..n], &bytes[..]);
        }
    }

    #[test]
    fn lstat_round_trip(
        epoch: u32,
        high: bool,
        reason in 1u8..=3,
        probe_timestamp: u64,
        latency: u64,
        cuts in prop::collection::btree_set(0u64..10_000, 0..40),
    ) {
        let cuts: Vec<u64> = cuts.into_iter().collect();
        let ranges: Vec<(u64, u64)> = cuts.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        let status = LatencyStatus {
            epoch,
            mode: if high { WireMode::High } else { WireMode::Low },
            reason: [LstatReason::LatencyHigh, LstatReason::ProbeLost, LstatReason::LatencyLow][reason as usize - 1],
            probe_timestamp,
            latency,
            known_sent: 10_000,
        };
        let mut out = vec![0u8; LSTAT_FIXED_LEN + MISSING_RANGE_LEN * MAX_MISSING_RANGES];
        let n = status.write(ranges.iter().copied(), &mut out);
        let (read, read_ranges) = LatencyStatus::read(&out[..n]).unwrap();
        prop_assert_eq!(read, status);
        prop_assert_eq!(read_ranges.collect::<Vec<_>>(), ranges);
    }

    #[test]
    fn records_round_trip(msgs in prop::collection::vec((0u32..100_000, prop::collection::vec(any::<u8>(), 0..300)), 0..8)) {
        let mut buf = vec![0; 4096];
        let mut w = RecordWriter::new(&mut buf);
        let mut written = Vec::new();
        for (total, data) in &msgs {
            let total = if data.is_empty() { 0 } else { (*total).max(data.len() as u32) };
            let offset = total - data.len() as u32;
            if data.len() <= w.room() && w.room() > 0 {
                w.push(total, offset, data);
                written.push((total, offset, data.clone()));
            }
        }
        let n = w.len();
        let read: Vec<_> = Records::new(&buf[..n]).map(|r| r.unwrap()).map(|r| (r.message_len, r.offset, r.data.to_vec())).collect();
        prop_assert_eq!(read, written);
    }
}

#[test]
fn rejections_are_typed() {
    let good = sample();
    assert!(decode(&good, &key(), &accept()).is_ok());
    assert_eq!(decode(&good[..10], &key(), &accept()), Err(DecodeError::Truncated(10)));
    let big = vec![0u8; MAX_DATAGRAM + 1];
    assert_eq!(decode(&big, &key(), &accept()), Err(DecodeError::Oversized(MAX_DATAGRAM + 1)));
    let mut v = good.clone();
    v[0] = 9;
    assert_eq!(decode(&v, &key(), &accept()), Err(DecodeError::UnsupportedVersion(9)));
    let other_job = Accept { job: JOB ^ 0xff, ..accept() };
    assert_eq!(decode(&good, &key(), &other_job), Err(DecodeError::WrongJob(job_tag(JOB))));
    assert_eq!(decode(&good, &JobKey::new([8; 32]), &accept()), Err(DecodeError::BadMac));
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(decode(&longer, &key(), &accept()), Err(DecodeError::LengthMismatch { .. })));
    let not_me = Accept { destination: 2, ..accept() };
    assert!(matches!(decode(&good, &key(), &not_me), Err(DecodeError::Misaddressed { .. })));
    let few_channels = Accept { channels: 0, ..accept() };
    assert_eq!(decode(&good, &key(), &few_channels), Err(DecodeError::UnknownChannel(0)));
    let mut counters = RejectCounters::default();
    counters.record(&DecodeError::BadMac);
    counters.record(&DecodeError::WrongJob(3));
    assert_eq!((counters.bad_mac, counters.wrong_job, counters.total()), (1, 1, 2));
}

#[test]
fn sequence_numbers_take_48_bits_and_a_hole_32() {
    let mut h = header(PacketType::Data);
    h.sequence = SEQUENCE_LIMIT - 1;
    h.ack = SEQUENCE_LIMIT - 2;
    h.end_of_hole = SEQUENCE_LIMIT - 1;
    let mut out = vec![0; OVERHEAD];
    assert_eq!(encode(&h, b"", &key(), &mut out), Ok(OVERHEAD));
    assert_eq!(Header::named_sequence(&out), Some(SEQUENCE_LIMIT - 1));
    let p = decode(&out, &key(), &accept()).unwrap();
    assert_eq!((p.header.sequence, p.header.ack, p.header.end_of_hole), (h.sequence, h.ack, h.end_of_hole));
    for spent in [(SEQUENCE_LIMIT, 0, 0), (0, SEQUENCE_LIMIT, SEQUENCE_LIMIT), (0, 0, SEQUENCE_LIMIT)] {
        (h.sequence, h.ack, h.end_of_hole) = spent;
        assert_eq!(encode(&h, b"", &key(), &mut out), Err(EncodeError::SequenceSpent), "{spent:?}");
    }
    // A hole longer than 2^32 - 1 packets (no receiver holds so many) is
    // sent as that long.
    (h.sequence, h.ack, h.end_of_hole) = (0, 5, 5 + (1 << 40));
    encode(&h, b"", &key(), &mut out).unwrap();
    let p = decode(&out, &key(), &accept()).unwrap();
    assert_eq!(p.header.end_of_hole, 5 + u32::MAX as u64);
}

#[test]
fn sealed_fields_are_checked_after_the_mac() {
    // A correctly authenticated datagram with an undefined type or flag is
    // still rejected: a newer peer, never a crash.
    let mut out = vec![0; 100];
    let h = header(PacketType::Data);
    let n = encode(&h, b"", &key(), &mut out).unwrap();
    out[1] = 200;
    let tag_start = n - MAC_LEN;
    let tag = key().datagram_tag(&out[..tag_start]);
    out[tag_start..n].copy_from_slice(&tag);
    assert_eq!(decode(&out[..n], &key(), &accept()), Err(DecodeError::UnknownType(200)));
}

#[test]
fn malformed_records_are_rejected() {
    let mut buf = [0u8; 64];
    let mut w = RecordWriter::new(&mut buf);
    w.push(5, 0, b"hello");
    let n = w.len();
    assert!(Records::validate(&buf[..n]).is_ok());
    assert!(Records::validate(&buf[..n - 1]).is_err());
    assert!(Records::validate(&buf[..3]).is_err());
    buf[3] = 2; // message length 2 < fragment length 5
    assert!(Records::validate(&buf[..n]).is_err());
    let empty = [0u8; RECORD_HEADER_LEN];
    let r: Vec<_> = Records::new(&empty).collect();
    assert_eq!(r.len(), 1);
    assert!(r[0].as_ref().unwrap().ends_message());
}

#[test]
fn ack_payload_round_trip() {
    let a = AckPayload { echo_timestamp: 123456789, delay: 77 };
    let mut b = [0u8; ACK_PAYLOAD_LEN];
    a.write(&mut b);
    assert_eq!(AckPayload::read(&b), Ok(a));
    assert!(AckPayload::read(&b[..5]).is_err());
}

#[test]
fn probe_and_clock_sync_payloads_round_trip() {
    let p = ProbePayload { number: 3, interval: 1_000_000, applied_epoch: 2 };
    let mut b = [0u8; PROBE_PAYLOAD_LEN];
    p.write(&mut b);
    assert_eq!(ProbePayload::read(&b), Ok(p));
    let c = ClockSyncPayload::request(99);
    let mut b = [0u8; CLOCK_SYNC_PAYLOAD_LEN];
    c.write(&mut b);
    assert_eq!(ClockSyncPayload::read(&b), Ok(c));
    assert!(ClockSyncPayload::read(&b[1..]).is_err());
}

#[test]
fn a_split_datagram_is_the_one_encode_writes() {
    let mut h = header(PacketType::Data);
    h.sequence = 3;
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    for key in [key(), key().covering(Coverage::Header)] {
        let mut whole = vec![0; 2000];
        let n = encode(&h, &payload, &key, &mut whole).unwrap();
        let mut head = [0u8; OVERHEAD];
        assert_eq!(seal_split(&h, &payload, &key, &mut head).unwrap(), OVERHEAD);
        let split = [&head[..HEADER_LEN], &payload[..], &head[HEADER_LEN..]].concat();
        assert_eq!(split, whole[..n], "{:?}", key.coverage());
        assert_eq!(decode(&split, &key, &accept()).unwrap().payload, &payload[..]);
    }
    let big = vec![0; MAX_PAYLOAD + 1];
    assert!(seal_split(&h, &big, &key(), &mut [0u8; OVERHEAD]).is_err());
}

proptest! {
    /// A datagram read in three pieces (header and the payload's start, the
    /// rest of the payload, the MAC) decodes as the whole does, under
    /// either coverage; a flipped bit anywhere, or pieces cut elsewhere
    /// than before the MAC, are rejected as the whole would be.
    #[test]
    fn a_datagram_in_pieces_decodes_as_the_whole(
        payload in prop::collection::vec(any::<u8>(), 0..3000),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        header_only: bool,
    ) {
        let key = if header_only { key().covering(Coverage::Header) } else { key() };
        let mut h = header(PacketType::Data);
        h.sequence = 5;
        let mut whole = vec![0; OVERHEAD + payload.len()];
        let n = encode(&h, &payload, &key, &mut whole).unwrap();
        whole.truncate(n);
        let at = HEADER_LEN + cut.index(payload.len() + 1);
        let mac_at = n - MAC_LEN;
        let (head, rest, mac) = (&whole[..at], &whole[at..mac_at], &whole[mac_at..]);
        let split = decode_split(head, rest, mac, &key, &accept()).unwrap();
        prop_assert_eq!(split, decode(&whole, &key, &accept()).unwrap().header);
        // A bit flipped where the MAC covers it.
        let covered = if header_only { HEADER_LEN } else { mac_at };
        let mut bad = whole.clone();
        bad[flip.index(covered)] ^= 1;
        let whole_says = decode(&bad, &key, &accept()).map(|p| p.header);
        let split_says = decode_split(&bad[..at], &bad[at..mac_at], &bad[mac_at..], &key, &accept());
        prop_assert_eq!(split_says.is_err(), true);
        prop_assert_eq!(whole_says.is_err(), true);
        // The MAC cut short: not a datagram of this kind.
        prop_assert!(decode_split(head, rest, &mac[1..], &key, &accept()).is_err());
    }
}
