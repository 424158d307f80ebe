//! Groups and collectives in multi-process jobs on loopback, started with
//! `bulkwire run` (each test is the launcher and, as a rank, the program).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bulkwire_comm::{Source, Tag, World};
use bulkwire_groups::{Algorithm, Delivery, Event, Group, GroupError, Groups, Op, Operation};

fn is_rank() -> bool {
    std::env::var("BULKWIRE_RENDEZVOUS").is_ok()
}

fn launch(n: u32, test: &str, env: &[(&str, &str)]) -> (Output, Duration) {
    launch_with(n, test, env, &[])
}

/// [`launch`] with options of `bulkwire run`.
fn launch_with(n: u32, test: &str, env: &[(&str, &str)], options: &[&str]) -> (Output, Duration) {
    let exe = std::env::current_exe().expect("test binary");
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bulkwire"));
    cmd.envs(env.iter().copied());
    cmd.arg("run").arg("-n").arg(n.to_string()).args(options);
    cmd.arg(exe).args(["--exact", test, "--nocapture", "--test-threads=1"]);
    let out = cmd.stdin(Stdio::null()).output().expect("run bulkwire");
    (out, start.elapsed())
}

fn check(out: &Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

/// Bytes that say who made them and for what.
fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed).to_le_bytes()[1]).collect()
}

/// Every collective, by every algorithm that runs it, from every root, on
/// the job's group: results checked against what each member computes
/// alone.
fn every_collective(groups: &Groups<'_>, group: &Group<'_>, sizes: &[usize]) {
    let view = group.view().unwrap();
    let n = view.members.len();
    let me = group.position().unwrap();
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(Operation::Bcast)) {
        group.set_algorithm(Operation::Bcast, Some(algorithm)).unwrap();
        for &len in sizes {
            for (i, &root) in view.members.iter().enumerate() {
                let expect = pattern(i as u32 * 7 + len as u32, len);
                let mut buf = if view.members[me] == root { expect.clone() } else { vec![0xee; len] };
                group.bcast(root, &mut buf).unwrap();
                assert!(buf == expect, "bcast {algorithm} of {len} bytes from {root}");
            }
        }
        // Confirmed delivery: the root hears one acknowledgement per child
        // of its tree (a binomial tree after a scatter and allgather).
        group.set_delivery(Delivery::Confirmed).unwrap();
        let before = groups.stats().acks_received;
        let mut buf = vec![1u8; 1000];
        group.bcast(view.members[0], &mut buf).unwrap();
        let acks = groups.stats().acks_received - before;
        if me == 0 && n > 1 {
            let children = match algorithm {
                Algorithm::Flat => n - 1,
                Algorithm::BinaryTree => (n - 1).min(2),
                Algorithm::Chain => 1,
                _ => n.next_power_of_two().trailing_zeros() as usize,
            };
            assert_eq!(acks as usize, children, "acks at the root of a confirmed {algorithm} bcast to {n}");
        }
        group.set_delivery(Delivery::Sent).unwrap();
    }
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(Operation::Allreduce)) {
        group.set_algorithm(Operation::Allreduce, Some(algorithm)).unwrap();
        group.set_algorithm(Operation::Reduce, algorithm.supports(Operation::Reduce).then_some(algorithm)).unwrap();
        for &len in sizes {
            let count = len / 8;
            let mine: Vec<i64> = (0..count).map(|k| (k as i64 % 1000) * (me as i64 + 1) - me as i64).collect();
            let sum: Vec<i64> =
                (0..count).map(|k| (0..n as i64).map(|m| (k as i64 % 1000) * (m + 1) - m).sum()).collect();
            let mut buf = mine.clone();
            group.allreduce(&mut buf, Op::Sum).unwrap();
            assert_eq!(buf, sum, "allreduce {algorithm} of {count} i64");
            let mut buf: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
            group.allreduce(&mut buf, Op::Max).unwrap();
            let max: Vec<f64> = (0..count)
                .map(|k| (0..n as i64).map(|m| ((k as i64 % 1000) * (m + 1) - m) as f64).fold(f64::MIN, f64::max))
                .collect();
            assert_eq!(buf, max, "allreduce max {algorithm}");
            let root = view.members[(count + 1) % n];
            let mut buf = mine.clone();
            group.reduce(root, &mut buf, Op::Min).unwrap();
            if view.members[me] == root {
                let min: Vec<i64> =
                    (0..count).map(|k| (0..n as i64).map(|m| (k as i64 % 1000) * (m + 1) - m).min().unwrap()).collect();
                assert_eq!(buf, min, "reduce min {algorithm} to {root}");
            } else {
                assert_eq!(buf, mine, "a reduce leaves the other members' buffers");
            }
            let mut bits: Vec<u32> = vec![1 << (me % 32); count.min(10)];
            group
                .allreduce(
                    &mut bits,
                    Op::User(|a: &mut [u32], b: &[u32]| a.iter_mut().zip(b).for_each(|(x, y)| *x |= y)),
                )
                .unwrap();
            let all = (0..n).fold(0u32, |acc, m| acc | 1 << (m % 32));
            assert!(bits.iter().all(|&b| b == all));
        }
    }
    for algorithm in [Algorithm::Flat, Algorithm::Binomial] {
        group.set_algorithm(Operation::Gather, Some(algorithm)).unwrap();
        group.set_algorithm(Operation::Scatter, Some(algorithm)).unwrap();
        for &len in sizes {
            let len = len / 4;
            let blocks: Vec<Vec<u8>> = (0..n).map(|m| pattern(m as u32 + 99, len)).collect();
            for (i, &root) in view.members.iter().enumerate() {
                let mut all = vec![0u8; if i == me { n * len } else { 0 }];
                group.gather(root, &blocks[me], &mut all).unwrap();
                if i == me {
                    assert!(all == blocks.concat(), "gather {algorithm} {len} to {root}");
                }
                let mut mine = vec![0u8; len];
                let send = if i == me { blocks.concat() } else { Vec::new() };
                group.scatter(root, &send, &mut mine).unwrap();
                assert!(mine == blocks[me], "scatter {algorithm} {len} from {root}");
            }
        }
    }
    for algorithm in [Algorithm::Flat, Algorithm::Ring] {
        group.set_algorithm(Operation::Allgather, Some(algorithm)).unwrap();
        for &len in sizes {
            let len = len / 4;
            let blocks: Vec<Vec<u8>> = (0..n).map(|m| pattern(m as u32 + 5, len)).collect();
            let mut all = vec![0u8; n * len];
            group.allgather(&blocks[me], &mut all).unwrap();
            assert!(all == blocks.concat(), "allgather {algorithm} {len}");
        }
    }
    for op in Operation::ALL {
        group.set_algorithm(op, None).unwrap();
    }
    group.barrier().unwrap();
}

