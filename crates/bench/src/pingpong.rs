//! `bulkwire bench pingpong`: half round trip between two ranks, over
//! bulkwire's shared memory or UDP (`--transport`), beside raw UDP
//! (busy-poll and blocking) and TCP (TCP_NODELAY) ping-pong and Open MPI
//! over shared memory and TCP.

use std::time::Instant;

use bulkwire_comm::{CommError, World};
use serde::{Deserialize, Serialize};

use crate::reference::{Sockets, UDP_MAX_PAYLOAD};
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};
use crate::{io, median_us, receive, receives_into, sizes_from, sizes_of};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Round trips per size (fewer for large sizes).
    #[arg(long, default_value_t = 2000)]
    pub iterations: u32,
    /// Largest size, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
    /// Smallest size, bytes: the sweep's sizes below it are left out.
    #[arg(long, default_value_t = 0)]
    pub min_size: usize,
    /// Ranks, in pairs that ping-pong at the same time (rank 2i with 2i+1);
    /// rank 0 reports its pair. More ranks than cores shows how the job
    /// fares oversubscribed.
    #[arg(short = 'n', long = "np", default_value_t = 2)]
    pub ranks: u32,
    /// Leave out the Open MPI reference (the same sweep with Open MPI over
    /// shared memory and TCP).
    #[arg(long)]
    pub no_mpi: bool,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
}

const PING: i32 = 101;

/// Turns of bulkwire and raw UDP busy-polling per size (see
/// [`RoundTrips::measure`]).
const TURNS: usize = 4;
/// The fewest round trips a turn has: sizes with fewer go in one turn each
/// (raw UDP's large rounds may lose a datagram, and at most a tenth of
/// the rounds may be lost).
const TURN_LEAST: usize = 50;

/// Round trips to time at `size`: at most ~256 MiB moved, at least 10.
fn rounds(iterations: u32, size: usize) -> usize {
    let budget = (256 << 20) / size.max(1);
    (iterations as usize).min(budget).max(10)
}

