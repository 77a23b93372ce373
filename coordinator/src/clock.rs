//! The wall clock both coordinators stamp their records with: storage's
//! (`floe_storage::clock`), one clock for every crate.

pub use floe_storage::clock::wall_ms;
