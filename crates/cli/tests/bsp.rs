//! BSPlib's Rust API in multi-process jobs started with `bulkwire run`.
//!
//! Each test is both the launcher and the program (as in job.rs): run
//! normally, it starts `bulkwire run -n P <this test binary> --exact <test>`
//! for several P, destination orders and injected loss; run as a process of
//! the job (BULKWIRE_RENDEZVOUS is set), it plays its part and prints
//! `ok pid N` when every check passed.

mod common;
use common::{is_rank, launch, text};

use std::process::{Command, Output, Stdio};

use bulkwire_bsp::{Bsp, BspError, Call, Order, Reason};

fn expect_ok(out: &Output, n: u32, what: &str) {
    let all = text(out);
    assert!(out.status.success(), "{what} n={n}:\n{all}");
    for pid in 0..n {
        assert!(all.contains(&format!("ok pid {pid}\n")), "{what} n={n}: pid {pid} did not finish\n{all}");
    }
}

/// Every process's view of the DRMA and BSMP semantics the standard fixes.
fn semantics(bsp: &mut Bsp) -> Result<(), BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let n = p as usize;
    // Superstep 0: registrations take effect at the sync.
    let all = bsp.register::<u64>(n)?;
    let value = bsp.register_vec(vec![u64::from(me) * 100; 4])?;
    let fetched = bsp.register::<u64>(n)?;
    match bsp.put(0, &[1u64], &all, 0) {
        Err(BspError { call: Call::Put, reason: Reason::NotRegistered { pending: true, .. }, .. }) => {}
        other => panic!("a put into a registration not yet in effect: {other:?}"),
    }
    assert_eq!(bsp.set_tagsize(8)?, 0);
    bsp.sync()?;

    // Superstep 1: a total exchange by put, gets that read before puts land,
    // messages for the next superstep.
    assert_eq!(bsp.tagsize(), 8);
    for to in 0..p {
        bsp.put(to, &[u64::from(me) + 1], &all, me as usize)?;
    }
    let left = (me + p - 1) % p;
    let right = (me + 1) % p;
    // Get the left neighbour's value while the left neighbour's left puts
    // over it: the get sees the old one.
    bsp.get(left, &value, 0, &fetched, me as usize, 1)?;
    bsp.put(right, &[7777u64], &value, 0)?;
    for k in 0..3u64 {
        bsp.send(right, &(u64::from(me) * 10 + k).to_le_bytes(), &vec![me as u8; k as usize * 1000])?;
    }
    assert_eq!(bsp.qsize(), (0, 0), "nothing before the sync");
    bsp.sync()?;

    let expect: Vec<u64> = (1..=u64::from(p)).collect();
    assert_eq!(bsp.area(&all), expect);
    assert_eq!(bsp.area(&fetched)[me as usize], u64::from(left) * 100, "the get read the value before the put");
    assert_eq!(bsp.area(&value)[0], 7777, "the put landed after the get");
    assert_eq!(bsp.qsize(), (3, 3000));
    let first = bsp.get_tag().expect("a message");
    assert_eq!((first.tag, first.payload.len()), (&(u64::from(left) * 10).to_le_bytes()[..], 0));
    let mut buf = [0u8; 10];
    assert_eq!(bsp.move_message(&mut buf)?, 0);
    let rest: Vec<(Vec<u8>, usize)> = bsp.messages().map(|m| (m.tag.to_vec(), m.payload.len())).collect();
    assert_eq!(rest.len(), 2);
    assert_eq!(rest[1], ((u64::from(left) * 10 + 2).to_le_bytes().to_vec(), 2000));
    match bsp.move_message(&mut buf) {
        Err(BspError { call: Call::Move, reason: Reason::EmptyQueue, .. }) => {}
        other => panic!("move on an empty queue: {other:?}"),
    }
    match bsp.put(p, &[1u64], &all, 0) {
        Err(BspError { reason: Reason::NoSuchProcess { .. }, .. }) => {}
        other => panic!("put to a process that does not exist: {other:?}"),
    }
    match bsp.send(0, b"short", b"") {
        Err(BspError { reason: Reason::TagLength { len: 5, tagsize: 8 }, .. }) => {}
        other => panic!("a tag of the wrong size: {other:?}"),
    }

    // Superstep 2: raw registrations, the most recent wins, hpput, pop.
    let mut first_area = vec![0u8; 32];
    let addr = first_area.as_mut_ptr();
    // SAFETY: both areas outlive their registrations and are not touched
    // during the syncs below.
    unsafe {
        bsp.push_reg_raw(addr, 16)?;
    }
    bsp.sync()?;
    unsafe {
        // Register the same address again, longer: it wins from the next sync.
        bsp.push_reg_raw(addr, 32)?;
    }
    let src = [me as u8 + 1; 4];
    unsafe { bsp.put_raw(right, src.as_ptr(), addr, 12, 4)? };
    bsp.sync()?;
    assert_eq!(&first_area[12..16], &[left as u8 + 1; 4]);
    // Now the 32-byte registration is in effect: offset 20 is inside.
    let late = [0u8; 4];
    unsafe { bsp.hpput_raw(right, late.as_ptr(), addr, 20, 4)? };
    let late_value = [me as u8 + 50; 4];
    // hpput reads its source at the sync: change it after the call.
    unsafe { std::ptr::copy_nonoverlapping(late_value.as_ptr(), late.as_ptr() as *mut u8, 4) };
    let mut got = [0u8; 4];
    unsafe { bsp.get_raw(left, addr, 12, got.as_mut_ptr(), 4)? };
    bsp.pop_reg_raw(addr)?;
    bsp.pop_reg_raw(addr)?;
    bsp.sync()?;
    assert_eq!(&first_area[20..24], &[left as u8 + 50; 4]);
    let lefts_left = (left + p - 1) % p;
    assert_eq!(got, [lefts_left as u8 + 1; 4], "left's area holds what its left put there");
    match unsafe { bsp.put_raw(right, src.as_ptr(), addr, 0, 1) } {
        Err(BspError { reason: Reason::NotRegistered { pending: false, .. }, .. }) => {}
        other => panic!("put after pop: {other:?}"),
    }
    bsp.unregister(value)?;
    bsp.sync()?;
    // Messages left unread are gone after the next sync, one in which
    // nothing moves too.
    bsp.send(right, &[0u8; 8], b"left unread")?;
    bsp.sync()?;
    assert_eq!(bsp.qsize(), (1, 11));
    bsp.sync()?;
    assert_eq!(bsp.qsize(), (0, 0), "messages of two supersteps ago");
    // After empty syncs only the last process talks: every process learns
    // it from the barrier, though its own part of it has not changed.
    let one = bsp.register::<u64>(1)?;
    bsp.sync()?;
    bsp.sync()?;
    if me == p - 1 {
        bsp.put(0, &[4242u64], &one, 0)?;
    }
    bsp.sync()?;
    if me == 0 {
        assert_eq!(bsp.area(&one)[0], 4242, "the put of the only process that talked");
    }
    Ok(())
}

