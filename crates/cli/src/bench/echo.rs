//! `bulkwire bench echo`: the network tests of seed 001, for bulkwire, raw
//! UDP and TCP side by side: echo round trips at 64 and 1500 bytes, and
//! ttcp-style memory-to-memory throughput (one side writes N bytes as fast
//! as it can, the other reads; measured at the receiver).

use bulkwire_comm::{CommError, World};
use serde::{Deserialize, Serialize};

use super::incast::{flow_row, print_flows, FlowRow};
use super::pingpong::RoundTrips;
use super::reference::Sockets;
use super::{mib, opt, report};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Echo round trips per size.
    #[arg(long, default_value_t = 2000)]
    pub iterations: u32,
    /// Bytes the ttcp sender writes per buffer length.
    #[arg(long, default_value_t = 64 << 20)]
    pub ttcp_bytes: usize,
    /// ttcp buffer lengths, bytes (1472: a UDP payload in an Ethernet frame;
    /// 8192: ttcp's default).
    #[arg(long, value_delimiter = ',', default_values_t = [1472, 8192, 64000])]
    pub ttcp_lengths: Vec<usize>,
}

/// Echo sizes of seed 001.
const ECHO_SIZES: [usize; 2] = [64, 1500];

/// One echo size: full round trip in microseconds, median.
#[derive(Debug, Serialize, Deserialize)]
pub struct EchoRow {
    size: usize,
    bulkwire_us: f64,
    udp_busy_poll_us: Option<f64>,
    udp_blocking_us: Option<f64>,
    tcp_nodelay_us: f64,
}

#[derive(Debug, Serialize)]
struct Results {
    round_trip: Vec<EchoRow>,
    ttcp: Vec<FlowRow>,
}

pub(super) fn rank(world: &World, args: &Args) -> Result<(), CommError> {
    let me = world.rank();
    let (peer, initiator) = (1 - me, me == 0);
    let mut sockets = Sockets::open(world, &[peer])?;
    let n = args.iterations.max(10) as usize;
    let mut round_trip = Vec::new();
    for size in ECHO_SIZES {
        let r = RoundTrips::measure(world, &mut sockets, peer, initiator, &vec![7u8; size], n)?;
        round_trip.push(EchoRow {
            size,
            bulkwire_us: r.bulkwire,
            udp_busy_poll_us: r.udp_busy_poll,
            udp_blocking_us: r.udp_blocking,
            tcp_nodelay_us: r.tcp_nodelay,
        });
    }
    // ttcp: rank 1 transmits, rank 0 receives.
    let mut ttcp = Vec::new();
    for &len in &args.ttcp_lengths {
        let count = (args.ttcp_bytes / len.max(1)).max(1);
        if let Some(row) = flow_row(world, &mut sockets, &[1], len.max(1), count)? {
            ttcp.push(row);
        }
    }
    world.barrier()?;
    let results = Results { round_trip, ttcp };
    let title =
        format!("ttcp: memory-to-memory, 1 sender to 1 receiver, {} per buffer length (size)", mib(args.ttcp_bytes));
    report(world, args.json, &results, |r| {
        print_echo(&r.round_trip);
        println!();
        print_flows(&title, &r.ttcp);
    });
    Ok(())
}

fn print_echo(rows: &[EchoRow]) {
    println!("# echo: full round trip, median, microseconds; 2 ranks on this machine over loopback");
    println!("{:>9} {:>12} {:>14} {:>14} {:>12}", "size", "bulkwire", "udp busy-poll", "udp blocking", "tcp nodelay");
    for r in rows {
        println!(
            "{:>9} {:>12.2} {:>14} {:>14} {:>12.2}",
            r.size,
            r.bulkwire_us,
            opt(r.udp_busy_poll_us, 2),
            opt(r.udp_blocking_us, 2),
            r.tcp_nodelay_us
        );
    }
}
