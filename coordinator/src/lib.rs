//! Coordinators that keep their state in Floe's own internal topics.
//!
//! Kafka keeps its coordinators apart from the request layer: a coordinator
//! owns a state machine and the internal topic that makes it durable, and the
//! broker's handlers only translate requests into calls on it. This crate
//! holds them so that nothing here knows about connections or wire formats
//! beyond the records it writes.
//!
//! # Layout
//! - [`clock`]: the wall clock both stamp their records with.
//! - [`replicated`]: a coordinator's term (the leadership of its internal
//!   topic's partition, in a cluster) and the gate its writes pass.
//! - [`partitioned`]: Kafka's mapping of a group or transactional id to its
//!   internal topic's partition, and the coordinators of every partition.
//! - [`group`]: the group coordinator: consumer groups, classic and KIP-848,
//!   their rebalances, and the `__consumer_offsets` log of committed offsets
//!   and group metadata.
//! - [`transaction`]: the transaction coordinator (KIP-98): transactional ids,
//!   producer epochs and fencing, the `__transaction_state` log, two-phase
//!   commit through transaction markers written by a [`transaction::TxnMarkerWriter`].

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod clock;
pub mod group;
pub mod partitioned;
pub mod replicated;
pub mod transaction;
