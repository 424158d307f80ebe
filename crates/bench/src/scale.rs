//! `bulkwire bench scale`: how the runtime's costs grow with the number of
//! processes p. For each p of `--procs`, one job of p processes on this
//! machine (a job per transport of `--transport`) measures
//!
//! - each process's memory: peak and current resident set (VmHWM, VmRSS,
//!   and RssAnon, RssShmem of `/proc/self/status`) before the runtime
//!   starts, once it has started, and after a BSP section of a few hundred
//!   syncs; the largest and the median over the processes, and the bytes
//!   of the protocol endpoint's structures ([`Endpoint::footprint`]);
//! - the time of an empty `bsp_sync`, of a comm barrier
//!   ([`World::barrier`]) and of a total exchange of `--size` bytes per
//!   pair in one superstep, each the median at process 0 of many;
//!
//! and beside them, where Open MPI is installed, an empty `MPI_Barrier`
//! and an `MPI_Alltoall` of the same size for the same p (the program's
//! `alltoall` mode, see [`crate::mpi`]), over shared memory and TCP as
//! `--transport` says. Processes beyond the cores share them (Open MPI is
//! run with `--oversubscribe`).
//!
//! [`Endpoint::footprint`]: bulkwire_proto::Endpoint::footprint

use std::path::PathBuf;
use std::time::Instant;

use bulkwire_bsp::{Bsp, BspError};
use bulkwire_comm::{CommError, Source, Tag, World};
use serde::{Deserialize, Serialize};

use crate::median_us;
use crate::mpi::{MpiTransport, Program};
use crate::rows::{opt, Report, Row};
use crate::transport::{self, REQUESTED};

pub const BENCH: &str = "scale";

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct Args {
    /// Processes of each job: one job per count (per transport).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    pub procs: Vec<u32>,
    /// Timed operations of each kind with up to 8 processes; fewer beyond
    /// (8/p of them, at least 30), where each takes longer.
    #[arg(long, default_value_t = 300)]
    pub repetitions: u32,
    /// Bytes each process puts to each other in the total exchange.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Leave out the Open MPI reference (MPI_Barrier and MPI_Alltoall).
    #[arg(long)]
    pub no_mpi: bool,
    /// Draw time and memory against p into PNG files in this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub transport: transport::TransportArgs,
    /// The processes of this job (set by the launching process for each job).
    #[arg(skip)]
    #[serde(default)]
    pub ranks: u32,
}

/// Syncs of the BSP section before the memory is read again, at least.
const SECTION_SYNCS: u32 = 300;

/// The comm tag of the memory figures sent to process 0.
const MEMORY_TAG: i32 = 0x5ca1e;

impl Args {
    /// Timed operations of each kind with `p` processes.
    pub fn repetitions(&self, p: u32) -> u32 {
        let reps = self.repetitions.max(1);
        (reps * 8 / p.max(8)).max(30.min(reps))
    }

    /// Operations before the timed ones.
    fn warm_up(&self, p: u32) -> u32 {
        (self.repetitions(p) / 5).max(5)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.procs.is_empty() || self.procs.iter().any(|&p| p < 2) {
            return Err("bench scale needs process counts of at least 2 (--procs 2,4,8)".into());
        }
        Ok(())
    }

    /// Every job's spec: one per count of `--procs`.
    pub fn per_count(&self) -> Vec<Args> {
        self.procs.iter().map(|&p| Args { ranks: p, ..self.clone() }).collect()
    }

    /// The Open MPI reference for every count, over each transport of
    /// `--transport`, as rows of table `scale`, or notes saying why there
    /// are none.
    pub fn open_mpi(&self, remote: bool) -> Report {
        if let Some(report) = crate::mpi::left_out(self.no_mpi, remote) {
            return report;
        }
        let mut report = Report::default();
        let program = match Program::build() {
            Ok(program) => program,
            Err(why) => {
                report.notes.push(format!("no Open MPI reference: {why}"));
                return report;
            }
        };
        let size = self.size.max(1);
        for &p in &self.procs {
            let reps = self.repetitions(p).to_string();
            let args: Vec<String> = ["alltoall", "--iterations", &reps, "--max-size", &size.to_string()]
                .iter()
                .map(|a| a.to_string())
                .collect();
            for over in self.transport.mpi(remote) {
                // The program's rows are those of `bench total-exchange`.
                match program.rows(p, None, over, &args, "total-exchange", "median_us") {
                    Ok(rows) => report.rows.extend(rows.into_iter().map(|r| self.mpi_row(r, over))),
                    Err(why) => report
                        .notes
                        .push(format!("no Open MPI reference for {p} processes over {}: {why}", over.describe())),
                }
            }
        }
        report
    }

