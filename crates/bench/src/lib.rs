//! Benchmarks on real processes, each figure beside references measured in
//! the same run between the same processes, and the row format in which
//! every benchmark and experiment reports ([`rows`]).
//!
//! A benchmark is one module: its arguments, what each rank of the job does
//! (`rank`, which returns the rows on rank 0) and its table. The references
//! that run in the same processes (raw UDP and TCP, [`reference`]) see the
//! same scheduling and the same interface; those that start processes of
//! their own (Open MPI, [`mpi`]) run around the job, from the process that
//! launched it ([`Bench::before_job`], [`Bench::after_job`]).
//!
//! The `bulkwire bench` command launches a job whose ranks call [`rank`]
//! with the [`Bench`] as JSON, reads rank 0's [`Report`] and prints it.

pub mod rows;

mod bw;
mod collective;
mod echo;
mod endpoint;
mod incast;
mod mac;
pub mod mpi;
mod pingpong;
mod put;
pub mod reference;
pub mod scale;
pub mod solver;
mod total_exchange;
pub mod trace;
pub mod transport;

use std::borrow::Cow;

use bulkwire_comm::{CommError, World};
use bulkwire_runtime::Transport;
use serde::{Deserialize, Serialize};

use mpi::MpiTransport;

pub use rows::{Report, Row, Value};

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
    /// on and off, beside an empty sync, the same exchange over raw UDP
    /// (in a job over UDP) and Open MPI's MPI_Alltoall.
    TotalExchange(total_exchange::Args),
    /// BSP put bandwidth to a neighbour: each process puts 64 and 512 MiB
    /// (--sizes) into its right neighbour's area and syncs, with bsp_put
    /// and bsp_hpput, beside Open MPI's MPI_Isend/MPI_Irecv ring.
    Put(put::Args),
    /// Group broadcast from process 0 to every process, 8 B to 4 MiB, for
    /// each algorithm and the automatic choice (with confirmed delivery at
    /// 32 KiB: acknowledgements merged up the tree), over bulkwire's shared
    /// memory and UDP, beside Open MPI's MPI_Bcast over shared memory and TCP.
    Bcast(collective::Args),
    /// Group allreduce (sum of doubles), 8 B to 4 MiB, for each algorithm
    /// and the automatic choice, over bulkwire's shared memory and UDP,
    /// beside Open MPI's MPI_Allreduce over shared memory and TCP.
    Allreduce(collective::Args),
    /// One task's traffic (seed 000's PDE1 or PDE2 trace) from rank 0 to
    /// rank 1: task-to-task latency, the share of data on the premium
    /// path, bandwidth per class with feedback. Both ranks on one machine.
    Trace(trace::Args),
    /// Seed 003's asynchronous iterative solver (A x + b = 0 by Jacobi's
    /// iteration) over the shared memory with writes flushed under Warp
    /// control and at a fixed threshold, beside a synchronous BSP version
    /// and Open MPI: time to converge, sweeps, bytes, packets resent.
    Solver(solver::Args),
    /// How costs grow with the number of processes: for each count of
    /// --procs, a job that measures each process's memory (peak and
    /// current resident set, at start and after a BSP section), an empty
    /// sync, a comm barrier and a small total exchange, beside Open MPI's
    /// MPI_Barrier and MPI_Alltoall for the same count.
    Scale(scale::Args),
    /// What sealing or checking one datagram costs: bulkwire's MAC
    /// (AES-256-GCM-SIV's tag) beside the aes-gcm-siv crate's,
    /// SipHash-2-4-128 and keyed BLAKE3 over the same bytes, in this
    /// process (no job).
    Mac(mac::Args),
    /// The protocol's own work per message and per datagram: two endpoints
    /// in this process (no sockets), a stream and hops of each size,
    /// beside the MAC and one copy of the same datagrams (no job).
    Endpoint(endpoint::Args),
}

impl Bench {
    /// Processes of the job.
    pub fn ranks(&self) -> u32 {
        match self {
            Bench::Pingpong(a) => a.ranks,
            Bench::Bw(_) | Bench::Echo(_) | Bench::Trace(_) => 2,
            Bench::Incast(a) => a.senders + 1,
            Bench::TotalExchange(a) => a.ranks,
            Bench::Put(a) => a.ranks,
            Bench::Solver(a) => a.ranks,
            Bench::Bcast(a) | Bench::Allreduce(a) => a.ranks,
            Bench::Scale(a) => a.ranks,
            Bench::Mac(_) | Bench::Endpoint(_) => 1,
        }
    }

