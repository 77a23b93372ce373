//! Per-topic log configuration: Kafka's topic config keys, their broker
//! defaults, parsing of overrides, and the listing DescribeConfigs reports.

use std::collections::BTreeMap;

use crate::error::{Result, StorageError};
use crate::iceberg_keys;

/// `segment.bytes`
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// `segment.ms`
pub const SEGMENT_MS: &str = "segment.ms";
/// `segment.jitter.ms` (accepted, not applied)
pub const SEGMENT_JITTER_MS: &str = "segment.jitter.ms";
/// `index.interval.bytes`
pub const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
/// `retention.ms`
pub const RETENTION_MS: &str = "retention.ms";
/// `retention.bytes`
pub const RETENTION_BYTES: &str = "retention.bytes";
/// `local.retention.ms` (KIP-405): applied to shared-storage topics only, see [`LogConfig::is_shared_storage`]
pub const LOCAL_RETENTION_MS: &str = "local.retention.ms";
/// `local.retention.bytes` (KIP-405): applied to shared-storage topics only
pub const LOCAL_RETENTION_BYTES: &str = "local.retention.bytes";
/// `local.retention.*` value meaning "the same as `retention.*`" (Kafka's default).
pub const LOCAL_RETENTION_AS_RETENTION: i64 = -2;
/// `flush.messages`
pub const FLUSH_MESSAGES: &str = "flush.messages";
/// `flush.ms`
pub const FLUSH_MS: &str = "flush.ms";
/// `max.message.bytes`
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
/// `message.timestamp.type`
pub const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// `cleanup.policy`
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// `min.cleanable.dirty.ratio`
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
/// `min.compaction.lag.ms`
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
/// `max.compaction.lag.ms`
pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
/// `delete.retention.ms`
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
/// `file.delete.delay.ms` (accepted; deletion is immediate, see `PartitionLog::apply_retention`)
pub const FILE_DELETE_DELAY_MS: &str = "file.delete.delay.ms";
/// `min.insync.replicas` (accepted; Floe has one replica)
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Prefix of Floe's own keys, stored and reported but not interpreted here.
pub const FLOE_PREFIX: &str = "floe.";

/// Every `floe.*` topic key: the one list of their names. Storage stores and
/// reports them without interpreting them (tiering, schema validation and the
/// shared read path do); a `floe.*` key not in this list is refused like any
/// unknown Kafka key, so a misspelt `floe.iceberg.enabledd=true` cannot create a
/// topic with tiering silently off.
pub const FLOE_TOPIC_KEYS: &[&str] = &[
    iceberg_keys::ENABLED,
    iceberg_keys::PARTITION_SPEC,
    iceberg_keys::TARGET_LAG_MS,
    iceberg_keys::VALUE_FORMAT,
    iceberg_keys::KEY_FORMAT,
    iceberg_keys::KEEP_RAW,
    iceberg_keys::SNAPSHOT_MAX_AGE_MS,
    iceberg_keys::SNAPSHOT_MIN_TO_KEEP,
    iceberg_keys::TARGET_FILE_SIZE,
    iceberg_keys::COMPACTION_ENABLED,
    iceberg_keys::COMPACTION_MIN_INPUT_FILES,
    iceberg_keys::STORAGE,
    iceberg_keys::RETENTION_GUARD,
    iceberg_keys::SHARED_FETCH_COMPRESSION,
];

/// The reason given for an unknown topic key (Kafka's or Floe's).
pub const UNKNOWN_TOPIC_CONFIG: &str = "unknown topic config";

