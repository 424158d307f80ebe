//! `bulkwire bench`: every subcommand runs briefly and prints well-formed
//! JSON in which bulkwire delivered every byte. Behaviour, not timing.

use std::process::{Command, Stdio};

use serde_json::Value;

/// Runs `bulkwire bench <args> --json` and returns its JSON.
fn bench(args: &[&str]) -> Value {
    bench_noted(args).0
}

/// [`bench`], and the notes it wrote to standard error (why a reference is
/// missing, say).
fn bench_noted(args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "bulkwire bench {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let v = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
    (v, stderr.into_owned())
}

/// Runs `bulkwire bench <args>` and returns the table it printed.
fn text_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).arg("bench").args(args).output().expect("run bulkwire");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "bulkwire bench {args:?} failed\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The rows of a result, each checked for the row format: flat, with
/// bench, source, what and procs.
fn rows(v: &Value) -> &Vec<Value> {
    let rows = v.as_array().unwrap_or_else(|| panic!("expected an array of rows: {v}"));
    for row in rows {
        let fields = row.as_object().unwrap_or_else(|| panic!("a row is an object: {row}"));
        for key in ["bench", "source", "what"] {
            assert!(fields.get(key).is_some_and(Value::is_string), "{key} missing in {row}");
        }
        assert!(fields.get("procs").is_some_and(Value::is_u64), "procs missing in {row}");
        assert!(fields.values().all(|v| !v.is_object() && !v.is_array() && !v.is_null()), "not flat: {row}");
    }
    rows
}

fn num(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("{key} missing or not a number in {row}"))
}

/// The rows of table `bench` from `source` (with variant `what`).
fn of<'a>(rows: &'a [Value], bench: &str, source: &str, what: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["bench"] == bench && r["source"] == source && r["what"] == what).collect()
}

fn sizes(rows: &[&Value]) -> Vec<u64> {
    rows.iter().map(|r| r["size_bytes"].as_u64().expect("size_bytes")).collect()
}

/// bulkwire's rows of table `bench` from the job that asked for
/// `requested` (`requested_transport`: `shm`, BULKWIRE_SHM=1, or `udp`,
/// BULKWIRE_SHM=0). Each says in `what` (or its first part) the transport
/// the runtime reached its peer by: `shm` or `udp`, never shared memory
/// where UDP was asked for.
fn job<'a>(rows: &'a [Value], bench: &str, requested: &str) -> Vec<&'a Value> {
    let job: Vec<&Value> = rows
        .iter()
        .filter(|r| r["bench"] == bench && r["source"] == "bulkwire" && r["requested_transport"] == requested)
        .collect();
    for r in &job {
        // The transport: a column of its own where `what` names something
        // else (an algorithm), else the first part of `what`.
        let over = match r["transport"].as_str() {
            Some(t) => t,
            None => r["what"].as_str().expect("what").split(", ").next().expect("a transport"),
        };
        match requested {
            "udp" => assert_eq!(over, "udp", "{r}"),
            _ => assert!(["shm", "udp"].contains(&over), "{r}"),
        }
    }
    job
}

/// The jobs of table `bench` in `rows`: the transport each asked for, in
/// the order they ran; every bulkwire row belongs to one.
fn jobs(rows: &[Value], bench: &str) -> Vec<String> {
    let mut jobs: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r["bench"] == bench && r["source"] == "bulkwire") {
        let requested = r["requested_transport"].as_str().unwrap_or_else(|| panic!("no requested_transport: {r}"));
        if !jobs.iter().any(|j| j == requested) {
            jobs.push(requested.to_string());
        }
    }
    jobs
}

/// The flows (ttcp, incast) of table `bench`: bulkwire and TCP deliver
/// every byte, raw UDP at most every byte; one row each per size.
fn check_flows(rows: &[Value], bench: &str, senders: u64, bytes_each: &[u64]) {
    for transport in ["bulkwire", "tcp", "udp"] {
        let flows = of(rows, bench, transport, "");
        assert_eq!(flows.len(), bytes_each.len(), "{transport}: {rows:?}");
        for (f, &bytes) in flows.iter().zip(bytes_each) {
            assert_eq!(num(f, "senders_count"), senders as f64, "{f}");
            let (sent, received) = (num(f, "sent_bytes"), num(f, "received_bytes"));
            assert_eq!(sent, (senders * bytes) as f64, "{transport}: {f}");
            match transport {
                "udp" => {
                    assert!(received <= sent, "{f}");
                    // On loopback a datagram arrives or the receiving socket drops it.
                    let (sent, received) = (num(f, "sent_datagrams"), num(f, "received_datagrams"));
                    assert!(received <= sent, "{f}");
                    if let Some(drops) = f["socket_drops_datagrams"].as_f64() {
                        assert!(received + drops <= sent, "{f}");
                    }
                }
                _ => {
                    assert_eq!(received, sent, "{transport} must deliver everything: {f}");
                    assert_eq!(num(f, "delivered_share"), 1.0, "{f}");
                    assert!(num(f, "mb_per_s") > 0.0 && num(f, "time_ms") > 0.0, "{f}");
                }
            }
            if transport == "bulkwire" {
                assert!(num(f, "data_packets") > 0.0, "{f}");
                assert!(num(f, "retransmitted_packets") >= 0.0, "{f}");
            }
        }
    }
}

