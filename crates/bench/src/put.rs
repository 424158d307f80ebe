//! `bulkwire bench put`: BSP put bandwidth to a neighbour. Each of p
//! processes (2 by default) registers a destination area and puts `size`
//! bytes into its right neighbour's ((pid + 1) mod p), then syncs; the time
//! runs from before the puts to the end of the sync, and MB/s is `size`
//! over the median time (process 0's; the sync is a barrier). Two
//! variants: `bsp_put` (its source copied when called) and `bsp_hpput`
//! (read at the sync); and a third, the same bytes the other way round:
//! each process gets its left neighbour's source with `bsp_get`
//! (served at the sync). bulkwire runs over its shared memory or UDP
//! (`--transport`, a job each); Open MPI beside it, where installed, makes
//! the same ring with `MPI_Isend`/`MPI_Irecv` and `MPI_Waitall` over shared
//! memory and TCP (`scripts/ompi/bench.c`, `ring`).
//!
//! Every repetition is checked at its receiver: the first and last 8 bytes
//! carry the sender and the repetition, and sampled positions between
//! carry a pattern of the sender's; after the last repetition of each
//! variant every byte is compared. A wrong byte stops the job with an
//! error naming it, rather than giving a figure.

use bulkwire_bsp::{Bsp, BspError};
use serde::{Deserialize, Serialize};

use crate::mpi::MpiTransport;
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};
use crate::{mb_per_s, median_us, mib, sizes_of};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Processes (each puts to its right neighbour).
    #[arg(short = 'n', long = "np", default_value_t = 2)]
    pub ranks: u32,
    /// Bytes each process puts, one size after another.
    #[arg(long, value_delimiter = ',', default_values_t = [64 << 20, 512 << 20])]
    pub sizes: Vec<usize>,
    /// Timed repetitions per size and variant (fewer for large sizes: at
    /// most 2 GiB put per size and variant, and at least 3), after one to
    /// warm up.
    #[arg(long, default_value_t = 10)]
    pub repetitions: u32,
    /// Leave out the Open MPI reference (the same ring with
    /// MPI_Isend/MPI_Irecv over shared memory and TCP).
    #[arg(long)]
    pub no_mpi: bool,
    /// Which of bulkwire's variants to run (all by default): one alone
    /// shows its own peak memory to a tool that times the command.
    #[arg(long, value_delimiter = ',', default_values_t = [Variant::Put, Variant::HpPut, Variant::Get])]
    pub variants: Vec<Variant>,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
}

const BENCH: &str = "put";

/// Bytes each process puts per size and variant, over the timed
/// repetitions, beyond which there are fewer (`scripts/ompi/bench.c`'s
/// `RING_BUDGET`).
const BUDGET: usize = 2 << 30;
/// The fewest timed repetitions the budget leaves.
const LEAST: usize = 3;

/// Timed repetitions of `size` bytes when `asked` for.
fn repetitions(asked: u32, size: usize) -> usize {
    (asked.max(1) as usize).min((BUDGET / size.max(1)).max(LEAST))
}

/// The two ways to put, and the get of the same bytes the other way
/// round (each process gets its left neighbour's source).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Variant {
    Put,
    #[value(name = "hpput")]
    HpPut,
    Get,
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Put => "put",
            Variant::HpPut => "hpput",
            Variant::Get => "get",
        }
    }
}

/// Positions sampled between the stamps in every repetition.
const SAMPLES: usize = 61;

/// What `sender` puts at byte `i` outside the stamps: a pattern of 8-byte
/// words that differs by position and sender, so that bytes landing at
/// the wrong offset or from the wrong process are seen.
fn pattern_word(sender: u32, word: u64) -> u64 {
    mix(word ^ u64::from(sender) << 48)
}

/// SplitMix64's finaliser: every bit of `z` moves every byte.
fn mix(z: u64) -> u64 {
    let z = (z ^ z >> 30).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ z >> 27).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ z >> 31
}

fn pattern_byte(sender: u32, i: usize) -> u8 {
    pattern_word(sender, (i / 8) as u64).to_le_bytes()[i % 8]
}