/// The known name closest to `typed`, if one is close enough to be what was
/// meant: a "did you mean" for settings people type.
pub fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let typed = typed.trim().to_ascii_lowercase();
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(&typed, k), k))
        // A third of the name may differ (two edits at least): typos, not other settings.
        .filter(|(distance, k)| *distance <= (k.len() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// Why `key` is not a topic config, with the closest known key when there is one.
fn unknown_topic_key(key: &str) -> String {
    let known = KNOWN_KEYS
        .iter()
        .chain(FLOE_TOPIC_KEYS)
        .chain(SCHEMA_VALIDATION_KEYS)
        .chain(ACCEPTED_NOT_APPLIED.iter().map(|(k, _)| k))
        .copied();
    match did_you_mean(key, known) {
        Some(k) => format!("{UNKNOWN_TOPIC_CONFIG}; did you mean `{k}`?"),
        None => UNKNOWN_TOPIC_CONFIG.to_string(),
    }
}

/// Confluent Server's broker-side schema validation keys, by their names, so the
/// same topic configs work against Floe: stored and reported with the `floe.*`
/// keys, interpreted by the broker's produce path. The validation keys take
/// `true`/`false`; the strategy keys a subject name strategy (short or Java class name).
pub const SCHEMA_VALIDATION_KEYS: &[&str] = &[
    "confluent.key.schema.validation",
    "confluent.value.schema.validation",
    "confluent.key.subject.name.strategy",
    "confluent.value.subject.name.strategy",
];

/// The subject name strategies a `confluent.*.subject.name.strategy` may name.
const SUBJECT_NAME_STRATEGIES: &[&str] =
    &["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"];

/// Kafka topic keys that Floe accepts, stores and reports, but whose
/// behaviour does not apply to a single-replica log that never recompresses:
/// (key, Kafka's default). Clients and tools set them routinely
/// (`compression.type` above all), so refusing them would break topic
/// creation for no gain. `compression.type` is validated: batches are always
/// stored as the producer compressed them, which is Kafka's `producer`.
pub const ACCEPTED_NOT_APPLIED: &[(&str, &str)] = &[
    ("compression.type", "producer"),
    ("follower.replication.throttled.replicas", ""),
    ("leader.replication.throttled.replicas", ""),
    ("message.downconversion.enable", "true"),
    ("message.timestamp.after.max.ms", "9223372036854775807"),
    ("message.timestamp.before.max.ms", "9223372036854775807"),
    ("message.timestamp.difference.max.ms", "9223372036854775807"),
    ("preallocate", "false"),
    ("remote.storage.enable", "false"),
    ("segment.index.bytes", "10485760"),
    ("unclean.leader.election.enable", "false"),
];

const COMPRESSION_TYPES: &[&str] =
    &["producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"];

/// The keys [`LogConfig`] understands, in the order DescribeConfigs lists them.
pub const KNOWN_KEYS: &[&str] = &[
    CLEANUP_POLICY,
    DELETE_RETENTION_MS,
    FILE_DELETE_DELAY_MS,
    FLUSH_MESSAGES,
    FLUSH_MS,
    INDEX_INTERVAL_BYTES,
    LOCAL_RETENTION_BYTES,
    LOCAL_RETENTION_MS,
    MAX_COMPACTION_LAG_MS,
    MAX_MESSAGE_BYTES,
    MESSAGE_TIMESTAMP_TYPE,
    MIN_CLEANABLE_DIRTY_RATIO,
    MIN_COMPACTION_LAG_MS,
    MIN_INSYNC_REPLICAS,
    RETENTION_BYTES,
    RETENTION_MS,
    SEGMENT_BYTES,
    SEGMENT_JITTER_MS,
    SEGMENT_MS,
];

/// Which timestamp a topic's records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageTimestampType {
    /// The producer's timestamps, stored as sent.
    CreateTime,
    /// The broker's clock at append time, written into each batch.
    LogAppendTime,
}

/// `cleanup.policy`: which of Kafka's two policies apply to a topic's old segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: `retention.ms` and `retention.bytes` delete whole old segments.
    pub delete: bool,
    /// `compact`: the log cleaner keeps only the latest record of each key.
    pub compact: bool,
}

impl CleanupPolicy {
    /// Parses Kafka's comma-separated list (`delete`, `compact`, `compact,delete`).
    fn parse(value: &str) -> Option<Self> {
        let mut policy = Self { delete: false, compact: false };
        for item in value.split(',').map(str::trim) {
            match item {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        (policy.delete || policy.compact).then_some(policy)
    }

    fn render(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        }
    }
}

/// One row of DescribeConfigs: a key, its effective value, and whether it is the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The key.
    pub name: String,
    /// The effective value.
    pub value: String,
    /// `true` when no topic override sets it (the broker default applies).
    pub is_default: bool,
}