#[test]
fn pingpong_reports_every_size_beside_udp_and_tcp() {
    // 200 round trips a size: bulkwire and raw UDP take turns.
    let v = bench(&["pingpong", "--iterations", "200", "--max-size", "70000"]);
    let rows = rows(&v);
    let all = [0, 8, 64, 256, 1024, 4096, 16384, 65536, 70000];
    // On one host, a job asking for shared memory, then one asking for UDP.
    assert_eq!(jobs(rows, "pingpong"), ["shm", "udp"]);
    for requested in ["shm", "udp"] {
        assert_eq!(sizes(&job(rows, "pingpong", requested)), all, "{requested}");
    }
    // The references, measured once.
    assert_eq!(sizes(&of(rows, "pingpong", "tcp", "nodelay")), all);
    // Raw UDP has a row at every size: beyond one datagram's (64,000 B),
    // in several.
    assert_eq!(sizes(&of(rows, "pingpong", "udp", "blocking")), all);
    if bulkwire_runtime::host_cores() >= 2 {
        assert_eq!(sizes(&of(rows, "pingpong", "udp", "busy-poll")), all);
    }
    for r in rows {
        assert!(num(r, "median_us") > 0.0, "{r}");
        assert_eq!(num(r, "procs"), 2.0, "{r}");
    }
    // Open MPI over shared memory and over TCP runs the same sweep where
    // it is installed, each row naming the btl it was made to use.
    if open_mpi() {
        for (transport, btl) in [("shm", ["vader,self", "sm,self"]), ("tcp", ["tcp,self", "tcp,self"])] {
            let mpi = of(rows, "pingpong", "mpi", transport);
            assert_eq!(sizes(&mpi), all, "{transport}");
            assert!(mpi.iter().all(|r| r["btl"].as_str().is_some_and(|b| btl.iter().any(|x| b.starts_with(x)))), "{v}");
        }
    }
}

#[test]
fn pingpong_in_pairs_with_more_ranks_than_cores() {
    let v = bench(&["pingpong", "-n", "6", "--iterations", "20", "--max-size", "4096"]);
    let rows = rows(&v);
    for requested in ["shm", "udp"] {
        assert_eq!(sizes(&job(rows, "pingpong", requested)), [0, 8, 64, 256, 1024, 4096], "{requested}");
    }
    // Busy-polling processes without a core each are left out.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 6 {
        assert!(of(rows, "pingpong", "udp", "busy-poll").is_empty(), "{v}");
    }
}

#[test]
fn bw_delivers_every_byte_and_reports_udp_loss() {
    // Eight windows a size: in the first job bulkwire and TCP take turns,
    // and what the receiver counts over the turns must be all that was sent.
    let v = bench(&["bw", "--iterations", "8", "--window", "8", "--max-size", "100000"]);
    let rows = rows(&v);
    let all = [1, 8, 64, 256, 1024, 4096, 16384, 65536, 100000];
    assert_eq!(jobs(rows, "bw"), ["shm", "udp"]);
    let ours = [job(rows, "bw", "shm"), job(rows, "bw", "udp")].concat();
    assert_eq!(sizes(&ours), [all, all].concat());
    for source in ["tcp", "udp"] {
        assert_eq!(sizes(&of(rows, "bw", source, "")), all, "{source}");
    }
    for r in ours {
        let sent = num(r, "sent_bytes");
        assert_eq!(sent, num(r, "size_bytes") * num(r, "window_messages") * num(r, "windows_count"), "{r}");
        assert_eq!(num(r, "received_bytes"), sent, "bulkwire must deliver everything: {r}");
        assert!(num(r, "mb_per_s") > 0.0, "{r}");
    }
    for r in of(rows, "bw", "tcp", "") {
        assert!(num(r, "mb_per_s") > 0.0, "{r}");
    }
    if open_mpi() {
        assert_eq!(sizes(&of(rows, "bw", "mpi", "shm")), all);
        assert_eq!(sizes(&of(rows, "bw", "mpi", "tcp")), all);
    }
    for r in of(rows, "bw", "udp", "") {
        assert!(num(r, "received_bytes") <= num(r, "sent_bytes"), "{r}");
        assert!((0.0..=1.0).contains(&num(r, "delivered_share")), "{r}");
    }
}