#[test]
fn semantics_for_every_order_and_under_loss() {
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        semantics(&mut bsp).unwrap_or_else(|e| panic!("{e}"));
        let pid = bsp.pid();
        bsp.end().unwrap();
        println!("ok pid {pid}");
        return;
    }
    // On one host streams go before the barrier (eager) by default; with
    // BULKWIRE_BSP_EAGER=0 every byte keeps to the schedule.
    for n in [1, 2, 3, 4, 8] {
        for order in Order::ALL {
            for eager in ["65536", "0"] {
                let env = [("BULKWIRE_BSP_ORDER", order.name()), ("BULKWIRE_BSP_EAGER", eager)];
                let out = launch(n, "semantics_for_every_order_and_under_loss", &env);
                expect_ok(&out, n, &format!("{order}, eager up to {eager} bytes"));
            }
        }
    }
    // Loss, with and without eager streams; pacing by rate changes when the
    // data goes, not what arrives, with loss as without.
    let lossy = [("BULKWIRE_TEST_DROP", "0.05"), ("BULKWIRE_TEST_DROP_SEED", "11"), ("BULKWIRE_BSP_EAGER", "0")];
    let paced = [("BULKWIRE_BSP_RATE", "50mbit"), ("BULKWIRE_TEST_DROP", "0.05"), ("BULKWIRE_TEST_DROP_SEED", "7")];
    // The runs above, through shared memory, reduce on the board (the
    // default on one host). Over UDP, where processes outnumber cores the
    // barrier is a star by default, elsewhere a dissemination: each where
    // the other is the default.
    let star = [("BULKWIRE_BSP_BARRIER", "star"), lossy[0], lossy[1]];
    let dissemination = [("BULKWIRE_BSP_BARRIER", "dissemination"), lossy[0], lossy[1]];
    let udp = [("BULKWIRE_SHM", "0")];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let late = [udp[0], ("BULKWIRE_BSP_LAND_EARLY", "0")];
    // Through shared memory the streams that go before the barrier ride in
    // the board's posts by default; sent as messages instead:
    let messages = [("BULKWIRE_BSP_BOARD_STREAMS", "0")];
    let runs: [(&[u32], Env, &str); 9] = [
        (&[2, 8], &messages, "streams before the barrier as messages"),
        (&[2, 8], &udp, "over UDP"),
        (&[3], &late, "over UDP, landing after the transfer"),
        (&[3, 8], &lossy[..2], "5% loss"),
        (&[3, 8], &lossy, "5% loss, nothing eager"),
        (&[2, 8], &paced[..1], "paced at 50 Mbit/s"),
        (&[2, 8], &paced, "paced at 50 Mbit/s, 5% loss"),
        (&[1, 2], &star, "star barrier, 5% loss"),
        (&[3, 8], &dissemination, "dissemination barrier, 5% loss"),
    ];
    for (ns, env, what) in runs {
        for &n in ns {
            expect_ok(&launch(n, "semantics_for_every_order_and_under_loss", env), n, what);
        }
    }
    // A rate that is not one stops the job at bsp_begin, naming it; so
    // does an eager limit that is not a number.
    let bad = [
        ("BULKWIRE_BSP_RATE", "fast", "BULKWIRE_BSP_RATE", "unknown unit"),
        ("BULKWIRE_BSP_EAGER", "lots", "BULKWIRE_BSP_EAGER=lots", "not a number of bytes"),
        ("BULKWIRE_BSP_BARRIER", "ring", "BULKWIRE_BSP_BARRIER=ring", "expected board, star or dissemination"),
    ];
    for (name, value, named, why) in bad {
        let out = launch(2, "semantics_for_every_order_and_under_loss", &[(name, value)]);
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(all.contains(named) && all.contains(why), "{all}");
    }
    // So does the board where the processes do not share memory.
    let out = launch(2, "semantics_for_every_order_and_under_loss", &[("BULKWIRE_BSP_BARRIER", "board"), udp[0]]);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("BULKWIRE_BSP_BARRIER=board: the board needs every process of the job on this host"), "{all}");
}

/// Large puts and hpputs between processes of one host, which the
/// receiver reads from the sender's memory: every byte where it belongs,
/// a later small put over a large one wins, an hpput sends what its source
/// holds at the sync, into owned and raw areas, over several supersteps
/// (the sender's buffers are reused); and the same results with those
/// reads off and over UDP. A put's copy goes into the sender's stage,
/// mapped by the receiver, and so does a large get's reply: the puts grow
/// from superstep to superstep, so the stage is replaced by larger ones,
/// and what finds it full goes through the heap (a put) or the stream (a
/// reply). Returns the direct puts read and the bytes of puts and replies
/// read from a stage.
fn large_puts(bsp: &mut Bsp) -> Result<(u64, u64), BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let right = (me + 1) % p;
    let left = (me + p - 1) % p;
    const N: usize = 1 << 20;
    // Elements of the put at 0 and of the one at N, by superstep.
    const FIRST: [usize; 3] = [N / 2, N, N];
    const SECOND: [usize; 3] = [0, 5 * N / 8, 5 * N / 8];
    let pattern = |who: u32, step: u32, i: usize| (i as u32).wrapping_mul(2_654_435_761) ^ (who << 24) ^ (step << 16);
    // A get of as many elements each superstep, from the right neighbour.
    const GET: usize = 300_000;
    let owned = bsp.register::<u32>(N + SECOND[2])?;
    let served = bsp.register::<u32>(GET)?;
    let fetched = bsp.register::<u32>(GET)?;
    let mut raw = vec![0u8; 3 * N];
    // SAFETY: `raw` outlives its registration and is read only between syncs.
    unsafe { bsp.push_reg_raw(raw.as_mut_ptr(), raw.len())? };
    bsp.sync()?;
    for step in 0..3u32 {
        let (first, second) = (FIRST[step as usize], SECOND[step as usize]);
        let data: Vec<u32> = (0..N + second).map(|i| pattern(me, step, i)).collect();
        bsp.put(right, &data[..first], &owned, 0)?;
        // A small put after the large one, over part of it: it lands later.
        bsp.put(right, &[u32::MAX; 4], &owned, 1000)?;
        if second > 0 {
            bsp.put(right, &data[N..N + second], &owned, N)?;
        }
        let values: Vec<u32> = (0..GET).map(|i| pattern(me, step + 9, i)).collect();
        bsp.area_mut(&served).copy_from_slice(&values);
        bsp.get(right, &served, 0, &fetched, 0, GET)?;
        let mut source = vec![0u8; N + 7];
        // SAFETY: `source` lives until after the sync; `raw` is registered.
        unsafe { bsp.hpput_raw(right, source.as_ptr(), raw.as_ptr(), 3, N + 7)? };
        // hpput sends what the source holds at the sync.
        source.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u32 ^ me ^ step) as u8);
        bsp.sync()?;
        let got = bsp.area(&owned);
        for (i, &v) in got[..first].iter().chain(&got[N..N + second]).enumerate() {
            let i = if i < first { i } else { N + i - first };
            let expect = if (1000..1004).contains(&i) { u32::MAX } else { pattern(left, step, i) };
            assert_eq!(v, expect, "step {step}: element {i} of the puts from {left}");
        }
        for (i, &v) in bsp.area(&fetched).iter().enumerate() {
            assert_eq!(v, pattern(right, step + 9, i), "step {step}: element {i} of the get from {right}");
        }
        for (i, &b) in raw[3..3 + N + 7].iter().enumerate() {
            assert_eq!(b, (i as u32 ^ left ^ step) as u8, "step {step}: byte {i} of the hpput from {left}");
        }
        drop(source);
    }
    bsp.pop_reg_raw(raw.as_ptr())?;
    bsp.sync()?;
    Ok((bsp.direct_puts_read(), bsp.runtime().shm_stats().stage_read_bytes))
}

