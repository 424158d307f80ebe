//! The launcher of bulkwire jobs, as a library: `bulkwire run` and the
//! Python package's `python -m bulkwire.run` are both this code.
//!
//! [`launch::run`] starts the ranks (on this machine, over ssh, or through
//! srun/mpirun), serves their rendezvous, forwards their output and input,
//! and stops every one of them when one fails, hangs or the user interrupts.

pub mod hosts;
pub mod launch;
pub mod stats;

pub use launch::{run, run_capturing_rank_0, Args, PathsChoice};
