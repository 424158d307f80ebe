//! `bulkwire sim warp`: Warp rate control (seed 003 §3, §6.2) with n senders
//! into one FCFS server: does warp track ρ, does λ settle inside the stability
//! bound and oscillate outside it, and what the fairness term does for ten
//! senders (the paper's Figure 6). Rows of tables `warp-load`,
//! `warp-convergence` and `warp-fairness`; CSV files of the rows and of the
//! rates through each run, and PNG plots, in `--out`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bulkwire_bench::rows::{csv, Report, Row};
use bulkwire_proto::STABILITY_LIMIT;
use bulkwire_sim::warp::{ConvergenceRun, Lengths, Report as Runs, Service};

use crate::plot::{write_png, Line, Panel, PALETTE};
use crate::write;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Short runs (seconds instead of tens of seconds of simulated time).
    #[arg(long)]
    pub quick: bool,
    /// Where the CSV files and PNG plots go.
    #[arg(long, default_value = "out/warp")]
    pub out: PathBuf,
}

/// How many runs [`run`] makes (for a progress bar).
pub fn runs() -> usize {
    Runs::runs()
}

/// Runs the experiment, writes its files into `args.out` and returns the
/// rows and the files written. `progress` hears of each run as it ends.
pub fn run(args: &Args, progress: &mut dyn FnMut(&str)) -> Result<(Report, Vec<PathBuf>), String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let lengths = if args.quick { Lengths::quick() } else { Lengths::full() };
    let runs = Runs::measure(args.seed, lengths, progress);
    let report = rows(&runs);
    let files = write_files(&runs, &report, &args.out)?;
    Ok((report, files))
}

fn service_name(s: Service) -> &'static str {
    match s {
        Service::Fixed => "fixed",
        Service::Exponential => "exponential",
    }
}

/// The rows of the three tables.
fn rows(r: &Runs) -> Report {
    let procs = r.senders as u32;
    let mut rows = Vec::new();
    for p in &r.load {
        rows.push(
            Row::new("warp-load", "sim", "empty server", procs)
                .load(p.rho)
                .with("warp_mean", p.warp_empty)
                .with("warp_std", p.warp_empty_std)
                .with("utilisation_share", p.utilisation),
        );
        rows.push(
            Row::new("warp-load", "sim", "busy server", procs)
                .load(p.rho)
                .with("warp_mean", p.warp_busy)
                .with("warp_std", p.warp_busy_std),
        );
    }
    for c in &r.convergence {
        rows.push(
            Row::new("warp-convergence", "sim", format!("{}, {}", service_name(c.service), c.label), procs)
                .with("service", service_name(c.service))
                .with("case", c.label.as_str())
                .with("epsilon_multiple", c.epsilon_multiple)
                .with("epsilon_per_s2", c.epsilon)
                .with("start_rate_of_mu", c.start)
                .with("product_base", c.product_base)
                .with("product_predicted", c.product_predicted)
                .with("stable", c.product_predicted < STABILITY_LIMIT)
                .with("loop_delay_ms", c.loop_delay * 1e3)
                .with("product_measured", c.product_measured)
                .with("rate_mean_of_mu", c.rate_mean)
                .with("rate_std_of_mu", c.rate_std)
                .with("rate_min_of_mu", c.rate_min)
                .with("rate_max_of_mu", c.rate_max)
                .with("utilisation_share", c.utilisation)
                .with("warp_mean", c.warp_mean)
                .with("one_way_delay_ms", c.one_way_delay * 1e3),
        );
    }
    for f in &r.fairness {
        rows.push(
            Row::new("warp-fairness", "sim", if f.fairness { "with fairness" } else { "without fairness" }, procs)
                .with("fairness", f.fairness)
                .with("jain_index", f.jain)
                .with("cv", f.cv)
                .with("rate_min_of_mu", f.min_rate)
                .with("rate_max_of_mu", f.max_rate)
                .with("rate_total_of_mu", f.total)
                .with("utilisation_share", f.utilisation)
                .with("one_way_delay_ms", f.one_way_delay * 1e3),
        );
    }
    let mut notes = vec![format!(
        "{} senders into one FCFS server, μ = {} messages/s, loop delay with empty queues {:.0} ms, seed {}{}",
        r.senders,
        r.service_rate,
        r.base_loop_delay * 1e3,
        r.seed,
        if r.lengths == Lengths::quick() { " (quick)" } else { "" }
    )];
    if let Some(f) = r.fairness.first() {
        let demands: Vec<String> = f.demands.iter().map(|d| format!("{d:.3}")).collect();
        notes.push(format!("fairness: demands/μ of the ten senders: {}", demands.join(" ")));
    }
    Report { rows, notes }
}

