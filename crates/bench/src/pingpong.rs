//! `bulkwire bench pingpong`: half round trip between two ranks, beside raw
//! UDP (busy-poll and blocking) and TCP (TCP_NODELAY) ping-pong.

use std::time::Instant;

use bulkwire_comm::{CommError, Source, Tag, World};
use serde::{Deserialize, Serialize};

use crate::reference::{Sockets, UDP_MAX_PAYLOAD};
use crate::rows::{opt, Report, Row};
use crate::{io, median_us, sizes, sizes_of};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Round trips per size (fewer for large sizes).
    #[arg(long, default_value_t = 2000)]
    pub iterations: u32,
    /// Largest size, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
    /// Ranks, in pairs that ping-pong at the same time (rank 2i with 2i+1);
    /// rank 0 reports its pair. More ranks than cores shows how the job
    /// fares oversubscribed.
    #[arg(short = 'n', long = "np", default_value_t = 2)]
    pub ranks: u32,
    /// Leave out the Open MPI reference (the same sweep with Open MPI over TCP).
    #[arg(long)]
    pub no_mpi: bool,
}

const PING: i32 = 101;

/// Round trips to time at `size`: at most ~256 MiB moved, at least 10.
fn rounds(iterations: u32, size: usize) -> usize {
    let budget = (256 << 20) / size.max(1);
    (iterations as usize).min(budget).max(10)
}

/// `n` bulkwire round trips of `data` with `peer` (after a tenth as many to
/// warm up); the initiator sends first. Returns the round trips in seconds.
fn round_trips(world: &World, peer: u32, initiator: bool, data: &[u8], n: usize) -> Result<Vec<f64>, CommError> {
    let mut samples = Vec::with_capacity(n + n / 10);
    for _ in 0..n + n / 10 {
        let t = Instant::now();
        if initiator {
            world.send(peer, PING, data)?;
            let (_, got) = world.recv(Source::Rank(peer), Tag::Is(PING))?;
            debug_assert_eq!(got.len(), data.len());
        } else {
            let (_, got) = world.recv(Source::Rank(peer), Tag::Is(PING))?;
            world.send(peer, PING, &got)?;
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(samples.split_off(n / 10))
}

/// Median round trips (microseconds) of one size over bulkwire and the
/// references, measured one after the other between the same two ranks.
pub(crate) struct RoundTrips {
    pub bulkwire: f64,
    /// Left out where a spinning process would not have a core of its own,
    /// or the size does not fit in one datagram.
    pub udp_busy_poll: Option<f64>,
    /// Left out where the size does not fit in one datagram.
    pub udp_blocking: Option<f64>,
    pub tcp_nodelay: f64,
}

impl RoundTrips {
    pub(crate) fn measure(
        world: &World,
        sockets: &mut Sockets,
        peer: u32,
        initiator: bool,
        data: &[u8],
        n: usize,
    ) -> Result<RoundTrips, CommError> {
        // A busy-polling process without a core of its own measures the
        // scheduler, not the network.
        let spin = world.size() <= bulkwire_runtime::host_cores();
        let udp_fits = data.len() <= UDP_MAX_PAYLOAD;
        world.barrier()?;
        let bulkwire = median_us(round_trips(world, peer, initiator, data, n)?);
        let udp_busy_poll = match udp_fits && spin {
            true => Some(median_us(sockets.udp_round_trips(world, peer, initiator, data, n, true)?)),
            false => None,
        };
        let udp_blocking = match udp_fits {
            true => Some(median_us(sockets.udp_round_trips(world, peer, initiator, data, n, false)?)),
            false => None,
        };
        world.barrier()?;
        let tcp_nodelay = median_us(sockets.tcp_round_trips(peer, initiator, data, n).map_err(io)?);
        Ok(RoundTrips { bulkwire, udp_busy_poll, udp_blocking, tcp_nodelay })
    }
}

/// The variants of a round-trip row, in the order of the table's columns.
pub(crate) const VARIANTS: [(&str, &str); 4] =
    [("bulkwire", ""), ("udp", "busy-poll"), ("udp", "blocking"), ("tcp", "nodelay")];

impl RoundTrips {
    /// Rows of table `bench` for `size`, each `median_us` the round trip
    /// times `scale` (1/2: the half round trip).
    pub(crate) fn rows(&self, bench: &str, procs: u32, size: usize, scale: f64) -> Vec<Row> {
        let values = [Some(self.bulkwire), self.udp_busy_poll, self.udp_blocking, Some(self.tcp_nodelay)];
        VARIANTS
            .iter()
            .zip(values)
            .filter_map(|(&(source, what), v)| {
                Some(Row::new(bench, source, what, procs).size(size).with("median_us", v? * scale))
            })
            .collect()
    }
}

pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let me = world.rank();
    let (peer, initiator) = (me ^ 1, me % 2 == 0);
    let mut sockets = Sockets::open(world, &[peer])?;
    let mut rows = Vec::new();
    for size in sizes(0, args.max_size) {
        let data = vec![7u8; size];
        let r = RoundTrips::measure(world, &mut sockets, peer, initiator, &data, rounds(args.iterations, size))?;
        rows.extend(r.rows("pingpong", world.size(), size, 0.5));
    }
    world.barrier()?;
    Ok(rows)
}

/// A round-trip table: a line per size, a column per variant, and Open
/// MPI's where it was measured.
pub(crate) fn round_trip_lines(report: &Report, bench: &str, ratio: bool) -> String {
    let mpi = report.table(bench).any(|r| r.source == "mpi");
    let mut o = format!(
        "{:>9} {:>12} {:>14} {:>14} {:>12}",
        "size", "bulkwire", "udp busy-poll", "udp blocking", "tcp nodelay"
    );
    if mpi {
        o.push_str(&format!(" {:>13}", "open mpi tcp"));
    }
    if ratio {
        o.push_str(&format!(" {:>16}", "bulkwire/udp-bp"));
    }
    o.push('\n');
    for size in sizes_of(report.table(bench)) {
        let median =
            |source: &str, what: &str| report.find(bench, source, what, Some(size)).and_then(|r| r.num("median_us"));
        let v: Vec<Option<f64>> = VARIANTS.iter().map(|(source, what)| median(source, what)).collect();
        o.push_str(&format!(
            "{size:>9} {:>12} {:>14} {:>14} {:>12}",
            opt(v[0], 2),
            opt(v[1], 2),
            opt(v[2], 2),
            opt(v[3], 2)
        ));
        if mpi {
            o.push_str(&format!(" {:>13}", opt(median("mpi", "tcp"), 2)));
        }
        if ratio {
            o.push_str(&format!(" {:>16}", opt(v[0].zip(v[1]).map(|(b, u)| b / u), 2)));
        }
        o.push('\n');
    }
    o
}

pub(crate) fn table(report: &Report) -> String {
    let ranks = report.table("pingpong").next().map_or(2, |r| r.procs);
    let mut o = match ranks {
        2 => "# half round trip, median, microseconds; 2 ranks on this machine over loopback\n".to_string(),
        n => format!(
            "# half round trip, median, microseconds; {n} ranks on this machine over loopback, {} pairs at once, \
             pair 0-1 shown\n",
            n / 2
        ),
    };
    o.push_str(&round_trip_lines(report, "pingpong", true));
    o
}

/// The same sweep for the Open MPI program.
pub(crate) fn mpi_args(args: &Args) -> Vec<String> {
    let iterations = args.iterations.to_string();
    let max = args.max_size.to_string();
    ["pingpong", "--iterations", &iterations, "--max-size", &max].map(String::from).to_vec()
}