#[test]
fn echo_round_trips_and_ttcp() {
    let v = bench(&["echo", "--iterations", "20", "--ttcp-bytes", "300000", "--ttcp-lengths", "1472,100000"]);
    let rows = rows(&v);
    for (source, what) in [("bulkwire", ""), ("udp", "blocking"), ("tcp", "nodelay")] {
        let echo = of(rows, "echo", source, what);
        assert_eq!(sizes(&echo), [64, 1500], "{source}");
        assert!(echo.iter().all(|r| num(r, "median_us") > 0.0), "{v}");
    }
    assert_eq!(sizes(&of(rows, "ttcp", "bulkwire", "")), [1472, 100000]);
    // The sender writes whole buffers: 300000 / 1472 = 203 of them.
    check_flows(rows, "ttcp", 1, &[203 * 1472, 300000]);
}

#[test]
fn incast_delivers_every_byte_from_every_sender() {
    let v = bench(&["incast", "-k", "3", "--bytes", "400000", "--sizes", "1000,200000"]);
    let rows = rows(&v);
    assert_eq!(sizes(&of(rows, "incast", "bulkwire", "")), [1000, 200000]);
    check_flows(rows, "incast", 3, &[400000, 400000]);
    assert!(rows.iter().all(|r| num(r, "procs") == 4.0), "{v}");
}

#[test]
fn mac_times_every_mac_at_every_size() {
    let (v, notes) = bench_noted(&["mac", "--sizes", "60,1472", "--rounds", "1"]);
    let rows = rows(&v);
    for (source, what) in [
        ("bulkwire", "aes-256-gcm-siv"),
        ("crate", "aes-256-gcm-siv"),
        ("crate", "siphash-2-4-128"),
        ("crate", "blake3-keyed"),
    ] {
        let of = of(rows, "mac", source, what);
        assert_eq!(sizes(&of), [60, 1472], "{source} {what}");
        for row in of {
            assert_eq!(row["procs"], 1);
            assert!(num(row, "median_us") > 0.0 && num(row, "mb_per_s") > 0.0, "{row}");
        }
    }
    let polyval = of(rows, "mac", "bulkwire", "aes-256-gcm-siv")[0]["polyval"].as_str().expect("a label").to_string();
    assert!(["vpclmulqdq", "vpclmulqdq-256", "pclmulqdq", "polyval crate"].contains(&polyval.as_str()), "{polyval}");
    assert!(notes.contains(&polyval), "{notes}");
    let table = text_of(&["mac", "--sizes", "1472", "--rounds", "1"]);
    assert!(table.contains("siphash-2-4-128") && table.lines().any(|l| l.trim_start().starts_with("1472")), "{table}");
}

#[test]
fn endpoint_times_a_stream_and_hops_beside_the_mac_and_a_copy() {
    let args = ["endpoint", "--sizes", "8,300000", "--rounds", "1", "--bytes", "600000"];
    let v = bench(&args);
    let rows = rows(&v);
    let stream = of(rows, "endpoint", "bulkwire", "stream");
    let hop = of(rows, "endpoint", "bulkwire", "hop");
    assert_eq!(sizes(&stream), [8, 300000]);
    assert_eq!(sizes(&hop), [8, 300000]);
    for row in stream.iter().chain(&hop) {
        assert_eq!(row["procs"], 2);
        assert!(num(row, "ns_per_message") > 0.0 && num(row, "ns_per_datagram") > 0.0, "{row}");
    }
    // Small messages share datagrams; a large one takes a datagram per
    // 1,402 B of it (1,472 B less the header, the MAC and a record header):
    // 214 for 300,000 B, a few more where a message's pieces start a datagram
    // behind the end of the one before.
    assert!(num(stream[0], "datagrams_per_message") < 0.2, "{}", stream[0]);
    let large = num(stream[1], "datagrams_per_message");
    assert!((214.0..=216.0).contains(&large), "{}", stream[1]);
    // A hop of 8 B is one datagram, its acknowledgement riding on the next.
    assert!((1.0..1.5).contains(&num(hop[0], "datagrams_per_message")), "{}", hop[0]);
    for what in ["mac", "copy"] {
        let of = of(rows, "endpoint", "reference", what);
        assert_eq!(sizes(&of), [8, 300000], "{what}");
        assert!(of.iter().all(|r| num(r, "ns_per_datagram") > 0.0), "{what}");
    }
    let table = text_of(&args);
    assert!(table.contains("protocol") && table.lines().any(|l| l.trim_start().starts_with("300000")), "{table}");
}

