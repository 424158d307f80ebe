//! `bulkwire sim scale`: how an empty BSP sync's costs grow with the number
//! of processes p, in the simulator, to a thousand and more: p real
//! endpoints on one switch run the barrier of bsp's sync (the dissemination
//! of fan-out k, `bulkwire_sim::scale`), back to back. Rows of table
//! `scale-sim`: simulated time per sync, messages, datagrams and bytes per
//! process and sync, and each endpoint's memory (`Endpoint::footprint`);
//! their CSV file and a PNG plot in `--out`.
//!
//! The barrier's messages are bsp's own (`reduction`: a header and the
//! reduction of an empty sync, whose two p × p bit matrices are empty and
//! take a few bytes, beside its checks) or tokens of the same header alone
//! (`token`: the pattern's cost without the reduction).
//!
//! Also the plots of `bulkwire bench scale`'s rows ([`plot_bench`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bulkwire_bench::rows::{csv, opt, Report, Row};
use bulkwire_sim::scale::{run as simulate, Outcome, Setup};

use crate::plot::{write_png_on, Axis, Line, Panel, PALETTE};
use crate::write;

pub const TABLE: &str = "scale-sim";

/// Which messages the barrier sends.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Messages {
    /// bsp's: the header and the reduction of an empty sync.
    Reduction,
    /// The header alone.
    Token,
    Both,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Process counts.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64,128,256,512,1024")]
    pub procs: Vec<u32>,
    /// Partners per round of the barrier (bsp's default where each
    /// process has a core is 7; 2 where processes share cores).
    #[arg(long, value_delimiter = ',', default_value = "7")]
    pub fanout: Vec<u32>,
    /// Empty syncs in a row in each run.
    #[arg(long, default_value_t = 4)]
    pub syncs: u32,
    /// The barrier's messages: bsp's reduction, tokens, or both.
    #[arg(long, value_enum, default_value = "both")]
    pub messages: Messages,
    /// Runs with bsp's reduction only up to this many processes (default:
    /// all of them).
    #[arg(long)]
    pub reduction_up_to: Option<u32>,
    /// Where the CSV file and the PNG plot go.
    #[arg(long, default_value = "out/scale")]
    pub out: PathBuf,
}

impl Args {
    /// The runs: (p, k, reduction messages or not).
    fn plan(&self) -> Vec<(u32, u32, bool)> {
        let mut plan = Vec::new();
        for &k in &self.fanout {
            for reduction in [false, true] {
                let wanted = match self.messages {
                    Messages::Both => true,
                    Messages::Reduction => reduction,
                    Messages::Token => !reduction,
                };
                if !wanted {
                    continue;
                }
                for &p in &self.procs {
                    if !reduction || self.reduction_up_to.is_none_or(|most| p <= most) {
                        plan.push((p, k, reduction));
                    }
                }
            }
        }
        plan
    }

    /// How many runs [`run`] makes (for a progress bar).
    pub fn runs(&self) -> usize {
        self.plan().len()
    }

    fn check(&self) -> Result<(), String> {
        if self.procs.is_empty() || self.procs.iter().any(|&p| p < 2) {
            return Err("sim scale needs process counts of at least 2".into());
        }
        if self.fanout.is_empty() || self.fanout.contains(&0) {
            return Err("the fan-out is at least 1".into());
        }
        Ok(())
    }
}

/// Bytes of bsp's header of a barrier message: kind (u8) and superstep
/// (u64), then the round (u32) (`sync.rs`: `header`, `tell`).
const HEADER: usize = 1 + 8 + 4;

/// Bytes of bsp's barrier message in an empty sync of `p` processes: the
/// header and the encoded reduction, whose matrices and outgoing bytes,
/// all empty, take a few bytes, and its five checks.
pub fn reduction_message_len(p: u32) -> usize {
    bulkwire_bsp::empty_sync_message_len(p)
}

