//! `bulkwire bench solver`: seed 003's asynchronous iterative solver. A
//! system `A x + b = 0` of `n` equations, generated from a seed with a
//! known answer (`x*` drawn first, `b = −A x*`; `A` dense with positive
//! entries, its diagonal `dominance` times the rest of its row, so that
//! Jacobi's iteration contracts by about `1/dominance` a sweep), is split
//! by rows among the processes. Each process sweeps its rows again and
//! again:
//!
//! - `warp` and `no-control`: asynchronously, over the shared memory. Each
//!   sweep reads all of `x` from the local replica, writes its own rows
//!   back with slow writes and its largest change into `status`; nobody
//!   waits for anybody. A process that sees every change below the
//!   tolerance enters a fence; after it, every process checks its rows
//!   against the now-equal replicas, and the job stops once every check
//!   holds (else the sweeps go on). `warp` flushes the writes under Warp
//!   control, `no-control` at a fixed threshold (the initial one of `warp`).
//! - `bsp`: synchronously, one superstep per sweep: each process puts its
//!   rows and its change to every other, and stops when the largest change
//!   is below the tolerance.
//!
//! Every variant's answer is checked against `x*`. Rank 0 reports per
//! variant: seconds to converge, sweeps (the most of any process), bytes
//! of data sent and packets resent (`drops`: lost in the network) by all
//! processes.

use std::time::Instant;

use bulkwire_bsp::Bsp;
use bulkwire_comm::{CommError, Source, Tag, World};
use bulkwire_dsm::{Dsm, DsmSettings, Flush, Semantics};
use serde::{Deserialize, Serialize};

use crate::rows::{Report, Row};

pub const BENCH: &str = "solver";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    Warp,
    NoControl,
    Bsp,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Warp => "warp",
            Variant::NoControl => "no-control",
            Variant::Bsp => "bsp",
        }
    }
}

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Processes.
    #[arg(short = 'n', long = "np", default_value_t = 5)]
    pub ranks: u32,
    /// Equations (the seed's system has 1000).
    #[arg(long, default_value_t = 1000)]
    pub size: usize,
    /// The tolerance on the largest change of a sweep.
    #[arg(long, default_value_t = 1e-9)]
    pub tolerance: f64,
    /// Each diagonal entry over the sum of the rest of its row: Jacobi's
    /// iteration contracts by about its inverse per sweep.
    #[arg(long, default_value_t = 1.1)]
    pub dominance: f64,
    /// Seed of the system.
    #[arg(long, default_value_t = 3)]
    pub seed: u64,
    /// The variants, in the order they run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Variant::Warp, Variant::NoControl, Variant::Bsp])]
    pub variants: Vec<Variant>,
    /// The buffer threshold of `no-control`, and the starting `Λ·b` of
    /// `warp` (writes; b = 20).
    #[arg(long, default_value_t = 20)]
    pub threshold: usize,
    /// The offered load of traffic around the job, to label the rows (the
    /// benchmark does not make it; `lab solver` does).
    #[arg(long)]
    #[serde(default)]
    pub load: Option<f64>,
    /// Leave out the Open MPI version (the same system, synchronously, by
    /// MPI_Allgatherv and MPI_Allreduce over TCP, run around the job).
    #[arg(long)]
    #[serde(default)]
    pub no_mpi: bool,
}

impl Args {
    /// `scripts/ompi/bench.c`'s arguments for the same system.
    pub fn mpi_args(&self) -> Vec<String> {
        let mut args = vec![
            "solver".to_string(),
            "--size".into(),
            self.size.to_string(),
            "--tolerance".into(),
            self.tolerance.to_string(),
            "--dominance".into(),
            self.dominance.to_string(),
            "--seed".into(),
            self.seed.to_string(),
        ];
        if let Some(load) = self.load {
            args.extend(["--load".into(), load.to_string()]);
        }
        args
    }
}

/// SplitMix64: the system's numbers, from a generator that the Open MPI
/// version (`scripts/ompi/bench.c`, `solver`) repeats in C, so that both
/// solve the same system.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The rows `lo..hi` of `A` and `b`, and `x*`: each row from its own
/// stream of the seed, so that any process makes any row alone.
pub struct System {
    pub n: usize,
    pub lo: usize,
    pub hi: usize,
    /// Row-major, `(hi − lo) × n`.
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub answer: Vec<f64>,
}

impl System {
    pub fn rows(seed: u64, n: usize, lo: usize, hi: usize, dominance: f64) -> System {
        let mut answer_rng = SplitMix(seed);
        let answer: Vec<f64> = (0..n).map(|_| 2.0 * answer_rng.unit() - 1.0).collect();
        let mut a = vec![0.0; (hi - lo) * n];
        let mut b = vec![0.0; hi - lo];
        for i in lo..hi {
            let mut rng = SplitMix(seed ^ ((i as u64 + 1) << 20));
            let row = &mut a[(i - lo) * n..(i - lo + 1) * n];
            let mut off = 0.0;
            for (j, v) in row.iter_mut().enumerate() {
                if j != i {
                    *v = rng.unit();
                    off += v.abs();
                }
            }
            row[i] = dominance * off;
            b[i - lo] = -row.iter().zip(&answer).fold(0.0, |acc, (x, y)| acc + x * y);
        }
        System { n, lo, hi, a, b, answer }
    }

