//! `bulkwire bench scale` and `bulkwire sim scale`: a job per count of
//! processes with its rows of time and memory, beside Open MPI where it is
//! installed; in the simulator, the barrier's rounds grow as log p and
//! each process's messages as k per round. Behaviour, not timing.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

fn bulkwire(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).args(args).stdin(Stdio::null()).output().expect("run");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "bulkwire {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"))
}

fn num(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("{key} missing or not a number in {row}"))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bulkwire-scale-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn open_mpi() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
        && Command::new("mpicc").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The row of bulkwire's job that asked for `requested` with `procs`
/// processes and variant `what`.
fn find<'a>(rows: &'a [Value], source: &str, requested: &str, procs: u64, what: &str) -> &'a Value {
    rows.iter()
        .find(|r| {
            r["source"] == source
                && r["procs"].as_u64() == Some(procs)
                && r["what"].as_str().and_then(|w| w.split_once(", ")).is_some_and(|(over, w)| {
                    w == what && (source == "mpi" && over == requested || r["requested_transport"] == requested)
                })
        })
        .unwrap_or_else(|| panic!("no {source} row {what} over {requested} for {procs} processes in {rows:#?}"))
}

/// Each job's rows: the three times and the three readings of memory,
/// with figures that hold whatever the machine.
fn check_job(rows: &[Value], requested: &str, procs: u64, repetitions: f64) {
    for what in ["empty sync", "barrier", "total exchange 1 KiB"] {
        let r = find(rows, "bulkwire", requested, procs, what);
        assert!(num(r, "median_us") > 0.0 && num(r, "min_us") <= num(r, "median_us"), "{r}");
        assert_eq!(num(r, "timed_count"), repetitions, "{r}");
        if requested == "udp" {
            assert!(r["what"].as_str().unwrap().starts_with("udp, "), "UDP was asked for: {r}");
        }
    }
    let sync = find(rows, "bulkwire", requested, procs, "empty sync");
    let shape = sync["sync_barrier"].as_str().expect("the sync's barrier");
    // On one host through shared memory, the board; over UDP a message
    // barrier.
    match requested {
        "shm" => assert_eq!(shape, "board", "{sync}"),
        _ => assert!(shape == "star" || shape.starts_with("dissemination k="), "{sync}"),
    }
    let exchange = find(rows, "bulkwire", requested, procs, "total exchange 1 KiB");
    assert_eq!(exchange["size_bytes"].as_u64(), Some(1024));
    let memory = |what: &str| find(rows, "bulkwire", requested, procs, what);
    let (before, start, after) =
        (memory("memory before start"), memory("memory at start"), memory("memory after syncs"));
    for m in [before, start, after] {
        assert!(num(m, "rss_kib") > 0.0 && num(m, "peak_rss_kib") >= num(m, "rss_kib"), "{m}");
        assert!(num(m, "peak_rss_median_kib") <= num(m, "peak_rss_kib"), "{m}");
        assert!(num(m, "rss_median_kib") <= num(m, "rss_kib"), "{m}");
    }
    // The peak only grows.
    assert!(num(before, "peak_rss_kib") <= num(start, "peak_rss_kib"), "{before} {start}");
    assert!(num(start, "peak_rss_kib") <= num(after, "peak_rss_kib"), "{start} {after}");
    assert!(num(after, "syncs_count") >= 300.0, "{after}");
    // The endpoint keeps a channel per peer whatever is sent.
    assert!(num(after, "endpoint_fixed_kib") > 0.0 && num(after, "endpoint_kib") >= num(after, "endpoint_fixed_kib"));
}

