//! `bulkwire bench`: benchmarks, each figure beside references measured in
//! the same run between the same processes.
//!
//! `bulkwire bench X` starts a job of ranks that run `__bench-rank` with the
//! subcommand and its arguments as JSON; rank 0 prints the results. The
//! references (raw UDP and TCP) use sockets opened by the same processes
//! (`reference.rs`), so they see the same scheduling and the same loopback.

mod bw;
mod echo;
mod incast;
mod mpi;
mod pingpong;
mod reference;
mod total_exchange;

use bulkwire_comm::{CommError, World};
use serde::{Deserialize, Serialize};

#[derive(clap::Subcommand, Debug, Clone, Serialize, Deserialize)]
pub enum Bench {
    /// Half round-trip latency between two ranks, 0 B to 4 MiB, beside raw
    /// UDP (busy-poll and blocking) and TCP (TCP_NODELAY) ping-pong.
    Pingpong(pingpong::Args),
    /// Streaming throughput with a window of outstanding sends (as OSU's
    /// osu_bw), 1 B to 4 MiB, beside TCP and raw UDP.
    Bw(bw::Args),
    /// Seed 001's network tests: echo round trips at 64 and 1500 bytes and
    /// ttcp-style memory-to-memory throughput, beside UDP and TCP.
    Echo(echo::Args),
    /// K senders to one receiver (many-to-one congestion): delivered
    /// throughput, drops and recovery, beside UDP and TCP.
    Incast(incast::Args),
    /// BSP total exchange (every process puts to every other in one
    /// superstep) for each destination order (latin, pid, random), pacing
    /// on and off, beside an empty sync.
    TotalExchange(total_exchange::Args),
}

impl Bench {
    fn ranks(&self) -> u32 {
        match self {
            Bench::Pingpong(a) => a.ranks,
            Bench::Bw(_) | Bench::Echo(_) => 2,
            Bench::Incast(a) => a.senders + 1,
            Bench::TotalExchange(a) => a.ranks,
        }
    }

    fn check(&self) -> Result<(), String> {
        match self {
            Bench::Pingpong(a) if a.ranks < 2 || a.ranks % 2 != 0 => {
                Err("pingpong needs an even number of ranks (pairs)".into())
            }
            Bench::Incast(a) if a.senders == 0 => Err("incast needs at least one sender (-k)".into()),
            Bench::TotalExchange(a) if a.ranks < 2 => Err("a total exchange needs at least two processes".into()),
            _ => Ok(()),
        }
    }
}

/// Where a benchmark's ranks run: this machine by default, or hosts
/// reached over a remote shell as with `bulkwire run --hosts` (for example
/// network namespaces of a test bed, with `scripts/netns-exec` as the shell).
#[derive(clap::Args, Debug, Clone)]
pub struct Placement {
    /// Run the ranks on these hosts (as `bulkwire run --hosts`).
    #[arg(long)]
    pub hosts: Option<String>,
    /// The remote shell for --hosts (as `bulkwire run --ssh`).
    #[arg(long, env = "BULKWIRE_SSH", default_value = "ssh")]
    pub ssh: String,
    /// Address of the rendezvous (as `bulkwire run --bind`).
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
}

pub fn run(bench: &Bench, placement: &Placement) -> Result<i32, String> {
    bench.check()?;
    let mut bench = bench.clone();
    if let Bench::TotalExchange(a) = &mut bench {
        a.measure_reference(placement.hosts.is_some());
    }
    let bench = &bench;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let spec = serde_json::to_string(bench).map_err(|e| e.to_string())?;
    let command = vec![exe.to_string_lossy().into_owned(), "__bench-rank".into(), spec];
    let mut args = crate::launch::Args::local(bench.ranks(), command);
    args.hosts = placement.hosts.clone();
    args.ssh = placement.ssh.clone();
    args.bind = placement.bind;
    let status = crate::launch::run(&args)?;
    if let Bench::TotalExchange(a) = bench {
        if status == 0 {
            a.measure_reference_again();
        }
    }
    Ok(status)
}

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// The benchmark and its arguments, as JSON.
    spec: String,
}

