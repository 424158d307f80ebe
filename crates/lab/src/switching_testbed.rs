//! `bulkwire lab service-switching`: seed 000's experiment (§4) on real
//! packets. One task's traffic (`bench trace`: the PDE1 or PDE2 trace of
//! the simulator) crosses the namespace test bed's two-class port
//! (`scripts/netns-testbed.sh bottleneck 2`) while ON-OFF background
//! traffic ([`crate::background`]) offers a load ρ of the port's rate, for
//! ordinary-only, premium-only and adaptive paths (LME/ECE), ρ from 0.3 to
//! 1.1. Each point is repeated with the background's seed changed; the three
//! choices of paths of one repetition see the same background pattern.
//!
//! This module plans the runs and turns the per-run rows of `bench trace`
//! into the experiment's rows, table and plots; the `bulkwire` command runs
//! the jobs (it has the launcher).

use std::path::{Path, PathBuf};

use bulkwire_bench::rows::{Report, Row};
use bulkwire_bench::trace::Trace;
use bulkwire_bench::Bench;
use bulkwire_sim::service_switching::Estimate;

use crate::plot::{error_bars, write_png, Line, Panel};

pub const BENCH: &str = "service-switching";

/// The choices of paths compared, as `BULKWIRE_PATHS` names them.
pub const MODES: [&str; 3] = ["ordinary", "premium", "adaptive"];

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The two hosts of the test bed: the task's sender, then its receiver
    /// (behind the congested port).
    #[arg(long, default_value = "bwh0,bwh1")]
    pub hosts: String,
    /// The remote shell that enters a host (as `bulkwire run --ssh`).
    #[arg(long, env = "BULKWIRE_SSH", default_value = "scripts/netns-exec")]
    pub ssh: String,
    /// Address of the rendezvous, and the background's source (the switch's).
    #[arg(long, default_value = "10.90.0.254")]
    pub bind: std::net::IpAddr,
    /// The receiver's address, where the background goes.
    #[arg(long, default_value = "10.90.0.2")]
    pub to: String,
    /// The port's rate, as the test bed was brought up with.
    #[arg(long, default_value = "100mbit", value_parser = bulkwire_bsp::parse_rate)]
    pub rate: f64,
    /// Offered loads ρ of the background, as multiples of the rate.
    #[arg(long, value_delimiter = ',', default_values_t = [0.3, 0.5, 0.7, 0.9, 1.1])]
    pub loads: Vec<f64>,
    /// The task's traces.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [Trace::Pde1, Trace::Pde2])]
    pub traces: Vec<Trace>,
    /// Repetitions of each point.
    #[arg(long, default_value_t = 3)]
    pub repetitions: u32,
    /// Seconds of trace per run.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Background sources, and how many of them send premium (DSCP EF).
    /// The paper's premium sources follow the switch's explicit rate; these
    /// do not, so by default one of twenty is premium: its peak (twice its
    /// share of the load while ON, 11 Mbit/s at ρ 1.1 on 100 Mbit/s) stays
    /// below the premium class's guaranteed fifth of the port.
    #[arg(long, default_value_t = 20)]
    pub sources: u32,
    #[arg(long, default_value_t = 1)]
    pub premium_sources: u32,
    /// Seed of the traces and of the background of the first repetition.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A short sweep: ρ 0.5 and 1.1, PDE2 only, 2 repetitions of 5 s.
    #[arg(long)]
    pub quick: bool,
    /// Where the CSV and the PNG go.
    #[arg(long, default_value = "out/service-switching-testbed")]
    pub out: PathBuf,
}

/// One job: the task's `trace` under `mode` with background at `load`.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub trace: Trace,
    pub load: f64,
    pub repetition: u32,
    pub mode: &'static str,
    pub seconds: f64,
    /// Seed of the trace (the same for every run of a trace) and of the
    /// background (one per repetition and load).
    pub trace_seed: u64,
    pub background_seed: u64,
}

impl Args {
    /// The runs, the three modes of one repetition next to each other.
    pub fn plan(&self) -> Result<Vec<Run>, String> {
        let (loads, traces, repetitions, seconds) = match self.quick {
            true => (vec![0.5, 1.1], vec![Trace::Pde2], 2, 5.0),
            false => (self.loads.clone(), self.traces.clone(), self.repetitions, self.seconds),
        };
        if loads.iter().any(|&l| !(l > 0.0 && l.is_finite())) {
            return Err("--loads must be positive".into());
        }
        if repetitions == 0 || seconds <= 0.0 || traces.is_empty() {
            return Err("at least one trace, one repetition and a positive --seconds are needed".into());
        }
        if self.premium_sources > self.sources {
            return Err("--premium-sources cannot exceed --sources".into());
        }
        let mut runs = Vec::new();
        for &trace in &traces {
            for (l, &load) in loads.iter().enumerate() {
                for repetition in 0..repetitions {
                    for mode in MODES {
                        runs.push(Run {
                            trace,
                            load,
                            repetition,
                            mode,
                            seconds,
                            trace_seed: self.seed,
                            background_seed: self.seed + 1000 * repetition as u64 + l as u64,
                        });
                    }
                }
            }
        }
        Ok(runs)
    }