#[test]
fn csv_has_a_header_and_a_line_per_row() {
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["bench", "pingpong", "--iterations", "10", "--max-size", "8", "--no-mpi", "--csv"])
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("bench,source,what,procs,size_bytes,load,median_us,requested_transport"), "{text}");
    // Two sizes, each over bulkwire (a job asking for shared memory, one
    // asking for UDP), UDP busy-poll (where a core is free), UDP blocking
    // and TCP.
    assert!((9..=11).contains(&lines.len()), "{text}");
    assert!(lines[1..].iter().all(|l| l.starts_with("pingpong,")), "{text}");
}

#[test]
fn bad_layouts_are_refused() {
    let layouts = [
        &["pingpong", "-n", "3"][..],
        &["incast", "-k", "0"][..],
        &["put", "-n", "1"][..],
        &["put", "--sizes", "0,8"][..],
    ];
    for args in layouts {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).arg("bench").args(args).output().expect("run");
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
}

/// The rows of `bench total-exchange`: for each job (the transport it
/// asked for, in `jobs`), the empty sync, then every order with pacing on
/// and off (each checks at its end that every byte arrived), on one host
/// once more with nothing sent before the barrier; in a job over UDP, the
/// raw UDP exchange (blocking, and polling where every process has a
/// core); then the Open MPI reference over each of `mpi` (`shm`, `tcp`)
/// before and after the jobs.
fn check_total_exchange(v: &Value, mpi: &[&str], one_host: bool, jobs_asked: &[&str]) {
    let rows = rows(v);
    assert_eq!(jobs(rows, "total-exchange"), jobs_asked, "{v}");
    let mut udp_jobs = 0;
    for requested in jobs_asked {
        let ours = job(rows, "total-exchange", requested);
        let over = ours[0]["what"].as_str().expect("what").split(", ").next().expect("a transport");
        udp_jobs += usize::from(over == "udp");
        assert_eq!(ours[0]["what"], format!("{over}, empty sync"), "{v}");
        for row in &ours[1..] {
            assert!(num(row, "median_us") > 0.0 && num(row, "mb_per_s") > 0.0, "{row}");
            assert!(num(row, "mean_us") >= num(row, "min_us"), "{row}");
            assert!(
                row["what"].as_str().expect("what").starts_with(&format!("{over}, ")),
                "one job, one transport: {v}"
            );
        }
        let orders: Vec<&str> = ours[1..].iter().map(|r| r["order"].as_str().expect("order")).collect();
        let eager: Vec<f64> = ours[1..].iter().map(|r| num(r, "eager_bytes")).collect();
        if one_host {
            assert_eq!(orders, ["latin", "pid", "random", "latin", "pid", "latin"]);
            assert_eq!(eager, [65536.0, 65536.0, 65536.0, 65536.0, 65536.0, 0.0], "{v}");
        } else {
            assert_eq!(orders, ["latin", "pid", "random", "latin", "pid"]);
            assert_eq!(eager, [0.0; 5], "across hosts every byte keeps to the schedule: {v}");
        }
    }
    // The raw UDP floor: one blocking row per job over UDP, each followed
    // by a polling one where the processes have a core each (2 here).
    let raw: Vec<&Value> = rows.iter().filter(|r| r["source"] == "udp").collect();
    let blocking = raw.iter().filter(|r| r["what"] == "blocking").count();
    assert_eq!(blocking, udp_jobs, "{v}");
    for r in &raw {
        assert!(["blocking", "busy-poll"].contains(&r["what"].as_str().expect("what")), "{r}");
        assert!(num(r, "median_us") > 0.0 && num(r, "mb_per_s") > 0.0 && num(r, "mean_us") >= num(r, "min_us"), "{r}");
        assert_eq!(r["procs"], rows[0]["procs"], "{r}");
    }
    let reference: Vec<&Value> =
        rows.iter().filter(|r| !["bulkwire", "udp"].contains(&r["source"].as_str().unwrap())).collect();
    let what: Vec<(&str, &str)> = reference
        .iter()
        .map(|r| (r["what"].as_str().expect("what"), r["measured"].as_str().expect("measured")))
        .collect();
    let mut expected = Vec::new();
    for when in ["before the job", "after the job"] {
        for transport in mpi {
            expected.push((format!("{transport}, MPI_Barrier"), when));
            expected.push((format!("{transport}, MPI_Alltoall"), when));
        }
    }
    let expected: Vec<(&str, &str)> = expected.iter().map(|(w, m)| (w.as_str(), *m)).collect();
    assert_eq!(what, expected, "{v}");
    assert!(
        reference.iter().all(|r| r["source"] == "mpi" && num(r, "median_us") > 0.0 && num(r, "mean_us") > 0.0),
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
    let both: &[&str] = if mpi { &["shm", "tcp"] } else { &[] };
    let v = bench(&["total-exchange", "-n", "3", "--repetitions", "2", "--size", "4096"]);
    check_total_exchange(&v, both, true, &["shm", "udp"]);
    let without = bench(&["total-exchange", "-n", "2", "--repetitions", "2", "--size", "64", "--no-mpi"]);
    check_total_exchange(&without, &[], true, &["shm", "udp"]);
    // By gets, whose replies come through the arena on one host: every row
    // says so, and checked its bytes as the puts' rows do.
    let gets = bench(&["total-exchange", "-n", "3", "--repetitions", "2", "--size", "2048", "--no-mpi", "--get"]);
    check_total_exchange(&gets, &[], true, &["shm", "udp"]);
    for row in rows(&gets).iter().filter(|r| r.get("order").is_some()) {
        assert!(row["op"] == "get" && row["what"].as_str().unwrap().contains(", get, "), "{row}");
    }
    assert!(rows(&without).iter().filter(|r| r.get("order").is_some()).all(|r| r["op"] == "put"), "{without}");
    // Pacing to a link rate sends nothing early, so there is no row without it.
    let args = ["total-exchange", "-n", "2", "--repetitions", "2", "--size", "64", "--no-mpi", "--rate", "1gbit"];
    let paced = bench(&[&args[..], &["--transport", "udp"]].concat());
    let eager: Vec<f64> =
        job(rows(&paced), "total-exchange", "udp")[1..].iter().map(|r| num(r, "eager_bytes")).collect();
    assert_eq!(eager, [0.0, 0.0, 0.0, 65536.0, 65536.0], "{paced}");
}

/// One test at a time on the test bed: they share its namespaces.
static TEST_BED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `bulkwire bench --hosts bwh0,… <args>` on the network-namespace
/// test bed of scripts/netns-testbed.sh (`hosts` hosts whose ports are
/// limited to `rate`), with scripts/netns-exec as the remote shell. Needs
/// root and iproute2: `None` (skipped) otherwise.
fn bench_on_test_bed(hosts: usize, rate: &str, args: &[&str]) -> Option<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // SAFETY: geteuid has no preconditions.
    let can =
        unsafe { libc::geteuid() } == 0 && Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if !can {
        eprintln!("skipped: needs root and iproute2 for network namespaces");
        return None;
    }
    let _one = TEST_BED.lock().unwrap_or_else(|e| e.into_inner());
    let testbed = root.join("scripts/netns-testbed.sh");
    let n = hosts.to_string();
    let up = Command::new(&testbed).args(["up", &n, rate]).output().expect("run the test bed script");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let ssh = root.join("scripts/netns-exec");
    let names: Vec<String> = (0..hosts).map(|i| format!("bwh{i}")).collect();
    let names = names.join(",");
    let mut all = vec!["--hosts", &names, "--ssh", ssh.to_str().unwrap(), "--bind", "10.90.0.254"];
    all.extend(args);
    let result = std::panic::catch_unwind(|| bench(&all));
    let _ = Command::new(&testbed).args(["down", &n]).status();
    Some(result.unwrap_or_else(|e| std::panic::resume_unwind(e)))
}

