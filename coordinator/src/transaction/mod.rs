//! The transaction coordinator (KIP-98): transactional ids, their producer
//! epochs, and the two-phase commit of transactions across partitions.
//!
//! # Layout
//! - [`state`]: `TransactionState`, Kafka's states and their allowed order.
//! - [`metadata`]: `TransactionMetadata`, one id's state, and its pure transitions.
//! - [`records`]: the key/value bytes of `__transaction_state` (Kafka's layout).
//! - [`log`]: `TransactionLog`, appending to and replaying `__transaction_state`.
//! - [`markers`]: `TxnMarkerWriter`, the seam to the partitions' logs (WriteTxnMarkers).
//! - [`coordinator`]: `TransactionCoordinator`, the requests, timeouts and expiry
//!   of one `__transaction_state` partition's transactional ids.
//! - [`coordinators`]: one coordinator per partition behind a router.

pub mod coordinator;
pub mod coordinators;
pub mod log;
pub mod markers;
pub mod metadata;
pub mod records;
pub mod state;

pub use coordinator::{
    ListedTransaction, TransactionConfig, TransactionCoordinator, TransactionCoordinators,
    TxnError, COORDINATOR_EPOCH,
};
pub use log::{
    transaction_state_topic_config, TransactionLog, TxnLogError, TRANSACTION_STATE_TOPIC,
};
pub use markers::{TxnMarker, TxnMarkerWriter};
pub use metadata::{TopicPartition, TransactionMetadata};
pub use state::TransactionState;

#[cfg(test)]
mod coordinator_tests;
