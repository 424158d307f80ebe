//! `bulkwire bench mac`: what sealing (or checking) one datagram costs,
//! bulkwire's MAC beside other MACs over the same bytes in the same run:
//! the `aes-gcm-siv` crate's tag (the same MAC, keys derived per call as
//! RFC 8452 does for every nonce), SipHash-2-4-128 and keyed BLAKE3 (MACs
//! bulkwire used before). No job: every figure is this process's.

use std::hash::Hasher;
use std::hint::black_box;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::rows::{Report, Row};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Datagram sizes, bytes (44: a header alone, as on loopback; 1472: a
    /// datagram in an Ethernet frame; 8972: in a jumbo frame; 64000: on
    /// loopback).
    #[arg(long, value_delimiter = ',', default_values_t = [44, 1472, 8972, 64000])]
    pub sizes: Vec<usize>,
    /// Rounds per size; each MAC is timed once a round, the MACs in turns,
    /// and the median round reported.
    #[arg(long, default_value_t = 9)]
    pub rounds: u32,
}

/// Bytes each MAC hashes in a round (enough calls to time a short one well).
const ROUND_BYTES: usize = 8 << 20;

/// The MACs measured: (source, what, function).
type Mac = (&'static str, &'static str, Box<dyn Fn(&[u8]) -> u8>);

fn macs() -> Vec<Mac> {
    use aes_gcm_siv::aead::{AeadInPlace, KeyInit};
    let key = bulkwire_wire::JobKey::new(std::array::from_fn(|i| (i * 13 + 1) as u8));
    let siv = aes_gcm_siv::Aes256GcmSiv::new(&[3u8; 32].into());
    let sip = [5u8; 16];
    let blake = [7u8; 32];
    vec![
        ("bulkwire", "aes-256-gcm-siv", Box::new(move |d: &[u8]| key.datagram_tag(d)[0])),
        (
            "crate",
            "aes-256-gcm-siv",
            Box::new(move |d: &[u8]| {
                let tag = siv.encrypt_in_place_detached(&[0u8; 12].into(), d, &mut []);
                tag.map_or(0, |t| t[0])
            }),
        ),
        (
            "crate",
            "siphash-2-4-128",
            Box::new(move |d: &[u8]| {
                use siphasher::sip128::Hasher128;
                let mut h = siphasher::sip128::SipHasher24::new_with_key(&sip);
                h.write(d);
                h.finish128().as_bytes()[0]
            }),
        ),
        ("crate", "blake3-keyed", Box::new(move |d: &[u8]| blake3::keyed_hash(&blake, d).as_bytes()[0])),
    ]
}

/// Microseconds per call of each MAC over datagrams of each size: the
/// median of `rounds` rounds, the MACs timed in turns within a round.
pub(crate) fn measure(args: &Args) -> Report {
    let macs = macs();
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let data: Vec<u8> = (0..size).map(|i| (i * 131 + 17) as u8).collect();
        let calls = (ROUND_BYTES / size.max(1)).clamp(100, 200_000);
        let mut times = vec![Vec::new(); macs.len()];
        for _ in 0..args.rounds.max(1) {
            for ((_, _, mac), times) in macs.iter().zip(&mut times) {
                let start = Instant::now();
                let mut sink = 0u8;
                for _ in 0..calls {
                    sink ^= mac(black_box(&data));
                }
                black_box(sink);
                times.push(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
            }
        }
        for ((source, what, _), mut times) in macs.iter().zip(times) {
            times.sort_by(f64::total_cmp);
            let us = times[times.len() / 2];
            let mut row = Row::new("mac", source, *what, 1).size(size).with("median_us", us);
            if us > 0.0 {
                row = row.with("mb_per_s", size as f64 / us);
            }
            if *source == "bulkwire" {
                row = row.with("polyval", bulkwire_wire::mac_polyval());
            }
            rows.push(row);
        }
    }
    let notes = vec![
        format!(
            "bulkwire's POLYVAL here: {}; each MAC over the same bytes, in turns, median of {} rounds",
            bulkwire_wire::mac_polyval(),
            args.rounds.max(1)
        ),
        "where every socket of a job is on loopback, bulkwire's MAC covers the 44-byte header alone, by SipHash-2-4-128 (its column at 44 B)".into(),
    ];
    Report { rows, notes }
}

pub(crate) fn table(report: &Report) -> String {
    let refs = ["aes-256-gcm-siv", "siphash-2-4-128", "blake3-keyed"];
    let mut o = "# one datagram's MAC, microseconds a call (median); `crate`: another implementation or MAC over the same bytes\n"
        .to_string();
    o.push_str(&format!("{:>8} {:>10}", "size", "bulkwire"));
    for r in &refs {
        o.push_str(&format!(" {r:>18}"));
    }
    o.push_str(&format!(" {:>10} {:>10}\n", "MB/s", "sip/ours"));
    let mut sizes: Vec<u64> = report.table("mac").filter_map(|r| r.size_bytes).collect();
    sizes.dedup();
    for size in sizes {
        let us =
            |source: &str, what: &str| report.find("mac", source, what, Some(size)).and_then(|r| r.num("median_us"));
        let ours = us("bulkwire", "aes-256-gcm-siv");
        o.push_str(&format!("{size:>8} {:>10}", crate::rows::opt(ours, 3)));
        for r in &refs {
            o.push_str(&format!(" {:>18}", crate::rows::opt(us("crate", r), 3)));
        }
        let rate = report.find("mac", "bulkwire", "aes-256-gcm-siv", Some(size)).and_then(|r| r.num("mb_per_s"));
        let ratio = match (us("crate", "siphash-2-4-128"), ours) {
            (Some(sip), Some(ours)) if ours > 0.0 => Some(sip / ours),
            _ => None,
        };
        o.push_str(&format!(" {:>10} {:>10}\n", crate::rows::opt(rate, 0), crate::rows::opt(ratio, 2)));
    }
    o
}