#[test]
fn large_puts_on_one_host_are_read_from_the_sender() {
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        let (read, staged) = large_puts(&mut bsp).unwrap_or_else(|e| panic!("{e}"));
        let pid = bsp.pid();
        bsp.end().unwrap();
        println!("direct {read} staged {staged} pid {pid}");
        println!("ok pid {pid}");
        return;
    }
    // Read directly: the puts (one, two, two) and the hpputs (one each
    // superstep); from the stage: the puts but the one that found it full
    // (the second of the middle superstep), and the last superstep's reply
    // (the stage grows to the most a superstep copied, puts and replies, by
    // the next): 2 MiB, 4 MiB, then 4 + 2.5 MiB and 1.2 MB.
    const STAGED: u64 = 4 * ((1 << 20) / 2 + 2 * (1 << 20) + 5 * (1 << 20) / 8 + 300_000);
    let runs = [
        (&[][..], 8, STAGED),
        (&[("BULKWIRE_SHM_STAGE", "0")][..], 8, 0),
        (&[("BULKWIRE_SHM_CMA", "0")][..], 0, 0),
        (&[("BULKWIRE_SHM", "0")][..], 0, 0),
    ];
    for (env, direct, staged) in runs {
        for n in [2, 3] {
            let out = launch(n, "large_puts_on_one_host_are_read_from_the_sender", env);
            expect_ok(&out, n, &format!("{env:?}"));
            let all = text(&out);
            for pid in 0..n {
                let line = format!("direct {direct} staged {staged} pid {pid}\n");
                assert!(all.contains(&line), "{env:?} n={n}: no {line:?} in\n{all}");
            }
        }
    }
    // `run --stats` shows those bytes by pair: 14.307 MB each way.
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "2", "--stats"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "large_puts_on_one_host_are_read_from_the_sender", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    expect_ok(&out, 2, "--stats");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let table = stderr.split("shared memory read where it lies").nth(1).unwrap_or_else(|| panic!("{stderr}"));
    for pair in ["1>0", "0>1"] {
        let row =
            table.lines().find(|l| l.split_whitespace().next() == Some(pair)).unwrap_or_else(|| panic!("{table}"));
        assert_eq!(row.split_whitespace().collect::<Vec<_>>()[1..], ["0.000", "14.307"], "{table}");
    }
}

/// Over UDP, the buffers the datagrams of a superstep's large streams were
/// read into are kept for the next superstep's: each process puts 16 MiB
/// to its right neighbour in four supersteps (about 260 datagrams of
/// loopback's size each time), and the last three read theirs into the
/// first one's buffers. Returns the buffers the runtime took fresh after
/// the first superstep and after the last.
fn large_streams_over_udp(bsp: &mut Bsp) -> Result<(u64, u64), BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    const N: usize = 4 << 20;
    let area = bsp.register::<u32>(N)?;
    bsp.sync()?;
    let mut first = 0;
    for step in 0..4u32 {
        let data: Vec<u32> = (0..N as u32).map(|i| i ^ (me << 24) ^ (step << 16)).collect();
        bsp.put(right, &data, &area, 0)?;
        bsp.sync()?;
        for (i, &v) in bsp.area(&area).iter().enumerate() {
            assert_eq!(v, i as u32 ^ (left << 24) ^ (step << 16), "step {step}: element {i} from {left}");
        }
        if step == 0 {
            first = bsp.runtime().receive_buffers_made();
        }
    }
    Ok((first, bsp.runtime().receive_buffers_made()))
}

#[test]
fn a_large_superstep_over_udp_reads_into_the_buffers_of_the_one_before() {
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        let (first, last) = large_streams_over_udp(&mut bsp).unwrap_or_else(|e| panic!("{e}"));
        let pid = bsp.pid();
        bsp.end().unwrap();
        println!("made {first} then {last} pid {pid}");
        println!("ok pid {pid}");
        return;
    }
    let test = "a_large_superstep_over_udp_reads_into_the_buffers_of_the_one_before";
    // Landing after the transfer, the stream is held whole until then.
    let out = launch(2, test, &[("BULKWIRE_SHM", "0"), ("BULKWIRE_BSP_LAND_EARLY", "0")]);
    expect_ok(&out, 2, "over UDP, landing after the transfer");
    for (pid, first, last) in buffers_made(&out) {
        // The first superstep's stream took about 260 buffers; when only
        // two batches' worth were kept, each later one took about 230 more.
        assert!(
            first >= 100,
            "pid {pid}: the first superstep's stream took only {first} fresh buffers:\n{}",
            text(&out)
        );
        let after = last - first;
        assert!(after <= 32, "pid {pid}: {after} fresh buffers after the first superstep:\n{}", text(&out));
    }
    // Landing as the pieces arrive, each buffer is given back as soon as
    // its piece has landed, and the runtime keeps twice as many as were
    // given back at once (`Engine::keep_receive_buffers`): the four
    // supersteps took about 110 in all (no more than one stream's pieces
    // and a batch can be out at once); with two batches' worth kept, 450.
    let out = launch(2, test, &[("BULKWIRE_SHM", "0")]);
    expect_ok(&out, 2, "over UDP");
    for (pid, _, last) in buffers_made(&out) {
        assert!(last <= 300, "pid {pid}: {last} fresh buffers for four streams of 260 pieces:\n{}", text(&out));
    }
}

/// Over UDP, the data of a large put to an area registered by address is
/// read from the socket straight into the area where its pieces come in
/// order (`Net::aim`): each process puts 8 MiB to its right neighbour at
/// an odd offset in four supersteps, with a later put over part of it,
/// an hpput, and a second large put over most of the first, each later
/// one winning; every byte of the area is checked. Returns the data
/// packets read in place.
fn puts_read_into_their_area(bsp: &mut Bsp) -> Result<u64, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    const N: usize = 8 << 20;
    const SMALL: (usize, usize) = (1_000_003, 5_000);
    let pattern = |from: u32, step: u32, salt: u32, i: usize| {
        ((i as u32).wrapping_mul(2_654_435_761) >> 13 ^ from << 5 ^ step << 3 ^ salt) as u8
    };
    let mut area = vec![0u8; N + 64];
    let dst = area.as_mut_ptr().cast_const();
    // SAFETY: the area lives until the end of the computation, and is
    // touched only between syncs.
    unsafe { bsp.push_reg_raw(dst, area.len())? };
    bsp.sync()?;
    for step in 0..4u32 {
        area.fill(0xEE);
        let big: Vec<u8> = (0..N).map(|i| pattern(me, step, 0, i)).collect();
        let small: Vec<u8> = (0..SMALL.1).map(|i| pattern(me, step, 1, i)).collect();
        let other: Vec<u8> = (0..N).map(|i| pattern(me, step, 2, i)).collect();
        // SAFETY: the sources live and stay unchanged until the sync has
        // ended; the destination is registered with room for every put.
        unsafe {
            match step {
                0 => bsp.put_raw(right, big.as_ptr(), dst, 3, N)?,
                1 => {
                    bsp.put_raw(right, big.as_ptr(), dst, 3, N)?;
                    bsp.put_raw(right, small.as_ptr(), dst, SMALL.0, SMALL.1)?;
                }
                2 => bsp.hpput_raw(right, big.as_ptr(), dst, 3, N)?,
                _ => {
                    bsp.put_raw(right, big.as_ptr(), dst, 3, N)?;
                    bsp.put_raw(right, other.as_ptr(), dst, 64, N)?;
                }
            }
        }
        bsp.sync()?;
        for (i, &v) in area.iter().enumerate() {
            let want = if step == 3 && (64..64 + N).contains(&i) {
                pattern(left, step, 2, i - 64)
            } else if step == 1 && (SMALL.0..SMALL.0 + SMALL.1).contains(&i) {
                pattern(left, step, 1, i - SMALL.0)
            } else if (3..3 + N).contains(&i) {
                pattern(left, step, 0, i - 3)
            } else {
                0xEE
            };
            assert_eq!(v, want, "process {me}, step {step}: byte {i}");
        }
    }
    bsp.pop_reg_raw(dst)?;
    bsp.sync()?;
    Ok(bsp.packet_stats().read_in_place)
}

