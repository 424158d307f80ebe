//! `bulkwire bench incast -k K`: K senders to one receiver (seed 001's
//! many-to-one case, where "a simple TTCP test of two hosts transmitting to
//! one receiver causes severe network congestion and cell loss"). Each
//! sender writes its bytes as fast as it can; the receiver measures.
//! bulkwire recovers every loss, and the table shows what that cost
//! (retransmissions, drops, time); raw UDP shows what a network without
//! recovery delivers; TCP is the flow-controlled reference.

use bulkwire_comm::{CommError, Source, Tag, World};
use bulkwire_proto::ChannelStats;
use serde::{Deserialize, Serialize};
use std::time::Instant;

use super::reference::{udp_socket_drops, Sockets};
use super::{intact, io, mib, report, Flow};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Senders (the job has K + 1 ranks; rank 0 receives).
    #[arg(short = 'k', long, default_value_t = 4)]
    pub senders: u32,
    /// Bytes each sender writes per message size.
    #[arg(long, default_value_t = 16 << 20)]
    pub bytes: usize,
    /// Message sizes (the buffer each write hands over), bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [1024, 8192, 64000, 1 << 20])]
    pub sizes: Vec<usize>,
}

/// One message size: the same K-to-1 flow over bulkwire, raw UDP and TCP.
#[derive(Debug, Serialize, Deserialize)]
pub struct FlowRow {
    pub size: usize,
    pub senders: u32,
    pub bulkwire: Flow,
    pub udp: Flow,
    pub tcp: Flow,
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

pub(super) fn rank(world: &World, args: &Args) -> Result<(), CommError> {
    let senders: Vec<u32> = (1..world.size()).collect();
    let peers = if world.rank() == 0 { senders.clone() } else { vec![0] };
    let mut sockets = Sockets::open(world, &peers)?;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let count = (args.bytes / size.max(1)).max(1);
        if let Some(row) = flow_row(world, &mut sockets, &senders, size.max(1), count)? {
            rows.push(row);
        }
    }
    world.barrier()?;
    let title = format!(
        "{} senders to 1 receiver on this machine over loopback, {} each per size",
        args.senders,
        mib(args.bytes)
    );
    report(world, args.json, &rows, |rows| print_flows(&title, rows));
    Ok(())
}

/// `senders` each write `count` messages of `size` bytes to rank 0, over
/// bulkwire, raw UDP and TCP in turn. Rank 0 returns the row.
pub(super) fn flow_row(
    world: &World,
    sockets: &mut Sockets,
    senders: &[u32],
    size: usize,
    count: usize,
) -> Result<Option<FlowRow>, CommError> {
    let bulkwire = bulkwire_flow(world, senders, size, count)?;
    world.barrier()?;
    let udp = sockets.udp_flow(world, 0, senders, size, count)?;
    world.barrier()?;
    let tcp = sockets.tcp_flow(0, senders, size, count).map_err(io)?;
    Ok(match (bulkwire, udp, tcp) {
        (Some(bulkwire), Some(udp), Some(tcp)) => {
            Some(FlowRow { size, senders: senders.len() as u32, bulkwire, udp, tcp })
        }
        _ => None,
    })
}

/// The bulkwire flow: each sender `send`s its messages (each returns once
/// queued, as a socket write does); rank 0 receives them from any source,
/// checks each, and times the last arrival. Afterwards every rank hands its
/// protocol counters to rank 0.
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
    if me == 0 {
        for _ in 0..senders.len() * count {
            let (_, got) = world.recv(Source::Any, Tag::Is(FLOW))?;
            if intact(&got, size) {
                received += got.len() as u64;
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
    flow.socket_drops = drops_before.zip(socket_drops()).map(|(b, a)| a.saturating_sub(b));
    Ok(Some(flow))
}

/// The table of flow rows (incast, and ttcp in `echo`).
pub(super) fn print_flows(title: &str, rows: &[FlowRow]) {
    println!("# {title}");
    println!("# throughput at the receiver, MB/s (10^6 B/s), from the start to the last byte that arrived");
    println!(
        "# bulkwire: deliv = share delivered, rexmit = data packets resent, drops = receiver's kernel socket drops"
    );
    println!("# udp: raw datagrams of at most 64000 B, nothing resent; drops = receiver's kernel socket drops");
    println!(
        "{:>8} | {:>9} {:>6} {:>7} {:>7} {:>8} | {:>9} {:>6} {:>8} | {:>9} {:>8}",
        "size", "bulkwire", "deliv", "rexmit", "drops", "ms", "udp", "deliv", "drops", "tcp", "ms"
    );
    let share = |f: &Flow| format!("{:.1}%", (1.0 - f.loss()) * 100.0);
    let count = |x: Option<u64>| x.map_or("-".to_string(), |v| v.to_string());
    for r in rows {
        let (b, u, t) = (&r.bulkwire, &r.udp, &r.tcp);
        println!(
            "{:>8} | {:>9.1} {:>6} {:>7} {:>7} {:>8.1} | {:>9.1} {:>6} {:>8} | {:>9.1} {:>8.1}",
            r.size,
            b.mb_per_s,
            share(b),
            count(b.protocol.map(|p| p.retransmissions)),
            count(b.socket_drops),
            b.seconds * 1e3,
            u.mb_per_s,
            share(u),
            count(u.socket_drops),
            t.mb_per_s,
            t.seconds * 1e3
        );
    }
}
