//! `bulkwire bench incast -k K`: K senders to one receiver (seed 001's
//! many-to-one case, where "a simple TTCP test of two hosts transmitting to
//! one receiver causes severe network congestion and cell loss"). Each
//! sender writes its bytes as fast as it can; the receiver measures.
//! bulkwire recovers every loss, and the table shows what that cost
//! (retransmissions, drops, time); raw UDP shows what a network without
//! recovery delivers; TCP is the flow-controlled reference. With `--warp`,
//! bulkwire runs a second time with the senders under Warp rate control
//! (seed 003), which should share a congested receiver or port fairly
//! instead of overflowing it: compare drops, resends, Jain's fairness index
//! of the senders' throughputs and the completion time.

use bulkwire_comm::{CommError, Source, Tag, World};
use bulkwire_proto::{ChannelStats, RateControl};
use serde::{Deserialize, Serialize};
use std::time::Instant;

use crate::reference::{udp_socket_drops, Sockets};
use crate::rows::{Report, Row};
use crate::{intact, io, mib, sizes_of, Flow};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Senders (the job has K + 1 ranks; rank 0 receives).
    #[arg(short = 'k', long, default_value_t = 4)]
    pub senders: u32,
    /// Bytes each sender writes per message size.
    #[arg(long, default_value_t = 16 << 20)]
    pub bytes: usize,
    /// Message sizes (the buffer each write hands over), bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [1024, 8192, 64000, 1 << 20])]
    pub sizes: Vec<usize>,
    /// Also run bulkwire with the senders under Warp rate control.
    #[arg(long)]
    #[serde(default)]
    pub warp: bool,
    /// The capacity Warp's senders share (the receiver's port), as tc
    /// writes rates; by default the job's (BULKWIRE_WARP_CAPACITY, the
    /// interface's speed, or 1gbit).
    #[arg(long, value_name = "RATE", requires = "warp", value_parser = check_rate)]
    #[serde(default)]
    pub warp_capacity: Option<String>,
}

fn check_rate(text: &str) -> Result<String, String> {
    bulkwire_runtime::rate::parse_rate(text).map(|_| text.trim().to_string())
}

/// The protocol's counters over a bulkwire flow, every rank summed.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct ProtocolCounters {
    /// Data packets sent for the first time.
    pub data_packets: u64,
    /// Data packets sent again (loss recovery).
    pub retransmissions: u64,
    /// Retransmission timeouts (tail probes).
    pub timeouts: u64,
    /// Data packets a receiver discarded on arrival (no free buffer, too far
    /// ahead) and copies that had already arrived.
    pub drops: u64,
    pub duplicates: u64,
}

impl ProtocolCounters {
    fn between(before: &ChannelStats, after: &ChannelStats) -> ProtocolCounters {
        ProtocolCounters {
            data_packets: after.data_sent - before.data_sent,
            retransmissions: after.retransmissions - before.retransmissions,
            timeouts: after.timeouts - before.timeouts,
            drops: after.drops - before.drops,
            duplicates: after.duplicates - before.duplicates,
        }
    }

    fn add(&mut self, o: &ProtocolCounters) {
        self.data_packets += o.data_packets;
        self.retransmissions += o.retransmissions;
        self.timeouts += o.timeouts;
        self.drops += o.drops;
        self.duplicates += o.duplicates;
    }
}

const FLOW: i32 = 401;
const COUNTERS: i32 = 402;

/// Rows of table `incast`: per message size, the flow over bulkwire, raw UDP and TCP.
pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let senders: Vec<u32> = (1..world.size()).collect();
    let peers = if world.rank() == 0 { senders.clone() } else { vec![0] };
    let mut sockets = Sockets::open(world, &peers)?;
    let mut rows = Vec::new();
    let capacity = match &args.warp_capacity {
        Some(rate) => Some(bulkwire_runtime::rate::parse_rate(rate).map_err(|e| io(std::io::Error::other(e)))?),
        None => None,
    };
    for &size in &args.sizes {
        let count = (args.bytes / size.max(1)).max(1);
        rows.extend(flow_rows("incast", world, &mut sockets, &senders, size.max(1), count)?);
        if args.warp {
            world.barrier()?;
            let control = |on: bool| {
                let job = world.runtime().rate_control();
                let control = RateControl { capacity: capacity.map_or(job.capacity, |bits| bits / 8.0), ..job };
                world.runtime().set_rate_control_with(0, on.then_some(&control));
            };
            control(true);
            let flow = bulkwire_flow(world, &senders, size.max(1), count);
            control(false);
            if let Some(flow) = flow? {
                rows.push(flow.row("incast", "bulkwire", "warp", world.size(), senders.len(), size.max(1)));
            }
        }
    }
    world.barrier()?;
    Ok(rows)
}