/// A benchmark across four hosts whose ports are rate-limited.
#[test]
fn total_exchange_on_the_namespace_test_bed() {
    if let Some(v) = bench_on_test_bed(4, "200mbit", &["total-exchange", "-n", "4", "--repetitions", "2"]) {
        // Across hosts, one job over UDP by default, and Open MPI over TCP
        // on the same hosts.
        let mpi: &[&str] = if open_mpi() { &["tcp"] } else { &[] };
        check_total_exchange(&v, mpi, false, &["udp"]);
    }
}

/// A ping-pong between two hosts, Open MPI's ranks on the same hosts
/// (started by the same remote shell) over TCP.
#[test]
fn pingpong_between_hosts_beside_open_mpi_on_them() {
    let args = ["pingpong", "--iterations", "50", "--max-size", "1024"];
    let Some(v) = bench_on_test_bed(2, "10gbit", &args) else { return };
    let rows = rows(&v);
    let all = [0, 8, 64, 256, 1024];
    assert_eq!(jobs(rows, "pingpong"), ["udp"], "{v}");
    assert_eq!(sizes(&job(rows, "pingpong", "udp")), all, "{v}");
    if open_mpi() {
        let mpi = of(rows, "pingpong", "mpi", "tcp");
        assert_eq!(sizes(&mpi), all, "{v}");
        // Each rank on its own host: no shared memory between them.
        assert!(of(rows, "pingpong", "mpi", "shm").is_empty(), "{v}");
        for r in mpi {
            assert!(num(r, "median_us") > 0.0 && r["btl"] == "tcp,self", "{r}");
            // Bound to one shared core, the two ranks took 4 ms a half
            // round trip (the scheduler's slice); each on a core of its
            // own, microseconds.
            assert!(num(r, "median_us") < 2000.0, "Open MPI's ranks share a core: {r}");
        }
    }
}