    /// `--transport`, for the benchmarks that have it.
    fn transport(&self) -> Option<&transport::TransportArgs> {
        match self {
            Bench::Pingpong(a) => Some(&a.transport),
            Bench::Bw(a) => Some(&a.transport),
            Bench::TotalExchange(a) => Some(&a.transport),
            Bench::Put(a) => Some(&a.transport),
            Bench::Scale(a) => Some(&a.transport),
            Bench::Bcast(a) | Bench::Allreduce(a) => Some(&a.transport),
            _ => None,
        }
    }

    /// The jobs to run, one after the other, whose rows make the report:
    /// each spec with the transport its ranks are to ask for
    /// ([`transport::SHM`] in their environment; `None`: the job's default).
    /// `remote`: the ranks run on other hosts.
    pub fn jobs(&self, remote: bool) -> Vec<(Bench, Option<Transport>)> {
        // Studies of the network (echo and ttcp, many to one) cross it
        // whatever the hosts: bulkwire over UDP, as its references.
        if self.in_process() {
            return Vec::new();
        }
        if matches!(self, Bench::Echo(_) | Bench::Incast(_)) {
            return vec![(self.clone(), Some(Transport::Udp))];
        }
        // A job per count of processes, each over every transport.
        if let Bench::Scale(a) = self {
            if a.ranks == 0 {
                return a.per_count().into_iter().flat_map(|one| Bench::Scale(one).jobs(remote)).collect();
            }
        }
        let Some(choice) = self.transport() else { return vec![(self.clone(), None)] };
        let mut jobs = Vec::new();
        for (i, transport) in choice.jobs(remote).into_iter().enumerate() {
            let mut bench = self.clone();
            let one = choice.for_job(transport, i == 0);
            match &mut bench {
                Bench::Pingpong(a) => a.transport = one,
                Bench::Bw(a) => a.transport = one,
                Bench::TotalExchange(a) => a.transport = one,
                Bench::Put(a) => a.transport = one,
                Bench::Scale(a) => a.transport = one,
                Bench::Bcast(a) | Bench::Allreduce(a) => a.transport = one,
                _ => unreachable!("a benchmark with --transport"),
            }
            jobs.push((bench, Some(transport)));
        }
        jobs
    }

    /// Refuses arguments the benchmark cannot run with.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Bench::Pingpong(a) if a.ranks < 2 || a.ranks % 2 != 0 => {
                Err("pingpong needs an even number of ranks (pairs)".into())
            }
            Bench::Pingpong(pingpong::Args { min_size, max_size, .. })
            | Bench::Bw(bw::Args { min_size, max_size, .. })
                if min_size > max_size =>
            {
                Err(format!("--min-size {min_size} is above --max-size {max_size}: no size to measure"))
            }
            Bench::Incast(a) if a.senders == 0 => Err("incast needs at least one sender (-k)".into()),
            Bench::TotalExchange(a) if a.ranks < 2 => Err("a total exchange needs at least two processes".into()),
            Bench::Put(a) => put::check(a),
            Bench::Scale(a) => a.check(),
            _ => Ok(()),
        }
    }

    /// Whether the benchmark runs in the launching process, no job.
    pub fn in_process(&self) -> bool {
        matches!(self, Bench::Mac(_) | Bench::Endpoint(_))
    }

    /// The report of a benchmark that runs in the launching process
    /// ([`Bench::in_process`]), or `None` for one that runs a job.
    pub fn measure_here(&self) -> Option<Result<Report, String>> {
        match self {
            Bench::Mac(a) => Some(Ok(mac::measure(a))),
            Bench::Endpoint(a) => Some(endpoint::measure(a)),
            _ => None,
        }
    }

    /// References measured by the launching process before the job
    /// (`remote`: the ranks run on these hosts, and Open MPI's with them).
    pub fn before_job(&self, remote: Option<&mpi::Hosts<'_>>) -> Report {
        let on_hosts = remote.is_some();
        match self {
            Bench::Pingpong(a) if !a.no_mpi => {
                let over = a.transport.mpi(on_hosts);
                open_mpi(remote, a.ranks, &over, &pingpong::mpi_args(a), "pingpong", "median_us")
            }
            Bench::Bw(a) if !a.no_mpi => {
                open_mpi(remote, 2, &a.transport.mpi(on_hosts), &bw::mpi_args(a), "bw", "mb_per_s")
            }
            Bench::TotalExchange(a) => a.open_mpi(remote, "before the job"),
            Bench::Put(a) if !a.no_mpi => {
                mpi_reference(remote, a.ranks, &a.transport.mpi(on_hosts), &put::mpi_args(a), "put", "mb_per_s")
            }
            Bench::Bcast(a) => a.open_mpi(bulkwire_groups::Operation::Bcast, remote),
            Bench::Allreduce(a) => a.open_mpi(bulkwire_groups::Operation::Allreduce, remote),
            Bench::Solver(a) if !a.no_mpi => {
                mpi_reference(remote, a.ranks, &[MpiTransport::Tcp], &a.mpi_args(), "solver", "seconds")
            }
            Bench::Scale(a) => a.open_mpi(on_hosts),
            _ => Report::default(),
        }
    }

    /// References measured again after the job, so that a reader sees
    /// whether the machine's speed moved while the job ran.
    pub fn after_job(&self, remote: Option<&mpi::Hosts<'_>>) -> Report {
        match self {
            Bench::TotalExchange(a) => a.open_mpi(remote, "after the job"),
            _ => Report::default(),
        }
    }

    /// The table of `report`, as text.
    pub fn table(&self, report: &Report) -> String {
        match self {
            Bench::Pingpong(_) => pingpong::table(report),
            Bench::Bw(_) => bw::table(report),
            Bench::Echo(a) => echo::table(a, report),
            Bench::Incast(a) => incast::table(a, report),
            Bench::TotalExchange(_) => total_exchange::table(report),
            Bench::Put(_) => put::table(report),
            Bench::Trace(_) => trace::table(report),
            Bench::Solver(_) => solver::table(report),
            Bench::Bcast(_) => collective::table(bulkwire_groups::Operation::Bcast, report),
            Bench::Allreduce(_) => collective::table(bulkwire_groups::Operation::Allreduce, report),
            Bench::Scale(_) => scale::table(report),
            Bench::Mac(_) => mac::table(report),
            Bench::Endpoint(_) => endpoint::table(report),
        }
    }
}