pub(crate) fn table(args: &Args, report: &Report) -> String {
    let title = format!("{} senders to 1 receiver, {} each per size", args.senders, mib(args.bytes));
    let mut o = flow_table(&title, report, "incast");
    if args.warp {
        o.push_str("# bulkwire with and without Warp rate control: rexmit = data packets resent, fair = Jain's index of the senders' throughputs\n");
        o.push_str(&format!(
            "{:>8} | {:>9} {:>7} {:>6} {:>8} | {:>9} {:>7} {:>6} {:>8}\n",
            "size", "free MB/s", "rexmit", "fair", "ms", "warp MB/s", "rexmit", "fair", "ms"
        ));
        let num = |r: Option<&Row>, name: &str| r.and_then(|r| r.num(name));
        let f = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |v| format!("{v:.d$}"));
        for size in sizes_of(report.table("incast")) {
            let [free, warp] = ["", "warp"].map(|w| report.find("incast", "bulkwire", w, Some(size)));
            o.push_str(&format!(
                "{:>8} | {:>9} {:>7} {:>6} {:>8} | {:>9} {:>7} {:>6} {:>8}\n",
                size,
                f(num(free, "mb_per_s"), 1),
                f(num(free, "retransmitted_packets"), 0),
                f(num(free, "jain_index"), 3),
                f(num(free, "time_ms"), 1),
                f(num(warp, "mb_per_s"), 1),
                f(num(warp, "retransmitted_packets"), 0),
                f(num(warp, "jain_index"), 3),
                f(num(warp, "time_ms"), 1),
            ));
        }
    }
    o
}

/// `senders` each write `count` messages of `size` bytes to rank 0, over
/// bulkwire, raw UDP and TCP in turn. Rank 0 returns a row for each.
pub(crate) fn flow_rows(
    bench: &str,
    world: &World,
    sockets: &mut Sockets,
    senders: &[u32],
    size: usize,
    count: usize,
) -> Result<Vec<Row>, CommError> {
    let bulkwire = bulkwire_flow(world, senders, size, count)?;
    world.barrier()?;
    let udp = sockets.udp_flow(world, 0, senders, size, count)?;
    world.barrier()?;
    let tcp = sockets.tcp_flow(0, senders, size, count).map_err(io)?;
    let flows = [("bulkwire", bulkwire), ("udp", udp), ("tcp", tcp)];
    let row =
        |(source, flow): (&str, Option<Flow>)| Some(flow?.row(bench, source, "", world.size(), senders.len(), size));
    Ok(flows.into_iter().filter_map(row).collect())
}