/// Three senders into one receiver whose port takes 100 Mbit/s: without
/// control they overflow it and recover by resending; under Warp they
/// share it (seed 003), every byte delivered either way.
#[test]
fn warp_shares_a_congested_port_on_the_namespace_test_bed() {
    let args = ["incast", "-k", "3", "--bytes", "3000000", "--sizes", "65536", "--warp", "--warp-capacity", "100mbit"];
    let Some(v) = bench_on_test_bed(4, "100mbit", &args) else { return };
    let rows = rows(&v);
    check_flows(rows, "incast", 3, &[3000000 / 65536 * 65536]);
    let [free, warp] = ["", "warp"].map(|what| {
        let found = of(rows, "incast", "bulkwire", what);
        assert_eq!(found.len(), 1, "{what:?}: {v}");
        found[0]
    });
    assert_eq!(num(warp, "received_bytes"), num(warp, "sent_bytes"), "{warp}");
    let resent = |r: &Value| num(r, "retransmitted_packets");
    assert!(resent(free) > 1000.0, "the port should overflow without control: {free}");
    assert!(resent(warp) * 20.0 < resent(free), "Warp should resend far less: {warp} against {free}");
    assert!(num(warp, "jain_index") > 0.9, "{warp}");
}

/// The rows of `bench bcast` or `bench allreduce` of one job: for every
/// size, the automatic choice and every algorithm that runs the
/// collective, each with a positive median; broadcasts also with confirmed
/// delivery at 32 KiB, where the root hears one acknowledgement per child.
fn check_collective(v: &Value, bench: &str, procs: u64, sizes_asked: &[u64], transport: &str) {
    let rows = rows(v);
    let ours: Vec<&Value> = job(rows, bench, transport);
    assert!(!ours.is_empty(), "no {transport} job: {v}");
    let algorithms: &[&str] = match bench {
        "bcast" => &["flat", "tree", "binomial", "chain", "scatter-allgather"],
        _ => &["flat", "tree", "binomial", "chain", "ring"],
    };
    for &size in sizes_asked {
        let at: Vec<&&Value> = ours.iter().filter(|r| r["size_bytes"] == size).collect();
        for r in &at {
            assert_eq!(r["procs"], procs, "{r}");
            assert_eq!(r["transport"], transport, "{r}");
            assert!(num(r, "median_us") > 0.0, "{r}");
        }
        let sent: Vec<&str> =
            at.iter().filter(|r| r["confirmed"] == false).map(|r| r["what"].as_str().unwrap()).collect();
        assert!(sent.iter().any(|w| w.starts_with("auto (")), "{size}: {sent:?}");
        for a in algorithms {
            assert!(sent.contains(a), "{bench} {size} B: no {a} row in {sent:?}");
        }
        if bench == "bcast" && size == 32768 {
            for r in at.iter().filter(|r| r["confirmed"] == true) {
                let acks = num(r, "acks_at_root_count");
                assert!(acks >= 1.0 && acks <= num(r, "members_count"), "{r}");
            }
            let flat = at.iter().find(|r| r["what"] == "flat, confirmed").expect("flat, confirmed");
            assert_eq!(num(flat, "acks_at_root_count"), (procs - 1) as f64, "{flat}");
            let chain = at.iter().find(|r| r["what"] == "chain, confirmed").expect("chain, confirmed");
            assert_eq!(num(chain, "acks_at_root_count"), 1.0, "one per child: {chain}");
        }
    }
}

/// `bench bcast` and `bench allreduce` on one host: a job through shared
/// memory and one over UDP, every algorithm, and Open MPI's collective
/// over its shared memory and TCP where it is installed.
#[test]
fn bcast_and_allreduce_run_every_algorithm_over_both_transports() {
    let mpi = open_mpi();
    for bench_name in ["bcast", "allreduce"] {
        let v = bench(&[bench_name, "-n", "3", "--max-size", "64", "--repetitions", "3"]);
        assert_eq!(jobs(rows(&v), bench_name), ["shm", "udp"], "{v}");
        for transport in ["shm", "udp"] {
            check_collective(&v, bench_name, 3, &[8, 64], transport);
        }
        if mpi {
            let call = if bench_name == "bcast" { "MPI_Bcast" } else { "MPI_Allreduce" };
            for over in ["shm", "tcp"] {
                let theirs: Vec<&Value> = rows(&v)
                    .iter()
                    .filter(|r| r["source"] == "mpi" && r["transport"] == over && r["what"] == call)
                    .collect();
                assert_eq!(sizes(&theirs), [8, 64], "{over}: {v}");
            }
        }
    }
    // Confirmed delivery at 32 KiB, over UDP alone.
    let v = bench(&["bcast", "-n", "4", "--max-size", "32768", "--repetitions", "2", "--no-mpi", "--transport", "udp"]);
    check_collective(&v, "bcast", 4, &[8, 32768], "udp");
}

