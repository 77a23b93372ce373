//! The Kafka wire protocol as Floe speaks it.
//!
//! Message types come from the `kafka-protocol` crate; what is Floe's own is
//! the framing around them, the table of API versions Floe serves, the
//! validation of producer record batches (which are stored byte for byte),
//! and the Fetch response writer that leaves record bytes in their segment
//! files so they can be sent with `sendfile(2)`.
//!
//! # Layout
//! - [`frame`]: length-prefixed frames on a byte stream; request headers.
//! - [`apis`]: which API keys and versions Floe serves (what ApiVersions advertises).
//! - [`record_batch`]: record batch v2 layout, validation (CRC-32C), offset assignment.
//! - [`records`]: the records inside a batch, parsed and written without loss (the cleaner, tiering, shared mode).
//! - [`file_region`]: a byte range of an open file, the unit of zero-copy transfer.
//! - [`fetch`]: the Fetch response writer, interleaving encoded bytes and file regions.
//! - [`topic`]: the internal topics' names, and which topics are internal.
//! - [`error`]: this crate's error type.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod apis;
pub mod error;
pub mod fetch;
pub mod file_region;
pub mod frame;
pub mod record_batch;
pub mod records;
pub mod response;
pub mod topic;

pub use error::ProtocolError;
pub use file_region::FileRegion;
pub use kafka_protocol;
