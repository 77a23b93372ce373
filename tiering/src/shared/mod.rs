//! Shared mode's read path (issue #16, `docs/shared-mode.md` section 4): a
//! Kafka fetch below the local log start is served from the topic's table
//! and its `__log` table by rebuilding the original record batches.
//!
//! - [`index`]: the live data files of one table snapshot per Kafka
//!   partition, with their `offset` bounds, and the abort markers.
//! - [`read`]: the rows of one partition and offset range, from the files and
//!   Parquet row groups whose `offset` statistics overlap it.
//! - [`rebuild`]: rows → v2 record batches, the CRC self-check, and
//!   [`read_batches`], the entry point a fetch calls.
//! - [`lookup`]: ListOffsets by timestamp and MAX_TIMESTAMP over the table part.

pub mod index;
pub mod lookup;
pub mod read;
pub mod rebuild;
#[cfg(test)]
mod tests;

pub use index::{AbortMarker, DataFileRef, FileIndex};
pub use rebuild::{read_batches, read_batches_with_index, FetchCompression, RebuiltRange};