/// The runtime's endpoint with `p` processes, as it is made (6 channels
/// per pair: comm's two, bsp's, the groups' two, the shared memory's):
/// its bytes.
pub fn runtime_endpoint_bytes(p: u32) -> usize {
    bulkwire_sim::scale::new_footprint(p, 6).total()
}

/// Runs the experiment, writes its files into `args.out` and returns the
/// rows and the files written. `progress` hears of each run as it ends.
pub fn run(args: &Args, progress: &mut dyn FnMut(&str)) -> Result<(Report, Vec<PathBuf>), String> {
    args.check()?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (p, k, reduction) in args.plan() {
        let len = if reduction { reduction_message_len(p) } else { HEADER };
        let setup = Setup::new(args.seed, p, k, len, args.syncs);
        // Generous: a sync of the largest runs takes tens of milliseconds.
        let outcome = simulate(&setup, Duration::from_secs(60));
        if !outcome.completed {
            failed.push(format!("p {p}, k {k}: {}", outcome.errors.first().map_or("did not finish", String::as_str)));
        }
        let what = format!("k={k}, {}", if reduction { "reduction" } else { "token" });
        rows.push(row(&what, &outcome));
        progress(&format!("{what}, p {p}"));
    }
    let notes = vec![
        format!(
            "p endpoints on one switch ({} Mbit/s ports, {} us a hop, {} datagrams a port), {} empty syncs in a row, seed {}",
            bulkwire_sim::SwitchParams::default().rate_bps / 1_000_000,
            bulkwire_sim::SwitchParams::default().hop_delay.as_micros(),
            bulkwire_sim::SwitchParams::default().queue_packets,
            args.syncs,
            args.seed
        ),
        "per sync: per process and sync; endpoint: its structures at the end of the run (one channel per pair), \
         runtime endpoint: one made as the runtime makes it (six channels per pair), before any traffic"
            .into(),
    ];
    let report = Report { rows, notes };
    let mut files = vec![args.out.join(format!("{TABLE}.csv"))];
    write(&files[0], &csv(report.table(TABLE)))?;
    files.push(args.out.join(format!("{TABLE}.png")));
    write_png_on(&files[1], &sim_panels(&report), 1500, 480, (Axis::Log2, Axis::Log10))?;
    if !failed.is_empty() {
        return Err(format!("runs that did not finish: {}", failed.join("; ")));
    }
    Ok((report, files))
}

fn row(what: &str, o: &Outcome) -> Row {
    let p = o.setup.procs;
    Row::new(TABLE, "sim", what, p)
        .with("fanout_count", o.shape.k)
        .with("barrier_rounds_count", o.shape.rounds())
        .with("message_bytes", o.setup.message_len)
        .with("sync_us", o.per_sync.as_secs_f64() * 1e6)
        .with("first_sync_us", o.first_sync.as_secs_f64() * 1e6)
        .with("sync_messages", o.messages)
        .with("sync_datagrams", o.datagrams)
        .with("sync_data_datagrams", o.data_datagrams)
        .with("sync_sent_bytes", o.bytes)
        .with("sync_retransmitted_packets", o.retransmissions)
        .with("queue_drops_datagrams", o.queue_drops)
        .with("sync_channel_scans_count", o.scans)
        .with("sync_channel_visits_count", o.channel_visits)
        .with("channels_count", o.footprint.channels)
        .with("channel_bytes", o.footprint.channel_structs / o.footprint.channels.max(1))
        .with("endpoint_new_kib", o.footprint_new.total() as f64 / 1024.0)
        .with("endpoint_kib", o.footprint.total() as f64 / 1024.0)
        .with("runtime_endpoint_kib", runtime_endpoint_bytes(p) as f64 / 1024.0)
        .with("syncs_count", o.setup.syncs)
        .with("events_count", o.events)
        .with("completed", o.completed)
}

