//! `bulkwire bench total-exchange`: every process puts `--size` bytes to
//! every other in one superstep (a p-relation of (p - 1) · size bytes), timed
//! for each destination order of the sync (seed 002 Table 1: latin square
//! against pid order), with pacing on and off, beside the cost of an empty
//! sync (the BSP l) in the same run, and, where streams go before the
//! barrier (on one host), once more with every byte after it; over
//! bulkwire's shared memory or UDP (`--transport`, a job each); in a job
//! over UDP, the same exchange over raw UDP sockets between the same
//! processes, nothing acknowledged or resent (the floor of any exchange
//! over UDP, [`Sockets::udp_total_exchange`]); and, where Open MPI is installed, the same exchange with `MPI_Alltoall` and an
//! empty `MPI_Barrier` over shared memory and TCP (see [`crate::mpi`]),
//! measured before and after the jobs.

use bulkwire_bsp::{parse_rate, Bsp, BspError, Order, Reason};
use bulkwire_comm::World;
use bulkwire_runtime::Runtime;
use serde::{Deserialize, Serialize};

use crate::mpi::{MpiTransport, Program};
use crate::reference::Sockets;
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};
use crate::{mb_per_s, median_us};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
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
    /// Leave out the Open MPI reference (MPI_Alltoall and MPI_Barrier over
    /// shared memory and TCP).
    #[arg(long)]
    pub no_mpi: bool,
    /// Every process gets `--size` bytes from every other (bsp_get)
    /// instead of putting them: the requests go before the barrier, the
    /// replies after it.
    #[arg(long)]
    #[serde(default)]
    pub get: bool,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
}

impl Args {
    /// The Open MPI reference (MPI_Barrier and MPI_Alltoall over each
    /// transport of `--transport`), measured `when` ("before the job",
    /// "after the job") by the launching process, its ranks on `remote`'s
    /// hosts (else on this one), unless it was left out.
    pub fn open_mpi(&self, remote: Option<&crate::mpi::Hosts<'_>>, when: &str) -> Report {
        if self.no_mpi {
            return Report::default();
        }
        let mut report = Report::default();
        let args = [
            "alltoall",
            "--iterations",
            &self.repetitions.max(1).to_string(),
            "--max-size",
            &self.size.max(1).to_string(),
        ];
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let program = match Program::build() {
            Ok(program) => program,
            Err(why) => {
                report.notes.push(format!("no Open MPI reference ({when}): {why}"));
                return report;
            }
        };
        for over in self.transport.mpi(remote.is_some()) {
            match program.rows(self.ranks, remote, over, &args, BENCH, "median_us") {
                Ok(rows) => {
                    let sent = (self.size * (self.ranks as usize - 1)) as u64;
                    for mut row in rows {
                        if row.size_bytes != Some(self.size.max(1) as u64) {
                            report.notes.push(format!("no Open MPI reference ({when}): it measured another size"));
                            return report;
                        }
                        if row.what.ends_with("MPI_Alltoall") {
                            let median = row.num("median_us").unwrap_or(f64::NAN);
                            row.set("mb_per_s", mb_per_s(sent, median / 1e6));
                        }
                        row.set("measured", when);
                        report.rows.push(row);
                    }
                }
                Err(why) => {
                    report.notes.push(format!("no Open MPI reference over {} ({when}): {why}", over.describe()))
                }
            }
        }
        report
    }
}

const BENCH: &str = "total-exchange";

/// Empty syncs a job makes before its first timed row (see `rank`); as many
/// barriers open the Open MPI reference (`scripts/ompi/bench.c`).
const JOB_WARM_UP_SYNCS: usize = 1000;

/// Rows of table `total-exchange`, timed on process 0 (the sync is a
/// barrier, so every process leaves it at about the same time).
pub fn rank(args: &Args) -> Result<Option<Report>, String> {
    // comm and BSP share the runtime: the raw UDP reference learns its
    // peers' addresses through comm before the BSP section begins.
    let world: &'static World = Box::leak(Box::new(World::init().map_err(|e| e.to_string())?));
    let rt = world.runtime();
    let (me, p) = (world.rank(), world.size());
    if p != args.ranks {
        world.abort(&format!("this job of bench total-exchange needs {} processes", args.ranks));
        return Ok(None);
    }
    let over = transport::reached(rt, (0..p).filter(|&q| q != me));
    let requested = args.transport.requested().as_str();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    // Over UDP, its floor between the same processes, first; polling only
    // where every process has a core (where they share cores, a poller
    // keeps the core from the process whose bytes it waits for: 16 ms an
    // exchange of 8 processes on 2 cores, against 0.3 ms blocking).
    if over == "udp" {
        let mut sockets = Sockets::open(world, &[]).map_err(|e| e.to_string())?;
        let polls: &[bool] = if rt.shares_cores() { &[false] } else { &[false, true] };
        for &busy in polls {
            match sockets.udp_total_exchange(world, args.size, args.repetitions.max(1) as usize, busy) {
                Ok(seconds) => {
                    let what = if busy { "busy-poll" } else { "blocking" };
                    let sent = (args.size * (p as usize - 1)) as u64;
                    let row = Row::new(BENCH, "udp", what, p).size(args.size).with(REQUESTED, requested);
                    rows.push(timed(row, seconds, Some(sent), 0));
                }
                Err(why) => notes.push(format!("no raw UDP reference: {why}")),
            }
        }
    }
    let reference = rows.len();
    let rows = bsp_section(args, rt, over, rows).map_err(|e| e.to_string())?;
    rt.finish().map_err(|e| e.to_string())?;
    Ok(rows.map(|mut report| {
        notes.append(&mut report.notes);
        if reference > 0 {
            notes.push(format!(
                "raw udp: each process sends its bytes to every other in datagrams of at most {} B, \
                 then reads every other's, each piece copied to its place; nothing acknowledged or resent",
                crate::reference::UDP_MAX_PAYLOAD
            ));
        }
        Report { rows: report.rows, notes }
    }))
}