/// Fills `buf` with `sender`'s pattern.
fn fill(buf: &mut [u8], sender: u32) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let bytes = pattern_word(sender, w as u64).to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// The 8 bytes that open and close the data of one repetition: the
/// repetition first (a stamp cut short by a small size keeps it), then the
/// variant and the sender.
fn stamp(sender: u32, variant: Variant, repetition: usize) -> [u8; 8] {
    let r = repetition as u64;
    let v = (r & 0xFFFF) | (variant as u64) << 16 | (u64::from(sender) & 0xFFFF) << 24 | (r >> 16 & 0xFFFF) << 40;
    (v | 0xB5 << 56).to_le_bytes()
}

/// How many bytes each stamp covers in `size` bytes.
fn stamp_len(size: usize) -> usize {
    8.min(size)
}

/// Writes `stamp` over the first and last bytes of `buf` (the last win
/// where they overlap).
fn put_stamps(buf: &mut [u8], stamp: &[u8; 8]) {
    let (n, len) = (stamp_len(buf.len()), buf.len());
    buf[..n].copy_from_slice(&stamp[..n]);
    buf[len - n..].copy_from_slice(&stamp[..n]);
}

/// The byte `sender` put at `i` of `size` with `stamp`.
fn expected(sender: u32, size: usize, stamp: &[u8; 8], i: usize) -> u8 {
    let n = stamp_len(size);
    if i >= size - n {
        stamp[i - (size - n)]
    } else if i < n {
        stamp[i]
    } else {
        pattern_byte(sender, i)
    }
}

/// The positions checked in every repetition: the stamps and [`SAMPLES`]
/// spread between them.
fn checked(size: usize) -> impl Iterator<Item = usize> {
    let n = stamp_len(size);
    (0..n).chain(size - n..size).chain((1..=SAMPLES).map(move |k| k * (size - 1) / (SAMPLES + 1)))
}

