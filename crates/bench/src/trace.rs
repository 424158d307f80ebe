//! `bulkwire bench trace`: one task's traffic, as seed 000's parallel codes
//! send it (the PDE1 and PDE2 traces of `bulkwire_sim::traces`: bursts of
//! about 8 KB every third of a second, or of 50–100 bytes every 2.9 ms),
//! from rank 0 to rank 1, replayed open-loop at the trace's times. Rank 1
//! measures each message's task-to-task latency, from the moment rank 0
//! handed it over to the moment it was received, on the machine's
//! monotonic clock: both ranks must run on one machine (the namespace test
//! bed), which rank 1 checks. The rows say how the job's paths carried it:
//! the share of data on the premium path, the bandwidth of each class, the
//! feedback, the switches and the resends.
//!
//! `bulkwire lab service-switching` runs it across the test bed's
//! congested port for each choice of paths and load.

use bulkwire_comm::{CommError, Source, Tag, World};
use bulkwire_proto::Time;
use bulkwire_runtime::rendezvous::PeerReport;
use bulkwire_sim::traces::{generate, TraceKind};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use crate::io;
use crate::rows::{Report, Row};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Trace {
    Pde1,
    Pde2,
}

impl Trace {
    pub fn kind(self) -> TraceKind {
        match self {
            Trace::Pde1 => TraceKind::Pde1,
            Trace::Pde2 => TraceKind::Pde2,
        }
    }
}

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// The traffic: pde1 (8 KB bursts, 3 a second) or pde2 (50-100 B, 345 a second).
    #[arg(long, value_enum, default_value = "pde2")]
    pub trace: Trace,
    /// Seconds of trace to replay.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Seed of the trace (sizes and gaps).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The offered load of traffic around the job, to label the rows (the
    /// benchmark does not make it; `lab service-switching` does).
    #[arg(long)]
    #[serde(default)]
    pub load: Option<f64>,
}

const DATA: i32 = 501;
const RESULT: i32 = 502;
const REPORT: i32 = 503;

/// What the receiver measured, sent to rank 0.
#[derive(Serialize, Deserialize)]
struct Measured {
    /// Task-to-task latency of every message, microseconds, in order.
    latencies_us: Vec<f64>,
    /// Rank 1's traffic to rank 0 (feedback, mostly).
    back: PeerReport,
}

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes a timespec into valid memory.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The machine's boot id: the same in every network namespace of one
/// machine, different on another.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn report_of(world: &World, peer: u32) -> PeerReport {
    world.runtime().peer_reports().into_iter().find(|p| p.peer == peer).unwrap_or_default()
}

pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let end = Time::from_nanos((args.seconds.max(0.0) * 1e9) as u64);
    let trace = generate(&args.trace.kind().params(), Time::ZERO, end, args.seed);
    let fail = |why: String| io(std::io::Error::other(why));
    if world.rank() == 1 {
        let (_, theirs) = world.recv(Source::Rank(0), Tag::Is(DATA))?;
        if String::from_utf8_lossy(&theirs) != boot_id() {
            let why = "bench trace measures one-way latency on the machine's clock: run both ranks on one machine";
            world.abort(why);
            return Err(fail(why.into()));
        }
        world.barrier()?;
        let mut latencies_us = Vec::with_capacity(trace.len());
        for (i, m) in trace.iter().enumerate() {
            let (_, data) = world.recv(Source::Rank(0), Tag::Is(DATA))?;
            let now = monotonic_ns();
            let stamp = |at: usize| u64::from_be_bytes(data[at..at + 8].try_into().expect("8 bytes"));
            if data.len() != m.len.max(16) || stamp(0) != i as u64 {
                return Err(fail(format!("message {i} of the trace arrived wrong")));
            }
            latencies_us.push(now.saturating_sub(stamp(8)) as f64 / 1e3);
        }
        world.barrier()?;
        let measured = Measured { latencies_us, back: report_of(world, 0) };
        world.send(0, RESULT, &serde_json::to_vec(&measured).expect("serialise"))?;
        world.recv(Source::Rank(0), Tag::Is(REPORT))?;
        return Ok(Vec::new());
    }
    world.send(1, DATA, boot_id().as_bytes())?;
    world.barrier()?;
    let before = report_of(world, 1);
    let start = Instant::now();
    for (i, m) in trace.iter().enumerate() {
        let due = start + Duration::from_nanos(m.at.as_nanos());
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let mut data = vec![0u8; m.len.max(16)];
        data[..8].copy_from_slice(&(i as u64).to_be_bytes());
        data[8..16].copy_from_slice(&monotonic_ns().to_be_bytes());
        world.send(1, DATA, &data)?;
    }
    world.barrier()?;
    let seconds = start.elapsed().as_secs_f64();
    let (_, measured) = world.recv(Source::Rank(1), Tag::Is(RESULT))?;
    world.send(1, REPORT, &[])?;
    let measured: Measured = serde_json::from_slice(&measured).map_err(|e| fail(format!("rank 1's result: {e}")))?;
    let after = report_of(world, 1);
    Ok(vec![row(world, args, &measured, &before, &after, seconds)])
}