/// The Open MPI reference of a two-process sweep (`pingpong`, `bw`) over
/// each of `over`, measured by the launching process: rows, or a note
/// saying why there are none.
fn open_mpi(
    remote: Option<&mpi::Hosts<'_>>,
    ranks: u32,
    over: &[MpiTransport],
    args: &[String],
    bench: &str,
    metric: &str,
) -> Report {
    if ranks != 2 {
        return Report { rows: Vec::new(), notes: vec!["no Open MPI reference: it runs one pair of processes".into()] };
    }
    mpi_reference(remote, ranks, over, args, bench, metric)
}

/// Open MPI's rows of table `bench` on `procs` processes over each of
/// `over` (the program built once, [`mpi::Program`]), measured by the
/// launching process (its ranks on `remote`'s hosts, else on this one), or
/// notes saying why there are none.
fn mpi_reference(
    remote: Option<&mpi::Hosts<'_>>,
    procs: u32,
    over: &[MpiTransport],
    args: &[String],
    bench: &str,
    metric: &str,
) -> Report {
    let missing = |why: &str| Report { rows: Vec::new(), notes: vec![format!("no Open MPI reference: {why}")] };
    let program = match mpi::Program::build() {
        Ok(program) => program,
        Err(why) => return missing(&why),
    };
    let mut report = Report::default();
    for &transport in over {
        match program.rows(procs, remote, transport, args, bench, metric) {
            Ok(rows) => report.rows.extend(rows),
            Err(why) => report.notes.push(format!("no Open MPI reference over {}: {why}", transport.describe())),
        }
    }
    report
}

