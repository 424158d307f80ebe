//! Dynamic groups and collective communication (seed 004).
//!
//! Any process of a job can create a group, join one by name, leave it or
//! destroy it, at run time; every member sees the same sequence of views
//! (view number and members), and every collective runs in one view: if
//! the view changes under a pending collective, the collective ends with
//! [`GroupError::ViewChanged`] naming the change. Membership and the other
//! control messages travel on the premium path, the data on the ordinary
//! one (seed 004 §2).
//!
//! Collectives: broadcast from any root and multicast to a subset, reduce
//! and allreduce on typed buffers ([`Element`], [`Op`]), gather, scatter,
//! allgather, barrier. Each runs by an [`Algorithm`] chosen by message and
//! group size ([`schedule::choose`]), by the job
//! (`BULKWIRE_GROUP_ALGORITHM=bcast=tree,allreduce=ring`) or by the group
//! ([`Group::set_algorithm`]). With [`Delivery::Confirmed`], a broadcast's
//! root returns once every member has the data, told by one
//! acknowledgement per child of the tree (seed 004's ack merging).
//!
//! ```no_run
//! use bulkwire_comm::World;
//! use bulkwire_groups::{Groups, Op};
//!
//! let world = World::init()?;
//! let groups = Groups::new(&world)?;
//! let mut data = vec![world.rank() as f64; 4];
//! groups.world().allreduce(&mut data, Op::Sum)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod codec;
mod collective;
pub mod element;
mod group;
pub mod membership;
pub mod schedule;

pub use element::{Element, Op};
pub use group::{
    parse_algorithms, Delivery, Group, GroupError, GroupStats, Groups, ALGORITHM_VAR, CONTROL, DATA, DELIVERY_VAR,
};
pub use membership::{Change, Event, GroupId, View, WORLD};
pub use schedule::{Algorithm, Operation};
