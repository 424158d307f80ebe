//! `bulkwire bench endpoint`: the protocol's own work per message and per
//! datagram, two endpoints in this process joined by nothing but memory
//! (no sockets, no system calls, no other process): the packet path's cost
//! apart from the kernel's and the runtime's. The MAC covers whole
//! datagrams, as between hosts.
//!
//! Two loops, each timed in rounds, the median round reported:
//!
//! - `stream`: windows of messages of one size from one endpoint to the
//!   other, as `bench bw` sends them (a copy queued below 256 KiB, lent
//!   memory from there, as the runtime's blocking send does), every
//!   datagram made (header, MAC, its payload shared where it lies), copied
//!   whole as the kernel would, checked, reassembled and delivered, and
//!   the acknowledgements the other way.
//! - `hop`: one message there and one back, the next sent once the last has
//!   come, as `bench pingpong` does: the user-space work of a hop, without
//!   the system calls and the wait.
//!
//! Beside them in the same run, the floors of the same datagrams: their
//! MAC made and checked (two tags a datagram) and one copy of their bytes.
//! What the endpoint spends above those two is the protocol's share.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use bulkwire_proto::{Endpoint, Event, LentRange, Time};
// From this size a blocking send lends the message, not a copy of it.
use bulkwire_runtime::LEND_FROM;
use bulkwire_wire::{JobKey, HEADER_LEN};
use serde::{Deserialize, Serialize};

use crate::rows::{Report, Row};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Message sizes, bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [8, 1024, 65536, 1048576])]
    pub sizes: Vec<usize>,
    /// The largest datagram, bytes (1472: Ethernet's frame of 1,500 B, as
    /// between hosts; 65000: loopback's).
    #[arg(long, default_value_t = 1472)]
    pub datagram: usize,
    /// Rounds per size and loop; the loops and references in turns within
    /// a round, the median round reported.
    #[arg(long, default_value_t = 9)]
    pub rounds: u32,
    /// Message bytes a stream moves in a round (at least one window); a
    /// round has a hop per KiB of it (up to 20,000), or, for messages over
    /// 64 KiB, as many hops as it has messages.
    #[arg(long, default_value_t = 16 << 20)]
    pub bytes: usize,
    /// Run this loop alone (to profile it); the references go with the
    /// stream.
    #[arg(long, value_enum)]
    pub only: Option<Loop>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Loop {
    Stream,
    Hop,
}

/// Hops in one round at most.
const ROUND_HOPS: usize = 20_000;
/// Messages in flight, as `bench bw`'s default window.
const WINDOW: usize = 64;

/// The two endpoints and what moves between them.
struct Pair {
    ends: [Endpoint; 2],
    /// Where each datagram is made.
    buf: Vec<u8>,
    /// Each datagram whole, as the kernel would carry it.
    wire: Vec<u8>,
    start: Instant,
    /// Datagrams moved from each end, and their bytes.
    datagrams: [u64; 2],
    wire_bytes: [u64; 2],
}

impl Pair {
    fn new(datagram: usize) -> Result<Pair, String> {
        let key = JobKey::new(std::array::from_fn(|i| (i * 7 + 3) as u8));
        // The settings the runtime gives a job's endpoint between hosts,
        // its sockets holding what the runtime asks of the kernel.
        let socket_buffer = bulkwire_runtime::SocketOptions::default().buffer_bytes;
        let end = |rank| {
            let c = bulkwire_runtime::endpoint_config(0x5eed, key.clone(), rank, 2, datagram, socket_buffer, false);
            Endpoint::new(c).map_err(|e| format!("endpoint: {e}"))
        };
        Ok(Pair {
            ends: [end(0)?, end(1)?],
            buf: vec![0; datagram],
            wire: Vec::with_capacity(datagram),
            start: Instant::now(),
            datagrams: [0; 2],
            wire_bytes: [0; 2],
        })
    }

