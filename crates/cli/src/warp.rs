//! `bulkwire sim warp`: Warp rate control (seed 003 §3, §6.2) with n senders
//! into one FCFS server: does warp track ρ, does λ settle inside the stability
//! bound and oscillate outside it, and what the fairness term does for ten
//! senders (the paper's Figure 6). Tables on stdout, CSV and PNG in `--out`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bulkwire_proto::STABILITY_LIMIT;
use bulkwire_sim::warp::{ConvergenceRun, Lengths, Report, Service};
use indicatif::{ProgressBar, ProgressStyle};

use crate::plot::{write_png, Line, Panel, PALETTE};

#[derive(clap::Args)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Short runs (seconds instead of tens of seconds of simulated time).
    #[arg(long)]
    quick: bool,
    /// Where the CSV files and PNG plots go.
    #[arg(long, default_value = "out/warp")]
    out: PathBuf,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<(), String> {
    let lengths = if args.quick { Lengths::quick() } else { Lengths::full() };
    let progress = ProgressBar::new(Report::runs() as u64);
    progress.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let report = Report::measure(args.seed, lengths, &mut |what| {
        progress.set_message(what.to_string());
        progress.inc(1);
    });
    progress.finish_and_clear();

    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let files = write_files(&report, &args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", tables(&report, args.quick));
    }
    eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}

fn service_name(s: Service) -> &'static str {
    match s {
        Service::Fixed => "fixed",
        Service::Exponential => "exponential",
    }
}