#[test]
fn large_puts_over_udp_are_read_into_their_area() {
    if is_rank() {
        return report_count("in-place", puts_read_into_their_area);
    }
    let test = "large_puts_over_udp_are_read_into_their_area";
    let read = |out: &Output, pid: u32, what: &str| count(&text(out), "in-place", pid, what);
    // Six puts of 8 MiB into each process, about 130 datagrams of
    // loopback's size each: most read where they go.
    let out = launch(2, test, &[("BULKWIRE_SHM", "0")]);
    expect_ok(&out, 2, "over UDP");
    for pid in 0..2 {
        let n = read(&out, pid, "over UDP");
        assert!(n >= 100, "pid {pid}: {n} datagrams read in place:\n{}", text(&out));
    }
    // Datagrams of an Ethernet frame's size and of a jumbo frame's, which
    // the kernel sends and delivers in runs (UDP GSO and GRO): each run's
    // pieces read in place (seen 29,100-29,800 of about 36,000, and 4,200 of 5,700).
    for (datagram, least) in [("1472", 1_000), ("8972", 500)] {
        let out = launch(2, test, &[("BULKWIRE_SHM", "0"), ("BULKWIRE_MAX_DATAGRAM", datagram)]);
        expect_ok(&out, 2, datagram);
        for pid in 0..2 {
            let n = read(&out, pid, datagram);
            assert!(n >= least, "pid {pid}: {n} datagrams of {datagram} B read in place:\n{}", text(&out));
        }
    }
    // The same bytes with datagrams read whole, and landing after the
    // transfer (no aim: nothing read in place).
    for switch in ["BULKWIRE_DIRECT_READ", "BULKWIRE_BSP_LAND_EARLY"] {
        let out = launch(2, test, &[("BULKWIRE_SHM", "0"), (switch, "0")]);
        expect_ok(&out, 2, switch);
        for pid in 0..2 {
            assert_eq!(read(&out, pid, switch), 0, "{switch}=0, pid {pid}:\n{}", text(&out));
        }
    }
}

/// The `made FIRST then LAST pid PID` lines of a job's processes.
fn buffers_made(out: &Output) -> Vec<(u32, u64, u64)> {
    let all = text(out);
    (0..2)
        .map(|pid| {
            let line = all
                .lines()
                .filter_map(|l| l.split_once("made ").map(|(_, rest)| rest))
                .find(|rest| rest.ends_with(&format!(" pid {pid}")))
                .unwrap_or_else(|| panic!("no count from pid {pid} in\n{all}"));
            let words: Vec<&str> = line.split_whitespace().collect();
            (pid, words[0].parse().unwrap(), words[2].parse().unwrap())
        })
        .collect()
}

/// A process of a test that counts something: runs `test` and prints its
/// count after `word` ([`count`]) and that it finished.
fn report_count(word: &str, test: fn(&mut Bsp) -> Result<u64, BspError>) {
    let mut bsp = Bsp::begin().unwrap();
    let n = test(&mut bsp).unwrap_or_else(|e| panic!("{e}"));
    let pid = bsp.pid();
    bsp.end().unwrap();
    println!("{word} {n} pid {pid}");
    println!("ok pid {pid}");
}

/// The count process `pid` printed after `word` in a job's output `all`
/// ([`report_count`]).
fn count(all: &str, word: &str, pid: u32, what: &str) -> u64 {
    all.lines()
        .filter_map(|l| l.split_once(&format!("{word} ")).map(|(_, rest)| rest))
        .find_map(|rest| rest.strip_suffix(&format!(" pid {pid}")))
        .unwrap_or_else(|| panic!("{what}: no count from pid {pid} in\n{all}"))
        .parse()
        .unwrap()
}

/// Puts that land as their pieces arrive keep the standard's order: the
/// stream of process 0 (the first sender everywhere else) lands during the
/// transfer, the others' after it, each over the one before; 0's stream
/// holds a message and, after it, a put that lands with the others. Every
/// process puts into its own area too: process 0's own puts come first
/// there, so it lands nothing early. Returns the bytes landed early.
fn ordered_puts(bsp: &mut Bsp) -> Result<u64, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    const N: usize = 1 << 20;
    const HEAD: usize = 16;
    let area = bsp.register::<u32>(N)?;
    bsp.sync()?;
    let pattern = |who: u32, step: u32, i: usize| (i as u32).wrapping_mul(2_654_435_761) ^ (who << 24) ^ (step << 16);
    // Process j >= 1 puts into [j S, j S + 3 S / 2): halfway over the next.
    let s = N / (p as usize + 1);
    let region = |j: u32| j as usize * s..(j as usize * s + 3 * s / 2).min(N);
    for step in 0..3u32 {
        for to in 0..p {
            if me == 0 {
                let all: Vec<u32> = (0..N).map(|i| pattern(0, step, i)).collect();
                bsp.put(to, &all, &area, 0)?;
                bsp.send(to, &[], &step.to_le_bytes())?;
                let head: Vec<u32> = (0..HEAD).map(|i| pattern(100, step, i)).collect();
                bsp.put(to, &head, &area, 0)?;
            } else {
                let r = region(me);
                let data: Vec<u32> = r.clone().map(|i| pattern(me, step, i)).collect();
                bsp.put(to, &data, &area, r.start)?;
            }
        }
        bsp.sync()?;
        let got = bsp.area(&area);
        for (i, &v) in got.iter().enumerate() {
            let last = (1..p).rev().find(|&j| region(j).contains(&i));
            let want = match last {
                Some(j) => pattern(j, step, i),
                None if i < HEAD => pattern(100, step, i),
                None => pattern(0, step, i),
            };
            assert_eq!(v, want, "process {me}, step {step}: element {i}");
        }
        let messages: Vec<Vec<u8>> = bsp.messages().map(|m| m.payload.to_vec()).collect();
        assert_eq!(messages, [step.to_le_bytes()], "process {me}, step {step}: the messages");
    }
    Ok(bsp.bytes_landed_early())
}

