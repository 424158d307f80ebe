//! `bulkwire profile FILE`: reads the per-superstep traces that a BSP job
//! writes with `BULKWIRE_PROFILE=FILE` (one `FILE.<pid>` per process, a JSON
//! object per superstep) into rows of table `profile`, one per superstep
//! over all processes, and draws computation against communication per
//! superstep.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bulkwire_bench::rows::{Report, Row};
use serde::Deserialize;

use crate::plot::{write_png, Line, Panel, PALETTE};

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
#[derive(Debug, Default, PartialEq)]
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

/// The rows of the traces `FILE.<pid>` that a job wrote with
/// `BULKWIRE_PROFILE=FILE` (`prefix`).
pub fn read(prefix: &Path) -> Result<Report, String> {
    let rows = supersteps(&records(prefix)?)
        .iter()
        .map(|s| {
            Row::new("profile", "bulkwire", "", s.processes)
                .with("superstep", s.superstep)
                .with("computation_max_ms", s.computation_max_s * 1e3)
                .with("communication_max_ms", s.communication_max_s * 1e3)
                .with("h_out_max_bytes", s.h_out_max)
                .with("h_in_max_bytes", s.h_in_max)
                .with("sent_packets", s.packets)
                .with("retransmitted_packets", s.retransmissions)
        })
        .collect();
    Ok(Report { rows, notes: Vec::new() })
}

/// Reads every `FILE.<pid>`.
fn records(prefix: &Path) -> Result<Vec<Record>, String> {
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

/// The table, as text.
pub fn table(report: &Report) -> String {
    let mut o =
        String::from("# per superstep, over all processes: the slowest process's times, the largest h-relation\n");
    o.push_str(&format!(
        "{:>9} {:>9} {:>16} {:>18} {:>12} {:>12} {:>9} {:>8}\n",
        "superstep", "procs", "computation ms", "communication ms", "h out max", "h in max", "packets", "resent"
    ));
    let (mut computation, mut communication) = (0.0, 0.0);
    for r in report.table("profile") {
        let n = |name: &str| r.num(name).unwrap_or(0.0);
        computation += n("computation_max_ms");
        communication += n("communication_max_ms");
        o.push_str(&format!(
            "{:>9} {:>9} {:>16.3} {:>18.3} {:>12} {:>12} {:>9} {:>8}\n",
            n("superstep"),
            r.procs,
            n("computation_max_ms"),
            n("communication_max_ms"),
            n("h_out_max_bytes"),
            n("h_in_max_bytes"),
            n("sent_packets"),
            n("retransmitted_packets")
        ));
    }
    let total = f64::max(computation + communication, f64::MIN_POSITIVE);
    o.push_str(&format!(
        "# total: computation {computation:.3} ms ({:.0}%), communication {communication:.3} ms ({:.0}%)\n",
        100.0 * computation / total,
        100.0 * communication / total
    ));
    o
}

/// Draws computation against communication, and the h-relations, per superstep.
pub fn plot(out: &Path, report: &Report) -> Result<(), String> {
    let series = |name: &str, scale: f64| -> Vec<(f64, f64)> {
        report.table("profile").filter_map(|r| Some((r.num("superstep")?, r.num(name)? * scale))).collect()
    };
    let last = report.table("profile").filter_map(|r| r.num("superstep")).fold(1.0, f64::max);
    let top = |points: &[Vec<(f64, f64)>]| {
        points.iter().flatten().map(|p| p.1).fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.1
    };
    let times = vec![series("computation_max_ms", 1.0), series("communication_max_ms", 1.0)];
    let volumes = vec![series("h_out_max_bytes", 1.0 / 1024.0), series("h_in_max_bytes", 1.0 / 1024.0)];
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
