//! The `floe.iceberg.*` settings: the broker's ([`TieringSettings`], with the
//! catalog's and the shared read path's), and the checks of a topic's own
//! (`validate_topic_overrides`, `validate_topic_change`) that CreateTopics and
//! AlterConfigs run before anything is stored. The topic keys' names live in
//! `floe_storage::iceberg_keys` (storage lists them among the keys it accepts)
//! and are re-exported here.

use std::collections::BTreeMap;

use crate::shared::FetchCompression;
use crate::{CatalogConfig, CatalogType, DataFormat, S3Settings, Secret};

pub use floe_storage::iceberg_keys::*;

/// `floe.iceberg.*` broker settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringSettings {
    /// Default of the topic setting `floe.iceberg.enabled`.
    pub enabled_default: bool,
    /// The catalog's name.
    pub catalog_name: String,
    /// The namespace of the tables.
    pub namespace: String,
    /// Default of the topic setting `floe.iceberg.partition-spec`.
    pub partition_spec: String,
    /// Default of the topic setting `floe.iceberg.target-lag-ms`.
    pub target_lag_ms: i64,
    /// Hold retention below untiered offsets.
    pub retention_guard: bool,
    /// Pass interval.
    pub tick_ms: u64,
    /// `floe.iceberg.orphan-check-interval-ms`: how often a table is checked for orphan data files.
    pub orphan_check_interval_ms: u64,
    /// `floe.iceberg.orphan-min-age-ms`: an unreferenced data file younger than this is left alone
    /// (it may belong to an attempt still in flight).
    pub orphan_min_age_ms: u64,
    /// `floe.iceberg.maintenance-interval-ms`: how often a table's snapshots are expired.
    pub maintenance_interval_ms: u64,
    /// Default of the topic setting `floe.iceberg.snapshot.max-age-ms`.
    pub snapshot_max_age_ms: i64,
    /// Default of the topic setting `floe.iceberg.snapshot.min-to-keep`.
    pub snapshot_min_to_keep: usize,
    /// Default of the topic setting `floe.iceberg.target-file-size-bytes`.
    pub target_file_size: u64,
    /// Default of the topic setting `floe.iceberg.compaction.enabled`.
    pub compaction_enabled: bool,
    /// Default of the topic setting `floe.iceberg.compaction.min-input-files`.
    pub compaction_min_input_files: usize,
    /// `floe.iceberg.compaction.max-bytes-per-run`: the compaction throttle.
    pub compaction_max_bytes_per_run: u64,
    /// The catalog and warehouse (`floe.iceberg.catalog-type`, `-uri`, `warehouse`, `s3.*`, `rest.*`).
    pub catalog: CatalogSettings,
    /// `log.retention.check.interval.ms`: how often a shared table's retention runs
    /// (it reads every manifest; Kafka's segment retention runs as often).
    pub retention_check_interval_ms: u64,
    /// How fetches below a shared topic's local log start offset are served from its table.
    pub shared_reads: SharedReadSettings,
}

/// The table read path of shared topics (`floe.iceberg.shared.*`; KIP-405's
/// `remote.log.reader.*` and KIP-1018's `remote.fetch.max.wait.ms` are the counterparts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedReadSettings {
    /// `floe.iceberg.shared.read-threads`: OS threads rebuilding batches from the table.
    pub threads: usize,
    /// `floe.iceberg.shared.read-queue`: table reads waiting for a thread; beyond, a fetch answers empty.
    pub queue: usize,
    /// `floe.iceberg.shared.cache-bytes`: rebuilt batches kept for the next fetch of the same offset.
    pub cache_bytes: u64,
    /// `floe.iceberg.shared.fetch-max-wait-ms`: how long a fetch waits for a table read
    /// before answering empty (the read goes on and fills the cache).
    pub fetch_max_wait_ms: u64,
}