#[test]
fn puts_that_land_as_they_arrive_keep_the_standard_s_order() {
    if is_rank() {
        return report_count("early", ordered_puts);
    }
    let test = "puts_that_land_as_they_arrive_keep_the_standard_s_order";
    let lossy = [("BULKWIRE_SHM", "0"), ("BULKWIRE_TEST_DROP", "0.05"), ("BULKWIRE_TEST_DROP_SEED", "5")];
    for n in [2, 3, 4] {
        for (env, what) in [
            (&[("BULKWIRE_SHM", "0")][..], "over UDP"),
            (&[("BULKWIRE_SHM", "0"), ("BULKWIRE_BSP_LAND_EARLY", "0")], "over UDP, landing after the transfer"),
            (&lossy, "over UDP, 5% loss"),
            (&[], "on one host"),
        ] {
            let out = launch(n, test, env);
            expect_ok(&out, n, what);
            let all = text(&out);
            for pid in 0..n {
                let early = count(&all, "early", pid, &format!("{what} n={n}"));
                // Over UDP 0's put of 4 MiB each superstep lands as it
                // comes; on one host it is read from 0's memory at the end.
                let early_here = pid > 0 && what.starts_with("over UDP") && !what.contains("after");
                let want = if early_here { 3 * (4 << 20) } else { 0 };
                assert_eq!(early, want, "{what} n={n}: bytes landed early by pid {pid}\n{all}");
            }
        }
    }
}

/// Puts land as they arrive beside hpputs sent from their sources and
/// gets, but never on those sources nor on the gets' targets. Process 1
/// hpputs 1 MiB to process 0 (in superstep 0 from its area `a`'s start,
/// then from its other area `b`), while process 0 puts `a`'s second half
/// and then its first half into process 1's `a`; in supersteps 2 and 3
/// process 1 also gets 16 values of process 0's `a`, into its own `a`'s
/// start, then into `b`'s end. Over UDP process 1 lands the first put as
/// it comes, and in supersteps 0 and 2 stops at the second, which would
/// land on the hpput's source or the get's target: it lands after the
/// transfer, after the get's reply. Returns the bytes landed early.
fn puts_beside_hpputs(bsp: &mut Bsp) -> Result<u64, BspError> {
    const N: usize = 1 << 20;
    const HP: usize = N / 4;
    let me = bsp.pid();
    let pattern = |who: u32, step: u32, i: usize| (i as u32).wrapping_mul(2_654_435_761) ^ (who << 24) ^ (step << 16);
    let (mut a, mut b) = (vec![0u32; N], vec![0u32; N]);
    // SAFETY: both outlive their registrations and are touched only
    // between syncs.
    unsafe {
        bsp.push_reg_raw(a.as_mut_ptr().cast(), N * 4)?;
        bsp.push_reg_raw(b.as_mut_ptr().cast(), N * 4)?;
    }
    bsp.sync()?;
    for step in 0..4u32 {
        let put: Vec<u32> = (0..N).map(|i| pattern(0, step, i)).collect();
        const GOT: usize = 16;
        if me == 1 {
            a.iter_mut().enumerate().for_each(|(i, v)| *v = pattern(1, step, i));
            b.iter_mut().enumerate().for_each(|(i, v)| *v = pattern(2, step, i));
            let source = if step == 0 { a.as_ptr() } else { b.as_ptr() };
            // SAFETY: the sources live and stay unchanged here until the
            // sync ends; `b` is registered.
            unsafe { bsp.hpput_raw(0, source.cast(), b.as_ptr().cast(), 0, HP * 4)? };
            let target = match step {
                2 => Some(a.as_mut_ptr()),
                3 => Some(b[N - GOT..].as_mut_ptr()),
                _ => None,
            };
            if let Some(target) = target {
                // SAFETY: the target lives until the sync ends; `a` is
                // registered at process 0.
                unsafe { bsp.get_raw(0, a.as_ptr().cast(), 0, target.cast(), GOT * 4)? };
            }
        } else {
            a.iter_mut().enumerate().for_each(|(i, v)| *v = pattern(3, step, i));
            let half = N / 2;
            // SAFETY: `put` is read now; `a` is registered.
            unsafe {
                bsp.put_raw(1, put[half..].as_ptr().cast(), a.as_ptr().cast(), half * 4, half * 4)?;
                bsp.put_raw(1, put[..half].as_ptr().cast(), a.as_ptr().cast(), 0, half * 4)?;
            }
        }
        bsp.sync()?;
        if me == 1 {
            assert!(a == put, "process 1, step {step}: the puts landed where they go, over the get's reply");
            if step == 3 {
                let got: Vec<u32> = (0..GOT).map(|i| pattern(3, step, i)).collect();
                assert_eq!(b[N - GOT..], got, "process 1, step {step}: the get's reply");
            }
        } else {
            let from = if step == 0 { 1 } else { 2 };
            for (i, &v) in b[..HP].iter().enumerate() {
                // A packet resent after the put landed carries its value.
                let landed = from == 1 && v == pattern(0, step, i);
                assert!(v == pattern(from, step, i) || landed, "process 0, step {step}: element {i} of the hpput");
            }
        }
    }
    Ok(bsp.bytes_landed_early())
}

#[test]
fn puts_land_as_they_arrive_beside_hpputs_and_gets_but_not_on_them() {
    if is_rank() {
        return report_count("early", puts_beside_hpputs);
    }
    let test = "puts_land_as_they_arrive_beside_hpputs_and_gets_but_not_on_them";
    let lossy = [("BULKWIRE_SHM", "0"), ("BULKWIRE_TEST_DROP", "0.05"), ("BULKWIRE_TEST_DROP_SEED", "3")];
    for (env, what) in [
        (&[("BULKWIRE_SHM", "0")][..], "over UDP"),
        (&[("BULKWIRE_SHM", "0"), ("BULKWIRE_BSP_LAND_EARLY", "0")], "over UDP, landing after the transfer"),
        (&lossy, "over UDP, 5% loss"),
        (&[], "on one host"),
    ] {
        let out = launch(2, test, env);
        expect_ok(&out, 2, what);
        let all = text(&out);
        let early = |pid: u32| count(&all, "early", pid, what);
        // Over UDP, each superstep: process 0 lands the hpput's 1 MiB;
        // process 1 the first put's 2 MiB, and in supersteps 1 and 3 the
        // second's too. On one host puts and hpputs are read from their
        // senders at the end.
        let udp = what.starts_with("over UDP") && !what.contains("after");
        let want = if udp { [4 << 20, 2 * (2 << 20) + 2 * (4 << 20)] } else { [0, 0] };
        assert_eq!([early(0), early(1)], want, "{what}: bytes landed early by pids 0 and 1\n{all}");
    }
}