#[test]
fn every_collective_by_every_algorithm_from_every_root_on_1_to_5_members() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        // 0 bytes, small, one piece and a bit (pieces are 256 KiB), uneven.
        every_collective(&groups, &groups.world(), &[0, 8, 1000, (256 << 10) + 24, 600_001]);
        println!("rank-ok {} {:?}", world.rank(), groups.stats());
        world.finalize().unwrap();
        return;
    }
    for n in 1..=5 {
        let (out, _) = launch(n, "every_collective_by_every_algorithm_from_every_root_on_1_to_5_members", &[]);
        let stdout = check(&out);
        assert_eq!(stdout.matches("rank-ok").count(), n as usize, "{stdout}");
    }
}

/// 64 MiB broadcast (each algorithm) and allreduce, 8 processes.
#[test]
fn sixty_four_mib_to_eight_members() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let g = groups.world();
        let len = 64 << 20;
        let expect = pattern(3, len);
        for algorithm in [Algorithm::BinaryTree, Algorithm::Chain, Algorithm::ScatterAllgather] {
            g.set_algorithm(Operation::Bcast, Some(algorithm)).unwrap();
            let mut buf = if world.rank() == 5 { expect.clone() } else { vec![0; len] };
            g.bcast(5, &mut buf).unwrap();
            assert!(buf == expect, "{algorithm}");
        }
        let mut v: Vec<f32> = (0..len / 4).map(|i| (i % 7) as f32 * (world.rank() + 1) as f32).collect();
        g.allreduce(&mut v, Op::Sum).unwrap();
        assert!(v.iter().enumerate().all(|(i, &x)| x == (i % 7) as f32 * 36.0));
        // Up a binomial tree the root hears three children at once: each
        // one's pieces must not crowd out the others' in its inbox.
        g.set_algorithm(Operation::Allreduce, Some(Algorithm::Binomial)).unwrap();
        let mut v: Vec<f64> = (0..(16 << 20) / 8).map(|i| (i % 5) as f64 + world.rank() as f64).collect();
        g.allreduce(&mut v, Op::Sum).unwrap();
        assert!(v.iter().enumerate().all(|(i, &x)| x == (i % 5) as f64 * 8.0 + 28.0));
        println!("rank-ok {}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let (out, took) = launch(8, "sixty_four_mib_to_eight_members", &[]);
    let stdout = check(&out);
    assert_eq!(stdout.matches("rank-ok").count(), 8, "{stdout}");
    eprintln!("64 MiB to 8: {took:?}");
}

