//! `bulkwire lab solver`: seed 003's experiment (§6) on the namespace test
//! bed. The asynchronous iterative solver (`bench solver`: `A x + b = 0`
//! by Jacobi's iteration over the shared memory, its writes flushed under
//! Warp control or at a fixed threshold, beside a synchronous BSP version,
//! and Open MPI's synchronous version started by mpirun on the same hosts)
//! runs on the test bed's hosts (`scripts/netns-testbed.sh up 5 100mbit`)
//! while ON-OFF background traffic ([`crate::background`]) loads every
//! host's port to `load` of its rate, as the seed's traffic generators
//! loaded its shared Ethernet. Each load is repeated with the background's
//! seed changed; the variants of one repetition run in turn under the same
//! background, each in a job of its own (a job's transport remembers what
//! the network did to it: run in one job, the variant that came second was
//! 2–6× slower whichever it was).
//!
//! This module plans the runs and turns the per-run rows of `bench solver`
//! into the experiment's rows, table and plot; the `bulkwire` command runs
//! the jobs (it has the launcher).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bulkwire_bench::rows::{Report, Row};
use bulkwire_bench::solver::{self, Variant};
use bulkwire_bench::Bench;
use bulkwire_sim::service_switching::Estimate;

use crate::plot::{error_bars, write_png, Line, Panel};

pub const BENCH: &str = "solver";

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The test bed's hosts, one process each.
    #[arg(long, default_value = "bwh0,bwh1,bwh2,bwh3,bwh4")]
    pub hosts: String,
    /// The remote shell that enters a host (as `bulkwire run --ssh`).
    #[arg(long, env = "BULKWIRE_SSH", default_value = "scripts/netns-exec")]
    pub ssh: String,
    /// Address of the rendezvous, and the background's source (the switch's).
    #[arg(long, default_value = "10.90.0.254")]
    pub bind: std::net::IpAddr,
    /// The hosts' addresses, where the background goes (every port loaded).
    #[arg(long, default_value = "10.90.0.1,10.90.0.2,10.90.0.3,10.90.0.4,10.90.0.5")]
    pub to: String,
    /// The ports' rate, as the test bed was brought up with.
    #[arg(long, default_value = "100mbit", value_parser = bulkwire_bsp::parse_rate)]
    pub rate: f64,
    /// Offered loads of the background, as multiples of the rate (0: none).
    #[arg(long, value_delimiter = ',', default_values_t = [0.0, 0.65])]
    pub loads: Vec<f64>,
    /// Repetitions of each load.
    #[arg(long, default_value_t = 3)]
    pub repetitions: u32,
    /// The variants.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Variant::Warp, Variant::NoControl, Variant::Bsp])]
    pub variants: Vec<Variant>,
    /// Equations (the seed's system has 1000).
    #[arg(long, default_value_t = 1000)]
    pub size: usize,
    #[arg(long, default_value_t = 1e-9)]
    pub tolerance: f64,
    #[arg(long, default_value_t = 1.1)]
    pub dominance: f64,
    /// The fixed threshold of `no-control`, and `warp`'s starting one (writes).
    #[arg(long, default_value_t = 20)]
    pub threshold: usize,
    /// Background sources per port.
    #[arg(long, default_value_t = 10)]
    pub sources: u32,
    /// Leave out Open MPI's version (started by mpirun on the same hosts,
    /// through the same remote shell).
    #[arg(long)]
    pub no_mpi: bool,
    /// The hosts' network, for Open MPI's TCP.
    #[arg(long, default_value = "10.90.0.0/24")]
    pub mpi_network: String,
    /// Seed of the system and of the first repetition's background.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A short sweep: one repetition of each load.
    #[arg(long)]
    pub quick: bool,
    /// Where the CSV and the PNG go.
    #[arg(long, default_value = "out/solver-testbed")]
    pub out: PathBuf,
}

impl Args {
    pub fn hosts(&self) -> usize {
        self.hosts.split(',').count()
    }