/// The tables, as text.
pub fn table(report: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Warp rate control: {}", report.notes.first().map_or("", String::as_str));
    let _ = writeln!(o, "\n## warp against offered load ρ (fixed rates, no control; exponential service)");
    let _ = writeln!(o, "{:>5} {:>21} {:>21} {:>12}", "ρ", "warp, busy server", "warp, empty start", "utilisation");
    let busy: Vec<&Row> = report.table("warp-load").filter(|r| r.what == "busy server").collect();
    for b in busy {
        let Some(e) = report.table("warp-load").find(|r| r.what == "empty server" && r.load == b.load) else {
            continue;
        };
        let n = |r: &Row, name: &str| r.num(name).unwrap_or(f64::NAN);
        let _ = writeln!(
            o,
            "{:>5.1} {:>13.3} ± {:<5.3} {:>13.3} ± {:<5.3} {:>12.3}",
            b.load.unwrap_or(f64::NAN),
            n(b, "warp_mean"),
            n(b, "warp_std"),
            n(e, "warp_mean"),
            n(e, "warp_std"),
            n(e, "utilisation_share")
        );
    }
    let _ = writeln!(
        o,
        "\n## total rate Σλ/μ under Warp control over the second half (ε as a multiple of the critical ε for the empty loop)"
    );
    let _ = writeln!(
        o,
        "{:<12} {:<20} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>10}",
        "service",
        "case",
        "start",
        "τ₀ε/μ",
        "τ*ε/μ",
        "stable",
        "τ (ms)",
        "mean",
        "std",
        "min",
        "max",
        "util",
        "delay (ms)"
    );
    for c in report.table("warp-convergence") {
        let n = |name: &str| c.num(name).unwrap_or(f64::NAN);
        let _ = writeln!(
            o,
            "{:<12} {:<20} {:>6.2} {:>7.2} {:>7.2} {:>7} {:>7.1} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>6.3} {:>10.1}",
            c.text("service").unwrap_or("-"),
            c.text("case").unwrap_or("-"),
            n("start_rate_of_mu"),
            n("product_base"),
            n("product_predicted"),
            if n("stable") == 1.0 { "yes" } else { "no" },
            n("loop_delay_ms"),
            n("rate_mean_of_mu"),
            n("rate_std_of_mu"),
            n("rate_min_of_mu"),
            n("rate_max_of_mu"),
            n("utilisation_share"),
            n("one_way_delay_ms")
        );
    }
    let _ = writeln!(
        o,
        "τ*ε/μ = τ₀ε/μ + (start − 1): equation 2 at the standing queue Warp settles with; stable: τ*ε/μ < π/2; τ: loop delay seen"
    );
    let _ = writeln!(o, "\n## ten senders with demands of 0.1μ to 0.2μ, second half (λ/μ per sender)");
    let _ = writeln!(
        o,
        "{:<9} {:>7} {:>7} {:>9} {:>9} {:>7} {:>7} {:>11}",
        "fairness", "Jain", "CV", "min λ/μ", "max λ/μ", "Σλ/μ", "util", "delay (ms)"
    );
    for f in report.table("warp-fairness") {
        let n = |name: &str| f.num(name).unwrap_or(f64::NAN);
        let _ = writeln!(
            o,
            "{:<9} {:>7.3} {:>7.3} {:>9.3} {:>9.3} {:>7.3} {:>7.3} {:>11.1}",
            if n("fairness") == 1.0 { "with" } else { "without" },
            n("jain_index"),
            n("cv"),
            n("rate_min_of_mu"),
            n("rate_max_of_mu"),
            n("rate_total_of_mu"),
            n("utilisation_share"),
            n("one_way_delay_ms")
        );
    }
    for note in report.notes.iter().skip(1) {
        let _ = writeln!(o, "{note}");
    }
    o
}

