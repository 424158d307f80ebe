//! `bulkwire bench`: every subcommand runs briefly and prints well-formed
//! JSON in which bulkwire delivered every byte. Behaviour, not timing.

use std::process::{Command, Stdio};

use serde_json::Value;

/// Runs `bulkwire bench <args> --json` and returns its JSON.
fn bench(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "bulkwire bench {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"))
}

fn rows(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("expected an array of rows: {v}"))
}

fn num(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("{key} missing or not a number in {row}"))
}

fn sizes(rows: &[Value]) -> Vec<u64> {
    rows.iter().map(|r| r["size"].as_u64().expect("size")).collect()
}

/// A flow (ttcp, incast) as the benchmarks report it: bulkwire and TCP
/// deliver every byte, raw UDP at most every byte.
fn check_flow_row(row: &Value, senders: u64, bytes_each: u64) {
    assert_eq!(row["senders"].as_u64(), Some(senders), "{row}");
    for transport in ["bulkwire", "tcp", "udp"] {
        let f = &row[transport];
        let (sent, received) = (num(f, "bytes_sent"), num(f, "bytes_received"));
        assert_eq!(sent, (senders * bytes_each) as f64, "{transport}: {f}");
        match transport {
            "udp" => {
                assert!(received <= sent, "{f}");
                // On loopback a datagram arrives or the receiving socket drops it.
                let (sent, received) = (num(f, "datagrams_sent"), num(f, "datagrams_received"));
                assert!(received <= sent, "{f}");
                if let Some(drops) = f["socket_drops"].as_f64() {
                    assert!(received + drops <= sent, "{f}");
                }
            }
            _ => {
                assert_eq!(received, sent, "{transport} must deliver everything: {f}");
                assert!(num(f, "mb_per_s") > 0.0 && num(f, "seconds") > 0.0, "{f}");
            }
        }
    }
    let protocol = &row["bulkwire"]["protocol"];
    assert!(num(protocol, "data_packets") > 0.0, "{row}");
    assert!(num(protocol, "retransmissions") >= 0.0, "{row}");
}

#[test]
fn pingpong_reports_every_size_beside_udp_and_tcp() {
    let v = bench(&["pingpong", "--iterations", "20", "--max-size", "70000"]);
    let rows = rows(&v);
    assert_eq!(sizes(rows), [0, 8, 64, 256, 1024, 4096, 16384, 65536, 70000]);
    for r in rows {
        for key in ["bulkwire_us", "tcp_nodelay_us"] {
            assert!(num(r, key) > 0.0, "{r}");
        }
        // Raw UDP has a row up to one datagram's size.
        assert_eq!(r["udp_blocking_us"].is_number(), num(r, "size") <= 64_000.0, "{r}");
    }
}

#[test]
fn pingpong_in_pairs_with_more_ranks_than_cores() {
    let v = bench(&["pingpong", "-n", "6", "--iterations", "20", "--max-size", "4096"]);
    let rows = rows(&v);
    assert_eq!(sizes(rows), [0, 8, 64, 256, 1024, 4096]);
    // Busy-polling processes without a core each are left out.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 6 {
        assert!(rows.iter().all(|r| r["udp_busy_poll_us"].is_null()), "{v}");
    }
}

#[test]
fn bw_delivers_every_byte_and_reports_udp_loss() {
    let v = bench(&["bw", "--iterations", "3", "--window", "8", "--max-size", "100000"]);
    let rows = rows(&v);
    assert_eq!(sizes(rows), [1, 8, 64, 256, 1024, 4096, 16384, 65536, 100000]);
    for r in rows {
        let sent = num(r, "bulkwire_bytes_sent");
        assert_eq!(sent, num(r, "size") * num(r, "window") * num(r, "windows"), "{r}");
        assert_eq!(num(r, "bulkwire_bytes_received"), sent, "bulkwire must deliver everything: {r}");
        assert!(num(r, "bulkwire_mb_s") > 0.0 && num(r, "tcp_mb_s") > 0.0, "{r}");
        let udp_received = num(r, "udp_bytes_received");
        assert!(udp_received <= num(r, "udp_bytes_sent"), "{r}");
        let loss = num(r, "udp_loss");
        assert!((0.0..=1.0).contains(&loss), "{r}");
    }
}

#[test]
fn echo_round_trips_and_ttcp() {
    let v = bench(&["echo", "--iterations", "20", "--ttcp-bytes", "300000", "--ttcp-lengths", "1472,100000"]);
    let echo = rows(&v["round_trip"]);
    assert_eq!(sizes(echo), [64, 1500]);
    for r in echo {
        for key in ["bulkwire_us", "udp_blocking_us", "tcp_nodelay_us"] {
            assert!(num(r, key) > 0.0, "{r}");
        }
    }
    let ttcp = rows(&v["ttcp"]);
    assert_eq!(sizes(ttcp), [1472, 100000]);
    // The sender writes whole buffers: 300000 / 1472 = 203 of them.
    check_flow_row(&ttcp[0], 1, 203 * 1472);
    check_flow_row(&ttcp[1], 1, 300000);
}

#[test]
fn incast_delivers_every_byte_from_every_sender() {
    let v = bench(&["incast", "-k", "3", "--bytes", "400000", "--sizes", "1000,200000"]);
    let rows = rows(&v);
    assert_eq!(sizes(rows), [1000, 200000]);
    check_flow_row(&rows[0], 3, 400000);
    check_flow_row(&rows[1], 3, 400000);
}

