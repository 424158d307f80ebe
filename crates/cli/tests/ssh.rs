//! Jobs started over ssh with `bulkwire run --hosts`, against real ssh
//! servers in two network namespaces joined by a veth pair. Needs root,
//! iproute2 and OpenSSH (client and server); skipped, with a note, where
//! they are missing.
//!
//! Each test is both the launcher and the program: run normally, it starts
//! `bulkwire run --hosts … <this test binary> --exact <this test>`; run as a
//! rank (BULKWIRE_RENDEZVOUS is set), it plays its part of the job.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bulkwire_comm::{Source, Tag, World};

const A: &str = "bwsshA";
const B: &str = "bwsshB";
const IP_A: &str = "10.78.0.1";
const IP_B: &str = "10.78.0.2";
const PORT: &str = "2222";

fn is_rank() -> bool {
    std::env::var("BULKWIRE_RENDEZVOUS").is_ok()
}

fn sh(cmd: &str) -> bool {
    Command::new("sh").args(["-c", cmd]).status().is_ok_and(|s| s.success())
}

/// The namespaces have fixed names: one test bed at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Two namespaces, each with an ssh server that lets in one client key.
struct Testbed {
    dir: PathBuf,
    servers: Vec<Child>,
    _turn: MutexGuard<'static, ()>,
}

impl Testbed {
    fn up(name: &str) -> Option<Testbed> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !sh("command -v ip && command -v ssh && command -v ssh-keygen && test -x /usr/sbin/sshd") {
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        Testbed::down();
        let ok = sh(&format!(
            "ip netns add {A} && ip netns add {B} && \
             ip link add bwsA type veth peer name bwsB && \
             ip link set bwsA netns {A} && ip link set bwsB netns {B} && \
             ip -n {A} addr add {IP_A}/24 dev bwsA && ip -n {B} addr add {IP_B}/24 dev bwsB && \
             ip -n {A} link set bwsA up && ip -n {B} link set bwsB up && \
             ip -n {A} link set lo up && ip -n {B} link set lo up"
        ));
        let dir = std::env::temp_dir().join(format!("bulkwire-ssh-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let keys = sh(&format!(
            "mkdir -p /run/sshd && \
             ssh-keygen -q -t ed25519 -N '' -f {d}/host && ssh-keygen -q -t ed25519 -N '' -f {d}/client && \
             cp {d}/client.pub {d}/authorized_keys && chmod 600 {d}/authorized_keys"
        ));
        if !ok || !keys {
            Testbed::down();
            return None;
        }
        let mut servers = Vec::new();
        for (ns, ip) in [(A, IP_A), (B, IP_B)] {
            let config = dir.join(format!("sshd-{ns}.conf"));
            std::fs::write(
                &config,
                format!(
                    "ListenAddress {ip}:{PORT}\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n\
                     PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {d}/sshd-{ns}.pid\n"
                ),
            )
            .unwrap();
            let server = Command::new("ip")
                .args(["netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f"])
                .arg(&config)
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            servers.push(server);
        }
        let bed = Testbed { dir, servers, _turn: turn };
        // Wait until both servers accept connections.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if [(A, IP_A), (B, IP_B)]
                .iter()
                .all(|(ns, ip)| sh(&format!("ip netns exec {ns} {} {ip} true >/dev/null 2>&1", bed.ssh())))
            {
                return Some(bed);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the test ssh servers did not come up");
    }

    fn ssh(&self) -> String {
        format!(
            "ssh -i {}/client -p {PORT} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            self.dir.display()
        )
    }

    /// Runs `test` of this binary as a job over ssh, launched from namespace A.
    fn launch(&self, hosts: &str, n: u32, test: &str) -> (Output, Duration) {
        let start = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", A, env!("CARGO_BIN_EXE_bulkwire"), "run", "-n", &n.to_string()])
            .args(["--tag-output", "--hosts", hosts, "--ssh", &self.ssh()])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, start.elapsed())
    }

    fn down() {
        sh(&format!("ip netns del {A} 2>/dev/null; ip netns del {B} 2>/dev/null; true"));
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        Testbed::down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_ring_over_ssh_across_two_hosts() {
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, size) = (world.rank(), world.size());
        let next = (rank + 1) % size;
        let prev = (rank + size - 1) % size;
        for round in 0..50u32 {
            let data = vec![(rank + round) as u8; 5000];
            world.send(next, 1, &data).unwrap();
            let (_, got) = world.recv(Source::Rank(prev), Tag::Is(1)).unwrap();
            assert_eq!(got, vec![(prev + round) as u8; 5000]);
        }
        world.barrier().unwrap();
        let (ordinary, _) = world.runtime().peer_addrs(rank).unwrap();
        println!("ssh rank {rank} of {size} at {}", ordinary.ip());
        world.finalize().unwrap();
        return;
    }
    let Some(bed) = Testbed::up("ring") else {
        eprintln!("skipped: needs root, iproute2 and OpenSSH (ssh, ssh-keygen, /usr/sbin/sshd)");
        return;
    };
    let (out, _) = bed.launch(&format!("{IP_A}:2,{IP_B}:2"), 4, "a_ring_over_ssh_across_two_hosts");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for (rank, ip) in [(0, IP_A), (1, IP_A), (2, IP_B), (3, IP_B)] {
        let line = format!("ssh rank {rank} of 4 at {ip}");
        let tag = format!("[{rank}] ");
        assert!(stdout.lines().any(|l| l.starts_with(&tag) && l.contains(&line)), "{stdout}\n{stderr}");
    }
}

#[test]
fn a_hung_rank_over_ssh_stops_the_job_and_leaves_nothing_behind() {
    if is_rank() {
        let world = World::init().unwrap();
        println!("rank {} pid {}", world.rank(), std::process::id());
        world.barrier().unwrap();
        if world.rank() == 1 {
            // SAFETY: stopping ourselves; the launcher must notice the silence.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        let _ = world.recv(Source::Rank(1), Tag::Is(9));
        return;
    }
    let Some(bed) = Testbed::up("hung") else {
        eprintln!("skipped: needs root, iproute2 and OpenSSH (ssh, ssh-keygen, /usr/sbin/sshd)");
        return;
    };
    let (out, took) =
        bed.launch(&format!("{IP_A},{IP_B}"), 2, "a_hung_rank_over_ssh_stops_the_job_and_leaves_nothing_behind");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(took < Duration::from_secs(15), "took {took:?}\n{stderr}");
    assert!(stderr.contains("rank 1"), "{stderr}");
    // The stopped rank dies with its ssh session.
    let pids: Vec<u32> = stdout.lines().filter_map(|l| l.split(" pid ").nth(1)?.trim().parse().ok()).collect();
    assert_eq!(pids.len(), 2, "{stdout}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "rank pid {p} survived\n{stderr}");
    }
}
