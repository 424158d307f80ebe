//! The Open MPI reference: the same sweeps as `bench pingpong` and `bench
//! bw`, and the total exchange of `bench total-exchange` as `MPI_Alltoall`
//! beside an empty `MPI_Barrier`, with Open MPI over TCP (on loopback or
//! the hosts' network) or over its shared memory (btl vader, sm from Open
//! MPI 5), measured in the same run where Open MPI is installed. The
//! program is `scripts/ompi/bench.c` (also behind `scripts/ompi-bench.sh`),
//! compiled with `mpicc` into a temporary folder; it prints its figures as
//! rows, their `what` naming the transport (`tcp`, `shm`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::rows::{Report, Row};

/// The C program, built into this binary so the benchmark needs no checkout.
const SOURCE: &str = include_str!("../../../scripts/ompi/bench.c");

/// How Open MPI's processes reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpiTransport {
    /// Only TCP (btl tcp,self), as bulkwire's UDP.
    Tcp,
    /// Its shared memory (btl vader or sm, and self), on one host.
    Shm,
}

impl MpiTransport {
    /// `tcp` or `shm`, as rows name it.
    pub fn as_str(self) -> &'static str {
        match self {
            MpiTransport::Tcp => "tcp",
            MpiTransport::Shm => "shm",
        }
    }

    /// As a table names it.
    pub fn describe(self) -> &'static str {
        match self {
            MpiTransport::Tcp => "TCP",
            MpiTransport::Shm => "shared memory",
        }
    }
}

/// Runs the program with `args` (`pingpong …`, `bw …`, `alltoall …`, and
/// `--json`) on `procs` processes over TCP and returns its rows, each
/// checked to be of table `bench`, from `procs` processes, with a finite,
/// positive `metric`. An error says why there is no reference (Open MPI
/// missing, the build or the run failed).
pub fn rows(procs: u32, args: &[String], bench: &str, metric: &str) -> Result<Vec<Row>, String> {
    rows_where(procs, None, args, bench, metric)
}

/// The report of an Open MPI reference that is not to run: left out
/// (`--no-mpi`, empty), or its ranks on other hosts (a note: it would run on
/// this one); `None` when it is to run.
pub fn left_out(no_mpi: bool, remote: bool) -> Option<Report> {
    let mut report = Report::default();
    if remote && !no_mpi {
        report.notes.push("no Open MPI reference: the ranks run on other hosts; it would run on this one".into());
    }
    (no_mpi || remote).then_some(report)
}

/// Hosts to run Open MPI's ranks on, and how to reach them.
pub struct Hosts<'a> {
    /// Comma-separated, one rank each (`mpirun --host`).
    pub hosts: &'a str,
    /// The remote shell (`--mca plm_rsh_agent`), e.g. `scripts/netns-exec`
    /// for the namespace test bed.
    pub agent: &'a Path,
    /// The network the ranks talk over (`btl_tcp_if_include` and
    /// `oob_tcp_if_include`), e.g. `10.90.0.0/24`; Open MPI's own choice
    /// where `None`.
    pub network: Option<&'a str>,
}

/// [`rows`] with the ranks on `hosts` (on this machine over loopback when
/// `None`).
pub fn rows_where(
    procs: u32,
    hosts: Option<&Hosts<'_>>,
    args: &[String],
    bench: &str,
    metric: &str,
) -> Result<Vec<Row>, String> {
    Program::build()?.rows(procs, hosts, MpiTransport::Tcp, args, bench, metric)
}

/// The program, built once for the runs of one reference.
pub struct Program {
    /// Holds the program until the runs are over.
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Open MPI's major version.
    major: u32,
}

impl Program {
    /// Checks that `mpirun` is Open MPI's and compiles the program.
    pub fn build() -> Result<Program, String> {
        let version = Command::new("mpirun")
            .arg("--version")
            .output()
            .map_err(|_| "mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)".to_string())?;
        let version = String::from_utf8_lossy(&version.stdout).into_owned();
        if !version.contains("Open MPI") {
            return Err("mpirun is not Open MPI's".into());
        }
        let major = version
            .split_whitespace()
            .find_map(|word| word.split('.').next().and_then(|m| m.parse().ok()).filter(|_| word.contains('.')))
            .unwrap_or(4);
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary folder: {e}"))?;
        let source = dir.path().join("bench.c");
        let path = dir.path().join("bench");
        std::fs::write(&source, SOURCE).map_err(|e| format!("writing {}: {e}", source.display()))?;
        let built = Command::new("mpicc")
            .arg("-O2")
            .arg("-o")
            .arg(&path)
            .arg(&source)
            .arg("-lm")
            .output()
            .map_err(|_| "mpicc not found (Debian: apt-get install libopenmpi-dev)".to_string())?;
        if !built.status.success() {
            return Err(format!("mpicc failed: {}", String::from_utf8_lossy(&built.stderr).trim()));
        }
        Ok(Program { _dir: dir, path, major })
    }

