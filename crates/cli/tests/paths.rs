//! Adaptive paths on real packets, across the namespace test bed's
//! two-class port. In a test binary of its own: cargo runs the test
//! binaries one after another, so no other job loads the cores meanwhile,
//! and no other test uses the test bed's namespaces.

use std::net::UdpSocket;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bulkwire_comm::{Source, Tag, World};

fn is_rank() -> bool {
    std::env::var("BULKWIRE_RENDEZVOUS").is_ok()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn have(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program} >/dev/null")]).status().is_ok_and(|s| s.success())
}

/// One test at a time on the test bed: they share its namespaces.
static TEST_BED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The two-host test bed with the receiver behind a two-class port, held
/// by one test and taken down when dropped.
struct TestBed {
    script: std::path::PathBuf,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl TestBed {
    /// Brings it up, or says why it is skipped: it needs root, iproute2
    /// and tc.
    fn bottleneck() -> Option<TestBed> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns-testbed.sh");
        if !root || !have("ip") || !have("tc") {
            eprintln!("skipped: needs root, iproute2 and tc for the namespace test bed");
            return None;
        }
        let one = TEST_BED.lock().unwrap_or_else(|e| e.into_inner());
        let up = Command::new(&script).args(["bottleneck", "2", "100mbit"]).output().unwrap();
        if !up.status.success() {
            eprintln!("skipped: the test bed did not come up: {}", String::from_utf8_lossy(&up.stderr));
            return None;
        }
        Some(TestBed { script, _one: one })
    }

    /// `test` of this binary as the two ranks of a job with adaptive paths
    /// (`--verbose --stats`), with `env` besides thresholds far above a
    /// busy host's scheduling delays and far below a congested queue's
    /// 8 ms (TM 2 ms, Tm 1 ms): the tests check the switching, not the
    /// calibration (tested in proto), on a loaded CI machine.
    fn adaptive_job(&self, test: &str, env: &[(&str, &str)]) -> Output {
        let root_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", "2", "--hosts", "bwh0,bwh1", "--bind", "10.90.0.254", "--paths", "adaptive"])
            .args(["--verbose", "--stats"])
            .env("BULKWIRE_LATENCY_HIGH_US", "2000")
            .env("BULKWIRE_LATENCY_LOW_US", "1000")
            .envs(env.iter().copied())
            .arg("--ssh")
            .arg(root_dir.join("scripts/netns-exec"))
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for TestBed {
    fn drop(&mut self) {
        let _ = Command::new(&self.script).args(["down", "2"]).status();
    }
}

/// Adaptive paths on real packets (seed 000 §3): two hosts of the namespace
/// test bed, the receiver behind a port whose best-effort class a UDP flood
/// congests while the premium class stays free. Rank 0 streams messages to
/// rank 1 throughout; while the flood lasts, rank 1's latency monitor sees
/// the ordinary path's queue and moves rank 0's data to the premium path,
/// and back once it is over. Every message arrives, in order. Needs root,
/// iproute2 and tc's htb; skipped otherwise.
#[test]
fn adaptive_paths_leave_a_congested_ordinary_class_and_come_back() {
    // About 8.5 s: the flood from 1.5 s to 5.5 s of the test, then quiet.
    // The flood outlasts the launcher's 3 s patience: the ranks' heartbeats
    // must cross the congested port in the premium class.
    const MESSAGES: u32 = 14_000;
    if is_rank() {
        let world = World::init().unwrap();
        let start = Instant::now();
        if world.rank() == 0 {
            // A message of 1,000 bytes every 0.6 ms.
            for i in 0..MESSAGES {
                let mut data = vec![(i % 251) as u8; 1000];
                data[..4].copy_from_slice(&i.to_le_bytes());
                world.send(1, 9, &data).unwrap();
                let due = Duration::from_micros(600) * (i + 1);
                while start.elapsed() < due {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        } else {
            for i in 0..MESSAGES {
                let (_, data) = world.recv(Source::Rank(0), Tag::Is(9)).unwrap();
                assert_eq!(data.len(), 1000);
                assert_eq!(u32::from_le_bytes(data[..4].try_into().unwrap()), i, "in order, once each");
                assert!(data[4..].iter().all(|&b| b == (i % 251) as u8));
            }
        }
        world.barrier().unwrap();
        if world.rank() == 0 {
            let s = world.runtime().latency_stats(1).unwrap();
            let premium = world.runtime().stats().premium.data;
            println!(
                "adaptive: to premium {} times, back {} times; {} data packets on premium",
                s.switches_to_high, s.switches_to_low, premium.packets
            );
        }
        world.finalize().unwrap();
        return;
    }
    let Some(bed) = TestBed::bottleneck() else { return };
    // 120 Mbit/s of 1,400-byte datagrams into the receiver's 100 Mbit/s
    // port, from 1.5 s to 5.5 s of the job.
    let flood = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(1500));
        let socket = UdpSocket::bind("10.90.0.254:0").unwrap();
        let payload = [0u8; 1400];
        let gap = Duration::from_secs_f64(1428.0 * 8.0 / 120e6);
        let start = Instant::now();
        let mut sent = 0u32;
        while start.elapsed() < Duration::from_secs(4) {
            let _ = socket.send_to(&payload, "10.90.0.2:9");
            sent += 1;
            while start.elapsed() < gap * sent {
                std::hint::spin_loop();
            }
        }
    });
    let out = bed.adaptive_job("adaptive_paths_leave_a_congested_ordinary_class_and_come_back", &[]);
    flood.join().unwrap();
    drop(bed);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("bulkwire: adaptive paths: data on the premium path while"), "--verbose: {stderr}");
    // The test harness may print its own words before the rank's line.
    let line = stdout.split("adaptive: ").nth(1).and_then(|l| l.lines().next()).unwrap_or_else(|| panic!("{stdout}"));
    let numbers: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    let (to_premium, back, premium_packets) = (numbers[0], numbers[1], numbers[2]);
    assert!(to_premium >= 1 && back >= 1, "switched to premium and back: {line}\n{stderr}");
    assert!(premium_packets > 0, "{line}");
    assert!(stderr.contains("rank 0: data to rank 1 on the premium path"), "{stderr}");
}