/// The effective configuration of one topic's partition logs.
///
/// Built from broker defaults ([`LogConfig::default`] or the broker's own
/// settings) with topic overrides applied by [`LogConfig::with_overrides`].
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `delete`, `compact` or both.
    pub cleanup_policy: CleanupPolicy,
    /// A compacted log is cleaned once dirty bytes / all cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// Records younger than this are never compacted.
    pub min_compaction_lag_ms: i64,
    /// A log whose oldest dirty record is older than this is cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// How long the cleaner keeps tombstones after the clean that first saw them (KIP-534 delete horizon).
    pub delete_retention_ms: i64,
    /// Roll a segment before it would exceed this many bytes.
    pub segment_bytes: u64,
    /// Roll a segment this long after its first append.
    pub segment_ms: i64,
    /// Accepted for compatibility; not applied.
    pub segment_jitter_ms: i64,
    /// Bytes of log between two index entries.
    pub index_interval_bytes: u64,
    /// Delete sealed segments whose newest record is older than this; -1 keeps forever.
    pub retention_ms: i64,
    /// Delete oldest sealed segments while the log is larger than this; -1 for no limit.
    pub retention_bytes: i64,
    /// Shared storage only: local segments whose newest record is older than
    /// this go once the table holds them; -2 is `retention_ms`, -1 keeps them
    /// locally. See [`LogConfig::effective_local_retention_ms`].
    pub local_retention_ms: i64,
    /// Shared storage only: oldest local segments go (once in the table)
    /// while local bytes exceed this; -2 is `retention_bytes`, -1 for no limit.
    pub local_retention_bytes: i64,
    /// Fsync after this many unflushed messages.
    pub flush_messages: i64,
    /// Fsync when the last flush is this old.
    pub flush_ms: i64,
    /// Largest record batch accepted.
    pub max_message_bytes: usize,
    /// Which timestamps records carry.
    pub message_timestamp_type: MessageTimestampType,
    /// Accepted for compatibility; segments are deleted as soon as no longer listed.
    pub file_delete_delay_ms: i64,
    /// Accepted for compatibility; Floe has a single replica.
    pub min_insync_replicas: i32,
    /// Forget a producer id idle this long with no ongoing transaction
    /// (the broker's `producer.id.expiration.ms`; not a topic key).
    pub producer_id_expiration_ms: i64,
    /// `floe.*` keys and [`SCHEMA_VALIDATION_KEYS`], stored and reported verbatim.
    pub floe: BTreeMap<String, String>,
    /// Values of [`ACCEPTED_NOT_APPLIED`] keys that were set.
    pub accepted: BTreeMap<String, String>,
}