/// Puts between processes of one host from 1 KiB up, which go through the
/// sender's arena in shared memory: every byte where it belongs over many
/// supersteps (each one's values differ, so a half of the arena written
/// again before its readers landed it shows), in program order with the
/// puts in the stream (a small put after an arena one over part of it
/// wins, and an arena put after a small one), an hpput sends what its
/// source holds at the sync, a get's reply the values at the end of the
/// computation, a message (read in the next superstep where it lies in
/// its sender's arena) what was sent, and puts that find the arena full go
/// in the stream. Returns how many puts, replies and messages were read
/// from an arena.
fn arena_puts(bsp: &mut Bsp, steps: u32) -> Result<u64, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    const N: usize = 4096;
    const HP: usize = 1500;
    const GET: usize = 512;
    const MSG: usize = 2000;
    let pattern = |who: u32, step: u32, i: usize| (i as u32).wrapping_mul(2_654_435_761) ^ (who << 24) ^ (step << 12);
    let area = bsp.register::<u32>(N * p as usize)?;
    let asked = bsp.register::<u32>(GET)?;
    let gets = bsp.register::<u32>(GET * p as usize)?;
    let mut raw = vec![0u8; HP * p as usize];
    // SAFETY: `raw` outlives its registration and is read only between syncs.
    unsafe { bsp.push_reg_raw(raw.as_mut_ptr(), raw.len())? };
    bsp.sync()?;
    for step in 0..steps {
        let mut sources = Vec::new();
        let values: Vec<u32> = (0..GET).map(|i| pattern(me, step + 7, i)).collect();
        bsp.area_mut(&asked).copy_from_slice(&values);
        // Last superstep's messages, one from every process, in order of
        // their senders.
        let message = |from: u32, step: u32| -> Vec<u8> { (0..MSG).map(|i| (i as u32 ^ from ^ step) as u8).collect() };
        if step > 0 {
            assert_eq!(bsp.qsize(), (p as usize, MSG * p as usize), "step {step}");
            let got: Vec<Vec<u8>> = bsp.messages().map(|m| m.payload.to_vec()).collect();
            let want: Vec<Vec<u8>> = (0..p).map(|from| message(from, step - 1)).collect();
            assert!(got == want, "step {step}: the messages of the superstep before");
        }
        for q in 0..p {
            bsp.send(q, &[], &message(me, step))?;
            bsp.get(q, &asked, 0, &gets, q as usize * GET, GET)?;
            let at = me as usize * N;
            let data: Vec<u32> = (0..N).map(|i| pattern(me, step, i)).collect();
            bsp.put(q, &data, &area, at)?;
            bsp.put(q, &[u32::MAX ^ step; 4], &area, at + 100)?;
            bsp.put(q, &[7; 4], &area, at + 200)?;
            let over: Vec<u32> = (0..256).map(|i| pattern(me, step + 1, i)).collect();
            bsp.put(q, &over, &area, at + 200)?;
            bsp.put(q, &data[..150], &area, at + 1000)?;
            let mut source = vec![0u8; HP];
            // SAFETY: `source` lives until after the sync; `raw` is registered.
            unsafe { bsp.hpput_raw(q, source.as_ptr(), raw.as_ptr(), me as usize * HP, HP)? };
            // hpput sends what the source holds at the sync.
            source.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u32 ^ me ^ step) as u8);
            sources.push(source);
        }
        bsp.sync()?;
        drop(sources);
        let got = bsp.area(&area);
        for from in 0..p {
            for (i, &v) in got[from as usize * N..][..N].iter().enumerate() {
                let expect = match i {
                    100..104 => u32::MAX ^ step,
                    200..456 => pattern(from, step + 1, i - 200),
                    1000..1150 => pattern(from, step, i - 1000),
                    _ => pattern(from, step, i),
                };
                assert_eq!(v, expect, "step {step}: element {i} of the puts from {from} to {me}");
            }
            for (i, &b) in raw[from as usize * HP..][..HP].iter().enumerate() {
                assert_eq!(b, (i as u32 ^ from ^ step) as u8, "step {step}: byte {i} of the hpput from {from}");
            }
            for (i, &v) in bsp.area(&gets)[from as usize * GET..][..GET].iter().enumerate() {
                assert_eq!(v, pattern(from, step + 7, i), "step {step}: element {i} of the get from {from}");
            }
        }
    }
    bsp.pop_reg_raw(raw.as_ptr())?;
    bsp.sync()?;
    Ok(bsp.arena_reads())
}

