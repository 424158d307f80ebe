//! The shared memory in multi-process jobs on loopback, started with
//! `bulkwire run` (each test is the launcher and, as a rank, the program).

mod common;
use common::{is_rank, launch};

use std::process::Output;

use bulkwire_comm::{Source, Tag, World};
use bulkwire_dsm::history::{self, Issued};
use bulkwire_dsm::{Applied, Dsm, DsmError, Semantics};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn check(out: &Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

const N: u64 = 3000;

/// Every rank writes its own slots while reading everyone's: PRAM order
/// seen in the reads, slow writes never going back, coherent writes in one
/// order, and after a fence every replica holding every last value.
fn semantics_rank() {
    let world = World::init().unwrap();
    let dsm = Dsm::new(&world).unwrap();
    let (me, n) = (world.rank() as usize, world.size() as usize);
    let a = dsm.map::<u64>("a", n).unwrap();
    let b = dsm.map::<u64>("b", n).unwrap();
    let c = dsm.map::<i32>("c", n).unwrap();
    let d = dsm.map::<f64>("d", 1).unwrap();
    let mut seen_b = vec![0u64; n];
    let mut seen_c = vec![0i32; n];
    let mut coherent = Vec::new();
    for i in 1..=N {
        // PRAM: a[me] then b[me]; a reader that sees b[w] = j sees a[w] >= j.
        a.write(me, i, Semantics::Pram).unwrap();
        b.write(me, i, Semantics::Pram).unwrap();
        c.write(me, i as i32, Semantics::Slow).unwrap();
        if i % 500 == 0 {
            let v = (me as f64) * 1e6 + i as f64;
            d.write(0, v, Semantics::Coherent).unwrap();
            coherent.push(v);
            // A writer reads its coherent write or a later one.
            assert!(d.read(0).unwrap() != 0.0);
        }
        for w in 0..n {
            let bw = b.read(w).unwrap();
            let aw = a.read(w).unwrap();
            assert!(aw >= bw, "rank {me}: b[{w}] = {bw} but then a[{w}] = {aw}: PRAM order broken");
            assert!(bw >= seen_b[w], "rank {me}: b[{w}] went back from {} to {bw}", seen_b[w]);
            seen_b[w] = bw;
            let cw = c.read(w).unwrap();
            assert!(cw >= seen_c[w], "rank {me}: slow c[{w}] went back from {} to {cw}", seen_c[w]);
            seen_c[w] = cw;
        }
    }
    dsm.fence().unwrap();
    for w in 0..n {
        assert_eq!(
            (a.read(w).unwrap(), b.read(w).unwrap(), c.read(w).unwrap()),
            (N, N, N as i32),
            "rank {me}, slot {w}"
        );
    }
    // The coherent location holds the same last value everywhere.
    let last = d.read(0).unwrap();
    if me == 0 {
        for from in 1..n as u32 {
            let (_, bytes) = world.recv(Source::Rank(from), Tag::Is(9)).unwrap();
            assert_eq!(f64::from_le_bytes(bytes.try_into().unwrap()), last, "rank {from}'s coherent value");
        }
    } else {
        world.send(0, 9, &last.to_le_bytes()).unwrap();
    }
    let s = dsm.stats();
    println!(
        "rank {me}: {} batches, {} entries sent, {} coalesced, threshold {:.1}, warp {:.2}",
        s.batches_sent, s.entries_sent, s.coalesced, s.threshold, s.last_warp
    );
    world.barrier().unwrap();
}

#[test]
fn slow_pram_and_coherent_writes_keep_their_order_between_processes() {
    if is_rank() {
        return semantics_rank();
    }
    for flush in ["warp", "1", "200"] {
        let out = check(&launch(
            4,
            "slow_pram_and_coherent_writes_keep_their_order_between_processes",
            &[("BULKWIRE_DSM_FLUSH", flush)],
        ));
        assert_eq!(out.matches("batches").count(), 4, "{out}");
    }
}

#[test]
fn segments_mapped_differently_stop_the_job_with_both_sizes() {
    if is_rank() {
        let world = World::init().unwrap();
        let dsm = Dsm::new(&world).unwrap();
        let len = if world.rank() == 1 { 12 } else { 10 };
        let x = dsm.map::<f64>("x", len).unwrap();
        let err = dsm.fence().and_then(|()| x.write(0, 1.0, Semantics::Pram)).and_then(|()| dsm.fence());
        match err {
            Err(e @ DsmError::Mismatch { .. }) => {
                world.abort(&e.to_string());
                std::process::exit(1);
            }
            other => panic!("rank {}: {other:?}", world.rank()),
        }
    }
    let out = launch(3, "segments_mapped_differently_stop_the_job_with_both_sizes", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("\"x\" of 10 f64 here but \"x\" of 12 f64 at rank 1")
            || stderr.contains("\"x\" of 12 f64 here but \"x\" of 10 f64"),
        "{stderr}"
    );
}

#[test]
fn bad_indices_are_errors_naming_the_call() {
    if is_rank() {
        let world = World::init().unwrap();
        let dsm = Dsm::new(&world).unwrap();
        let x = dsm.map::<u8>("x", 4).unwrap();
        let e = x.write(4, 1, Semantics::Slow).unwrap_err().to_string();
        assert!(e.contains("write: index 4 is out of range: segment \"x\" has 4 elements"), "{e}");
        let e = x.read(9).unwrap_err().to_string();
        assert!(e.contains("read: index 9 is out of range"), "{e}");
        let e = dsm.map::<u8>("x", 4).err().unwrap().to_string();
        assert!(e.contains("mapped already"), "{e}");
        dsm.fence().unwrap();
        println!("indices checked");
        return;
    }
    let out = check(&launch(2, "bad_indices_are_errors_naming_the_call", &[]));
    assert_eq!(out.matches("indices checked").count(), 2, "{out}");
}

#[test]
fn a_process_that_dies_ends_the_others_fence_with_an_error() {
    if is_rank() {
        let world = World::init().unwrap();
        let dsm = Dsm::new(&world).unwrap();
        let x = dsm.map::<u64>("x", 4).unwrap();
        if world.rank() == 1 {
            x.write(1, 7, Semantics::Pram).unwrap();
            std::process::exit(3);
        }
        let e = dsm.fence().unwrap_err();
        println!("rank {}: {e}", world.rank());
        std::process::exit(2);
    }
    let out = launch(3, "a_process_that_dies_ends_the_others_fence_with_an_error", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("rank 1"), "{stderr}");
}

/// Random programs of slow, PRAM and coherent writes, reads and fences on
/// real processes; every replica logs what it applied, and rank 0 runs the
/// history checker over every program and log.
fn history_rank() {
    let world = World::init().unwrap();
    let dsm = Dsm::new(&world).unwrap();
    dsm.record();
    let (me, n) = (world.rank(), world.size());
    let segs = [dsm.map::<u64>("p", 8).unwrap(), dsm.map::<u64>("q", 5).unwrap()];
    let mut rng = ChaCha8Rng::seed_from_u64(u64::from(me) + 17);
    let mut issued = Vec::new();
    for step in 0..3000u64 {
        if step % 1000 == 999 {
            dsm.fence().unwrap();
            continue;
        }
        let s = rng.random_range(0..segs.len());
        let index = rng.random_range(0..segs[s].len());
        if rng.random_bool(0.3) {
            segs[s].read(index).unwrap();
            continue;
        }
        let semantics = match rng.random_range(0..20) {
            0 => Semantics::Coherent,
            1..=9 => Semantics::Slow,
            _ => Semantics::Pram,
        };
        let bits = (u64::from(me) << 40) | (step + 1);
        segs[s].write(index, bits, semantics).unwrap();
        issued.push(Issued { seg: s as u32, index: index as u64, bits, semantics });
    }
    dsm.fence().unwrap();
    let log = dsm.take_log();
    // To rank 0: the program's writes, then the replica's log, as words.
    let code = |s: Semantics| match s {
        Semantics::Slow => 0,
        Semantics::Pram => 1,
        Semantics::Coherent => 2,
    };
    let words: Vec<u64> = std::iter::once(issued.len() as u64)
        .chain(issued.iter().flat_map(|i| [u64::from(i.seg), i.index, i.bits, code(i.semantics)]))
        .chain(log.iter().flat_map(|a| {
            [u64::from(a.writer), u64::from(a.entry.seg), a.entry.index, a.entry.bits, a.global.map_or(0, |g| g + 1)]
        }))
        .collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if me != 0 {
        world.send(0, 11, &bytes).unwrap();
        world.barrier().unwrap();
        return;
    }
    let mut programs = vec![Vec::new(); n as usize];
    let mut logs = vec![Vec::new(); n as usize];
    for from in 0..n {
        let data = if from == 0 { bytes.clone() } else { world.recv(Source::Rank(from), Tag::Is(11)).unwrap().1 };
        let w: Vec<u64> = data.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let count = w[0] as usize;
        programs[from as usize] = w[1..1 + 4 * count]
            .chunks(4)
            .map(|c| Issued {
                seg: c[0] as u32,
                index: c[1],
                bits: c[2],
                semantics: [Semantics::Slow, Semantics::Pram, Semantics::Coherent][c[3] as usize],
            })
            .collect();
        logs[from as usize] = w[1 + 4 * count..]
            .chunks(5)
            .map(|c| Applied {
                writer: c[0] as u32,
                entry: bulkwire_dsm::codec::Entry { seg: c[1] as u32, index: c[2], bits: c[3] },
                global: c[4].checked_sub(1),
            })
            .collect();
    }
    history::check(&programs, &logs).unwrap();
    let applied: usize = logs.iter().map(Vec::len).sum();
    println!("history checked: {} writes, {applied} applications", programs.iter().map(Vec::len).sum::<usize>());
    world.barrier().unwrap();
}

#[test]
fn random_programs_on_real_processes_pass_the_history_checker() {
    if is_rank() {
        return history_rank();
    }
    for (flush, loss) in [("warp", "0"), ("3", "0.05")] {
        let out = check(&launch(
            4,
            "random_programs_on_real_processes_pass_the_history_checker",
            &[("BULKWIRE_DSM_FLUSH", flush), ("BULKWIRE_TEST_DROP", loss)],
        ));
        assert_eq!(out.matches("history checked").count(), 1, "{out}");
    }
}
