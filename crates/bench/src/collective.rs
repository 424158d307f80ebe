//! `bulkwire bench bcast` and `bench allreduce`: a group collective over
//! every process of the job, for each size and each algorithm that runs it
//! (and the automatic choice), over bulkwire's shared memory or UDP
//! (`--transport`, a job each), beside Open MPI's `MPI_Bcast` or
//! `MPI_Allreduce` over its shared memory and over TCP, measured in the same
//! run (seed 004 Figure 6).
//! Each operation starts after a barrier and is timed as the slowest
//! process's time (the same rule as `scripts/ompi/bench.c`); rows give the
//! median. Broadcasts also run with confirmed delivery at one size, where
//! the root counts the acknowledgements it receives: one per child of the
//! tree, not one per member (seed 004's ack merging).

use bulkwire_comm::{CommError, World};
use bulkwire_groups::{Algorithm, Delivery, Group, GroupError, Groups, Op, Operation};
use serde::{Deserialize, Serialize};

use crate::mpi::MpiTransport;
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};
use crate::{median_us, mib};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Processes.
    #[arg(short = 'n', long = "np", default_value_t = 8)]
    pub ranks: u32,
    /// Largest message (bytes): sizes run 8, 64, 256, ... by powers of 4
    /// up to it, and 32 KiB (seed 004 Figure 6's largest).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
    /// Timed operations per size and algorithm (after a tenth as many, at
    /// least two, to warm up).
    #[arg(long, default_value_t = 30)]
    pub repetitions: u32,
    /// Leave out the Open MPI reference.
    #[arg(long)]
    pub no_mpi: bool,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
}

/// The size at which broadcasts also run with confirmed delivery.
pub const CONFIRMED_SIZE: usize = 32 << 10;

impl Args {
    pub fn sizes(&self) -> Vec<usize> {
        let mut s = crate::sizes(8, self.max_size.max(8));
        if self.max_size >= CONFIRMED_SIZE && !s.contains(&CONFIRMED_SIZE) {
            s.push(CONFIRMED_SIZE);
            s.sort_unstable();
        }
        s
    }

    /// The Open MPI reference, measured by the launching process.
    pub fn open_mpi(&self, op: Operation, remote: Option<&crate::mpi::Hosts<'_>>) -> Report {
        if self.no_mpi {
            return Report::default();
        }
        let sizes: Vec<String> = self.sizes().iter().map(|s| s.to_string()).collect();
        let args = [
            op.name().to_string(),
            "--iterations".into(),
            self.repetitions.max(1).to_string(),
            "--sizes".into(),
            sizes.join(","),
        ];
        let over = self.transport.mpi(remote.is_some());
        crate::mpi_reference(remote, self.ranks, &over, &args, op.name(), "median_us")
    }
}

/// What each rank does; rank 0 returns the rows.
pub fn rank(world: &World, args: &Args, op: Operation) -> Result<Vec<Row>, CommError> {
    let groups = Groups::new(world).map_err(to_comm)?;
    let all = groups.world();
    let p = world.size();
    // Rows name the transport the root reaches the others by, and the one
    // the job asked for.
    let over = transport::reached(world.runtime(), 1..p);
    let requested = args.transport.requested().as_str();
    let mut rows = Vec::new();
    // As the reference: a job's first operations are slower where
    // processes share cores.
    for _ in 0..1000 {
        all.barrier().map_err(to_comm)?;
    }
    let algorithms: Vec<Option<Algorithm>> =
        std::iter::once(None).chain(Algorithm::ALL.into_iter().filter(|a| a.supports(op)).map(Some)).collect();
    for size in args.sizes() {
        for &algorithm in &algorithms {
            all.set_algorithm(op, algorithm).map_err(to_comm)?;
            let confirmed = [false, true];
            for &confirm in confirmed.iter().take(if op == Operation::Bcast && size == CONFIRMED_SIZE { 2 } else { 1 })
            {
                all.set_delivery(if confirm { Delivery::Confirmed } else { Delivery::Sent }).map_err(to_comm)?;
                let acks_before = groups.stats().acks_received;
                let median = time(world, &all, op, size, args.repetitions).map_err(to_comm)?;
                let acks = groups.stats().acks_received - acks_before;
                let reps = args.repetitions.max(1) as u64 + warm_up(args.repetitions) as u64;
                let chosen = all.algorithm(op, size).map_err(to_comm)?;
                let what = match algorithm {
                    Some(a) => a.name().to_string(),
                    None => format!("auto ({chosen})"),
                };
                let what = if confirm { format!("{what}, confirmed") } else { what };
                let row = Row::new(op.name(), "bulkwire", what, p)
                    .size(size)
                    .with("median_us", median)
                    .with("algorithm", algorithm.unwrap_or(chosen).name())
                    .with("confirmed", confirm)
                    .with(transport::TRANSPORT, over)
                    .with(REQUESTED, requested);
                // The root is rank 0: the acknowledgements it received per
                // broadcast, against the members that have the data.
                let row = if confirm {
                    row.with("acks_at_root_count", acks / reps).with("members_count", p - 1)
                } else {
                    row
                };
                rows.push(row);
            }
        }
    }
    all.set_delivery(Delivery::Sent).map_err(to_comm)?;
    Ok(rows)
}

