//! Dynamic groups and collective communication (seed 004).

pub mod codec;
pub mod membership;