    /// The background of `run`, as `lab background` would send it: it
    /// starts before the task and lasts past its end.
    pub fn background(&self, run: &Run) -> crate::background::Args {
        crate::background::Args {
            to: self.to.clone(),
            rate: self.rate,
            load: run.load,
            sources: self.sources,
            premium_sources: self.premium_sources,
            mean_ms: 10.0,
            seconds: run.seconds + 3.0,
            after: 0.0,
            size: 1400,
            seed: run.background_seed,
            from: Some(self.bind),
        }
    }
}

/// Runs every job of the plan: for each, the background is sent from this
/// process (from a thread, starting half a second before the task), and
/// `job` runs `bench trace` with the task's data on the given paths
/// (`BULKWIRE_PATHS`'s names) and returns rank 0's rows. `progress` hears
/// of each run before it starts. Writes the CSV and the plots into
/// `args.out`; returns the experiment's rows and the files written.
pub fn run(
    args: &Args,
    job: &mut dyn FnMut(&Bench, &str) -> Result<Report, String>,
    progress: &mut dyn FnMut(&str),
) -> Result<(Report, Vec<PathBuf>), String> {
    let plan = args.plan()?;
    let mut runs = Vec::new();
    for run in &plan {
        progress(&format!("{:?} ρ {} #{} {}", run.trace, run.load, run.repetition + 1, run.mode));
        let background = args.background(run);
        let sender = std::thread::spawn(move || crate::background::run(&background));
        std::thread::sleep(std::time::Duration::from_millis(500));
        let trace = bulkwire_bench::trace::Args {
            trace: run.trace,
            seconds: run.seconds,
            seed: run.trace_seed,
            load: Some(run.load),
        };
        let report = job(&Bench::Trace(trace), run.mode);
        sender.join().map_err(|_| "the background sender panicked".to_string())??;
        runs.extend(
            report.map_err(|e| format!("the task's job ({:?}, ρ {}, {}): {e}", run.trace, run.load, run.mode))?.rows,
        );
    }
    let notes = vec![format!(
        "one task across the test bed's {:.0} Mbit/s two-class port, {} ON-OFF background sources ({} premium), \
         {} runs",
        args.rate / 1e6,
        args.sources,
        args.premium_sources,
        runs.len()
    )];
    let report = aggregate(&runs, notes);
    let files = write_files(&report, &args.out)?;
    Ok((report, files))
}

fn trace_name(row: &Row) -> &str {
    row.text("trace").unwrap_or("-")
}

