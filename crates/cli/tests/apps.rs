//! The applications in `examples/`, run as jobs with `bulkwire run`: each
//! must learn what it is meant to learn, the same way over groups and over
//! point-to-point messages.
//!
//! The examples are built by `cargo test -p bulkwire` (and by
//! `cargo build -p bulkwire --examples`); a test run that selects only this
//! file (`--test apps`) does not build them.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// An example of this package, beside the test binary's `deps/` folder.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("the test binary is in <profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p bulkwire --example {name}` (cargo test -p bulkwire builds it)",
        path.display()
    );
    path
}

/// Runs `bulkwire run -n <n> <example> <args>`, checks it succeeded, and
/// returns what it printed.
fn run(n: u32, name: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .arg("run")
        .arg("-n")
        .arg(n.to_string())
        .arg(example(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} {args:?} on {n} processes failed\n{stdout}\n{stderr}");
    stdout.into_owned()
}

/// The one row `bpnn --json` prints.
fn bpnn_row(n: u32, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let out = run(n, "bpnn", &args);
    let rows: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{out}");
    rows[0].clone()
}

fn num(row: &Value, name: &str) -> f64 {
    row[name].as_f64().unwrap_or_else(|| panic!("no {name} in {row}"))
}

#[test]
fn bpnn_learns_iris_by_groups_and_by_point_to_point_alike() {
    let groups = bpnn_row(4, &[]);
    let p2p = bpnn_row(4, &["--p2p"]);
    for (row, what) in [(&groups, "groups"), (&p2p, "p2p")] {
        assert_eq!(row["bench"], "bpnn");
        assert_eq!(row["what"], what);
        assert_eq!(row["procs"], 4);
        assert_eq!(row["weights_agree"], true, "{row}");
        assert_eq!(num(row, "train_samples_count") + num(row, "test_samples_count"), 150.0, "all of Iris");
        let (first, last) = (num(row, "initial_loss"), num(row, "final_loss"));
        // Three classes, small random weights: about ln 3 at the start.
        assert!((0.5..2.0).contains(&first), "initial loss {first} ({what})");
        assert!(last < first / 4.0, "the loss fell from {first} only to {last} ({what})");
        let accuracy = num(row, "test_accuracy_share");
        assert!(accuracy >= 0.9, "test accuracy {accuracy} ({what})");
        assert!(num(row, "train_s") > 0.0);
    }
    // The same training, summed in another order.
    assert_eq!(groups["test_accuracy_share"], p2p["test_accuracy_share"]);
    let (a, b) = (num(&groups, "final_loss"), num(&p2p, "final_loss"));
    assert!((a - b).abs() <= 1e-9 * a.abs(), "final loss {a} by groups, {b} point to point");
}

#[test]
fn bpnn_prints_the_loss_every_k_epochs_and_the_accuracy() {
    let out = run(3, "bpnn", &["--epochs", "60", "--every", "20"]);
    let epochs: Vec<&str> =
        out.lines().filter(|l| l.starts_with("epoch")).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(epochs, ["1", "20", "40", "60"], "{out}");
    assert!(out.contains("3 processes, groups"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("test accuracy ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("training loop ")), "{out}");
    assert!(out.contains("weights identical on every process: yes"), "{out}");
    // A wrong argument stops every process with the usage.
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "2"])
        .arg(example("bpnn"))
        .arg("--epochs")
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--epochs needs a value"));
}
