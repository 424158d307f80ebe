//! Multi-process jobs on loopback, started with `bulkwire run`.
//!
//! Each test is both the launcher and the program: run normally, it starts
//! `bulkwire run -n N <this test binary> --exact <this test>`; run as a rank
//! (BULKWIRE_RENDEZVOUS is set), it plays its part of the job.

use std::net::UdpSocket;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bulkwire_comm::{CommError, Completion, Source, Tag, World};
use bulkwire_runtime::RuntimeError;
use bulkwire_wire::{encode, job_tag, Header, JobKey, PacketType};

fn is_rank() -> bool {
    // Set for every rank, whoever started it (BULKWIRE_RANK is not, under mpirun).
    std::env::var("BULKWIRE_RENDEZVOUS").is_ok()
}

/// Runs this test as a job of `n` ranks.
fn launch(n: u32, test: &str, extra: &[&str]) -> (Output, Duration) {
    launch_with_env(n, test, extra, &[])
}

fn launch_with_env(n: u32, test: &str, extra: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let exe = std::env::current_exe().expect("test binary");
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bulkwire"));
    cmd.envs(env.iter().copied());
    cmd.arg("run").arg("-n").arg(n.to_string()).args(extra);
    cmd.arg(exe).args(["--exact", test, "--nocapture", "--test-threads=1"]);
    let out = cmd.stdin(Stdio::null()).output().expect("run bulkwire");
    (out, start.elapsed())
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn ring_any_source_and_nonblocking_on_2_3_and_8_ranks() {
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, size) = (world.rank(), world.size());
        let right = (rank + 1) % size;
        let left = (rank + size - 1) % size;
        for i in 0..200u32 {
            let msg: Vec<u8> = (0..(i as usize * 37) % 5000).map(|k| (k as u32 ^ i ^ rank) as u8).collect();
            world.send(right, i as i32, &msg).unwrap();
            let (status, got) = world.recv(Source::Rank(left), Tag::Is(i as i32)).unwrap();
            let expect: Vec<u8> = (0..(i as usize * 37) % 5000).map(|k| (k as u32 ^ i ^ left) as u8).collect();
            assert_eq!((status.source, status.tag, got), (left, i as i32, expect));
        }
        // Any source: everyone sends to rank 0, which takes them in any order.
        let big = vec![rank as u8; 100_000];
        if rank == 0 {
            let mut seen = vec![false; size as usize];
            for _ in 1..size {
                let (status, data) = world.recv(Source::Any, Tag::Is(9)).unwrap();
                assert!(data.iter().all(|&b| b == status.source as u8) && data.len() == 100_000);
                seen[status.source as usize] = true;
            }
            assert!(seen[1..].iter().all(|&s| s));
        } else {
            world.send(0, 9, &big).unwrap();
        }
        // Non-blocking: post the receive first, test until done.
        let mut r = world.irecv(Source::Rank(left), Tag::Is(77)).unwrap();
        let s = world.isend(right, 77, b"nb").unwrap();
        assert_eq!(world.wait(s).unwrap(), Completion::Sent);
        let done = loop {
            if let Some(c) = world.test(&mut r).unwrap() {
                break c;
            }
        };
        assert!(matches!(done, Completion::Received(st, d) if st.source == left && d == b"nb"));
        world.barrier().unwrap();
        println!("ok rank {rank} of {size}");
        world.finalize().unwrap();
        return;
    }
    // Through shared memory (the default on one host) and over UDP.
    for shm in ["on", "off"] {
        for n in [2, 3, 8] {
            let (out, _) = launch(n, "ring_any_source_and_nonblocking_on_2_3_and_8_ranks", &["--shm", shm]);
            let (stdout, stderr) = text(&out);
            assert!(out.status.success(), "n={n} shm {shm}\n{stdout}\n{stderr}");
            for r in 0..n {
                assert!(stdout.contains(&format!("ok rank {r} of {n}")), "n={n} shm {shm}\n{stdout}\n{stderr}");
            }
        }
    }
}

/// `World::barrier` holds every rank until the last has entered, on the
/// board in shared memory (on one host) and by messages (over UDP), many
/// times in a row; a rank that finishes without entering stops the others
/// with an error that names it.
/// A shared-memory file system too small for the job's rings and arenas
/// (a container's `/dev/shm`) makes the rings smaller, then leaves out the
/// arenas, then sends over UDP, and says so; messages and BSP puts go
/// through whole either way. Before, the first page past its size killed a
/// rank (SIGBUS). Runs the job in a mount namespace of its own with a
/// small tmpfs on `/dev/shm` (root and `unshare` only; skipped otherwise).
#[test]
fn a_small_dev_shm_takes_smaller_rings_then_udp() {
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, size) = (world.rank(), world.size());
        let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
        for i in 0..20u32 {
            let msg: Vec<u8> = (0..(300 << 10) + i as usize).map(|k| (k as u32 ^ i ^ rank) as u8).collect();
            world.send(right, 1, &msg).unwrap();
            let (_, got) = world.recv(Source::Rank(left), Tag::Is(1)).unwrap();
            assert!(got.iter().enumerate().all(|(k, &b)| b == (k as u32 ^ i ^ left) as u8), "message {i}");
        }
        let rt = Box::leak(Box::new(world)).runtime();
        let mut bsp = bulkwire_bsp::Bsp::begin_on(rt).unwrap();
        let area = bsp.register::<u32>(4096 * size as usize).unwrap();
        bsp.sync().unwrap();
        for step in 0..50u32 {
            for q in 0..size {
                bsp.put(q, &vec![rank ^ step; 4096], &area, rank as usize * 4096).unwrap();
            }
            bsp.sync().unwrap();
            for from in 0..size {
                assert!(bsp.area(&area)[from as usize * 4096..][..4096].iter().all(|&v| v == from ^ step), "{step}");
            }
        }
        bsp.end().unwrap();
        rt.finish().unwrap();
        println!("ok rank {rank}");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: no mount namespace for a small /dev/shm");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let test = "a_small_dev_shm_takes_smaller_rings_then_udp";
    // 4 processes: 24 MiB holds rings of 1 MiB and the arenas, 4 MiB rings
    // of 64 KiB without them, 256 KiB nothing.
    for (size, says) in [
        ("24m", "rings of 1024 KiB for the 4 processes"),
        ("4m", "rings of 64 KiB and no arena for the 4 processes"),
        ("256k", "no shared-memory path (/dev/shm has 256 KiB free and 4 processes need"),
    ] {
        let script = format!(
            "mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$0\" run -n 4 \"$1\" --exact {test} --nocapture"
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .arg(env!("CARGO_BIN_EXE_bulkwire"))
            .arg(&exe)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        if !out.status.success() && stderr.contains("unshare") {
            eprintln!("no mount namespace here: {stderr}");
            return;
        }
        assert!(out.status.success(), "{size}: {stdout}\n{stderr}");
        assert!(stderr.contains(says), "{size}: {stderr}");
        for rank in 0..4 {
            assert!(stdout.contains(&format!("ok rank {rank}\n")), "{size}: {stdout}\n{stderr}");
        }
    }
}