    /// The jobs: one per load, repetition and variant (`None`: Open MPI's).
    pub fn plan(&self) -> Result<Vec<(f64, u32, Option<Variant>)>, String> {
        if self.loads.iter().any(|l| !(0.0..=2.0).contains(l)) {
            return Err("--loads: each between 0 and 2 times the rate".into());
        }
        if self.variants.is_empty() || self.repetitions == 0 {
            return Err("need a variant and a repetition".into());
        }
        let repetitions = if self.quick { 1 } else { self.repetitions };
        let mut plan = Vec::new();
        for &load in &self.loads {
            for r in 0..repetitions {
                // The order of the variants turns with the repetition.
                let mut all: Vec<Option<Variant>> = self.variants.iter().copied().map(Some).collect();
                if !self.no_mpi && self.mpirun_found() {
                    all.push(None);
                }
                let n = all.len();
                plan.extend((0..n).map(|k| (load, r, all[(k + r as usize) % n])));
            }
        }
        Ok(plan)
    }

    fn bench(&self, load: f64, variant: Variant) -> Bench {
        Bench::Solver(solver::Args {
            ranks: self.hosts() as u32,
            size: self.size,
            tolerance: self.tolerance,
            dominance: self.dominance,
            seed: self.seed,
            variants: vec![variant],
            threshold: self.threshold,
            load: Some(load),
            no_mpi: true,
        })
    }

    fn mpirun_found(&self) -> bool {
        std::process::Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success())
    }

    /// Open MPI's version of the same system on the same hosts.
    fn open_mpi(&self, load: f64) -> Result<Report, String> {
        let Bench::Solver(solver) = self.bench(load, Variant::Bsp) else { unreachable!("a solver") };
        let agent = std::fs::canonicalize(&self.ssh).map_err(|e| format!("--ssh {}: {e}", self.ssh))?;
        let hosts = bulkwire_bench::mpi::Hosts { hosts: &self.hosts, agent: &agent, network: Some(&self.mpi_network) };
        let rows =
            bulkwire_bench::mpi::rows_where(self.hosts() as u32, Some(&hosts), &solver.mpi_args(), BENCH, "seconds")?;
        Ok(Report { rows, notes: Vec::new() })
    }

    fn background(&self, load: f64, repetition: u32) -> crate::background::Args {
        crate::background::Args {
            to: self.to.clone(),
            rate: self.rate,
            load,
            sources: self.sources,
            premium_sources: 0,
            mean_ms: 10.0,
            seconds: 600.0,
            after: 0.0,
            size: 1400,
            seed: self.seed + u64::from(repetition),
            from: Some(self.bind),
        }
    }
}