#[test]
fn bench_scale_runs_a_job_per_count_and_transport_and_plots() {
    let plots = temp_dir("plots");
    let dir = plots.to_string_lossy().into_owned();
    let v =
        bulkwire(&["bench", "scale", "--procs", "2,3", "--repetitions", "20", "--no-mpi", "--plot", &dir, "--json"]);
    let rows = v.as_array().expect("rows");
    assert!(rows.iter().all(|r| r["bench"] == "scale" && r["source"] == "bulkwire"), "{rows:#?}");
    // Two counts, two transports (both by default on one host), six rows each.
    assert_eq!(rows.len(), 2 * 2 * 6, "{rows:#?}");
    for procs in [2, 3] {
        for requested in ["shm", "udp"] {
            check_job(rows, requested, procs, 20.0);
        }
    }
    for png in ["scale-time.png", "scale-memory.png"] {
        let bytes = std::fs::read(plots.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{png}");
    }
    let _ = std::fs::remove_dir_all(plots);
}

#[test]
fn bench_scale_beside_open_mpi_over_shared_memory() {
    if !open_mpi() {
        eprintln!("skipped: Open MPI (mpirun, mpicc) is not installed");
        return;
    }
    let v = bulkwire(&["bench", "scale", "--procs", "2,3", "--repetitions", "20", "--transport", "shm", "--json"]);
    let rows = v.as_array().expect("rows");
    for procs in [2, 3] {
        check_job(rows, "shm", procs, 20.0);
        for what in ["barrier", "total exchange 1 KiB"] {
            let r = find(rows, "mpi", "shm", procs, what);
            assert_eq!(r["bench"], "scale");
            assert!(num(r, "median_us") > 0.0, "{r}");
            assert!(r["btl"].as_str().is_some_and(|b| b.contains("vader") || b.starts_with("sm")), "{r}");
        }
        assert_eq!(find(rows, "mpi", "shm", procs, "barrier")["call"], "MPI_Barrier");
    }
    assert!(!rows.iter().any(|r| r["what"].as_str().is_some_and(|w| w.starts_with("tcp"))), "shm only: {rows:#?}");
}

#[test]
fn bench_scale_refuses_a_job_of_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["bench", "scale", "--procs", "1,2", "--no-mpi"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 2"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The rows of `sim scale` of variant `what`, by procs.
fn sim_rows<'a>(rows: &'a [Value], what: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["bench"] == "scale-sim" && r["source"] == "sim" && r["what"] == what).collect()
}

#[test]
fn sim_scale_rounds_grow_as_log_p_and_messages_as_k_per_round() {
    let out = temp_dir("sim");
    let dir = out.to_string_lossy().into_owned();
    let args =
        ["sim", "scale", "--procs", "2,4,8,16,32,64", "--fanout", "1,3", "--reduction-up-to", "16", "--syncs", "3"];
    let v = bulkwire(&[&args[..], &["--json", "--out", &dir]].concat());
    let rows = v.as_array().expect("rows");
    for k in [1u32, 3] {
        let tokens = sim_rows(rows, &format!("k={k}, token"));
        assert_eq!(tokens.len(), 6, "{rows:#?}");
        for r in tokens {
            let p = r["procs"].as_u64().unwrap() as u32;
            assert_eq!(r["completed"], true, "{r}");
            // ⌈log_(k+1) p⌉ rounds.
            let rounds = (0..).find(|&n| (k + 1).pow(n) >= p).unwrap();
            assert_eq!(num(r, "barrier_rounds_count"), f64::from(rounds), "{r}");
            let messages = num(r, "sync_messages");
            if (k + 1).pow(rounds) == p {
                assert_eq!(messages, f64::from(k * rounds), "{r}");
            } else {
                assert!(messages <= f64::from(k * rounds) && messages > f64::from(k * (rounds - 1)), "{r}");
            }
            // A token is one datagram; nothing is lost on the switch.
            assert!(num(r, "sync_datagrams") >= messages, "{r}");
            assert_eq!(num(r, "sync_retransmitted_packets"), 0.0, "{r}");
            // More rounds take longer: at least one hop each way per round.
            assert!(num(r, "sync_us") >= 50.0 * f64::from(rounds), "{r}");
            // An endpoint keeps a channel per rank: its fixed part grows with p.
            assert_eq!(num(r, "channels_count"), f64::from(p), "{r}");
        }
        // The reduction of an empty sync, up to where it was asked for: a
        // header and checks of some 100 bytes, whatever p.
        let reduction = sim_rows(rows, &format!("k={k}, reduction"));
        assert_eq!(reduction.iter().map(|r| r["procs"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 4, 8, 16]);
        let bytes: Vec<f64> = reduction.iter().map(|r| num(r, "message_bytes")).collect();
        assert!(bytes.windows(2).all(|w| w[1] >= w[0]), "{bytes:?}");
        assert!(bytes[0] > 13.0 && bytes[3] < 128.0, "{bytes:?}");
    }
    let runtime = |p: u64| {
        let r = rows.iter().find(|r| r["procs"].as_u64() == Some(p)).unwrap();
        num(r, "runtime_endpoint_kib")
    };
    let ratio = runtime(64) / runtime(32);
    assert!(ratio > 1.8 && ratio < 2.2, "the runtime's endpoint grows in proportion to p: {ratio}");
    for file in ["scale-sim.csv", "scale-sim.png"] {
        assert!(out.join(file).exists(), "{file}");
    }
    // Same seed, same figures.
    assert_eq!(bulkwire(&[&args[..], &["--json", "--out", &dir]].concat()), v);
    let _ = std::fs::remove_dir_all(out);
}