/// Whether `got` holds what `sender` put with `stamp`: every byte where
/// `all`, else the positions of [`checked`]. The first wrong byte, as an
/// error.
fn verify(got: &[u8], sender: u32, stamp: &[u8; 8], all: bool) -> Result<(), String> {
    let size = got.len();
    let wrong = |i: usize| {
        let want = expected(sender, size, stamp, i);
        (got[i] != want).then(|| format!("byte {i} is {:#04x}, expected {want:#04x}", got[i]))
    };
    if !all {
        return match checked(size).find_map(wrong) {
            Some(why) => Err(why),
            None => Ok(()),
        };
    }
    // Word by word where the pattern lies, byte by byte at the stamps.
    let n = stamp_len(size);
    if let Some(why) = (0..n).chain(size - n..size).find_map(wrong) {
        return Err(why);
    }
    let first = n.div_ceil(8);
    let last = (size - n) / 8;
    for w in first..last {
        let at = w * 8;
        if got[at..at + 8] != pattern_word(sender, w as u64).to_le_bytes() {
            return Err((at..at + 8).find_map(wrong).expect("a byte of the word differs"));
        }
    }
    match (n..size - n).filter(|&i| i < first * 8 || i >= last * 8).find_map(wrong) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A destination area registered by address (as `bsp_push_reg` does):
/// the sync writes it through the pointer it was registered with, and this
/// process reads and writes it between syncs through the same pointer.
struct Area {
    ptr: *mut u8,
    len: usize,
}

impl Area {
    fn new(len: usize) -> Area {
        let bytes: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        Area { ptr: Box::into_raw(bytes).cast::<u8>(), len }
    }

    fn address(&self) -> *const u8 {
        self.ptr
    }

    /// The area, between syncs.
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `len` bytes until drop; the sync that writes
        // them has ended, and the borrow of `self` keeps this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` come from the box made in `new`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// Rows of table `put`: per size, `bsp_put` and `bsp_hpput`, timed on
/// process 0.
pub fn rank(args: &Args) -> Result<Option<Report>, BspError> {
    let mut bsp = Bsp::begin()?;
    // An error stops the job, saying what it was, before the Bsp leaves.
    let rows = match measure(&mut bsp, args) {
        Ok(rows) => rows,
        Err(e) => bsp.fail(&e),
    };
    let notes = transport::notes(&rows);
    let report = (bsp.pid() == 0).then_some(Report { rows, notes });
    bsp.end()?;
    Ok(report)
}

fn measure(bsp: &mut Bsp, args: &Args) -> Result<Vec<Row>, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    // Rows name the transport process 0 reaches its neighbours by.
    let over = transport::reached(bsp.runtime(), [right, left].into_iter().filter(|&q| q != me));
    let requested = args.transport.requested().as_str();
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let mut inbox = Area::new(size);
        let dst = inbox.address();
        // SAFETY: the area lives until after the sync that ends its
        // registration, and is touched only between syncs.
        unsafe { bsp.push_reg_raw(dst, size)? };
        let mut src = vec![0u8; size];
        fill(&mut src, me);
        // SAFETY: `src` lives until after the sync that ends its
        // registration; gets read it at the syncs, between which it is
        // written.
        unsafe { bsp.push_reg_raw(src.as_ptr(), size)? };
        bsp.sync()?;
        let reps = repetitions(args.repetitions, size);
        for &variant in &args.variants {
            let mut times = Vec::with_capacity(reps);
            // One repetition to warm up: the first grows the buffers.
            for r in 0..=reps {
                put_stamps(&mut src, &stamp(me, variant, r));
                // What came last time must not pass for this time's.
                let area = inbox.bytes_mut();
                for i in checked(size) {
                    area[i] = !expected(left, size, &stamp(left, variant, r), i);
                }
                // Every process starts together.
                bsp.sync()?;
                let t = bsp.time();
                // SAFETY: `src` holds `size` bytes, and is neither dropped
                // nor written until the sync below has ended (hpput reads it
                // then, and so does the left neighbour's get); `dst` is
                // registered with `size` bytes and read only after it.
                unsafe {
                    match variant {
                        Variant::Put => bsp.put_raw(right, src.as_ptr(), dst, 0, size)?,
                        Variant::HpPut => bsp.hpput_raw(right, src.as_ptr(), dst, 0, size)?,
                        Variant::Get => bsp.get_raw(left, src.as_ptr(), 0, dst as *mut u8, size)?,
                    }
                }
                bsp.sync()?;
                let seconds = bsp.time() - t;
                if r > 0 {
                    times.push(seconds);
                }
                if let Err(why) = verify(inbox.bytes_mut(), left, &stamp(left, variant, r), r == reps) {
                    bsp.abort(&format!(
                        "bench put: the {size} bytes from process {left} by bsp_{} (repetition {r}) arrived \
                         wrong: {why}",
                        variant.name()
                    ));
                }
            }
            let row = Row::new(BENCH, "bulkwire", format!("{over}, {}", variant.name()), p);
            rows.push(timed(row, size, times, requested));
        }
        rows.push(one_copy(bsp, &src, reps, p, requested)?);
        bsp.pop_reg_raw(src.as_ptr())?;
        bsp.pop_reg_raw(dst)?;
        bsp.sync()?;
        drop(inbox);
    }
    Ok(rows)
}

/// The reference of one copy: every process copies `src` into a buffer of
/// its own at once (sharing the memory's bandwidth as in the ring), the
/// buffer's pages already made, timed on process 0 from a sync to the end
/// of its copy; median over `reps` after one to warm up. `bsp_put` costs
/// two such copies (the call's, the landing's), `bsp_hpput` and Open MPI's
/// single-copy shared memory one.
fn one_copy(bsp: &mut Bsp, src: &[u8], reps: usize, p: u32, requested: &str) -> Result<Row, BspError> {
    let mut kept = vec![0u8; src.len()];
    let mut times = Vec::with_capacity(reps);
    for r in 0..=reps {
        bsp.sync()?;
        let t = bsp.time();
        kept.copy_from_slice(src);
        std::hint::black_box(&mut kept);
        if r > 0 {
            times.push(bsp.time() - t);
        }
    }
    if kept != src {
        return Err(bsp.error(bulkwire_bsp::Call::Sync, bulkwire_bsp::Reason::Invalid("the copy differs".into())));
    }
    Ok(timed(Row::new(BENCH, "memory", "one copy", p), src.len(), times, requested))
}