    /// A row of the program's `alltoall` mode as a row of table `scale`.
    fn mpi_row(&self, row: Row, over: MpiTransport) -> Row {
        let call = row.what.split_once(", ").map_or(row.what.as_str(), |(_, c)| c).to_string();
        let what = match call.as_str() {
            "MPI_Barrier" => "barrier".to_string(),
            _ => exchange(self.size),
        };
        let mut scaled = Row::new(BENCH, "mpi", format!("{}, {what}", over.as_str()), row.procs);
        if call != "MPI_Barrier" {
            scaled = scaled.size(self.size);
        }
        scaled.fields = row.fields;
        scaled.with("call", call)
    }
}

/// `what` of the total exchange's rows.
fn exchange(size: usize) -> String {
    match size {
        s if s >= 1024 && s % 1024 == 0 => format!("total exchange {} KiB", s / 1024),
        s => format!("total exchange {s} B"),
    }
}

/// The resident set of this process, in KiB, from `/proc/self/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// VmHWM: the peak resident set so far.
    pub peak: u64,
    /// VmRSS, and its parts: anonymous memory, shared memory (the rings
    /// of the shared-memory path), mapped files (the program).
    pub rss: u64,
    pub anon: u64,
    pub shmem: u64,
    pub file: u64,
}

impl Memory {
    /// This process's, now (zeros where the kernel does not say).
    pub fn now() -> Memory {
        std::fs::read_to_string("/proc/self/status").map(|s| Memory::parse(&s)).unwrap_or_default()
    }

    pub fn parse(status: &str) -> Memory {
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        Memory {
            peak: kib("VmHWM"),
            rss: kib("VmRSS"),
            anon: kib("RssAnon"),
            shmem: kib("RssShmem"),
            file: kib("RssFile"),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        for x in [self.peak, self.rss, self.anon, self.shmem, self.file] {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Option<Memory> {
        let x = |i: usize| Some(u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?));
        Some(Memory { peak: x(0)?, rss: x(1)?, anon: x(2)?, shmem: x(3)?, file: x(4)? })
    }
}

/// One process's figures, sent to process 0.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    before: Memory,
    started: Memory,
    after: Memory,
    /// The endpoint's structures after the syncs: its fixed part (itself,
    /// its channels, its per-peer state) and what it holds (packet
    /// buffers, queues), in bytes.
    endpoint_fixed: u64,
    endpoint_held: u64,
}

impl Sample {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for m in [&self.before, &self.started, &self.after] {
            m.encode(&mut out);
        }
        out.extend_from_slice(&self.endpoint_fixed.to_le_bytes());
        out.extend_from_slice(&self.endpoint_held.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Sample> {
        let memory = |i: usize| Memory::decode(bytes.get(i * 40..(i + 1) * 40)?);
        let word = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        Some(Sample {
            before: memory(0)?,
            started: memory(1)?,
            after: memory(2)?,
            endpoint_fixed: word(120)?,
            endpoint_held: word(128)?,
        })
    }
}

/// What one process of a job does; process 0 returns the rows.
pub fn rank(args: &Args) -> Result<Option<Report>, String> {
    let before = Memory::now();
    let world: &'static World = Box::leak(Box::new(World::init().map_err(|e| e.to_string())?));
    let started = Memory::now();
    let (me, p) = (world.rank(), world.size());
    if p != args.ranks {
        world.abort(&format!("this job of bench scale needs {} processes", args.ranks));
        return Ok(None);
    }
    let rt = world.runtime();
    let over = transport::reached(rt, (0..p).filter(|&q| q != me));
    let requested = args.transport.requested().as_str();
    let shares_cores = rt.shares_cores();
    let (reps, warm) = (args.repetitions(p) as usize, args.warm_up(p) as usize);
    let comm = |e: CommError| e.to_string();
    let bsp_error = |e: BspError| e.to_string();

    // The comm barrier.
    for _ in 0..warm {
        world.barrier().map_err(comm)?;
    }
    let mut barrier = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        world.barrier().map_err(comm)?;
        barrier.push(t.elapsed().as_secs_f64());
    }

