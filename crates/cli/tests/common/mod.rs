//! What the multi-process test files share: a test binary re-runs itself
//! as the ranks of a job under `bulkwire run`.

// Each test file is a crate of its own and uses part of this.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

/// Whether this process is a rank of a job (else the test that starts it).
pub fn is_rank() -> bool {
    std::env::var("BULKWIRE_RENDEZVOUS").is_ok()
}

/// Runs `test` of this binary as a job of `n` processes with extra
/// environment.
pub fn launch(n: u32, test: &str, env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bulkwire"));
    cmd.envs(env.iter().copied());
    cmd.arg("run").arg("-n").arg(n.to_string());
    cmd.arg(exe).args(["--exact", test, "--nocapture", "--test-threads=1"]);
    cmd.stdin(Stdio::null()).output().expect("run bulkwire")
}

/// A job's standard output, then its standard error.
pub fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