/// Which catalog and warehouse the tables live in, as configured; defaults
/// (empty URI or warehouse) resolve against the data directory in
/// [`CatalogSettings::catalog_config`].
#[derive(Clone, PartialEq, Eq)]
pub struct CatalogSettings {
    /// SQL (embedded SQLite) or REST.
    pub catalog_type: CatalogType,
    /// `floe.iceberg.catalog-uri` (empty: the embedded database).
    pub uri: String,
    /// `floe.iceberg.warehouse` (empty: `DATA_DIR/iceberg/warehouse`, or the REST catalog's choice).
    pub warehouse: String,
    /// `floe.iceberg.s3.*`.
    pub s3: S3Settings,
    /// `floe.iceberg.rest.credential`.
    pub rest_credential: Secret,
    /// `floe.iceberg.rest.token`.
    pub rest_token: Secret,
}

impl std::fmt::Debug for CatalogSettings {
    // The secrets print masked by themselves; URIs may carry `user:password@`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::catalog_config::mask_userinfo;
        let s3 = S3Settings { endpoint: mask_userinfo(&self.s3.endpoint), ..self.s3.clone() };
        f.debug_struct("CatalogSettings")
            .field("catalog_type", &self.catalog_type)
            .field("uri", &mask_userinfo(&self.uri))
            .field("warehouse", &mask_userinfo(&self.warehouse))
            .field("s3", &s3)
            .field("rest_credential", &self.rest_credential)
            .field("rest_token", &self.rest_token)
            .finish()
    }
}

impl Default for CatalogSettings {
    fn default() -> Self {
        Self {
            catalog_type: CatalogType::Sql,
            uri: String::new(),
            warehouse: String::new(),
            s3: S3Settings::default(),
            rest_credential: Secret::default(),
            rest_token: Secret::default(),
        }
    }
}

impl CatalogSettings {
    /// The catalog to open for a broker whose data directory is `data_dir`, named `name`.
    pub fn catalog_config(&self, data_dir: &std::path::Path, name: &str) -> CatalogConfig {
        let dir = data_dir.join("iceberg");
        let mut config =
            CatalogConfig::sqlite(name, &dir.join("catalog.db"), &dir.join("warehouse"));
        config.catalog_type = self.catalog_type;
        match self.catalog_type {
            CatalogType::Sql if !self.uri.is_empty() => config.uri = self.uri.clone(),
            CatalogType::Sql => {}
            CatalogType::Rest => {
                config.uri = self.uri.clone();
                // A REST catalog places tables itself unless told where.
                config.warehouse = String::new();
            }
        }
        if !self.warehouse.is_empty() {
            config.warehouse = self.warehouse.clone();
        }
        config.s3 = self.s3.clone();
        config.rest_credential = self.rest_credential.clone();
        config.rest_token = self.rest_token.clone();
        config
    }
}

/// The partition spec of a shared table whose topic names none, with the broker's
/// built-in default `day(timestamp)` ([`table_partition_spec`] puts `identity(partition)`
/// in front of the broker's spec): offset pruning, and day pruning for SQL readers.
pub const SHARED_PARTITION_SPEC: &str = "identity(partition),day(timestamp)";

/// What the Iceberg table of a tiered topic is to its log (`floe.iceberg.storage`).
///
/// In `copy` (the default, and what Floe has always done) the table is a copy: local
/// retention deletes tiered segments and the table keeps its own view for SQL readers.
/// In `shared` the table is the partition's older log: a Kafka client fetches from it
/// what local disk no longer holds (KIP-405's tiered storage, with Iceberg as the
/// remote tier; `docs/shared-mode.md`). The mode is fixed when the topic is created
/// ([`validate_topic_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageMode {
    /// The table is a copy of the log (`copy`).
    #[default]
    Copy,
    /// The table is the partition's older log (`shared`).
    Shared,
}

