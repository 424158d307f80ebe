//! `bulkwire bench bw`: streaming throughput as OSU's osu_bw measures it.
//! Rank 0 posts a window of non-blocking sends, waits for them, and waits
//! for a short acknowledgement from rank 1, which posted as many receives;
//! the throughput is the bytes of the timed windows over the sender's time.
//! TCP and raw UDP run the same windows between the same two processes.
//! bulkwire runs over its shared memory or UDP (`--transport`), Open MPI
//! beside it over shared memory and TCP.

use std::time::Instant;

use bulkwire_comm::{CommError, Source, Tag, World};
use serde::{Deserialize, Serialize};

use crate::reference::{Sockets, WindowResult, UDP_MAX_PAYLOAD};
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};
use crate::{intact, io, mb_per_s, receive, receives_into, sizes_from, sizes_of};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Windows timed per size (fewer for large sizes), after one to warm up.
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    /// Messages in flight per window (OSU uses 64).
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// Largest size, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
    /// Smallest size, bytes: the sweep's sizes below it are left out.
    #[arg(long, default_value_t = 0)]
    pub min_size: usize,
    /// Leave out the Open MPI reference (the same sweep with Open MPI over
    /// shared memory and TCP).
    #[arg(long)]
    pub no_mpi: bool,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
}

/// Bytes of one window at most: 64 messages of 4 MiB would hold 256 MiB of
/// copies on each side of a shared machine.
const WINDOW_BYTES: usize = 64 << 20;
/// Bytes moved per size and transport at most.
const BUDGET: usize = 512 << 20;

/// Turns of bulkwire and TCP per size, and the fewest windows a turn has.
const TURNS: usize = 4;
const TURN_LEAST: usize = 2;

const DATA: i32 = 201;
const ACK: i32 = 202;
const COUNTS: i32 = 203;

/// Rows of table `bw`: per size, bulkwire, and TCP and raw UDP unless they
/// were measured in an earlier job.
pub(crate) fn rank(world: &World, args: &Args) -> Result<Vec<Row>, CommError> {
    let me = world.rank();
    let (peer, sender) = (1 - me, me == 0);
    let mut sockets = Sockets::open(world, &[peer])?;
    let references = !args.transport.references_done;
    let requested = args.transport.requested().as_str();
    let over = transport::reached(world.runtime(), [peer]);
    let mut rows = Vec::new();
    for size in sizes_from(1, args.min_size, args.max_size) {
        let window = args.window.clamp(1, (WINDOW_BYTES / size).max(1));
        let windows = (args.iterations as usize).min(BUDGET / (size * window)).max(2);
        // bulkwire and TCP take turns (a quarter of the windows each, four
        // times) where a size has enough windows: the machine's speed,
        // which can change within a second, then weighs on both alike.
        let turns = if references && windows >= TURNS * TURN_LEAST { TURNS } else { 1 };
        let windows = windows / turns * turns;
        let sent = (size * window * windows) as u64;

        let mut bulkwire = None;
        let mut tcp_seconds = None;
        for _ in 0..turns {
            world.barrier()?;
            let ours = bulkwire_window(world, peer, sender, size, window, windows / turns)?;
            bulkwire = Some(match (bulkwire, ours) {
                (Some(WindowResult::Seconds(a)), WindowResult::Seconds(b)) => WindowResult::Seconds(a + b),
                (Some(WindowResult::Delivered(a)), WindowResult::Delivered(b)) => WindowResult::Delivered(a + b),
                (_, ours) => ours,
            });
            if references {
                world.barrier()?;
                let tcp = sockets.tcp_window(peer, sender, size, window, windows / turns).map_err(io)?;
                tcp_seconds = Some(tcp_seconds.unwrap_or(0.0) + tcp);
            }
        }
        let bulkwire = bulkwire.expect("at least one turn");
        let udp = match references {
            true => {
                world.barrier()?;
                Some(sockets.udp_window(world, peer, sender, size, window, windows)?)
            }
            false => None,
        };

        // The receiver counted what arrived; the sender timed it.
        let (bulkwire, udp) = match (bulkwire, udp) {
            (WindowResult::Delivered(b), udp) => {
                let u = match udp {
                    Some(WindowResult::Delivered(u)) => u,
                    _ => 0,
                };
                world.send(peer, COUNTS, &[b.to_le_bytes(), u.to_le_bytes()].concat())?;
                continue;
            }
            (WindowResult::Seconds(b), None) => (b, None),
            (WindowResult::Seconds(b), Some(WindowResult::Seconds(u))) => (b, Some(u)),
            _ => unreachable!("one side sends, the other receives"),
        };
        let (_, counts) = world.recv(Source::Rank(peer), Tag::Is(COUNTS))?;
        let count = |i: usize| u64::from_le_bytes(counts[8 * i..8 * i + 8].try_into().expect("two counts"));
        let (bulkwire_received, udp_received) = (count(0), count(1));
        let row = |source: &str, what: &str, mb_per_s: f64| {
            Row::new("bw", source, what, world.size())
                .size(size)
                .with("mb_per_s", mb_per_s)
                .with("window_messages", window)
                .with("windows_count", windows)
        };
        let delivered = |received: u64| received as f64 / sent as f64;
        rows.push(
            row("bulkwire", over, mb_per_s(sent, bulkwire))
                .with("sent_bytes", sent)
                .with("received_bytes", bulkwire_received)
                .with("delivered_share", delivered(bulkwire_received))
                .with(REQUESTED, requested),
        );
        if let Some(tcp_seconds) = tcp_seconds {
            rows.push(row("tcp", "", mb_per_s(sent, tcp_seconds)));
        }
        // Raw UDP: what arrived over the sender's time.
        if let Some(udp) = udp {
            rows.push(
                row("udp", "", mb_per_s(udp_received, udp))
                    .with("sent_bytes", sent)
                    .with("received_bytes", udp_received)
                    .with("delivered_share", delivered(udp_received)),
            );
        }
    }
    world.barrier()?;
    Ok(rows)
}

