//! The Open MPI reference: the same sweeps as `bench pingpong` and `bench
//! bw`, and the total exchange of `bench total-exchange` as `MPI_Alltoall`
//! beside an empty `MPI_Barrier`, with Open MPI over TCP on loopback,
//! measured in the same run where Open MPI is installed. The program is
//! `scripts/ompi/bench.c` (also behind `scripts/ompi-bench.sh`), compiled
//! with `mpicc` into a temporary folder; it prints its figures as rows.

use std::path::Path;
use std::process::Command;

use crate::rows::Row;

/// The C program, built into this binary so the benchmark needs no checkout.
const SOURCE: &str = include_str!("../../../scripts/ompi/bench.c");

/// Runs the program with `args` (`pingpong …`, `bw …`, `alltoall …`, and
/// `--json`) on `procs` processes and returns its rows, each checked to be
/// of table `bench`, from `procs` processes, with a finite, positive
/// `metric`. An error says why there is no reference (Open MPI missing, the
/// build or the run failed).
pub fn rows(procs: u32, args: &[String], bench: &str, metric: &str) -> Result<Vec<Row>, String> {
    rows_where(procs, None, args, bench, metric)
}

/// Hosts to run Open MPI's ranks on, and how to reach them.
pub struct Hosts<'a> {
    /// Comma-separated, one rank each (`mpirun --host`).
    pub hosts: &'a str,
    /// The remote shell (`--mca plm_rsh_agent`), e.g. `scripts/netns-exec`
    /// for the namespace test bed.
    pub agent: &'a Path,
    /// The network the ranks talk over (`btl_tcp_if_include`), e.g.
    /// `10.90.0.0/24`.
    pub network: &'a str,
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
    let version = Command::new("mpirun")
        .arg("--version")
        .output()
        .map_err(|_| "mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)".to_string())?;
    if !String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
        return Err("mpirun is not Open MPI's".into());
    }
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary folder: {e}"))?;
    let source = dir.path().join("bench.c");
    let program = dir.path().join("bench");
    std::fs::write(&source, SOURCE).map_err(|e| format!("writing {}: {e}", source.display()))?;
    let built = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .arg("-lm")
        .output()
        .map_err(|_| "mpicc not found (Debian: apt-get install libopenmpi-dev)".to_string())?;
    if !built.status.success() {
        return Err(format!("mpicc failed: {}", String::from_utf8_lossy(&built.stderr).trim()));
    }
    let ran = mpirun(procs, hosts, &program)
        .args(args)
        .arg("--json")
        .output()
        .map_err(|e| format!("cannot run mpirun: {e}"))?;
    if !ran.status.success() {
        return Err(format!("mpirun failed: {}", String::from_utf8_lossy(&ran.stderr).trim()));
    }
    parse(&String::from_utf8_lossy(&ran.stdout), procs, bench, metric)
}

/// TCP only (no shared memory), on loopback or the hosts' network: the
/// transport bulkwire's figures are compared with (as
/// `scripts/ompi-bench.sh`).
fn mpirun(procs: u32, hosts: Option<&Hosts<'_>>, program: &Path) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &procs.to_string()]);
    let network = hosts.map_or("lo", |h| h.network);
    c.args(["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", network, "--mca", "pml", "ob1"]);
    match hosts {
        Some(h) => {
            c.args(["--host", h.hosts, "--mca", "oob_tcp_if_include", h.network, "--mca", "plm_rsh_agent"]);
            c.arg(h.agent);
            // The daemons of one machine's hosts (namespaces) would map the
            // topology they share into each other's address holes: Open
            // MPI 4.1's orted crashed there now and then (in
            // hwloc_shmem_topology_write). Each reads its own instead.
            c.args(["--mca", "rtc_hwloc_vmhole", "none"]);
        }
        None => {
            c.arg("--oversubscribe");
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
        let out = "# something\n[\n  {\"bench\": \"total-exchange\", \"source\": \"mpi\", \"what\": \"MPI_Barrier\", \
                   \"procs\": 8, \"size_bytes\": 16384, \"median_us\": 238.60, \"mean_us\": 140.5}\n]\n";
        let rows = parse(out, 8, "total-exchange", "median_us").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].what.as_str(), rows[0].num("mean_us")), ("MPI_Barrier", Some(140.5)));
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
}
