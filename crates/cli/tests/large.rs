//! Transfers of more than 2^31 bytes: two processes `bsp_hpput` 2 GiB and
//! one byte to each other in one superstep, over shared memory (the
//! default on one host) and over UDP (`BULKWIRE_SHM=0`), and check that
//! every byte arrived where it belongs.
//!
//! As in bsp.rs, the test is both the launcher and the program: run
//! normally, it starts `bulkwire run -n 2 <this test binary> --exact
//! <test>`; run as a process of the job (BULKWIRE_RENDEZVOUS is set), it
//! plays its part and prints `ok pid N` when every check passed.
//!
//! Each process holds its source, its stream, the stream it receives and
//! its area (about 8 GiB each), so the jobs run one after the other, and
//! not at all on a machine with less memory available than they need.

mod common;
use common::{is_rank, launch, text};

use std::time::{Duration, Instant};

use bulkwire_bsp::{Bsp, BspError};
use bulkwire_runtime::Transport;

/// More than 2^31 bytes: a length kept in 32 signed bits anywhere on the
/// way would show.
const SIZE: usize = (2 << 30) + 1;
/// What the two jobs need at most at once, with room to spare.
const NEEDED: u64 = 18 << 30;
/// Positions checked one by one (besides a checksum of every byte): the
/// ends, and either side of 2^31.
const EDGES: [usize; 6] = [0, 1, (1 << 31) - 1, 1 << 31, SIZE - 2, SIZE - 1];

/// Memory the kernel says it can give (MemAvailable), in bytes.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// `sender`'s bytes: 8-byte words that differ by position and sender.
fn word(sender: u32, w: u64) -> u64 {
    // SplitMix64's finaliser: every bit moves every byte.
    let z = w ^ u64::from(sender) << 56;
    let z = (z ^ z >> 30).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ z >> 27).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ z >> 31
}

fn byte(sender: u32, i: usize) -> u8 {
    word(sender, (i / 8) as u64).to_le_bytes()[i % 8]
}

fn fill(buf: &mut [u8], sender: u32) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&word(sender, w as u64).to_le_bytes()[..chunk.len()]);
    }
}

/// A checksum of `bytes` that depends on the order of its words.
fn checksum(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ bytes.len() as u64;
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().expect("8 bytes"))).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(5);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// An area registered by address, written by the sync through the pointer
/// it was registered with and read between syncs through the same one.
struct Area {
    ptr: *mut u8,
    len: usize,
}

impl Area {
    fn new(len: usize) -> Area {
        Area { ptr: Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>(), len }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` bytes until drop; called between syncs.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` come from the box made in `new`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// One process: puts `SIZE` bytes and their checksum to the other, and
/// checks what the other put.
fn exchange(bsp: &mut Bsp, over: Transport) -> Result<String, BspError> {
    let (me, other) = (bsp.pid(), 1 - bsp.pid());
    let reached = bsp.runtime().transport(other);
    assert_eq!(reached, over, "process {me} reaches process {other} over {reached:?}, not {over:?}");
    let started = Instant::now();
    let mut src = vec![0u8; SIZE];
    fill(&mut src, me);
    let sum = checksum(&src).to_le_bytes();
    let area = Area::new(SIZE);
    let their_sum = Area::new(8);
    // SAFETY: both areas live until after the last sync and are read only
    // between syncs; `src` and `sum` stay untouched until the sync after
    // the hpputs has ended.
    unsafe {
        bsp.push_reg_raw(area.ptr, SIZE)?;
        bsp.push_reg_raw(their_sum.ptr, 8)?;
    }
    bsp.sync()?;
    let prepared = started.elapsed();
    let t = Instant::now();
    unsafe {
        bsp.hpput_raw(other, src.as_ptr(), area.ptr, 0, SIZE)?;
        bsp.hpput_raw(other, sum.as_ptr(), their_sum.ptr, 0, 8)?;
    }
    bsp.sync()?;
    let moved = t.elapsed();
    drop(src);
    let t = Instant::now();
    let got = area.bytes();
    for i in EDGES.into_iter().chain((1..1000).map(|k| k * (SIZE / 1000) + k)) {
        assert_eq!(got[i], byte(other, i), "process {me}: byte {i} of process {other}'s");
    }
    let expected = u64::from_le_bytes(their_sum.bytes().try_into().expect("8 bytes"));
    assert_eq!(checksum(got), expected, "process {me}: the checksum of process {other}'s {SIZE} bytes");
    let checked = t.elapsed();
    bsp.pop_reg_raw(area.ptr)?;
    bsp.pop_reg_raw(their_sum.ptr)?;
    bsp.sync()?;
    Ok(format!(
        "{SIZE} bytes each way over {}: prepared in {:.2} s, hpput and sync {:.2} s, checked in {:.2} s",
        over.as_str(),
        prepared.as_secs_f64(),
        moved.as_secs_f64(),
        checked.as_secs_f64()
    ))
}

#[test]
fn hpput_of_more_than_2_gib_each_way_over_shared_memory_and_udp() {
    const TEST: &str = "hpput_of_more_than_2_gib_each_way_over_shared_memory_and_udp";
    if is_rank() {
        let over = match std::env::var("BULKWIRE_SHM").as_deref() {
            Ok("0") => Transport::Udp,
            _ => Transport::Shm,
        };
        let mut bsp = Bsp::begin().unwrap();
        let pid = bsp.pid();
        match exchange(&mut bsp, over) {
            Ok(what) => {
                bsp.end().unwrap();
                println!("ok pid {pid}: {what}");
            }
            Err(e) => bsp.fail(&e),
        }
        return;
    }
    match available_memory() {
        Some(m) if m < NEEDED => {
            eprintln!("skipped: {} GiB of memory available, {} GiB needed", m >> 30, NEEDED >> 30);
            return;
        }
        _ => {}
    }
    for (over, shm) in [("shm", "1"), ("udp", "0")] {
        let start = Instant::now();
        let out = launch(2, TEST, &[("BULKWIRE_SHM", shm)]);
        let (all, took) = (text(&out), start.elapsed());
        assert!(out.status.success(), "over {over}, after {took:?}:\n{all}");
        for pid in 0..2 {
            assert!(all.contains(&format!("ok pid {pid}: {SIZE} bytes each way over {over}")), "{over}:\n{all}");
        }
        assert!(!all.contains("stopped responding"), "{all}");
        eprintln!("{over}: the job took {:.1} s", took.as_secs_f64());
        for line in all.lines().filter_map(|l| l.find("ok pid").map(|at| &l[at..])) {
            eprintln!("  {line}");
        }
        assert!(took < Duration::from_secs(300), "over {over}: {took:?}");
    }
}