/// bulkwire side of a windowed stream: the sender returns its time over the
/// timed windows, the receiver the bytes of the messages that arrived in
/// them (each checked for its length and contents).
fn bulkwire_window(
    world: &World,
    peer: u32,
    sender: bool,
    size: usize,
    window: usize,
    windows: usize,
) -> Result<WindowResult, CommError> {
    let data = vec![7u8; size];
    let mut buf = vec![0u8; size];
    let into = receives_into(world, peer);
    let mut delivered = 0u64;
    let mut start = Instant::now();
    for round in 0..windows + 1 {
        if round == 1 {
            start = Instant::now();
        }
        if sender {
            // Borrowing sends, as MPI_Isend's: a message lent to a peer on
            // this host is read from `data` itself.
            let sends = (0..window).map(|_| world.isend_borrowed(peer, DATA, &data)).collect::<Result<Vec<_>, _>>()?;
            world.wait_borrowed(sends)?;
            world.recv(Source::Rank(peer), Tag::Is(ACK))?;
        } else {
            // Each message in turn, into one buffer where it goes straight
            // there (a message lent by a peer on this host is read into it
            // from the sender's memory).
            for _ in 0..window {
                let got = receive(world, peer, DATA, into, &mut buf)?;
                if round > 0 && intact(&got, size) {
                    delivered += got.len() as u64;
                }
            }
            world.send(peer, ACK, &[])?;
        }
    }
    Ok(match sender {
        true => WindowResult::Seconds(start.elapsed().as_secs_f64()),
        false => WindowResult::Delivered(delivered),
    })
}

pub(crate) fn table(report: &Report) -> String {
    let window = report.table("bw").next().and_then(|r| r.num("window_messages")).unwrap_or(64.0);
    let mut o = format!(
        "# streaming throughput, MB/s (10^6 B/s); 2 ranks; a window of up to {window} messages (at most {} MiB) \
         in flight, then an acknowledgement\n",
        WINDOW_BYTES >> 20
    );
    o.push_str(&format!(
        "# udp: raw datagrams of at most {UDP_MAX_PAYLOAD} B, each window blasted then acknowledged, nothing \
         resent: what arrived over the sender's time\n"
    ));
    o.push_str(&transport::legend(report, "bw"));
    let rows: Vec<&Row> = report.table("bw").collect();
    let jobs = transport::jobs(&rows);
    let mut mpi: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.source == "mpi") {
        if !mpi.contains(&r.what.as_str()) {
            mpi.push(&r.what);
        }
    }
    // bulkwire over TCP: its job over UDP where there are two.
    let over_udp = jobs.iter().position(|job| job[0].text(REQUESTED) == Some("udp")).unwrap_or(0);
    let ratio = match jobs.len() {
        0 | 1 => "bulkwire/tcp".to_string(),
        _ => format!("bulkwire {}/tcp", transport::label(jobs[over_udp][0])),
    };
    let headings: Vec<String> = jobs
        .iter()
        .map(|job| format!("bulkwire {}", transport::label(job[0])).trim_end().to_string())
        .chain(["tcp", "udp", "udp loss"].map(String::from))
        .chain([ratio, "delivered".to_string()])
        .chain(mpi.iter().map(|what| format!("open mpi {what}")))
        .collect();
    let width = |heading: &str| heading.len().max(10) + 2;
    o.push_str(&format!("{:>9}", "size"));
    for h in &headings {
        o.push_str(&format!(" {h:>w$}", w = width(h)));
    }
    o.push('\n');
    for size in sizes_of(rows.iter().copied()) {
        let at = |rows: &[&Row], name: &str| rows.iter().find(|r| r.size_bytes == Some(size)).and_then(|r| r.num(name));
        let of = |source: &str, what: &str| -> Vec<&Row> {
            rows.iter().copied().filter(|r| r.source == source && r.what == what).collect()
        };
        let (t, u) = (at(&of("tcp", ""), "mb_per_s"), at(&of("udp", ""), "delivered_share"));
        let mut cells: Vec<String> = jobs.iter().map(|job| opt(at(job, "mb_per_s"), 2)).collect();
        cells.push(opt(t, 2));
        cells.push(opt(at(&of("udp", ""), "mb_per_s"), 2));
        cells.push(opt(u.map(|d| (1.0 - d) * 100.0), 1) + "%");
        let b = jobs.get(over_udp).and_then(|job| at(job, "mb_per_s"));
        cells.push(opt(b.zip(t.filter(|&t| t > 0.0)).map(|(b, t)| b / t), 2));
        let all = !jobs.is_empty() && jobs.iter().all(|job| at(job, "delivered_share") == Some(1.0));
        cells.push(if all { "all" } else { "NOT ALL" }.to_string());
        cells.extend(mpi.iter().map(|what| opt(at(&of("mpi", what), "mb_per_s"), 2)));
        o.push_str(&format!("{size:>9}"));
        for (h, cell) in headings.iter().zip(cells) {
            o.push_str(&format!(" {cell:>w$}", w = width(h)));
        }
        o.push('\n');
    }
    o
}

/// The same sweep for the Open MPI program.
pub(crate) fn mpi_args(args: &Args) -> Vec<String> {
    let (iterations, window) = (args.iterations.to_string(), args.window.to_string());
    let (min, max) = (args.min_size.to_string(), args.max_size.to_string());
    ["bw", "--iterations", &iterations, "--window", &window, "--min-size", &min, "--max-size", &max]
        .map(String::from)
        .to_vec()
}
