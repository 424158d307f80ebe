//! `bulkwire bench echo`: the network tests of seed 001, for bulkwire, raw
//! UDP and TCP side by side: echo round trips at 64 and 1500 bytes, and
//! ttcp-style memory-to-memory throughput (one side writes N bytes as fast
//! as it can, the other reads; measured at the receiver).

use bulkwire_comm::{CommError, World};
use serde::{Deserialize, Serialize};

use crate::incast::{flow_rows, flow_table};
use crate::mib;
use crate::pingpong::{round_trip_lines, RoundTrips};
use crate::reference::Sockets;
use crate::rows::{Report, Row};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
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

/// Rows of table `echo` (full round trips, `median_us`) and `ttcp` (flows).
pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let me = world.rank();
    let (peer, initiator) = (1 - me, me == 0);
    let mut sockets = Sockets::open(world, &[peer])?;
    let n = args.iterations.max(10) as usize;
    let mut rows = Vec::new();
    for size in ECHO_SIZES {
        let r = RoundTrips::measure(world, &mut sockets, peer, initiator, &vec![7u8; size], n, true)?;
        rows.extend(r.rows("echo", world.size(), size, 1.0, ""));
    }
    // ttcp: rank 1 transmits, rank 0 receives.
    for &len in &args.ttcp_lengths {
        let count = (args.ttcp_bytes / len.max(1)).max(1);
        rows.extend(flow_rows("ttcp", world, &mut sockets, &[1], len.max(1), count)?);
    }
    world.barrier()?;
    Ok(rows)
}

pub(crate) fn table(args: &Args, report: &Report) -> String {
    let mut o = "# echo: full round trip, median, microseconds; 2 ranks\n".to_string();
    o.push_str(&round_trip_lines(report, "echo", false));
    o.push('\n');
    let title =
        format!("ttcp: memory-to-memory, 1 sender to 1 receiver, {} per buffer length (size)", mib(args.ttcp_bytes));
    o.push_str(&flow_table(&title, report, "ttcp"));
    o
}
