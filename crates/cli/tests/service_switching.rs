//! `bulkwire sim service-switching --quick` runs, writes its CSV files and
//! PNG plots, and gives the same figures for the same seed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bulkwire-service-switching-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(out: &Path, seed: &str) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "service-switching", "--quick", "--json", "--seed", seed, "--out"])
        .arg(out)
        .output()
        .expect("run bulkwire");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

fn check_files(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("service-switching.csv")).expect("service-switching.csv");
    // A header, 18 simulated points and the paper's 12 bandwidth rows.
    assert_eq!(text.lines().count(), 1 + 18 + 12, "{text}");
    assert!(
        text.starts_with("bench,source,what,procs,size_bytes,load,trace,mode,latency_ms,latency_ms_lo,latency_ms_hi")
    );
    for png in ["service-switching-latency.png", "service-switching-loss.png", "service-switching-premium.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{png}");
    }
}

#[test]
fn quick_run_writes_csv_and_plots_and_repeats_itself_per_seed() {
    let a = out_dir("a");
    let report = run(&a, "3");
    let rows = report.as_array().expect("rows");
    let points: Vec<&Value> = rows.iter().filter(|r| r["source"] == "sim").collect();
    // Two traces, three loads each (the sweep's two and one table load), three modes.
    assert_eq!(points.len(), 18);
    for p in &points {
        assert_eq!(p["bench"], "service-switching", "{p}");
        assert_eq!(p["undelivered_messages"], 0, "every message delivered: {p}");
        let share = p["premium_share"].as_f64().unwrap();
        let (lo, hi) = (p["premium_share_lo"].as_f64().unwrap(), p["premium_share_hi"].as_f64().unwrap());
        assert!(lo <= share && share <= hi, "{p}");
        match p["mode"].as_str().unwrap() {
            "ordinary only" => assert_eq!(share, 0.0),
            "premium only" => {
                assert_eq!(share, 1.0);
                assert_eq!(p["cell_loss_share"].as_f64().unwrap(), 0.0, "premium cells are never pushed out");
            }
            _ => assert!((0.0..=1.0).contains(&share)),
        }
    }
    // The paper's bandwidths ride in the same rows.
    let paper = rows.iter().find(|r| r["source"] == "paper" && r["what"] == "PDE1, ordinary only" && r["load"] == 0.7);
    assert_eq!(paper.expect("the paper's Table 3")["ordinary_kbps"], 278.8);
    check_files(&a);
    let b = out_dir("b");
    assert_eq!(run(&b, "3"), report, "same seed, same figures");
    let c = out_dir("c");
    assert_ne!(run(&c, "4"), report, "another seed, another background");
    for dir in [a, b, c] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn tables_name_what_they_show() {
    let dir = out_dir("tables");
    let o = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "service-switching", "--quick", "--out"])
        .arg(&dir)
        .output()
        .expect("run bulkwire");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for heading in ["(Figure 7)", "(Figure 8)", "(Figure 9)", "(Table 3;", "(Table 4;", "[278.8]"] {
        assert!(text.contains(heading), "{heading} missing:\n{text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