    fn now(&self) -> Time {
        Time::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    /// Moves every datagram `from` has for the other, and fires its timers
    /// that are due; how many it moved.
    fn move_from(&mut self, from: usize) -> usize {
        let now = self.now();
        let [a, b] = &mut self.ends;
        let (src, dst) = if from == 0 { (a, b) } else { (b, a) };
        if src.poll_timeout().is_some_and(|t| t <= now) {
            src.handle_timeout(now);
        }
        let mut moved = 0;
        while let Some((t, shared)) = src.poll_transmit_shared(now, &mut self.buf) {
            self.wire.clear();
            match &shared {
                Some(payload) => {
                    self.wire.extend_from_slice(&self.buf[..HEADER_LEN]);
                    for part in payload.parts() {
                        self.wire.extend_from_slice(part);
                    }
                    self.wire.extend_from_slice(&self.buf[HEADER_LEN..t.len]);
                }
                None => self.wire.extend_from_slice(&self.buf[..t.len]),
            }
            drop(shared);
            dst.handle_datagram(now, &self.wire);
            self.datagrams[from] += 1;
            self.wire_bytes[from] += self.wire.len() as u64;
            moved += 1;
        }
        moved
    }

    /// Both ways until neither has anything to send.
    fn settle(&mut self) {
        while self.move_from(0) + self.move_from(1) > 0 {}
    }

    /// How many messages `to` has received, taken off its events, each
    /// checked to be `sent` by its length and its first and last bytes (the
    /// protocol's tests check every byte; here a full compare would weigh
    /// on what is timed).
    fn take_messages(&mut self, to: usize, sent: &[u8]) -> Result<usize, String> {
        let mut messages = 0;
        while let Some(event) = self.ends[to].poll_event() {
            match event {
                Event::Message { data, start, .. } => {
                    let got = &data[start..];
                    if got.len() != sent.len() || got.first() != sent.first() || got.last() != sent.last() {
                        return Err(format!("a message of {} B arrived as {} B, or altered", sent.len(), got.len()));
                    }
                    messages += 1;
                }
                Event::ProtocolViolation { reason, .. } => return Err(format!("protocol violation: {reason}")),
                Event::ModeChanged { .. } => {}
                other => return Err(format!("an event this loop does not ask for: {other:?}")),
            }
        }
        Ok(messages)
    }

    /// Queues `message` from 0 to 1, lent from [`LEND_FROM`] (as comm's
    /// blocking send lends it).
    fn send(&mut self, message: &Arc<Vec<u8>>) -> Result<(), String> {
        let sent = match message.len() >= LEND_FROM {
            true => {
                let body = Arc::new(LentRange { whole: message.clone(), range: 0..message.len() });
                self.ends[0].send_lent(1, 0, &[], body, &[])
            }
            false => self.ends[0].send(1, 0, message),
        };
        sent.map_err(|e| format!("send: {e}"))
    }

    /// `windows` windows of [`WINDOW`] messages of `message` from 0 to 1,
    /// every byte delivered.
    fn stream(&mut self, message: &Arc<Vec<u8>>, windows: usize) -> Result<(), String> {
        for _ in 0..windows {
            let (mut queued, mut got) = (0, 0);
            // Queue what the send buffer takes; move; repeat.
            while got < WINDOW {
                while queued < WINDOW && self.ends[0].can_send(1, 0, message.len()) {
                    self.send(message)?;
                    queued += 1;
                }
                let moved = self.move_from(0) + self.move_from(1);
                got += self.take_messages(1, message)?;
                if moved == 0 && got < WINDOW && !self.ends[0].can_send(1, 0, message.len()) {
                    // Waiting on a timer (an acknowledgement delayed): let
                    // time pass as a real wait would.
                    std::thread::yield_now();
                }
            }
            if got != WINDOW {
                return Err(format!("the stream delivered {got} messages of {WINDOW}"));
            }
        }
        self.settle();
        Ok(())
    }

    /// `hops` messages there and back, each sent once the last has come.
    fn hops(&mut self, message: &[u8], hops: usize) -> Result<(), String> {
        for i in 0..hops {
            let (from, to) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            self.ends[from].send(to as u32, 0, message).map_err(|e| format!("send: {e}"))?;
            let mut got = 0;
            while got == 0 {
                if self.move_from(from) + self.move_from(to) == 0 {
                    std::thread::yield_now();
                }
                got = self.take_messages(to, message)?;
            }
            if got != 1 {
                return Err(format!("a hop delivered {got} messages"));
            }
        }
        self.settle();
        Ok(())
    }
}

/// What one round of each loop measured: datagrams and their bytes are
/// the data's (from 0) in a stream, both ways in hops.
struct Round {
    seconds: f64,
    messages: usize,
    datagrams: u64,
    wire_bytes: u64,
    /// Datagrams the other way (a stream's acknowledgements).
    back: u64,
}

pub(crate) fn measure(args: &Args) -> Result<Report, String> {
    let mut rows = Vec::new();
    let key = JobKey::new([9; 32]);
    for &size in &args.sizes {
        if size > 16 << 20 {
            return Err(format!("a message of {size} B is larger than the endpoint's 16 MiB"));
        }
        let message: Arc<Vec<u8>> = Arc::new((0..size).map(|i| (i * 131 + 7) as u8).collect());
        let windows = (args.bytes / (WINDOW * size.max(1))).max(1);
        let hops = match size {
            s if s <= 64 << 10 => (args.bytes >> 10).clamp(2, ROUND_HOPS),
            s => (args.bytes / s).max(2),
        };
        let mut pair = Pair::new(args.datagram)?;
        // One round to warm up (buffers, pools, caches), not counted.
        pair.stream(&message, 1)?;
        pair.hops(&message, 2.min(hops))?;
        let mut rounds: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        let mut floors: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..args.rounds.max(1) {
            for (which, rounds) in rounds.iter_mut().enumerate() {
                let this = if which == 0 { Loop::Stream } else { Loop::Hop };
                if args.only.is_some_and(|only| only != this) {
                    continue;
                }
                let (d0, b0) = (pair.datagrams, pair.wire_bytes);
                let t = Instant::now();
                let messages = match which {
                    0 => {
                        pair.stream(&message, windows)?;
                        windows * WINDOW
                    }
                    _ => {
                        pair.hops(&message, hops)?;
                        hops
                    }
                };
                let seconds = t.elapsed().as_secs_f64();
                let moved = |i: usize| (pair.datagrams[i] - d0[i], pair.wire_bytes[i] - b0[i]);
                let ((d, b), (back, back_bytes)) = (moved(0), moved(1));
                let round = match which {
                    0 => Round { seconds, messages, datagrams: d, wire_bytes: b, back },
                    _ => Round { seconds, messages, datagrams: d + back, wire_bytes: b + back_bytes, back: 0 },
                };
                // The floors of the stream's datagrams, in the same turn.
                if which == 0 {
                    let (mac, copy) = floors_of(&key, &round, args.datagram);
                    floors[0].push(mac);
                    floors[1].push(copy);
                }
                rounds.push(round);
            }
        }
        for (which, mut rounds) in rounds.into_iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            rounds.sort_by(|a, b| (a.seconds / a.messages as f64).total_cmp(&(b.seconds / b.messages as f64)));
            let r = &rounds[rounds.len() / 2];
            let what = if which == 0 { "stream" } else { "hop" };
            let per_datagram = r.seconds * 1e9 / r.datagrams.max(1) as f64;
            let mut row = Row::new("endpoint", "bulkwire", what, 2)
                .size(size)
                .with("ns_per_message", r.seconds * 1e9 / r.messages as f64)
                .with("ns_per_datagram", per_datagram)
                .with("datagrams_per_message", r.datagrams as f64 / r.messages as f64)
                .with("datagram_bytes", args.datagram as f64);
            if which == 0 && r.seconds > 0.0 {
                row = row
                    .with("mb_per_s", (r.messages * size) as f64 / r.seconds / 1e6)
                    .with("acks_per_message", r.back as f64 / r.messages as f64);
            }
            rows.push(row);
        }
        for (what, mut ns) in ["mac", "copy"].into_iter().zip(floors).filter(|(_, ns)| !ns.is_empty()) {
            ns.sort_by(f64::total_cmp);
            rows.push(
                Row::new("endpoint", "reference", what, 1)
                    .size(size)
                    .with("ns_per_datagram", ns[ns.len() / 2])
                    .with("datagram_bytes", args.datagram as f64),
            );
        }
    }
    let notes = vec![
        format!(
            "two endpoints in this process, datagrams of at most {} B, each made, copied whole, checked and delivered; median of {} rounds",
            args.datagram,
            args.rounds.max(1)
        ),
        format!(
            "references over the stream's datagrams (the same count and mean length): mac, one tag made and one checked ({}); copy, their bytes copied once",
            bulkwire_wire::mac_polyval()
        ),
    ];
    Ok(Report { rows, notes })
}

