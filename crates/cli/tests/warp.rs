//! `bulkwire sim warp --quick` runs, writes its CSV files and PNG plots, with
//! or without a font, and gives the same figures for the same seed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bulkwire-warp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(out: &Path, font: Option<&str>) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bulkwire"));
    cmd.args(["sim", "warp", "--quick", "--json", "--seed", "3", "--out"]).arg(out);
    if let Some(f) = font {
        cmd.env("BULKWIRE_PLOT_FONT", f);
    }
    let o = cmd.output().expect("run bulkwire");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

fn check_files(dir: &Path) {
    for csv in [
        "warp-load.csv",
        "warp-convergence.csv",
        "warp-fairness.csv",
        "warp-convergence-trace.csv",
        "warp-fairness-trace.csv",
    ] {
        let text = std::fs::read_to_string(dir.join(csv)).unwrap_or_else(|e| panic!("{csv}: {e}"));
        assert!(text.lines().count() > 2, "{csv}");
    }
    for png in ["warp-load.png", "warp-convergence.png", "warp-fairness.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{png}");
    }
}

#[test]
fn quick_run_writes_tables_csv_and_plots_and_repeats_itself() {
    let a = out_dir("a");
    let report = run(&a, None);
    let rows = report.as_array().expect("rows");
    let count = |bench: &str| rows.iter().filter(|r| r["bench"] == bench && r["source"] == "sim").count();
    // Ten loads from an empty and from a busy server, nine cases for each of two services, with and without fairness.
    assert_eq!((count("warp-load"), count("warp-convergence"), count("warp-fairness")), (20, 18, 2));
    let fair = rows.iter().find(|r| r["what"] == "with fairness").expect("fairness row");
    assert!(fair["jain_index"].as_f64().unwrap() > 0.9, "{fair}");
    check_files(&a);
    // Without a font the plots are drawn without text rather than failing.
    let b = out_dir("b");
    assert_eq!(run(&b, Some("none")), report, "same seed, same figures");
    check_files(&b);
    for dir in [a, b] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn tables_name_what_they_show() {
    let dir = out_dir("tables");
    let o = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "warp", "--quick", "--out"])
        .arg(&dir)
        .output()
        .expect("run bulkwire");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for heading in ["warp against offered load", "total rate", "ten senders"] {
        assert!(text.contains(heading), "{heading} missing:\n{text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unwritable_output_directory_is_a_clear_error() {
    let file = std::env::temp_dir().join(format!("bulkwire-warp-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "warp", "--quick", "--out"])
        .arg(&file)
        .output()
        .expect("run bulkwire");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(&file.display().to_string()));
    let _ = std::fs::remove_file(file);
}
