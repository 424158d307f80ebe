//! The Open MPI reference of `bulkwire bench total-exchange`: the same
//! exchange with `MPI_Alltoall`, and an empty `MPI_Barrier`, with Open MPI
//! over TCP on loopback, measured in the same run where Open MPI is
//! installed. The program is `scripts/ompi/bench.c` (also behind
//! `scripts/ompi-bench.sh`), compiled with `mpicc` into a temporary folder.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The C program, built into this binary so the benchmark needs no checkout.
const SOURCE: &str = include_str!("../../../scripts/ompi/bench.c");

/// What the MPI program measured: the median over the repetitions of the
/// slowest process's time, each operation started by a barrier; and the
/// mean time per operation over as many back to back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reference {
    pub barrier_us: f64,
    pub alltoall_us: f64,
    pub barrier_mean_us: f64,
    pub alltoall_mean_us: f64,
}

/// The reply of `bench alltoall --json`.
#[derive(Deserialize)]
struct Reply {
    procs: u32,
    size: u64,
    barrier_us: f64,
    alltoall_us: f64,
    barrier_mean_us: f64,
    alltoall_mean_us: f64,
}

/// Runs `MPI_Barrier` and `MPI_Alltoall` of `size` bytes per pair on
/// `procs` processes, `repetitions` times each. An error says why there is
/// no reference (Open MPI missing, the build or the run failed).
pub fn total_exchange(procs: u32, size: usize, repetitions: u32) -> Result<Reference, String> {
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
        .output()
        .map_err(|_| "mpicc not found (Debian: apt-get install libopenmpi-dev)".to_string())?;
    if !built.status.success() {
        return Err(format!("mpicc failed: {}", String::from_utf8_lossy(&built.stderr).trim()));
    }
    let ran = mpirun(procs, &program)
        .args(["alltoall", "--json", "--iterations", &repetitions.max(1).to_string()])
        .args(["--max-size", &size.max(1).to_string()])
        .output()
        .map_err(|e| format!("cannot run mpirun: {e}"))?;
    if !ran.status.success() {
        return Err(format!("mpirun failed: {}", String::from_utf8_lossy(&ran.stderr).trim()));
    }
    parse(&String::from_utf8_lossy(&ran.stdout), procs, size)
}

/// TCP only (no shared memory), on loopback: the transport bulkwire's
/// figures are compared with (as `scripts/ompi-bench.sh`).
fn mpirun(procs: u32, program: &Path) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &procs.to_string()]);
    c.args(["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo", "--mca", "pml", "ob1"]);
    c.arg("--oversubscribe");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.arg(program);
    c
}

/// The reference from the program's output: one JSON line for `procs`
/// processes and `size` bytes, with finite, positive times.
fn parse(output: &str, procs: u32, size: usize) -> Result<Reference, String> {
    let line = output.lines().find(|l| l.trim_start().starts_with('{')).ok_or("the MPI program printed no result")?;
    let reply: Reply = serde_json::from_str(line).map_err(|e| format!("the MPI program's result {line:?}: {e}"))?;
    if reply.procs != procs || reply.size != size as u64 {
        return Err(format!(
            "the MPI program measured {} processes and {} bytes, not {procs} and {size}",
            reply.procs, reply.size
        ));
    }
    let valid = |x: f64| x.is_finite() && x > 0.0;
    let times = [reply.barrier_us, reply.alltoall_us, reply.barrier_mean_us, reply.alltoall_mean_us];
    if !times.into_iter().all(valid) {
        return Err(format!("the MPI program's times are not valid: {line}"));
    }
    Ok(Reference {
        barrier_us: reply.barrier_us,
        alltoall_us: reply.alltoall_us,
        barrier_mean_us: reply.barrier_mean_us,
        alltoall_mean_us: reply.alltoall_mean_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_read_from_the_programs_json() {
        let out = "# something\n{\"procs\": 8, \"size\": 16384, \"barrier_us\": 238.60, \"alltoall_us\": 340.00, \
                   \"barrier_mean_us\": 140.5, \"alltoall_mean_us\": 250.25}\n";
        let want =
            Reference { barrier_us: 238.6, alltoall_us: 340.0, barrier_mean_us: 140.5, alltoall_mean_us: 250.25 };
        assert_eq!(parse(out, 8, 16384), Ok(want));
    }

    #[test]
    fn a_reference_for_another_exchange_or_without_times_is_refused() {
        let reply = |procs: u32, barrier: f64, mean: f64| {
            format!(
                "{{\"procs\": {procs}, \"size\": 16384, \"barrier_us\": {barrier}, \"alltoall_us\": 2.0, \
                 \"barrier_mean_us\": 1.0, \"alltoall_mean_us\": {mean}}}"
            )
        };
        assert!(parse(&reply(4, 1.0, 2.0), 8, 16384).unwrap_err().contains("4 processes"));
        assert!(parse(&reply(8, 0.0, 2.0), 8, 16384).unwrap_err().contains("not valid"));
        assert!(parse(&reply(8, 1.0, f64::NAN), 8, 16384).is_err());
        assert!(parse(&reply(8, 1.0, 2.0), 8, 16384).is_ok());
        // An older program without the back-to-back means.
        let old = "{\"procs\": 8, \"size\": 16384, \"barrier_us\": 1.0, \"alltoall_us\": 2.0}";
        assert!(parse(old, 8, 16384).is_err());
        assert!(parse("", 8, 16384).unwrap_err().contains("no result"));
        assert!(parse("{oops", 8, 16384).is_err());
    }
}