/// Nanoseconds a datagram of the round's mean length takes to be sealed
/// and checked (two tags), and to be copied once.
fn floors_of(key: &JobKey, round: &Round, max: usize) -> (f64, f64) {
    let len = ((round.wire_bytes / round.datagrams.max(1)) as usize).clamp(HEADER_LEN + 16, max);
    let data: Vec<u8> = (0..len).map(|i| (i * 29 + 1) as u8).collect();
    let mut out = vec![0u8; len];
    let n = round.datagrams.max(1);
    let t = Instant::now();
    let mut sink = 0u8;
    for _ in 0..n {
        let tag = key.datagram_tag(black_box(&data[..len - 16]));
        sink ^= u8::from(key.verify_datagram(black_box(&data[..len - 16]), &tag));
    }
    black_box(sink);
    let mac = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        out.copy_from_slice(black_box(&data));
        black_box(&mut out);
    }
    let copy = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    (mac, copy)
}

pub(crate) fn table(report: &Report) -> String {
    let mut o = String::from(
        "# the protocol's work, two endpoints in this process: ns per message and per datagram (median round)\n",
    );
    o.push_str(&format!(
        "{:>9} {:>12} {:>12} {:>10} {:>10} {:>12} {:>10} {:>10} {:>12}\n",
        "size", "stream/msg", "stream/dg", "dg/msg", "MB/s", "mac/dg", "copy/dg", "protocol", "hop"
    ));
    let mut sizes: Vec<u64> = report.table("endpoint").filter_map(|r| r.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        let num = |source: &str, what: &str, field: &str| {
            report.find("endpoint", source, what, Some(size)).and_then(|r| r.num(field))
        };
        let per_dg = num("bulkwire", "stream", "ns_per_datagram");
        let mac = num("reference", "mac", "ns_per_datagram");
        let copy = num("reference", "copy", "ns_per_datagram");
        // What the endpoint spends per datagram above its MAC and one copy.
        let protocol = match (per_dg, mac, copy) {
            (Some(d), Some(m), Some(c)) => Some(d - m - c),
            _ => None,
        };
        o.push_str(&format!(
            "{size:>9} {:>12} {:>12} {:>10} {:>10} {:>12} {:>10} {:>10} {:>12}\n",
            crate::rows::opt(num("bulkwire", "stream", "ns_per_message"), 0),
            crate::rows::opt(per_dg, 0),
            crate::rows::opt(num("bulkwire", "stream", "datagrams_per_message"), 2),
            crate::rows::opt(num("bulkwire", "stream", "mb_per_s"), 0),
            crate::rows::opt(mac, 0),
            crate::rows::opt(copy, 0),
            crate::rows::opt(protocol, 0),
            crate::rows::opt(num("bulkwire", "hop", "ns_per_message"), 0),
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loop_delivers_every_message_at_any_size() {
        for size in [0, 1, 1400, 3000, LEND_FROM + 1] {
            let message = Arc::new((0..size).map(|i| i as u8).collect::<Vec<u8>>());
            let mut pair = Pair::new(1472).unwrap();
            pair.stream(&message, 2).unwrap();
            pair.hops(&message, 3).unwrap();
            // Data went one way, the acknowledgements the other, and
            // nothing is left to send.
            assert!(pair.datagrams[0] > 0 && pair.datagrams[1] > 0, "{size}");
            assert!(pair.ends.iter().all(|e| !e.has_transmit()), "{size}");
        }
    }

    #[test]
    fn a_message_other_than_the_one_sent_is_an_error() {
        let mut pair = Pair::new(1472).unwrap();
        pair.ends[0].send(1, 0, b"not what was meant").unwrap();
        pair.settle();
        let why = pair.take_messages(1, b"what was meant").unwrap_err();
        assert!(why.contains("arrived as 18 B"), "{why}");
    }

    #[test]
    fn bad_arguments_are_refused() {
        let args = |sizes: Vec<usize>, datagram| Args { sizes, datagram, rounds: 1, bytes: 1 << 10, only: None };
        assert!(measure(&args(vec![17 << 20], 1472)).unwrap_err().contains("larger than the endpoint's"));
        assert!(measure(&args(vec![8], 20)).unwrap_err().starts_with("endpoint:"));
    }
}