/// The bulkwire flow: each sender `send`s its messages (each returns once
/// queued, as a socket write does); rank 0 receives them from any source,
/// checks each, and times the last arrival, and each sender's. Afterwards
/// every rank hands its protocol counters to rank 0.
fn bulkwire_flow(world: &World, senders: &[u32], size: usize, count: usize) -> Result<Option<Flow>, CommError> {
    let me = world.rank();
    let data = vec![7u8; size];
    let stats = || world.runtime().stats().channels;
    let before = stats();
    let socket_drops = || -> Option<u64> {
        let (ordinary, premium) = world.runtime().peer_addrs(me)?;
        Some(udp_socket_drops(ordinary)? + udp_socket_drops(premium)?)
    };
    // Counters are read before the barrier: the senders start the moment
    // they leave it.
    let drops_before = socket_drops();
    world.barrier()?;
    let start = Instant::now();
    let mut received = 0u64;
    // Per sender: messages received, and when the last came.
    let mut finished = vec![(0usize, 0.0f64); world.size() as usize];
    if me == 0 {
        for _ in 0..senders.len() * count {
            let (status, got) = world.recv(Source::Any, Tag::Is(FLOW))?;
            if intact(&got, size) {
                received += got.len() as u64;
            }
            let slot = &mut finished[status.source as usize];
            slot.0 += 1;
            if slot.0 == count {
                slot.1 = start.elapsed().as_secs_f64();
            }
        }
    } else if senders.contains(&me) {
        for _ in 0..count {
            world.send(0, FLOW, &data)?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // What the senders' counters show once the receiver has everything.
    world.barrier()?;
    let mine = ProtocolCounters::between(&before, &stats());
    if me != 0 {
        world.send(0, COUNTERS, &serde_json::to_vec(&mine).expect("counters serialise"))?;
        return Ok(None);
    }
    let mut total = mine;
    for _ in 1..world.size() {
        let (status, theirs) = world.recv(Source::Any, Tag::Is(COUNTERS))?;
        let theirs: ProtocolCounters = serde_json::from_slice(&theirs)
            .map_err(|e| io(std::io::Error::other(format!("rank {}: bad counters: {e}", status.source))))?;
        total.add(&theirs);
    }
    let mut flow = Flow::new((senders.len() * count * size) as u64, received, seconds);
    flow.protocol = Some(total);
    let throughputs: Vec<f64> =
        senders.iter().map(|&s| finished[s as usize]).map(|(_, t)| (count * size) as f64 / t.max(1e-9)).collect();
    flow.fairness = Some(jain(&throughputs));
    flow.socket_drops = drops_before.zip(socket_drops()).map(|(b, a)| a.saturating_sub(b));
    Ok(Some(flow))
}

/// The table of flow rows (incast, and ttcp in `echo`).
pub(crate) fn flow_table(title: &str, report: &Report, bench: &str) -> String {
    let mut o = format!("# {title}\n");
    o.push_str("# throughput at the receiver, MB/s (10^6 B/s), from the start to the last byte that arrived\n");
    o.push_str(
        "# bulkwire: deliv = share delivered, rexmit = data packets resent, drops = receiver's kernel socket drops\n",
    );
    o.push_str("# udp: raw datagrams of at most 64000 B, nothing resent; drops = receiver's kernel socket drops\n");
    o.push_str(&format!(
        "{:>8} | {:>9} {:>6} {:>7} {:>7} {:>8} | {:>9} {:>6} {:>8} | {:>9} {:>8}\n",
        "size", "bulkwire", "deliv", "rexmit", "drops", "ms", "udp", "deliv", "drops", "tcp", "ms"
    ));
    let num = |r: Option<&Row>, name: &str| r.and_then(|r| r.num(name));
    let float = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |v| format!("{v:.d$}"));
    let count = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
    let share = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    for size in sizes_of(report.table(bench)) {
        let [b, u, t] = ["bulkwire", "udp", "tcp"].map(|s| report.find(bench, s, "", Some(size)));
        o.push_str(&format!(
            "{:>8} | {:>9} {:>6} {:>7} {:>7} {:>8} | {:>9} {:>6} {:>8} | {:>9} {:>8}\n",
            size,
            float(num(b, "mb_per_s"), 1),
            share(num(b, "delivered_share")),
            count(num(b, "retransmitted_packets")),
            count(num(b, "socket_drops_datagrams")),
            float(num(b, "time_ms"), 1),
            float(num(u, "mb_per_s"), 1),
            share(num(u, "delivered_share")),
            count(num(u, "socket_drops_datagrams")),
            float(num(t, "mb_per_s"), 1),
            float(num(t, "time_ms"), 1)
        ));
    }
    o
}

/// Jain's fairness index of `x`: (Σx)² / (n Σx²), 1 when all are equal and
/// 1/n when one has everything.
pub(crate) fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    #[test]
    fn jain_index_is_one_when_equal_and_one_over_n_at_worst() {
        assert_eq!(super::jain(&[3.0, 3.0, 3.0]), 1.0);
        assert_eq!(super::jain(&[5.0, 0.0, 0.0, 0.0]), 0.25);
        assert!((super::jain(&[1.0, 2.0]) - 0.9).abs() < 1e-12);
    }
}
