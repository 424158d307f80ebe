//! `bulkwire sim service-switching`: a parallel task's traffic across a
//! congested cell switch with ordinary-only, premium-only and LME/ECE
//! service (seed 000 §4): latency (Figure 7), cell loss (Figure 8), premium
//! share (Figure 9) against the background load ρ, and bandwidth per class
//! at the paper's loads (Tables 3 and 4) beside the paper's figures. Rows of
//! table `service-switching` (source `sim`, and `paper` for the paper's
//! bandwidths); its CSV file and PNG plots in `--out`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bulkwire_bench::rows::{csv, Report, Row};
use bulkwire_sim::service_switching::{default_sample_lifetime, table_loads, Lengths, Mode, Report as Runs};
use bulkwire_sim::traces::TraceKind;

use crate::plot::{error_bars, write_png, Line, Panel, PALETTE};
use crate::write;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A small run: two loads besides the table loads, two repetitions of 2 s.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per point (overrides the default of the run size).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Seconds of trace per run (overrides the default of the run size).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Where the CSV file and PNG plots go.
    #[arg(long, default_value = "out/service-switching")]
    pub out: PathBuf,
    /// How long LME/ECE believes a sample of the ordinary path, in ms:
    /// probes every this often while data flows on the premium path, and
    /// data after this much silence starts on the premium path until the
    /// receiver answers. 0 believes a sample until the next, as the paper's
    /// engine does. Default: a fifth of the monitoring interval (20 ms).
    #[arg(long, value_name = "MS")]
    pub sample_lifetime: Option<f64>,
}

const BENCH: &str = "service-switching";

impl Args {
    fn sample_lifetime(&self) -> Result<Option<std::time::Duration>, String> {
        match self.sample_lifetime {
            None => Ok(default_sample_lifetime()),
            Some(0.0) => Ok(None),
            Some(ms) if ms > 0.0 && ms.is_finite() && ms <= 3_600_000.0 => {
                Ok(Some(std::time::Duration::from_secs_f64(ms / 1e3)))
            }
            Some(ms) => Err(format!("--sample-lifetime {ms}: expected milliseconds, 0 or more")),
        }
    }

    fn lengths(&self) -> Result<Lengths, String> {
        let mut lengths = if self.quick { Lengths::quick() } else { Lengths::full() };
        if let Some(r) = self.repetitions {
            lengths.repetitions = r.max(1);
        }
        if let Some(s) = self.seconds {
            if !(s > 0.0 && s.is_finite()) {
                return Err(format!("--seconds {s}: must be positive"));
            }
            lengths.duration = std::time::Duration::from_secs_f64(s);
        }
        Ok(lengths)
    }

    /// How many runs [`run`] makes (for a progress bar).
    pub fn runs(&self) -> Result<usize, String> {
        Ok(self.lengths()?.runs())
    }
}

/// Runs the experiment, writes its files into `args.out` and returns the
/// rows and the files written. `progress` hears of each run as it ends.
pub fn run(args: &Args, progress: &mut dyn FnMut(&str)) -> Result<(Report, Vec<PathBuf>), String> {
    let lengths = args.lengths()?;
    let lifetime = args.sample_lifetime()?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let runs = Runs::measure(args.seed, &lengths, lifetime, progress);
    let report = rows(&runs, args.quick);
    let files = write_files(&report, &args.out)?;
    Ok((report, files))
}

fn what(trace: TraceKind, mode: Mode) -> String {
    format!("{}, {}", trace.name(), mode.name())
}