#[test]
fn puts_on_one_host_go_through_the_sender_s_arena() {
    const STEPS: u32 = 300;
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        let read = arena_puts(&mut bsp, STEPS).unwrap_or_else(|e| panic!("{e}"));
        let pid = bsp.pid();
        bsp.end().unwrap();
        println!("arena {read} pid {pid}");
        println!("ok pid {pid}");
        return;
    }
    let test = "puts_on_one_host_go_through_the_sender_s_arena";
    let dir = std::env::temp_dir().join(format!("bulkwire-arena-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("arena");
    let prefix = prefix.to_str().unwrap();
    // Each superstep, from every other process: the 16 KiB put, the 1 KiB
    // one, the hpput, the get's reply and the message; a quarter of the
    // default arena holds them.
    for (env, arena) in [
        (&[][..], Some(true)),
        (&[("BULKWIRE_SHM_ARENA", "65536")][..], None),
        (&[("BULKWIRE_SHM_ARENA", "0")][..], Some(false)),
        (&[("BULKWIRE_SHM", "0")][..], Some(false)),
    ] {
        for n in [2, 3] {
            let profiled: Vec<(&str, &str)> = env.iter().copied().chain([("BULKWIRE_PROFILE", prefix)]).collect();
            let out = launch(n, test, &profiled);
            expect_ok(&out, n, &format!("{env:?}"));
            // The profile counts every byte put, got or sent as the
            // superstep's h-relation, wherever it travelled: 23,588 bytes to
            // each other process, and the records' headers.
            for pid in 0..n {
                let trace = std::fs::read_to_string(format!("{prefix}.{pid}")).unwrap();
                let step: serde_json::Value = serde_json::from_str(trace.lines().nth(5).unwrap()).unwrap();
                let (h_out, h_in) = (step["h_out"].as_u64().unwrap(), step["h_in"].as_u64().unwrap());
                let data = 23_588 * u64::from(n - 1);
                for h in [h_out, h_in] {
                    assert!((data..data + 200 * u64::from(n)).contains(&h), "{env:?} n={n} pid {pid}: {step}");
                }
            }
            let all = text(&out);
            let read: Vec<u64> = (0..n)
                .map(|pid| {
                    all.lines()
                        .find_map(|l| l.strip_suffix(&format!(" pid {pid}"))?.rsplit_once("arena ")?.1.parse().ok())
                        .unwrap_or_else(|| panic!("{env:?} n={n}: no count from {pid}\n{all}"))
                })
                .collect();
            let every = 5 * u64::from(n - 1) * u64::from(STEPS);
            match arena {
                Some(true) => assert!(read.iter().all(|&r| r == every), "{env:?} n={n}: {read:?}"),
                Some(false) => assert!(read.iter().all(|&r| r == 0), "{env:?} n={n}: {read:?}"),
                // A 32 KiB half takes some of a superstep's puts to two
                // processes, not all.
                None => assert!(
                    read.iter().all(|&r| r > 0) && (n == 2 || read.iter().sum::<u64>() < every * u64::from(n)),
                    "{env:?} n={n}: {read:?}"
                ),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Arena puts of a computation's last superstep land before `end`
/// returns, and computations one after another on the same runtime start
/// each from the first half of the arena: a message sent in the next
/// one's first superstep (it needs no registration) does not overwrite
/// them while another process still lands them.
#[test]
fn the_last_superstep_s_arena_puts_land_before_end_returns() {
    const N: usize = 4096;
    const COMPUTATIONS: u32 = 20;
    if is_rank() {
        let world: &'static bulkwire_comm::World = Box::leak(Box::new(bulkwire_comm::World::init().unwrap()));
        let mut raw = vec![0u32; N];
        for c in 0..COMPUTATIONS {
            let mut bsp = Bsp::begin_on(world.runtime()).unwrap();
            let (me, p) = (bsp.pid(), bsp.nprocs());
            let (right, left) = ((me + 1) % p, (me + p - 1) % p);
            let value = |who: u32, i: usize| (i as u32) ^ (who << 24) ^ (c << 16);
            // Straight into the first half of the arena.
            bsp.send(right, &[], &vec![c as u8; 4 * N]).unwrap();
            // SAFETY: `raw` outlives the computation and is read only after it.
            unsafe { bsp.push_reg_raw(raw.as_mut_ptr().cast(), N * 4).unwrap() };
            // As many syncs before the last as the computation's number: it
            // ends in either half of the arena.
            for k in 0..=c % 2 {
                bsp.sync().unwrap();
                // The first superstep's message, after its sync only.
                let want = if k == 0 { (1, 4 * N) } else { (0, 0) };
                assert_eq!(bsp.qsize(), want, "computation {c}, sync {k}");
                bsp.messages().for_each(|m| assert!(m.payload.iter().all(|&b| b == c as u8), "computation {c}"));
            }
            let data: Vec<u32> = (0..N).map(|i| value(me, i)).collect();
            // SAFETY: `data` holds N u32; `raw` is registered everywhere.
            unsafe { bsp.put_raw(right, data.as_ptr().cast(), raw.as_ptr().cast(), 0, N * 4).unwrap() };
            bsp.end().unwrap();
            for (i, &v) in raw.iter().enumerate() {
                assert_eq!(v, value(left, i), "computation {c}: element {i} from {left}");
            }
        }
        world.runtime().finish().unwrap();
        println!("ok pid {}", world.rank());
        return;
    }
    for env in [&[][..], &[("BULKWIRE_SHM", "0")][..]] {
        let out = launch(2, "the_last_superstep_s_arena_puts_land_before_end_returns", env);
        expect_ok(&out, 2, &format!("{env:?}"));
    }
}

/// Misuse that only the sync can see: each scenario must end the job with
/// a message naming the process, the call and the reason, never hang.
fn misuse(mut bsp: Bsp, scenario: &str) -> Result<(), BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let area = bsp.register::<u8>(8)?;
    bsp.sync()?;
    match scenario {
        "end-while-others-sync" if me == 0 => return bsp.end(),
        "end-while-others-sync" => {}
        "registrations-differ" if me == 1 => {
            bsp.register::<u8>(4)?;
        }
        "tagsizes-differ" => {
            bsp.set_tagsize(if me == 1 { 4 } else { 8 })?;
        }
        "put-out-of-bounds" => bsp.put((me + 1) % p, &[1u8; 4], &area, 6)?,
        // Large: read from the sender's memory on one host, checked alike.
        "large-put-out-of-bounds" => bsp.put((me + 1) % p, &vec![1u8; 1 << 20], &area, 0)?,
        "left-without-end" if me == 1 => {
            drop(bsp);
            std::thread::sleep(std::time::Duration::from_secs(30));
            return Ok(());
        }
        _ => {}
    }
    bsp.sync()?;
    bsp.end()
}

#[test]
fn misuse_ends_the_job_with_a_clear_error() {
    if is_rank() {
        let scenario = std::env::var("BSP_SCENARIO").unwrap();
        let bsp = Bsp::begin().unwrap();
        let pid = bsp.pid();
        if let Err(e) = misuse(bsp, &scenario) {
            println!("error pid {pid}: {e}");
            std::process::exit(1);
        }
        println!("ok pid {pid}");
        return;
    }
    let cases = [
        ("end-while-others-sync", "process 0 called bsp_end while process 1 called bsp_sync"),
        ("registrations-differ", "process 1 made 1 bsp_push_reg and 0 bsp_pop_reg in superstep 1"),
        ("tagsizes-differ", "tag sizes differ between processes: process 1 asks for 4 bytes, process"),
        ("put-out-of-bounds", "of 4 bytes at offset 6 lies outside the 8 bytes"),
        ("large-put-out-of-bounds", "of 1048576 bytes at offset 0 lies outside the 8 bytes"),
        ("left-without-end", "process 1: left without calling bsp_end"),
    ];
    for (scenario, message) in cases {
        for n in [2, 4] {
            let start = std::time::Instant::now();
            let out = launch(n, "misuse_ends_the_job_with_a_clear_error", &[("BSP_SCENARIO", scenario)]);
            let all = text(&out);
            assert!(!out.status.success(), "{scenario} n={n} succeeded:\n{all}");
            assert!(all.contains(message), "{scenario} n={n}: no {message:?} in\n{all}");
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{scenario} n={n} took {:?}",
                start.elapsed()
            );
        }
    }
}

/// Builds the bsp examples (they are not built for this test by default)
/// and returns the folder they are in.
fn examples() -> std::path::PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "bulkwire-bsp", "--examples"])
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the bsp examples failed");
    // This test binary is in target/<profile>/deps; examples are beside deps.
    let exe = std::env::current_exe().expect("test binary");
    exe.parent().and_then(|deps| deps.parent()).expect("target folder").join("examples")
}

#[test]
fn examples_check_their_results_for_every_order_and_under_loss() {
    if is_rank() {
        return;
    }
    let dir = examples();
    let runs: [(&str, &[&str], &str); 4] = [
        ("inner_product", &["100000"], "(correct)"),
        ("probe", &["65536", "3"], "(empty sync)"),
        ("sample_sort", &["20000"], "sorted"),
        ("lu", &["48"], "(correct)"),
    ];
    let lossy = [("BULKWIRE_TEST_DROP", "0.03"), ("BULKWIRE_TEST_DROP_SEED", "5")];
    for (name, args, marker) in runs {
        let mut jobs: Vec<(u32, Vec<(&str, &str)>)> = Vec::new();
        for n in [1, 2, 3, 4, 8] {
            for order in Order::ALL {
                jobs.push((n, vec![("BULKWIRE_BSP_ORDER", order.name())]));
            }
            jobs.push((n, vec![("BULKWIRE_BSP_EAGER", "0")]));
        }
        jobs.push((4, lossy.to_vec()));
        jobs.push((8, lossy.to_vec()));
        jobs.push((4, vec![("BULKWIRE_BSP_RATE", "100mbit")]));
        for (n, env) in jobs {
            let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
                .arg("run")
                .arg("-n")
                .arg(n.to_string())
                .arg(dir.join(name))
                .args(args)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .output()
                .expect("run bulkwire");
            let all = text(&out);
            assert!(out.status.success() && all.contains(marker), "{name} n={n} {env:?}:\n{all}");
        }
    }
}