#[test]
fn a_barrier_holds_every_rank_until_the_last_enters() {
    let test = "a_barrier_holds_every_rank_until_the_last_enters";
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, size) = (world.rank(), world.size());
        let dir = std::path::PathBuf::from(std::env::var("BARRIER_TEST_DIR").unwrap());
        if std::env::var("BARRIER_TEST_LEAVE").is_ok() && rank == size - 1 {
            world.finalize().unwrap_or_else(|e| println!("rank {rank}: {e}"));
            return;
        }
        for round in 0..20 {
            // The last rank comes late, and leaves a mark before it enters.
            if rank == size - 1 {
                std::thread::sleep(Duration::from_millis(if round % 5 == 0 { 100 } else { 1 }));
                std::fs::write(dir.join(format!("entered.{round}")), b"").unwrap();
            }
            if let Err(e) = world.barrier() {
                println!("rank {rank}: {e}");
                return;
            }
            assert!(dir.join(format!("entered.{round}")).exists(), "rank {rank} left barrier {round} early");
        }
        println!("ok rank {rank}");
        world.finalize().unwrap();
        return;
    }
    for (flags, n) in [(&[][..], 4), (&[][..], 8), (&["--shm", "off"][..], 4)] {
        let dir = std::env::temp_dir().join(format!("bulkwire-barrier-{}-{n}-{}", std::process::id(), flags.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = [("BARRIER_TEST_DIR", dir.to_str().unwrap())];
        let (out, _) = launch_with_env(n, test, flags, &env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{flags:?} n={n}\n{stdout}\n{stderr}");
        for r in 0..n {
            assert!(stdout.contains(&format!("ok rank {r}\n")), "{flags:?} n={n}\n{stdout}\n{stderr}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The last rank finishes instead: the others learn it, whichever path.
    for flags in [&[][..], &["--shm", "off"][..]] {
        let dir = std::env::temp_dir().join(format!("bulkwire-barrier-leave-{}-{}", std::process::id(), flags.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = [("BARRIER_TEST_DIR", dir.to_str().unwrap()), ("BARRIER_TEST_LEAVE", "1")];
        let (out, took) = launch_with_env(3, test, flags, &env);
        let (stdout, stderr) = text(&out);
        assert!(stdout.contains("rank 2 finished without entering the barrier"), "{flags:?}\n{stdout}\n{stderr}");
        assert!(took < Duration::from_secs(30), "{took:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Ranks waiting in a barrier on the board (shared memory) whose spin has
/// run out sleep in poll(2) on their sockets; the last to enter sends each
/// an empty datagram. Where a rank's progress thread reads that datagram
/// before its application thread, it must wake that thread: once it did
/// not, and the thread slept to its poll's limit (20 ms) with every post
/// it waited for on the board (`World::barrier` among 64 processes on 2
/// cores took 22-27 ms). Rank 0 comes 3 ms late to each of 100 barriers,
/// so the others wait and are woken: no rank may miss a wake-up
/// (`Runtime::wakeups_missed`), but for a rare writer descheduled between
/// its post and the datagram it sends (two in all). Sleeps to the limit
/// alone are printed, not counted: a rank kept from running longer than 20
/// ms by the rest of the machine (the other tests of this file: two ranks
/// of four at once, on 2 cores, in most runs of the whole file) makes the
/// others sleep that long, woken or not.
#[test]
fn a_rank_asleep_in_a_barrier_on_the_board_is_woken() {
    let test = "a_rank_asleep_in_a_barrier_on_the_board_is_woken";
    if is_rank() {
        let world = World::init().unwrap();
        world.barrier().unwrap();
        for _ in 0..100 {
            if world.rank() == 0 {
                std::thread::sleep(Duration::from_millis(3));
            }
            world.barrier().unwrap();
        }
        let runtime = world.runtime();
        println!(
            "rank {} slept to the limit {} times, {} of them past its wake-up",
            world.rank(),
            runtime.polls_to_limit(),
            runtime.wakeups_missed()
        );
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(4, test, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let sleeps: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.split("slept to the limit ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(sleeps.len(), 4, "{stdout}\n{stderr}");
    let missed: u64 = stdout
        .lines()
        .filter_map(|l| l.strip_suffix(" of them past its wake-up")?.rsplit(' ').next())
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    println!("sleeps to the limit {sleeps:?}; wake-ups missed {missed}");
    assert!(missed <= 2, "wake-ups lost: {missed} (sleeps to the limit {sleeps:?})\n{stdout}");
}

/// The files of a job's shared-memory path, by its id (BULKWIRE_JOB).
fn shm_files(job_hex: &str) -> Vec<std::path::PathBuf> {
    let job = u64::from_str_radix(job_hex.trim(), 16).unwrap();
    bulkwire_runtime::shm_leftover_files(job)
}

/// Peers on one host find each other's files and say so with --verbose;
/// the files are gone while the job still runs; `--shm off` is UDP.
#[test]
fn peers_on_one_host_use_shared_memory_and_leave_no_files() {
    if is_rank() {
        let world = World::init().unwrap();
        let peer = (world.rank() + 1) % world.size();
        let from = (world.rank() + world.size() - 1) % world.size();
        // Messages on both sides of the single-copy threshold.
        for len in [0usize, 8, 40 << 10, 5 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + world.rank() as usize) as u8).collect();
            world.send(peer, 9, &data).unwrap();
            let (_, got) = world.recv(Source::Rank(from), Tag::Is(9)).unwrap();
            assert!(got.len() == len && got.iter().enumerate().all(|(i, &b)| b == (i * 31 + from as usize) as u8));
        }
        world.barrier().unwrap();
        let job = std::env::var("BULKWIRE_JOB").unwrap();
        println!(
            "rank {} transport {} files {}",
            world.rank(),
            world.runtime().transport(peer).as_str(),
            shm_files(&job).len()
        );
        world.finalize().unwrap();
        return;
    }
    let test = "peers_on_one_host_use_shared_memory_and_leave_no_files";
    for (flags, transport) in [(&["--verbose", "--stats"][..], "shm"), (&["--verbose", "--shm", "off"][..], "udp")] {
        let (out, _) = launch(3, test, flags);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        for r in 0..3 {
            assert!(stdout.contains(&format!("rank {r} transport {transport} files 0")), "{stdout}\n{stderr}");
        }
        let said = if transport == "shm" { "shared memory to 2 of 2 peers" } else { "no shared memory" };
        assert_eq!(stderr.matches(said).count(), 3, "{stderr}");
        if transport == "shm" {
            // --stats: each rank sent its peer 4 messages of its own, and the
            // barrier's; the one larger than a ring read from its memory.
            assert!(stderr.contains("shared memory (peers on the rank's host)"), "{stderr}");
            assert!(
                stderr.lines().any(|l| l.trim_start().starts_with("0>1") && l.split_whitespace().nth(3) == Some("1")),
                "{stderr}"
            );
        }
    }
}

/// A rank killed while its message is half written into a peer's ring,
/// or while the peer is to read it from its memory: the job stops, and
/// nothing partial is delivered.
#[test]
fn a_rank_killed_mid_message_stops_the_job_cleanly() {
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 1 {
            // 8 MiB into a 2 MiB ring: most of it waits in this process.
            // Sent by `isend`, which copies it (a blocking send would lend
            // the caller's buffer and return only once rank 0 has read it).
            let _queued = world.isend(0, 4, &vec![7u8; 8 << 20]).unwrap();
            // SAFETY: raising a signal in our own process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        // Receiving while the sender dies: the message arrives whole or not at all.
        match world.recv(Source::Rank(1), Tag::Is(4)) {
            Ok((_, data)) => assert!(data.len() == 8 << 20 && data.iter().all(|&b| b == 7), "a wrong message"),
            Err(e) => println!("rank 0: {e}"),
        }
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    for cma in ["0", "1"] {
        let (out, took) =
            launch_with_env(2, "a_rank_killed_mid_message_stops_the_job_cleanly", &[], &[("BULKWIRE_SHM_CMA", cma)]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(128 + 9), "cma {cma}\n{stdout}\n{stderr}");
        assert!(stderr.contains("rank 1") && stderr.contains("SIGKILL"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
}

/// Two ranks that send each other a large message by a blocking send
/// before either receives: both sends lend the caller's buffer through
/// shared memory (the peer reads it from there) and return once the peer
/// has read it, which each does while it waits in its own send. At the
/// ring's size, at 4 MiB and at the largest message sent whole; with the
/// default ring and one of 64 KiB (lent from 256 KiB); every byte checked.
#[test]
fn blocking_sends_of_large_messages_to_each_other_before_receiving() {
    let sizes = |ring: usize| [ring.max(256 << 10), 4 << 20, (16 << 20) - 4];
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, peer) = (world.rank(), 1 - world.rank());
        let ring = std::env::var("BULKWIRE_SHM_RING").map_or(2 << 20, |v| v.parse().unwrap());
        // A peer says it can read this process's memory once it has opened
        // this process's file; until then a large message is copied (right
        // after the start, the other rank may not have yet).
        world.barrier().unwrap();
        for (round, len) in sizes(ring).into_iter().enumerate() {
            let tag = round as i32;
            let data = pattern(seed_of(rank, tag), len);
            world.send(peer, tag, &data).unwrap();
            drop(data);
            let (status, got) = world.recv(Source::Rank(peer), Tag::Is(tag)).unwrap();
            assert_eq!((status.source, status.tag, status.len, got.len()), (peer, tag, len, len));
            if let Some(at) = first_difference(seed_of(peer, tag), len, &got) {
                panic!("rank {rank}: {len} bytes from rank {peer} differ at byte {at}");
            }
        }
        let lent = world.runtime().shm_stats().single_copy;
        println!("crossed ok rank {rank} read from memory {lent}");
        world.finalize().unwrap();
        return;
    }
    for ring in ["65536", "2097152"] {
        let test = "blocking_sends_of_large_messages_to_each_other_before_receiving";
        let (out, took) = launch_with_env(2, test, &[], &[("BULKWIRE_SHM_RING", ring)]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "ring {ring}\n{stdout}\n{stderr}");
        for r in 0..2 {
            assert!(
                stdout.contains(&format!("crossed ok rank {r} read from memory 3")),
                "ring {ring}\n{stdout}\n{stderr}"
            );
        }
        assert!(took < Duration::from_secs(20), "ring {ring}: took {took:?}");
    }
}

/// Borrowing non-blocking sends (`World::isend_borrowed`), crossing: each
/// rank starts a window of sends of every kind to the other (small ones,
/// ones the length of the ring and longer, which a peer on this host reads
/// from the sender's own buffer, and one past the runtime's largest
/// message, which goes by rendezvous), completes some by `test` and the
/// rest in one `wait_borrowed`, then receives. Every byte is checked; the
/// lent ones were read from memory, once each. With `BULKWIRE_SHM=0` the
/// same sends go over UDP (the large ones lent to the endpoint).
#[test]
fn borrowed_sends_cross_and_arrive_whole() {
    let sizes = |ring: usize| [100, ring, 3 << 20, 5 << 20, (16 << 20) + 1000];
    if is_rank() {
        let world = World::init().unwrap();
        let (rank, peer) = (world.rank(), 1 - world.rank());
        let ring = std::env::var("BULKWIRE_SHM_RING").map_or(2 << 20, |v| v.parse().unwrap());
        // A peer reads this process's memory once it has opened its file.
        world.barrier().unwrap();
        // The receives first: the message past the runtime's largest goes
        // by rendezvous, and its send completes only once it is matched.
        let recvs: Vec<_> =
            (0..sizes(ring).len()).map(|tag| world.irecv(Source::Rank(peer), Tag::Is(tag as i32)).unwrap()).collect();
        let data: Vec<Vec<u8>> =
            sizes(ring).iter().enumerate().map(|(tag, &len)| pattern(seed_of(rank, tag as i32), len)).collect();
        let before = world.runtime().shm_stats().lent;
        let mut sends: Vec<_> =
            data.iter().enumerate().map(|(tag, d)| world.isend_borrowed(peer, tag as i32, d).unwrap()).collect();
        // The first two by test, the rest in one wait.
        for send in sends.iter_mut().take(2) {
            while !send.test().unwrap() {
                // The peer is sending too; its messages are read meanwhile.
            }
            assert!(matches!(send.test(), Err(CommError::Completed)));
        }
        world.wait_borrowed(sends).unwrap();
        let lent = world.runtime().shm_stats().lent - before;
        for ((tag, &len), request) in sizes(ring).iter().enumerate().zip(recvs) {
            let Completion::Received(status, got) = world.wait(request).unwrap() else { panic!("a receive") };
            assert_eq!((status.source, status.tag, status.len), (peer, tag as i32, len));
            if let Some(at) = first_difference(seed_of(peer, tag as i32), len, &got) {
                panic!("rank {rank}: {len} bytes from rank {peer} differ at byte {at}");
            }
        }
        drop(data);
        println!("borrowed ok rank {rank} lent {lent}");
        world.finalize().unwrap();
        return;
    }
    let test = "borrowed_sends_cross_and_arrive_whole";
    for (env, lent) in [(("BULKWIRE_SHM_RING", "2097152"), 3), (("BULKWIRE_SHM", "0"), 0)] {
        let (out, took) = launch_with_env(2, test, &[], &[env]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{env:?}\n{stdout}\n{stderr}");
        for r in 0..2 {
            assert!(stdout.contains(&format!("borrowed ok rank {r} lent {lent}")), "{env:?}\n{stdout}\n{stderr}");
        }
        assert!(took < Duration::from_secs(30), "{env:?}: took {took:?}");
    }
}

/// `recv_into`: every message arrives whole in the caller's buffer, the
/// rest of which is left alone (even where a longer message of another tag
/// came first), whatever way it came (small, lent by a
/// peer on this host from its caller's memory or from the runtime's copy,
/// by rendezvous); a lent message that comes while such
/// a receive waits is read straight into the buffer (counted), one that
/// comes otherwise is read as ever (a blocking send crossing the receive
/// completes); a message longer than the buffer is an error that leaves
/// the job going. Through shared memory and over UDP, where a message of
/// several datagrams that comes while such a receive waits is reassembled
/// in the buffer (counted).
#[test]
fn receives_into_the_caller_s_buffer() {
    const MIB: usize = 1 << 20;
    if is_rank() {
        let world = World::init().unwrap();
        let rank = world.rank();
        let ring = std::env::var("BULKWIRE_SHM_RING").map_or(2 * MIB, |v| v.parse().unwrap());
        let shm = std::env::var("BULKWIRE_SHM").as_deref() != Ok("0");
        let message = |tag: i32, len: usize| pattern(seed_of(0, tag), len);
        world.barrier().unwrap();
        if rank == 0 {
            // Sent once rank 1 waits for them (unless it stalls this long).
            std::thread::sleep(Duration::from_millis(100));
            world.send(1, 2, &message(2, ring)).unwrap();
            world.send(1, 1, &message(1, 100)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let window: Vec<Vec<u8>> = (0..3).map(|_| message(5, 3 * MIB)).collect();
            let sends: Vec<_> = window.iter().map(|d| world.isend_borrowed(1, 5, d).unwrap()).collect();
            world.wait_borrowed(sends).unwrap();
            // Copied by the runtime, which lends its copy.
            world.wait(world.isend(1, 10, &message(10, 3 * MIB + 5)).unwrap()).unwrap();
            world.send(1, 4, &message(4, 16 * MIB + 1000)).unwrap();
            // Through the ring, once rank 1 waits for the second (tag 12):
            // two of several records each, then one of one record; none
            // goes into the buffer of a receive it is not for.
            world.recv(Source::Rank(1), Tag::Is(13)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            world.send(1, 11, &message(11, ring / 3 + 3)).unwrap();
            world.send(1, 12, &message(12, ring / 3 + 7)).unwrap();
            world.send(1, 14, &message(14, 60_000)).unwrap();
            world.send(1, 11, &message(11, 70_001)).unwrap();
            // Crossing rank 1's receive of tag 7: a blocking send of tag 6
            // that rank 1 receives only afterwards.
            world.send(1, 6, &message(6, 4 * MIB)).unwrap();
            world.send(1, 7, &message(7, 4 * MIB)).unwrap();
            // Longer than rank 1's buffer, then one that fits.
            world.send(1, 8, &message(8, 4 * MIB)).unwrap();
            world.send(1, 9, &message(9, 3 * MIB)).unwrap();
            // Once rank 1 waits for tag 16: a longer message of another tag
            // first (over UDP, its tag goes ahead of it and keeps it out of
            // the buffer).
            world.recv(Source::Rank(1), Tag::Is(17)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            world.send(1, 15, &message(15, MIB + 1)).unwrap();
            world.send(1, 16, &message(16, 200_001)).unwrap();
        } else {
            let mut buf = vec![0xAAu8; 20 * MIB];
            let before = world.runtime().shm_stats().read_in_place;
            let shared_before = world.runtime().shm_stats().shared_copies;
            let check = |buf: &[u8], tag: i32, len: usize| {
                if let Some(at) = first_difference(seed_of(0, tag), len, &buf[..len]) {
                    panic!("tag {tag}: {len} bytes differ at byte {at}");
                }
                if let Some(at) = buf[len..].iter().position(|&b| b != 0xAA) {
                    panic!("tag {tag}: {len} bytes, and byte {} written too", len + at);
                }
            };
            let mut into = |source: Source, tag: i32, len: usize| {
                buf.fill(0xAA);
                let status = world.recv_into(source, Tag::Is(tag), &mut buf).unwrap();
                assert_eq!((status.source, status.tag, status.len), (0, tag, len));
                check(&buf, tag, len);
            };
            into(Source::Rank(0), 2, ring);
            into(Source::Any, 1, 100);
            into(Source::Rank(0), 5, 3 * MIB);
            into(Source::Any, 5, 3 * MIB);
            let (status, got) = world.recv(Source::Rank(0), Tag::Is(5)).unwrap();
            assert_eq!(status.len, 3 * MIB);
            assert_eq!(first_difference(seed_of(0, 5), 3 * MIB, &got), None);
            into(Source::Rank(0), 10, 3 * MIB + 5);
            into(Source::Any, 4, 16 * MIB + 1000);
            world.send(0, 13, &[]).unwrap();
            let placed = world.runtime().shm_stats().read_in_place;
            into(Source::Rank(0), 12, ring / 3 + 7);
            into(Source::Rank(0), 14, 60_000);
            into(Source::Rank(0), 11, ring / 3 + 3);
            into(Source::Rank(0), 11, 70_001);
            let placed = world.runtime().shm_stats().read_in_place - placed;
            assert!(!shm || placed >= 1, "{placed} written in place out of the ring");
            println!("placed {placed}");
            into(Source::Rank(0), 7, 4 * MIB);
            buf.fill(0xAA);
            let status = world.recv_into(Source::Any, Tag::Any, &mut buf).unwrap();
            assert_eq!((status.tag, status.len), (6, 4 * MIB));
            check(&buf, 6, status.len);
            let mut small = vec![0xAAu8; MIB + 64];
            match world.recv_into(Source::Rank(0), Tag::Is(8), &mut small[..MIB]) {
                Err(CommError::Truncated { from: 0, len, capacity }) => assert_eq!((len, capacity), (4 * MIB, MIB)),
                other => panic!("a message longer than the buffer: {other:?}"),
            }
            check(&small, 8, MIB);
            buf.fill(0xAA);
            let status = world.recv_into(Source::Rank(0), Tag::Is(9), &mut buf).unwrap();
            check(&buf, 9, status.len);
            world.send(0, 17, &[]).unwrap();
            for (tag, len) in [(16, 200_001), (15, MIB + 1)] {
                buf.fill(0xAA);
                let status = world.recv_into(Source::Rank(0), Tag::Is(tag), &mut buf).unwrap();
                assert_eq!((status.tag, status.len), (tag, len));
                check(&buf, tag, len);
            }
            let in_place = world.runtime().shm_stats().read_in_place - before;
            assert!(!shm || in_place >= 1, "{in_place} read in place");
            assert!(shm || in_place == 0, "{in_place} read in place over UDP");
            // Over UDP, messages of several datagrams that came while a
            // receive from their sender waited were reassembled in its
            // buffer: those sent 100 ms after it began to wait (tags 2, 12
            // or 11, 16) unless this process stalled that long, and others
            // (5, 7 or 6, 9) where they came while it waited. Which ones is
            // up to the machine's load: at least one.
            let placed: u64 = world.runtime().peer_reports().iter().map(|p| p.placed).sum();
            assert!(shm || placed >= 1, "{placed} reassembled in the receive's buffer over UDP");
            assert!(!shm || placed == 0, "{placed} reassembled in a receive's buffer through shared memory");
            println!("placed over UDP {placed}");
            // Lent messages the sender, spinning in its send, wrote half of
            // into this process's buffer while this process read the other.
            let shared = world.runtime().shm_stats().shared_copies - shared_before;
            let split = std::env::var("BULKWIRE_SHM_SPLIT").as_deref() != Ok("0");
            assert!(!shm || !split || shared >= 1, "{shared} copies shared with the sender");
            assert!(split || shared == 0, "{shared} copies shared with BULKWIRE_SHM_SPLIT=0");
            println!("into ok {in_place} shared {shared}");
        }
        world.finalize().unwrap();
        return;
    }
    let test = "receives_into_the_caller_s_buffer";
    for env in [("BULKWIRE_SHM_RING", "2097152"), ("BULKWIRE_SHM_SPLIT", "0"), ("BULKWIRE_SHM", "0")] {
        let (out, took) = launch_with_env(2, test, &[], &[env]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{env:?}\n{stdout}\n{stderr}");
        assert!(stdout.contains("into ok"), "{env:?}\n{stdout}\n{stderr}");
        assert!(took < Duration::from_secs(30), "{env:?}: took {took:?}");
    }
}

/// Over UDP, a blocking send of a large message lends the caller's buffer
/// to the endpoint, which sends (and resends) its packets from there: the
/// send returns once every packet has been acknowledged, so the caller may
/// change the buffer at once. Each message goes from one buffer rewritten
/// right after its send returns, over a network that loses 5% of the
/// datagrams; windows of borrowed sends likewise, from 64 KiB (counted:
/// one of 64 KiB less a byte is copied). Every byte arrives as it was
/// when sent; with `BULKWIRE_UDP_LEND=0` nothing is lent.
#[test]
fn a_send_over_udp_lends_its_buffer_until_acknowledged() {
    const MESSAGES: u64 = 12;
    const LEN: usize = (1 << 20) + 37;
    const SHORT: usize = (64 << 10) + 37;
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 0 {
            let mut buf = vec![0u8; LEN];
            for i in 0..MESSAGES {
                buf.copy_from_slice(&pattern(i, LEN));
                world.send(1, 3, &buf).unwrap();
                buf.fill(0xEE);
            }
            // Windows of borrowed sends: lent from 64 KiB.
            for (tag, len) in [(4, LEN), (5, SHORT), (6, SHORT - 38)] {
                let seed = 100 * tag as u64;
                let mut window: Vec<Vec<u8>> = (0..3).map(|k| pattern(seed + k, len)).collect();
                let sends: Vec<_> = window.iter().map(|b| world.isend_borrowed(1, tag, b).unwrap()).collect();
                world.wait_borrowed(sends).unwrap();
                window.iter_mut().for_each(|b| b.fill(0xEE));
            }
            let lent = world.runtime().with(|e| Ok(e.udp_loans())).unwrap();
            let lending = std::env::var("BULKWIRE_UDP_LEND").as_deref() != Ok("0");
            assert_eq!(lent, if lending { MESSAGES + 6 } else { 0 });
        } else {
            let windows = [(4, LEN), (5, SHORT), (6, SHORT - 38)].map(|(tag, len)| (tag, 100 * tag as u64, len));
            for (tag, first, len) in [(3, 0, LEN)].into_iter().chain(windows) {
                let count = if tag == 3 { MESSAGES } else { 3 };
                for seed in first..first + count {
                    let (_, got) = world.recv(Source::Rank(0), Tag::Is(tag)).unwrap();
                    assert_eq!(got.len(), len);
                    assert_eq!(first_difference(seed, len, &got), None, "message {seed}");
                }
            }
        }
        world.finalize().unwrap();
        println!("lent ok");
        return;
    }
    over_lossy_udp_lent_and_copied("a_send_over_udp_lends_its_buffer_until_acknowledged", "3", "lent ok");
}

/// Over UDP, a blocking send from 4 KiB up to the lending size sends its
/// datagrams from the caller's buffer, then copies what it must keep to
/// resend, and returns without waiting for acknowledgements. Each message
/// goes from one buffer rewritten right after its send returns, over a
/// network that loses 5% of the datagrams, both ways at once (each rank's
/// sends cross the other's): every byte arrives as it was when sent,
/// resent ones included. With `BULKWIRE_UDP_LEND=0` every send copies
/// first; below 4 KiB too.
#[test]
fn a_send_over_udp_leaves_from_the_buffer_then_keeps_a_copy() {
    const SIZES: [usize; 6] = [4095, 4096, 16_384 + 3, 65_536 + 37, 200_000, (256 << 10) - 1];
    const ROUNDS: u64 = 8;
    if is_rank() {
        let world = World::init().unwrap();
        let peer = 1 - world.rank();
        let seed = |round: u64, k: usize| (u64::from(world.rank()) << 32) | (round << 8) | k as u64;
        let mut buf = vec![0u8; SIZES[SIZES.len() - 1]];
        for round in 0..ROUNDS {
            for (k, &len) in SIZES.iter().enumerate() {
                buf[..len].copy_from_slice(&pattern(seed(round, k), len));
                world.send(peer, k as i32, &buf[..len]).unwrap();
                buf.fill(0xEE);
            }
            for (k, &len) in SIZES.iter().enumerate() {
                let (_, got) = world.recv(Source::Rank(peer), Tag::Is(k as i32)).unwrap();
                let sent = (u64::from(peer) << 32) | (round << 8) | k as u64;
                assert_eq!(first_difference(sent, len, &got), None, "round {round}, {len} B");
            }
        }
        let first = world.runtime().with(|e| Ok(e.sent_then_copied())).unwrap();
        let on = std::env::var("BULKWIRE_UDP_LEND").as_deref() != Ok("0");
        // Every send of 4 KiB or more that found room in the send buffer.
        assert!(if on { first >= ROUNDS } else { first == 0 }, "{first} messages sent before their copy");
        assert!(first <= ROUNDS * (SIZES.len() as u64 - 1), "{first} messages sent before their copy");
        world.finalize().unwrap();
        println!("sent first ok");
        return;
    }
    over_lossy_udp_lent_and_copied("a_send_over_udp_leaves_from_the_buffer_then_keeps_a_copy", "9", "sent first ok");
}

/// Messages from one rank to another arrive in the order they were sent
/// (MPI's rule), whichever way each goes. With the receiver asleep, the
/// sender sends more long messages than the path holds, so the last of
/// them wait for room; then shorter ones that would find room, blocking
/// sends that go from the caller's buffer (from 4 KiB over UDP, and lent
/// from 256 KiB) or by announcement (over 16 MiB), and one whose request
/// is dropped unwaited; it waits for its requests last to first. The
/// receiver, awake, finds every message whole and in order. Through shared
/// memory and over UDP.
#[test]
fn messages_to_one_peer_never_overtake_each_other() {
    const LONG: usize = 6 << 20;
    const LONGS: usize = 20;
    // (length, sent by a blocking send); the one after the longs is dropped.
    let plan: Vec<(usize, bool)> = std::iter::repeat_n((LONG, false), LONGS)
        .chain([(100, false), (8 << 10, true), (300 << 10, true), (1000, false), (20 << 20, true), (10, false)])
        .collect();
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 1 {
            std::thread::sleep(Duration::from_millis(1500));
            let mut order = Vec::new();
            for _ in 0..plan.len() {
                let (status, got) = world.recv(Source::Rank(0), Tag::Is(5)).unwrap();
                let k = (0..plan.len())
                    .find(|&k| plan[k].0 == got.len() && first_difference(k as u64, got.len(), &got).is_none());
                order.push(k.map_or(format!("a message of {} B unlike any sent", status.len), |k| k.to_string()));
            }
            let sent: Vec<String> = (0..plan.len()).map(|k| k.to_string()).collect();
            assert_eq!(order, sent, "the messages in the order they came");
        } else {
            let mut requests = Vec::new();
            for (k, &(len, blocking)) in plan.iter().enumerate() {
                let data = pattern(k as u64, len);
                if blocking {
                    world.send(1, 5, &data).unwrap();
                    continue;
                }
                let mut request = world.isend(1, 5, &data).unwrap();
                if k == LONGS - 1 {
                    // The path is full: this one waits (else the test tests nothing).
                    assert!(world.test(&mut request).unwrap().is_none(), "the last long message found room");
                }
                if k != LONGS {
                    requests.push(request);
                }
            }
            for request in requests.into_iter().rev() {
                assert_eq!(world.wait(request).unwrap(), Completion::Sent);
            }
        }
        world.finalize().unwrap();
        println!("in order");
        return;
    }
    for shm in ["1", "0"] {
        let (out, took) =
            launch_with_env(2, "messages_to_one_peer_never_overtake_each_other", &[], &[("BULKWIRE_SHM", shm)]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "BULKWIRE_SHM={shm}\n{stdout}\n{stderr}");
        assert_eq!(stdout.matches("in order").count(), 2, "BULKWIRE_SHM={shm}\n{stdout}\n{stderr}");
        assert!(took < Duration::from_secs(60), "BULKWIRE_SHM={shm}: took {took:?}");
    }
}

/// Runs `test` on 2 ranks over UDP losing 5% of the datagrams (drawn by
/// `seed`), lending on and off: both ranks print `done` each time.
fn over_lossy_udp_lent_and_copied(test: &str, seed: &str, done: &str) {
    let lossy = [("BULKWIRE_SHM", "0"), ("BULKWIRE_TEST_DROP", "0.05"), ("BULKWIRE_TEST_DROP_SEED", seed)];
    let copied = [("BULKWIRE_SHM", "0"), ("BULKWIRE_UDP_LEND", "0"), ("BULKWIRE_TEST_DROP", "0.05")];
    for env in [&lossy[..], &copied[..]] {
        let (out, took) = launch_with_env(2, test, &[], env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{env:?}\n{stdout}\n{stderr}");
        assert_eq!(stdout.matches(done).count(), 2, "{env:?}\n{stdout}\n{stderr}");
        assert!(took < Duration::from_secs(60), "{env:?}: took {took:?}");
    }
}

fn seed_of(rank: u32, tag: i32) -> u64 {
    (u64::from(rank) << 32) | tag as u64
}

/// A rank killed while a peer's blocking send lends it a message (which it
/// is to read from the sender's memory, and never does: it dies holding
/// its engine): the sender does not wait for an answer that cannot come;
/// the job stops within 5 seconds and names the killed rank. Over UDP
/// likewise, where the message is lent to the endpoint and never
/// acknowledged (the sender's wait ends, and what the endpoint still holds
/// it sends from a copy).
#[test]
fn a_rank_killed_before_it_reads_a_lent_message_stops_the_job() {
    if is_rank() {
        let world = World::init().unwrap();
        // Rank 1 says it holds its engine by this file, and rank 0 sends
        // only then: sent before, the message could be read (and rightly
        // acknowledged) by rank 1's progress thread before its main thread
        // took the engine, as happened once under a loaded test run.
        let held = std::env::temp_dir().join(format!("bulkwire-held-{}", std::env::var("BULKWIRE_JOB").unwrap()));
        world.barrier().unwrap();
        if world.rank() == 1 {
            // Holding the engine, nothing reads the ring: the message stays
            // lent until this process is gone.
            let _ = world.runtime().with(|_| {
                std::fs::write(&held, b"").unwrap();
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: raising a signal in our own process.
                unsafe { libc::raise(libc::SIGKILL) };
                Ok(())
            });
        }
        let asked = Instant::now();
        while !held.exists() {
            assert!(asked.elapsed() < Duration::from_secs(5), "rank 1 never held its engine");
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = std::fs::remove_file(&held);
        match world.send(1, 4, &vec![7u8; 4 << 20]) {
            Ok(()) => println!("rank 0: sent"),
            Err(e) => println!("rank 0: {e}"),
        }
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    for shm in ["1", "0"] {
        let test = "a_rank_killed_before_it_reads_a_lent_message_stops_the_job";
        let (out, took) = launch_with_env(2, test, &[], &[("BULKWIRE_SHM", shm)]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(128 + 9), "shm {shm}\n{stdout}\n{stderr}");
        assert!(stderr.contains("rank 1") && stderr.contains("SIGKILL"), "{stderr}");
        assert!(!stdout.contains("rank 0: sent"), "a message nobody read was not sent\n{stdout}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(took < Duration::from_secs(5), "shm {shm}: took {took:?}");
    }
}

#[test]
fn a_killed_rank_stops_the_job_within_5_seconds() {
    if is_rank() {
        let world = World::init().unwrap();
        world.barrier().unwrap();
        if world.rank() == 2 {
            // SAFETY: raising a signal in our own process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        // The others wait for a message that will never come.
        let _ = world.recv(Source::Rank(2), Tag::Any);
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    for shm in ["on", "off"] {
        let (out, took) = launch(4, "a_killed_rank_stops_the_job_within_5_seconds", &["--shm", shm]);
        let (_, stderr) = text(&out);
        assert!(!out.status.success());
        assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
        assert!(stderr.contains("rank 2") && stderr.contains("SIGKILL"), "{stderr}");
        assert!(took < Duration::from_secs(5), "shm {shm}: took {took:?}");
    }
}

#[test]
fn a_stopped_rank_is_detected_as_hung() {
    if is_rank() {
        let world = World::init().unwrap();
        world.barrier().unwrap();
        if world.rank() == 1 {
            // SAFETY: raising a signal in our own process.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        let _ = world.recv(Source::Rank(1), Tag::Any);
        return;
    }
    let (out, took) = launch(3, "a_stopped_rank_is_detected_as_hung", &[]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("rank 1") && stderr.contains("stopped responding"), "{stderr}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

#[test]
fn exit_status_is_the_first_failing_ranks() {
    if is_rank() {
        let world = World::init().unwrap();
        world.barrier().unwrap();
        if world.rank() == 1 {
            std::process::exit(3);
        }
        let _ = world.recv(Source::Rank(1), Tag::Any);
        return;
    }
    let (out, _) = launch(2, "exit_status_is_the_first_failing_ranks", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).1);
}

#[test]
fn ranks_of_another_wire_format_stop_the_job_with_a_clear_error() {
    if is_rank() {
        let env = bulkwire_runtime::JobEnv::from_env().unwrap();
        if env.rank == 1 {
            // A rank of another build: its hello names wire version 2.
            use bulkwire_runtime::rendezvous::{read_msg, write_msg, ToLauncher, ToRank};
            let mut stream = std::net::TcpStream::connect(env.rendezvous).unwrap();
            let any: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
            let hello = ToLauncher::Hello {
                job: env.job,
                rank: 1,
                size: env.size,
                pid: std::process::id(),
                ordinary: any,
                premium: any,
                max_datagram: 1472,
                kernel: String::new(),
                wire: 2,
            };
            write_msg(&mut stream, &env.key, &hello).unwrap();
            let mut reader = std::io::BufReader::new(stream);
            match read_msg::<ToRank>(&mut reader, &env.key) {
                Ok(Some(ToRank::Abort { reason })) => println!("rank 1 told: {reason}"),
                other => panic!("rank 1 got {other:?}"),
            }
            std::process::exit(1);
        }
        match World::init() {
            Err(e) => println!("rank 0 told: {e}"),
            Ok(_) => panic!("rank 0 joined a job of mixed wire formats"),
        }
        std::process::exit(1);
    }
    let (out, elapsed) = launch(2, "ranks_of_another_wire_format_stop_the_job_with_a_clear_error", &[]);
    let (stdout, stderr) = text(&out);
    let all = format!("{stdout}\n{stderr}");
    assert!(!out.status.success(), "{all}");
    let version = bulkwire_wire::VERSION;
    let why = format!("different wire formats (rank 0: version {version}; rank 1: version 2)");
    assert!(stderr.contains(&why), "{all}");
    assert!(stdout.contains("rank 0 told:") && stdout.contains("rank 1 told:"), "{all}");
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}: {all}");
}

#[test]
fn misuse_gets_clear_errors() {
    if is_rank() {
        let world = World::init().unwrap();
        match world.send(99, 0, b"x") {
            Err(CommError::NoSuchRank { to: 99, size: 2 }) => println!("misuse: no such rank ok"),
            other => panic!("{other:?}"),
        }
        // Messages of any length go, up to 1 TiB: one byte more is refused
        // before it is read (mapped, never touched).
        let len = bulkwire_comm::LARGEST_MESSAGE + 1;
        // SAFETY: a fresh private read-only mapping of zeros, never unmapped.
        let at = unsafe {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, flags, -1, 0)
        };
        assert_ne!(at, libc::MAP_FAILED);
        // SAFETY: `len` readable bytes at `at`, for the rest of the process.
        let too_large = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
        match world.send(0, 0, too_large) {
            Err(e @ CommError::TooLarge { .. }) => println!("misuse: too large ok: {e}"),
            other => panic!("{other:?}"),
        }
        // Both past their start: rank 0, which now finishes at once, is not
        // heard of as finished by a rank still reading the peer table.
        world.barrier().unwrap();
        if world.rank() == 1 {
            // Rank 0 finishes without ever sending: this can never be matched.
            let err = world.recv(Source::Rank(0), Tag::Any).unwrap_err();
            assert!(err.to_string().contains("can never be matched: rank 0 has finished"), "{err}");
            println!("misuse: never matched ok");
        }
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(2, "misuse_gets_clear_errors", &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("misuse: no such rank ok").count(), 2, "{stdout}");
    assert!(stdout.contains("exceeds the largest message"), "{stdout}");
    assert!(stdout.contains("misuse: never matched ok"), "{stdout}");
}

#[test]
fn freed_memory_stays_in_the_process_unless_told_otherwise() {
    if is_rank() {
        let world = World::init().unwrap();
        // A burst of buffers freed at once, as a superstep's streams are:
        // glibc alone gives the top of its heap back beyond 128 KiB free.
        let burst: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8; 64 << 10]).collect();
        drop(burst);
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let kept = unsafe { libc::mallinfo2() }.fordblks;
        println!("malloc: rank {} kept {kept}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let kept = |env: &[(&str, &str)]| {
        let (out, _) = launch_with_env(2, "freed_memory_stays_in_the_process_unless_told_otherwise", &[], env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let kept: Vec<usize> =
            stdout.lines().filter_map(|l| l.split_once(" kept ").and_then(|(_, k)| k.trim().parse().ok())).collect();
        assert_eq!(kept.len(), 2, "{stdout}");
        kept.into_iter().min().unwrap()
    };
    assert!(kept(&[]) >= 1 << 20, "the runtime keeps the memory freed");
    assert!(kept(&[("BULKWIRE_MALLOC", "system")]) < 1 << 20, "glibc's own setting gives it back");
    let (out, _) = launch_with_env(
        2,
        "freed_memory_stays_in_the_process_unless_told_otherwise",
        &[],
        &[("BULKWIRE_MALLOC", "lots")],
    );
    let (stdout, stderr) = text(&out);
    let all = format!("{stdout}\n{stderr}");
    assert!(
        !out.status.success() && all.contains("BULKWIRE_MALLOC=") && all.contains("expected keep or system"),
        "{all}"
    );
}

#[test]
fn rogue_traffic_is_dropped_and_counted() {
    if is_rank() {
        let world = World::init().unwrap();
        let rank = world.rank();
        if rank == 0 {
            // A rogue socket sprays rank 1 with noise, forgeries, datagrams of
            // another job and replays of packets it has already had.
            let (ordinary, premium) = world.runtime().peer_addrs(1).unwrap();
            // The job's own key, sealing as the job does (header only on
            // loopback): replays and other-job datagrams must be caught by
            // more than the MAC.
            let key = JobKey::from_hex(&std::env::var("BULKWIRE_KEY").unwrap())
                .unwrap()
                .covering(world.runtime().mac_coverage());
            let job = u64::from_str_radix(&std::env::var("BULKWIRE_JOB").unwrap(), 16).unwrap();
            // The genuine packets 0 to 2 arrive first: what follows replays them.
            for i in 0..300u32 {
                world.send(1, 1, &i.to_le_bytes()).unwrap();
            }
            world.barrier().unwrap();
            let rogue = UdpSocket::bind("127.0.0.1:0").unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stop2 = stop.clone();
            let spray = std::thread::spawn(move || {
                let mut buf = vec![0u8; 2000];
                let mut i = 0u64;
                while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut h = Header::new(PacketType::Data);
                    h.job = job_tag(job);
                    h.source = 0;
                    h.destination = 1;
                    h.sequence = i % 3;
                    let mut seal = |h: &Header, payload: &[u8], key: &JobKey| {
                        let n = encode(h, payload, key, &mut buf).unwrap();
                        buf[..n].to_vec()
                    };
                    let datagram = match i % 4 {
                        0 => vec![i as u8; 20],
                        1 => seal(&h, b"forged", &JobKey::new([1; 32])),
                        2 => {
                            h.job = job_tag(job ^ 1);
                            seal(&h, b"other job", &key)
                        }
                        // Replays of sequence numbers 0 to 2, long delivered.
                        _ => seal(&h, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 9], &key),
                    };
                    let _ = rogue.send_to(&datagram, if i.is_multiple_of(2) { ordinary } else { premium });
                    i += 1;
                }
            });
            for i in 300..600u32 {
                world.send(1, 1, &i.to_le_bytes()).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            spray.join().unwrap();
            world.barrier().unwrap();
        } else {
            for i in 0..600u32 {
                let (_, data) = world.recv(Source::Rank(0), Tag::Is(1)).unwrap();
                assert_eq!(data, i.to_le_bytes(), "message {i}");
                if i == 299 {
                    world.barrier().unwrap();
                }
            }
            world.barrier().unwrap();
            // Every rogue datagram has been sent by now. Where every peer is
            // on this host the sockets are read only now and then (on a
            // loaded machine the spray may have come after the last read):
            // they are read until what they brought shows, or for 5 s.
            let rt = world.runtime();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                let s = rt.stats();
                let r = &s.rejected;
                if r.bad_mac > 0 && r.wrong_job > 0 && r.truncated > 0 && s.channels.duplicates > 0 {
                    break;
                }
                rt.with(|e| Ok(e.progress())).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            let s = rt.stats();
            println!(
                "rogue: MAC over {:?}, rejected {} (bad mac {}, wrong job {}, truncated {}), duplicates {}",
                world.runtime().mac_coverage(),
                s.rejected.total(),
                s.rejected.bad_mac,
                s.rejected.wrong_job,
                s.rejected.truncated,
                s.channels.duplicates
            );
            assert!(s.rejected.bad_mac > 0 && s.rejected.wrong_job > 0 && s.rejected.truncated > 0, "{s:?}");
            assert!(s.channels.duplicates > 0, "replays are recognised: {s:?}");
        }
        world.finalize().unwrap();
        return;
    }
    // On loopback the MAC covers headers unless asked to cover everything.
    for (env, coverage) in [(&[][..], "Header"), (&[("BULKWIRE_MAC_COVERAGE", "datagram")][..], "Datagram")] {
        let (out, _) = launch_with_env(2, "rogue_traffic_is_dropped_and_counted", &[], env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains(&format!("rogue: MAC over {coverage}, rejected")), "{stdout}");
    }
}

#[test]
fn output_is_tagged_and_stdin_reaches_rank_0() {
    if is_rank() {
        let world = World::init().unwrap();
        if world.rank() == 0 {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            println!("rank 0 read {:?}", line.trim());
        }
        println!("hello from {}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "2", "--tag-output"])
        .arg(exe)
        .args(["--exact", "output_is_tagged_and_stdin_reaches_rank_0", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"forty-two\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    // Lines also carry the test harness's own words after the prefix.
    let line_of = |rank: &str, text: &str| stdout.lines().any(|l| l.starts_with(rank) && l.contains(text));
    assert!(line_of("[0] ", "rank 0 read \"forty-two\""), "{stdout}");
    assert!(line_of("[1] ", "hello from 1"), "{stdout}");
}

#[test]
fn interrupting_the_launcher_leaves_no_process_behind() {
    if is_rank() {
        let world = World::init().unwrap();
        println!("pid {}", std::process::id());
        let _ = world.recv(Source::Any, Tag::Any);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "3"])
        .arg(exe)
        .args(["--exact", "interrupting_the_launcher_leaves_no_process_behind", "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(128 + libc::SIGINT), "{stdout}");
    let pids: Vec<i32> = stdout.lines().filter_map(|l| l.split("pid ").nth(1)?.trim().parse().ok()).collect();
    assert_eq!(pids.len(), 3, "{stdout}");
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "rank pid {pid} survived");
    }
}

/// Two network namespaces joined by a veth pair; needs root and iproute2,
/// and is skipped (with a note) where they are missing. One test at a time
/// holds them (the names are fixed).
struct Netns(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

static NETNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Netns {
    const A: &'static str = "bwtestA";
    const B: &'static str = "bwtestB";

    fn up() -> Option<Netns> {
        let sh = |cmd: &str| Command::new("sh").args(["-c", cmd]).status().map(|s| s.success()).unwrap_or(false);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !sh("command -v ip >/dev/null") {
            return None;
        }
        let held = NETNS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Netns::down();
        let ok = sh(&format!(
            "ip netns add {a} && ip netns add {b} && \
             ip link add bwtA type veth peer name bwtB && \
             ip link set bwtA netns {a} && ip link set bwtB netns {b} && \
             ip -n {a} addr add 10.77.0.1/24 dev bwtA && ip -n {b} addr add 10.77.0.2/24 dev bwtB && \
             ip -n {a} link set bwtA mtu 9000 && ip -n {b} link set bwtB mtu 4000 && \
             ip -n {a} link set bwtA up && ip -n {b} link set bwtB up && \
             ip -n {a} link set lo up && ip -n {b} link set lo up",
            a = Netns::A,
            b = Netns::B
        ));
        if ok {
            Some(Netns(held))
        } else {
            Netns::down();
            None
        }
    }

    fn down() {
        let _ = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "ip netns del {} 2>/dev/null; ip netns del {} 2>/dev/null; ip link del bwtA 2>/dev/null; true",
                    Netns::A,
                    Netns::B
                ),
            ])
            .status();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        Netns::down();
    }
}

/// The cores in a `Cpus_allowed_list` line of /proc/PID/status ("0-3,6").
fn allowed_cores(status_line: &str) -> Vec<u32> {
    let list = status_line.split(':').nth(1).unwrap_or_default().trim();
    list.split(',')
        .filter(|r| !r.is_empty())
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse::<u32>().expect("a core")..=b.parse::<u32>().expect("a core")
        })
        .collect()
}

#[test]
fn ranks_are_dealt_to_the_cores_in_turn_even_when_they_outnumber_them() {
    let own = std::fs::read_to_string("/proc/self/status").expect("status");
    let mine = allowed_cores(own.lines().find(|l| l.starts_with("Cpus_allowed_list")).expect("the line"));
    let n = mine.len() as u32 * 2 + 1;
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", &n.to_string()])
            .args(extra)
            .args(["--", "sh", "-c", "echo $BULKWIRE_RANK $(grep Cpus_allowed_list /proc/self/status)"])
            .stdin(Stdio::null())
            .output()
            .expect("run bulkwire");
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}{stderr}");
        let mut ranks: Vec<(u32, Vec<u32>)> = stdout
            .lines()
            .map(|l| {
                let (rank, line) = l.split_once(' ').expect("a rank and its cores");
                (rank.parse().expect("a rank"), allowed_cores(line))
            })
            .collect();
        ranks.sort();
        assert_eq!(ranks.len(), n as usize, "{stdout}");
        ranks
    };
    // Rank r on the (r mod n)th core this command may use: as many on each.
    for (rank, cores) in run(&[]) {
        assert_eq!(cores, [mine[rank as usize % mine.len()]], "rank {rank}");
    }
    for (rank, cores) in run(&["--bind-to", "none"]) {
        assert_eq!(cores, mine, "rank {rank} left to the scheduler");
    }
}

#[test]
fn a_job_across_two_network_namespaces() {
    if is_rank() {
        let world = World::init().unwrap();
        let peer = 1 - world.rank();
        for i in 0..100u32 {
            world.send(peer, 5, &vec![i as u8; 3000]).unwrap();
            let (_, data) = world.recv(Source::Rank(peer), Tag::Is(5)).unwrap();
            assert_eq!(data, vec![i as u8; 3000]);
        }
        let (ordinary, premium) = world.runtime().peer_addrs(peer).unwrap();
        let max = world.runtime().max_datagram();
        println!("netns rank {} talks to {ordinary} and {premium} in datagrams of {max}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let Some(out) = across_namespaces("a_job_across_two_network_namespaces") else {
        eprintln!("skipped: needs root and iproute2 to create network namespaces");
        return;
    };
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("netns rank 0 talks to 10.77.0.2:"), "{stdout}");
    assert!(stdout.contains("netns rank 1 talks to 10.77.0.1:"), "{stdout}");
    // Jumbo frames of different sizes at the two ends (MTU 9000 and 4000):
    // both ranks send what the smaller carries (4000 - 28 bytes of IPv4 and
    // UDP headers).
    assert_eq!(stdout.matches("in datagrams of 3972").count(), 2, "{stdout}");
}

/// Runs `test` as a job of two ranks, rank 0 in one network namespace and
/// rank 1 in the other ([`Netns`]); `None` where they cannot be made.
fn across_namespaces(test: &str) -> Option<Output> {
    let _ns = Netns::up()?;
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "if [ \"$BULKWIRE_RANK\" = 1 ]; then exec ip netns exec {} \"$0\" \"$@\"; else exec \"$0\" \"$@\"; fi",
        Netns::B
    );
    let out = Command::new("ip")
        .args(["netns", "exec", Netns::A, env!("CARGO_BIN_EXE_bulkwire"), "run", "-n", "2", "--bind", "10.77.0.1"])
        .args(["sh", "-c", &script])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Some(out)
}

/// A BSP superstep between two hosts: puts, hpputs and messages larger
/// than a datagram go as pieces of their streams, sent from where they lie
/// (an hpput's from its source) in datagrams of 3,972 bytes, and land
/// whole.
#[test]
fn a_bsp_superstep_across_two_network_namespaces() {
    if is_rank() {
        let mut bsp = bulkwire_bsp::Bsp::begin().unwrap();
        let (me, other) = (bsp.pid(), 1 - bsp.pid());
        let mut area = vec![0u8; 5 << 20];
        let at = area.as_mut_ptr();
        // SAFETY: `area` outlives the registration (the computation ends first).
        unsafe { bsp.push_reg_raw(at, area.len()).unwrap() };
        bsp.set_tagsize(8).unwrap();
        bsp.sync().unwrap();
        for step in 0..3u64 {
            let seed = |pid: u32| u64::from(pid) * 1000 + step;
            let puts = [(0, pattern(seed(me), 3 << 20)), ((4 << 20) + 3, pattern(seed(me) + 7, 5_000))];
            for (offset, data) in &puts {
                // SAFETY: `data` is read before the call returns.
                unsafe { bsp.put_raw(other, data.as_ptr(), at, *offset, data.len()).unwrap() };
            }
            let source = pattern(seed(me) + 5, 600_000);
            // SAFETY: `source` stays as it is until the sync has returned.
            unsafe { bsp.hpput_raw(other, source.as_ptr(), at, (3 << 20) + 1, source.len()).unwrap() };
            bsp.send(other, &step.to_le_bytes(), &pattern(seed(me) + 9, 100_000)).unwrap();
            bsp.sync().unwrap();
            drop(source);
            assert_eq!(first_difference(seed(other), 3 << 20, &area[..3 << 20]), None, "step {step}");
            assert_eq!(&area[(4 << 20) + 3..(4 << 20) + 5_003], &pattern(seed(other) + 7, 5_000)[..]);
            let hp = &area[(3 << 20) + 1..(3 << 20) + 600_001];
            assert_eq!(first_difference(seed(other) + 5, 600_000, hp), None, "step {step}");
            let mut payload = vec![0; 100_000];
            assert_eq!(bsp.move_message(&mut payload).unwrap(), 100_000);
            assert_eq!(payload, pattern(seed(other) + 9, 100_000), "step {step}");
        }
        println!("netns bsp rank {me} done");
        bsp.end().unwrap();
        return;
    }
    let Some(out) = across_namespaces("a_bsp_superstep_across_two_network_namespaces") else {
        eprintln!("skipped: needs root and iproute2 to create network namespaces");
        return;
    };
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("netns bsp rank").count(), 2, "{stdout}");
}

fn have(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program} >/dev/null")]).status().is_ok_and(|s| s.success())
}

#[test]
fn jobs_started_by_open_mpi_mpirun() {
    if is_rank() || !have("mpirun") {
        if !is_rank() {
            eprintln!("skipped: mpirun is not installed");
        }
        return;
    }
    let (out, _) = launch(3, "ring_any_source_and_nonblocking_on_2_3_and_8_ranks", &["--launcher", "mpirun"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(stdout.contains(&format!("ok rank {r} of 3")), "{stdout}\n{stderr}");
    }
    // A rank killed under mpirun stops the job too.
    let (out, took) = launch(4, "a_killed_rank_stops_the_job_within_5_seconds", &["--launcher", "mpirun"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {stderr}");
}

#[test]
fn jobs_started_by_slurm_srun() {
    // `sinfo` answers only where a SLURM controller runs (scripts/slurm-local-up.sh starts one).
    if is_rank() || !have("srun") || !Command::new("sinfo").output().is_ok_and(|o| o.status.success()) {
        if !is_rank() {
            eprintln!("skipped: no SLURM cluster here (srun and a responding controller)");
        }
        return;
    }
    let (out, _) = launch(3, "ring_any_source_and_nonblocking_on_2_3_and_8_ranks", &["--launcher", "srun"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(stdout.contains(&format!("ok rank {r} of 3")), "{stdout}\n{stderr}");
    }
    // A rank killed under srun stops the job too.
    let (out, took) = launch(4, "a_killed_rank_stops_the_job_within_5_seconds", &["--launcher", "srun"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {stderr}");
}

/// A C program that prints with stdio and then calls abort(): its output
/// goes to a pipe and is lost, and the launcher says why; with
/// `--unbuffered` every line reaches the terminal the rank writes to.
#[test]
fn a_rank_that_aborts_loses_buffered_output_unless_unbuffered() {
    if is_rank() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("bulkwire-abort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (source, program) = (dir.join("abort.c"), dir.join("abort"));
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <stdlib.h>\n\
         int main(void) { printf(\"printed before the abort\\n\"); abort(); }\n",
    )
    .unwrap();
    let built = Command::new("cc").arg("-o").arg(&program).arg(&source).output();
    if !built.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no C compiler (cc)");
        return;
    }
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", "2"])
            .args(extra)
            .arg(&program)
            .stdin(Stdio::null())
            .output()
            .expect("run bulkwire");
        assert_eq!(out.status.code(), Some(128 + libc::SIGABRT), "{:?}", text(&out));
        text(&out)
    };
    let (stdout, stderr) = run(&[]);
    assert!(!stdout.contains("printed before the abort"), "a pipe's buffer dies with the process: {stdout}");
    assert!(stderr.contains("aborted (signal 6, SIGABRT)") && stderr.contains("--unbuffered"), "{stderr}");
    let (stdout, stderr) = run(&["--unbuffered"]);
    assert!(stdout.lines().any(|l| l == "printed before the abort"), "{stdout}");
    assert!(stderr.contains("aborted") && !stderr.contains("was a pipe"), "{stderr}");
    // Only ranks this machine starts itself get a terminal.
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "1", "--unbuffered", "--hosts", "h1", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).1.contains("--unbuffered"), "{:?}", text(&out));
    let _ = std::fs::remove_dir_all(dir);
}

/// `--paths premium` puts every data packet on the premium sockets; a bad
/// BULKWIRE_PATHS stops the job with a message that says what is allowed.
#[test]
fn premium_paths_carry_all_data_and_a_bad_setting_is_refused() {
    if is_rank() {
        let world = World::init().unwrap();
        let peer = 1 - world.rank();
        for i in 0..50u32 {
            world.send(peer, 3, &vec![i as u8; 5000]).unwrap();
            let (_, data) = world.recv(Source::Rank(peer), Tag::Is(3)).unwrap();
            assert_eq!(data, vec![i as u8; 5000]);
        }
        world.barrier().unwrap();
        let s = world.runtime().stats();
        println!(
            "rank {} data packets: ordinary {} premium {}",
            world.rank(),
            s.ordinary.data.packets,
            s.premium.data.packets
        );
        world.finalize().unwrap();
        return;
    }
    let test = "premium_paths_carry_all_data_and_a_bad_setting_is_refused";
    let json = std::env::temp_dir().join(format!("bulkwire-stats-{}.json", std::process::id()));
    // The paths are the network's: over UDP.
    let (out, _) =
        launch(2, test, &["--shm", "off", "--paths", "premium", "--stats", "--stats-json", json.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // --stats: a table at the end, and the same as rows.
    assert!(stderr.contains("bulkwire run: traffic by rank and peer"), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["bench"], "job");
        assert_eq!(row["ordinary_data_packets"], 0, "{row}");
        assert!(row["premium_data_packets"].as_u64().unwrap() >= 50, "{row}");
        assert!(row["ack_bytes"].as_u64().is_some() && row["probe_bytes"] == 0, "no latency monitor: {row}");
    }
    for rank in 0..2 {
        let line = stdout.split(&format!("rank {rank} data packets: ")).nth(1).unwrap_or_else(|| panic!("{stdout}"));
        let numbers: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).take(2).collect();
        assert!(numbers[0] == 0 && numbers[1] >= 50, "rank {rank}: {line}");
    }
    let (out, _) = launch_with_env(2, test, &[], &[("BULKWIRE_PATHS", "fastest")]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("expected ordinary, premium or adaptive"), "{stderr}");
}

/// A premium path the system will not mark (here a priority above 6, which
/// needs CAP_NET_ADMIN, for ranks that run as nobody): every rank says so
/// once and the job runs on the ordinary path, never failing for it and
/// never silently. Needs root (to drop it) and setpriv; skipped otherwise.
#[test]
fn an_unmarkable_premium_path_is_said_and_the_job_keeps_to_ordinary() {
    if is_rank() {
        let world = World::init().unwrap();
        let peer = 1 - world.rank();
        for i in 0..20u32 {
            world.send(peer, 4, &i.to_le_bytes()).unwrap();
            let (_, data) = world.recv(Source::Rank(peer), Tag::Is(4)).unwrap();
            assert_eq!(data, i.to_le_bytes());
        }
        world.barrier().unwrap();
        let s = world.runtime().stats();
        println!(
            "unmarked rank {}: ordinary {} premium {}",
            world.rank(),
            s.ordinary.data.packets,
            s.premium.data.packets
        );
        world.finalize().unwrap();
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("setpriv") {
        eprintln!("skipped: needs root and setpriv to run ranks without privileges");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "2", "--shm", "off", "--paths", "premium"])
        .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "an_unmarkable_premium_path_is_said_and_the_job_keeps_to_ordinary", "--nocapture"])
        .args(["--test-threads=1"])
        .env("BULKWIRE_PREMIUM_PRIORITY", "7")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr.matches("the premium path is not available (SO_PRIORITY 7").count(), 2, "{stderr}");
    for rank in 0..2 {
        let line = stdout.split(&format!("unmarked rank {rank}: ")).nth(1).unwrap_or_else(|| panic!("{stdout}"));
        let numbers: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).take(2).collect();
        assert!(numbers[0] >= 20 && numbers[1] == 0, "rank {rank}: {line}");
    }
}

/// `bulkwire run --rate-control warp`: three ranks send to rank 0 at once,
/// paced under Warp toward a capacity of 200 Mbit/s. Every message arrives;
/// `--verbose` says what the senders do; `--stats` shows the warp feedback
/// rank 0 returned and the senders' pacing. A bad setting stops the job
/// with a message that says what is allowed.
#[test]
fn warp_rate_control_paces_a_job_and_a_bad_setting_is_refused() {
    if is_rank() {
        let world = World::init().unwrap();
        let messages = 200u32;
        if world.rank() == 0 {
            let mut next = vec![0u32; world.size() as usize];
            for _ in 0..messages * (world.size() - 1) {
                let (status, data) = world.recv(Source::Any, Tag::Is(4)).unwrap();
                let from = status.source as usize;
                assert_eq!(data, vec![next[from] as u8; 20000], "in order from {from}");
                next[from] += 1;
            }
        } else {
            for i in 0..messages {
                world.send(0, 4, &vec![i as u8; 20000]).unwrap();
            }
            let r = world.runtime().rate_stats(0).expect("rank 0 is under rate control");
            println!("rank {} rate {:.0} feedback {}", world.rank(), r.rate, r.feedback_received);
        }
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    let test = "warp_rate_control_paces_a_job_and_a_bad_setting_is_refused";
    let json = std::env::temp_dir().join(format!("bulkwire-warp-stats-{}.json", std::process::id()));
    let flags = [
        "--shm",
        "off",
        "--rate-control",
        "warp",
        "--warp-capacity",
        "200mbit",
        "--verbose",
        "--stats",
        "--stats-json",
    ];
    let mut flags = flags.to_vec();
    flags.push(json.to_str().unwrap());
    let (out, _) = launch(4, test, &flags);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("Warp rate control: each sender paced from at most 200.0 Mbit/s"), "{stderr}");
    assert!(stderr.contains("Warp rate control: feedback kB"), "--stats: {stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let to = |rank: u64, peer: u64| rows.iter().find(|r| r["rank"] == rank && r["peer"] == peer).unwrap();
    for sender in 1..4 {
        assert!(to(0, sender)["warp_bytes"].as_u64().unwrap() > 0, "rank 0 returned feedback: {rows:?}");
        assert!(to(sender, 0)["warp_feedback_packets"].as_u64().unwrap() > 0, "{rows:?}");
        assert_eq!(to(sender, 0)["warp_bytes"], 0, "senders return none: {rows:?}");
    }
    assert_eq!(stdout.matches(" feedback ").count(), 3, "{stdout}");
    let (out, _) = launch_with_env(2, test, &[], &[("BULKWIRE_RATE_CONTROL", "tcp")]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(stderr.contains("expected warp or off"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "2", "--rate-control", "warp", "--warp-capacity", "fast", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out).1.contains("--warp-capacity"), "{:?}", text(&out));
}

/// Bytes of message `seed`, each a function of its place (xorshift words),
/// so that a receiver checks every byte without a copy of the message.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(len);
    let mut words = words(seed);
    while data.len() + 8 <= len {
        data.extend_from_slice(&words.next().expect("endless").to_le_bytes());
    }
    let rest = len - data.len();
    data.extend_from_slice(&words.next().expect("endless").to_le_bytes()[..rest]);
    data
}

fn words(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// `None` if `data` is `pattern(seed, len)`, else where it differs first
/// (to the word).
fn first_difference(seed: u64, len: usize, data: &[u8]) -> Option<usize> {
    if data.len() != len {
        return Some(data.len().min(len));
    }
    let mut words = words(seed);
    let whole = data.chunks_exact(8);
    let rest = whole.remainder();
    let bad = whole.map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).position(|w| Some(w) != words.next());
    match bad {
        Some(i) => Some(i * 8),
        None if rest != &words.next().expect("endless").to_le_bytes()[..rest.len()] => Some(len - rest.len()),
        None => None,
    }
}

/// Messages larger than the runtime's largest (16 MiB): 40 and 300 MiB,
/// announced and sent in pieces. Ranks 1 and 2 each start two large sends
/// back to back with a small message between them, and rank 0 takes all six
/// by receives from any source with any tag posted at once: every sender's
/// in the order it sent them, both senders' pieces coming at the same time. Then ranks 1 and 2 exchange
/// 300 MiB both ways by blocking sends while each has a receive posted,
/// with 40 MiB from rank 0 announced to each meanwhile. Every byte is
/// checked; through shared memory and over UDP.
#[test]
fn large_messages_any_source_back_to_back_and_crossing() {
    const MIB: usize = 1 << 20;
    let seed = |from: u32, tag: i32| (u64::from(from) << 32) | tag as u64;
    let len_of = |tag: i32| match tag {
        1 | 6 => 40 * MIB,
        2 | 5 => 300 * MIB,
        _ => 100,
    };
    if is_rank() {
        let world = World::init().unwrap();
        let rank = world.rank();
        let check = |status: bulkwire_comm::Status, data: &[u8]| {
            let (from, tag) = (status.source, status.tag);
            assert_eq!(status.len, data.len());
            if let Some(at) = first_difference(seed(from, tag), len_of(tag), data) {
                panic!("rank {rank}: message of rank {from} tag {tag} ({} bytes) differs at byte {at}", data.len());
            }
        };
        let started = Instant::now();
        if rank == 0 {
            // All six posted at once: both senders' messages come at the
            // same time, their pieces interleaved in the inbox.
            let receives: Vec<_> = (0..6).map(|_| world.irecv(Source::Any, Tag::Any).unwrap()).collect();
            let mut order = vec![Vec::new(); 3];
            for r in receives {
                let Completion::Received(status, data) = world.wait(r).unwrap() else { panic!("a receive") };
                check(status, &data);
                order[status.source as usize].push(status.tag);
            }
            assert_eq!(order[1], [1, 3, 2], "rank 1's messages in the order sent");
            assert_eq!(order[2], [1, 3, 2], "rank 2's messages in the order sent");
        } else {
            let a = world.isend(0, 1, &pattern(seed(rank, 1), len_of(1))).unwrap();
            world.send(0, 3, &pattern(seed(rank, 3), len_of(3))).unwrap();
            let b = world.isend(0, 2, &pattern(seed(rank, 2), len_of(2))).unwrap();
            assert_eq!(world.wait(a).unwrap(), Completion::Sent);
            assert_eq!(world.wait(b).unwrap(), Completion::Sent);
        }
        println!("large: rank {rank}, all to rank 0, in {:.2} s", started.elapsed().as_secs_f64());
        world.barrier().unwrap();
        let started = Instant::now();
        if rank == 0 {
            let to_1 = world.isend(1, 6, &pattern(seed(0, 6), len_of(6))).unwrap();
            let to_2 = world.isend(2, 6, &pattern(seed(0, 6), len_of(6))).unwrap();
            world.wait(to_1).unwrap();
            world.wait(to_2).unwrap();
        } else {
            let peer = 3 - rank;
            let r = world.irecv(Source::Rank(peer), Tag::Is(5)).unwrap();
            world.send(peer, 5, &pattern(seed(rank, 5), len_of(5))).unwrap();
            let Completion::Received(status, data) = world.wait(r).unwrap() else { panic!("a receive") };
            check(status, &data);
            drop(data);
            let (status, data) = world.recv(Source::Any, Tag::Is(6)).unwrap();
            assert_eq!(status.source, 0);
            check(status, &data);
        }
        println!("large: rank {rank} exchanged in {:.2} s", started.elapsed().as_secs_f64());
        world.barrier().unwrap();
        let in_place: u64 = world.runtime().peer_reports().iter().map(|p| p.read_in_place).sum();
        println!("large ok rank {rank}, {in_place} datagrams read in place");
        world.finalize().unwrap();
        return;
    }
    for shm in ["on", "off"] {
        let (out, took) = launch(3, "large_messages_any_source_back_to_back_and_crossing", &["--shm", shm]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "shm {shm}\n{stdout}\n{stderr}");
        for r in 0..3 {
            let line = stdout.lines().find(|l| l.contains(&format!("large ok rank {r},")));
            let line = line.unwrap_or_else(|| panic!("shm {shm}\n{stdout}\n{stderr}"));
            // Over UDP on loopback, datagrams of a large message that come
            // in order are read straight into its buffer (the first of each
            // message, and those after another sender's, are not).
            let in_place: u64 = line.split(", ").nth(1).and_then(|w| w.split(' ').next()?.parse().ok()).unwrap();
            assert_eq!(in_place > 0, shm == "off", "shm {shm}: {line}");
        }
        eprintln!(
            "shm {shm}: {took:?}\n{}",
            stdout.lines().filter(|l| l.contains("large:")).collect::<Vec<_>>().join("\n")
        );
    }
}

/// A message of 2 GiB from rank 0 to rank 1, timed by the receiver from
/// the barrier before it to the last byte, through shared memory and over
/// UDP; checked whole.
#[test]
fn a_message_of_2_gib() {
    const LEN: usize = 2 << 30;
    if is_rank() {
        let world = World::init().unwrap();
        let data = if world.rank() == 0 { pattern(77, LEN) } else { Vec::new() };
        world.barrier().unwrap();
        let started = Instant::now();
        if world.rank() == 0 {
            world.send(1, 4, &data).unwrap();
        } else {
            let (_, got) = world.recv(Source::Rank(0), Tag::Is(4)).unwrap();
            let took = started.elapsed().as_secs_f64();
            assert_eq!(first_difference(77, LEN, &got), None);
            println!("2 GiB in {took:.2} s: {:.2} GB/s", LEN as f64 / took / 1e9);
        }
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    for shm in ["on", "off"] {
        let (out, took) = launch(2, "a_message_of_2_gib", &["--shm", shm]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "shm {shm}\n{stdout}\n{stderr}");
        let line = stdout.lines().find(|l| l.contains("2 GiB in")).unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
        eprintln!("shm {shm}: {line} (job {took:.1?})");
    }
}

/// A framed message of comm's as a broken or hostile peer would send it
/// (the trailer of `crates/comm/src/lib.rs`): kind 1 announces, 2 clears,
/// 3 is a piece, 4 withdraws.
fn forged(payload: &[u8], id: u64, value: u64, tag: i32, kind: u32) -> Vec<u8> {
    let mut v = payload.to_vec();
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&value.to_le_bytes());
    v.extend_from_slice(&tag.to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&i32::MIN.to_le_bytes());
    v
}

/// Large messages as a broken peer sends them: an announcement of 2 TiB,
/// pieces that leave a gap, a framed message cut short, and a large send
/// given up (its process leaves without waiting for it). Each is an error
/// of the receive that took it, and the receives after it go on.
#[test]
fn broken_large_messages_fail_their_receive() {
    if is_rank() {
        let world = World::init().unwrap();
        let raw = |data: Vec<u8>| {
            world
                .runtime()
                .with(|e| e.send_owned(0, 0, data).map_err(|e| RuntimeError::Stopped(e.to_string())))
                .unwrap()
        };
        if world.rank() == 1 {
            raw(forged(&[], 1, 2 << 40, 1, 1));
            raw(forged(&[], 2, 100, 2, 1));
            // Pieces only once cleared, as a sender would.
            let clear = forged(&[], 2, 0, 2, 2);
            world.runtime().wait(|e| Ok(e.take(|m| m.from == 0 && m.data == clear).map(drop))).unwrap();
            raw(forged(&[1; 40], 2, 0, 2, 3));
            raw(forged(&[2; 40], 2, 60, 2, 3));
            raw(forged(&[3; 20], 2, 100, 2, 3));
            raw(i32::MIN.to_le_bytes().repeat(3));
            world.send(0, 3, b"after").unwrap();
            // Announced, never cleared: withdrawn as this process leaves.
            let _unwaited = world.isend(0, 9, &vec![9; 20 << 20]).unwrap();
            world.finalize().unwrap();
            return;
        }
        let err = world.recv(Source::Rank(1), Tag::Is(1)).unwrap_err();
        println!("broken: 2 TiB: {err}");
        let err = world.recv(Source::Any, Tag::Is(2)).unwrap_err();
        println!("broken: gap: {err}");
        let err = world.recv(Source::Any, Tag::Any).unwrap_err();
        println!("broken: short: {err}");
        let (status, data) = world.recv(Source::Rank(1), Tag::Is(3)).unwrap();
        assert_eq!((status.source, &data[..]), (1, &b"after"[..]));
        world.runtime().wait(|e| Ok(e.finished[1].then_some(()))).unwrap();
        let err = world.recv(Source::Rank(1), Tag::Is(9)).unwrap_err();
        println!("broken: given up: {err}");
        println!("broken: rank 0 goes on");
        world.finalize().unwrap();
        return;
    }
    for shm in ["on", "off"] {
        let (out, _) = launch(2, "broken_large_messages_fail_their_receive", &["--shm", shm]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "shm {shm}\n{stdout}\n{stderr}");
        let line =
            |what: &str| stdout.lines().find(|l| l.contains(&format!("broken: {what}"))).unwrap_or("").to_string();
        assert!(line("2 TiB").contains("announced 2199023255552 bytes, more than the largest message"), "{stdout}");
        assert!(line("gap").contains("a piece at byte 60 of 100 where byte 40 was due"), "{stdout}");
        assert!(line("short").contains("shorter than its trailer"), "{stdout}");
        assert!(line("given up").contains("rank 1 has finished"), "{stdout}");
        assert!(stdout.contains("broken: rank 0 goes on") && !stderr.contains("panicked"), "{stdout}\n{stderr}");
    }
}

/// A large isend moves on while its sender computes: rank 0 starts 40 MiB
/// and makes no call for 3 s, and rank 1 has it well before.
#[test]
fn a_large_isend_moves_on_while_its_sender_computes() {
    if is_rank() {
        let world = World::init().unwrap();
        world.barrier().unwrap();
        if world.rank() == 0 {
            let request = world.isend(1, 8, &pattern(8, 40 << 20)).unwrap();
            std::thread::sleep(Duration::from_secs(3));
            world.wait(request).unwrap();
        } else {
            let started = Instant::now();
            let (_, data) = world.recv(Source::Rank(0), Tag::Is(8)).unwrap();
            let took = started.elapsed();
            assert_eq!(first_difference(8, 40 << 20, &data), None);
            println!("background: received in {took:?}");
            assert!(took < Duration::from_millis(2500), "the pieces waited for the sender's next call: {took:?}");
        }
        world.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    for shm in ["on", "off"] {
        let (out, _) = launch(2, "a_large_isend_moves_on_while_its_sender_computes", &["--shm", shm]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "shm {shm}\n{stdout}\n{stderr}");
        eprintln!("shm {shm}: {}", stdout.lines().find(|l| l.contains("background:")).unwrap_or(""));
    }
}