    /// The program's rows with `args` on `procs` processes over
    /// `transport`, checked as [`rows`] says; each says in `btl` which of
    /// Open MPI's transports it was made to use.
    pub fn rows(
        &self,
        procs: u32,
        hosts: Option<&Hosts<'_>>,
        transport: MpiTransport,
        args: &[String],
        bench: &str,
        metric: &str,
    ) -> Result<Vec<Row>, String> {
        let btl = match transport {
            MpiTransport::Tcp => "tcp".to_string(),
            MpiTransport::Shm if hosts.is_some() => {
                return Err("shared memory joins the processes of one host only".into());
            }
            MpiTransport::Shm => self.shm_btl()?,
        };
        let run = |extra: &[&str]| -> Result<Vec<Row>, String> {
            let ran = mpirun(procs, hosts, &btl, extra, &self.path)
                .args(args)
                .args(["--transport", transport.as_str(), "--json"])
                .output()
                .map_err(|e| format!("cannot run mpirun: {e}"))?;
            if !ran.status.success() {
                return Err(format!("mpirun failed: {}", String::from_utf8_lossy(&ran.stderr).trim()));
            }
            parse(&String::from_utf8_lossy(&ran.stdout), procs, bench, metric)
        };
        // A failed run is tried once more before it counts: mpirun over TCP
        // failed once in a test run on a loaded machine, alone among many.
        let (mut rows, used) = match run(&[]).or_else(|first| run(&[]).map_err(|_| first)) {
            Ok(rows) => (rows, format!("{btl},self")),
            // Shared memory copies large messages from the other process
            // with CMA (process_vm_readv), which a container may forbid:
            // then the copy goes through the shared segment.
            Err(first) if transport == MpiTransport::Shm => {
                let mechanism = format!("btl_{btl}_single_copy_mechanism");
                let rows = run(&["--mca", &mechanism, "none"]).map_err(|_| first)?;
                (rows, format!("{btl},self, {mechanism} none"))
            }
            Err(e) => return Err(e),
        };
        for row in &mut rows {
            row.set("btl", used.as_str());
        }
        Ok(rows)
    }

    /// Open MPI's shared-memory btl: `sm` where it has one by that name
    /// (Open MPI 5), else `vader` (Open MPI 3 and 4), as `ompi_info` lists
    /// them; by the version where `ompi_info` is missing.
    fn shm_btl(&self) -> Result<String, String> {
        let Ok(info) = Command::new("ompi_info").output() else {
            return Ok(if self.major >= 5 { "sm" } else { "vader" }.into());
        };
        shared_memory_btl(&String::from_utf8_lossy(&info.stdout))
            .map(String::from)
            .ok_or_else(|| "Open MPI has no shared-memory btl (ompi_info lists neither vader nor sm)".into())
    }
}

/// The shared-memory btl among those `ompi_info` lists (`MCA btl: vader
/// (MCA v2.1.0, …)`): `sm` before `vader`.
fn shared_memory_btl(ompi_info: &str) -> Option<&'static str> {
    let btls: Vec<&str> = ompi_info
        .lines()
        .filter_map(|line| line.trim().strip_prefix("MCA btl:"))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    ["sm", "vader"].into_iter().find(|name| btls.contains(name))
}

