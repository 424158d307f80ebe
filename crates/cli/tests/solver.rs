//! Seed 003's asynchronous solver: `bench solver` on loopback (every
//! variant converges to the system's known answer), and `lab solver
//! --quick` on the namespace test bed under background load (root only).

use std::process::{Command, Stdio};

use serde_json::Value;

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn rows(out: &std::process::Output) -> Vec<Value> {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

#[test]
fn every_variant_of_the_solver_finds_the_answer_on_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["bench", "solver", "-n", "3", "--size", "300", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let rows = rows(&out);
    let whats: Vec<&str> = rows.iter().map(|r| r["what"].as_str().unwrap()).collect();
    // Open MPI's version of the same system, where it is installed.
    let mpi = have("mpirun") && have("mpicc");
    assert_eq!(whats, if mpi { &["warp", "no-control", "bsp", "mpi"][..] } else { &["warp", "no-control", "bsp"][..] });
    for r in &rows {
        let source = if r["what"] == "mpi" { "mpi" } else { "bulkwire" };
        assert_eq!(
            (r["bench"].as_str(), r["source"].as_str(), r["procs"].as_u64()),
            (Some("solver"), Some(source), Some(3))
        );
        // The benchmark stops the job if an answer is off by more than
        // 100 times the tolerance; report it here too.
        assert!(r["error"].as_f64().unwrap() < 1e-7, "{r}");
        assert!(r["seconds"].as_f64().unwrap() > 0.0 && r["iterations"].as_f64().unwrap() >= 1.0, "{r}");
        if source == "bulkwire" {
            assert!(r["bytes"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[test]
fn a_dominance_that_cannot_converge_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["bench", "solver", "-n", "2", "--dominance", "0.9"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dominance 0.9 must be above 1"), "{out:?}");
}

/// `lab solver --quick` at 65% background load on every port of a 5-host
/// test bed: every variant converges; Warp raised its buffer threshold
/// above its start (the network was congested); rows in the row format
/// with the paper's beside them. Needs root, iproute2 and tc.
#[test]
fn the_solver_experiment_runs_on_the_test_bed() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !have("ip") || !have("tc") {
        eprintln!("skipped: needs root, iproute2 and tc for the namespace test bed");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let testbed = dir.join("scripts/netns-testbed.sh");
    let up = Command::new(&testbed).args(["up", "5", "100mbit"]).output().unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let out_dir = std::env::temp_dir().join(format!("bulkwire-solver-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .current_dir(&dir)
        .args(["lab", "solver", "--quick", "--loads", "0.65", "--json", "--out"])
        .arg(&out_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new(&testbed).args(["down", "5"]).status();
    let rows = rows(&out);
    assert!(out_dir.join("solver.csv").exists() && out_dir.join("solver.png").exists());
    let _ = std::fs::remove_dir_all(&out_dir);
    let measured: Vec<&Value> = rows.iter().filter(|r| r["source"] == "testbed").collect();
    // Open MPI's version too, where mpirun is installed, unless its run
    // failed: the lab notes that and goes on (Open MPI's daemon on the test
    // bed crashes in hwloc now and then, which is Open MPI's, not ours).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mpi_failed = stderr.contains("Open MPI's run at load");
    if mpi_failed {
        eprintln!("Open MPI's run failed on the test bed; the lab said so:\n{stderr}");
    }
    assert_eq!(measured.len(), if have("mpirun") && !mpi_failed { 4 } else { 3 }, "{rows:?}\n{stderr}");
    for r in &measured {
        assert_eq!(
            (r["bench"].as_str(), r["procs"].as_u64(), r["load"].as_f64()),
            (Some("solver"), Some(5), Some(0.65))
        );
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        match r["what"].as_str().unwrap() {
            "warp" => assert!(r["threshold_writes"].as_f64().unwrap() > 20.0, "Warp raised the threshold: {r}"),
            "no-control" => assert_eq!(r["threshold_writes"].as_f64(), Some(20.0), "{r}"),
            "bsp" | "mpi" => assert!(r.get("threshold_writes").is_none(), "{r}"),
            other => panic!("unexpected variant {other}"),
        }
    }
    assert_eq!(rows.iter().filter(|r| r["source"] == "paper").count(), 2);
}
