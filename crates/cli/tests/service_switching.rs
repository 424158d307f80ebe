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
    for csv in ["service_switching.csv", "service_switching_bandwidth.csv"] {
        let text = std::fs::read_to_string(dir.join(csv)).unwrap_or_else(|e| panic!("{csv}: {e}"));
        assert!(text.lines().count() > 10, "{csv}");
    }
    for png in ["service-switching-latency.png", "service-switching-loss.png", "service-switching-premium.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{png}");
    }
}

#[test]
fn quick_run_writes_csv_and_plots_and_repeats_itself_per_seed() {
    let a = out_dir("a");
    let report = run(&a, "3");
    let points = report["points"].as_array().expect("points");
    // Two traces, three loads each (the sweep's two and one table load), three modes.
    assert_eq!(points.len(), 18);
    for p in points {
        assert_eq!(p["undelivered"], 0, "every message delivered: {p}");
        let share = p["premium_share"]["mean"].as_f64().unwrap();
        match p["mode"].as_str().unwrap() {
            "OrdinaryOnly" => assert_eq!(share, 0.0),
            "PremiumOnly" => {
                assert_eq!(share, 1.0);
                assert_eq!(p["cell_loss"]["mean"].as_f64().unwrap(), 0.0, "premium cells are never pushed out");
            }
            _ => assert!((0.0..=1.0).contains(&share)),
        }
    }
    check_files(&a);
    let b = out_dir("b");
    assert_eq!(run(&b, "3"), report, "same seed, same figures");
    let c = out_dir("c");
    assert_ne!(run(&c, "4")["points"], report["points"], "another seed, another background");
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