/// The broadcast across four hosts whose ports take 100 Mbit/s, every
/// algorithm (the multicast of seed 004 on rate-limited links).
#[test]
fn bcast_on_the_namespace_test_bed() {
    let args = ["bcast", "-n", "4", "--max-size", "65536", "--repetitions", "2"];
    if let Some(v) = bench_on_test_bed(4, "100mbit", &args) {
        assert_eq!(jobs(rows(&v), "bcast"), ["udp"], "{v}");
        check_collective(&v, "bcast", 4, &[8, 32768, 65536], "udp");
        // A message of 64 KiB takes at least its time through one port.
        let bound_us = 65536.0 * 8.0 / 100e6 * 1e6;
        for r in job(rows(&v), "bcast", "udp").iter().filter(|r| r["size_bytes"] == 65536) {
            assert!(num(r, "median_us") > bound_us * 0.5, "faster than the link allows: {r}");
        }
    }
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
    for over in ["TCP", "shared memory"] {
        let before = format!("MPI_Alltoall, Open MPI over {over}, before the job");
        let before = stdout.find(&before).expect("the reference before the job");
        let after = stdout.find(&format!("MPI_Alltoall, Open MPI over {over}, after the job")).expect("and after it");
        assert!(after > before, "{stdout}");
    }
    // The table names the btl of each.
    assert!(stdout.contains("btl tcp,self"), "{stdout}");
}

/// `--transport udp`: one job, asking for UDP (BULKWIRE_SHM=0), whose rows
/// all say `udp`; Open MPI beside it over TCP only.
#[test]
fn transport_udp_is_one_job_over_udp() {
    let v = bench(&["pingpong", "--iterations", "10", "--max-size", "64", "--transport", "udp"]);
    let rows = rows(&v);
    assert_eq!(jobs(rows, "pingpong"), ["udp"]);
    let ours = of(rows, "pingpong", "bulkwire", "udp");
    assert_eq!(sizes(&ours), [0, 8, 64], "{v}");
    assert!(ours.iter().all(|r| r["requested_transport"] == "udp"), "{v}");
    assert_eq!(sizes(&of(rows, "pingpong", "tcp", "nodelay")), [0, 8, 64], "{v}");
    assert!(of(rows, "pingpong", "mpi", "shm").is_empty(), "{v}");
    if open_mpi() {
        assert_eq!(sizes(&of(rows, "pingpong", "mpi", "tcp")), [0, 8, 64], "{v}");
    }
    let bw = bench(&["bw", "--iterations", "2", "--window", "4", "--max-size", "64", "--no-mpi", "--transport", "udp"]);
    let bw_rows = crate::rows(&bw);
    assert_eq!(jobs(bw_rows, "bw"), ["udp"]);
    assert_eq!(sizes(&of(bw_rows, "bw", "bulkwire", "udp")), [1, 8, 64], "{bw}");
    assert_eq!(sizes(&of(bw_rows, "bw", "tcp", "")), [1, 8, 64], "{bw}");
    let args = ["total-exchange", "-n", "2", "--repetitions", "2", "--size", "64", "--no-mpi", "--transport", "udp"];
    check_total_exchange(&bench(&args), &[], true, &["udp"]);
}

/// `--transport shm`: one job, asking for shared memory (BULKWIRE_SHM=1),
/// beside every reference; until the runtime reaches a peer over shared
/// memory, its rows honestly say `udp` (and the table says it asked for shm).
#[test]
fn transport_shm_is_one_job_asking_for_shared_memory() {
    let v = bench(&["pingpong", "--iterations", "10", "--max-size", "8", "--no-mpi", "--transport", "shm"]);
    let rows = rows(&v);
    assert_eq!(jobs(rows, "pingpong"), ["shm"]);
    assert_eq!(sizes(&job(rows, "pingpong", "shm")), [0, 8], "{v}");
    assert_eq!(sizes(&of(rows, "pingpong", "tcp", "nodelay")), [0, 8], "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["bench", "pingpong", "--iterations", "10", "--max-size", "8", "--no-mpi", "--transport", "shm"])
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.contains("BULKWIRE_SHM=1"), "{table}");
    assert!(table.contains("bulkwire shm ") || table.contains("bulkwire udp (asked shm)"), "{table}");
}