/// `row` for `size` bytes moved in each of `times` (seconds): MB/s of the
/// median, the median and the least, how many, and the transport the job
/// asked for.
fn timed(row: Row, size: usize, times: Vec<f64>, requested: &str) -> Row {
    let reps = times.len();
    let min_us = times.iter().copied().fold(f64::INFINITY, f64::min) * 1e6;
    let median = median_us(times);
    row.size(size)
        .with("mb_per_s", mb_per_s(size as u64, median / 1e6))
        .with("median_us", median)
        .with("min_us", min_us)
        .with("repetitions_count", reps)
        .with(REQUESTED, requested)
}

/// The Open MPI reference: the same ring of the same sizes.
pub(crate) fn mpi_args(args: &Args) -> Vec<String> {
    let sizes: Vec<String> = args.sizes.iter().map(usize::to_string).collect();
    let iterations = args.repetitions.max(1).to_string();
    ["ring", "--iterations", &iterations, "--sizes", &sizes.join(",")].map(String::from).to_vec()
}

/// `--sizes` of at least one byte each.
pub(crate) fn check(args: &Args) -> Result<(), String> {
    if args.ranks < 2 {
        return Err("bench put needs at least two processes (each puts to its neighbour)".into());
    }
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        return Err("bench put: every size must be at least 1 byte".into());
    }
    Ok(())
}

fn size_label(size: u64) -> String {
    if size >= 1 << 20 {
        mib(size as usize)
    } else {
        format!("{size} B")
    }
}