/// A row per point of the simulation, and a row per figure of the paper's
/// Tables 3 and 4.
fn rows(r: &Runs, quick: bool) -> Report {
    let mut rows = Vec::new();
    for p in &r.points {
        rows.push(
            Row::new(BENCH, "sim", what(p.trace, p.mode), 2)
                .load(p.load)
                .with("trace", p.trace.name())
                .with("mode", p.mode.name())
                .with_interval("latency_ms", p.latency_ms.mean, p.latency_ms.ci90)
                .with_interval("cell_loss_share", p.cell_loss.mean, p.cell_loss.ci90)
                .with_interval("premium_share", p.premium_share.mean, p.premium_share.ci90)
                .with("ordinary_kbps", p.rates.ordinary)
                .with("premium_kbps", p.rates.premium)
                .with("feedback_kbps", p.rates.feedback)
                .with("rm_kbps", p.rates.rm)
                .with("mode_switches_count", p.mode_switches)
                .with("retransmissions_count", p.retransmissions)
                .with("undelivered_messages", p.undelivered)
                .with("sent_messages", p.messages)
                .with("background_ordinary_loss_share", p.background_ordinary_loss)
                .with("utilisation_share", p.utilisation),
        );
    }
    for trace in TraceKind::ALL {
        for (load, modes) in paper_table(trace) {
            for (m, &mode) in Mode::ALL.iter().enumerate() {
                let [ordinary, premium, feedback] = modes[m];
                rows.push(
                    Row::new(BENCH, "paper", what(trace, mode), 2)
                        .load(load)
                        .with("trace", trace.name())
                        .with("mode", mode.name())
                        .with_opt("ordinary_kbps", ordinary)
                        .with_opt("premium_kbps", premium)
                        .with_opt("feedback_kbps", feedback),
                );
            }
        }
    }
    let n = &r.network;
    let notes = vec![format!(
        "one task across a 155 Mb/s cell switch, {}-cell shared buffer, {} ON-OFF background sources ({} premium), \
         {} repetitions of {:.0} s, seed {}; LME/ECE: Table 2, {}{}",
        n.buffer_cells,
        n.background.sources,
        n.background.premium_sources,
        r.lengths.repetitions,
        r.lengths.duration.as_secs_f64(),
        r.seed,
        match r.sample_lifetime {
            Some(l) => format!("samples believed for {} ms", l.as_secs_f64() * 1e3),
            None => "samples believed until the next (the paper's engine)".into(),
        },
        if quick { " (quick)" } else { "" }
    )];
    Report { rows, notes }
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

/// The sim row of `trace`, `mode` at `load`.
fn point<'a>(report: &'a Report, source: &str, trace: TraceKind, mode: Mode, load: f64) -> Option<&'a Row> {
    report.table(BENCH).find(|r| r.source == source && r.what == what(trace, mode) && r.load == Some(load))
}

/// The loads simulated for `trace`, in order.
fn loads(report: &Report, trace: TraceKind) -> Vec<f64> {
    let mut loads: Vec<f64> = report
        .table(BENCH)
        .filter(|r| r.source == "sim" && r.text("trace") == Some(trace.name()))
        .filter_map(|r| r.load)
        .collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    loads
}

/// `metric` of `row` as "mean ± half-width of its interval".
fn estimate(row: &Row, metric: &str, decimals: usize) -> String {
    let (Some(mean), Some(lo), Some(hi)) =
        (row.num(metric), row.num(&format!("{metric}_lo")), row.num(&format!("{metric}_hi")))
    else {
        return "-".into();
    };
    format!("{mean:.decimals$} ± {:.decimals$}", (hi - lo) / 2.0)
}