#[test]
fn an_unknown_transport_is_refused_by_name() {
    for bench in ["pingpong", "bw", "total-exchange", "put", "bcast", "allreduce"] {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["bench", bench, "--transport", "tcp"])
            .stdin(Stdio::null())
            .output()
            .expect("run bulkwire");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bench}: {stderr}");
        assert!(stderr.contains("invalid value 'tcp' for '--transport <TRANSPORT>'"), "{stderr}");
        assert!(stderr.contains("[possible values: shm, udp, both]"), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing measured: {}", String::from_utf8_lossy(&out.stdout));
    }
}

/// `bench put`: for each job, bsp_put, bsp_hpput and bsp_get at every size (each
/// repetition checked at its receiver, or the job fails) and one copy of
/// the same bytes, and Open MPI's ring over shared memory and TCP where
/// it is installed.
#[test]
fn put_to_a_neighbour_with_put_and_hpput() {
    let (v, notes) = bench_noted(&["put", "--sizes", "1,100000,3000000", "--repetitions", "2"]);
    let rows = rows(&v);
    let all = [1, 100000, 3000000];
    assert_eq!(jobs(rows, "put"), ["shm", "udp"]);
    for requested in ["shm", "udp"] {
        let ours = job(rows, "put", requested);
        let variants: Vec<&str> = ours.iter().map(|r| r["what"].as_str().expect("what")).collect();
        let over = variants[0].split(", ").next().expect("a transport");
        let expected: Vec<String> =
            all.iter().flat_map(|_| ["put", "hpput", "get"]).map(|v| format!("{over}, {v}")).collect();
        assert_eq!(variants, expected, "{v}");
        assert_eq!(sizes(&ours), [1, 1, 1, 100000, 100000, 100000, 3000000, 3000000, 3000000], "{v}");
        for r in ours {
            assert_eq!(num(r, "procs"), 2.0, "{r}");
            assert_eq!(num(r, "repetitions_count"), 2.0, "{r}");
            let (mb, us) = (num(r, "mb_per_s"), num(r, "median_us"));
            assert!(mb > 0.0 && us > 0.0, "{r}");
            assert!((mb - num(r, "size_bytes") / us).abs() <= 1e-6 * mb, "MB/s is size over the median: {r}");
        }
        // One copy per size, measured in the same job.
        let copies: Vec<&Value> =
            rows.iter().filter(|r| r["source"] == "memory" && r["requested_transport"] == requested).collect();
        assert_eq!(sizes(&copies), all, "{v}");
        for r in copies {
            assert!(r["what"] == "one copy" && num(r, "median_us") > 0.0 && num(r, "mb_per_s") > 0.0, "{r}");
        }
    }
    let table = text_of(&["put", "--sizes", "300000", "--repetitions", "2", "--transport", "shm", "--no-mpi"]);
    assert!(table.contains("get MB/s") && table.contains("# copy ms: one memcpy"), "{table}");
    if open_mpi() {
        for transport in ["shm", "tcp"] {
            let mpi = of(rows, "put", "mpi", &format!("{transport}, Isend/Irecv ring"));
            assert_eq!(sizes(&mpi), all, "{transport}: {v}\n{notes}");
            assert!(mpi.iter().all(|r| num(r, "mb_per_s") > 0.0 && num(r, "repetitions_count") == 2.0), "{v}");
        }
    }
    // Three processes in a ring, one job over UDP, no reference.
    let ring = bench(&["put", "-n", "3", "--sizes", "70000", "--repetitions", "3", "--transport", "udp", "--no-mpi"]);
    let ring_rows = crate::rows(&ring);
    assert_eq!(jobs(ring_rows, "put"), ["udp"]);
    let what: Vec<&str> = ring_rows.iter().map(|r| r["what"].as_str().expect("what")).collect();
    assert_eq!(what, ["udp, put", "udp, hpput", "udp, get", "one copy"], "{ring}");
    assert!(ring_rows.iter().all(|r| num(r, "procs") == 3.0), "{ring}");
    // The variants asked for, and only those.
    let one = bench(&[
        "put",
        "--sizes",
        "70000",
        "--repetitions",
        "2",
        "--transport",
        "udp",
        "--no-mpi",
        "--variants",
        "get,put",
    ]);
    let what: Vec<&str> = crate::rows(&one).iter().map(|r| r["what"].as_str().expect("what")).collect();
    assert_eq!(what, ["udp, get", "udp, put", "one copy"], "{one}");
}