/// Groups made, joined, left and destroyed at run time: every member sees
/// the same views; collectives run on each view's members; misuse is a
/// clear error naming the call.
#[test]
fn groups_are_created_joined_left_and_destroyed_at_run_time() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let rank = world.rank();
        let all = groups.world();
        // Rank 1 creates "odd" with rank 3 in it; rank 0 joins it.
        let odd = match rank {
            1 => Some(groups.create("odd", &[3]).unwrap()),
            3 => Some(groups.find("odd").unwrap()),
            _ => None,
        };
        all.barrier().unwrap();
        let odd = match (rank, odd) {
            (0, _) => Some(groups.join("odd").unwrap()),
            (_, g) => g,
        };
        if let Some(g) = odd {
            let view = g.wait_members(3).unwrap();
            assert_eq!(view.members, vec![1, 3, 0]);
            assert_eq!(view.server, 1);
            g.set_delivery(Delivery::Confirmed).unwrap();
            let mut buf = if rank == 3 { b"from three".to_vec() } else { vec![0; 10] };
            g.bcast(3, &mut buf).unwrap();
            assert_eq!(&buf, b"from three");
            let mut x = [rank as u64];
            g.allreduce(&mut x, Op::Sum).unwrap();
            assert_eq!(x, [4]);
            // Misuse.
            let err = g.bcast(2, &mut buf).unwrap_err().to_string();
            assert!(err.contains("group bcast: rank 2 is not a member of group \"odd\""), "{err}");
            // Buffers of different sizes: every member hears of it, the
            // root (which waits for confirmation) from the others.
            let mut wrong = vec![0u8; if rank == 1 { 5 } else { 6 }];
            match g.bcast(1, &mut wrong) {
                Err(GroupError::SizeMismatch { rank: 1, mine: 6, theirs: 5, .. }) => assert_ne!(rank, 1),
                Err(e @ GroupError::SizesDiffer { other: 1, other_bytes: 5, bytes: 6, .. }) => {
                    assert!(e.to_string().starts_with("group bcast: rank "), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
        all.barrier().unwrap();
        if rank == 0 {
            let err = groups.join("odd").unwrap_err().to_string();
            assert_eq!(err, "group join \"odd\": refused: this process is already a member");
            let err = groups.create("odd", &[]).unwrap_err().to_string();
            assert_eq!(err, "group create \"odd\": refused: a group of that name exists");
            let err = groups.join("none").unwrap_err().to_string();
            assert_eq!(err, "group join \"none\": refused: no group has that name");
        }
        all.barrier().unwrap();
        // The server leaves: rank 3 takes over, and the others go on.
        if rank == 1 {
            odd.unwrap().leave().unwrap();
        }
        if let (Some(g), true) = (odd, rank != 1) {
            let view = g.wait_members(2).unwrap();
            assert_eq!((view.members.clone(), view.server), (vec![3, 0], 3));
            let mut x = [rank as u64 + 1];
            g.allreduce(&mut x, Op::Sum).unwrap();
            assert_eq!(x, [5]);
        }
        all.barrier().unwrap();
        // Rank 2 joins through the new server, then destroys the group.
        if rank == 2 {
            let g = groups.join("odd").unwrap();
            assert_eq!(g.view().unwrap().members, vec![3, 0, 2]);
            g.barrier().unwrap();
            all.barrier().unwrap();
            g.destroy().unwrap();
        } else {
            if let (Some(g), true) = (odd, rank != 1) {
                g.wait_members(3).unwrap();
                g.barrier().unwrap();
            }
            all.barrier().unwrap();
        }
        all.barrier().unwrap();
        if let (Some(g), true) = (odd, rank != 1) {
            // The destruction reaches every member; later calls say so.
            let err = g.barrier().expect_err("a barrier on a destroyed group").to_string();
            assert!(err.contains("was destroyed") || err.contains("while the operation was pending"), "{err}");
        }
        let mut views = Vec::new();
        while let Some(e) = groups.poll_event().unwrap() {
            if let Event::View(v) = e {
                views.push(v.number);
            }
        }
        println!("rank {rank} views {views:?}");
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(4, "groups_are_created_joined_left_and_destroyed_at_run_time", &[]);
    let stdout = check(&out);
    assert_eq!(stdout.matches("views [").count(), 4, "{stdout}");
}

/// A member that leaves while the others wait in a broadcast it was to
/// root: they get an error naming the view change, not a hang.
#[test]
fn a_view_change_ends_a_pending_collective_with_an_error() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let rank = world.rank();
        let g = if rank == 0 { groups.create("trio", &[1, 2]).unwrap() } else { groups.find("trio").unwrap() };
        g.wait_members(3).unwrap();
        if rank == 2 {
            std::thread::sleep(Duration::from_millis(200));
            g.leave().unwrap();
        } else {
            let mut buf = [0u8; 4];
            let err = g.bcast(2, &mut buf).unwrap_err().to_string();
            assert_eq!(err, "group bcast: group \"trio\" (1) went from view 1 to view 2 (rank 2 left) while the operation was pending");
            println!("rank {rank}: {err}");
        }
        world.finalize().unwrap();
        return;
    }
    let (out, took) = launch(3, "a_view_change_ends_a_pending_collective_with_an_error", &[]);
    let stdout = check(&out);
    assert_eq!(stdout.matches("rank 2 left").count(), 2, "{stdout}");
    assert!(took < Duration::from_secs(20));
}

/// A member killed during a broadcast: the job stops with a message naming
/// it within the failure-detection time, instead of hanging.
#[test]
fn a_member_killed_during_a_broadcast_stops_the_job_with_its_name() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let g = groups.world();
        if world.rank() == 2 {
            std::process::exit(9);
        }
        let mut buf = vec![0u8; 1 << 20];
        let _ = g.bcast(2, &mut buf);
        return;
    }
    let (out, took) = launch(4, "a_member_killed_during_a_broadcast_stops_the_job_with_its_name", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("rank 2"), "{stderr}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// The job's choice of algorithm: a bad one is refused with the reason.
#[test]
fn a_bad_algorithm_setting_is_refused() {
    if is_rank() {
        let world = World::init().unwrap();
        let err = Groups::new(&world).err().map(|e| e.to_string()).unwrap_or_default();
        println!("{err}");
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(2, "a_bad_algorithm_setting_is_refused", &[("BULKWIRE_GROUP_ALGORITHM", "bcast=ring")]);
    let stdout = check(&out);
    assert!(stdout.contains("BULKWIRE_GROUP_ALGORITHM: algorithm ring cannot run bcast"), "{stdout}");
}

/// Posts (NCS_mcast): every member posts without the others calling
/// anything together; each member receives each post once, one poster's
/// posts in order, by source and tag. Also in a group of some members.
#[test]
fn posts_reach_every_member_once_in_each_posters_order() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let (rank, n) = (world.rank(), world.size());
        let all = groups.world();
        const POSTS: u32 = 40;
        for i in 0..POSTS {
            let data = pattern(rank * 1000 + i, (i as usize * 97) % 3000);
            all.post((i % 3) as i32, &data).unwrap();
        }
        let mut next = vec![0u32; n as usize];
        for _ in 0..POSTS * (n - 1) {
            let p = all.recv(Source::Any, Tag::Any).unwrap();
            let i = next[p.from as usize];
            assert_eq!((p.tag, p.view), ((i % 3) as i32, 1), "post {i} of {}", p.from);
            assert!(p.data == pattern(p.from * 1000 + i, (i as usize * 97) % 3000), "post {i} of {}", p.from);
            next[p.from as usize] += 1;
        }
        assert!(next.iter().enumerate().all(|(r, &k)| k == if r as u32 == rank { 0 } else { POSTS }));
        assert!(all.try_recv(Source::Any, Tag::Any).unwrap().is_none());
        // A group of the even ranks: posts reach its members only.
        let evens: Vec<u32> = (2..n).step_by(2).collect();
        let g = match rank {
            0 => Some(groups.create("evens", &evens).unwrap()),
            r if r % 2 == 0 => Some(groups.find("evens").unwrap()),
            _ => None,
        };
        if let Some(g) = g {
            g.wait_members(evens.len() + 1).unwrap();
            g.post(7, &[rank as u8]).unwrap();
            for _ in 0..evens.len() {
                let p = g.recv(Source::Any, Tag::Is(7)).unwrap();
                assert!(p.from % 2 == 0 && p.from != rank && p.data == [p.from as u8]);
            }
        }
        all.barrier().unwrap();
        assert!(all.try_recv(Source::Any, Tag::Any).unwrap().is_none());
        println!("rank-ok {rank}");
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(6, "posts_reach_every_member_once_in_each_posters_order", &[]);
    let stdout = check(&out);
    assert_eq!(stdout.matches("rank-ok").count(), 6, "{stdout}");
}

/// The example built beside this test binary: `cargo test` builds the
/// examples, but not when told to build one test target alone (build them
/// with `cargo build --examples` then).
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target folder").join("examples").join(name);
    assert!(path.exists(), "{} is not built: build it with cargo build --examples", path.display());
    path
}