pub fn rank(args: &RankArgs) -> Result<(), String> {
    let bench: Bench = serde_json::from_str(&args.spec).map_err(|e| format!("bad benchmark spec: {e}"))?;
    // BSP benchmarks join the job through bsp, not comm (one runtime per process).
    if let Bench::TotalExchange(a) = &bench {
        return total_exchange::rank(a).map_err(|e| e.to_string());
    }
    let run = || -> Result<(), CommError> {
        let world = World::init()?;
        if world.size() != bench.ranks() {
            world.abort(&format!("this benchmark needs {} ranks", bench.ranks()));
            return Ok(());
        }
        match &bench {
            Bench::Pingpong(a) => pingpong::rank(&world, a)?,
            Bench::Bw(a) => bw::rank(&world, a)?,
            Bench::Echo(a) => echo::rank(&world, a)?,
            Bench::Incast(a) => incast::rank(&world, a)?,
            Bench::TotalExchange(_) => unreachable!("run through bsp above"),
        }
        world.finalize()
    };
    run().map_err(|e| e.to_string())
}

/// `first`, 8, then powers of 4 from 64 up to `max`, and `max` itself.
fn sizes(first: usize, max: usize) -> Vec<usize> {
    let mut s = vec![first];
    if max >= 8 && first < 8 {
        s.push(8);
    }
    let mut x = 64;
    while x <= max {
        s.push(x);
        x *= 4;
    }
    if *s.last().expect("nonempty") != max && max > 8 {
        s.push(max);
    }
    s
}

fn io(e: std::io::Error) -> CommError {
    CommError::Runtime(e.into())
}

/// Median of `samples` (seconds), in microseconds.
fn median_us(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2] * 1e6
}

/// Throughput in MB/s (10^6 bytes per second, as OSU and ttcp count).
fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    }
}

/// Whether a benchmark message arrived whole: its length and its first and
/// last bytes (every byte is 7). The MAC has already checked the contents;
/// comparing every byte would add work the TCP reference does not do.
fn intact(got: &[u8], size: usize) -> bool {
    got.len() == size && got.first().is_none_or(|&b| b == 7) && got.last().is_none_or(|&b| b == 7)
}

/// `bytes` in MiB, without decimals when whole.
fn mib(bytes: usize) -> String {
    match bytes % (1 << 20) {
        0 => format!("{} MiB", bytes >> 20),
        _ => format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64),
    }
}

/// `x` with `decimals`, or "-" where there is no figure.
fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
}

/// Rank 0 prints the rows: JSON, or the table.
fn report<T: Serialize + ?Sized>(world: &World, json: bool, rows: &T, table: impl FnOnce(&T)) {
    if world.rank() != 0 {
        return;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(rows).expect("rows serialise"));
    } else {
        table(rows);
    }
}

/// One measurement of K senders streaming to one receiver, seen at the
/// receiver.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Flow {
    /// Payload bytes the senders handed over.
    pub bytes_sent: u64,
    /// Payload bytes that arrived.
    pub bytes_received: u64,
    /// From the start until the last byte arrived.
    pub seconds: f64,
    /// `bytes_received / seconds`, MB/s.
    pub mb_per_s: f64,
    /// Raw UDP: datagrams sent and received.
    pub datagrams_sent: Option<u64>,
    pub datagrams_received: Option<u64>,
    /// Datagrams the receiving process's UDP sockets dropped because their
    /// buffers were full (kernel counter; UDP and bulkwire).
    pub socket_drops: Option<u64>,
    /// bulkwire: the protocol's counters over the flow, all ranks summed.
    pub protocol: Option<incast::ProtocolCounters>,
}

impl Flow {
    fn new(bytes_sent: u64, bytes_received: u64, seconds: f64) -> Flow {
        Flow { bytes_sent, bytes_received, seconds, mb_per_s: mb_per_s(bytes_received, seconds), ..Flow::default() }
    }

    /// The share of the bytes sent that did not arrive.
    fn loss(&self) -> f64 {
        if self.bytes_sent == 0 {
            0.0
        } else {
            1.0 - self.bytes_received as f64 / self.bytes_sent as f64
        }
    }
}