pub(crate) fn table(report: &Report) -> String {
    let rows: Vec<&Row> = report.table(BENCH).collect();
    let p = rows.first().map_or(0, |r| r.procs);
    let mut o = format!(
        "# BSP put to the right neighbour (get: from the left one), {p} processes: MB/s (10^6 B/s) of one \
         process's bytes over the time from before the puts to the end of the sync, median (process 0)\n"
    );
    o.push_str(&transport::legend(report, BENCH));
    if rows.iter().any(|r| r.source == "mpi") {
        o.push_str(
            "# open mpi: the same ring with MPI_Isend/MPI_Irecv and MPI_Waitall, median of the slowest process's \
             time, each started by a barrier; x mpi: bulkwire over Open MPI on the transport of the same kind \
             (shm beside shm, udp beside tcp)\n",
        );
    }
    if rows.iter().any(|r| r.source == "memory") {
        o.push_str(
            "# copy ms: one memcpy of the same bytes by every process at once, in the same job (bsp_put makes two, \
             the call's and the landing's; bsp_hpput one)\n",
        );
    }
    o.push_str(&format!(
        "{:>10} {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}\n",
        "size",
        "transport",
        "put MB/s",
        "hpput MB/s",
        "get MB/s",
        "put ms",
        "hpput ms",
        "copy ms",
        "mpi",
        "x mpi",
        "reps"
    ));
    let jobs = transport::jobs(&rows);
    for size in sizes_of(rows.iter().copied()) {
        let at = |r: &&&Row| r.size_bytes == Some(size);
        for job in &jobs {
            let variant = |name: &str| job.iter().filter(at).find(|r| r.what.ends_with(&format!(", {name}"))).copied();
            let (put, hpput, get) = (variant("put"), variant("hpput"), variant("get"));
            let copy = rows
                .iter()
                .filter(at)
                .find(|r| r.source == "memory" && r.text(REQUESTED) == job[0].text(REQUESTED))
                .copied();
            // Open MPI beside the job: over shared memory beside the job
            // that asked for it, over TCP beside the one over UDP.
            let mpi_over = match job[0].text(REQUESTED) {
                Some("udp") => MpiTransport::Tcp,
                _ => MpiTransport::Shm,
            };
            let mpi = rows
                .iter()
                .filter(at)
                .find(|r| r.source == "mpi" && transport::of_row(r) == mpi_over.as_str())
                .and_then(|r| r.num("mb_per_s"));
            let ms = |r: Option<&Row>| r.and_then(|r| r.num("median_us")).map(|us| us / 1e3);
            let ratio = |r: Option<&Row>| r.and_then(|r| r.num("mb_per_s")).zip(mpi).map(|(b, m)| b / m);
            let ratios = match (ratio(put), ratio(hpput)) {
                (Some(a), Some(b)) => format!("{a:.2}/{b:.2}"),
                _ => "-".into(),
            };
            let mpi_cell = match mpi {
                Some(m) => format!("{m:.0} {}", mpi_over.as_str()),
                None => "-".into(),
            };
            o.push_str(&format!(
                "{:>10} {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}\n",
                size_label(size),
                format!("bulkwire {}", transport::label(job[0])),
                opt(put.and_then(|r| r.num("mb_per_s")), 1),
                opt(hpput.and_then(|r| r.num("mb_per_s")), 1),
                opt(get.and_then(|r| r.num("mb_per_s")), 1),
                opt(ms(put), 2),
                opt(ms(hpput), 2),
                opt(ms(copy), 2),
                mpi_cell,
                ratios,
                put.and_then(|r| r.num("repetitions_count")).map_or("-".into(), |n| format!("{n:.0}")),
            ));
        }
        // Open MPI's rows without a bulkwire job beside them.
        for r in rows.iter().filter(at).filter(|r| r.source == "mpi") {
            let beside = jobs.iter().any(|job| match job[0].text(REQUESTED) {
                Some("udp") => transport::of_row(r) == "tcp",
                _ => transport::of_row(r) == "shm",
            });
            if !beside {
                o.push_str(&format!(
                    "{:>10} {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}\n",
                    size_label(size),
                    format!("open mpi {}", transport::of_row(r)),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    opt(r.num("mb_per_s"), 0),
                    "-",
                    r.num("repetitions_count").map_or("-".into(), |n| format!("{n:.0}")),
                ));
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_sizes_repeat_less() {
        assert_eq!(repetitions(10, 64 << 20), 10);
        assert_eq!(repetitions(10, 512 << 20), 4);
        assert_eq!(repetitions(10, 4 << 30), LEAST);
        assert_eq!(repetitions(2, 4 << 30), 2);
        assert_eq!(repetitions(0, 1), 1);
    }

    #[test]
    fn a_transfer_checks_out_and_a_wrong_byte_is_named() {
        for size in [1, 5, 8, 9, 15, 16, 17, 1000, 4099] {
            let mut buf = vec![0u8; size];
            fill(&mut buf, 3);
            let s = stamp(3, Variant::HpPut, 7);
            put_stamps(&mut buf, &s);
            assert_eq!(verify(&buf, 3, &s, true), Ok(()), "{size}");
            assert_eq!(verify(&buf, 3, &s, false), Ok(()), "{size}");
            // Another repetition's, or another sender's, data does not pass.
            assert!(verify(&buf, 3, &stamp(3, Variant::HpPut, 6), false).is_err(), "{size}");
            if size > 2 {
                assert!(verify(&buf, 3, &stamp(3, Variant::Put, 7), false).is_err(), "{size}");
            }
            if size > 16 {
                assert!(verify(&buf, 2, &s, true).is_err(), "{size}");
            }
            // A byte in the middle is wrong: the whole check names it.
            let mid = size / 2;
            buf[mid] ^= 0x40;
            let err = verify(&buf, 3, &s, true).unwrap_err();
            assert!(err.starts_with(&format!("byte {mid} is ")), "{size}: {err}");
        }
    }

    #[test]
    fn every_byte_of_the_pattern_is_checked() {
        let size = 100;
        let mut buf = vec![0u8; size];
        fill(&mut buf, 1);
        let s = stamp(1, Variant::Put, 0);
        put_stamps(&mut buf, &s);
        for i in 0..size {
            let mut bad = buf.clone();
            bad[i] = !bad[i];
            assert!(verify(&bad, 1, &s, true).unwrap_err().starts_with(&format!("byte {i} ")), "{i}");
        }
    }
}