/// Samples that age, on real packets (`BULKWIRE_LATENCY_LIFETIME_MS=2`):
/// rank 0 sends bursts of 20 messages with 25 ms of silence between them
/// across the test bed's quiet port. A burst that follows more than 2 ms
/// without a packet on the ordinary path starts on the premium path, a
/// probe asks rank 1, and its answer brings the rest of the burst back to
/// the ordinary path: data goes on both paths, and the mode stays. Every message arrives in order; `run --stats`
/// counts the bursts that asked. Needs root, iproute2 and tc; skipped
/// otherwise.
#[test]
fn after_a_silence_a_burst_starts_on_premium_until_the_receiver_answers() {
    const BURSTS: u32 = 30;
    const EACH: u32 = 20;
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 0 {
            for b in 0..BURSTS {
                std::thread::sleep(Duration::from_millis(25));
                for i in 0..EACH {
                    world.send(1, 3, &(b * EACH + i).to_le_bytes().repeat(250)).unwrap();
                }
            }
        } else {
            for n in 0..BURSTS * EACH {
                let (_, data) = world.recv(Source::Rank(0), Tag::Is(3)).unwrap();
                assert_eq!(data, n.to_le_bytes().repeat(250), "in order, once each");
            }
        }
        world.barrier().unwrap();
        if world.rank() == 0 {
            let s = world.runtime().latency_stats(1).unwrap();
            let stats = world.runtime().stats();
            println!(
                "aging: {} bursts asked, {} switches; {} data packets on premium, {} on ordinary",
                s.confirmations,
                s.switches(),
                stats.premium.data.packets,
                stats.ordinary.data.packets
            );
        }
        world.finalize().unwrap();
        return;
    }
    let Some(bed) = TestBed::bottleneck() else { return };
    // What is tested is the aging of samples, not the thresholds: they are
    // set far above any delay the machine's own load causes (a loaded run
    // once saw 26 switches with a TM of 2 ms), so that the mode stays. So is
    // the loss threshold, which is the probes' interval: with the default
    // 10 ms a loaded CI machine once held a probe back long enough to be
    // counted lost, which switched the mode and back.
    let out = bed.adaptive_job(
        "after_a_silence_a_burst_starts_on_premium_until_the_receiver_answers",
        &[
            ("BULKWIRE_LATENCY_LIFETIME_MS", "2"),
            ("BULKWIRE_LATENCY_HIGH_US", "50000"),
            ("BULKWIRE_LATENCY_LOW_US", "25000"),
            ("BULKWIRE_LATENCY_INTERVAL_MS", "50"),
        ],
    );
    drop(bed);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("starts on the premium path until a probe is answered"), "--verbose: {stderr}");
    let line = stdout.split("aging: ").nth(1).and_then(|l| l.lines().next()).unwrap_or_else(|| panic!("{stdout}"));
    let numbers: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    let (asked, switches, premium, ordinary) = (numbers[0], numbers[1], numbers[2], numbers[3]);
    // A probe every 50 ms: a burst asks unless one left in its last 2 ms;
    // the barrier after the last burst is data after a silence too.
    assert!(asked >= u64::from(BURSTS) / 3 && asked <= u64::from(BURSTS) + 1, "{line}\n{stderr}");
    // The path stays quiet, far below the thresholds: the mode does not change.
    assert_eq!(switches, 0, "the mode stayed: {line}\n{stderr}");
    assert!(premium >= asked && ordinary >= asked, "{line}\n{stderr}");
    // `--stats`: the "asked" column of rank 0's line to rank 1.
    let row = stderr
        .lines()
        .chain(stdout.lines())
        .find(|l| l.trim_start().starts_with("0>1"))
        .unwrap_or_else(|| panic!("no --stats row: {stdout}\n{stderr}"));
    assert_eq!(row.split_whitespace().last().and_then(|w| w.parse::<u64>().ok()), Some(asked), "{row}");
}

