//! Iceberg tiering: sealed segments become rows of Apache Iceberg tables.
//!
//! Not built yet. The design: a background task, on its own threads, reads
//! each sealed segment of a tiered topic through `floe-storage`, decodes its
//! batches into Arrow record batches, writes Parquet, and commits the files
//! to an Iceberg catalog exactly once, recording the tiered offset ranges in
//! each snapshot's summary.
