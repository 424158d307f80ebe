//! Fuzzes `bulkwire_wire::decode` and the payload parsers behind it.
//!
//! The first input byte picks the mode:
//!
//! * even: the rest is decoded as a datagram, as it is. This covers the cheap
//!   checks and the MAC, but random bytes never carry a valid MAC, so nothing
//!   behind the MAC would ever run.
//! * odd: that is why this mode exists. The next `FIELDS` bytes give the
//!   header fields and the rest is the payload; the target seals them with the
//!   job key, as a peer of the job would, and decodes the result. So the
//!   fuzzer reaches the header checks after the MAC and the payload parsers
//!   (`Records`, `AckPayload`, and the latency engines' probe, clock sync and
//!   LSTAT payloads).
#![no_main]

use bulkwire_wire::{
    decode, encode, job_tag, Accept, AckPayload, ClockSyncPayload, DecodeError, EncodeError, Flags,
    Header, JobKey, LatencyStatus, Packet, PacketType, ProbePayload, RecordWriter, Records,
    ACK_PAYLOAD_LEN, CLOCK_SYNC_PAYLOAD_LEN, LSTAT_FIXED_LEN, MAX_MISSING_RANGES, MAX_PAYLOAD,
    MISSING_RANGE_LEN, OVERHEAD, PROBE_PAYLOAD_LEN, SEQUENCE_LIMIT,
};
use libfuzzer_sys::fuzz_target;

/// The key the seed corpus is sealed with.
const KEY: [u8; 32] = [0x5a; 32];
const ACCEPT: Accept = Accept {
    job: 0x0123_4567_89ab_cdef,
    destination: 1,
    ranks: 4,
    channels: 2,
};
/// Input bytes after the mode byte that become header fields in sealed mode:
/// type, flags (2), channel, colour, source, destination, sequence (8),
/// ack (8), end of hole (8), timestamp (8), corrupt-at (2), corrupt-with.
const FIELDS: usize = 42;

fuzz_target!(|data: &[u8]| {
    let key = JobKey::new(KEY);
    match data.split_first() {
        Some((mode, rest)) if mode & 1 == 1 => sealed(rest, &key),
        Some((_, datagram)) => {
            if let Ok(packet) = decode(datagram, &key, &ACCEPT) {
                check_accepted(datagram, &packet, &key);
            }
        }
        None => {}
    }
});

fn sealed(input: &[u8], key: &JobKey) {
    if input.len() < FIELDS || input.len() - FIELDS > MAX_PAYLOAD {
        return;
    }
    let (f, payload) = input.split_at(FIELDS);
    let u64_at = |i: usize| u64::from_be_bytes(f[i..i + 8].try_into().unwrap());
    // Sequence numbers mostly within the wire's 48 bits, sometimes beyond.
    let sequence_at = |i: usize| match f[i] {
        0xff => u64_at(i),
        _ => u64_at(i) % SEQUENCE_LIMIT,
    };
    // Addressing fields come from small ranges, so that most headers are
    // valid while every kind of invalid one still occurs.
    let header = Header {
        packet_type: PacketType::from_u8(1 + f[0] % 8).unwrap(),
        flags: Flags::from_bits(u16::from_be_bytes([f[1], f[2]]) & Flags::ALL.bits()).unwrap(),
        channel: u16::from(f[3] % 3),
        colour: f[4],
        job: job_tag(ACCEPT.job),
        source: u32::from(f[5] % 5),
        destination: u32::from(f[6] % 3),
        sequence: sequence_at(7),
        ack: sequence_at(15),
        end_of_hole: sequence_at(23),
        timestamp: u64_at(31),
        payload_len: payload.len() as u16,
    };
    let mut datagram = vec![0u8; OVERHEAD + payload.len()];
    let spent = [header.sequence, header.ack, header.end_of_hole]
        .iter()
        .any(|&s| s >= SEQUENCE_LIMIT);
    if spent {
        let sealed = encode(&header, payload, key, &mut datagram);
        assert_eq!(sealed, Err(EncodeError::SequenceSpent));
        return;
    }
    assert_eq!(
        encode(&header, payload, key, &mut datagram),
        Ok(datagram.len())
    );
    // The wire carries the hole's length from the acknowledgement, at
    // least 0 and at most u32::MAX packets.
    let hole = header
        .end_of_hole
        .saturating_sub(header.ack)
        .min(u64::from(u32::MAX));
    let sent = Header {
        end_of_hole: header.ack + hole,
        ..header
    };

    let valid = header.destination == ACCEPT.destination
        && header.source < ACCEPT.ranks
        && header.source != header.destination
        && header.channel < ACCEPT.channels;
    match decode(&datagram, key, &ACCEPT) {
        Ok(packet) => {
            assert!(valid, "accepted an invalid header {header:?}");
            assert_eq!(packet.header, sent);
            assert_eq!(packet.payload, payload);
            check_accepted(&datagram, &packet, key);
        }
        Err(e) => assert!(
            !valid
                && matches!(
                    e,
                    DecodeError::Misaddressed { .. } | DecodeError::UnknownChannel(_)
                ),
            "{e:?} for sealed header {header:?}"
        ),
    }

    // Any one corrupted byte of a sealed datagram must be rejected.
    let at = usize::from(u16::from_be_bytes([f[39], f[40]])) % datagram.len();
    datagram[at] ^= f[41].max(1);
    assert!(
        decode(&datagram, key, &ACCEPT).is_err(),
        "byte {at} corrupted, still accepted"
    );
}