    /// One Jacobi sweep of rows `lo..hi` from `x`: the new values, and the
    /// largest change.
    pub fn sweep(&self, x: &[f64], out: &mut [f64]) -> f64 {
        let mut change: f64 = 0.0;
        for i in self.lo..self.hi {
            let row = &self.a[(i - self.lo) * self.n..(i - self.lo + 1) * self.n];
            let dot: f64 = row.iter().zip(x).map(|(a, x)| a * x).sum::<f64>() - row[i] * x[i];
            let v = -(self.b[i - self.lo] + dot) / row[i];
            change = change.max((v - x[i]).abs());
            out[i - self.lo] = v;
        }
        change
    }

    /// The largest error of `x`'s rows `lo..hi` against the answer.
    pub fn error(&self, x: &[f64]) -> f64 {
        (self.lo..self.hi).map(|i| (x[i] - self.answer[i]).abs()).fold(0.0, f64::max)
    }
}

/// Rows of process `p` of `procs`.
pub fn block(n: usize, procs: usize, p: usize) -> (usize, usize) {
    (n * p / procs, n * (p + 1) / procs)
}

/// What a variant measured at one process.
struct Outcome {
    seconds: f64,
    sweeps: u64,
    error: f64,
    /// The shared memory's batches sent, and its threshold (writes) at the end.
    batches: u64,
    threshold: f64,
}

const RESULT: i32 = 901;

