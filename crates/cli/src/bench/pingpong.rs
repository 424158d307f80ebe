//! `bulkwire bench pingpong`: half round trip between two ranks, beside raw
//! UDP (busy-poll and blocking) and TCP (TCP_NODELAY) ping-pong.

use std::time::Instant;

use bulkwire_comm::{CommError, Source, Tag, World};
use serde::{Deserialize, Serialize};

use super::reference::{Sockets, UDP_MAX_PAYLOAD};
use super::{io, median_us, opt, report, sizes};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
}

/// One row: half round trip in microseconds (median over the round trips).
#[derive(Debug, Serialize)]
struct Row {
    size: usize,
    bulkwire_us: f64,
    udp_busy_poll_us: Option<f64>,
    udp_blocking_us: Option<f64>,
    tcp_nodelay_us: f64,
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
pub(super) struct RoundTrips {
    pub bulkwire: f64,
    /// Left out where a spinning process would not have a core of its own,
    /// or the size does not fit in one datagram.
    pub udp_busy_poll: Option<f64>,
    /// Left out where the size does not fit in one datagram.
    pub udp_blocking: Option<f64>,
    pub tcp_nodelay: f64,
}

impl RoundTrips {
    pub(super) fn measure(
        world: &World,
        sockets: &mut Sockets,
        peer: u32,
        initiator: bool,
        data: &[u8],
        n: usize,
    ) -> Result<RoundTrips, CommError> {
        // A busy-polling process without a core of its own measures the
        // scheduler, not the network.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let spin = world.size() <= cores;
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

pub(super) fn rank(world: &World, args: &Args) -> Result<(), CommError> {
    let me = world.rank();
    let (peer, initiator) = (me ^ 1, me % 2 == 0);
    let mut sockets = Sockets::open(world, &[peer])?;
    let mut rows = Vec::new();
    for size in sizes(0, args.max_size) {
        let data = vec![7u8; size];
        let r = RoundTrips::measure(world, &mut sockets, peer, initiator, &data, rounds(args.iterations, size))?;
        rows.push(Row {
            size,
            bulkwire_us: r.bulkwire / 2.0,
            udp_busy_poll_us: r.udp_busy_poll.map(|x| x / 2.0),
            udp_blocking_us: r.udp_blocking.map(|x| x / 2.0),
            tcp_nodelay_us: r.tcp_nodelay / 2.0,
        });
    }
    world.barrier()?;
    report(world, args.json, &rows, |rows| print_table(rows, world.size()));
    Ok(())
}

fn print_table(rows: &[Row], ranks: u32) {
    match ranks {
        2 => println!("# half round trip, median, microseconds; 2 ranks on this machine over loopback"),
        n => println!(
            "# half round trip, median, microseconds; {n} ranks on this machine over loopback, {} pairs at once, \
             pair 0-1 shown",
            n / 2
        ),
    }
    println!(
        "{:>9} {:>12} {:>14} {:>14} {:>12} {:>16}",
        "size", "bulkwire", "udp busy-poll", "udp blocking", "tcp nodelay", "bulkwire/udp-bp"
    );
    for r in rows {
        let ratio = r.udp_busy_poll_us.map(|u| r.bulkwire_us / u);
        println!(
            "{:>9} {:>12.2} {:>14} {:>14} {:>12.2} {:>16}",
            r.size,
            r.bulkwire_us,
            opt(r.udp_busy_poll_us, 2),
            opt(r.udp_blocking_us, 2),
            r.tcp_nodelay_us,
            opt(ratio, 2)
        );
    }
}