impl Default for LogConfig {
    /// Kafka's broker defaults.
    fn default() -> Self {
        Self {
            cleanup_policy: CleanupPolicy { delete: true, compact: false },
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            segment_jitter_ms: 0,
            index_interval_bytes: 4096,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            local_retention_ms: LOCAL_RETENTION_AS_RETENTION,
            local_retention_bytes: LOCAL_RETENTION_AS_RETENTION,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            max_message_bytes: 1_048_588,
            message_timestamp_type: MessageTimestampType::CreateTime,
            file_delete_delay_ms: 60_000,
            min_insync_replicas: 1,
            producer_id_expiration_ms: 86_400_000,
            floe: BTreeMap::new(),
            accepted: BTreeMap::new(),
        }
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> StorageError {
    StorageError::InvalidConfig { key: key.to_string(), reason: reason.into() }
}

fn parse_int<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    key: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<T> {
    let v: T = value
        .trim()
        .parse()
        .map_err(|_| invalid(key, format!("expected a whole number from {min} to {max}")))?;
    if v < min || v > max {
        return Err(invalid(
            key,
            format!(
                "{} is out of range: expected a whole number from {min} to {max}",
                value.trim()
            ),
        ));
    }
    Ok(v)
}

impl LogConfig {
    /// These settings with `overrides` applied on top, then checked as a
    /// whole ([`LogConfig::validate`]): a key's limit may be another key's
    /// value, from the overrides or from these settings (the broker defaults).
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] naming the first unknown key or bad value.
    pub fn with_overrides(&self, overrides: &BTreeMap<String, String>) -> Result<Self> {
        let mut config = self.clone();
        for (key, value) in overrides {
            config.set(key, value)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// The checks across keys, on effective values: `local.retention.ms` and
    /// `local.retention.bytes` must not exceed a finite `retention.ms` /
    /// `retention.bytes` (Kafka refuses the same: the local window is part of
    /// the partition, so it cannot be longer than the partition's retention).
    /// `-2` (same as retention) passes; so does any value when retention is
    /// unlimited (`-1`). A local `-1` (keep locally forever) under a finite
    /// retention exceeds it.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] naming the local key.
    pub fn validate(&self) -> Result<()> {
        for (key, local, retention_key, retention) in [
            (LOCAL_RETENTION_MS, self.local_retention_ms, RETENTION_MS, self.retention_ms),
            (
                LOCAL_RETENTION_BYTES,
                self.local_retention_bytes,
                RETENTION_BYTES,
                self.retention_bytes,
            ),
        ] {
            let exceeds = local != LOCAL_RETENTION_AS_RETENTION
                && retention >= 0
                && (local == -1 || local > retention);
            if exceeds {
                let what = if local == -1 {
                    "-1 (keep locally forever)".to_string()
                } else {
                    local.to_string()
                };
                return Err(invalid(
                    key,
                    format!("{what} must not exceed {retention_key} ({retention})"),
                ));
            }
        }
        Ok(())
    }

    /// Sets one key.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] for an unknown key or a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        const I32: i64 = i32::MAX as i64;
        match key {
            SEGMENT_BYTES => self.segment_bytes = parse_int(key, value, 14u64, I32 as u64)?,
            SEGMENT_MS => self.segment_ms = parse_int(key, value, 1, i64::MAX)?,
            SEGMENT_JITTER_MS => self.segment_jitter_ms = parse_int(key, value, 0, i64::MAX)?,
            INDEX_INTERVAL_BYTES => {
                self.index_interval_bytes = parse_int(key, value, 0u64, I32 as u64)?
            }
            RETENTION_MS => self.retention_ms = parse_int(key, value, -1, i64::MAX)?,
            RETENTION_BYTES => self.retention_bytes = parse_int(key, value, i64::MIN, i64::MAX)?,
            LOCAL_RETENTION_MS => {
                self.local_retention_ms =
                    parse_int(key, value, LOCAL_RETENTION_AS_RETENTION, i64::MAX)?
            }
            LOCAL_RETENTION_BYTES => {
                self.local_retention_bytes =
                    parse_int(key, value, LOCAL_RETENTION_AS_RETENTION, i64::MAX)?
            }
            FLUSH_MESSAGES => self.flush_messages = parse_int(key, value, 1, i64::MAX)?,
            FLUSH_MS => self.flush_ms = parse_int(key, value, 0, i64::MAX)?,
            MAX_MESSAGE_BYTES => {
                self.max_message_bytes = parse_int(key, value, 0usize, I32 as usize)?
            }
            MESSAGE_TIMESTAMP_TYPE => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => MessageTimestampType::CreateTime,
                    "LogAppendTime" => MessageTimestampType::LogAppendTime,
                    _ => {
                        return Err(invalid(
                            key,
                            format!("{value:?} is not CreateTime or LogAppendTime"),
                        ))
                    }
                }
            }
            CLEANUP_POLICY => {
                self.cleanup_policy = CleanupPolicy::parse(value).ok_or_else(|| {
                    invalid(
                        key,
                        format!("{value:?} is not a list of cleanup policies (delete, compact)"),
                    )
                })?
            }
            MIN_CLEANABLE_DIRTY_RATIO => {
                let ratio: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid(key, format!("{value:?} is not a number")))?;
                if !(0.0..=1.0).contains(&ratio) {
                    return Err(invalid(key, format!("{value} is not in [0, 1]")));
                }
                self.min_cleanable_dirty_ratio = ratio;
            }
            MIN_COMPACTION_LAG_MS => {
                self.min_compaction_lag_ms = parse_int(key, value, 0, i64::MAX)?
            }
            MAX_COMPACTION_LAG_MS => {
                self.max_compaction_lag_ms = parse_int(key, value, 1, i64::MAX)?
            }
            DELETE_RETENTION_MS => self.delete_retention_ms = parse_int(key, value, 0, i64::MAX)?,
            FILE_DELETE_DELAY_MS => self.file_delete_delay_ms = parse_int(key, value, 0, i64::MAX)?,
            MIN_INSYNC_REPLICAS => self.min_insync_replicas = parse_int(key, value, 1, i32::MAX)?,
            _ if FLOE_TOPIC_KEYS.contains(&key) => {
                self.floe.insert(key.to_string(), value.to_string());
            }
            _ if SCHEMA_VALIDATION_KEYS.contains(&key) => {
                let v = value.trim();
                let ok = if key.ends_with(".validation") {
                    v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false")
                } else {
                    SUBJECT_NAME_STRATEGIES.contains(&v.rsplit('.').next().unwrap_or(v))
                };
                if !ok {
                    let expected = if key.ends_with(".validation") {
                        "true or false".to_string()
                    } else {
                        SUBJECT_NAME_STRATEGIES.join(", ")
                    };
                    return Err(invalid(key, format!("{value:?} is not one of {expected}")));
                }
                self.floe.insert(key.to_string(), v.to_string());
            }
            "compression.type" if !COMPRESSION_TYPES.contains(&value.trim()) => {
                return Err(invalid(
                    key,
                    format!("{value:?} is not one of {}", COMPRESSION_TYPES.join(", ")),
                ))
            }
            _ if ACCEPTED_NOT_APPLIED.iter().any(|(k, _)| *k == key) => {
                self.accepted.insert(key.to_string(), value.trim().to_string());
            }
            _ => return Err(invalid(key, unknown_topic_key(key))),
        }
        Ok(())
    }

    /// Iceberg tiering is on for the topic (`floe.iceberg.enabled=true`) with its
    /// retention guard (`floe.iceberg.retention-guard` not `false`): retention
    /// waits for the tiering thread's floor ([`crate::PartitionLog::set_retention_floor`]).
    pub fn retention_held_for_tiering(&self) -> bool {
        let flag = |k: &str| self.floe.get(k).map(|v| v.trim().to_ascii_lowercase());
        flag(iceberg_keys::ENABLED).as_deref() == Some("true")
            && flag(iceberg_keys::RETENTION_GUARD).as_deref() != Some("false")
    }

    /// Shared storage (`floe.iceberg.storage=shared`, issue #16): the Iceberg
    /// table is the partition's older log, so local segments go by
    /// `local.retention.*` once the table holds them, while the log start
    /// offset stays where the table's data begins. Needs tiering on
    /// (`floe.iceberg.enabled=true`); anything else (`copy`, unset, tiering
    /// off) is copy mode, today's behaviour. Values are compared trimmed and
    /// case-insensitively, as the other `floe.iceberg.*` flags.
    pub fn is_shared_storage(&self) -> bool {
        let flag = |k: &str| self.floe.get(k).map(|v| v.trim().to_ascii_lowercase());
        flag(iceberg_keys::ENABLED).as_deref() == Some("true")
            && flag(iceberg_keys::STORAGE).as_deref() == Some("shared")
    }

    /// `local.retention.ms` in force: `-2` resolves to `retention.ms` (KIP-405).
    pub fn effective_local_retention_ms(&self) -> i64 {
        match self.local_retention_ms {
            LOCAL_RETENTION_AS_RETENTION => self.retention_ms,
            ms => ms,
        }
    }

    /// `local.retention.bytes` in force: `-2` resolves to `retention.bytes` (KIP-405).
    pub fn effective_local_retention_bytes(&self) -> i64 {
        match self.local_retention_bytes {
            LOCAL_RETENTION_AS_RETENTION => self.retention_bytes,
            bytes => bytes,
        }
    }

    /// The effective value of a key, as DescribeConfigs shows it.
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            SEGMENT_BYTES => self.segment_bytes.to_string(),
            SEGMENT_MS => self.segment_ms.to_string(),
            SEGMENT_JITTER_MS => self.segment_jitter_ms.to_string(),
            INDEX_INTERVAL_BYTES => self.index_interval_bytes.to_string(),
            RETENTION_MS => self.retention_ms.to_string(),
            RETENTION_BYTES => self.retention_bytes.to_string(),
            LOCAL_RETENTION_MS => self.local_retention_ms.to_string(),
            LOCAL_RETENTION_BYTES => self.local_retention_bytes.to_string(),
            FLUSH_MESSAGES => self.flush_messages.to_string(),
            FLUSH_MS => self.flush_ms.to_string(),
            MAX_MESSAGE_BYTES => self.max_message_bytes.to_string(),
            MESSAGE_TIMESTAMP_TYPE => match self.message_timestamp_type {
                MessageTimestampType::CreateTime => "CreateTime".to_string(),
                MessageTimestampType::LogAppendTime => "LogAppendTime".to_string(),
            },
            CLEANUP_POLICY => self.cleanup_policy.render().to_string(),
            MIN_CLEANABLE_DIRTY_RATIO => self.min_cleanable_dirty_ratio.to_string(),
            MIN_COMPACTION_LAG_MS => self.min_compaction_lag_ms.to_string(),
            MAX_COMPACTION_LAG_MS => self.max_compaction_lag_ms.to_string(),
            DELETE_RETENTION_MS => self.delete_retention_ms.to_string(),
            FILE_DELETE_DELAY_MS => self.file_delete_delay_ms.to_string(),
            MIN_INSYNC_REPLICAS => self.min_insync_replicas.to_string(),
            _ => {
                if let Some((k, default)) = ACCEPTED_NOT_APPLIED.iter().find(|(k, _)| *k == key) {
                    return Some(
                        self.accepted.get(*k).cloned().unwrap_or_else(|| default.to_string()),
                    );
                }
                return self.floe.get(key).cloned();
            }
        })
    }

    /// Every key with its effective value; `is_default` is false for keys in `overrides`.
    /// Known keys come first, in [`KNOWN_KEYS`] order, then `floe.*` keys.
    pub fn describe(&self, overrides: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
        KNOWN_KEYS
            .iter()
            .map(|k| k.to_string())
            .chain(ACCEPTED_NOT_APPLIED.iter().map(|(k, _)| k.to_string()))
            .chain(self.floe.keys().cloned())
            .filter_map(|name| {
                let value = self.get(&name)?;
                let is_default = !overrides.contains_key(&name);
                Some(ConfigEntry { name, value, is_default })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kafka_keys_without_effect_are_accepted_and_reported() {
        let c = LogConfig::default()
            .with_overrides(&map(&[
                ("compression.type", "lz4"),
                ("unclean.leader.election.enable", "false"),
            ]))
            .unwrap();
        assert_eq!(c.get("compression.type").as_deref(), Some("lz4"));
        assert_eq!(c.get("preallocate").as_deref(), Some("false"));
        let listed = c.describe(&map(&[("compression.type", "lz4")]));
        let entry = listed.iter().find(|e| e.name == "compression.type").unwrap();
        assert!(!entry.is_default);
        assert!(LogConfig::default()
            .with_overrides(&map(&[("compression.type", "brotli")]))
            .is_err());
    }

    #[test]
    fn overrides_apply() {
        let c = LogConfig::default()
            .with_overrides(&map(&[
                ("segment.bytes", "1024"),
                ("retention.ms", "-1"),
                ("message.timestamp.type", "LogAppendTime"),
                ("floe.iceberg.partition-spec", "day(timestamp)"),
                ("cleanup.policy", "delete"),
            ]))
            .unwrap();
        assert_eq!(c.segment_bytes, 1024);
        assert_eq!(c.retention_ms, -1);
        assert_eq!(c.message_timestamp_type, MessageTimestampType::LogAppendTime);
        assert_eq!(
            c.floe.get("floe.iceberg.partition-spec").map(String::as_str),
            Some("day(timestamp)")
        );
        assert_eq!(c.segment_ms, 604_800_000);
    }

    #[test]
    fn cleanup_policies_and_compaction_settings() {
        let c = LogConfig::default();
        assert_eq!((c.cleanup_policy.delete, c.cleanup_policy.compact), (true, false));
        assert_eq!(c.get("cleanup.policy").as_deref(), Some("delete"));
        assert_eq!(c.get("min.cleanable.dirty.ratio").as_deref(), Some("0.5"));
        assert_eq!(c.get("delete.retention.ms").as_deref(), Some("86400000"));
        assert_eq!(c.get("max.compaction.lag.ms").as_deref(), Some("9223372036854775807"));
        for (value, compact, delete) in [
            ("compact", true, false),
            ("delete, compact", true, true),
            ("compact,delete", true, true),
        ] {
            let c = LogConfig::default()
                .with_overrides(&map(&[
                    ("cleanup.policy", value),
                    ("min.cleanable.dirty.ratio", "0.01"),
                ]))
                .unwrap();
            assert_eq!(
                (c.cleanup_policy.compact, c.cleanup_policy.delete),
                (compact, delete),
                "{value}"
            );
            assert_eq!(c.min_cleanable_dirty_ratio, 0.01);
        }
    }

    #[test]
    fn bad_keys_and_values_name_the_key() {
        for (k, v) in [
            ("no.such.key", "1"),
            ("segment.bytes", "abc"),
            ("segment.bytes", "10"),
            ("retention.ms", "-2"),
            ("cleanup.policy", "shred"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("max.compaction.lag.ms", "0"),
            ("message.timestamp.type", "Now"),
            ("floe.", "x"),
            ("floe.iceberg.enabledd", "true"),
            ("floe.x", "y"),
        ] {
            match LogConfig::default().with_overrides(&map(&[(k, v)])) {
                Err(StorageError::InvalidConfig { key, .. }) => assert_eq!(key, k),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }

    #[test]
    fn describe_marks_overrides() {
        let o = map(&[("retention.bytes", "100"), ("floe.iceberg.enabled", "true")]);
        let c = LogConfig::default().with_overrides(&o).unwrap();
        let d = c.describe(&o);
        assert_eq!(d.len(), KNOWN_KEYS.len() + ACCEPTED_NOT_APPLIED.len() + 1);
        let rb = d.iter().find(|e| e.name == "retention.bytes").unwrap();
        assert_eq!((rb.value.as_str(), rb.is_default), ("100", false));
        let sb = d.iter().find(|e| e.name == "segment.bytes").unwrap();
        assert_eq!((sb.value.as_str(), sb.is_default), ("1073741824", true));
        assert!(d.iter().any(|e| e.name == "floe.iceberg.enabled" && !e.is_default));
    }

    #[test]
    fn a_misspelt_key_names_the_one_meant() {
        for (typed, meant) in [
            ("floe.iceberg.enabledd", "floe.iceberg.enabled"),
            ("floe.iceberg.target-lag", "floe.iceberg.target-lag-ms"),
            ("retention.msec", "retention.ms"),
            ("segment.byte", "segment.bytes"),
        ] {
            match LogConfig::default().with_overrides(&map(&[(typed, "1")])) {
                Err(StorageError::InvalidConfig { key, reason }) => {
                    assert_eq!(key, typed);
                    assert!(
                        reason.ends_with(&format!("did you mean `{meant}`?")),
                        "{typed}: {reason}"
                    );
                }
                other => panic!("{typed}: {other:?}"),
            }
        }
        assert_eq!(did_you_mean("completely.different", KNOWN_KEYS.iter().copied()), None);
    }

    fn reason(result: Result<LogConfig>) -> (String, String) {
        match result {
            Err(StorageError::InvalidConfig { key, reason }) => (key, reason),
            other => panic!("expected INVALID_CONFIG, got {other:?}"),
        }
    }

    #[test]
    fn local_retention_defaults_to_retention_and_is_reported() {
        let c = LogConfig::default();
        assert_eq!((c.local_retention_ms, c.local_retention_bytes), (-2, -2));
        assert_eq!(c.effective_local_retention_ms(), c.retention_ms);
        assert_eq!(c.effective_local_retention_bytes(), c.retention_bytes);
        let o = map(&[("local.retention.ms", "3600000")]);
        let c = LogConfig::default().with_overrides(&o).unwrap();
        assert_eq!(c.effective_local_retention_ms(), 3_600_000);
        let d = c.describe(&o);
        let ms = d.iter().find(|e| e.name == "local.retention.ms").unwrap();
        assert_eq!((ms.value.as_str(), ms.is_default), ("3600000", false));
        let bytes = d.iter().find(|e| e.name == "local.retention.bytes").unwrap();
        assert_eq!((bytes.value.as_str(), bytes.is_default), ("-2", true));
        assert_eq!(
            d.iter().filter(|e| e.name.starts_with("local.retention.")).count(),
            2,
            "listed once"
        );
        let c = LogConfig::default()
            .with_overrides(&map(&[
                ("retention.ms", "-1"),
                ("local.retention.ms", "-1"),
                ("local.retention.bytes", "0"),
            ]))
            .unwrap();
        assert_eq!(
            (c.effective_local_retention_ms(), c.effective_local_retention_bytes()),
            (-1, 0)
        );
    }

    #[test]
    fn local_retention_must_not_exceed_a_finite_retention() {
        let (key, why) = reason(LogConfig::default().with_overrides(&map(&[
            ("local.retention.ms", "604800000"),
            ("retention.ms", "86400000"),
        ])));
        assert_eq!(key, "local.retention.ms");
        assert_eq!(why, "604800000 must not exceed retention.ms (86400000)");
        let e = LogConfig::default()
            .with_overrides(&map(&[
                ("local.retention.bytes", "10737418240"),
                ("retention.bytes", "1073741824"),
            ]))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config local.retention.bytes: 10737418240 must not exceed retention.bytes (1073741824)"
        );
        // Against the broker's default as well as against an override.
        let defaults =
            LogConfig::default().with_overrides(&map(&[("retention.ms", "86400000")])).unwrap();
        let (key, _) =
            reason(defaults.with_overrides(&map(&[("local.retention.ms", "604800000")])));
        assert_eq!(key, "local.retention.ms");
        let (_, why) = reason(defaults.with_overrides(&map(&[("local.retention.ms", "-1")])));
        assert_eq!(why, "-1 (keep locally forever) must not exceed retention.ms (86400000)");
        for (k, v) in [
            ("local.retention.ms", "-3"),
            ("local.retention.bytes", "-3"),
            ("local.retention.ms", "soon"),
        ] {
            let (key, _) = reason(LogConfig::default().with_overrides(&map(&[(k, v)])));
            assert_eq!(key, k, "{k}={v}");
        }
        // Equal is fine; so is anything under unlimited retention, and -2 always.
        for o in [
            map(&[("local.retention.ms", "86400000"), ("retention.ms", "86400000")]),
            map(&[("local.retention.bytes", "99999999999")]),
            map(&[("local.retention.ms", "-2"), ("retention.ms", "0")]),
        ] {
            assert!(LogConfig::default().with_overrides(&o).is_ok(), "{o:?}");
        }
    }

    #[test]
    fn shared_storage_needs_tiering_and_the_shared_value() {
        for (overrides, shared) in [
            (map(&[]), false),
            (map(&[("floe.iceberg.storage", "shared")]), false),
            (map(&[("floe.iceberg.enabled", "true")]), false),
            (map(&[("floe.iceberg.enabled", "true"), ("floe.iceberg.storage", "copy")]), false),
            (map(&[("floe.iceberg.enabled", "false"), ("floe.iceberg.storage", "shared")]), false),
            (map(&[("floe.iceberg.enabled", "true"), ("floe.iceberg.storage", "shared")]), true),
            (map(&[("floe.iceberg.enabled", " TRUE"), ("floe.iceberg.storage", " Shared ")]), true),
        ] {
            let c = LogConfig::default().with_overrides(&overrides).unwrap();
            assert_eq!(c.is_shared_storage(), shared, "{overrides:?}");
        }
    }
}
