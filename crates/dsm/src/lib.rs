//! Shared memory across the processes of a job, after seed 003's Mermera:
//! named segments of numbers, replicated at every process, read locally,
//! written with one of three semantics chosen per write.
//!
//! ```no_run
//! use bulkwire_comm::World;
//! use bulkwire_dsm::{Dsm, Semantics};
//!
//! let world = World::init()?;
//! let dsm = Dsm::new(&world)?;
//! let halo = dsm.map::<f64>("halo", 1024)?;          // every process, same order
//! halo.write(world.rank() as usize, 1.5, Semantics::Slow)?;
//! dsm.fence()?;                                       // every write so far is everywhere
//! let x = halo.read(0)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What a read may return
//!
//! A write changes the writer's own replica at once (a coherent write: once
//! it has its place in the order, before the call returns) and the others'
//! later; a read returns the value its replica holds. For a location `x`
//! and a reader `r`:
//!
//! - **Slow** writes: the writes of one writer to `x` reach `r` in the order
//!   issued, though `r` may never see some of them (a later write to `x`
//!   replaces one that has not left the writer). Nothing is promised about
//!   writes to different locations: `r` may see a writer's write to `y`
//!   before its earlier write to `x`.
//! - **PRAM** writes: all the writes of one writer reach every replica, in
//!   the order issued. Once `r` reads a value of a writer's PRAM write, its
//!   later reads return, for every location that writer wrote with PRAM
//!   before it, that write's value or a later one. Writes of different
//!   writers may interleave differently at different replicas.
//! - **Coherent** writes: all replicas apply all coherent writes in one
//!   order (sequential consistency among them): two readers never see two
//!   coherent writes in opposite orders, and a writer's reads after its
//!   coherent write return that value or a later one in the order.
//! - Writes of different kinds are ordered only by a fence.
//! - **Fence** ([`Dsm::fence`], collective): when it returns at any
//!   process, every write issued anywhere before any process entered this
//!   fence has been applied at this process's replica. After a fence with no
//!   writes since, every replica holds the same value of each location that
//!   only one process wrote, or that was written only coherently (PRAM and
//!   slow writes of different processes to one location may arrive in
//!   different orders at different replicas).
//!
//! PRAM and slow writes wait in the writer's buffer until it holds more
//! than its threshold (`Λ·b` of seed 003 §3), its oldest write has waited
//! `BULKWIRE_DSM_MAX_DELAY_MS` (5 ms), a coherent write or a fence comes.
//! `BULKWIRE_DSM_FLUSH` chooses the threshold: `warp` (the default: Λ
//! follows warp, computed from the stamps of the batches a process
//! receives, so that writers slow down under congestion) or a fixed number
//! of writes (`64`). How each semantics is carried is in [`replica`].

pub mod codec;
pub mod element;
pub mod history;
pub mod replica;

mod dsm;

pub use dsm::{Dsm, DsmSettings, Segment, CHANNEL, DELAY_VAR, FLUSH_VAR};
pub use element::{ElemType, Element};
pub use replica::{Applied, Config, DsmError, Flush, Replica, SegId, Semantics, Stats, Storage, Ticket};