/// The experiment's rows from the per-run rows of `bench trace` (each with
/// its load): per trace, mode and load, the mean over repetitions of each
/// run's mean latency with its 90% confidence interval, and the means of
/// the rest.
pub fn aggregate(runs: &[Row], notes: Vec<String>) -> Report {
    let mut keys: Vec<(String, String, f64)> = Vec::new();
    for r in runs {
        let key = (trace_name(r).to_string(), r.what.clone(), r.load.unwrap_or(f64::NAN));
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut rows = Vec::new();
    for (trace, mode, load) in keys {
        let of: Vec<&Row> =
            runs.iter().filter(|r| trace_name(r) == trace && r.what == mode && r.load == Some(load)).collect();
        let values = |name: &str| -> Vec<f64> { of.iter().filter_map(|r| r.num(name)).collect() };
        let mean = |name: &str| Estimate::of(&values(name)).mean;
        let latency = Estimate::of(&values("latency_mean_us"));
        let share = Estimate::of(&values("share"));
        let messages: f64 = values("messages_count").iter().sum();
        let resent: f64 = values("retransmitted_packets").iter().sum();
        let premium = mean("premium_data_bits_per_s");
        let feedback = mean("feedback_bits_per_s");
        rows.push(
            Row::new(BENCH, "testbed", mode.as_str(), 2)
                .load(load)
                .with("trace", trace.as_str())
                .with("repetitions_count", of.len())
                .with_interval("latency_mean_us", latency.mean, latency.ci90)
                .with("latency_median_us", mean("latency_median_us"))
                .with("latency_p99_us", mean("latency_p99_us"))
                .with_interval("share", share.mean, share.ci90)
                .with("resent_per_message", if messages > 0.0 { resent / messages } else { 0.0 })
                .with("ordinary_data_bits_per_s", mean("ordinary_data_bits_per_s"))
                .with("premium_data_bits_per_s", premium)
                .with("feedback_bits_per_s", feedback)
                .with("feedback_of_premium_share", if premium > 0.0 { feedback / (premium + feedback) } else { 0.0 })
                .with("switches_to_premium_count", mean("switches_to_premium_count"))
                .with("messages_count", messages),
        );
    }
    Report { rows, notes }
}

/// "mean ± half-width" of `metric` in `row`.
fn interval(row: &Row, metric: &str, scale: f64, decimals: usize) -> String {
    match (row.num(metric), row.num(&format!("{metric}_lo")), row.num(&format!("{metric}_hi"))) {
        (Some(m), Some(lo), Some(hi)) => format!("{:.decimals$} ± {:.decimals$}", m * scale, (hi - lo) / 2.0 * scale),
        _ => "-".into(),
    }
}

/// The experiment's table.
pub fn table(report: &Report) -> String {
    let mut o = String::from(
        "# one task's trace across the test bed's congested port: mean task-to-task latency (ms, mean ± 90% \
         interval over repetitions), p99 (ms), premium share of its data, resent packets per message, bandwidth \
         per class (kbit/s, feedback both ways), switches to premium per run\n",
    );
    let mut traces: Vec<&str> = report.table(BENCH).map(trace_name).collect();
    traces.dedup();
    for trace in traces {
        o.push_str(&format!("## {trace}\n"));
        o.push_str(&format!(
            "{:>5} {:>9} {:>17} {:>8} {:>15} {:>7} {:>9} {:>9} {:>9} {:>6}\n",
            "load", "paths", "latency", "p99", "share", "resent", "ordinary", "premium", "feedback", "switch"
        ));
        for r in report.table(BENCH).filter(|r| trace_name(r) == trace) {
            let num = |name: &str| r.num(name).unwrap_or(f64::NAN);
            o.push_str(&format!(
                "{:>5.2} {:>9} {:>17} {:>8.2} {:>15} {:>7.3} {:>9.1} {:>9.1} {:>9.1} {:>6.1}\n",
                r.load.unwrap_or(f64::NAN),
                r.what,
                interval(r, "latency_mean_us", 1e-3, 3),
                num("latency_p99_us") / 1e3,
                interval(r, "share", 100.0, 1) + "%",
                num("resent_per_message"),
                num("ordinary_data_bits_per_s") / 1e3,
                num("premium_data_bits_per_s") / 1e3,
                num("feedback_bits_per_s") / 1e3,
                num("switches_to_premium_count"),
            ));
        }
    }
    o
}

const COLOURS: [plotters::style::RGBColor; 3] = [
    plotters::style::RGBColor(200, 60, 40),
    plotters::style::RGBColor(40, 90, 200),
    plotters::style::RGBColor(30, 150, 60),
];

/// Writes the rows as CSV and, per trace, the latency and the premium share
/// against the load as PNG into `out`; returns the files written.
pub fn write_files(report: &Report, out: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let csv = out.join("service-switching-testbed.csv");
    std::fs::write(&csv, report.csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut files = vec![csv];
    if !crate::plot::has_font() {
        return Ok(files);
    }
    let mut traces: Vec<&str> = report.table(BENCH).map(trace_name).collect();
    traces.dedup();
    for trace in traces {
        let rows: Vec<&Row> = report.table(BENCH).filter(|r| trace_name(r) == trace).collect();
        let loads: Vec<f64> = rows.iter().filter_map(|r| r.load).collect();
        let (lo, hi) = loads.iter().fold((f64::MAX, f64::MIN), |(a, b), &l| (a.min(l), b.max(l)));
        let x = (lo - 0.05)..(hi + 0.05);
        let mut latency = Vec::new();
        let mut share = Vec::new();
        let mut top: f64 = 0.0;
        for (mode, colour) in MODES.iter().zip(COLOURS) {
            let of: Vec<&&Row> = rows.iter().filter(|r| r.what == *mode).collect();
            let point = |r: &&&Row, name: &str, scale: f64| {
                let m = r.num(name).unwrap_or(0.0) * scale;
                let half = (r.num(&format!("{name}_hi")).unwrap_or(0.0) - r.num(&format!("{name}_lo")).unwrap_or(0.0))
                    / 2.0
                    * scale;
                (r.load.unwrap_or(0.0), m, half)
            };
            let lat: Vec<(f64, f64, f64)> = of.iter().map(|r| point(r, "latency_mean_us", 1e-3)).collect();
            // The scale follows premium and adaptive; ordinary's collapse
            // at high load would flatten them, so it leaves the chart.
            if *mode != "ordinary" {
                top = lat.iter().fold(top, |t, p| t.max(p.1 + p.2));
            }
            latency.push(Line {
                label: (*mode).to_string(),
                points: lat.iter().map(|p| (p.0, p.1)).collect(),
                colour,
                reference: false,
            });
            latency.extend(error_bars(&lat, colour, 0.01));
            share.push(Line {
                label: (*mode).to_string(),
                points: of.iter().map(|r| point(r, "share", 100.0)).map(|p| (p.0, p.1)).collect(),
                colour,
                reference: false,
            });
        }
        let panels = [
            Panel {
                title: format!("{trace}: mean task-to-task latency (ordinary clipped)"),
                x_label: "background load ρ".into(),
                y_label: "ms".into(),
                x: x.clone(),
                y: 0.0..(top * 1.5).max(0.1),
                lines: latency,
            },
            Panel {
                title: format!("{trace}: share of the task's data on premium"),
                x_label: "background load ρ".into(),
                y_label: "%".into(),
                x,
                y: 0.0..105.0,
                lines: share,
            },
        ];
        let png = out.join(format!("service-switching-testbed-{}.png", trace.to_ascii_lowercase()));
        write_png(&png, &panels, 1100, 420)?;
        files.push(png);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(quick: bool) -> Args {
        Args {
            hosts: "bwh0,bwh1".into(),
            ssh: "scripts/netns-exec".into(),
            bind: "10.90.0.254".parse().unwrap(),
            to: "10.90.0.2".into(),
            rate: 100e6,
            loads: vec![0.3, 1.1],
            traces: vec![Trace::Pde1, Trace::Pde2],
            repetitions: 2,
            seconds: 3.0,
            sources: 10,
            premium_sources: 2,
            seed: 1,
            quick,
            out: PathBuf::from("out"),
        }
    }

    #[test]
    fn the_plan_runs_every_mode_of_a_repetition_on_the_same_background() {
        let plan = args(false).plan().unwrap();
        assert_eq!(plan.len(), 2 * 2 * 2 * 3);
        for three in plan.chunks(3) {
            assert_eq!(three.iter().map(|r| r.mode).collect::<Vec<_>>(), MODES);
            assert!(three.iter().all(|r| r.background_seed == three[0].background_seed && r.load == three[0].load));
        }
        let seeds: std::collections::HashSet<u64> = plan.iter().map(|r| r.background_seed).collect();
        assert_eq!(seeds.len(), 4, "a background per load and repetition");
        assert_eq!(args(true).plan().unwrap().len(), 2 * 2 * 3);
        let mut bad = args(false);
        bad.premium_sources = 11;
        assert!(bad.plan().is_err());
        bad = args(false);
        bad.loads = vec![0.0];
        assert!(bad.plan().is_err());
    }

    #[test]
    fn runs_become_one_row_per_point_with_an_interval() {
        let run = |mode: &str, latency: f64, share: f64| {
            Row::new("trace", "bulkwire", mode, 2)
                .load(0.9)
                .with("trace", "PDE2")
                .with("latency_mean_us", latency)
                .with("share", share)
                .with("messages_count", 100u64)
                .with("retransmitted_packets", 5u64)
                .with("premium_data_bits_per_s", 1000.0)
                .with("feedback_bits_per_s", 100.0)
        };
        let runs = vec![run("ordinary", 900.0, 0.0), run("ordinary", 1100.0, 0.0), run("adaptive", 500.0, 0.5)];
        let report = aggregate(&runs, Vec::new());
        assert_eq!(report.rows.len(), 2);
        let ordinary = &report.rows[0];
        assert_eq!((ordinary.what.as_str(), ordinary.num("latency_mean_us")), ("ordinary", Some(1000.0)));
        let half = ordinary.num("latency_mean_us_hi").unwrap() - 1000.0;
        // Standard deviation 141.4, standard error 100, t(1) at 95% 6.314.
        assert!((half - 631.4).abs() < 1e-6, "{half}");
        assert_eq!(ordinary.num("resent_per_message"), Some(0.05));
        assert_eq!(report.rows[1].num("share"), Some(0.5));
        assert!(table(&report).contains("## PDE2"));
    }
}