impl StorageMode {
    /// The setting's value: `copy` or `shared` (as Kafka's enumerated settings, case-sensitive).
    ///
    /// # Errors
    /// Any other value, in the words CreateTopics and AlterConfigs answer with.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "copy" => Ok(Self::Copy),
            "shared" => Ok(Self::Shared),
            _ => Err(format!("{STORAGE}: {value:?} is not copy or shared")),
        }
    }

    /// The setting's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Shared => "shared",
        }
    }
}

impl std::fmt::Display for StorageMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a `floe.iceberg.shared.fetch-compression` value.
///
/// # Errors
/// The message INVALID_CONFIG carries.
pub fn parse_fetch_compression(value: &str) -> Result<FetchCompression, String> {
    Ok(match value.trim().to_ascii_lowercase().as_str() {
        "original" => FetchCompression::Original,
        "none" => FetchCompression::None,
        "gzip" => FetchCompression::Gzip,
        "snappy" => FetchCompression::Snappy,
        "lz4" => FetchCompression::Lz4,
        "zstd" => FetchCompression::Zstd,
        _ => return Err(format!("{SHARED_FETCH_COMPRESSION}: {value:?} is not original, none, gzip, snappy, lz4 or zstd")),
    })
}

/// The codec a shared topic's table-served batches are rebuilt with.
pub fn fetch_compression(config: &floe_storage::LogConfig) -> FetchCompression {
    config
        .floe
        .get(SHARED_FETCH_COMPRESSION)
        .and_then(|v| parse_fetch_compression(v).ok())
        .unwrap_or(FetchCompression::Original)
}

/// A topic's storage mode, from its effective config. A value that does not parse
/// (only one stored before validation existed could) is `copy`, what Floe did then.
pub fn storage_mode(config: &floe_storage::LogConfig) -> StorageMode {
    config.floe.get(STORAGE).and_then(|v| StorageMode::parse(v).ok()).unwrap_or_default()
}

/// The partition spec a topic's table is created with: the topic's
/// `floe.iceberg.partition-spec`, else the broker's (`broker_default`). A shared table
/// must find a partition's offsets by pruning on `identity(partition)`, so a shared
/// topic without its own spec gets `identity(partition)` in front of the broker's when
/// that lacks it (with the built-in default: [`SHARED_PARTITION_SPEC`]); a spec the
/// topic names itself is taken as it is, and refused by validation if unfit.
pub fn table_partition_spec(config: &floe_storage::LogConfig, broker_default: &str) -> String {
    if let Some(spec) = config.floe.get(PARTITION_SPEC) {
        return spec.trim().to_string();
    }
    let spec = broker_default.trim();
    if storage_mode(config) != StorageMode::Shared || has_identity_partition(spec) {
        return spec.to_string();
    }
    if spec.is_empty() {
        return "identity(partition)".to_string();
    }
    format!("identity(partition),{spec}")
}

/// Whether `spec` parses and has the term `identity(partition)`.
fn has_identity_partition(spec: &str) -> bool {
    use crate::iceberg::spec::Transform;
    use crate::schema::field_id;
    crate::schema::parse_partition_spec(spec).is_ok_and(|s| {
        s.fields()
            .iter()
            .any(|f| f.source_id == field_id::PARTITION && f.transform == Transform::Identity)
    })
}

/// Whether a shared table can use `spec`: `identity(partition)`, so each data file holds
/// one Kafka partition and its `offset` bounds prune a fetch to the files it needs; and
/// no term on `key`, `value` or `headers`, which would split one partition's offsets
/// over parallel files (`bucket[16](key)`: sixteen). Any timestamp transform is fine.
fn spec_fits_shared(spec: &str) -> bool {
    use crate::schema::field_id;
    let on_record_content = [
        field_id::KEY,
        field_id::VALUE,
        field_id::HEADERS,
        field_id::HEADERS_ELEMENT,
        field_id::HEADER_KEY,
        field_id::HEADER_VALUE,
    ];
    has_identity_partition(spec)
        && crate::schema::parse_partition_spec(spec)
            .is_ok_and(|s| s.fields().iter().all(|f| !on_record_content.contains(&f.source_id)))
}