/// Seed 004's static voting, with group posts and with point-to-point
/// sends: every request reaches its quorum, and every replica agrees at
/// the end (the example checks both and fails otherwise).
#[test]
fn static_voting_agrees_with_posts_and_with_point_to_point() {
    if is_rank() {
        return;
    }
    for mode in [None, Some("--p2p")] {
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .args(["run", "-n", "4"])
            .arg(example("voting"))
            .args(["--requests", "150", "--files", "10", "--json"])
            .args(mode)
            .stdin(Stdio::null())
            .output()
            .expect("run bulkwire");
        let stdout = check(&out);
        let rows: serde_json::Value = serde_json::from_str(stdout.trim()).expect("rows");
        let row = &rows[0];
        assert_eq!(row["what"], if mode.is_some() { "p2p" } else { "groups" });
        assert_eq!((row["requests_count"].as_u64(), row["replicas_agree"].as_bool()), (Some(600), Some(true)), "{row}");
    }
}

/// A member busy computing (away from the library) still passes posts on
/// to its subtree and, as a group's server and the directory, still
/// answers a join: the runtime's progress thread does the groups' work
/// meanwhile.
#[test]
fn a_busy_member_does_not_hold_up_posts_or_joins() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let rank = world.rank();
        let all = groups.world();
        if rank == 0 {
            groups.create("busy", &[]).unwrap();
        }
        all.barrier().unwrap();
        let start = Instant::now();
        match rank {
            // Rank 0 posts, then computes; rank 1 relays rank 0's posts to
            // rank 3 (binary tree over 0, 1, 2, 3) and computes from the start.
            0 => {
                // Rank 1 is surely computing by then.
                std::thread::sleep(Duration::from_millis(300));
                all.post(1, b"through a busy relay").unwrap();
                std::thread::sleep(Duration::from_secs(3));
            }
            1 => std::thread::sleep(Duration::from_secs(3)),
            2 => {
                // Once rank 0 (the directory and the group's server) computes.
                std::thread::sleep(Duration::from_millis(600));
                let asked = Instant::now();
                groups.join("busy").unwrap();
                println!("join took {:?}", asked.elapsed());
                assert!(asked.elapsed() < Duration::from_secs(1), "the join waited for the busy server");
            }
            _ => {
                let p = all.recv(Source::Rank(0), Tag::Is(1)).unwrap();
                assert_eq!(p.data, b"through a busy relay");
                println!("post took {:?}", start.elapsed());
                assert!(start.elapsed() < Duration::from_secs(2), "the post waited for the busy relay");
            }
        }
        if rank != 0 {
            // Every post reaches every member: drain this one.
            let _ = all.try_recv(Source::Rank(0), Tag::Is(1));
        }
        all.barrier().unwrap();
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(4, "a_busy_member_does_not_hold_up_posts_or_joins", &[]);
    let stdout = check(&out);
    assert!(stdout.contains("join took") && stdout.contains("post took"), "{stdout}");
}