/// The table, as text.
pub fn table(report: &Report) -> String {
    let mut o = String::from("# scale in the simulator: empty BSP syncs (bsp's barrier) on p endpoints\n");
    let mut variants: Vec<&str> = Vec::new();
    for r in report.table(TABLE) {
        if !variants.contains(&r.what.as_str()) {
            variants.push(&r.what);
        }
    }
    for what in variants {
        let _ = writeln!(o, "\n## {what}");
        let _ = writeln!(
            o,
            "{:>6} {:>6} {:>9} {:>11} {:>9} {:>10} {:>10} {:>9} {:>8} {:>12} {:>9} {:>9} {:>9}",
            "procs",
            "rounds",
            "msg B",
            "sync us",
            "messages",
            "datagrams",
            "sent KiB",
            "resent",
            "drops",
            "visits",
            "endp KiB",
            "new KiB",
            "rt KiB"
        );
        for r in report.table(TABLE).filter(|r| r.what == what) {
            let n = |name: &str| r.num(name);
            let _ = writeln!(
                o,
                "{:>6} {:>6} {:>9} {:>11} {:>9} {:>10} {:>10} {:>9} {:>8} {:>12} {:>9} {:>9} {:>9}{}",
                r.procs,
                opt(n("barrier_rounds_count"), 0),
                opt(n("message_bytes"), 0),
                opt(n("sync_us"), 1),
                opt(n("sync_messages"), 1),
                opt(n("sync_datagrams"), 1),
                opt(n("sync_sent_bytes").map(|b| b / 1024.0), 1),
                opt(n("sync_retransmitted_packets"), 1),
                opt(n("queue_drops_datagrams"), 0),
                opt(n("sync_channel_visits_count"), 0),
                opt(n("endpoint_kib"), 0),
                opt(n("endpoint_new_kib"), 0),
                opt(n("runtime_endpoint_kib"), 0),
                if r.field("completed") == Some(&bulkwire_bench::Value::Bool(false)) { "  did not finish" } else { "" }
            );
        }
    }
    let _ = writeln!(
        o,
        "# per process and sync: messages, datagrams (data and control), bytes sent, packets resent, deadlines of \
         channels looked at by the endpoint's timers (visits); drops: at the switch, in all; endp: the endpoint at the end, new: as made, \
         rt: as the runtime makes it (six channels per pair)"
    );
    o
}

