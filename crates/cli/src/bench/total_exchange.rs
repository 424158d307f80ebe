//! `bulkwire bench total-exchange`: every process puts `--size` bytes to
//! every other in one superstep (a p-relation of (p - 1) · size bytes), timed
//! for each destination order of the sync (seed 002 Table 1: latin square
//! against pid order), with pacing on and off, beside the cost of an empty
//! sync (the BSP l) in the same run, and, where streams go before the
//! barrier (on one host), once more with every byte after it; and, where
//! Open MPI is installed, the
//! same exchange with `MPI_Alltoall` over TCP and an empty `MPI_Barrier`
//! (see [`super::mpi`]).

use bulkwire_bsp::{parse_rate, Bsp, BspError, Order, Reason};
use serde::{Deserialize, Serialize};

use super::mpi::Reference;
use super::{mb_per_s, median_us, opt};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Processes.
    #[arg(short = 'n', long = "np", default_value_t = 8)]
    pub ranks: u32,
    /// Bytes each process puts to each other process.
    #[arg(long, default_value_t = 16 << 10)]
    pub size: usize,
    /// Timed exchanges per order (after a tenth as many, at least two, to
    /// warm up; the job first makes 1,000 empty syncs).
    #[arg(long, default_value_t = 30)]
    pub repetitions: u32,
    /// The link rate of every process (as tc writes it: 100mbit, 1gbit):
    /// with pacing on, each process then injects at its share of the
    /// receiving port. Without it (or BULKWIRE_BSP_RATE), pacing limits
    /// only the packets in flight.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Leave out the Open MPI reference (MPI_Alltoall and MPI_Barrier over TCP).
    #[arg(long)]
    pub no_mpi: bool,
    /// The Open MPI reference, measured by the launcher before the job.
    #[arg(skip)]
    #[serde(default)]
    pub mpi: Option<Reference>,
    /// Why there is no Open MPI reference, when it was wanted.
    #[arg(skip)]
    #[serde(default)]
    pub mpi_missing: Option<String>,
}

impl Args {
    /// Measures the Open MPI reference into these arguments, unless it was
    /// left out or the ranks run on other hosts (the reference runs here).
    pub fn measure_reference(&mut self, remote: bool) {
        if self.no_mpi {
            return;
        }
        if remote {
            self.mpi_missing = Some("the ranks run on other hosts; the Open MPI reference runs on this one".into());
            return;
        }
        match super::mpi::total_exchange(self.ranks, self.size, self.repetitions) {
            Ok(r) => self.mpi = Some(r),
            Err(why) => self.mpi_missing = Some(why),
        }
    }

    /// After the job (text output only): measures the Open MPI reference
    /// once more and prints it, so that a reader sees whether the
    /// machine's speed moved while the job ran (the reference above was
    /// measured before it).
    pub fn measure_reference_again(&self) {
        if self.json || self.mpi.is_none() {
            return;
        }
        match super::mpi::total_exchange(self.ranks, self.size, self.repetitions) {
            Ok(r) => println!(
                "# Open MPI again after the job (median / mean us): MPI_Barrier {:.1} / {:.1}, MPI_Alltoall {:.1} / {:.1}",
                r.barrier_us, r.barrier_mean_us, r.alltoall_us, r.alltoall_mean_us
            ),
            Err(why) => println!("# Open MPI again after the job: {why}"),
        }
    }
}

/// One configuration, timed on process 0 (the sync is a barrier, so every
/// process leaves it at about the same time).
#[derive(Debug, Serialize)]
struct Row {
    what: String,
    /// Who measured it: "bulkwire", or "open-mpi" for the reference.
    source: &'static str,
    order: Option<Order>,
    pacing: Option<bool>,
    /// Streams of at most this many bytes left before the barrier.
    eager: Option<usize>,
    median_us: f64,
    /// The mean over the repetitions, which ran back to back: the time per
    /// exchange of a program doing them in a row.
    mean_us: f64,
    min_us: Option<f64>,
    /// Bytes each process sent, per second of the median exchange.
    mb_per_s_per_process: Option<f64>,
    /// Retransmissions on process 0 during the timed exchanges.
    retransmissions: Option<u64>,
}

/// Empty syncs a job makes before its first timed row (see `rank`); as many
/// barriers open the Open MPI reference (`scripts/ompi/bench.c`).
const JOB_WARM_UP_SYNCS: usize = 1000;