fn write_files(r: &Runs, report: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for bench in ["warp-load", "warp-convergence", "warp-fairness"] {
        files.push(dir.join(format!("{bench}.csv")));
        write(files.last().unwrap(), &csv(report.table(bench)))?;
    }

    let mut trace = String::from("service,case,time_s,total_rate_of_mu,queue_messages\n");
    for c in &r.convergence {
        for (t, total, queue) in &c.trace {
            let _ = writeln!(trace, "{},{},{:.4},{:.6},{}", service_name(c.service), c.label, t, total, queue);
        }
    }
    files.push(dir.join("warp-convergence-trace.csv"));
    write(files.last().unwrap(), &trace)?;

    let mut trace = String::from("fairness,time_s");
    for i in 0..r.senders {
        let _ = write!(trace, ",sender{i}_rate_of_mu");
    }
    trace.push('\n');
    for f in &r.fairness {
        for (t, rates) in &f.trace {
            let _ = write!(trace, "{},{t:.4}", f.fairness);
            for x in rates {
                let _ = write!(trace, ",{x:.6}");
            }
            trace.push('\n');
        }
    }
    files.push(dir.join("warp-fairness-trace.csv"));
    write(files.last().unwrap(), &trace)?;

    files.push(dir.join("warp-load.png"));
    write_png(files.last().unwrap(), &[load_panel(report)], 760, 480)?;
    files.push(dir.join("warp-convergence.png"));
    let panels: Vec<Panel> =
        [Service::Fixed, Service::Exponential].into_iter().map(|s| convergence_panel(r, s)).collect();
    write_png(files.last().unwrap(), &panels, 1300, 480)?;
    files.push(dir.join("warp-fairness.png"));
    let panels: Vec<Panel> = r
        .fairness
        .iter()
        .map(|f| {
            // The first 10 s, at most 1000 points a line.
            let end = f.trace.last().map_or(1.0, |p| p.0).min(10.0);
            let shown: Vec<&(f64, Vec<f64>)> = f.trace.iter().filter(|p| p.0 <= end).collect();
            let stride = shown.len().div_ceil(1000).max(1);
            Panel {
                title: format!("{} the fairness term: senders 0-4", if f.fairness { "with" } else { "without" }),
                x_label: "time (s)".into(),
                y_label: "λᵢ/μ".into(),
                x: 0.0..end,
                y: 0.0..0.22,
                lines: (0..5.min(r.senders))
                    .map(|i| Line {
                        label: format!("sender {i}"),
                        points: shown.iter().step_by(stride).map(|(t, rates)| (*t, rates[i])).collect(),
                        colour: PALETTE[i % PALETTE.len()],
                        reference: false,
                    })
                    .collect(),
            }
        })
        .collect();
    write_png(files.last().unwrap(), &panels, 1300, 480)?;
    Ok(files)
}

/// Mean warp against ρ, from the rows of `warp-load`.
fn load_panel(report: &Report) -> Panel {
    let series = |what: &str| -> Vec<(f64, f64)> {
        report
            .table("warp-load")
            .filter(|r| r.what == what)
            .filter_map(|r| Some((r.load?, r.num("warp_mean")?)))
            .collect()
    };
    let (busy, empty) = (series("busy server"), series("empty server"));
    let top = busy.iter().chain(&empty).map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let last = busy.last().map_or(1.0, |p| p.0);
    Panel {
        title: "mean warp against offered load".into(),
        x_label: "offered load ρ = λ/μ".into(),
        y_label: "mean warp".into(),
        x: 0.0..last * 1.05,
        y: 0.0..top,
        lines: vec![
            Line { label: "server kept busy".into(), points: busy, colour: PALETTE[0], reference: false },
            Line { label: "empty server at start".into(), points: empty, colour: PALETTE[1], reference: false },
            Line {
                label: "warp = ρ".into(),
                points: vec![(0.0, 0.0), (top, top)],
                colour: PALETTE[5],
                reference: true,
            },
        ],
    }
}
/// Σλ/μ over the first 1.5 s for a few ε, one kind of service.
fn convergence_panel(r: &Runs, service: Service) -> Panel {
    let shown = ["ε ×0.25", "ε ×0.5", "ε ×0.75", "ε ×1.5"];
    let runs: Vec<&ConvergenceRun> =
        shown.iter().filter_map(|l| r.convergence.iter().find(|c| c.service == service && c.label == *l)).collect();
    let end = 1.5;
    let mut lines: Vec<Line> = runs
        .iter()
        .enumerate()
        .map(|(k, c)| Line {
            label: format!("{} (τ*ε/μ = {:.2})", c.label, c.product_predicted),
            points: c.trace.iter().filter(|p| p.0 <= end).map(|p| (p.0, p.1)).collect(),
            colour: PALETTE[k % PALETTE.len()],
            reference: false,
        })
        .collect();
    lines.push(Line {
        label: String::new(),
        points: vec![(0.0, 1.0), (end, 1.0)],
        colour: PALETTE[5],
        reference: true,
    });
    Panel {
        title: format!("total rate under Warp, {} service", service_name(service)),
        x_label: "time (s)".into(),
        y_label: "Σλ/μ".into(),
        x: 0.0..end,
        y: 0.0..1.9,
        lines,
    }
}