/// The BSP section of [`rank`]: its rows after `rows` (the raw UDP
/// reference's), all of them returned by process 0.
fn bsp_section(args: &Args, rt: &'static Runtime, over: &str, mut rows: Vec<Row>) -> Result<Option<Report>, BspError> {
    let mut bsp = Bsp::begin_on(rt)?;
    let (me, p) = (bsp.pid(), bsp.nprocs());
    if args.rate.is_some() {
        bsp.set_rate(args.rate)?;
    }
    let size = args.size;
    // Rows name the transport process 0 reaches the others by, and the one
    // the job asked for.
    let requested = args.transport.requested().as_str();
    let inbox = bsp.register::<u8>(size * p as usize)?;
    let data = vec![me as u8 + 1; size];
    let source = bsp.register_vec(data.clone())?;
    bsp.sync()?;

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
    let named =
        |what: &str| Row::new(BENCH, "bulkwire", format!("{over}, {what}"), p).size(size).with(REQUESTED, requested);
    rows.push(timed(named("empty sync"), empty.split_off(warm), None, 0));

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
                let q = (me + k) % p;
                match args.get {
                    true => bsp.get(q, &source, 0, &inbox, q as usize * size, size)?,
                    false => bsp.put(q, &data, &inbox, me as usize * size)?,
                }
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
            "{}{order}, pacing {}{}",
            if args.get { "get, " } else { "" },
            if pacing { "on" } else { "off" },
            if eager_bytes == 0 && eager > 0 { ", none eager" } else { "" }
        );
        // What went early: nothing while pacing keeps to a link rate.
        let early = if pacing && bsp.rate().is_some() { 0 } else { eager_bytes };
        let row = named(&what)
            .with("order", order.to_string())
            .with("pacing", pacing)
            .with("eager_bytes", early)
            .with("op", if args.get { "get" } else { "put" });
        rows.push(timed(row, times.split_off(warm), Some(sent), retransmissions));
    }
    bsp.set_eager(eager);

    let mut notes = transport::notes(&rows);
    if let Some(r) = bsp.rate() {
        notes.push(format!("pacing keeps to {} Mbit/s links", r / 1e6));
    }
    if eager > 0 && bsp.rate().is_none() {
        notes.push(format!(
            "streams of up to {eager} bytes to one destination leave before the barrier \
             (BULKWIRE_BSP_EAGER, by default on one host), except in the row marked none eager"
        ));
    }
    let report = (me == 0).then_some(Report { rows, notes });
    bsp.end()?;
    Ok(report)
}

/// `row` with the times of `seconds` (per exchange), what each process
/// sent per second of the median (`bytes` sent per process) and the
/// retransmissions on process 0.
fn timed(row: Row, seconds: Vec<f64>, bytes: Option<u64>, retransmissions: u64) -> Row {
    let min_us = seconds.iter().copied().fold(f64::INFINITY, f64::min) * 1e6;
    let mean_us = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64 * 1e6;
    let median = median_us(seconds);
    row.with("median_us", median)
        .with("mean_us", mean_us)
        .with("min_us", min_us)
        .with_opt("mb_per_s", bytes.map(|b| mb_per_s(b, median / 1e6)))
        .with("retransmitted_packets", retransmissions)
}

pub(crate) fn table(report: &Report) -> String {
    let first = report.table(BENCH).next();
    let (p, size) = first.map_or((0, 0), |r| (r.procs, r.size_bytes.unwrap_or(0)));
    let mut o = format!("# total exchange: {p} processes, {size} bytes per pair, median (process 0)\n");
    o.push_str(&transport::legend(report, BENCH));
    // bulkwire's rows say their transport (and the one asked for where it
    // differs); Open MPI's say theirs and when they were measured.
    let label = |r: &Row| match (r.source.as_str(), r.text("measured"), r.text(REQUESTED)) {
        ("mpi", when, _) => {
            let over = match transport::of_row(r) {
                "shm" => MpiTransport::Shm,
                _ => MpiTransport::Tcp,
            };
            let variant = r.what.split_once(", ").map_or(r.what.as_str(), |(_, v)| v);
            let when = when.map(|w| format!(", {w}")).unwrap_or_default();
            format!("{variant}, Open MPI over {}{when}", over.describe())
        }
        ("udp", _, _) => format!("raw UDP, {}", r.what),
        (_, _, Some(requested)) if requested != transport::of_row(r) => format!("{} (asked {requested})", r.what),
        _ => r.what.clone(),
    };
    let labels: Vec<String> = report.table(BENCH).map(label).collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0).max(52);
    o.push_str(&format!(
        "{:<width$} {:>12} {:>12} {:>12} {:>14} {:>8}\n",
        "", "median us", "mean us", "min us", "MB/s/process", "resent"
    ));
    for (r, what) in report.table(BENCH).zip(labels) {
        o.push_str(&format!(
            "{:<width$} {:>12} {:>12} {:>12} {:>14} {:>8}\n",
            what,
            opt(r.num("median_us"), 1),
            opt(r.num("mean_us"), 1),
            opt(r.num("min_us"), 1),
            opt(r.num("mb_per_s"), 1),
            r.num("retransmitted_packets").map_or("-".into(), |n| format!("{n:.0}"))
        ));
    }
    if report.rows.iter().any(|r| r.source == "mpi") {
        o.push_str(
            "# MPI rows: median of the slowest process's time, each operation started by a barrier; \
             mean of as many back to back (scripts/ompi/bench.c)\n",
        );
    }
    o
}
