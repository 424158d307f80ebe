//! A stream through shared memory that outruns its reader. In a test
//! binary of its own: cargo runs the test binaries one after another, so
//! this job's busy processes keep no other job's from the cores (a job
//! that sleeps in barriers and counts its wake-ups lost some beside it).

mod common;

use bulkwire_comm::{Source, Tag, World};
use common::{is_rank, launch, text};

/// Byte `k` of message `tag`.
fn byte(tag: i32, k: usize) -> u8 {
    (k.wrapping_mul(31) ^ (k >> 8) ^ tag as usize) as u8
}

/// Rank 0 sends 64 messages of about 64 KiB (twice the ring's room) at
/// once, rank 1 receives each with `recv_into` from rank 0 into a buffer
/// of its own. Each comes whole and in order, every byte checked, through
/// shared memory and over UDP. Through shared memory a receive writes its
/// message into its buffer straight out of the ring and leaves those
/// behind it there for the receives that follow
/// (`shm::tests::the_messages_behind_a_receive_s_stay_in_the_ring`); how
/// many go so is printed, not asserted: the progress thread reads the
/// ring out whenever this thread is between calls, and a loaded machine
/// can keep this thread from its core there for the whole stream (64 of
/// 64 alone here; 0 of 64 once under `.ci/run`, beside other jobs).
#[test]
fn a_stream_ahead_of_its_reader_arrives_whole_in_each_receive() {
    const MESSAGES: i32 = 64;
    const LEN: usize = 64 << 10;
    if is_rank() {
        let world = World::init().unwrap();
        let shm = std::env::var("BULKWIRE_SHM").as_deref() != Ok("0");
        let message = |tag: i32| -> Vec<u8> { (0..LEN - tag as usize).map(|k| byte(tag, k)).collect() };
        let mut bufs = vec![vec![0u8; LEN]; MESSAGES as usize];
        world.barrier().unwrap();
        if world.rank() == 0 {
            let data: Vec<Vec<u8>> = (0..MESSAGES).map(message).collect();
            let sends: Vec<_> = data.iter().enumerate().map(|(t, d)| world.isend(1, t as i32, d).unwrap()).collect();
            for send in sends {
                world.wait(send).unwrap();
            }
            world.recv(Source::Rank(1), Tag::Is(MESSAGES)).unwrap();
        } else {
            // Received one after the other, checked after.
            let before = world.runtime().shm_stats().read_in_place;
            let lens: Vec<usize> = (0..MESSAGES)
                .zip(bufs.iter_mut())
                .map(|(tag, buf)| world.recv_into(Source::Rank(0), Tag::Is(tag), buf).unwrap().len)
                .collect();
            let placed = world.runtime().shm_stats().read_in_place - before;
            for (tag, (buf, len)) in (0..MESSAGES).zip(bufs.iter().zip(lens)) {
                assert_eq!(len, LEN - tag as usize);
                if let Some(k) = (0..len).find(|&k| buf[k] != byte(tag, k)) {
                    panic!("message {tag}: byte {k} differs");
                }
            }
            assert!(shm || placed == 0, "{placed} read in place over UDP");
            world.send(0, MESSAGES, &[]).unwrap();
            println!("stream ok, {placed} in place");
        }
        world.finalize().unwrap();
        return;
    }
    let test = "a_stream_ahead_of_its_reader_arrives_whole_in_each_receive";
    for env in [("BULKWIRE_SHM", "1"), ("BULKWIRE_SHM", "0")] {
        let out = launch(2, test, &[env]);
        assert!(out.status.success(), "{env:?}\n{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("stream ok"), "{env:?}\n{}", text(&out));
    }
}