#[test]
fn bad_layouts_are_refused() {
    for args in [&["pingpong", "-n", "3"][..], &["incast", "-k", "0"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).arg("bench").args(args).output().expect("run");
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
}

/// The rows of `bench total-exchange`: the empty sync, then every order
/// with pacing on and off (each checks at its end that every byte arrived),
/// on one host once more with nothing sent before the barrier, then, when
/// `mpi` is true, the Open MPI reference.
fn check_total_exchange(v: &Value, mpi: bool, one_host: bool) {
    let rows = rows(v);
    let (ours, reference): (Vec<&Value>, Vec<&Value>) = rows.iter().partition(|r| r["source"] == "bulkwire");
    assert_eq!(ours[0]["what"], "empty sync (l)", "{v}");
    for row in &ours[1..] {
        assert!(num(row, "median_us") > 0.0 && num(row, "mb_per_s_per_process") > 0.0, "{row}");
        assert!(num(row, "mean_us") >= num(row, "min_us"), "{row}");
    }
    let orders: Vec<&str> = ours[1..].iter().map(|r| r["order"].as_str().expect("order")).collect();
    let eager: Vec<f64> = ours[1..].iter().map(|r| num(r, "eager")).collect();
    if one_host {
        assert_eq!(orders, ["latin", "pid", "random", "latin", "pid", "latin"]);
        assert_eq!(eager, [65536.0, 65536.0, 65536.0, 65536.0, 65536.0, 0.0], "{v}");
    } else {
        assert_eq!(orders, ["latin", "pid", "random", "latin", "pid"]);
        assert_eq!(eager, [0.0; 5], "across hosts every byte keeps to the schedule: {v}");
    }
    if !mpi {
        assert!(reference.is_empty(), "{v}");
        return;
    }
    let what: Vec<&str> = reference.iter().map(|r| r["what"].as_str().expect("what")).collect();
    assert_eq!(what, ["MPI_Barrier, Open MPI over TCP", "MPI_Alltoall, Open MPI over TCP"], "{v}");
    assert!(
        reference.iter().all(|r| r["source"] == "open-mpi" && num(r, "median_us") > 0.0 && num(r, "mean_us") > 0.0),
        "{v}"
    );
}

/// Whether Open MPI's compiler and launcher are here (the reference of
/// `bench total-exchange` then runs beside it).
fn open_mpi() -> bool {
    let compiles = Command::new("mpicc").arg("--version").output().is_ok_and(|o| o.status.success());
    compiles
        && Command::new("mpirun")
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
}

#[test]
fn total_exchange_runs_every_order() {
    let mpi = open_mpi();
    if !mpi {
        eprintln!("Open MPI is not installed: the reference rows are not checked");
    }
    check_total_exchange(&bench(&["total-exchange", "-n", "3", "--repetitions", "2", "--size", "4096"]), mpi, true);
    let without = bench(&["total-exchange", "-n", "2", "--repetitions", "2", "--size", "64", "--no-mpi"]);
    check_total_exchange(&without, false, true);
    // Pacing to a link rate sends nothing early, so there is no row without it.
    let paced =
        bench(&["total-exchange", "-n", "2", "--repetitions", "2", "--size", "64", "--no-mpi", "--rate", "1gbit"]);
    let eager: Vec<f64> = rows(&paced)[1..].iter().map(|r| num(r, "eager")).collect();
    assert_eq!(eager, [0.0, 0.0, 0.0, 65536.0, 65536.0], "{paced}");
}

/// The network-namespace test bed of scripts/netns-testbed.sh, with
/// scripts/netns-exec as the remote shell: a benchmark across four hosts
/// whose ports are rate-limited. Needs root and iproute2; skipped otherwise.
#[test]
fn total_exchange_on_the_namespace_test_bed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // SAFETY: geteuid has no preconditions.
    let can =
        unsafe { libc::geteuid() } == 0 && Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if !can {
        eprintln!("skipped: needs root and iproute2 for network namespaces");
        return;
    }
    let testbed = root.join("scripts/netns-testbed.sh");
    let up = Command::new(&testbed).args(["up", "4", "200mbit"]).output().expect("run the test bed script");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let ssh = root.join("scripts/netns-exec");
    let result = std::panic::catch_unwind(|| {
        bench(&[
            "--hosts",
            "bwh0,bwh1,bwh2,bwh3",
            "--ssh",
            ssh.to_str().unwrap(),
            "--bind",
            "10.90.0.254",
            "total-exchange",
            "-n",
            "4",
            "--repetitions",
            "2",
        ])
    });
    let _ = Command::new(&testbed).args(["down", "4"]).status();
    check_total_exchange(&result.unwrap_or_else(|e| std::panic::resume_unwind(e)), false, false);
}

#[test]
fn total_exchange_measures_open_mpi_before_and_after_the_job() {
    if !open_mpi() {
        eprintln!("Open MPI is not installed: nothing to check");
        return;
    }
    let args = ["bench", "total-exchange", "-n", "2", "--repetitions", "2", "--size", "64"];
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).args(args).stdin(Stdio::null()).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let table = stdout.find("MPI_Alltoall, Open MPI over TCP").expect("the reference measured before the job");
    let after = stdout.find("# Open MPI again after the job (median / mean us): MPI_Barrier ").expect("and after it");
    assert!(after > table, "{stdout}");
}