/// Checks the `floe.iceberg.*` topic settings a topic would have with `overrides`, so
/// CreateTopics and (Incremental)AlterConfigs refuse a bad value (INVALID_CONFIG)
/// instead of the tiering thread failing on it later.
///
/// Each override is checked alone; then the combinations of `floe.iceberg.storage=shared`
/// are checked on the effective config, `overrides` over `defaults` (the broker's
/// topic defaults: `floe.iceberg.enabled`, `floe.iceberg.retention-guard`,
/// `cleanup.policy`) and `settings` (the default partition spec, and whether shared
/// mode is accepted at all): a topic that sets none of them gets the broker's, and
/// must be refused by what it gets. Overrides that storage refuses (an unknown key, a
/// bad `cleanup.policy`) are left to its own validation, which answers them.
///
/// # Errors
/// A message naming the key and what is wrong (`docs/shared-mode.md` 1.3).
pub fn validate_topic_overrides(
    overrides: &BTreeMap<String, String>,
    defaults: &floe_storage::LogConfig,
    settings: &TieringSettings,
) -> Result<(), String> {
    validate_each_override(overrides)?;
    match defaults.with_overrides(overrides) {
        Ok(effective) => validate_storage_mode(&effective, settings),
        Err(_) => Ok(()),
    }
}

/// Checks an (Incremental)AlterConfigs of an existing topic from its `current`
/// overrides to `next` (both over `defaults`): `floe.iceberg.storage` is fixed once
/// the topic exists. Leaving `shared` would strand the offsets only the table holds,
/// and entering it would serve old offsets from table rows written without the
/// columns a rebuild needs; Kafka refuses turning `remote.storage.enable` off the
/// same way. A value that does not change the mode (unset ↔ `copy`) passes.
///
/// # Errors
/// The message INVALID_CONFIG carries.
pub fn validate_topic_change(
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
    defaults: &floe_storage::LogConfig,
) -> Result<(), String> {
    let mode = |overrides: &BTreeMap<String, String>| {
        defaults.with_overrides(overrides).ok().map(|c| storage_mode(&c))
    };
    match (mode(current), mode(next)) {
        (Some(before), Some(after)) if before != after => Err(format!(
            "{STORAGE}: cannot change from {before} to {after} on an existing topic; it is fixed when the topic is created (create a new topic and copy the records to it)"
        )),
        _ => Ok(()),
    }
}

/// The `floe.iceberg.storage=shared` rows of `docs/shared-mode.md` 1.3 that need no
/// catalog, on the effective config. (Those on an existing table's spec and on
/// offsets only the table holds need the tiering thread, and are a later stage.)
fn validate_storage_mode(
    config: &floe_storage::LogConfig,
    settings: &TieringSettings,
) -> Result<(), String> {
    if storage_mode(config) != StorageMode::Shared {
        return Ok(());
    }
    let flag = |key: &str| config.floe.get(key).map(|v| v.trim().to_ascii_lowercase());
    if flag(ENABLED).as_deref() != Some("true") {
        return Err(format!("{STORAGE}: shared needs {ENABLED}=true"));
    }
    if config.cleanup_policy.compact {
        return Err(format!(
            "{STORAGE}: shared cannot be combined with cleanup.policy=compact: the log cleaner would remove records from the local log only, and the table keeps every version"
        ));
    }
    let spec = table_partition_spec(config, &settings.partition_spec);
    if !spec_fits_shared(&spec) {
        return Err(format!(
            "{STORAGE}: shared needs a partition spec with identity(partition) and no term on key, value or headers, to find a partition's offsets in the table; {PARTITION_SPEC} is {spec:?}"
        ));
    }
    // Storage holds retention for the table unless the topic (or the broker default) turns the guard off.
    if flag(RETENTION_GUARD).as_deref() == Some("false") {
        return Err(format!("{STORAGE}: shared needs {RETENTION_GUARD}=true: a local segment may go only once the table holds it"));
    }
    if flag(KEEP_RAW).as_deref() != Some("true") {
        for key in [VALUE_FORMAT, KEY_FORMAT] {
            let format = config.floe.get(key).map_or("raw", |v| v.trim());
            if DataFormat::parse(format).is_ok_and(|f| f != DataFormat::Raw) {
                return Err(format!(
                    "{STORAGE}: shared with {key}={format} needs {KEEP_RAW}=true (the table must hold the bytes a consumer fetches)"
                ));
            }
        }
    }
    Ok(())
}

