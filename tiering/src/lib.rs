//! Iceberg tiering: sealed segments become rows of Apache Iceberg tables.
//!
//! A background service (run by the broker on its own threads, never the
//! request runtime) reads each sealed segment of a tiered topic, decodes its
//! batches into Arrow record batches, writes Parquet data files and commits
//! them to an Iceberg catalog exactly once, recording the tiered offset range
//! of every partition in the snapshot summary (`floe.offsets.<partition>`).
//!
//! # Layout
//! - [`schema`]: the table layout (every column), partition spec parsing.
//! - [`convert`]: records → Arrow conversion (segments are read with `floe_storage::SegmentBatchReader`).
//! - [`offsets`]: tiered offset ranges in snapshot summaries, read back from the ancestry.
//! - [`compaction`]: small data files rewritten into target-size files, a `replace` snapshot.
//! - [`retention`]: a shared table's `retention.ms`/`retention.bytes` by whole files, a `delete` snapshot and `floe.log-start.*`.
//! - [`metadata_commit`]: committing metadata Floe built itself (SQL catalog compare-and-swap).
//! - [`orphans`]: data files no snapshot references (crashed or aborted attempts).
//! - `guard`: the catalog wrapper that stops a commit from being rebased.
//! - [`table`]: one topic's table: plan, write Parquet, guarded commit.
//! - `sink`: one commit's Parquet writers (and a typed table's split into typed rows and dead letters).
//! - [`typed`]: typed tables from Schema Registry schemas: evolution, projection, the dead-letter table.
//! - [`catalog_config`]: which catalog (SQL or REST), the warehouse (local or S3), secrets.
//! - [`catalog`]: opens the catalog, one table per topic, writer locks.
//! - [`reader`]: a read-only view of the catalog (namespaces, tables, current metadata) for serving it.
//! - [`shared`]: shared mode's read path: file index, row-group reads, batches rebuilt from rows.
//! - [`runner`]: the tiering thread (when, which, retry, leadership), which the broker starts.
//! - [`settings`]: the `floe.iceberg.*` settings and the checks of a topic's own.
//! - [`report`]: `floe iceberg status` and `floe iceberg maintain`, as text.
//! - [`table_reads`]: a shared topic's fetches and ListOffsets served from its table, off the request path.
//! - [`rest`]: the read-only Iceberg REST catalog's routes, answers and JSON bodies.
//! - [`metrics`]: the `floe_iceberg_*` metrics.
//! - [`text`]: words for people in the reports.
//! - [`error`]: the crate's error type.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod catalog;
pub mod catalog_config;
pub mod compaction;
pub mod convert;
pub mod error;
mod guard;
pub mod maintenance;
pub mod metadata_commit;
pub mod metrics;
pub mod offsets;
pub mod orphans;
pub mod reader;
pub mod report;
pub mod rest;
pub mod retention;
pub mod runner;
pub mod schema;
pub mod settings;
pub mod shared;
mod sink;
pub mod table;
pub mod table_reads;
#[cfg(test)]
mod test_util;
pub mod text;
pub mod typed;

pub use catalog::IcebergCatalog;
pub use catalog_config::{CatalogConfig, CatalogType, S3Settings, Secret};
pub use compaction::{CompactionPolicy, CompactionReport};
pub use error::{Result, TieringError};
pub use iceberg;
pub use maintenance::{ExpiryPolicy, ExpiryReport};
pub use reader::{CatalogReader, TableState};
pub use retention::{PartitionRetention, RetentionReport};
pub use table::{PreparedTier, TierLimits, TierOutcome, TopicTable};
pub use typed::{DataFormat, KeyFormat, SchemaLookupError, SchemaSource, TypedLayout, ValueFormat};