/// The tables, as text.
pub fn table(report: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Service switching: {}", report.notes.first().map_or("", String::as_str));
    let _ = writeln!(o, "# mean ± half-width of the 90% confidence interval over repetitions");
    let sections: [(&str, &str, usize); 3] = [
        ("task-to-task latency, ms (Figure 7)", "latency_ms", 3),
        ("cell loss ratio of the task's data cells (Figure 8)", "cell_loss_share", 4),
        ("share of the task's data cells sent as premium (Figure 9)", "premium_share", 3),
    ];
    for (title, metric, decimals) in sections {
        for trace in TraceKind::ALL {
            let _ = writeln!(o, "\n## {}: {title}", trace.name());
            let _ = write!(o, "{:>5}", "ρ");
            for mode in Mode::ALL {
                let _ = write!(o, " {:>22}", mode.name());
            }
            let _ = writeln!(o);
            for load in loads(report, trace) {
                let _ = write!(o, "{load:>5.2}");
                for mode in Mode::ALL {
                    let text = point(report, "sim", trace, mode, load)
                        .map_or_else(|| "-".into(), |r| estimate(r, metric, decimals));
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
        for load in table_loads(trace) {
            let classes: [(&str, &[&str]); 5] = [
                ("ordinary", &["ordinary_kbps"]),
                ("premium", &["premium_kbps"]),
                ("total", &["ordinary_kbps", "premium_kbps"]),
                ("feedback", &["feedback_kbps"]),
                ("RM", &["rm_kbps"]),
            ];
            for (name, columns) in classes {
                let _ = write!(o, "{load:>5.2} {name:<10}");
                for mode in Mode::ALL {
                    // A sum over the columns the row has; none where it has none of them.
                    let sum = |row: Option<&Row>| -> Option<f64> {
                        let values: Vec<f64> = columns.iter().filter_map(|c| row?.num(c)).collect();
                        (!values.is_empty()).then(|| values.iter().sum())
                    };
                    let ours = sum(point(report, "sim", trace, mode, load));
                    let paper = sum(point(report, "paper", trace, mode, load));
                    let ours = ours.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
                    let paper = paper.map_or_else(|| "[-]".into(), |v| format!("[{v:.1}]"));
                    let _ = write!(o, " {ours:>9} {paper:>8}");
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
    for p in report.table(BENCH).filter(|r| r.source == "sim") {
        let n = |name: &str| p.num(name).unwrap_or(f64::NAN);
        let ratio =
            if n("premium_kbps") > 0.0 { format!("{:.3}", n("feedback_kbps") / n("premium_kbps")) } else { "-".into() };
        let _ = writeln!(
            o,
            "{:<5} {:>5.2} {:<14} {:>13} {:>9.1} {:>9.1} {:>10.4} {:>8.3} {:>6}/{:<6}",
            p.text("trace").unwrap_or("-"),
            p.load.unwrap_or(f64::NAN),
            p.text("mode").unwrap_or("-"),
            ratio,
            n("mode_switches_count"),
            n("retransmissions_count"),
            n("background_ordinary_loss_share"),
            n("utilisation_share"),
            n("undelivered_messages"),
            n("sent_messages")
        );
    }
    o
}

fn write_files(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![dir.join("service-switching.csv")];
    write(&files[0], &csv(report.table(BENCH)))?;
    let figures: [(&str, &str, &str, &str, bool); 3] = [
        ("service-switching-latency.png", "task-to-task latency", "mean latency (ms)", "latency_ms", false),
        ("service-switching-loss.png", "cell loss ratio", "cell loss ratio", "cell_loss_share", false),
        ("service-switching-premium.png", "premium share of data cells", "share on premium", "premium_share", true),
    ];
    for (file, title, y_label, metric, unit_range) in figures {
        let panels: Vec<Panel> =
            TraceKind::ALL.iter().map(|&t| figure_panel(report, t, title, y_label, metric, unit_range)).collect();
        files.push(dir.join(file));
        write_png(files.last().unwrap(), &panels, 1300, 480)?;
    }
    Ok(files)
}

fn figure_panel(
    report: &Report,
    trace: TraceKind,
    title: &str,
    y_label: &str,
    metric: &str,
    unit_range: bool,
) -> Panel {
    let loads = loads(report, trace);
    let mut lines = Vec::new();
    let mut top: f64 = 0.0;
    let (lo, hi) = (format!("{metric}_lo"), format!("{metric}_hi"));
    for (k, &mode) in Mode::ALL.iter().enumerate() {
        let points: Vec<(f64, f64, f64)> = loads
            .iter()
            .filter_map(|&l| point(report, "sim", trace, mode, l))
            .filter_map(|r| Some((r.load?, r.num(metric)?, (r.num(&hi)? - r.num(&lo)?) / 2.0)))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn args(lifetime: Option<f64>) -> Args {
        Args {
            seed: 1,
            quick: true,
            repetitions: None,
            seconds: None,
            out: PathBuf::from("unused"),
            sample_lifetime: lifetime,
        }
    }

    #[test]
    fn the_sample_lifetime_is_read_and_checked() {
        assert_eq!(args(None).sample_lifetime(), Ok(Some(Duration::from_millis(20))), "a fifth of 100 ms");
        assert_eq!(args(Some(0.0)).sample_lifetime(), Ok(None), "the paper's engine");
        assert_eq!(args(Some(2.5)).sample_lifetime(), Ok(Some(Duration::from_micros(2500))));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = args(Some(bad)).sample_lifetime().unwrap_err();
            assert!(e.contains("--sample-lifetime"), "{e}");
        }
    }
}