/// Runs every job of the plan; `job` runs a benchmark on the test bed and
/// returns rank 0's rows. Writes the CSV and the plot into `args.out`.
pub fn run(
    args: &Args,
    job: &mut dyn FnMut(&Bench) -> Result<Report, String>,
    progress: &mut dyn FnMut(&str),
) -> Result<(Report, Vec<PathBuf>), String> {
    let mut runs = Vec::new();
    let mut notes = Vec::new();
    for (load, repetition, variant) in args.plan()? {
        let name = variant.map_or("mpi", Variant::name);
        progress(&format!("load {load} #{} {name}", repetition + 1));
        let stop = Arc::new(AtomicBool::new(false));
        let sender = (load > 0.0).then(|| {
            let (background, stop) = (args.background(load, repetition), stop.clone());
            std::thread::spawn(move || crate::background::run_until(&background, &stop))
        });
        if sender.is_some() {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let report = match variant {
            Some(v) => job(&args.bench(load, v)),
            None => args.open_mpi(load),
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(sender) = sender {
            sender.join().map_err(|_| "the background sender panicked".to_string())??;
        }
        match (variant, report) {
            (_, Ok(report)) => runs.extend(report.rows),
            // Open MPI's version is a comparison: its failure (a daemon
            // that did not start) is noted, and the experiment goes on.
            (None, Err(e)) => {
                let first = e.lines().next().unwrap_or_default().to_string();
                notes.push(format!("Open MPI's run at load {load}, repetition {}, failed: {first}", repetition + 1));
            }
            (Some(_), Err(e)) => return Err(format!("the solver's job ({name}, load {load}): {e}")),
        }
    }
    notes.insert(
        0,
        format!(
            "{} equations on {} test-bed hosts, every port {:.0} Mbit/s loaded by {} ON-OFF sources; {} runs",
            args.size,
            args.hosts(),
            args.rate / 1e6,
            args.sources,
            runs.len()
        ),
    );
    let report = aggregate(&runs, notes);
    let files = write_files(&report, &args.out)?;
    Ok((report, files))
}

/// Per variant and load: the mean over repetitions of each metric, with a
/// 90% confidence interval of the seconds.
pub fn aggregate(runs: &[Row], notes: Vec<String>) -> Report {
    let mut keys: Vec<(String, f64)> = Vec::new();
    for r in runs {
        let key = (r.what.clone(), r.load.unwrap_or(0.0));
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut rows = Vec::new();
    for (what, load) in keys {
        let of: Vec<&Row> = runs.iter().filter(|r| r.what == what && r.load.unwrap_or(0.0) == load).collect();
        let mean = |m: &str| of.iter().filter_map(|r| r.num(m)).sum::<f64>() / of.len() as f64;
        let seconds: Vec<f64> = of.iter().filter_map(|r| r.num("seconds")).collect();
        let Estimate { mean: m, ci90: half } = Estimate::of(&seconds);
        let mut row = Row::new(BENCH, "testbed", what.clone(), of[0].procs)
            .size(of[0].size_bytes.unwrap_or(0) as usize)
            .load(load)
            .with("seconds", m)
            .with("seconds_lo", m - half)
            .with("seconds_hi", m + half)
            .with("iterations", mean("iterations"))
            .with("runs", of.len() as f64);
        // Open MPI's program counts no bytes nor resends.
        for metric in ["bytes", "drops"] {
            if of.iter().all(|r| r.num(metric).is_some()) {
                row = row.with(metric, mean(metric));
            }
        }
        if of.iter().all(|r| r.num("threshold_writes").is_some()) {
            // Where the shared memory's buffer threshold ended (Warp moves it).
            row = row.with("threshold_writes", mean("threshold_writes")).with("batches", mean("batches"));
        }
        rows.push(row);
    }
    rows.push(
        Row::new(BENCH, "paper", "warp", 5).size(1000).load(0.65).with("seconds", 52.6).with("messages", 27_435.0),
    );
    rows.push(
        Row::new(BENCH, "paper", "no-control", 5)
            .size(1000)
            .load(0.65)
            .with("seconds", 95.2)
            .with("messages", 34_436.0),
    );
    Report { rows, notes }
}

pub fn table(report: &Report) -> String {
    let mut o = String::from(
        "# solver on the test bed: seconds to converge (90% interval), sweeps, MB sent, packets resent; \
         the paper's rows: seconds and messages (27,435 with Warp, 34,436 without)\n",
    );
    o.push_str(&format!(
        "{:>9} {:>12} {:>6} {:>22} {:>10} {:>10} {:>10}\n",
        "source", "what", "load", "seconds", "sweeps", "MB", "drops"
    ));
    for r in &report.rows {
        let num = |k: &str| r.num(k).unwrap_or(f64::NAN);
        let seconds = match (r.num("seconds_lo"), r.num("seconds_hi")) {
            (Some(lo), Some(hi)) if hi > lo => format!("{:.3} ({:.3}–{:.3})", num("seconds"), lo, hi),
            _ => format!("{:.3}", num("seconds")),
        };
        o.push_str(&format!(
            "{:>9} {:>12} {:>6.2} {:>22} {:>10.0} {:>10.2} {:>10.0}\n",
            r.source,
            r.what,
            r.load.unwrap_or(0.0),
            seconds,
            num("iterations"),
            num("bytes") / 1e6,
            num("drops"),
        ));
    }
    // The seed's comparison: Warp against no control under load.
    let at = |what: &str, load: f64| {
        report
            .rows
            .iter()
            .find(|r| r.source == "testbed" && r.what == what && r.load == Some(load))
            .and_then(|r| r.num("seconds"))
    };
    let mut loads: Vec<f64> = report.rows.iter().filter(|r| r.source == "testbed").filter_map(|r| r.load).collect();
    loads.dedup();
    for load in loads {
        if let (Some(w), Some(n)) = (at("warp", load), at("no-control", load)) {
            o.push_str(&format!(
                "# load {load:.2}: no-control / warp = {:.2} (seed 003 at 0.65: 95.2 / 52.6 = 1.81)\n",
                n / w
            ));
        }
    }
    o
}

pub fn write_files(report: &Report, out: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let csv = out.join("solver.csv");
    std::fs::write(&csv, report.csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
    let measured: Vec<&Row> = report.rows.iter().filter(|r| r.source == "testbed").collect();
    let max_load = measured.iter().filter_map(|r| r.load).fold(0.0, f64::max);
    let max_s = measured.iter().filter_map(|r| r.num("seconds_hi").or(r.num("seconds"))).fold(0.0, f64::max);
    let colours = [
        plotters::style::RGBColor(31, 119, 180),
        plotters::style::RGBColor(214, 39, 40),
        plotters::style::RGBColor(44, 160, 44),
        plotters::style::RGBColor(148, 103, 189),
    ];
    let mut lines = Vec::new();
    for (i, what) in ["warp", "no-control", "bsp", "mpi"].iter().enumerate() {
        let of: Vec<&&Row> = measured.iter().filter(|r| r.what == *what).collect();
        if of.is_empty() {
            continue;
        }
        let points: Vec<(f64, f64)> =
            of.iter().map(|r| (r.load.unwrap_or(0.0), r.num("seconds").unwrap_or(0.0))).collect();
        let bars: Vec<(f64, f64, f64)> = of
            .iter()
            .map(|r| {
                let s = r.num("seconds").unwrap_or(0.0);
                (r.load.unwrap_or(0.0), s, r.num("seconds_hi").unwrap_or(s) - s)
            })
            .collect();
        lines.push(Line { label: what.to_string(), points, colour: colours[i], reference: false });
        lines.extend(error_bars(&bars, colours[i], max_load.max(0.1) / 60.0));
    }
    let panel = Panel {
        title: "Asynchronous solver on the test bed".into(),
        x_label: "background load (share of each port)".into(),
        y_label: "seconds to converge".into(),
        x: -0.05..max_load.max(0.1) * 1.1,
        y: 0.0..max_s.max(1e-3) * 1.2,
        lines,
    };
    let png = out.join("solver.png");
    write_png(&png, &[panel], 800, 500)?;
    Ok(vec![csv, png])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_become_one_row_per_variant_and_load_with_an_interval() {
        let run = |what: &str, load: f64, s: f64| {
            Row::new(BENCH, "bulkwire", what, 5).size(1000).load(load).with("seconds", s).with("iterations", 10.0)
        };
        let runs = vec![run("warp", 0.65, 1.0), run("warp", 0.65, 2.0), run("warp", 0.65, 3.0), run("bsp", 0.0, 1.0)];
        let report = aggregate(&runs, Vec::new());
        let warp = report.rows.iter().find(|r| r.source == "testbed" && r.what == "warp").unwrap();
        assert_eq!(warp.num("seconds"), Some(2.0));
        let half = warp.num("seconds_hi").unwrap() - 2.0;
        assert!((half - 2.920 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9, "{half}");
        assert!(report.rows.iter().any(|r| r.source == "paper" && r.num("seconds") == Some(52.6)));
        assert!(table(&report).contains("warp"));
    }
}
