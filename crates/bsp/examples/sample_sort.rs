//! Parallel sample sort with BSMP: every process sorts its keys, sends p - 1
//! regular samples to every process, all choose the same splitters, and the
//! keys travel to their buckets as messages. Checks that the result is
//! sorted across processes and is a permutation of the input.
//!
//! `bulkwire run -n 4 target/debug/examples/sample_sort [keys_per_process]`

use bulkwire_bsp::{as_bytes, Bsp, BspError};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Process `pid`'s keys: its own stream of one seed, so that every run
/// sorts the same keys and no two processes draw the same ones.
fn keys(pid: u32, n: usize) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x1234_5678);
    rng.set_stream(u64::from(pid));
    (0..n).map(|_| rng.next_u64()).collect()
}

fn to_keys(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
}

fn main() -> Result<(), BspError> {
    let mut bsp = Bsp::begin()?;
    let (pid, p) = (bsp.pid(), bsp.nprocs());
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    // [count, checksum, first, last] of every process, to check the result.
    let summary = bsp.register::<u64>(4 * p as usize)?;
    bsp.sync()?;

    let start = bsp.time();
    let mut local = keys(pid, n);
    local.sort_unstable();
    // Superstep 1: regular samples to everyone.
    let samples: Vec<u64> = (1..p as usize).map(|i| local[i * local.len() / p as usize]).collect();
    for to in 0..p {
        bsp.send(to, &[], as_bytes(&samples))?;
    }
    bsp.sync()?;
    let mut all: Vec<u64> = bsp.messages().flat_map(|m| to_keys(m.payload).collect::<Vec<_>>()).collect();
    all.sort_unstable();
    let splitters: Vec<u64> = (1..p as usize).map(|i| all[i * all.len() / p as usize]).collect();
    // Superstep 2: every key to its bucket, one message per destination.
    let mut from = 0;
    for to in 0..p {
        let end = match splitters.get(to as usize) {
            Some(&s) => local.partition_point(|&k| k < s),
            None => local.len(),
        };
        bsp.send(to, &[], as_bytes(&local[from..end]))?;
        from = end;
    }
    bsp.sync()?;
    let mut mine: Vec<u64> = bsp.messages().flat_map(|m| to_keys(m.payload).collect::<Vec<_>>()).collect();
    mine.sort_unstable();
    let took = bsp.time() - start;

    // Superstep 3: summaries to everyone, then check.
    let sum = mine.iter().fold(0u64, |a, &k| a.wrapping_add(k));
    let first = mine.first().copied().unwrap_or(u64::MAX);
    let last = mine.last().copied().unwrap_or(0);
    for to in 0..p {
        bsp.put(to, &[mine.len() as u64, sum, first, last], &summary, 4 * pid as usize)?;
    }
    bsp.sync()?;
    let s = bsp.area(&summary).to_vec();
    let total: u64 = s.chunks(4).map(|c| c[0]).sum();
    let checksum_out = s.chunks(4).fold(0u64, |a, c| a.wrapping_add(c[1]));
    let ordered = s.chunks(4).filter(|c| c[0] > 0).collect::<Vec<_>>().windows(2).all(|w| w[0][3] <= w[1][2]);
    let expect_checksum =
        (0..p).fold(0u64, |a, q| a.wrapping_add(keys(q, n).iter().fold(0u64, |b, &k| b.wrapping_add(k))));
    let sorted = mine.windows(2).all(|w| w[0] <= w[1]);
    if total != n as u64 * u64::from(p) || checksum_out != expect_checksum || !ordered || !sorted {
        bsp.abort(&format!("sample sort is wrong: {total} keys, ordered {ordered}, sorted {sorted}"));
    }
    if pid == 0 {
        let largest = s.chunks(4).map(|c| c[0]).max().unwrap_or(0);
        println!(
            "sample sort of {} keys on {p} processes: sorted (largest bucket {largest}, {:.2} of the mean) in {:.1} ms",
            total,
            largest as f64 / n as f64,
            took * 1e3
        );
    }
    bsp.end()
}