/// A line per variant of `rows` of `table`, `metric` against p.
fn lines(report: &Report, table: &str, metric: &str, label: impl Fn(&Row) -> String) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for r in report.table(table) {
        let Some(y) = r.num(metric).filter(|y| *y > 0.0) else { continue };
        let name = label(r);
        match lines.iter_mut().find(|l| l.label == name) {
            Some(line) => line.points.push((f64::from(r.procs), y)),
            None => {
                let colour = PALETTE[lines.len() % PALETTE.len()];
                lines.push(Line { label: name, points: vec![(f64::from(r.procs), y)], colour, reference: false });
            }
        }
    }
    for l in &mut lines {
        l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// A panel of `lines` against p, ranges from the points: for a
/// logarithmic y axis (`log_y`) a decade above them for the legend, else
/// from zero.
fn panel(title: &str, y_label: &str, lines: Vec<Line>, log_y: bool) -> Panel {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (x_lo, x_hi) = xs.fold((f64::MAX, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let (y_lo, y_hi) = ys.fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (x_lo, y_lo) = (x_lo.min(x_hi), y_lo.min(y_hi));
    Panel {
        title: title.into(),
        x_label: "processes p".into(),
        y_label: y_label.into(),
        x: (x_lo / 1.2).max(1.0)..x_hi * 1.2,
        y: match log_y {
            true => (y_lo / 2.0).max(1e-3)..(y_hi * 10.0).max(1e-2),
            false => 0.0..(y_hi * 1.4).max(1e-2),
        },
        lines,
    }
}

fn sim_panels(report: &Report) -> Vec<Panel> {
    let what = |r: &Row| r.what.clone();
    let mut memory = lines(report, TABLE, "endpoint_kib", |r| format!("{}: endpoint at the end", r.what));
    let fresh = |r: &Row| format!("{}: as made", r.what);
    memory.extend(lines(report, TABLE, "endpoint_new_kib", fresh).into_iter().take(1));
    let runtime: Vec<Line> = lines(report, TABLE, "runtime_endpoint_kib", |_| "the runtime's, as made".into());
    memory.extend(runtime);
    for (i, l) in memory.iter_mut().enumerate() {
        l.colour = PALETTE[i % PALETTE.len()];
    }
    vec![
        panel("simulated time of an empty sync", "us per sync", lines(report, TABLE, "sync_us", what), true),
        panel("datagrams per process and sync", "datagrams", lines(report, TABLE, "sync_datagrams", what), true),
        panel("an endpoint's structures", "KiB", memory, true),
    ]
}

/// The PNG plots of `bulkwire bench scale`'s rows in `dir`: the times
/// against p (`scale-time.png`) and the memory (`scale-memory.png`).
pub fn plot_bench(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, String> {
    const BENCH: &str = bulkwire_bench::scale::BENCH;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Each line: the job's source and transport.
    let job = |r: &Row| {
        let over = r.what.split(", ").next().unwrap_or_default();
        match r.source.as_str() {
            "mpi" => format!("Open MPI {over}"),
            _ => format!("bulkwire {over}"),
        }
    };
    let kind = |what: &str| {
        let rows: Vec<Row> =
            report.table(BENCH).filter(|r| r.what.split_once(", ").is_some_and(|(_, w)| w == what)).cloned().collect();
        Report { rows, notes: Vec::new() }
    };
    let exchange = report
        .table(BENCH)
        .find_map(|r| r.what.split_once(", ").map(|(_, w)| w).filter(|w| w.starts_with("total exchange")))
        .unwrap_or("total exchange")
        .to_string();
    let time = vec![
        panel("empty bsp_sync", "us, median at process 0", lines(&kind("empty sync"), BENCH, "median_us", job), true),
        panel("barrier", "us, median at process 0", lines(&kind("barrier"), BENCH, "median_us", job), true),
        panel(&exchange, "us, median at process 0", lines(&kind(&exchange), BENCH, "median_us", job), true),
    ];
    let mib = |rows: &Report, metric: &str, suffix: &str| {
        let mut ls = lines(rows, BENCH, metric, |r| format!("{}, {suffix}", job(r)));
        for l in &mut ls {
            for p in &mut l.points {
                p.1 /= 1024.0;
            }
        }
        ls
    };
    let after = kind("memory after syncs");
    let mut peak = mib(&after, "peak_rss_kib", "largest");
    peak.extend(mib(&after, "peak_rss_median_kib", "median"));
    peak.extend(mib(&kind("memory at start"), "peak_rss_kib", "at start"));
    let mut shared = mib(&after, "rss_anon_kib", "anonymous");
    shared.extend(mib(&after, "rss_shmem_kib", "shared memory"));
    for ls in [&mut peak, &mut shared] {
        for (i, l) in ls.iter_mut().enumerate() {
            l.colour = PALETTE[i % PALETTE.len()];
        }
    }
    let memory = vec![
        panel("peak resident set per process", "MiB", peak, false),
        panel("resident set after the syncs, largest", "MiB", shared, false),
    ];
    let files = vec![dir.join("scale-time.png"), dir.join("scale-memory.png")];
    write_png_on(&files[0], &time, 1500, 480, (Axis::Log2, Axis::Log10))?;
    write_png_on(&files[1], &memory, 1100, 480, (Axis::Log2, Axis::Linear))?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reduction_of_an_empty_sync_stays_small() {
        // The header, the number of processes, two bytes for each of the
        // three empty vectors, and the checks.
        let (small, large) = (reduction_message_len(2), reduction_message_len(1024));
        assert!(small > HEADER + 4 + 6 && small < 128, "{small}");
        assert!(large >= small && large <= small + 10, "{small} {large}");
        let (small, large) = (runtime_endpoint_bytes(64), runtime_endpoint_bytes(1024));
        assert!(large > 14 * small && large < 18 * small, "{small} {large}");
    }
}
