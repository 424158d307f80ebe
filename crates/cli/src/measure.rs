//! `bulkwire bench`, `bulkwire sim` and `bulkwire profile`: launching the
//! benchmarks of `bulkwire-bench` and the experiments of `bulkwire-lab`,
//! and printing their rows as a table, JSON or CSV.

use std::path::PathBuf;

use bulkwire_bench::{transport, Bench, Report};
use bulkwire_lab::{
    background, profile, reliability, scale, service_switching, solver_testbed, switching_testbed, warp,
};

use bulkwire_launch::launch::PathsChoice;
use bulkwire_runtime::Transport;
use indicatif::{ProgressBar, ProgressStyle};

/// How rows are printed: a table by default.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Format {
    /// Print the rows as JSON: a list of flat rows (docs/BENCHMARKS.md).
    #[arg(long, global = true, conflicts_with = "csv")]
    pub json: bool,
    /// Print the rows as CSV, a header of every column, then a line per row.
    #[arg(long, global = true)]
    pub csv: bool,
}

impl Format {
    /// Prints `report`: `table` renders it for people. Beside JSON and CSV,
    /// the notes go to standard error, so that standard output stays data.
    pub(crate) fn print(self, report: &Report, table: impl FnOnce(&Report) -> String) {
        if self.json {
            println!("{}", report.json());
        } else if self.csv {
            print!("{}", report.csv());
        } else {
            print!("{}", table(report));
            for note in &report.notes {
                println!("# {note}");
            }
            return;
        }
        for note in &report.notes {
            eprintln!("# {note}");
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
    /// With --hosts, the network Open MPI's reference runs over (its
    /// btl_tcp_if_include and oob_tcp_if_include), e.g. 10.90.0.0/24; by
    /// default the /24 of --bind's IPv4 address, else Open MPI's choice.
    #[arg(long)]
    pub mpi_network: Option<String>,
}

impl Placement {
    /// The network for Open MPI's ranks on the hosts (see `mpi_network`).
    fn mpi_network(&self) -> Option<String> {
        self.mpi_network.clone().or_else(|| match self.bind {
            Some(std::net::IpAddr::V4(ip)) => {
                let [a, b, c, _] = ip.octets();
                Some(format!("{a}.{b}.{c}.0/24"))
            }
            _ => None,
        })
    }
}

/// Runs `bench` as a job of its ranks (a job per transport with
/// `--transport both`), with the references measured around the jobs, and
/// prints the rows; returns the exit code of a job that failed, else 0.
pub fn bench(bench: &Bench, placement: &Placement, format: Format) -> Result<i32, String> {
    bench.check()?;
    if let Some(report) = bench.measure_here() {
        format.print(&report?, |r| bench.table(r));
        return Ok(0);
    }
    let remote = placement.hosts.is_some();
    // Open MPI's ranks go where bulkwire's do, started by the same remote
    // shell (a path made absolute: mpirun runs it from elsewhere).
    let agent = std::fs::canonicalize(&placement.ssh).unwrap_or_else(|_| PathBuf::from(&placement.ssh));
    let network = placement.mpi_network();
    let mpi_hosts = placement.hosts.as_deref().map(|hosts| bulkwire_bench::mpi::Hosts {
        hosts,
        agent: &agent,
        network: network.as_deref(),
    });
    let before = bench.before_job(mpi_hosts.as_ref());
    let mut jobs = Report::default();
    let specs = bench.jobs(remote);
    // Where the ranks ran, which the tables' titles do not say.
    let place = match &placement.hosts {
        Some(hosts) => format!("the ranks ran on the hosts {hosts}"),
        None => "the ranks ran on this machine".to_string(),
    };
    let place = (!specs.is_empty()).then_some(place);
    for (spec, transport) in specs {
        match job_over(&spec, placement, None, transport)? {
            Ok(job) => {
                jobs.rows.extend(job.rows);
                jobs.notes.extend(job.notes);
            }
            Err(status) => return Ok(status),
        }
    }
    // Measured again only where it was measured before.
    let after = if before.rows.is_empty() { Report::default() } else { bench.after_job(mpi_hosts.as_ref()) };
    // The jobs' rows first, then the references measured around them; each
    // note once.
    let notes = place.into_iter().collect();
    let mut report = Report { rows: [jobs.rows, before.rows, after.rows].concat(), notes };
    for note in [jobs.notes, before.notes, after.notes].concat() {
        if !report.notes.contains(&note) {
            report.notes.push(note);
        }
    }
    format.print(&report, |r| bench.table(r));
    if let Bench::Scale(bulkwire_bench::scale::Args { plot: Some(dir), .. }) = bench {
        let files = scale::plot_bench(dir, &report)?;
        eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(0)
}

/// Runs the job of `bench` where `placement` says, its data on `paths`
/// (the job's default when `None`): rank 0's report, or the job's exit
/// status when it failed.
fn job(bench: &Bench, placement: &Placement, paths: Option<PathsChoice>) -> Result<Result<Report, i32>, String> {
    job_over(bench, placement, paths, None)
}

/// [`job`] with its ranks asking for `transport` between processes of one
/// host ([`transport::SHM`] in their environment; the job's default when
/// `None`).
fn job_over(
    bench: &Bench,
    placement: &Placement,
    paths: Option<PathsChoice>,
    transport: Option<Transport>,
) -> Result<Result<Report, i32>, String> {
    // The launcher gives its own BULKWIRE_* variables to every rank, local
    // or over the remote shell; the variable is set for this job only, and
    // between jobs, when no other thread of this process is at work.
    let _shm = transport.map(|t| EnvVar::set(transport::SHM, transport::TransportArgs::env_value(t)));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let spec = serde_json::to_string(bench).map_err(|e| e.to_string())?;
    let command = vec![exe.to_string_lossy().into_owned(), "__bench-rank".into(), spec];
    let mut args = bulkwire_launch::launch::Args::local(bench.ranks(), command);
    args.hosts = placement.hosts.clone();
    args.ssh = placement.ssh.clone();
    args.bind = placement.bind;
    args.paths = paths;
    let (status, output) = bulkwire_launch::launch::run_capturing_rank_0(&args)?;
    // Rank 0 prints its report as one line of JSON; anything else it
    // printed is passed on.
    let mut job = None;
    for line in String::from_utf8_lossy(&output).lines() {
        match line.strip_prefix(REPORT) {
            Some(json) => {
                job = Some(serde_json::from_str::<Report>(json).map_err(|e| format!("rank 0's report: {e}"))?)
            }
            None => println!("{line}"),
        }
    }
    if status != 0 {
        return Ok(Err(status));
    }
    Ok(Ok(job.ok_or("rank 0 of the benchmark job ended without its report")?))
}

/// A variable of this process's environment set until it is dropped, then
/// put back as it was.
struct EnvVar {
    name: &'static str,
    before: Option<std::ffi::OsString>,
}

impl EnvVar {
    fn set(name: &'static str, value: &str) -> EnvVar {
        let before = std::env::var_os(name);
        std::env::set_var(name, value);
        EnvVar { name, before }
    }
}

impl Drop for EnvVar {
    fn drop(&mut self) {
        match &self.before {
            Some(value) => std::env::set_var(self.name, value),
            None => std::env::remove_var(self.name),
        }
    }
}

/// What marks rank 0's report among its output.
const REPORT: &str = "bulkwire-report ";

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// The benchmark and its arguments, as JSON.
    spec: String,
}

/// One rank of a benchmark job.
pub fn bench_rank(args: &RankArgs) -> Result<(), String> {
    let bench: Bench = serde_json::from_str(&args.spec).map_err(|e| format!("bad benchmark spec: {e}"))?;
    if let Some(report) = bulkwire_bench::rank(&bench)? {
        println!("{REPORT}{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum Experiment {
    /// Loss recovery under random and bursty loss: hole filling against go-back-N.
    Reliability(reliability::Args),
    /// Warp rate control: n senders into one FCFS server (seed 003 §3, §6.2).
    Warp(warp::Args),
    /// Latency-adaptive switching between ordinary and premium service on a
    /// congested cell switch (seed 000 §4).
    ServiceSwitching(service_switching::Args),
    /// How an empty BSP sync's costs grow with the number of processes, to
    /// 1,024: bsp's barrier on p endpoints on one switch (time per sync,
    /// messages and datagrams per process, each endpoint's memory).
    Scale(scale::Args),
}

/// Runs an experiment in the simulator with a progress bar, and prints it.
pub fn sim(experiment: &Experiment, format: Format) -> Result<(), String> {
    let runs = match experiment {
        Experiment::Reliability(_) => reliability::runs(),
        Experiment::Warp(_) => warp::runs(),
        Experiment::ServiceSwitching(a) => a.runs()?,
        Experiment::Scale(a) => a.runs(),
    };
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let mut progress = |what: &str| {
        bar.set_message(what.to_string());
        bar.inc(1);
    };
    let (report, files) = match experiment {
        Experiment::Reliability(a) => (reliability::measure(a, &mut progress)?, Vec::new()),
        Experiment::Warp(a) => warp::run(a, &mut progress)?,
        Experiment::ServiceSwitching(a) => service_switching::run(a, &mut progress)?,
        Experiment::Scale(a) => scale::run(a, &mut progress)?,
    };
    bar.finish_and_clear();
    match experiment {
        Experiment::Reliability(a) => format.print(&report, |r| reliability::table(a, r)),
        Experiment::Warp(_) => format.print(&report, warp::table),
        Experiment::ServiceSwitching(_) => format.print(&report, service_switching::table),
        Experiment::Scale(_) => format.print(&report, scale::table),
    }
    if !files.is_empty() {
        eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    if matches!(experiment, Experiment::Reliability(_)) && !reliability::all_delivered(&report) {
        return Err("a run did not deliver every message exactly once".into());
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// The prefix given in BULKWIRE_PROFILE (the files are FILE.0, FILE.1, …).
    pub file: PathBuf,
    /// Draw computation and communication per superstep into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub format: Format,
}

pub fn profile(args: &ProfileArgs) -> Result<(), String> {
    let report = profile::read(&args.file)?;
    args.format.print(&report, profile::table);
    if let Some(out) = &args.plot {
        profile::plot(out, &report)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum LabTool {
    /// Background traffic of exponential ON-OFF UDP sources, some premium
    /// (DSCP EF), offering a load ρ of a bottleneck's rate (seed 000 §4.1).
    Background(background::Args),
    /// Seed 000's experiment on real packets: one task's trace across the
    /// test bed's congested two-class port (scripts/netns-testbed.sh
    /// bottleneck 2) for ordinary, premium and adaptive paths, background
    /// load ρ from 0.3 to 1.1. Root only.
    ServiceSwitching(switching_testbed::Args),
    /// Seed 003's experiment on real packets: the asynchronous solver over
    /// the shared memory with Warp-flushed writes, without control, and in
    /// BSP, on the test bed (scripts/netns-testbed.sh up 5 100mbit) with
    /// every port loaded by ON-OFF background traffic. Root only.
    Solver(solver_testbed::Args),
}

pub fn lab(tool: &LabTool, format: Format) -> Result<(), String> {
    match tool {
        LabTool::Background(args) => format.print(&background::run(args)?, background::table),
        LabTool::ServiceSwitching(args) => service_switching_on_test_bed(args, format)?,
        LabTool::Solver(args) => solver_on_test_bed(args, format)?,
    }
    Ok(())
}

/// `lab service-switching`: its jobs launched on the test bed's hosts,
/// with a progress bar, and its rows printed.
fn service_switching_on_test_bed(args: &switching_testbed::Args, format: Format) -> Result<(), String> {
    let placement =
        Placement { hosts: Some(args.hosts.clone()), ssh: args.ssh.clone(), bind: Some(args.bind), mpi_network: None };
    let bar = ProgressBar::new(args.plan()?.len() as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let mut run_job = |bench: &Bench, paths: &str| {
        let paths = match paths {
            "premium" => PathsChoice::Premium,
            "adaptive" => PathsChoice::Adaptive,
            _ => PathsChoice::Ordinary,
        };
        job(bench, &placement, Some(paths))?.map_err(|status| format!("failed ({status})"))
    };
    let mut progress = |what: &str| {
        bar.inc(1);
        bar.set_message(what.to_string());
    };
    let (report, files) = switching_testbed::run(args, &mut run_job, &mut progress)?;
    bar.finish_and_clear();
    format.print(&report, switching_testbed::table);
    eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}

/// `lab solver`: its jobs launched on the test bed's hosts, with a
/// progress bar, and its rows printed.
fn solver_on_test_bed(args: &solver_testbed::Args, format: Format) -> Result<(), String> {
    let placement =
        Placement { hosts: Some(args.hosts.clone()), ssh: args.ssh.clone(), bind: Some(args.bind), mpi_network: None };
    let bar = ProgressBar::new(args.plan()?.len() as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let mut run_job = |bench: &Bench| job(bench, &placement, None)?.map_err(|status| format!("failed ({status})"));
    let mut progress = |what: &str| {
        bar.inc(1);
        bar.set_message(what.to_string());
    };
    let (report, files) = solver_testbed::run(args, &mut run_job, &mut progress)?;
    bar.finish_and_clear();
    format.print(&report, solver_testbed::table);
    eprintln!("wrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}