/// `n` bulkwire round trips of `data` with `peer` (after a tenth as many to
/// warm up); the initiator sends first. Returns the round trips in seconds.
fn round_trips(world: &World, peer: u32, initiator: bool, data: &[u8], n: usize) -> Result<Vec<f64>, CommError> {
    let mut samples = Vec::with_capacity(n + n / 10);
    let mut buf = vec![0u8; data.len()];
    let into = receives_into(world, peer);
    for _ in 0..n + n / 10 {
        let t = Instant::now();
        if initiator {
            world.send(peer, PING, data)?;
            let got = receive(world, peer, PING, into, &mut buf)?;
            debug_assert_eq!(got.len(), data.len());
        } else {
            let got = receive(world, peer, PING, into, &mut buf)?;
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
    /// or the references are not measured. A message longer than one
    /// datagram goes in several, without acknowledgements or resends: the
    /// floor of any transport over UDP.
    pub udp_busy_poll: Option<f64>,
    /// Left out where the references are not measured.
    pub udp_blocking: Option<f64>,
    /// Left out where the references are not measured.
    pub tcp_nodelay: Option<f64>,
}

impl RoundTrips {
    /// bulkwire's round trips and, where `references`, raw UDP's and TCP's.
    pub(crate) fn measure(
        world: &World,
        sockets: &mut Sockets,
        peer: u32,
        initiator: bool,
        data: &[u8],
        n: usize,
        references: bool,
    ) -> Result<RoundTrips, CommError> {
        // A busy-polling process without a core of its own measures the
        // scheduler, not the network.
        let spin = world.size() <= bulkwire_runtime::host_cores();
        world.barrier()?;
        // bulkwire and its floor, raw UDP busy-polling, in turns (a quarter
        // of the round trips each, four times): the machine's speed, which
        // can change within a second, then weighs on both alike, and their
        // ratio holds.
        let busy = references && spin;
        let turns = if busy && n >= TURN_LEAST * TURNS { TURNS } else { 1 };
        let (mut ours, mut floor) = (Vec::new(), Vec::new());
        for _ in 0..turns {
            ours.extend(round_trips(world, peer, initiator, data, n.div_ceil(turns))?);
            if busy {
                floor.extend(sockets.udp_round_trips(world, peer, initiator, data, n.div_ceil(turns), true)?);
            }
        }
        let bulkwire = median_us(ours);
        let udp_busy_poll = busy.then(|| median_us(floor));
        let udp_blocking = match references {
            true => Some(median_us(sockets.udp_round_trips(world, peer, initiator, data, n, false)?)),
            false => None,
        };
        let tcp_nodelay = match references {
            true => {
                world.barrier()?;
                Some(median_us(sockets.tcp_round_trips(peer, initiator, data, n).map_err(io)?))
            }
            false => None,
        };
        Ok(RoundTrips { bulkwire, udp_busy_poll, udp_blocking, tcp_nodelay })
    }
}

/// The references of a round-trip row, in the order of the table's columns.
const REFERENCES: [(&str, &str); 3] = [("udp", "busy-poll"), ("udp", "blocking"), ("tcp", "nodelay")];

impl RoundTrips {
    /// Rows of table `bench` for `size`, each `median_us` the round trip
    /// times `scale` (1/2: the half round trip); bulkwire's with variant
    /// `what`.
    pub(crate) fn rows(&self, bench: &str, procs: u32, size: usize, scale: f64, what: &str) -> Vec<Row> {
        let values = [self.udp_busy_poll, self.udp_blocking, self.tcp_nodelay];
        let row = |source: &str, what: &str, v: f64| {
            Row::new(bench, source, what, procs).size(size).with("median_us", v * scale)
        };
        let mut rows = vec![row("bulkwire", what, self.bulkwire)];
        rows.extend(REFERENCES.iter().zip(values).filter_map(|(&(source, what), v)| Some(row(source, what, v?))));
        rows
    }
}

pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let me = world.rank();
    let (peer, initiator) = (me ^ 1, me.is_multiple_of(2));
    let mut sockets = Sockets::open(world, &[peer])?;
    let requested = args.transport.requested().as_str();
    let over = transport::reached(world.runtime(), [peer]);
    let references = !args.transport.references_done;
    let mut rows = Vec::new();
    for size in sizes_from(0, args.min_size, args.max_size) {
        let data = vec![7u8; size];
        let n = rounds(args.iterations, size);
        let r = RoundTrips::measure(world, &mut sockets, peer, initiator, &data, n, references)?;
        let mut measured = r.rows("pingpong", world.size(), size, 0.5, over);
        measured[0].set(REQUESTED, requested);
        rows.extend(measured);
    }
    world.barrier()?;
    Ok(rows)
}

/// A round-trip table: a line per size, a column per bulkwire job (its
/// transport, [`transport::label`]), per reference, and per transport of
/// Open MPI where it was measured; with `ratio`, bulkwire (its job over UDP
/// where there are two) over raw UDP busy-polling.
pub(crate) fn round_trip_lines(report: &Report, bench: &str, ratio: bool) -> String {
    let rows: Vec<&Row> = report.table(bench).collect();
    let jobs = transport::jobs(&rows);
    // A heading and the rows of each column.
    let mut columns: Vec<(String, Vec<&Row>)> = Vec::new();
    for job in &jobs {
        let heading = match transport::label(job[0]).as_str() {
            "" => "bulkwire".to_string(),
            label => format!("bulkwire {label}"),
        };
        columns.push((heading, job.clone()));
    }
    let of = |source: &str, what: &str| -> Vec<&Row> {
        rows.iter().copied().filter(|r| r.source == source && r.what == what).collect()
    };
    for (source, what) in REFERENCES {
        columns.push((format!("{source} {what}"), of(source, what)));
    }
    let mut mpi: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.source == "mpi") {
        if !mpi.contains(&r.what.as_str()) {
            mpi.push(&r.what);
        }
    }
    for what in mpi {
        columns.push((format!("open mpi {what}"), of("mpi", what)));
    }
    // The ratio: bulkwire over UDP (its protocol's cost over raw datagrams).
    let over_udp = jobs.iter().find(|job| job[0].text(REQUESTED) == Some("udp")).or(jobs.first());
    let ratio = over_udp.filter(|_| ratio).map(|job| {
        let heading = match jobs.len() {
            1 => "bulkwire/udp-bp".to_string(),
            _ => format!("bulkwire {}/udp-bp", transport::label(job[0])),
        };
        (heading, job.clone(), of("udp", "busy-poll"))
    });
    let median =
        |rows: &[&Row], size: u64| rows.iter().find(|r| r.size_bytes == Some(size)).and_then(|r| r.num("median_us"));
    let width = |heading: &str| heading.len().max(10) + 2;
    let mut o = format!("{:>9}", "size");
    for (heading, _) in &columns {
        o.push_str(&format!(" {heading:>w$}", w = width(heading)));
    }
    if let Some((heading, _, _)) = &ratio {
        o.push_str(&format!(" {heading:>w$}", w = width(heading)));
    }
    o.push('\n');
    for size in sizes_of(rows.iter().copied()) {
        o.push_str(&format!("{size:>9}"));
        for (heading, rows) in &columns {
            o.push_str(&format!(" {:>w$}", opt(median(rows, size), 2), w = width(heading)));
        }
        if let Some((heading, bulkwire, udp)) = &ratio {
            let value = median(bulkwire, size).zip(median(udp, size)).map(|(b, u)| b / u);
            o.push_str(&format!(" {:>w$}", opt(value, 2), w = width(heading)));
        }
        o.push('\n');
    }
    o
}

pub(crate) fn table(report: &Report) -> String {
    let ranks = report.table("pingpong").next().map_or(2, |r| r.procs);
    let mut o = match ranks {
        2 => "# half round trip, median, microseconds; 2 ranks\n".to_string(),
        n => format!("# half round trip, median, microseconds; {n} ranks, {} pairs at once, pair 0-1 shown\n", n / 2),
    };
    o.push_str(&transport::legend(report, "pingpong"));
    o.push_str(&format!(
        "# raw udp above {UDP_MAX_PAYLOAD} B: datagrams of at most that, each with a header, read in place; nothing \
         acknowledged or resent\n"
    ));
    o.push_str(&round_trip_lines(report, "pingpong", true));
    o
}

/// The same sweep for the Open MPI program (which adds its transport).
pub(crate) fn mpi_args(args: &Args) -> Vec<String> {
    let iterations = args.iterations.to_string();
    let (min, max) = (args.min_size.to_string(), args.max_size.to_string());
    ["pingpong", "--iterations", &iterations, "--min-size", &min, "--max-size", &max].map(String::from).to_vec()
}
