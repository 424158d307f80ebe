//! `bulkwire profile FILE`: reads the per-superstep traces that a BSP job
//! writes with `BULKWIRE_PROFILE=FILE` (one `FILE.<pid>` per process, a JSON
//! object per superstep), prints where the time went and, with `--plot`,
//! draws computation against communication per superstep.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plot::{write_png, Line, Panel, PALETTE};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The prefix given in BULKWIRE_PROFILE (the files are FILE.0, FILE.1, …).
    pub file: PathBuf,
    /// Draw computation and communication per superstep into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One superstep of one process, as the bsp layer writes it.
#[derive(Debug, Deserialize)]
struct Record {
    pid: u32,
    superstep: u64,
    computation_s: f64,
    communication_s: f64,
    h_out: u64,
    h_in: u64,
    packets_sent: u64,
    retransmissions: u64,
}

/// One superstep over all processes: the slowest process sets its length.
#[derive(Debug, Default, Serialize, PartialEq)]
struct Superstep {
    superstep: u64,
    processes: u32,
    computation_max_s: f64,
    communication_max_s: f64,
    h_out_max: u64,
    h_in_max: u64,
    packets: u64,
    retransmissions: u64,
}

pub fn run(args: &Args) -> Result<(), String> {
    let records = read(&args.file)?;
    let steps = supersteps(&records);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&steps).map_err(|e| e.to_string())?);
    } else {
        print_table(&steps);
    }
    if let Some(out) = &args.plot {
        plot(out, &steps)?;
        if !args.json {
            println!("plot: {}", out.display());
        }
    }
    Ok(())
}

/// Reads every `FILE.<pid>`.
fn read(prefix: &Path) -> Result<Vec<Record>, String> {
    let dir = match prefix.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base =
        prefix.file_name().and_then(|n| n.to_str()).ok_or_else(|| format!("{}: not a file name", prefix.display()))?;
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name.strip_prefix(base)?.strip_prefix('.')?.parse().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    if files.is_empty() {
        return Err(format!(
            "no profile files {}.<pid>: run the job with BULKWIRE_PROFILE={} first",
            prefix.display(),
            prefix.display()
        ));
    }
    files.sort();
    let mut records = Vec::new();
    for (_, path) in files {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let record: Record = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a superstep record: {e}", path.display(), n + 1))?;
            records.push(record);
        }
    }
    Ok(records)
}

fn supersteps(records: &[Record]) -> Vec<Superstep> {
    let mut steps: BTreeMap<u64, Superstep> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in records {
        let s = steps.entry(r.superstep).or_insert_with(|| Superstep { superstep: r.superstep, ..Default::default() });
        if seen.insert((r.superstep, r.pid)) {
            s.processes += 1;
        }
        s.computation_max_s = s.computation_max_s.max(r.computation_s);
        s.communication_max_s = s.communication_max_s.max(r.communication_s);
        s.h_out_max = s.h_out_max.max(r.h_out);
        s.h_in_max = s.h_in_max.max(r.h_in);
        s.packets += r.packets_sent;
        s.retransmissions += r.retransmissions;
    }
    steps.into_values().collect()
}

fn print_table(steps: &[Superstep]) {
    println!("# per superstep, over all processes: the slowest process's times, the largest h-relation");
    println!(
        "{:>9} {:>9} {:>16} {:>18} {:>12} {:>12} {:>9} {:>8}",
        "superstep", "procs", "computation ms", "communication ms", "h out max", "h in max", "packets", "resent"
    );
    for s in steps {
        println!(
            "{:>9} {:>9} {:>16.3} {:>18.3} {:>12} {:>12} {:>9} {:>8}",
            s.superstep,
            s.processes,
            s.computation_max_s * 1e3,
            s.communication_max_s * 1e3,
            s.h_out_max,
            s.h_in_max,
            s.packets,
            s.retransmissions
        );
    }
    let computation: f64 = steps.iter().map(|s| s.computation_max_s).sum();
    let communication: f64 = steps.iter().map(|s| s.communication_max_s).sum();
    let total = (computation + communication).max(f64::MIN_POSITIVE);
    println!(
        "# total: computation {:.3} ms ({:.0}%), communication {:.3} ms ({:.0}%)",
        computation * 1e3,
        100.0 * computation / total,
        communication * 1e3,
        100.0 * communication / total
    );
}

fn plot(out: &Path, steps: &[Superstep]) -> Result<(), String> {
    let series =
        |f: fn(&Superstep) -> f64| -> Vec<(f64, f64)> { steps.iter().map(|s| (s.superstep as f64, f(s))).collect() };
    let last = steps.last().map_or(1.0, |s| s.superstep as f64).max(1.0);
    let top = |points: &[Vec<(f64, f64)>]| {
        points.iter().flatten().map(|p| p.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.1
    };
    let times = vec![series(|s| s.computation_max_s * 1e3), series(|s| s.communication_max_s * 1e3)];
    let volumes = vec![series(|s| s.h_out_max as f64 / 1024.0), series(|s| s.h_in_max as f64 / 1024.0)];
    let panel = |title: &str, y_label: &str, points: Vec<Vec<(f64, f64)>>, labels: [&str; 2]| Panel {
        title: title.into(),
        x_label: "superstep".into(),
        y_label: y_label.into(),
        x: 0.0..last,
        y: 0.0..top(&points),
        lines: points
            .into_iter()
            .zip(labels)
            .enumerate()
            .map(|(i, (points, label))| Line { label: label.into(), points, colour: PALETTE[i], reference: false })
            .collect(),
    };
    let panels = [
        panel("time per superstep (slowest process)", "ms", times, ["computation", "communication"]),
        panel("h-relation per superstep (largest)", "KiB", volumes, ["h out", "h in"]),
    ];
    write_png(out, &panels, 1400, 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, superstep: u64, computation_s: f64, communication_s: f64, h: u64) -> Record {
        Record {
            pid,
            superstep,
            computation_s,
            communication_s,
            h_out: h,
            h_in: h / 2,
            packets_sent: 3,
            retransmissions: pid as u64,
        }
    }

    #[test]
    fn a_superstep_is_as_long_as_its_slowest_process() {
        let steps = supersteps(&[record(0, 1, 0.5, 0.1, 100), record(1, 1, 0.2, 0.3, 400), record(0, 2, 0.1, 0.1, 0)]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].processes, 2);
        assert_eq!((steps[0].computation_max_s, steps[0].communication_max_s), (0.5, 0.3));
        assert_eq!(
            (steps[0].h_out_max, steps[0].h_in_max, steps[0].packets, steps[0].retransmissions),
            (400, 200, 6, 1)
        );
        assert_eq!(steps[1].superstep, 2);
    }

    #[test]
    fn a_process_counted_twice_is_counted_once() {
        let steps = supersteps(&[record(3, 1, 0.1, 0.1, 1), record(3, 1, 0.1, 0.1, 1)]);
        assert_eq!(steps[0].processes, 1);
    }
}