/// What one rank of a benchmark job does; rank 0 returns the rows.
pub fn rank(bench: &Bench) -> Result<Option<Report>, String> {
    // BSP benchmarks join the job through bsp, not comm (one runtime per process).
    if let Bench::TotalExchange(a) = bench {
        return total_exchange::rank(a);
    }
    if let Bench::Put(a) = bench {
        return put::rank(a).map_err(|e| e.to_string());
    }
    // Memory from before the runtime starts, comm and BSP on one runtime.
    if let Bench::Scale(a) = bench {
        return scale::rank(a);
    }
    if bench.in_process() {
        return Err("this benchmark runs no job: its figures are the launching process's".into());
    }
    // The solver runs BSP on the job's runtime beside the shared memory:
    // its world lives as long as the process.
    if let Bench::Solver(a) = bench {
        let run = || -> Result<Option<Report>, CommError> {
            let world: &'static World = Box::leak(Box::new(World::init()?));
            let rows = solver::rank(world, a)?;
            world.runtime().finish()?;
            Ok((world.rank() == 0).then(|| Report { rows, notes: Vec::new() }))
        };
        return run().map_err(|e| e.to_string());
    }
    let run = || -> Result<Option<Report>, CommError> {
        let world = World::init()?;
        if world.size() != bench.ranks() {
            world.abort(&format!("this benchmark needs {} ranks", bench.ranks()));
            return Ok(None);
        }
        let rows = match bench {
            Bench::Pingpong(a) => pingpong::rank(&world, a)?,
            Bench::Bw(a) => bw::rank(&world, a)?,
            Bench::Echo(a) => echo::rank(&world, a)?,
            Bench::Incast(a) => incast::rank(&world, a)?,
            Bench::Trace(a) => trace::rank(&world, a)?,
            Bench::Bcast(a) => collective::rank(&world, a, bulkwire_groups::Operation::Bcast)?,
            Bench::Allreduce(a) => collective::rank(&world, a, bulkwire_groups::Operation::Allreduce)?,
            Bench::TotalExchange(_)
            | Bench::Put(_)
            | Bench::Solver(_)
            | Bench::Scale(_)
            | Bench::Mac(_)
            | Bench::Endpoint(_) => {
                unreachable!("run above")
            }
        };
        let notes = transport::notes(&rows);
        let report = (world.rank() == 0).then_some(Report { rows, notes });
        world.finalize()?;
        Ok(report)
    };
    run().map_err(|e| e.to_string())
}

/// [`sizes`] from `min` on.
fn sizes_from(first: usize, min: usize, max: usize) -> Vec<usize> {
    sizes(first, max).into_iter().filter(|&s| s >= min).collect()
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

/// How the benchmarks receive from `peer`: into a buffer of their own (as
/// `MPI_Recv` into a buffer of the caller's; [`World::recv_into`]) where
/// the peer is on this host; as a buffer the runtime returns
/// ([`World::recv`]) over UDP, as their figures over UDP always have been.
/// Either way the message is put together where it is received: over UDP
/// `recv_into` reassembles it in the caller's buffer, and costs what `recv`
/// does (`bench pingpong --transport udp`, three alternating runs, 1 MiB:
/// 1.16-1.26x raw UDP's half round trip by `recv_into`, 1.06-1.27x by
/// `recv`). `true`: into a buffer of their own.
fn receives_into(world: &World, peer: u32) -> bool {
    world.runtime().transport(peer) == Transport::Shm
}

/// Receives the next message from `peer` with `tag`, into `buf` where
/// `into` ([`receives_into`]).
fn receive<'a>(world: &World, peer: u32, tag: i32, into: bool, buf: &'a mut [u8]) -> Result<Cow<'a, [u8]>, CommError> {
    let from = bulkwire_comm::Source::Rank(peer);
    if into {
        // Its ends cleared, so that a message that did not arrive whole does
        // not pass for one (see [`intact`]).
        if let [first, .., last] = &mut buf[..] {
            (*first, *last) = (0, 0);
        }
        let status = world.recv_into(from, bulkwire_comm::Tag::Is(tag), buf)?;
        return Ok(Cow::Borrowed(&buf[..status.len]));
    }
    Ok(Cow::Owned(world.recv(from, bulkwire_comm::Tag::Is(tag))?.1))
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

/// The sizes that `rows` hold, in the order they first appear.
fn sizes_of<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<u64> {
    let mut sizes = Vec::new();
    for s in rows.filter_map(|r| r.size_bytes) {
        if !sizes.contains(&s) {
            sizes.push(s);
        }
    }
    sizes
}

/// One measurement of K senders streaming to one receiver, seen at the
/// receiver.
#[derive(Debug, Default, Clone)]
pub struct Flow {
    /// Payload bytes the senders handed over.
    pub bytes_sent: u64,
    /// Payload bytes that arrived.
    pub bytes_received: u64,
    /// From the start until the last byte arrived.
    pub seconds: f64,
    /// Raw UDP: datagrams sent and received.
    pub datagrams_sent: Option<u64>,
    pub datagrams_received: Option<u64>,
    /// Datagrams the receiving process's UDP sockets dropped because their
    /// buffers were full (kernel counter; UDP and bulkwire).
    pub socket_drops: Option<u64>,
    /// bulkwire: the protocol's counters over the flow, all ranks summed.
    pub protocol: Option<incast::ProtocolCounters>,
    /// Jain's index of the senders' throughputs (each sender's bytes over
    /// the time its last message arrived).
    pub fairness: Option<f64>,
}