    // The BSP section: empty syncs, then total exchanges.
    let mut bsp = Bsp::begin_on(rt).map_err(bsp_error)?;
    let size = args.size;
    let inbox = bsp.register::<u8>(size * p as usize).map_err(bsp_error)?;
    bsp.sync().map_err(bsp_error)?;
    let exchanges = warm + reps;
    let syncs_before = SECTION_SYNCS.saturating_sub(1 + (reps + exchanges) as u32).max(warm as u32);
    for _ in 0..syncs_before {
        bsp.sync().map_err(bsp_error)?;
    }
    let mut empty = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = bsp.time();
        bsp.sync().map_err(bsp_error)?;
        empty.push(bsp.time() - t);
    }
    let data = vec![me as u8 + 1; size];
    let mut exchange_times = Vec::with_capacity(exchanges);
    for _ in 0..exchanges {
        let t = bsp.time();
        for k in 1..p {
            bsp.put((me + k) % p, &data, &inbox, me as usize * size).map_err(bsp_error)?;
        }
        bsp.sync().map_err(bsp_error)?;
        exchange_times.push(bsp.time() - t);
    }
    let area = bsp.area(&inbox);
    if let Some(q) = (0..p).find(|&q| q != me && area[q as usize * size..][..size].iter().any(|&b| b != q as u8 + 1)) {
        return Err(format!("process {me}: the bytes from process {q} did not arrive"));
    }
    let syncs = 1 + syncs_before as usize + reps + exchanges;
    let barrier_shape = bsp.barrier();
    bsp.end().map_err(bsp_error)?;
    let after = Memory::now();
    let footprint = rt.with(|e| Ok(e.endpoint.footprint())).map_err(|e| e.to_string())?;
    let fixed = footprint.endpoint + footprint.channel_structs + footprint.peer_state;
    let mine = Sample {
        before,
        started,
        after,
        endpoint_fixed: fixed as u64,
        endpoint_held: (footprint.total() - fixed) as u64,
    };

    // Every process's memory, to process 0.
    let report = if me == 0 {
        let mut samples = vec![mine];
        for q in 1..p {
            let (_, bytes) = world.recv(Source::Rank(q), Tag::Is(MEMORY_TAG)).map_err(comm)?;
            samples.push(Sample::decode(&bytes).ok_or_else(|| format!("process {q} sent malformed figures"))?);
        }
        let named = |what: &str| Row::new(BENCH, "bulkwire", format!("{over}, {what}"), p).with(REQUESTED, requested);
        let timed = |row: Row, seconds: Vec<f64>| {
            let mean_us = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64 * 1e6;
            let min_us = seconds.iter().copied().fold(f64::INFINITY, f64::min) * 1e6;
            let count = seconds.len();
            row.with("median_us", median_us(seconds))
                .with("mean_us", mean_us)
                .with("min_us", min_us)
                .with("timed_count", count)
                .with("shares_cores", shares_cores)
        };
        let mut rows = vec![
            timed(named("empty sync"), empty).with("sync_barrier", barrier_shape.as_str()),
            timed(named("barrier"), barrier).with("call", "World::barrier"),
            timed(named(&exchange(size)).size(size), exchange_times.split_off(warm))
                .with("sync_barrier", barrier_shape.as_str()),
        ];
        for (what, pick) in [
            ("memory before start", (|s: &Sample| s.before) as fn(&Sample) -> Memory),
            ("memory at start", |s: &Sample| s.started),
            ("memory after syncs", |s: &Sample| s.after),
        ] {
            let memories: Vec<Memory> = samples.iter().map(pick).collect();
            let mut row = memory_row(named(what), &memories);
            if what == "memory after syncs" {
                let largest = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0) as f64 / 1024.0;
                row = row
                    .with("syncs_count", syncs)
                    .with("endpoint_kib", largest(|s| s.endpoint_fixed + s.endpoint_held))
                    .with("endpoint_fixed_kib", largest(|s| s.endpoint_fixed))
                    .with("endpoint_buffers_kib", largest(|s| s.endpoint_held));
            }
            rows.push(row.with("shares_cores", shares_cores));
        }
        let notes = transport::notes(&rows);
        Some(Report { rows, notes })
    } else {
        world.send(0, MEMORY_TAG, &mine.encode()).map_err(comm)?;
        None
    };
    rt.finish().map_err(|e| e.to_string())?;
    Ok(report)
}

