//! The bulkwire runtime: drives `proto` endpoints over real UDP sockets.
//!
//! - [`JobEnv`]: who this process is in which job, read from the environment
//!   that `bulkwire run` (or SLURM's `srun`, Open MPI's or MPICH's `mpirun`
//!   started by `bulkwire run --launcher …`) provides.
//! - [`rendezvous`]: the processes of a job exchange their addresses through
//!   the launcher, every message authenticated with the job key; the same
//!   connection then carries heartbeats and the order to stop.
//! - [`PathSockets`]: one UDP socket per path class (ordinary; premium marked
//!   with DSCP and `SO_PRIORITY`), bound to the interface the job uses.
//! - [`Runtime`]: the progress engine. Calls from the application make
//!   progress themselves and spin briefly while they wait, so small messages
//!   see busy-poll latency; a background thread blocks in `poll(2)` for the
//!   rest of the time, fires timers, and keeps the launcher informed, so an
//!   idle or oversubscribed machine is not burnt.
//! - [`Paths`]: which path class carries the job's data (`BULKWIRE_PATHS`:
//!   ordinary, premium, or adaptive under the latency monitor).
//! - [`rate`]: Warp rate control of the job's senders
//!   (`BULKWIRE_RATE_CONTROL=warp`, `BULKWIRE_WARP_CAPACITY`).
//! - [`LossInjector`]: `BULKWIRE_TEST_DROP` discards a seeded fraction of
//!   received datagrams, so tests run programs over a lossy network.
//! - [`malloc`]: the C library's allocator keeps the memory the runtime
//!   frees, for the next burst (`BULKWIRE_MALLOC=system` leaves it alone).

mod cycles;
mod engine;
mod env;
mod loss;
pub mod malloc;
mod paths;
pub mod rate;
pub mod rendezvous;
mod shm;
mod sockets;
mod stage;

pub use engine::{
    endpoint_config, Deferral, Engine, Inbound, LentMessage, Loan, ProgressHook, Runtime, RuntimeError,
    BEST_EFFORT_CHANNEL, LEND_FROM, LEND_SUFFIX_MAX, STREAM_LEND_FROM,
};
pub use env::{host_cores, kernel_cores, new_job_id, new_key, JobEnv, JobEnvError};
pub use env::{CORES, JOB, KEY, LOCAL_SIZE, RANK, RENDEZVOUS, SIZE};
pub use loss::{LossInjector, DROP, DROP_SEED};
pub use paths::{Paths, HIGH as LATENCY_HIGH, INTERVAL as LATENCY_INTERVAL, LOW as LATENCY_LOW, PATHS};
pub use shm::{
    leftover_files as shm_leftover_files, Kind as PostKind, ShmStats, Transport, POST_MAX, SHM, SHM_ARENA, SHM_CMA,
    SHM_RING, SHM_SPLIT, SHM_STAGE,
};
pub use sockets::{mark_control, PathSockets, SocketOptions};