pub fn rank(world: &'static World, args: &Args) -> Result<Vec<Row>, CommError> {
    let (me, procs) = (world.rank() as usize, world.size() as usize);
    let (lo, hi) = block(args.size, procs, me);
    if args.dominance <= 1.0 || !args.dominance.is_finite() {
        world.abort(&format!(
            "solver: --dominance {} must be above 1 (else Jacobi's iteration need not converge)",
            args.dominance
        ));
        return Ok(Vec::new());
    }
    let system = System::rows(args.seed, args.size, lo, hi, args.dominance);
    let mut rows = Vec::new();
    for &variant in &args.variants {
        world.barrier()?;
        let before = world.runtime().stats().channels;
        let shm_before = world.runtime().shm_stats().bytes_sent;
        let outcome = match variant {
            Variant::Warp => dsm_solve(world, &system, args, Flush::warp(args.threshold as f64 / 20.0)),
            Variant::NoControl => dsm_solve(world, &system, args, Flush::Fixed(args.threshold)),
            Variant::Bsp => bsp_solve(world, &system, args),
        }
        .map_err(|e| CommError::Runtime(bulkwire_runtime::RuntimeError::Stopped(e)))?;
        world.barrier()?;
        let after = world.runtime().stats().channels;
        let shm_bytes = world.runtime().shm_stats().bytes_sent - shm_before;
        let mine = [
            outcome.seconds,
            outcome.sweeps as f64,
            (after.bytes_sent - before.bytes_sent + shm_bytes) as f64,
            (after.retransmissions - before.retransmissions) as f64,
            outcome.error,
            outcome.batches as f64,
            outcome.threshold,
        ];
        let mut all = vec![mine];
        if me == 0 {
            for from in 1..procs as u32 {
                let (_, data) = world.recv(Source::Rank(from), Tag::Is(RESULT))?;
                all.push(std::array::from_fn(|k| f64::from_le_bytes(data[k * 8..k * 8 + 8].try_into().expect("8"))));
            }
        } else {
            let data: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
            world.send(0, RESULT, &data)?;
        }
        if me == 0 {
            let max = |k: usize| all.iter().map(|v| v[k]).fold(0.0, f64::max);
            let sum = |k: usize| all.iter().map(|v| v[k]).sum::<f64>();
            let error = max(4);
            let mean = |k: usize| sum(k) / all.len() as f64;
            if error > 100.0 * args.tolerance {
                world.abort(&format!("solver {}: the answer is off by {error:e}", variant.name()));
                return Err(CommError::Runtime(bulkwire_runtime::RuntimeError::Stopped("wrong answer".into())));
            }
            let mut row = Row::new(BENCH, "bulkwire", variant.name(), procs as u32)
                .size(args.size)
                .with("seconds", max(0))
                .with("iterations", max(1))
                .with("bytes", sum(2))
                .with("drops", sum(3))
                .with("error", error);
            if variant != Variant::Bsp {
                row = row.with("batches", sum(5)).with("threshold_writes", mean(6));
            }
            if let Some(load) = args.load {
                row = row.load(load);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The asynchronous solver over the shared memory.
fn dsm_solve(world: &World, s: &System, args: &Args, flush: Flush) -> Result<Outcome, String> {
    let (me, procs) = (world.rank() as usize, world.size() as usize);
    let settings = DsmSettings { flush, ..DsmSettings::from_env().map_err(|e| e.to_string())? };
    let dsm = Dsm::with_settings(world.runtime(), settings).map_err(|e| e.to_string())?;
    let e = |e: bulkwire_dsm::DsmError| e.to_string();
    let x = dsm.map::<f64>("x", s.n).map_err(e)?;
    let status = dsm.map::<f64>("status", procs).map_err(e)?;
    let check = dsm.map::<f64>("check", procs).map_err(e)?;
    status.write(me, f64::INFINITY, Semantics::Slow).map_err(e)?;
    dsm.fence().map_err(e)?;
    let start = Instant::now();
    let mut local = vec![0.0; s.n];
    let mut mine = vec![0.0; s.hi - s.lo];
    let mut changes = vec![0.0; procs];
    let mut sweeps = 0u64;
    loop {
        // The asynchronous phase: sweep until every change seen is small.
        loop {
            x.read_into(0, &mut local).map_err(e)?;
            let change = s.sweep(&local, &mut mine);
            sweeps += 1;
            x.write_slice(s.lo, &mine, Semantics::Slow).map_err(e)?;
            status.write(me, change, Semantics::Slow).map_err(e)?;
            status.read_into(0, &mut changes).map_err(e)?;
            if changes.iter().all(|&c| c < args.tolerance) {
                break;
            }
        }
        // Every replica equal: check this process's rows.
        dsm.fence().map_err(e)?;
        x.read_into(0, &mut local).map_err(e)?;
        let residual = s.sweep(&local, &mut mine);
        check.write(me, residual, Semantics::Slow).map_err(e)?;
        dsm.fence().map_err(e)?;
        check.read_into(0, &mut changes).map_err(e)?;
        if changes.iter().all(|&c| c < args.tolerance) {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    x.read_into(0, &mut local).map_err(e)?;
    let stats = dsm.stats();
    Ok(Outcome { seconds, sweeps, error: s.error(&local), batches: stats.batches_sent, threshold: stats.threshold })
}

/// The synchronous solver in BSP: one superstep per sweep.
fn bsp_solve(world: &'static World, s: &System, args: &Args) -> Result<Outcome, String> {
    let (me, procs) = (world.rank() as usize, world.size() as usize);
    let e = |e: bulkwire_bsp::BspError| e.to_string();
    let mut bsp = Bsp::begin_on(world.runtime()).map_err(e)?;
    let x = bsp.register::<f64>(s.n).map_err(e)?;
    let changes = bsp.register::<f64>(procs).map_err(e)?;
    bsp.sync().map_err(e)?;
    let start = Instant::now();
    let mut mine = vec![0.0; s.hi - s.lo];
    let mut sweeps = 0u64;
    loop {
        let change = s.sweep(bsp.area(&x), &mut mine);
        sweeps += 1;
        for q in 0..procs as u32 {
            bsp.put(q, &mine, &x, s.lo).map_err(e)?;
            bsp.put(q, &[change], &changes, me).map_err(e)?;
        }
        bsp.sync().map_err(e)?;
        if bsp.area(&changes).iter().all(|&c| c < args.tolerance) {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let error = s.error(bsp.area(&x));
    bsp.end().map_err(e)?;
    Ok(Outcome { seconds, sweeps, error, batches: 0, threshold: 0.0 })
}

pub fn table(report: &Report) -> String {
    let mut o = String::from(
        "# solver: A x + b = 0 by Jacobi's iteration, asynchronous over the shared memory (warp, no-control) \
         or in BSP supersteps\n",
    );
    o.push_str(&format!(
        "{:>12} {:>6} {:>7} {:>10} {:>8} {:>12} {:>10} {:>10}\n",
        "what", "procs", "load", "seconds", "sweeps", "MB", "drops", "error"
    ));
    for r in &report.rows {
        let num = |k: &str| r.num(k).unwrap_or(f64::NAN);
        o.push_str(&format!(
            "{:>12} {:>6} {:>7} {:>10.3} {:>8.0} {:>12.2} {:>10.0} {:>10.1e}\n",
            r.what,
            r.procs,
            r.num("load").map_or("-".into(), |l| format!("{l:.2}")),
            num("seconds"),
            num("iterations"),
            num("bytes") / 1e6,
            num("drops"),
            num("error"),
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_has_its_answer_and_jacobi_finds_it() {
        let n = 60;
        let s = System::rows(9, n, 0, n, 1.5);
        let mut x = vec![0.0; n];
        let mut next = vec![0.0; n];
        let mut sweeps = 0;
        while s.sweep(&x, &mut next) > 1e-12 {
            std::mem::swap(&mut x, &mut next);
            sweeps += 1;
            assert!(sweeps < 200, "Jacobi does not contract");
        }
        assert!(s.error(&next) < 1e-10, "{}", s.error(&next));
        // Any process makes any row alone.
        let part = System::rows(9, n, 20, 40, 1.5);
        assert_eq!(part.a[..n], s.a[20 * n..21 * n]);
        assert_eq!(part.b, s.b[20..40]);
    }

    #[test]
    fn blocks_cover_every_row_once() {
        for procs in 1..9 {
            let mut next = 0;
            for p in 0..procs {
                let (lo, hi) = block(1000, procs, p);
                assert_eq!(lo, next);
                next = hi;
            }
            assert_eq!(next, 1000);
        }
    }
}
