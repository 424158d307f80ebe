//! `bulkwire sim reliability` meets the foundation's acceptance figures.

use std::process::Command;

use serde_json::Value;

fn rows(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "reliability", "--json"])
        .args(args)
        .output()
        .expect("run bulkwire");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("JSON").as_array().expect("rows").clone()
}

#[test]
fn every_loss_rate_delivers_exactly_once_and_hole_filling_is_frugal() {
    let rows = rows(&["--messages", "1000"]);
    assert_eq!(rows.len(), 12);
    for r in &rows {
        assert!(r["bench"] == "reliability" && r["source"] == "sim", "{r}");
        assert!(r["procs"] == 2 && r["size_bytes"] == 4096, "{r}");
        assert_eq!(r["delivered_messages"], r["expected_messages"], "{r}");
        assert_eq!(r["wrong_or_duplicate_messages"], 0, "{r}");
        assert_eq!(r["completed"], true, "{r}");
    }
    let find = |loss: &str, strategy: &str| {
        rows.iter().find(|r| r["loss"] == loss && r["what"] == strategy).unwrap_or_else(|| panic!("{loss} {strategy}"))
    };
    let hf5 = find("5% random", "hole-filling");
    assert!(hf5["lost_data_packets"].as_u64().unwrap() > 0);
    assert!(hf5["retransmitted_per_lost_ratio"].as_f64().unwrap() <= 1.1, "{hf5}");
    let gbn5 = find("5% random", "go-back-n");
    assert!(gbn5["retransmitted_per_lost_ratio"].as_f64().unwrap() > 2.0, "go-back-n resends far more: {gbn5}");
    for strategy in ["hole-filling", "go-back-n"] {
        let clean = find("0% random", strategy);
        assert!(clean["explicit_acks_per_100_data_ratio"].as_f64().unwrap() < 10.0, "{clean}");
    }
}

#[test]
fn same_seed_same_figures() {
    let a = rows(&["--messages", "200", "--seed", "7"]);
    let b = rows(&["--messages", "200", "--seed", "7"]);
    assert_eq!(a, b);
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["sim", "reliability", "--messages", "0"])
        .output()
        .expect("run bulkwire");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--messages must be at least 1"));
}
