//! The crate's error type.

use std::path::PathBuf;

use thiserror::Error;

/// Why tiering a table failed.
#[derive(Debug, Error)]
pub enum TieringError {
    /// A segment file could not be read.
    #[error("cannot read segment {path}: {source}")]
    SegmentIo {
        /// The `.log` file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A segment could not be read (opening it, or a read error; damage is
    /// not an error but skipped batches).
    #[error("cannot read segment: {0}")]
    Segment(#[from] floe_storage::StorageError),
    /// The catalog or the table's files failed (catalog down, I/O, bad metadata).
    #[error("iceberg {operation} failed for {table}: {source}")]
    Iceberg {
        /// What was being done (load, create, write, commit).
        operation: &'static str,
        /// `namespace.table`.
        table: String,
        /// The crate's error (boxed: it is large).
        source: Box<iceberg::Error>,
    },
    /// The table moved on since the plan was made (another writer, or a commit
    /// this process did not see): nothing was committed; re-plan.
    #[error("table {table} changed under the plan (based on snapshot {}, now {}); re-planning", snapshot_name(*.planned), snapshot_name(*.current))]
    StaleSnapshot {
        /// `namespace.table`.
        table: String,
        /// The snapshot the plan was based on.
        planned: Option<i64>,
        /// The table's current snapshot.
        current: Option<i64>,
    },
    /// `floe.iceberg.partition-spec` cannot be parsed.
    #[error("invalid floe.iceberg.partition-spec `{spec}`: {reason}")]
    InvalidPartitionSpec {
        /// The value.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// The table was created for another topic of the same name (deleted and re-created).
    #[error("table {table} belongs to topic id {table_topic_id}, not {topic_id}: an earlier topic of the same name; drop or rename the table to tier this one")]
    TopicMismatch {
        /// `namespace.table`.
        table: String,
        /// The topic id in the table's properties.
        table_topic_id: String,
        /// The topic's id now.
        topic_id: String,
    },
    /// The table's stored location is not an absolute URI (`file://./floe-data/…`, written
    /// by a Floe that took a relative data directory as a URI host): readers cannot find its
    /// files and writes would go where the user did not choose. Refused, never written to.
    #[error("table {table} is stored at {location}, which is not an absolute location (an older Floe started with a relative data directory wrote it; its files are under {files_at}): Floe will not write to it. To tier this topic again, drop the table from the catalog (pyiceberg: catalog.drop_table(\"{table}\")) and delete {files_at}; Floe then creates it under the warehouse and tiers the topic again from its log start")]
    RelativeLocation {
        /// `namespace.table`.
        table: String,
        /// The location as stored.
        location: String,
        /// Where a local file system put its files.
        files_at: String,
    },
    /// A shared topic's existing table lacks the lossless layout's columns.
    #[error("table {table} was created in copy mode (without the columns a batch's rebuild needs): floe.iceberg.storage=shared needs a table created shared")]
    NotLossless {
        /// The table.
        table: String,
    },
    /// A combination of settings tiering does not handle yet.
    #[error("{0}")]
    Unsupported(String),
    /// Listing the object store failed (orphan cleanup).
    #[error("cannot list {location}: {source}")]
    ObjectStore {
        /// The table location being listed.
        location: String,
        /// OpenDAL's error.
        source: opendal::Error,
    },
    /// The REST catalog's HTTP client could not be built (TLS roots, settings).
    #[error("cannot build the REST catalog's HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The Schema Registry cannot answer now (a typed table's schemas): nothing was written; retried.
    #[error("schema registry unavailable: {0}")]
    SchemaRegistry(String),
    /// A shared table's data file could not be read back for a fetch (Parquet
    /// footer or pages, a column missing or of an unexpected type, a row lacking
    /// a lossless column).
    #[error("cannot read shared table file {path}: {reason}")]
    SharedRead {
        /// The data file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A batch could not be rebuilt from its rows (an unknown codec in its
    /// attributes, an opaque row without its bytes, the codec failing).
    #[error("cannot rebuild the batch at offset {base_offset}: {reason}")]
    Rebuild {
        /// The batch's base offset.
        base_offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// Converting records to Arrow failed (a bug: the arrays do not match the schema).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

impl TieringError {
    pub(crate) fn iceberg(
        operation: &'static str,
        table: impl ToString,
    ) -> impl FnOnce(iceberg::Error) -> Self {
        let table = table.to_string();
        move |source| Self::Iceberg { operation, table, source: Box::new(source) }
    }

    /// A short label for metrics: `segment_io`, `iceberg_<operation>`, `stale_snapshot`, `config`, `arrow`, `schema_registry`.
    pub fn kind(&self) -> String {
        match self {
            Self::SegmentIo { .. } | Self::Segment(_) => "segment_io".into(),
            Self::Iceberg { operation, .. } => format!("iceberg_{operation}"),
            Self::StaleSnapshot { .. } => "stale_snapshot".into(),
            Self::InvalidPartitionSpec { .. } | Self::NotLossless { .. } | Self::Unsupported(_) => {
                "config".into()
            }
            Self::TopicMismatch { .. } => "topic_mismatch".into(),
            Self::RelativeLocation { .. } => "relative_location".into(),
            Self::HttpClient(_) => "config".into(),
            Self::ObjectStore { .. } => "object_store".into(),
            Self::Arrow(_) => "arrow".into(),
            Self::SharedRead { .. } | Self::Rebuild { .. } => "shared_read".into(),
            Self::SchemaRegistry(_) => "schema_registry".into(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = TieringError> = std::result::Result<T, E>;

/// A snapshot id for messages: the id, or `none` for a table without one
/// (never Rust's `Some(..)`/`None`).
pub fn snapshot_name(id: Option<i64>) -> String {
    id.map_or_else(|| "none".to_string(), |id| id.to_string())
}