/// Best-effort posts over UDP with 10% of datagrams dropped: what arrives
/// is whole and in the poster's order, some is lost and nothing is resent;
/// the same posts in the default mode all arrive. `--stats` counts the loss.
#[test]
fn best_effort_posts_lose_what_the_network_drops_and_nothing_else() {
    const POSTS: u32 = 600;
    // Some posts take several datagrams: a lost piece drops the whole post.
    let post = |i: u32| pattern(i, if i.is_multiple_of(25) { 100_000 } else { 200 });
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let all = groups.world();
        for best_effort in [true, false] {
            all.set_best_effort(best_effort).unwrap();
            all.barrier().unwrap();
            if world.rank() == 0 {
                for i in 0..POSTS {
                    let mut data = i.to_le_bytes().to_vec();
                    data.extend(post(i));
                    all.post(1, &data).unwrap();
                }
            }
            all.barrier().unwrap();
            let mut got = Vec::new();
            if world.rank() != 0 {
                let deadline = Instant::now() + Duration::from_secs(if best_effort { 1 } else { 30 });
                while Instant::now() < deadline && got.len() < POSTS as usize {
                    match all.try_recv(Source::Rank(0), Tag::Is(1)).unwrap() {
                        Some(p) => {
                            let i = u32::from_le_bytes(p.data[..4].try_into().unwrap());
                            assert!(p.data[4..] == post(i), "post {i} arrived whole");
                            got.push(i);
                        }
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                assert!(got.windows(2).all(|w| w[0] < w[1]), "in the poster's order, once each: {got:?}");
                if best_effort {
                    assert!(got.len() < POSTS as usize, "with 10% dropped, some posts are lost");
                    assert!(got.len() > POSTS as usize / 3, "most posts arrive: {}", got.len());
                } else {
                    assert_eq!(got.len(), POSTS as usize, "every post arrives");
                }
            }
            println!("rank {} best effort {best_effort}: {} posts", world.rank(), got.len());
            all.barrier().unwrap();
        }
        println!("rank-ok {}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch_with(
        4,
        "best_effort_posts_lose_what_the_network_drops_and_nothing_else",
        &[("BULKWIRE_TEST_DROP", "0.1")],
        &["--stats"],
    );
    let stdout = check(&out);
    assert_eq!(stdout.matches("rank-ok").count(), 4, "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("best-effort data from the peer, not resent"), "{stderr}");
}

/// Latest-value mode: a reader that comes late finds only the newest post
/// of each poster and tag; with the mode off it finds every one.
#[test]
fn in_latest_value_mode_a_late_reader_finds_the_newest_post_only() {
    if is_rank() {
        let world = World::init().unwrap();
        let groups = Groups::new(&world).unwrap();
        let all = groups.world();
        for latest in [true, false] {
            all.set_latest_only(latest).unwrap();
            all.barrier().unwrap();
            if world.rank() == 0 {
                for i in 0..500u32 {
                    all.post(1, &i.to_le_bytes()).unwrap();
                }
                all.post(2, b"done").unwrap();
            } else {
                // The poster's posts of one view come in order: once "done"
                // is here, so is every value.
                all.recv(Source::Rank(0), Tag::Is(2)).unwrap();
                let mut got = Vec::new();
                while let Some(p) = all.try_recv(Source::Rank(0), Tag::Is(1)).unwrap() {
                    got.push(u32::from_le_bytes(p.data.try_into().unwrap()));
                }
                if latest {
                    assert_eq!(got, [499], "only the newest value");
                } else {
                    assert_eq!(got, (0..500).collect::<Vec<_>>(), "every value, in order");
                }
            }
            all.barrier().unwrap();
        }
        println!("rank-ok {}", world.rank());
        world.finalize().unwrap();
        return;
    }
    let (out, _) = launch(3, "in_latest_value_mode_a_late_reader_finds_the_newest_post_only", &[]);
    let stdout = check(&out);
    assert_eq!(stdout.matches("rank-ok").count(), 3, "{stdout}");
}
