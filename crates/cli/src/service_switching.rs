//! `bulkwire sim service-switching`: a parallel task's traffic across a
//! congested cell switch with ordinary-only, premium-only and LME/ECE
//! service (seed 000 §4): latency (Figure 7), cell loss (Figure 8), premium
//! share (Figure 9) against the background load ρ, and bandwidth per class
//! at the paper's loads (Tables 3 and 4) beside the paper's figures. Tables
//! on stdout, CSV and PNG in `--out`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bulkwire_sim::service_switching::{table_loads, Estimate, Lengths, Mode, Point, Report};
use bulkwire_sim::traces::TraceKind;
use indicatif::{ProgressBar, ProgressStyle};

use crate::plot::{error_bars, write_png, Line, Panel, PALETTE};

#[derive(clap::Args)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A small run: two loads besides the table loads, two repetitions of 2 s.
    #[arg(long)]
    quick: bool,
    /// Repetitions per point (overrides the default of the run size).
    #[arg(long)]
    repetitions: Option<usize>,
    /// Seconds of trace per run (overrides the default of the run size).
    #[arg(long)]
    seconds: Option<f64>,
    /// Where the CSV files and PNG plots go.
    #[arg(long, default_value = "out/service-switching")]
    out: PathBuf,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<(), String> {
    let mut lengths = if args.quick { Lengths::quick() } else { Lengths::full() };
    if let Some(r) = args.repetitions {
        lengths.repetitions = r.max(1);
    }
    if let Some(s) = args.seconds {
        if !(s > 0.0 && s.is_finite()) {
            return Err(format!("--seconds {s}: must be positive"));
        }
        lengths.duration = std::time::Duration::from_secs_f64(s);
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let progress = ProgressBar::new(lengths.runs() as u64);
    progress.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let report = Report::measure(args.seed, &lengths, &mut |what| {
        progress.set_message(what.to_string());
        progress.inc(1);
    });
    progress.finish_and_clear();

    let files = write_files(&report, &args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", tables(&report, args.quick));
    }
    eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}

/// The paper's Tables 3 and 4 (Kb/s): (ρ, [UBR, ABR, VBR] for UBR only, ABR
/// only, LME/ECE); `None` where the paper has no entry.
type PaperRow = (f64, [[Option<f64>; 3]; 3]);

fn paper_table(trace: TraceKind) -> [PaperRow; 2] {
    match trace {
        TraceKind::Pde1 => [
            (0.7, [[Some(278.8), None, None], [None, Some(275.0), None], [Some(154.0), Some(122.0), Some(5.0)]]),
            (1.0, [[Some(308.9), None, None], [None, Some(275.0), None], [Some(88.9), Some(190.2), Some(5.1)]]),
        ],
        TraceKind::Pde2 => [
            (0.65, [[Some(285.9), None, None], [None, Some(289.0), None], [Some(216.0), Some(107.6), Some(7.1)]]),
            (1.0, [[Some(338.9), None, None], [None, Some(289.0), None], [Some(103.6), Some(224.5), Some(6.0)]]),
        ],
    }
}

fn est(e: &Estimate, scale: f64, decimals: usize) -> String {
    format!("{:.*} ± {:.*}", decimals, e.mean * scale, decimals, e.ci90 * scale)
}

fn tables(r: &Report, quick: bool) -> String {
    let mut o = String::new();
    let n = &r.network;
    let _ = writeln!(
        o,
        "# Service switching: one task across a 155 Mb/s cell switch, {}-cell shared buffer, {} ON-OFF background \
         sources ({} premium), {} repetitions of {:.0} s, seed {}{}",
        n.buffer_cells,
        n.background.sources,
        n.background.premium_sources,
        r.lengths.repetitions,
        r.lengths.duration.as_secs_f64(),
        r.seed,
        if quick { " (quick)" } else { "" }
    );
    let _ = writeln!(o, "# mean ± half-width of the 90% confidence interval over repetitions");
    type Column = (&'static str, fn(&Point) -> String);
    let sections: [(&str, Column); 3] = [
        ("task-to-task latency, ms (Figure 7)", ("latency", |p| est(&p.latency_ms, 1.0, 3))),
        ("cell loss ratio of the task's data cells (Figure 8)", ("loss", |p| est(&p.cell_loss, 1.0, 4))),
        ("share of the task's data cells sent as premium (Figure 9)", ("share", |p| est(&p.premium_share, 1.0, 3))),
    ];
    for (title, (_, cell)) in sections {
        for trace in TraceKind::ALL {
            let _ = writeln!(o, "\n## {}: {title}", trace.name());
            let _ = write!(o, "{:>5}", "ρ");
            for mode in Mode::ALL {
                let _ = write!(o, " {:>22}", mode.name());
            }
            let _ = writeln!(o);
            for load in loads(r, trace) {
                let _ = write!(o, "{load:>5.2}");
                for mode in Mode::ALL {
                    let text = r.point(trace, mode, load).map_or_else(|| "-".into(), cell);
                    let _ = write!(o, " {text:>22}");
                }
                let _ = writeln!(o);
            }
        }
    }
    for trace in TraceKind::ALL {
        let number = if trace == TraceKind::Pde1 { 3 } else { 4 };
        let _ = writeln!(o, "\n## {}: bandwidth per class, Kb/s (Table {number}; paper in brackets)", trace.name());
        let _ =
            writeln!(o, "{:>5} {:<10} {:>18} {:>18} {:>18}", "ρ", "class", "ordinary only", "premium only", "LME/ECE");
        let paper = paper_table(trace);
        for (row, load) in table_loads(trace).into_iter().enumerate() {
            let points: Vec<Option<&Point>> = Mode::ALL.iter().map(|&m| r.point(trace, m, load)).collect();
            // Name, value, and the paper's column (ordinary, premium, feedback).
            type Class = (&'static str, fn(&Point) -> f64, Option<usize>);
            let classes: [Class; 5] = [
                ("ordinary", |p| p.rates.ordinary, Some(0)),
                ("premium", |p| p.rates.premium, Some(1)),
                ("total", |p| p.rates.ordinary + p.rates.premium, None),
                ("feedback", |p| p.rates.feedback, Some(2)),
                ("RM", |p| p.rates.rm, None),
            ];
            for (name, value, paper_class) in classes {
                let _ = write!(o, "{load:>5.2} {name:<10}");
                for (m, p) in points.iter().enumerate() {
                    let ours = p.map_or_else(|| "-".into(), |p| format!("{:.1}", value(p)));
                    let reference = match paper_class {
                        Some(c) => paper[row].1[m][c],
                        None if name == "total" => {
                            let [u, a, _] = paper[row].1[m];
                            (u.is_some() || a.is_some()).then(|| u.unwrap_or(0.0) + a.unwrap_or(0.0))
                        }
                        None => None,
                    };
                    let reference = reference.map_or_else(|| "[-]".into(), |v| format!("[{v:.1}]"));
                    let _ = write!(o, " {ours:>9} {reference:>8}");
                }
                let _ = writeln!(o);
            }
        }
    }
    let _ = writeln!(o, "\n## context: premium share of feedback, mode switches, background and messages");
    let _ = writeln!(
        o,
        "{:<5} {:>5} {:<14} {:>13} {:>9} {:>9} {:>10} {:>8} {:>12}",
        "trace", "ρ", "mode", "feedback/prem", "switches", "retx", "bg UBR loss", "util", "undelivered"
    );
    for p in &r.points {
        let ratio =
            if p.rates.premium > 0.0 { format!("{:.3}", p.rates.feedback / p.rates.premium) } else { "-".into() };
        let _ = writeln!(
            o,
            "{:<5} {:>5.2} {:<14} {:>13} {:>9.1} {:>9.1} {:>10.4} {:>8.3} {:>6}/{:<6}",
            p.trace.name(),
            p.load,
            p.mode.name(),
            ratio,
            p.mode_switches,
            p.retransmissions,
            p.background_ordinary_loss,
            p.utilisation,
            p.undelivered,
            p.messages
        );
    }
    o
}

fn loads(r: &Report, trace: TraceKind) -> Vec<f64> {
    r.lengths.loads_for(trace)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_files(r: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut csv = String::from(
        "trace,mode,rho,latency_ms,latency_ms_ci90,cell_loss,cell_loss_ci90,premium_share,premium_share_ci90,\
         ordinary_kbps,premium_kbps,feedback_kbps,rm_kbps,mode_switches,retransmissions,undelivered,messages,\
         background_ordinary_loss,utilisation\n",
    );
    for p in &r.points {
        let _ = writeln!(
            csv,
            "{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3},{:.3},{:.3},{:.2},{:.2},{},{},{:.6},{:.6}",
            p.trace.name(),
            p.mode.name(),
            p.load,
            p.latency_ms.mean,
            p.latency_ms.ci90,
            p.cell_loss.mean,
            p.cell_loss.ci90,
            p.premium_share.mean,
            p.premium_share.ci90,
            p.rates.ordinary,
            p.rates.premium,
            p.rates.feedback,
            p.rates.rm,
            p.mode_switches,
            p.retransmissions,
            p.undelivered,
            p.messages,
            p.background_ordinary_loss,
            p.utilisation
        );
    }
    files.push(dir.join("service_switching.csv"));
    write(files.last().unwrap(), &csv)?;

    let mut csv = String::from("trace,rho,class,mode,kbps,paper_kbps\n");
    for trace in TraceKind::ALL {
        let paper = paper_table(trace);
        for (row, load) in table_loads(trace).into_iter().enumerate() {
            for (m, &mode) in Mode::ALL.iter().enumerate() {
                let Some(p) = r.point(trace, mode, load) else { continue };
                let values =
                    [("ordinary", p.rates.ordinary), ("premium", p.rates.premium), ("feedback", p.rates.feedback)];
                for (c, (class, kbps)) in values.into_iter().enumerate() {
                    let reference = paper[row].1[m][c].map_or_else(String::new, |v| v.to_string());
                    let _ = writeln!(csv, "{},{load},{class},{},{kbps:.3},{reference}", trace.name(), mode.name());
                }
            }
        }
    }
    files.push(dir.join("service_switching_bandwidth.csv"));
    write(files.last().unwrap(), &csv)?;

    type Metric = fn(&Point) -> Estimate;
    let figures: [(&str, &str, &str, Metric, bool); 3] = [
        ("service-switching-latency.png", "task-to-task latency", "mean latency (ms)", |p| p.latency_ms, false),
        ("service-switching-loss.png", "cell loss ratio", "cell loss ratio", |p| p.cell_loss, false),
        ("service-switching-premium.png", "premium share of data cells", "share on premium", |p| p.premium_share, true),
    ];
    for (file, title, y_label, metric, unit_range) in figures {
        let panels: Vec<Panel> =
            TraceKind::ALL.iter().map(|&t| figure_panel(r, t, title, y_label, metric, unit_range)).collect();
        files.push(dir.join(file));
        write_png(files.last().unwrap(), &panels, 1300, 480)?;
    }
    Ok(files)
}

fn figure_panel(
    r: &Report,
    trace: TraceKind,
    title: &str,
    y_label: &str,
    metric: fn(&Point) -> Estimate,
    unit_range: bool,
) -> Panel {
    let loads = loads(r, trace);
    let mut lines = Vec::new();
    let mut top: f64 = 0.0;
    for (k, &mode) in Mode::ALL.iter().enumerate() {
        let points: Vec<(f64, f64, f64)> = loads
            .iter()
            .filter_map(|&l| r.point(trace, mode, l))
            .map(|p| (p.load, metric(p).mean, metric(p).ci90))
            .collect();
        top = points.iter().map(|&(_, m, c)| m + c).fold(top, f64::max);
        lines.push(Line {
            label: mode.name().into(),
            points: points.iter().map(|&(x, y, _)| (x, y)).collect(),
            colour: PALETTE[k],
            reference: false,
        });
        // Each mode's bars a little apart, so that they do not hide each other.
        let offset = (k as f64 - 1.0) * 0.006;
        let bars: Vec<(f64, f64, f64)> = points.iter().map(|&(x, y, c)| (x + offset, y, c)).collect();
        lines.extend(error_bars(&bars, PALETTE[k], 0.005));
    }
    let x0 = loads.first().copied().unwrap_or(0.3) - 0.05;
    let x1 = loads.last().copied().unwrap_or(1.1) + 0.05;
    Panel {
        title: format!("{}: {title}", trace.name()),
        x_label: "background load ρ".into(),
        y_label: y_label.into(),
        x: x0..x1,
        y: 0.0..if unit_range { 1.05 } else { (top * 1.15).max(1e-6) },
        lines,
    }
}