fn warm_up(reps: u32) -> u32 {
    (reps / 10).max(2)
}

/// The median over `reps` operations of the slowest process's time, in
/// microseconds (on rank 0).
fn time(world: &World, all: &Group<'_>, op: Operation, size: usize, reps: u32) -> Result<f64, GroupError> {
    let mut bytes = vec![7u8; size];
    let mut numbers = vec![1.0f64; (size / 8).max(1)];
    let mut samples = Vec::new();
    let warm = warm_up(reps);
    for r in 0..reps.max(1) + warm {
        all.barrier()?;
        let t = world.wtime();
        match op {
            Operation::Bcast => all.bcast(0, &mut bytes)?,
            _ => all.allreduce(&mut numbers, Op::Sum)?,
        }
        let mut slowest = [world.wtime() - t];
        all.reduce(0, &mut slowest, Op::Max)?;
        if r >= warm {
            samples.push(slowest[0]);
        }
        numbers.fill(1.0);
    }
    let expect = world.size() as f64;
    if op == Operation::Allreduce
        && all.allreduce(&mut numbers, Op::Sum).is_ok()
        && numbers.iter().any(|&x| x != expect)
    {
        world.abort("allreduce: a wrong sum");
    }
    if bytes.iter().any(|&b| b != 7) {
        world.abort("bcast: the data did not arrive");
    }
    Ok(median_us(samples))
}

fn to_comm(e: GroupError) -> CommError {
    match e {
        GroupError::Runtime(r) => CommError::Runtime(r),
        other => CommError::Runtime(bulkwire_runtime::RuntimeError::Stopped(other.to_string())),
    }
}

pub(crate) fn table(op: Operation, report: &Report) -> String {
    let name = op.name();
    let rows: Vec<&Row> = report.table(name).collect();
    let p = rows.first().map_or(0, |r| r.procs);
    let mut o = format!("# {name}: {p} processes, median of the slowest process's time, each after a barrier\n");
    o.push_str(&transport::legend(report, name));
    o.push_str("# x mpi: over Open MPI on the transport of the same kind (shm beside shm, udp beside tcp)\n");
    o.push_str(&format!(
        "{:<12} {:<32} {:>10} {:>12} {:>8} {:>10}\n",
        "transport", "", "size", "median us", "x mpi", "root acks"
    ));
    let jobs = transport::jobs(&rows);
    for size in crate::sizes_of(rows.iter().copied()) {
        let at = |r: &&&Row| r.size_bytes == Some(size);
        let mpi_over = |over: MpiTransport| {
            rows.iter().filter(at).find(|r| r.source == "mpi" && transport::of_row(r) == over.as_str()).copied()
        };
        let line = |o: &mut String, label: String, r: &Row, ratio: Option<f64>| {
            let acks = match (r.num("acks_at_root_count"), r.num("members_count")) {
                (Some(a), Some(m)) => format!("{a:.0} of {m:.0}"),
                _ => "-".into(),
            };
            o.push_str(&format!(
                "{:<12} {:<32} {:>10} {:>12} {:>8} {:>10}\n",
                label,
                r.what,
                if size >= 1 << 20 { mib(size as usize) } else { size.to_string() },
                opt(r.num("median_us"), 1),
                opt(ratio, 2),
                acks
            ));
        };
        for job in &jobs {
            // Open MPI beside the job: over shared memory beside the job
            // that asked for it, over TCP beside the one over UDP.
            let over = match job[0].text(REQUESTED) {
                Some("udp") => MpiTransport::Tcp,
                _ => MpiTransport::Shm,
            };
            let mpi = mpi_over(over);
            for r in job.iter().filter(at) {
                let ratio = r.num("median_us").zip(mpi.and_then(|m| m.num("median_us"))).map(|(b, m)| b / m);
                line(&mut o, format!("bulkwire {}", transport::label(r)), r, ratio);
            }
        }
        for over in [MpiTransport::Shm, MpiTransport::Tcp] {
            if let Some(r) = mpi_over(over) {
                line(&mut o, format!("open mpi {}", over.as_str()), r, None);
            }
        }
    }
    o
}