fn tables(r: &Report, quick: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Warp rate control: {} senders into one FCFS server, μ = {} messages/s, loop delay with empty queues {:.0} ms, seed {}{}",
        r.senders,
        r.service_rate,
        r.base_loop_delay * 1e3,
        r.seed,
        if quick { " (quick)" } else { "" }
    );
    let _ = writeln!(o, "\n## warp against offered load ρ (fixed rates, no control; exponential service)");
    let _ = writeln!(o, "{:>5} {:>21} {:>21} {:>12}", "ρ", "warp, busy server", "warp, empty start", "utilisation");
    for p in &r.load {
        let _ = writeln!(
            o,
            "{:>5.1} {:>13.3} ± {:<5.3} {:>13.3} ± {:<5.3} {:>12.3}",
            p.rho, p.warp_busy, p.warp_busy_std, p.warp_empty, p.warp_empty_std, p.utilisation
        );
    }
    let _ = writeln!(
        o,
        "\n## total rate Σλ/μ under Warp control over the second half (ε as a multiple of the critical ε for {:.0} ms)",
        r.base_loop_delay * 1e3
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
    for c in &r.convergence {
        let _ = writeln!(
            o,
            "{:<12} {:<20} {:>6.2} {:>7.2} {:>7.2} {:>7} {:>7.1} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>6.3} {:>10.1}",
            service_name(c.service),
            c.label,
            c.start,
            c.product_base,
            c.product_predicted,
            if c.product_predicted < STABILITY_LIMIT { "yes" } else { "no" },
            c.loop_delay * 1e3,
            c.rate_mean,
            c.rate_std,
            c.rate_min,
            c.rate_max,
            c.utilisation,
            c.one_way_delay * 1e3
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
    for f in &r.fairness {
        let _ = writeln!(
            o,
            "{:<9} {:>7.3} {:>7.3} {:>9.3} {:>9.3} {:>7.3} {:>7.3} {:>11.1}",
            if f.fairness { "with" } else { "without" },
            f.jain,
            f.cv,
            f.min_rate,
            f.max_rate,
            f.total,
            f.utilisation,
            f.one_way_delay * 1e3
        );
    }
    if let Some(f) = r.fairness.first() {
        let demands: Vec<String> = f.demands.iter().map(|d| format!("{d:.3}")).collect();
        let _ = writeln!(o, "demands/μ: {}", demands.join(" "));
    }
    o
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_files(r: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut csv = String::from("rho,warp_busy,warp_busy_std,warp_empty,warp_empty_std,utilisation\n");
    for p in &r.load {
        let _ = writeln!(
            csv,
            "{},{:.6},{:.6},{:.6},{:.6},{:.6}",
            p.rho, p.warp_busy, p.warp_busy_std, p.warp_empty, p.warp_empty_std, p.utilisation
        );
    }
    files.push(dir.join("warp_load.csv"));
    write(files.last().unwrap(), &csv)?;

    let mut csv = String::from(
        "service,case,epsilon_multiple,epsilon,start,product_base,product_predicted,loop_delay_ms,product_measured,\
         rate_mean,rate_std,rate_min,rate_max,utilisation,warp_mean,one_way_delay_ms\n",
    );
    let mut trace = String::from("service,case,time_s,total_rate,queue\n");
    for c in &r.convergence {
        let _ = writeln!(
            csv,
            "{},{},{},{:.1},{:.4},{:.4},{:.4},{:.3},{:.4},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3}",
            service_name(c.service),
            c.label,
            c.epsilon_multiple,
            c.epsilon,
            c.start,
            c.product_base,
            c.product_predicted,
            c.loop_delay * 1e3,
            c.product_measured,
            c.rate_mean,
            c.rate_std,
            c.rate_min,
            c.rate_max,
            c.utilisation,
            c.warp_mean,
            c.one_way_delay * 1e3
        );
        for (t, total, queue) in &c.trace {
            let _ = writeln!(trace, "{},{},{:.4},{:.6},{}", service_name(c.service), c.label, t, total, queue);
        }
    }
    files.push(dir.join("warp_convergence.csv"));
    write(files.last().unwrap(), &csv)?;
    files.push(dir.join("warp_convergence_trace.csv"));
    write(files.last().unwrap(), &trace)?;

    let mut csv = String::from("fairness,jain,cv,min_rate,max_rate,total,utilisation,one_way_delay_ms\n");
    let mut trace = String::from("fairness,time_s");
    for i in 0..r.senders {
        let _ = write!(trace, ",sender{i}");
    }
    trace.push('\n');
    for f in &r.fairness {
        let _ = writeln!(
            csv,
            "{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3}",
            f.fairness,
            f.jain,
            f.cv,
            f.min_rate,
            f.max_rate,
            f.total,
            f.utilisation,
            f.one_way_delay * 1e3
        );
        for (t, rates) in &f.trace {
            let _ = write!(trace, "{},{t:.4}", f.fairness);
            for x in rates {
                let _ = write!(trace, ",{x:.6}");
            }
            trace.push('\n');
        }
    }
    files.push(dir.join("warp_fairness.csv"));
    write(files.last().unwrap(), &csv)?;
    files.push(dir.join("warp_fairness_trace.csv"));
    write(files.last().unwrap(), &trace)?;

    files.push(dir.join("warp-load.png"));
    write_png(files.last().unwrap(), &[load_panel(r)], 760, 480)?;
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

fn load_panel(r: &Report) -> Panel {
    let rhos: Vec<f64> = r.load.iter().map(|p| p.rho).collect();
    let top = r.load.iter().map(|p| p.warp_busy.max(p.warp_empty)).fold(1.0, f64::max) * 1.1;
    Panel {
        title: "mean warp against offered load".into(),
        x_label: "offered load ρ = λ/μ".into(),
        y_label: "mean warp".into(),
        x: 0.0..rhos.last().copied().unwrap_or(1.0) * 1.05,
        y: 0.0..top,
        lines: vec![
            Line {
                label: "server kept busy".into(),
                points: r.load.iter().map(|p| (p.rho, p.warp_busy)).collect(),
                colour: PALETTE[0],
                reference: false,
            },
            Line {
                label: "empty server at start".into(),
                points: r.load.iter().map(|p| (p.rho, p.warp_empty)).collect(),
                colour: PALETTE[1],
                reference: false,
            },
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
fn convergence_panel(r: &Report, service: Service) -> Panel {
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