/// After two supersteps of total exchanges sent before the barrier the
/// barrier takes one round; a program that alternates exchanges with empty
/// syncs keeps the usual shape. Read from each process's profile.
#[test]
fn the_barrier_takes_one_round_in_a_run_of_total_exchanges() {
    // x: every process puts to every other; e: an empty sync.
    const PATTERN: &str = "xxxxexexe";
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let area = bsp.register::<u8>(p as usize).unwrap();
        bsp.sync().unwrap();
        for step in PATTERN.chars() {
            if step == 'x' {
                for q in (0..p).filter(|&q| q != me) {
                    bsp.put(q, &[me as u8], &area, me as usize).unwrap();
                }
            }
            bsp.sync().unwrap();
        }
        bsp.end().unwrap();
        println!("ok pid {me}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("bulkwire-rounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("rounds");
    // A dissemination of fan-out 1 takes two rounds for 4 processes, and
    // a star two steps (to process 0 and back), unless the barrier takes
    // one round.
    for barrier in [("BULKWIRE_BSP_FANOUT", "1"), ("BULKWIRE_BSP_BARRIER", "star")] {
        let env = [barrier, ("BULKWIRE_PROFILE", prefix.to_str().unwrap())];
        let out = launch(4, "the_barrier_takes_one_round_in_a_run_of_total_exchanges", &env);
        expect_ok(&out, 4, "rounds");
        // The registration's sync, then the pattern, then bsp_end.
        let want = [2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2];
        for pid in 0..4 {
            let trace = std::fs::read_to_string(dir.join(format!("rounds.{pid}"))).unwrap();
            let rounds: Vec<u64> = trace
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["barrier_rounds"].as_u64().unwrap())
                .collect();
            assert_eq!(rounds, want, "process {pid}, {barrier:?}: {trace}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On one host the barrier's reductions meet on the board in shared
/// memory, not in messages: a run of empty syncs sends no message past
/// `bsp_begin`'s, where the star sends one each way per process and sync
/// (`bulkwire run --stats` counts what went through shared memory).
#[test]
fn on_one_host_the_barrier_sends_no_message() {
    const SYNCS: u64 = 100;
    let test = "on_one_host_the_barrier_sends_no_message";
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        for _ in 0..SYNCS {
            bsp.sync().unwrap();
        }
        let me = bsp.pid();
        bsp.end().unwrap();
        println!("ok pid {me}");
        return;
    }
    for (barrier, fewest, most) in [("board", 0, 3), ("star", 3 * SYNCS, u64::MAX)] {
        let exe = std::env::current_exe().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
            .env("BULKWIRE_BSP_BARRIER", barrier)
            .args(["run", "-n", "4", "--stats"])
            .arg(exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        expect_ok(&out, 4, barrier);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The table's rows, "from>to messages MB ...", up to its end.
        let table = stderr.split("shared memory (peers on the rank's host)").nth(1).expect("a table of shared memory");
        let messages: u64 = table
            .lines()
            .skip(2)
            .map_while(|l| {
                let mut words = l.split_whitespace();
                let pair = words.next().filter(|w| w.contains('>'))?;
                Some((pair.to_owned(), words.next()?.parse::<u64>().ok()?))
            })
            .map(|(_, n)| n)
            .sum();
        assert!((fewest..=most).contains(&messages), "{barrier}: {messages} messages\n{stderr}");
    }
}

#[test]
fn a_profiled_job_is_summarised_and_plotted() {
    if is_rank() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("bulkwire-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("lu");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .args(["run", "-n", "3"])
        .arg(examples().join("lu"))
        .arg("24")
        .env("BULKWIRE_PROFILE", &prefix)
        .stdin(Stdio::null())
        .output()
        .expect("run bulkwire");
    assert!(out.status.success(), "{}", text(&out));
    let png = dir.join("lu.png");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire"))
        .arg("profile")
        .arg(&prefix)
        .args(["--json", "--plot"])
        .arg(&png)
        .output()
        .expect("run bulkwire profile");
    assert!(out.status.success(), "{}", text(&out));
    let steps: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    // LU of n rows takes about one superstep per row.
    assert!(steps.len() >= 24, "{steps:?}");
    assert!(steps.iter().all(|s| s["bench"] == "profile" && s["procs"] == 3), "{steps:?}");
    assert!(steps.iter().any(|s| s["h_out_max_bytes"].as_u64().unwrap() > 0), "{steps:?}");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    // A damaged trace is named, with its line.
    std::fs::write(dir.join("lu.1"), "{\"pid\": 1, \"superstep\": }\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bulkwire")).arg("profile").arg(&prefix).output().unwrap();
    assert!(!out.status.success() && text(&out).contains("lu.1:1: not a superstep record"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A total exchange of 1 KiB puts (through the arenas) and a small put
/// each (in the streams), for `steps` supersteps, every byte checked.
/// Returns the messages this process sent through shared memory in them.
fn small_exchange(bsp: &mut Bsp, steps: u32) -> Result<u64, BspError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    const N: usize = 256;
    let value = |from: u32, step: u32, i: usize| (i as u32) ^ (from << 20) ^ (step << 8);
    let area = bsp.register::<u32>((N + 1) * p as usize)?;
    bsp.sync()?;
    let before = bsp.runtime().shm_stats().messages_sent;
    for step in 0..steps {
        let data: Vec<u32> = (0..N).map(|i| value(me, step, i)).collect();
        for q in 0..p {
            bsp.put(q, &data, &area, me as usize * N)?;
            bsp.put(q, &[!step], &area, p as usize * N + me as usize)?;
        }
        bsp.sync()?;
        let got = bsp.area(&area);
        for from in 0..p {
            for (i, &v) in got[from as usize * N..][..N].iter().enumerate() {
                assert_eq!(v, value(from, step, i), "step {step}: element {i} from {from} at {me}");
            }
            assert_eq!(got[p as usize * N + from as usize], !step, "step {step}: the small put from {from} at {me}");
        }
    }
    Ok(bsp.runtime().shm_stats().messages_sent - before)
}

#[test]
fn streams_before_a_barrier_on_the_board_ride_in_its_posts() {
    const STEPS: u32 = 200;
    if is_rank() {
        let mut bsp = Bsp::begin().unwrap();
        let sent = small_exchange(&mut bsp, STEPS).unwrap_or_else(|e| panic!("{e}"));
        let pid = bsp.pid();
        bsp.end().unwrap();
        println!("sent {sent} pid {pid}");
        println!("ok pid {pid}");
        return;
    }
    let test = "streams_before_a_barrier_on_the_board_ride_in_its_posts";
    for n in [2, 3, 8] {
        for (env, on_board) in [(&[][..], true), (&[("BULKWIRE_BSP_BOARD_STREAMS", "0")][..], false)] {
            let out = launch(n, test, env);
            expect_ok(&out, n, &format!("{env:?}"));
            let all = text(&out);
            for pid in 0..n {
                let sent: u64 = all
                    .lines()
                    .find_map(|l| l.strip_suffix(&format!(" pid {pid}"))?.rsplit_once("sent ")?.1.parse().ok())
                    .unwrap_or_else(|| panic!("n={n} {env:?}: no count from {pid}\n{all}"));
                // On the board no stream goes as a message; else one to
                // every other process each superstep.
                match on_board {
                    true => assert_eq!(sent, 0, "n={n} pid {pid}\n{all}"),
                    false => assert!(sent >= u64::from(STEPS * (n - 1)), "n={n} pid {pid}: {sent}\n{all}"),
                }
            }
        }
    }
}
