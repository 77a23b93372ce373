//! Partition logs on disk: Kafka's log layer in miniature.
//!
//! A [`LogManager`] owns a data directory of topics; each [`Topic`] has
//! [`PartitionLog`]s; each log is a sequence of segments (`<base offset>.log`
//! with a sparse `.index`, a `.timeindex` and an aborted-transaction `.txnindex`), recovered at open, rolled,
//! retained and flushed by the rules of Kafka's topic configs. Record batches
//! are stored byte for byte as producers sent them (offsets assigned), so a
//! fetch is a [`floe_protocol::FileRegion`] of a segment file. All I/O is
//! synchronous `std::fs`; the broker decides which calls leave its runtime.
//!
//! # Layout
//! - [`log_manager`]: the data directory, topic administration, checkpoints, maintenance.
//! - [`topic`]: a topic's name, id, partitions and config; name validation.
//! - [`log`]: `PartitionLog`, one partition, one file per job: append, read, roll,
//!   timestamp lookups, retention, flush, cleaning, producer state, epochs, `replica`
//!   (follower appends, the replicated high watermark), `truncation` (truncateTo,
//!   truncateFullyAndStartAt); its doc lists them.
//! - [`leader_epoch_cache`]: `LeaderEpochCache`, where each leader epoch began (`leader-epoch-checkpoint`).
//! - [`producer_state`]: `ProducerStateManager`, idempotent producers' sequences per partition; `.snapshot` files.
//! - [`transaction`]: isolation levels, aborted transactions, control batches (transaction markers).
//! - `txn_index`: `TransactionIndex`, a segment's `.txnindex` of aborted transactions.
//! - [`producer_id_manager`]: `ProducerIdManager`, producer ids unique across restarts (InitProducerId).
//! - [`clock`]: the wall clock (milliseconds and seconds since the Unix epoch).
//! - [`config`]: `LogConfig`, Kafka's topic config keys and defaults.
//! - [`iceberg_keys`]: the `floe.iceberg.*` topic keys' names (stored here, read by tiering).
//! - [`maintenance`]: `Maintenance`, the thread that rolls, retains, flushes and checkpoints every log.
//! - [`checkpoint`]: Kafka's offset checkpoint file format.
//! - [`file_names`]: every file and directory name, built and parsed in one place.
//! - [`error`]: `StorageError`, the one error type of this crate.
//! - `segment`: `LogSegment`, a `.log` and its indexes.
//! - [`batch_reader`]: `SegmentBatchReader`, the one walk over a `.log`'s batches, stepping over damage.
//! - `offset_index`, `time_index`: the sparse `.index` and `.timeindex`, over `index_file` (their shared file handling).
//! - `loader`: `LogLoader`, recovery of a partition directory at open (finishing interrupted cleaner swaps).
//!   For a shared-storage topic it keeps the checkpointed log start offset below the first local segment.
//! - [`log_cleaner`]: `LogCleaner`, the compaction threads, their choice of log, checkpoint and statistics.
//! - [`cleaner`]: `Cleaner`, one compaction of one log and its crash-safe segment swap.
//! - `batch_filter`: rebuilding a record batch without the records compaction removes (offsets kept).
//! - `offset_map`: `OffsetMap`, key hash → latest offset, the cleaner's dedupe buffer.
//! - `throttler`: `Throttler`, the cleaner's I/O rate limit.
//! - [`verify`]: CRC-32C verification of segment files, resynchronising past damage (`floe verify`, recovery).
//! - [`log_dir_failure`]: `LogDirFailureChannel`, the data directory's offline state after an I/O error.
//! - [`failpoint`]: named failpoints (`failpoints` feature), armed from `FAILPOINTS`.
//! - `atomic_file`: tmp + fsync + rename + fsync-dir writes of small files.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod atomic_file;
pub use atomic_file::write_atomically;
mod batch_filter;
pub mod batch_reader;
pub mod checkpoint;
mod cleaned_txns;
pub mod cleaner;
pub mod clock;
pub mod config;
pub mod error;
pub mod failpoint;
pub mod file_names;
pub mod iceberg_keys;
mod index_file;
pub mod leader_epoch_cache;
mod loader;
#[cfg(test)]
mod local_retention_tests;
pub mod log;
pub mod log_cleaner;
pub mod log_dir_failure;
pub mod log_manager;
pub mod maintenance;
mod offset_index;
mod offset_map;
pub mod producer_id_manager;
pub mod producer_state;
#[cfg(test)]
mod replica_tests;
mod segment;
#[cfg(test)]
mod test_util;
mod throttler;
mod time_index;
pub mod topic;
pub mod transaction;
#[cfg(test)]
mod transaction_tests;
mod txn_index;
pub mod verify;

pub use batch_filter::keyless_record_index;
pub use batch_reader::{ScannedBatch, SegmentBatchReader};
pub use checkpoint::OffsetCheckpointFile;
pub use cleaner::CleanStats;
pub use config::{ConfigEntry, LogConfig, MessageTimestampType};
pub use error::{Result, StorageError};
pub use leader_epoch_cache::{EpochEntry, LeaderEpochCache};
pub use log::{FetchDataInfo, LogAppendInfo, PartitionLog, TimestampAndOffset};
pub use log_cleaner::{CleanerConfig, CleanerStats, LogCleaner, PartitionCleanState};
pub use log_dir_failure::LogDirFailureChannel;
pub use log_manager::{LogManager, MaintenanceReport};
pub use producer_id_manager::ProducerIdManager;
pub use producer_state::ProducerStateManager;
pub use segment::SegmentInfo;
pub use topic::Topic;
pub use transaction::{
    AbortedTxn, AppendOrigin, ControlRecordType, IsolationLevel, ProducerSummary,
};
pub use verify::CorruptRange;