impl Flow {
    fn new(bytes_sent: u64, bytes_received: u64, seconds: f64) -> Flow {
        Flow { bytes_sent, bytes_received, seconds, ..Flow::default() }
    }

    /// The flow as a row of table `bench` (`procs`: the processes of the job).
    fn row(&self, bench: &str, source: &str, what: &str, procs: u32, senders: usize, size: usize) -> Row {
        let delivered = if self.bytes_sent == 0 { 1.0 } else { self.bytes_received as f64 / self.bytes_sent as f64 };
        let mut row = Row::new(bench, source, what, procs)
            .size(size)
            .with("senders_count", senders)
            .with("mb_per_s", mb_per_s(self.bytes_received, self.seconds))
            .with("time_ms", self.seconds * 1e3)
            .with("sent_bytes", self.bytes_sent)
            .with("received_bytes", self.bytes_received)
            .with("delivered_share", delivered)
            .with_opt("sent_datagrams", self.datagrams_sent)
            .with_opt("received_datagrams", self.datagrams_received)
            .with_opt("socket_drops_datagrams", self.socket_drops)
            .with_opt("jain_index", self.fairness);
        if let Some(p) = &self.protocol {
            row = row
                .with("data_packets", p.data_packets)
                .with("retransmitted_packets", p.retransmissions)
                .with("timeouts_count", p.timeouts)
                .with("dropped_packets", p.drops)
                .with("duplicate_packets", p.duplicates);
        }
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_run_in_powers_of_four_up_to_the_largest() {
        assert_eq!(sizes(0, 70000), [0, 8, 64, 256, 1024, 4096, 16384, 65536, 70000]);
        assert_eq!(sizes(1, 4096), [1, 8, 64, 256, 1024, 4096]);
        assert_eq!(sizes_from(0, 1000, 70000), [1024, 4096, 16384, 65536, 70000]);
        assert_eq!(sizes_from(1, 4096, 4096), [4096]);
        let bw = |min_size, max_size| {
            Bench::Bw(bw::Args {
                iterations: 1,
                window: 1,
                max_size,
                min_size,
                no_mpi: true,
                transport: Default::default(),
            })
        };
        assert!(bw(4096, 4096).check().is_ok());
        let why = bw(4097, 4096).check().unwrap_err();
        assert!(why.contains("--min-size 4097 is above --max-size 4096"), "{why}");
    }

    #[test]
    fn a_spec_travels_to_the_ranks_as_json() {
        let bench =
            Bench::Incast(incast::Args { senders: 3, bytes: 10, sizes: vec![1, 2], warp: false, warp_capacity: None });
        let back: Bench = serde_json::from_str(&serde_json::to_string(&bench).unwrap()).unwrap();
        assert_eq!(back.ranks(), 4);
        assert!(Bench::Incast(incast::Args {
            senders: 0,
            bytes: 10,
            sizes: vec![1],
            warp: false,
            warp_capacity: None
        })
        .check()
        .is_err());
    }

    #[test]
    fn each_transport_is_a_job_of_its_own() {
        let bench = Bench::Bw(bw::Args {
            iterations: 1,
            window: 1,
            max_size: 8,
            min_size: 0,
            no_mpi: true,
            transport: transport::TransportArgs::default(),
        });
        let jobs = bench.jobs(false);
        assert_eq!(jobs.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [Some(Transport::Shm), Some(Transport::Udp)]);
        // What each job's ranks read back from its spec.
        let specs: Vec<transport::TransportArgs> = jobs
            .iter()
            .map(|(b, _)| match serde_json::from_str(&serde_json::to_string(b).unwrap()).unwrap() {
                Bench::Bw(a) => a.transport,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            specs.iter().map(|a| (a.requested(), a.references_done)).collect::<Vec<_>>(),
            [(Transport::Shm, false), (Transport::Udp, true)]
        );
        assert_eq!(bench.jobs(true).len(), 1);
        // Studies of the network cross it: one job, over UDP, on one host too.
        let echo = Bench::Echo(echo::Args { iterations: 1, ttcp_bytes: 1, ttcp_lengths: vec![1] });
        assert_eq!(echo.jobs(false).iter().map(|(_, t)| *t).collect::<Vec<_>>(), [Some(Transport::Udp)]);
    }
}