/// Each `floe.iceberg.*` override alone: its value parses.
fn validate_each_override(overrides: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in overrides {
        let v = value.trim();
        match key.as_str() {
            STORAGE => {
                StorageMode::parse(v)?;
            }
            ENABLED | KEEP_RAW | COMPACTION_ENABLED | RETENTION_GUARD
                if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") =>
            {
                return Err(format!("{key}: {value:?} is not true or false"));
            }
            VALUE_FORMAT | KEY_FORMAT => {
                DataFormat::parse(v).map_err(|e| format!("{key}: {e}"))?;
            }
            PARTITION_SPEC => {
                crate::schema::parse_partition_spec(v).map_err(|e| e.to_string())?;
            }
            SNAPSHOT_MAX_AGE_MS if v.parse::<u64>().is_err() => {
                return Err(format!("{key}: {value:?} is not a non-negative integer"));
            }
            SNAPSHOT_MIN_TO_KEEP if v.parse::<u64>().map_or(true, |n| n == 0) => {
                return Err(format!("{key}: {value:?} is not a positive integer"));
            }
            TARGET_LAG_MS if v.parse::<u64>().is_err() => {
                return Err(format!("{key}: {value:?} is not a non-negative integer"));
            }
            TARGET_FILE_SIZE | COMPACTION_MIN_INPUT_FILES
                if v.parse::<u64>().map_or(true, |n| n == 0) =>
            {
                return Err(format!("{key}: {value:?} is not a positive integer"));
            }
            SHARED_FETCH_COMPRESSION => {
                parse_fetch_compression(v)?;
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage refuses a `floe.*` topic key it does not list: every key tiering reads is listed.
    #[test]
    fn every_topic_key_tiering_reads_is_accepted_by_storage() {
        let keys = [
            ENABLED,
            PARTITION_SPEC,
            TARGET_LAG_MS,
            VALUE_FORMAT,
            KEY_FORMAT,
            KEEP_RAW,
            SNAPSHOT_MAX_AGE_MS,
            SNAPSHOT_MIN_TO_KEEP,
            TARGET_FILE_SIZE,
            COMPACTION_ENABLED,
            COMPACTION_MIN_INPUT_FILES,
            STORAGE,
            RETENTION_GUARD,
            SHARED_FETCH_COMPRESSION,
        ];
        for key in keys {
            assert!(floe_storage::config::FLOE_TOPIC_KEYS.contains(&key), "{key}");
        }
        assert_eq!(
            keys.len(),
            floe_storage::config::FLOE_TOPIC_KEYS.len(),
            "storage lists a key tiering does not read"
        );
    }

    fn settings() -> TieringSettings {
        TieringSettings {
            enabled_default: false,
            catalog_name: "floe".into(),
            namespace: "kafka".into(),
            partition_spec: crate::schema::DEFAULT_PARTITION_SPEC.into(),
            target_lag_ms: 60_000,
            retention_guard: true,
            tick_ms: 5000,
            orphan_check_interval_ms: 600_000,
            orphan_min_age_ms: 1_800_000,
            maintenance_interval_ms: 600_000,
            snapshot_max_age_ms: 86_400_000,
            snapshot_min_to_keep: 1,
            target_file_size: 128 << 20,
            compaction_enabled: true,
            compaction_min_input_files: 5,
            compaction_max_bytes_per_run: 512 << 20,
            catalog: CatalogSettings::default(),
            shared_reads: SharedReadSettings {
                threads: 1,
                queue: 64,
                cache_bytes: 256 << 20,
                fetch_max_wait_ms: 500,
            },
            retention_check_interval_ms: 300_000,
        }
    }

    /// The broker's topic defaults as `BrokerConfig` builds them (tiering off, guard on).
    fn broker_defaults() -> floe_storage::LogConfig {
        let keys = BTreeMap::from([
            (ENABLED.to_string(), "false".to_string()),
            (RETENTION_GUARD.to_string(), "true".to_string()),
        ]);
        floe_storage::LogConfig::default().with_overrides(&keys).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn check(pairs: &[(&str, &str)]) -> Result<(), String> {
        validate_topic_overrides(&map(pairs), &broker_defaults(), &settings())
    }

    #[test]
    fn topic_settings_are_validated() {
        let o = |k: &str, v: &str| check(&[(k, v)]);
        assert!(o(ENABLED, "true").is_ok());
        assert!(o(ENABLED, "yes").is_err());
        assert!(o(PARTITION_SPEC, "hour(timestamp),identity(partition)").is_ok());
        assert!(o(PARTITION_SPEC, "hour(nope)").is_err());
        assert!(o(TARGET_LAG_MS, "-1").is_err());
        assert!(o(VALUE_FORMAT, "schema-registry").is_ok());
        assert!(o(VALUE_FORMAT, "avro").is_err());
        assert!(o(VALUE_FORMAT, "json").is_ok());
        assert!(o(KEY_FORMAT, "schema-registry").is_ok());
        assert!(o(KEY_FORMAT, "json").is_ok());
        let e = o(KEY_FORMAT, "avro").unwrap_err();
        assert!(e.starts_with(KEY_FORMAT), "{e}");
        assert!(o(KEEP_RAW, "maybe").is_err());
        assert!(o(RETENTION_GUARD, "maybe").is_err());
        assert!(o("retention.ms", "x").is_ok(), "not ours: storage answers it");
    }

    /// A shared topic with everything it needs: tiering on, and the broker's defaults for the rest.
    const SHARED: &[(&str, &str)] = &[(STORAGE, "shared"), (ENABLED, "true")];

    fn shared_with(extra: &[(&str, &str)]) -> Result<(), String> {
        let mut pairs = SHARED.to_vec();
        pairs.extend_from_slice(extra);
        check(&pairs)
    }

    #[test]
    fn storage_mode_values() {
        assert_eq!(check(&[(STORAGE, "copy")]), Ok(()));
        assert_eq!(shared_with(&[]), Ok(()), "the shared default spec has identity(partition)");
        assert_eq!(
            check(&[(STORAGE, "x")]),
            Err(r#"floe.iceberg.storage: "x" is not copy or shared"#.to_string())
        );
        assert_eq!(
            check(&[(STORAGE, "Shared")]),
            Err(r#"floe.iceberg.storage: "Shared" is not copy or shared"#.to_string())
        );
        assert_eq!(
            check(&[(STORAGE, "")]),
            Err(r#"floe.iceberg.storage: "" is not copy or shared"#.to_string())
        );
    }

    #[test]
    fn shared_needs_tiering_on() {
        let e = Err("floe.iceberg.storage: shared needs floe.iceberg.enabled=true".to_string());
        assert_eq!(check(&[(STORAGE, "shared")]), e, "the broker default is off");
        assert_eq!(check(&[(STORAGE, "shared"), (ENABLED, "false")]), e);
        // The broker default counts: on there, a topic need not set it.
        let on =
            floe_storage::LogConfig::default().with_overrides(&map(&[(ENABLED, "true")])).unwrap();
        assert_eq!(
            validate_topic_overrides(&map(&[(STORAGE, "shared")]), &on, &settings()),
            Ok(())
        );
        assert_eq!(
            validate_topic_overrides(
                &map(&[(STORAGE, "shared"), (ENABLED, "false")]),
                &on,
                &settings()
            ),
            e
        );
    }

    #[test]
    fn shared_refuses_compaction() {
        let e = Err("floe.iceberg.storage: shared cannot be combined with cleanup.policy=compact: the log cleaner would remove records from the local log only, and the table keeps every version".to_string());
        assert_eq!(shared_with(&[("cleanup.policy", "compact")]), e);
        assert_eq!(shared_with(&[("cleanup.policy", "compact,delete")]), e);
        assert_eq!(shared_with(&[("cleanup.policy", "delete")]), Ok(()));
        // The broker's log.cleanup.policy is the topic's default.
        let compacted =
            broker_defaults().with_overrides(&map(&[("cleanup.policy", "compact")])).unwrap();
        assert_eq!(validate_topic_overrides(&map(SHARED), &compacted, &settings()), e);
        // A bad cleanup.policy is storage's to answer.
        assert_eq!(shared_with(&[("cleanup.policy", "sometimes")]), Ok(()));
    }

    #[test]
    fn shared_needs_a_spec_that_finds_offsets() {
        let e = |spec: &str| {
            Err(format!(
                "floe.iceberg.storage: shared needs a partition spec with identity(partition) and no term on key, value or headers, to find a partition's offsets in the table; floe.iceberg.partition-spec is \"{spec}\""
            ))
        };
        assert_eq!(shared_with(&[(PARTITION_SPEC, "day(timestamp)")]), e("day(timestamp)"));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "")]), e(""));
        assert_eq!(
            shared_with(&[(PARTITION_SPEC, "bucket[4](partition)")]),
            e("bucket[4](partition)")
        );
        assert_eq!(
            shared_with(&[(PARTITION_SPEC, "identity(partition),bucket[16](key)")]),
            e("identity(partition),bucket[16](key)")
        );
        assert_eq!(
            shared_with(&[(PARTITION_SPEC, "identity(partition),truncate[4](value)")]),
            e("identity(partition),truncate[4](value)")
        );
        assert_eq!(shared_with(&[(PARTITION_SPEC, "identity(partition)")]), Ok(()));
        assert_eq!(
            shared_with(&[(PARTITION_SPEC, "hour(timestamp), identity(partition)")]),
            Ok(())
        );
        assert_eq!(
            shared_with(&[(PARTITION_SPEC, "identity(partition),bucket[8](offset)")]),
            Ok(())
        );
        // A copy topic keeps any spec.
        assert_eq!(check(&[(ENABLED, "true"), (PARTITION_SPEC, "bucket[16](key)")]), Ok(()));
        // The broker's spec is the topic's default: one with a key term is refused too.
        let mut keyed = settings();
        keyed.partition_spec = "bucket[16](key)".into();
        assert_eq!(
            validate_topic_overrides(&map(SHARED), &broker_defaults(), &keyed),
            e("identity(partition),bucket[16](key)")
        );
    }

    #[test]
    fn shared_needs_the_retention_guard() {
        let e = Err("floe.iceberg.storage: shared needs floe.iceberg.retention-guard=true: a local segment may go only once the table holds it".to_string());
        assert_eq!(shared_with(&[(RETENTION_GUARD, "false")]), e);
        assert_eq!(shared_with(&[(RETENTION_GUARD, "FALSE")]), e);
        assert_eq!(shared_with(&[(RETENTION_GUARD, "true")]), Ok(()));
        let unguarded =
            broker_defaults().with_overrides(&map(&[(RETENTION_GUARD, "false")])).unwrap();
        assert_eq!(validate_topic_overrides(&map(SHARED), &unguarded, &settings()), e);
    }

    #[test]
    fn the_storage_mode_is_fixed_once_a_topic_exists() {
        let defaults = broker_defaults();
        let copy = map(&[(ENABLED, "true")]);
        let shared = map(&[(ENABLED, "true"), (STORAGE, "shared")]);
        let explicit_copy = map(&[(ENABLED, "true"), (STORAGE, "copy")]);
        let e = |a: &str, b: &str| {
            Err(format!("floe.iceberg.storage: cannot change from {a} to {b} on an existing topic; it is fixed when the topic is created (create a new topic and copy the records to it)"))
        };
        assert_eq!(validate_topic_change(&copy, &shared, &defaults), e("copy", "shared"));
        assert_eq!(validate_topic_change(&shared, &copy, &defaults), e("shared", "copy"));
        assert_eq!(validate_topic_change(&shared, &explicit_copy, &defaults), e("shared", "copy"));
        assert_eq!(
            validate_topic_change(&copy, &explicit_copy, &defaults),
            Ok(()),
            "unset is copy"
        );
        let retention = map(&[(ENABLED, "true"), (STORAGE, "shared"), ("retention.ms", "1000")]);
        assert_eq!(
            validate_topic_change(&shared, &retention, &defaults),
            Ok(()),
            "other settings of a shared topic change freely"
        );
    }

    #[test]
    fn shared_typed_tables_keep_the_raw_bytes() {
        let e = |key: &str, format: &str| {
            Err(format!("floe.iceberg.storage: shared with {key}={format} needs floe.iceberg.keep-raw=true (the table must hold the bytes a consumer fetches)"))
        };
        assert_eq!(
            shared_with(&[(VALUE_FORMAT, "schema-registry")]),
            e(VALUE_FORMAT, "schema-registry")
        );
        assert_eq!(
            shared_with(&[(VALUE_FORMAT, "json"), (KEEP_RAW, "false")]),
            e(VALUE_FORMAT, "json")
        );
        assert_eq!(shared_with(&[(KEY_FORMAT, "json")]), e(KEY_FORMAT, "json"));
        assert_eq!(
            shared_with(&[(KEY_FORMAT, "schema-registry"), (VALUE_FORMAT, "json")]),
            e(VALUE_FORMAT, "json")
        );
        assert_eq!(
            shared_with(&[
                (VALUE_FORMAT, "schema-registry"),
                (KEY_FORMAT, "json"),
                (KEEP_RAW, "true")
            ]),
            Ok(())
        );
        assert_eq!(shared_with(&[(VALUE_FORMAT, "raw"), (KEY_FORMAT, "raw")]), Ok(()));
    }

    #[test]
    fn the_mode_and_the_table_spec_of_a_topic() {
        let config =
            |pairs: &[(&str, &str)]| broker_defaults().with_overrides(&map(pairs)).unwrap();
        assert_eq!(storage_mode(&config(&[])), StorageMode::Copy);
        assert_eq!(storage_mode(&config(&[(STORAGE, "shared")])), StorageMode::Shared);
        assert_eq!(storage_mode(&config(&[(STORAGE, "bogus")])), StorageMode::Copy);
        assert_eq!(StorageMode::Shared.to_string(), "shared");
        let day = crate::schema::DEFAULT_PARTITION_SPEC;
        assert_eq!(table_partition_spec(&config(&[]), day), "day(timestamp)");
        assert_eq!(
            table_partition_spec(&config(&[(STORAGE, "shared")]), day),
            SHARED_PARTITION_SPEC
        );
        assert_eq!(
            table_partition_spec(&config(&[(STORAGE, "shared")]), "hour(timestamp)"),
            "identity(partition),hour(timestamp)"
        );
        assert_eq!(
            table_partition_spec(
                &config(&[(STORAGE, "shared")]),
                "hour(timestamp),identity(partition)"
            ),
            "hour(timestamp),identity(partition)"
        );
        assert_eq!(
            table_partition_spec(&config(&[(STORAGE, "shared")]), ""),
            "identity(partition)"
        );
        // The topic's own spec is taken as it is (validation refuses it if unfit).
        assert_eq!(
            table_partition_spec(
                &config(&[(STORAGE, "shared"), (PARTITION_SPEC, " day(timestamp) ")]),
                day
            ),
            "day(timestamp)"
        );
        assert!(spec_fits_shared(SHARED_PARTITION_SPEC));
    }
}
