//! Consumer groups, classic and KIP-848: the group coordinator, each group's
//! state machine, and the `__consumer_offsets` log that makes committed
//! offsets (and enough group metadata to list and describe empty groups)
//! durable.
//!
//! Dependencies point one way: the [`coordinator`] drives [`group`] and
//! [`consumer_group`], a group owns its members, and the types they share
//! (states, answers, summaries) sit in leaf modules below all of them.
//!
//! # Layout
//! - [`coordinator`]: the map of groups, the timers, administration; its
//!   child module `offsets` (`coordinator/offsets.rs`) the committed offsets:
//!   OffsetCommit, TxnOffsetCommit and their pending offsets, OffsetFetch,
//!   OffsetDelete, expiry.
//! - [`coordinators`]: one coordinator per `__consumer_offsets` partition behind
//!   a router (a group's partition is Kafka's hash of its id).
//! - [`consumer_group`]: a group of the consumer group protocol (KIP-848):
//!   epochs, target assignment, incremental reconciliation.
//! - [`assignor`]: its server-side assignors, `uniform` and `range`.
//! - [`group`]: one group's state machine (Empty → PreparingRebalance →
//!   CompletingRebalance → Stable), synchronous and clock-explicit.
//! - [`member`]: one member: timeouts, protocols, assignment, waiting requests.
//! - [`outcome`]: the JoinGroup and SyncGroup answers, now or deferred.
//! - [`state`]: `GroupState`, the classic group states by Kafka's names.
//! - [`summary`]: what DescribeGroups reports of a group of either kind.
//! - [`records`]: the key/value layouts of `__consumer_offsets` records.
//! - [`store`]: creating, appending to (off the request workers, fsynced)
//!   and replaying `__consumer_offsets`.

pub mod assignor;
pub mod consumer_group;
pub mod coordinator;
pub mod coordinators;
pub mod group;
pub(crate) mod member;
pub mod outcome;
pub mod records;
pub mod state;
pub mod store;
pub mod summary;

pub use coordinator::{CoordinatorConfig, GroupCoordinator, GroupCoordinators};
pub use store::{offsets_topic_config, OFFSETS_TOPIC};
