//! The names of the `floe.iceberg.*` topic settings, in one place: storage lists
//! them among the topic keys it accepts ([`crate::config::FLOE_TOPIC_KEYS`]),
//! `floe-tiering` reads them. Storage only stores them; what they mean is tiering's.

/// Topic setting: whether the topic is tiered into an Iceberg table.
pub const ENABLED: &str = "floe.iceberg.enabled";
/// Topic setting: the table's partition spec (at creation).
pub const PARTITION_SPEC: &str = "floe.iceberg.partition-spec";
/// Topic setting: how long the oldest untiered record may wait in the active segment.
pub const TARGET_LAG_MS: &str = "floe.iceberg.target-lag-ms";
/// Topic setting: what the values are (`raw`, `schema-registry`, `json`), so what the table's columns are.
pub const VALUE_FORMAT: &str = "floe.iceberg.value.format";
/// Topic setting: what the keys are (`raw`, `schema-registry`, `json`): the binary `key`, or a typed `key` column.
pub const KEY_FORMAT: &str = "floe.iceberg.key.format";
/// Topic setting: a typed table keeps the bytes of typed values in a binary `value` column
/// too, of typed keys in `key_raw` (at creation).
pub const KEEP_RAW: &str = "floe.iceberg.keep-raw";
/// Topic setting: snapshots older than this expire (the most recent `min-to-keep` stay).
pub const SNAPSHOT_MAX_AGE_MS: &str = "floe.iceberg.snapshot.max-age-ms";
/// Topic setting: how many of the most recent snapshots expiry keeps (at least 1).
pub const SNAPSHOT_MIN_TO_KEEP: &str = "floe.iceberg.snapshot.min-to-keep";
/// Topic setting: the data files' target size (Iceberg's `write.target-file-size-bytes`).
pub const TARGET_FILE_SIZE: &str = "floe.iceberg.target-file-size-bytes";
/// Topic setting: whether maintenance compacts small data files.
pub const COMPACTION_ENABLED: &str = "floe.iceberg.compaction.enabled";
/// Topic setting: how many small files of a partition make a compaction.
pub const COMPACTION_MIN_INPUT_FILES: &str = "floe.iceberg.compaction.min-input-files";
/// Topic setting: whether the table is a copy of the log or the partition's older log
/// (`docs/shared-mode.md`).
pub const STORAGE: &str = "floe.iceberg.storage";
/// Topic (and broker) setting: retention never deletes offsets not yet tiered.
pub const RETENTION_GUARD: &str = "floe.iceberg.retention-guard";
/// Topic setting: the codec of batches rebuilt from a shared topic's table
/// (`original`: each batch's own, as its producer wrote it).
pub const SHARED_FETCH_COMPRESSION: &str = "floe.iceberg.shared.fetch-compression";