/// UDP segmentation offload on real packets: rank 0 streams 16 KiB
/// messages (a dozen Ethernet-sized datagrams each) to rank 1 across the
/// test bed. With offload (the default) runs of datagrams leave in
/// segmented sends and arrive in coalesced reads (`--stats`); with
/// `BULKWIRE_GSO=0` none do; with datagrams larger than the interface's
/// MTU (`BULKWIRE_MAX_DATAGRAM=3000`, sent in IP fragments) the kernel
/// refuses to segment and the runtime sends them one by one. Every byte
/// arrives in order each time. Needs root, iproute2 and tc; skipped
/// otherwise.
#[test]
fn segmentation_offload_carries_a_stream_between_hosts() {
    const MESSAGES: u32 = 200;
    if is_rank() {
        let world = World::init().unwrap();
        let message = |n: u32| -> Vec<u8> { (0..16384u32).map(|i| (i.wrapping_mul(31) ^ n) as u8).collect() };
        if world.rank() == 0 {
            for n in 0..MESSAGES {
                world.send(1, 5, &message(n)).unwrap();
            }
        } else {
            for n in 0..MESSAGES {
                let (_, data) = world.recv(Source::Rank(0), Tag::Is(5)).unwrap();
                assert!(data == message(n), "message {n} whole, in order");
            }
        }
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    let Some(bed) = TestBed::bottleneck() else { return };
    let name = "segmentation_offload_carries_a_stream_between_hosts";
    let offload = |env: &[(&str, &str)]| -> Option<(u64, u64)> {
        let out = bed.adaptive_job(name, env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{env:?}\n{stdout}\n{stderr}");
        let all = format!("{stdout}\n{stderr}");
        let section = all.split("UDP reads and sends:").nth(1)?;
        let row = section.lines().find(|l| l.trim_start().starts_with("0>1"))?;
        let numbers: Vec<u64> = row.split_whitespace().skip(1).map(|w| w.parse().unwrap()).collect();
        Some((numbers[0], numbers[1]))
    };
    let (segmented, _) = offload(&[]).expect("--stats shows the offload");
    assert!(segmented >= u64::from(MESSAGES), "most of the stream left in segmented sends: {segmented}");
    assert_eq!(offload(&[("BULKWIRE_GSO", "0")]), None, "off with BULKWIRE_GSO=0");
    let refused = offload(&[("BULKWIRE_MAX_DATAGRAM", "3000")]);
    assert!(refused.is_none_or(|(s, _)| s == 0), "datagrams above the MTU are not segmented: {refused:?}");
    drop(bed);
}

/// `bulkwire lab service-switching --quick`: seed 000's experiment on the
/// test bed's two-class port, PDE2 at ρ 0.5 and 1.1, each choice of paths
/// twice. Every run delivers every message of the trace in order (the
/// benchmark checks each); premium-only puts all of the task's data on the
/// premium path, ordinary-only none, adaptive some; rows in the row format.
/// Needs root, iproute2 and tc; skipped otherwise.
#[test]
fn the_service_switching_experiment_runs_on_the_test_bed() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !have("ip") || !have("tc") {
        eprintln!("skipped: needs root, iproute2 and tc for the namespace test bed");
        return;
    }
    let _one = TEST_BED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let testbed = dir.join("scripts/netns-testbed.sh");
    let up = Command::new(&testbed).args(["bottleneck", "2", "100mbit"]).output().unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let out_dir = std::env::temp_dir().join(format!("bulkwire-ss-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .current_dir(&dir)
        .args(["lab", "service-switching", "--quick", "--json", "--out"])
        .arg(&out_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new(&testbed).args(["down", "2"]).status();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(out_dir.join("service-switching-testbed.csv").exists(), "{stderr}");
    let _ = std::fs::remove_dir_all(&out_dir);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(rows.len(), 6, "three choices of paths at two loads: {stdout}");
    for row in &rows {
        assert_eq!(
            (row["bench"].as_str(), row["source"].as_str(), row["trace"].as_str()),
            (Some("service-switching"), Some("testbed"), Some("PDE2")),
            "{row}"
        );
        assert_eq!(row["repetitions_count"], 2, "{row}");
        assert!(row["latency_mean_us"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["messages_count"].as_f64().unwrap() > 1000.0, "{row}");
        let share = row["share"].as_f64().unwrap();
        match row["what"].as_str().unwrap() {
            "ordinary" => assert_eq!(share, 0.0, "{row}"),
            "premium" => assert_eq!(share, 1.0, "{row}"),
            "adaptive" => assert!((0.0..=1.0).contains(&share), "{row}"),
            other => panic!("unexpected paths {other}"),
        }
    }
}

/// A premium network of its own (`BULKWIRE_PREMIUM_IFACE`): on the test
/// bed's `dual` layout every host has a second interface, eth1, on a
/// second switch. With premium paths and no DSCP, rank 0's data to rank 1
/// leaves by eth1; with an interface that does not exist, every rank says
/// so once and the job runs on the ordinary path. Needs root and iproute2;
/// skipped otherwise.
#[test]
fn a_premium_interface_carries_the_premium_path() {
    const MESSAGES: u32 = 200;
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 0 {
            for i in 0..MESSAGES {
                world.send(1, 7, &vec![i as u8; 5000]).unwrap();
            }
        } else {
            for i in 0..MESSAGES {
                let (_, data) = world.recv(Source::Rank(0), Tag::Is(7)).unwrap();
                assert_eq!(data, vec![i as u8; 5000], "in order, intact");
            }
        }
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !have("ip") {
        eprintln!("skipped: needs root and iproute2 for the namespace test bed");
        return;
    }
    let _one = TEST_BED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let testbed = dir.join("scripts/netns-testbed.sh");
    let up = Command::new(&testbed).args(["dual", "2", "100mbit"]).output().unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let sent_by = |iface: &str| -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", "bwh0", "cat", &format!("/sys/class/net/{iface}/statistics/tx_bytes")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let job = |iface: &str| {
        Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", "2", "--hosts", "bwh0,bwh1", "--bind", "10.90.0.254", "--paths", "premium"])
            .arg("--ssh")
            .arg(dir.join("scripts/netns-exec"))
            .env("BULKWIRE_PREMIUM_IFACE", iface)
            .env("BULKWIRE_PREMIUM_DSCP", "0")
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "a_premium_interface_carries_the_premium_path", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let (eth0, eth1) = (sent_by("eth0"), sent_by("eth1"));
    let out = job("eth1");
    let (eth0_used, eth1_used) = (sent_by("eth0") - eth0, sent_by("eth1") - eth1);
    let missing = job("eth9");
    let _ = Command::new(&testbed).args(["down", "2"]).status();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let data = u64::from(MESSAGES) * 5000;
    assert!(eth1_used > data, "the data left by eth1: {eth1_used} bytes against {data}\n{stderr}");
    assert!(eth0_used < data / 4, "and not by eth0: {eth0_used} bytes\n{stderr}");
    let (stdout, stderr) = text(&missing);
    assert!(missing.status.success(), "{stdout}\n{stderr}");
    let said = "the premium path is not available (interface eth9 has no address (or does not exist))";
    assert_eq!(stderr.matches(said).count(), 2, "once per rank: {stderr}");
}

/// Hosts of the test bed are network namespaces of one machine: their
/// processes share its cores. A job of one rank more than the machine has
/// cores, spread over two such hosts (no host with more ranks than cores),
/// is told so at the rendezvous and its waits yield; a job of two ranks is
/// not; the group broadcast's automatic choice is the one for hosts with a
/// core per process. Every rank says what its runtime decided. Needs root
/// and iproute2; skipped otherwise.
#[test]
fn ranks_on_namespaces_of_one_machine_share_its_cores() {
    if is_rank() {
        let world = World::init().unwrap();
        println!("rank {} shares cores: {}", world.rank(), world.runtime().shares_cores());
        // The links between such hosts, not the shared cores, decide how
        // a group broadcasts: no host has more ranks than cores.
        let groups = bulkwire_groups::Groups::new(&world).unwrap();
        let chosen = groups.world().algorithm(bulkwire_groups::Operation::Bcast, 32 << 10).unwrap();
        println!("rank {} broadcasts 32 KiB by: {chosen}", world.rank());
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    let cores = bulkwire_runtime::kernel_cores();
    if cores > 16 {
        eprintln!("skipped: {cores} cores would make a job of {} ranks", cores + 1);
        return;
    }
    let Some(bed) = TestBed::bottleneck() else { return };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let job = |ranks: u32| {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", &ranks.to_string(), "--hosts", "bwh0,bwh1", "--bind", "10.90.0.254"])
            .arg("--ssh")
            .arg(dir.join("scripts/netns-exec"))
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "ranks_on_namespaces_of_one_machine_share_its_cores", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        stdout
    };
    let many = cores + 1;
    // What hosts with a core per process choose (binomial from 3 members;
    // flat where two ranks make the job, as where they share cores).
    let apart = bulkwire_groups::schedule::choose(bulkwire_groups::Operation::Bcast, 32 << 10, many as usize, false);
    let stdout = job(many);
    for rank in 0..many {
        assert!(stdout.contains(&format!("rank {rank} shares cores: true")), "{many} ranks on {cores} cores: {stdout}");
        assert!(stdout.contains(&format!("rank {rank} broadcasts 32 KiB by: {apart}")), "{stdout}");
    }
    if cores >= 2 {
        let stdout = job(2);
        for rank in 0..2 {
            assert!(stdout.contains(&format!("rank {rank} shares cores: false")), "2 ranks on {cores} cores: {stdout}");
        }
    }
    drop(bed);
}