/// Invariants of an accepted datagram: it is exactly what `encode` makes of
/// its header and payload, and the payload parsers handle it without panic.
fn check_accepted(datagram: &[u8], packet: &Packet, key: &JobKey) {
    let mut again = vec![0u8; datagram.len()];
    assert_eq!(
        encode(&packet.header, packet.payload, key, &mut again),
        Ok(datagram.len())
    );
    assert_eq!(again, datagram);
    check_records(packet.payload);
    check_ack(packet.payload);
    check_latency(packet.payload);
}

fn check_records(payload: &[u8]) {
    let mut records = Records::new(payload);
    let mut rewritten = vec![0u8; payload.len()];
    let mut writer = RecordWriter::new(&mut rewritten);
    let mut failed = false;
    while let Some(record) = records.next() {
        match record {
            Ok(r) => {
                assert!(u64::from(r.offset) + r.data.len() as u64 <= u64::from(r.message_len));
                assert!(r.data.len() <= writer.room());
                let _ = (r.starts_message(), r.ends_message());
                writer.push(r.message_len, r.offset, r.data);
            }
            Err(_) => {
                assert!(records.next().is_none(), "records go on after an error");
                failed = true;
                break;
            }
        }
    }
    assert_eq!(Records::validate(payload).is_ok(), !failed);
    // The records read are the payload's prefix, written back byte for byte;
    // a well-formed payload is nothing but its records.
    let written = writer.len();
    assert_eq!(rewritten[..written], payload[..written]);
    assert_eq!(written == payload.len(), !failed);
}

fn check_ack(payload: &[u8]) {
    match AckPayload::read(payload) {
        Ok(ack) => {
            let mut out = [0u8; ACK_PAYLOAD_LEN];
            assert_eq!(ack.write(&mut out), ACK_PAYLOAD_LEN);
            assert_eq!(out, payload);
        }
        Err(e) => {
            assert_ne!(payload.len(), ACK_PAYLOAD_LEN);
            assert!(matches!(e, DecodeError::MalformedPayload(_)));
        }
    }
}

/// The latency payloads: whatever decodes writes back byte for byte, and an
/// LSTAT's ranges are ordered and bounded by what the receiver knows.
fn check_latency(payload: &[u8]) {
    if let Ok(probe) = ProbePayload::read(payload) {
        let mut out = [0u8; PROBE_PAYLOAD_LEN];
        probe.write(&mut out);
        assert_eq!(out, payload);
    }
    if let Ok(sync) = ClockSyncPayload::read(payload) {
        let mut out = [0u8; CLOCK_SYNC_PAYLOAD_LEN];
        sync.write(&mut out);
        assert_eq!(out, payload);
    }
    if let Ok((status, ranges)) = LatencyStatus::read(payload) {
        let mut previous_end = 0;
        for (start, end) in ranges.clone() {
            assert!(start < end && start >= previous_end && end <= status.known_sent);
            previous_end = end;
        }
        let mut out = [0u8; LSTAT_FIXED_LEN + MISSING_RANGE_LEN * MAX_MISSING_RANGES];
        let n = status.write(ranges, &mut out);
        assert_eq!(&out[..n], payload);
    }
}