pub fn rank(args: &Args) -> Result<(), BspError> {
    let mut bsp = Bsp::begin()?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    if args.rate.is_some() {
        bsp.set_rate(args.rate)?;
    }
    let size = args.size;
    let inbox = bsp.register::<u8>(size * p as usize)?;
    bsp.sync()?;
    let data = vec![me as u8 + 1; size];
    let mut rows = Vec::new();

    let reps = args.repetitions.max(1) as usize;
    let mut empty = Vec::new();
    // Each configuration warms up first: the first exchanges after a change
    // grow buffers and were slower than the rest.
    // The job's first syncs are slower, whatever they do: where 8
    // processes share 2 cores, empty syncs after 1,000 others took 105-158
    // us on average against 131-202 us as the job's first (five
    // alternating runs). The Open MPI reference warms up alike.
    for _ in 0..JOB_WARM_UP_SYNCS {
        bsp.sync()?;
    }
    let warm = (reps / 10).max(2);
    for _ in 0..reps + warm {
        let t = bsp.time();
        bsp.sync()?;
        empty.push(bsp.time() - t);
    }
    rows.push(row("empty sync (l)".into(), None, None, empty.split_off(warm), None, 0));

    let eager = bsp.eager();
    let mut configurations: Vec<(Order, bool, usize)> =
        [(Order::Latin, true), (Order::Pid, true), (Order::Random, true), (Order::Latin, false), (Order::Pid, false)]
            .into_iter()
            .map(|(order, pacing)| (order, pacing, eager))
            .collect();
    // Pacing to a link rate sends nothing early: the row would repeat the first.
    if eager > 0 && bsp.rate().is_none() {
        configurations.push((Order::Latin, true, 0));
    }
    for (order, pacing, eager_bytes) in configurations {
        bsp.set_order(order);
        bsp.set_pacing(pacing);
        bsp.set_eager(eager_bytes);
        bsp.area_mut(&inbox).fill(0);
        let mut times = Vec::new();
        let before = bsp.packet_stats().retransmissions;
        for _ in 0..reps + warm {
            let t = bsp.time();
            for k in 1..p {
                bsp.put((me + k) % p, &data, &inbox, me as usize * size)?;
            }
            bsp.sync()?;
            times.push(bsp.time() - t);
        }
        let retransmissions = bsp.packet_stats().retransmissions - before;
        let area = bsp.area(&inbox);
        if let Some(q) =
            (0..p).find(|&q| q != me && area[q as usize * size..][..size].iter().any(|&b| b != q as u8 + 1))
        {
            let reason = Reason::Invalid(format!("the bytes from process {q} did not arrive ({order})"));
            return Err(bsp.error(bulkwire_bsp::Call::Sync, reason));
        }
        let sent = (size * (p as usize - 1)) as u64;
        let what = format!(
            "total exchange, {order} order, pacing {}{}",
            if pacing { "on" } else { "off" },
            if eager_bytes == 0 && eager > 0 { ", none eager" } else { "" }
        );
        let mut r = row(what, Some(order), Some(pacing), times.split_off(warm), Some(sent), retransmissions);
        // What went early: nothing while pacing keeps to a link rate.
        r.eager = Some(if pacing && bsp.rate().is_some() { 0 } else { eager_bytes });
        rows.push(r);
    }
    bsp.set_eager(eager);

    if let Some(r) = &args.mpi {
        let sent = (size * (p as usize - 1)) as u64;
        rows.push(reference("MPI_Barrier, Open MPI over TCP".into(), r.barrier_us, r.barrier_mean_us, None));
        rows.push(reference("MPI_Alltoall, Open MPI over TCP".into(), r.alltoall_us, r.alltoall_mean_us, Some(sent)));
    }
    if me == 0 {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialise"));
        } else {
            let paced = match bsp.rate() {
                Some(r) => format!("; pacing keeps to {} Mbit/s links", r / 1e6),
                None => String::new(),
            };
            println!("total exchange: {p} processes, {size} bytes per pair, median of {reps} (process 0){paced}");
            println!(
                "{:<52} {:>12} {:>12} {:>12} {:>14} {:>8}",
                "", "median us", "mean us", "min us", "MB/s/process", "resent"
            );
            for r in &rows {
                println!(
                    "{:<52} {:>12.1} {:>12.1} {:>12} {:>14} {:>8}",
                    r.what,
                    r.median_us,
                    r.mean_us,
                    opt(r.min_us, 1),
                    opt(r.mb_per_s_per_process, 1),
                    r.retransmissions.map_or("-".into(), |n| n.to_string())
                );
            }
            if eager > 0 && bsp.rate().is_none() {
                println!(
                    "# streams of up to {eager} bytes to one destination leave before the barrier \
                     (BULKWIRE_BSP_EAGER, by default on one host), except in the row marked none eager"
                );
            }
            if args.mpi.is_some() {
                println!(
                    "# MPI rows: median of the slowest process's time, each operation started by a barrier; \
                     mean of as many back to back (scripts/ompi/bench.c)"
                );
            }
            if let Some(why) = &args.mpi_missing {
                println!("# no Open MPI reference: {why}");
            }
        }
    }
    bsp.end()
}

fn row(
    what: String,
    order: Option<Order>,
    pacing: Option<bool>,
    seconds: Vec<f64>,
    bytes: Option<u64>,
    retransmissions: u64,
) -> Row {
    let min_us = seconds.iter().copied().fold(f64::INFINITY, f64::min) * 1e6;
    let mean_us = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64 * 1e6;
    let median = median_us(seconds);
    Row {
        what,
        source: "bulkwire",
        order,
        pacing,
        eager: None,
        median_us: median,
        mean_us,
        min_us: Some(min_us),
        mb_per_s_per_process: bytes.map(|b| mb_per_s(b, median / 1e6)),
        retransmissions: Some(retransmissions),
    }
}

/// A row of the Open MPI reference (`bytes`: what each process sent).
fn reference(what: String, median_us: f64, mean_us: f64, bytes: Option<u64>) -> Row {
    Row {
        what,
        source: "open-mpi",
        order: None,
        pacing: None,
        eager: None,
        median_us,
        mean_us,
        min_us: None,
        mb_per_s_per_process: bytes.map(|b| mb_per_s(b, median_us / 1e6)),
        retransmissions: None,
    }
}