/// `row` with the largest and the median over processes of each figure.
fn memory_row(row: Row, memories: &[Memory]) -> Row {
    let stat = |f: fn(&Memory) -> u64| {
        let mut v: Vec<u64> = memories.iter().map(f).collect();
        v.sort_unstable();
        (v.last().copied().unwrap_or(0), v.get(v.len() / 2).copied().unwrap_or(0))
    };
    let (peak_max, peak_median) = stat(|m| m.peak);
    let (rss_max, rss_median) = stat(|m| m.rss);
    let (anon_max, anon_median) = stat(|m| m.anon);
    let (shmem_max, shmem_median) = stat(|m| m.shmem);
    let (_, file_median) = stat(|m| m.file);
    row.with("peak_rss_kib", peak_max)
        .with("peak_rss_median_kib", peak_median)
        .with("rss_kib", rss_max)
        .with("rss_median_kib", rss_median)
        .with("rss_anon_kib", anon_max)
        .with("rss_anon_median_kib", anon_median)
        .with("rss_shmem_kib", shmem_max)
        .with("rss_shmem_median_kib", shmem_median)
        .with("rss_file_median_kib", file_median)
}

/// The table: times against p, then memory against p.
pub fn table(report: &Report) -> String {
    let rows: Vec<&Row> = report.table(BENCH).collect();
    let mut procs: Vec<u32> = rows.iter().map(|r| r.procs).collect();
    procs.sort_unstable();
    procs.dedup();
    let mut o = String::from("# scale: costs against the number of processes p, all on this machine\n");
    o.push_str(&transport::legend(report, BENCH));
    // The columns: each job (bulkwire's by the transport it asked for) and
    // each Open MPI transport, in the order they ran.
    let mut columns: Vec<(String, String)> = Vec::new();
    for r in &rows {
        let key = match r.source.as_str() {
            "mpi" => ("mpi".to_string(), transport::of_row(r).to_string()),
            _ => (r.source.clone(), r.text(REQUESTED).unwrap_or("").to_string()),
        };
        if !columns.contains(&key) {
            columns.push(key);
        }
    }
    let find = |p: u32, (source, job): &(String, String), what: &str| {
        rows.iter().copied().find(|r| {
            r.procs == p
                && &r.source == source
                && r.what.split_once(", ").is_some_and(|(_, w)| w == what)
                && match source.as_str() {
                    "mpi" => transport::of_row(r) == job,
                    _ => r.text(REQUESTED) == Some(job.as_str()),
                }
        })
    };
    let label = |(source, job): &(String, String)| match source.as_str() {
        "mpi" => format!("mpi {job}"),
        _ => {
            let reached = rows
                .iter()
                .find(|r| &r.source == source && r.text(REQUESTED) == Some(job.as_str()))
                .map_or(job.clone(), |r| transport::label(r));
            format!("{source} {reached}")
        }
    };
    let exchange_what = rows.iter().find_map(|r| {
        r.what.split_once(", ").map(|(_, w)| w).filter(|w| w.starts_with("total exchange")).map(str::to_string)
    });
    let mut kinds = vec![("empty sync", "empty bsp_sync"), ("barrier", "barrier: World::barrier, MPI_Barrier")];
    let exchange_title = exchange_what.as_ref().map(|w| format!("{w} per pair: BSP puts and a sync, MPI_Alltoall"));
    if let (Some(w), Some(t)) = (&exchange_what, &exchange_title) {
        kinds.push((w.as_str(), t.as_str()));
    }
    for (what, title) in kinds {
        let shown: Vec<&(String, String)> =
            columns.iter().filter(|c| procs.iter().any(|&p| find(p, c, what).is_some())).collect();
        if shown.is_empty() {
            continue;
        }
        o.push_str(&format!("\n## {title}: median us at process 0\n{:>6}", "procs"));
        for c in &shown {
            o.push_str(&format!(" {:>18}", label(c)));
        }
        if what != "barrier" {
            o.push_str("  bsp's barrier");
        }
        o.push('\n');
        for &p in &procs {
            o.push_str(&format!("{p:>6}"));
            for c in &shown {
                o.push_str(&format!(" {:>18}", opt(find(p, c, what).and_then(|r| r.num("median_us")), 1)));
            }
            if what != "barrier" {
                // Each job's, where they differ (the board only through
                // shared memory).
                let shapes: Vec<(&str, &str)> = shown
                    .iter()
                    .filter_map(|c| Some((c.1.as_str(), find(p, c, what)?.text("sync_barrier")?)))
                    .collect();
                let text = match shapes.as_slice() {
                    [] => "-".to_string(),
                    [(_, first), rest @ ..] if rest.iter().all(|(_, s)| s == first) => first.to_string(),
                    all => all.iter().map(|(job, shape)| format!("{job}: {shape}")).collect::<Vec<_>>().join(", "),
                };
                o.push_str(&format!("  {text}"));
            }
            o.push('\n');
        }
    }
    let jobs: Vec<&(String, String)> = columns.iter().filter(|c| c.0 == "bulkwire").collect();
    if !jobs.is_empty() {
        o.push_str(
            "\n## memory per process, MiB: peak resident set (VmHWM) before and after the runtime started and \
             after the syncs; the protocol endpoint's structures, KiB\n",
        );
        o.push_str(&format!(
            "{:>6} {:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n",
            "procs", "job", "program", "start", "after", "median", "rss", "shmem", "syncs", "endp KiB", "held KiB"
        ));
        for &p in &procs {
            for c in &jobs {
                let (Some(before), Some(start), Some(after)) = (
                    find(p, c, "memory before start"),
                    find(p, c, "memory at start"),
                    find(p, c, "memory after syncs"),
                ) else {
                    continue;
                };
                let mib = |r: &Row, name: &str| r.num(name).map(|k| k / 1024.0);
                o.push_str(&format!(
                    "{:>6} {:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n",
                    p,
                    label(c),
                    opt(mib(before, "peak_rss_kib"), 1),
                    opt(mib(start, "peak_rss_kib"), 1),
                    opt(mib(after, "peak_rss_kib"), 1),
                    opt(mib(after, "peak_rss_median_kib"), 1),
                    opt(mib(after, "rss_kib"), 1),
                    opt(mib(after, "rss_shmem_kib"), 1),
                    opt(after.num("syncs_count"), 0),
                    opt(after.num("endpoint_fixed_kib"), 0),
                    opt(after.num("endpoint_buffers_kib"), 0),
                ));
            }
        }
        o.push_str(
            "# program: before the runtime starts; start: once it has; after: the largest after the BSP section, \
             median: its median over processes; rss, shmem: resident set and its shared memory after it, the \
             largest; endp: the endpoint's channels and per-peer state, held: the packet buffers and queues it \
             holds, the largest\n",
        );
    }
    if rows.iter().any(|r| r.source == "mpi") {
        o.push_str(
            "# MPI rows: median of the slowest process's time, each operation started by a barrier \
             (scripts/ompi/bench.c)\n",
        );
    }
    if rows.iter().any(|r| r.text("sync_barrier") == Some("board")) {
        o.push_str(&format!(
            "# bsp's barrier is the board where the job is on one host through shared memory with up to {} \
             processes (each posts its reduction in shared memory and reads everyone's; no message); \
             World::barrier is on the board up to {}\n",
            bulkwire_bsp::BOARD_DEFAULT_MAX,
            bulkwire_comm::BOARD_BARRIER_MAX
        ));
    }
    if rows.iter().any(|r| r.text("sync_barrier") == Some("star")) {
        o.push_str(
            "# bsp's barrier is otherwise a star (2(p-1) messages through process 0) where processes outnumber \
             cores, else a dissemination; after two total exchanges in a row, one round of p-1 messages\n",
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_the_kernels_status() {
        let status = "Name:\tbulkwire\nVmPeak:\t  100 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n\
                      RssAnon:\t    1000 kB\nRssFile:\t    3000 kB\nRssShmem:\t      96 kB\n";
        let m = Memory::parse(status);
        assert_eq!(m, Memory { peak: 5120, rss: 4096, anon: 1000, shmem: 96, file: 3000 });
        let mut bytes = Vec::new();
        m.encode(&mut bytes);
        assert_eq!(Memory::decode(&bytes), Some(m));
        let after = Memory { peak: 1, ..m };
        let sample = Sample { before: m, started: m, after, endpoint_fixed: 77, endpoint_held: 5 };
        let back = Sample::decode(&sample.encode()).unwrap();
        assert_eq!((back.after.peak, back.endpoint_fixed, back.endpoint_held), (1, 77, 5));
        assert!(Memory::now().rss > 0, "this process has a resident set");
    }

    #[test]
    fn fewer_repetitions_at_larger_counts() {
        let args = Args {
            procs: vec![2, 64],
            repetitions: 300,
            size: 1024,
            no_mpi: true,
            plot: None,
            transport: transport::TransportArgs::default(),
            ranks: 0,
        };
        assert_eq!(
            [args.repetitions(2), args.repetitions(8), args.repetitions(16), args.repetitions(64)],
            [300, 300, 150, 37]
        );
        assert_eq!(Args { repetitions: 5, ..args.clone() }.repetitions(64), 5);
        assert_eq!(args.per_count().iter().map(|a| a.ranks).collect::<Vec<_>>(), [2, 64]);
        assert_eq!(exchange(1024), "total exchange 1 KiB");
        assert_eq!(exchange(100), "total exchange 100 B");
        assert!(Args { procs: vec![1, 4], ..args }.check().is_err());
    }
}
