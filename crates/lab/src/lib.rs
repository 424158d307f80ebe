//! Experiments that reproduce the papers' figures and tables with the
//! production protocol code, and the readers of a job's own traces.
//!
//! Each experiment is one module: its arguments, `run` (which measures,
//! writes its CSV files and PNG plots and returns its rows in the format of
//! [`bulkwire_bench::rows`]) and `table` (the rows as text, beside the
//! paper's figures where the paper has them). The simulator drives most of
//! them; [`background`] loads the namespace test bed's bottleneck with
//! ON-OFF traffic for runs on real packets, and [`monitor`] samples the
//! utilisation of real links from the kernel's counters (seed 001).

pub mod background;
pub mod monitor;
pub mod plot;
pub mod profile;
pub mod reliability;
pub mod scale;
pub mod service_switching;
pub mod solver_testbed;
pub mod switching_testbed;
pub mod warp;

use std::path::Path;

/// Writes `text` to `path`; the error names the file.
fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