/// The latency at quantile `q` of sorted `x`.
fn quantile(x: &[f64], q: f64) -> f64 {
    x[((x.len() - 1) as f64 * q).round() as usize]
}

fn row(world: &World, args: &Args, m: &Measured, before: &PeerReport, after: &PeerReport, seconds: f64) -> Row {
    let mut sorted = m.latencies_us.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len().max(1) as f64;
    let mean = sorted.iter().sum::<f64>() / n;
    let d = |f: fn(&PeerReport) -> u64| f(after) - f(before);
    let ordinary = d(|p| p.ordinary_data_bytes);
    let premium = d(|p| p.premium_data_bytes);
    let bits = |bytes: u64| bytes as f64 * 8.0 / seconds.max(1e-9);
    // Feedback both ways: rank 0's control packets to rank 1 in the
    // interval, and all of rank 1's traffic back (it sends no data).
    let feedback_out = d(|p| p.ordinary_control_bytes + p.premium_control_bytes + p.probe_bytes + p.clock_sync_bytes);
    let b = &m.back;
    let feedback_back = b.ordinary_control_bytes + b.premium_control_bytes + b.probe_bytes + b.clock_sync_bytes;
    let mut row = Row::new("trace", "bulkwire", world.runtime().paths_name(), world.size())
        .with("trace", args.trace.kind().name())
        .with("messages_count", m.latencies_us.len())
        .with("seconds", seconds);
    if let Some(load) = args.load {
        row = row.load(load);
    }
    if !sorted.is_empty() {
        row = row
            .with("latency_mean_us", mean)
            .with("latency_median_us", quantile(&sorted, 0.5))
            .with("latency_p99_us", quantile(&sorted, 0.99))
            .with("latency_max_us", sorted[sorted.len() - 1]);
    }
    row.with("share", if ordinary + premium == 0 { 0.0 } else { premium as f64 / (ordinary + premium) as f64 })
        .with("ordinary_data_bits_per_s", bits(ordinary))
        .with("premium_data_bits_per_s", bits(premium))
        .with("feedback_bits_per_s", bits(feedback_out + feedback_back))
        .with("retransmitted_packets", d(|p| p.retransmitted_packets))
        .with("switches_to_premium_count", d(|p| p.switches_to_premium))
        .with("switches_to_ordinary_count", d(|p| p.switches_to_ordinary))
        .with("lost_probe_packets", b.probes_lost)
}

/// The table of `bench trace`'s rows.
pub(crate) fn table(report: &Report) -> String {
    let mut o = String::from(
        "# one task's trace from rank 0 to rank 1: task-to-task latency, µs; premium share of its data bytes; \
         bandwidth per class, kbit/s; resent data packets; switches to premium / back\n",
    );
    o.push_str(&format!(
        "{:>10} {:>6} {:>6} {:>8} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>6} {:>8}\n",
        "paths",
        "trace",
        "load",
        "msgs",
        "mean",
        "median",
        "p99",
        "share",
        "ordinary",
        "premium",
        "feedback",
        "resent",
        "switches"
    ));
    for r in report.table("trace") {
        let num = |name: &str| r.num(name).unwrap_or(f64::NAN);
        let load = r.num("load").map_or("-".to_string(), |l| format!("{l:.2}"));
        o.push_str(&format!(
            "{:>10} {:>6} {:>6} {:>8.0} {:>9.0} {:>9.0} {:>9.0} {:>6.1}% {:>9.1} {:>9.1} {:>9.1} {:>6.0} {:>8}\n",
            r.what,
            r.text("trace").unwrap_or("-"),
            load,
            num("messages_count"),
            num("latency_mean_us"),
            num("latency_median_us"),
            num("latency_p99_us"),
            num("share") * 100.0,
            num("ordinary_data_bits_per_s") / 1e3,
            num("premium_data_bits_per_s") / 1e3,
            num("feedback_bits_per_s") / 1e3,
            num("retransmitted_packets"),
            format!("{:.0}/{:.0}", num("switches_to_premium_count"), num("switches_to_ordinary_count")),
        ));
    }
    o
}