/// `mpirun` over `btl` (with `self`; `tcp` on loopback or the hosts'
/// network, or the shared-memory one) and the ob1 messaging layer, so that
/// nothing else (UCX, libfabric) carries the messages.
fn mpirun(procs: u32, hosts: Option<&Hosts<'_>>, btl: &str, extra: &[&str], program: &Path) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &procs.to_string()]);
    c.args(["--mca", "btl", &format!("{btl},self"), "--mca", "pml", "ob1"]);
    match hosts.map(|h| h.network) {
        None if btl == "tcp" => _ = c.args(["--mca", "btl_tcp_if_include", "lo"]),
        Some(Some(network)) => {
            if btl == "tcp" {
                c.args(["--mca", "btl_tcp_if_include", network]);
            }
            c.args(["--mca", "oob_tcp_if_include", network]);
        }
        _ => {}
    }
    c.args(extra);
    match hosts {
        Some(h) => {
            c.args(["--host", h.hosts, "--mca", "plm_rsh_agent"]);
            c.arg(h.agent);
            // The daemons of one machine's hosts (namespaces) would map the
            // topology they share into each other's address holes: Open
            // MPI 4.1's orted crashed there now and then (in
            // hwloc_shmem_topology_write). Each reads its own instead.
            c.args(["--mca", "rtc_hwloc_vmhole", "none"]);
            // Each host's daemon binds its first rank to its first core;
            // hosts that are namespaces of one machine would all run on that
            // one core, time-sliced (a 4 ms half round trip on the test
            // bed). Left to the scheduler, as bulkwire's ranks are.
            c.args(["--bind-to", "none"]);
        }
        None => {
            // Placed as `bulkwire run` places its ranks: a core each where
            // they fit, dealt to the cores in turn where they outnumber
            // them (Open MPI's own default there is unbound).
            c.args(["--oversubscribe", "--map-by", "core", "--bind-to", "core:overload-allowed"]);
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.arg(program);
    c
}

/// The rows in the program's output (a JSON list, after any lines of text).
fn parse(output: &str, procs: u32, bench: &str, metric: &str) -> Result<Vec<Row>, String> {
    let start = output.find('[').ok_or("the MPI program printed no rows")?;
    let rows: Vec<Row> =
        serde_json::from_str(&output[start..]).map_err(|e| format!("the MPI program's rows: {e}: {output}"))?;
    if rows.is_empty() {
        return Err("the MPI program printed no rows".into());
    }
    for row in &rows {
        if row.bench != bench || row.source != "mpi" || row.procs != procs {
            return Err(format!(
                "the MPI program measured {} of {} processes, not {bench} of {procs}",
                row.bench, row.procs
            ));
        }
        if !row.num(metric).is_some_and(|x| x.is_finite() && x > 0.0) {
            return Err(format!("the MPI program's {metric} is not valid: {row:?}"));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_read_from_the_programs_rows() {
        let out =
            "# something\n[\n  {\"bench\": \"total-exchange\", \"source\": \"mpi\", \"what\": \"tcp, MPI_Barrier\", \
                   \"procs\": 8, \"size_bytes\": 16384, \"median_us\": 238.60, \"mean_us\": 140.5}\n]\n";
        let rows = parse(out, 8, "total-exchange", "median_us").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].what.as_str(), rows[0].num("mean_us")), ("tcp, MPI_Barrier", Some(140.5)));
    }

    #[test]
    fn rows_of_another_run_or_without_times_are_refused() {
        let row = |procs: u32, median: &str| {
            format!(
                "[{{\"bench\": \"pingpong\", \"source\": \"mpi\", \"what\": \"tcp\", \"procs\": {procs}, \
                 \"size_bytes\": 8, \"median_us\": {median}}}]"
            )
        };
        assert!(parse(&row(2, "3.5"), 2, "pingpong", "median_us").is_ok());
        assert!(parse(&row(4, "3.5"), 2, "pingpong", "median_us").unwrap_err().contains("of 4 processes"));
        assert!(parse(&row(2, "3.5"), 2, "bw", "mb_per_s").is_err());
        assert!(parse(&row(2, "0.0"), 2, "pingpong", "median_us").unwrap_err().contains("not valid"));
        assert!(parse(&row(2, "null"), 2, "pingpong", "median_us").is_err());
        assert!(parse("", 2, "pingpong", "median_us").unwrap_err().contains("no rows"));
        assert!(parse("[]", 2, "pingpong", "median_us").unwrap_err().contains("no rows"));
        assert!(parse("[{oops", 2, "pingpong", "median_us").is_err());
    }

    #[test]
    fn ranks_on_hosts_are_left_to_the_scheduler_and_on_one_host_dealt_to_the_cores() {
        let args = |c: &Command| c.get_args().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>();
        let hosts = Hosts { hosts: "bwh0,bwh1", agent: Path::new("scripts/netns-exec"), network: Some("10.90.0.0/24") };
        let on_hosts = args(&mpirun(2, Some(&hosts), "tcp", &[], Path::new("bench")));
        let bind = on_hosts.iter().position(|a| a == "--bind-to").expect("--bind-to");
        assert_eq!(on_hosts[bind + 1], "none", "{on_hosts:?}");
        assert!(on_hosts.windows(2).any(|w| w == ["--host", "bwh0,bwh1"]), "{on_hosts:?}");
        assert!(on_hosts.windows(2).any(|w| w == ["btl_tcp_if_include", "10.90.0.0/24"]), "{on_hosts:?}");
        let here = args(&mpirun(8, None, "vader", &[], Path::new("bench")));
        assert!(here.contains(&"--oversubscribe".to_string()), "{here:?}");
        assert!(here.windows(2).any(|w| w == ["--map-by", "core"]), "{here:?}");
        assert!(here.windows(2).any(|w| w == ["--bind-to", "core:overload-allowed"]), "{here:?}");
    }

    #[test]
    fn the_shared_memory_btl_is_the_one_ompi_info_lists() {
        let four = "                 MCA btl: tcp (MCA v2.1.0, API v3.1.0, Component v4.1.4)\n\
                    \x20                MCA btl: vader (MCA v2.1.0, API v3.1.0, Component v4.1.4)\n\
                    \x20                MCA btl: self (MCA v2.1.0, API v3.1.0, Component v4.1.4)\n\
                    \x20               MCA fbtl: posix (MCA v2.1.0, API v2.0.0, Component v4.1.4)\n";
        assert_eq!(shared_memory_btl(four), Some("vader"));
        let five = "  MCA btl: sm (MCA v2.1.0, API v3.3.0, Component v5.0.3)\n  MCA btl: tcp (MCA v2.1.0)\n";
        assert_eq!(shared_memory_btl(five), Some("sm"));
        assert_eq!(shared_memory_btl("  MCA btl: tcp (MCA v2.1.0)\n  MCA btl: self (MCA v2.1.0)\n"), None);
        assert_eq!(MpiTransport::Shm.as_str(), "shm");
    }
}
