//! The configuration reference, `docs/configuration.md`, generated from the settings tables.
//!
//! Broker settings come from [`crate::config::SETTINGS`] (key, default, doc), the broker
//! settings that change at run time from [`crate::dynamic_config::DYNAMIC_SETTINGS`], and
//! topic settings from [`TOPIC_SETTINGS`] below, whose keys the unit tests hold equal to
//! the keys the code accepts (`floe_storage::config`, the `floe.iceberg.*` constants of
//! `floe_tiering::settings`, Confluent's validation keys). The unit test `docs_are_generated`
//! compares the file with [`markdown`]; `FLOE_UPDATE_DOCS=1 cargo test -p floe-broker
//! config_reference` rewrites it. So the reference cannot drift from the code.

use std::fmt::Write as _;

use crate::config::SETTINGS;
use crate::dynamic_config::DYNAMIC_SETTINGS;

/// Where a topic setting's default comes from.
#[derive(Debug, Clone, Copy)]
pub enum TopicDefault {
    /// The broker setting of this name (in [`SETTINGS`]): a topic without an override sees its value.
    Broker(&'static str),
    /// A fixed value.
    Value(&'static str),
}

/// Documentation of one topic setting.
#[derive(Debug, Clone, Copy)]
pub struct TopicSettingDoc {
    /// The key, as CreateTopics and AlterConfigs take it.
    pub key: &'static str,
    /// Its default.
    pub default: TopicDefault,
    /// One line for the reference.
    pub doc: &'static str,
}

const fn t(key: &'static str, default: TopicDefault, doc: &'static str) -> TopicSettingDoc {
    TopicSettingDoc { key, default, doc }
}

use TopicDefault::{Broker, Value};

/// Every topic setting Floe interprets, in the order the reference lists them. Kafka's
/// keys that Floe accepts but does not apply come from
/// `floe_storage::config::ACCEPTED_NOT_APPLIED`.
pub const TOPIC_SETTINGS: &[TopicSettingDoc] = &[
    t("segment.bytes", Broker("log.segment.bytes"), "Roll the active segment at this size."),
    t("segment.ms", Broker("log.roll.ms"), "Roll the active segment after this age."),
    t("segment.jitter.ms", Value("0"), "Accepted and reported; not applied (segments roll at exactly `segment.ms`)."),
    t("index.interval.bytes", Broker("log.index.interval.bytes"), "Bytes of log between sparse offset-index entries."),
    t("retention.ms", Broker("log.retention.ms"), "Delete sealed segments whose newest record is older; -1 keeps forever."),
    t("retention.bytes", Broker("log.retention.bytes"), "Delete the oldest sealed segments while the partition is larger; -1 unlimited."),
    t("local.retention.ms", Broker("log.local.retention.ms"), "KIP-405's local retention, applied only to shared-storage topics (`floe.iceberg.storage=shared`): a sealed segment goes from local disk once the Iceberg table holds it (wholly below the table's committed next offset) and its newest record is older. This moves the local log start offset (ListOffsets -4), not the log start offset (-2). `-2` (default): same as `retention.ms`; `-1`: keep locally forever. Above a finite `retention.ms`, or below -2: INVALID_CONFIG. Copy-mode topics accept and report it and ignore it."),
    t("local.retention.bytes", Broker("log.local.retention.bytes"), "The same by local bytes per partition (`-2`: same as `retention.bytes`)."),
    t("flush.messages", Broker("log.flush.interval.messages"), "fsync after this many messages; `1` fsyncs each append before acknowledging it ([durability.md](durability.md))."),
    t("flush.ms", Broker("log.flush.interval.ms"), "fsync when data has been unflushed this long."),
    t("max.message.bytes", Broker("message.max.bytes"), "Largest record batch accepted (MESSAGE_TOO_LARGE above)."),
    t("message.timestamp.type", Broker("log.message.timestamp.type"), "`CreateTime` keeps producer timestamps; `LogAppendTime` stamps batches on append."),
    t("cleanup.policy", Broker("log.cleanup.policy"), "`delete` (retention by time and size), `compact` (the log cleaner keeps each key's latest record; no time/size retention), or `compact,delete` ([compaction.md](compaction.md)). A compacted topic refuses keyless records (INVALID_RECORD)."),
    t("min.cleanable.dirty.ratio", Broker("log.cleaner.min.cleanable.ratio"), "Clean a compacted log once dirty bytes / cleanable bytes reach this."),
    t("min.compaction.lag.ms", Broker("log.cleaner.min.compaction.lag.ms"), "Records younger than this are not compacted."),
    t("max.compaction.lag.ms", Broker("log.cleaner.max.compaction.lag.ms"), "Clean a log whose oldest dirty record is older than this, whatever its dirty ratio."),
    t("delete.retention.ms", Broker("log.cleaner.delete.retention.ms"), "Tombstones stay this long after the clean that first kept them (KIP-534 delete horizon)."),
    t("file.delete.delay.ms", Value("60000"), "Delay before a deleted segment's files are removed (accepted and reported; Floe deletes at once)."),
    t("min.insync.replicas", Broker("min.insync.replicas"), "In a cluster: an acks=all write is refused with NOT_ENOUGH_REPLICAS while fewer replicas are in sync."),
    t("floe.iceberg.enabled", Broker("floe.iceberg.enabled"), "`true` tiers the topic's sealed segments to an Iceberg table ([iceberg.md](iceberg.md))."),
    t("floe.iceberg.partition-spec", Broker("floe.iceberg.partition-spec"), "The table's partition spec, applied when the table is created: comma-separated `TRANSFORM(COLUMN)` terms (`hour(timestamp)`, `identity(partition)`, `bucket[N](key)`)."),
    t("floe.iceberg.target-lag-ms", Broker("floe.iceberg.target-lag-ms"), "Roll the active segment once its oldest untiered record has waited this long, so the table is at most about this (plus `floe.iceberg.tick-ms`) behind."),
    t("floe.iceberg.retention-guard", Broker("floe.iceberg.retention-guard"), "Retention never deletes offsets that are not yet tiered."),
    t("floe.iceberg.value.format", Value("raw"), "`raw` (the value's bytes in a binary column), `schema-registry` (typed columns from the values' registered schemas) or `json` (schemaless JSON objects, columns inferred); see [iceberg.md](iceberg.md#typed-tables)."),
    t("floe.iceberg.key.format", Value("raw"), "`raw` (the key's bytes in the binary `key` column), `schema-registry` or `json`: the key typed into one `key` column (a struct of the key's fields, or the key's primitive type)."),
    t("floe.iceberg.keep-raw", Value("false"), "`true`: a typed table keeps a typed value's bytes in `value` and a typed key's in `key_raw` too (applied when the table is created)."),
    t("floe.iceberg.storage", Value("copy"), "`copy`: the Iceberg table is a copy of the log; `shared`: the table is the partition's older log ([shared-mode.md](shared-mode.md)), fixed when the topic is created. A shared table has the lossless layout and a companion table `<topic>__log`. `shared` needs `floe.iceberg.enabled=true`, `floe.iceberg.retention-guard=true`, no `compact` in `cleanup.policy`, a partition spec with `identity(partition)` and no term on `key`/`value`/`headers` (without one of its own, the topic gets `identity(partition)` in front of the broker's: `identity(partition),day(timestamp)` by default), and `floe.iceberg.keep-raw=true` with a typed key or value format."),
    t("floe.iceberg.shared.fetch-compression", Value("original"), "Codec of the batches a shared topic's table serves to fetches below its local log start offset: `original` (each batch's own codec, so a consumer gets what its producer wrote and needs no other codec), `none` (cheapest CPU), `gzip`, `snappy`, `lz4`, `zstd`."),
    t("floe.iceberg.snapshot.max-age-ms", Broker("floe.iceberg.snapshot.max-age-ms"), "Snapshots of the table older than this expire ([iceberg.md](iceberg.md#table-maintenance))."),
    t("floe.iceberg.snapshot.min-to-keep", Broker("floe.iceberg.snapshot.min-to-keep"), "Expiry keeps at least this many of the table's most recent snapshots."),
    t("floe.iceberg.target-file-size-bytes", Broker("floe.iceberg.target-file-size-bytes"), "Size of the data files tiering and compaction write (Iceberg's `write.target-file-size-bytes`)."),
    t("floe.iceberg.compaction.enabled", Broker("floe.iceberg.compaction.enabled"), "`false`: maintenance leaves the table's small files alone."),
    t("floe.iceberg.compaction.min-input-files", Broker("floe.iceberg.compaction.min-input-files"), "How many small files of a partition make a compaction."),
    t("confluent.value.schema.validation", Value("false"), "`true`: record values must carry a schema id registered in the built-in Schema Registry under the topic's subject (INVALID_RECORD otherwise; [schema-registry.md](schema-registry.md))."),
    t("confluent.key.schema.validation", Value("false"), "The same for record keys."),
    t("confluent.value.subject.name.strategy", Value("TopicNameStrategy"), "`TopicNameStrategy`, `RecordNameStrategy` or `TopicRecordNameStrategy` (or the Java class name): which subject a value's schema id must be registered under."),
    t("confluent.key.subject.name.strategy", Value("TopicNameStrategy"), "The same for keys."),
];

const INTRO: &str = "\
# Configuration reference

<!-- Generated by broker/src/config_reference.rs from the settings tables in the code; do not edit.
     Regenerate: FLOE_UPDATE_DOCS=1 cargo test -p floe-broker config_reference -->

Settings use Kafka's names. They come, later winning, from built-in
defaults, a TOML file (`--config floe.toml`), environment variables
(`FLOE_` + the name in upper case with `_` for `.`: `FLOE_LOG_SEGMENT_BYTES=1048576`;
a `floe.*` setting is its whole name in upper case with `_` for `.` and `-`:
`FLOE_ICEBERG_S3_SECRET_ACCESS_KEY` is `floe.iceberg.s3.secret-access-key`),
and the command line (`--data-dir`, `--listen`, `--advertised-listener`,
`--metrics-listen`, `--iceberg-rest-listen`, `--schema-registry-listen`, `--console-listen`,
`--port-offset`, `--node-id`, `--metadata-store`, and `--override key=value` for anything). In TOML both
`\"log.segment.bytes\" = 1048576` and `log.segment.bytes = 1048576` work.
An unknown key in a file or on the command line is an error.

";

const DYNAMIC: &str = "\
## Dynamic broker configs

AlterConfigs and IncrementalAlterConfigs on a BROKER resource change settings without a
restart, on this broker (resource name = `node.id`) or as the cluster-wide default
(name `\"\"`); they are persisted in `DATA_DIR/dynamic-broker-config.json` before they
are acknowledged and applied again at startup. The topic defaults among them apply at
once to every topic without an override of the key; `max.connections` and
`max.connections.per.ip` to the next connection accepted. Any other setting refuses its
resource with INVALID_REQUEST \"Cannot update these configs dynamically\", as Kafka does;
other resources in the request are unaffected. DescribeConfigs reports each broker
setting's source (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG), its synonyms in that order, and `read_only` for
the settings that cannot change at run time. In a cluster they are kept in etcd
([cluster.md](cluster.md)).

Dynamic:";

const TOPICS: &str = "\
## Topic settings

Set per topic with CreateTopics or (Incremental)AlterConfigs (`floe topic create NAME -c
key=value`, `floe topic alter-config NAME -s key=value`); a topic without an override
inherits the broker setting named in its default. Any other key is refused with
INVALID_CONFIG, `floe.*` keys included.

| setting | default | meaning |
|---|---|---|
";

/// A table cell: `|` escaped, so a doc line cannot break the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn code(text: &str) -> String {
    if text.is_empty() {
        "(empty)".to_string()
    } else {
        format!("`{}`", cell(text))
    }
}

fn broker_default(key: &str) -> Option<&'static str> {
    SETTINGS.iter().find(|s| s.key == key).map(|s| s.default)
}

/// The whole of `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::from(INTRO);
    out.push_str("## Broker settings\n\n| setting | default | meaning |\n|---|---|---|\n");
    for s in SETTINGS {
        let _ = writeln!(out, "| `{}` | {} | {} |", s.key, code(s.default), cell(s.doc));
    }
    out.push('\n');
    out.push_str(DYNAMIC);
    for key in DYNAMIC_SETTINGS {
        let _ = write!(out, " `{key}`,");
    }
    out.pop();
    out.push_str(".\n\n");
    out.push_str(TOPICS);
    for s in TOPIC_SETTINGS {
        let default = match s.default {
            Broker(key) => format!("`{key}` ({})", code(broker_default(key).unwrap_or(""))),
            Value(v) => code(v),
        };
        let _ = writeln!(out, "| `{}` | {} | {} |", s.key, default, cell(s.doc));
    }
    out.push_str(
        "\nKafka topic settings that Floe accepts, stores and reports, but whose behaviour does not \
         apply (clients and tools set them routinely, so refusing them would break topic creation; \
         `compression.type` is validated, and batches are always stored as the producer compressed \
         them, which is Kafka's `producer`):\n\n| setting | default |\n|---|---|\n",
    );
    for (key, default) in floe_storage::config::ACCEPTED_NOT_APPLIED {
        let _ = writeln!(out, "| `{key}` | {} |", code(default));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;

    fn docs_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")
    }

    /// `docs/configuration.md` is exactly what [`markdown`] generates.
    #[test]
    fn docs_are_generated() {
        let path = docs_path();
        let generated = markdown();
        if std::env::var_os("FLOE_UPDATE_DOCS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &generated).expect("write docs/configuration.md");
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != generated {
            let line =
                on_disk.lines().zip(generated.lines()).position(|(a, b)| a != b).map_or_else(
                    || on_disk.lines().count().min(generated.lines().count()) + 1,
                    |i| i + 1,
                );
            panic!(
                "docs/configuration.md differs from the settings tables (first at line {line}); \
                 run `FLOE_UPDATE_DOCS=1 cargo test -p floe-broker config_reference` to regenerate it"
            );
        }
    }

    /// Every topic key the code interprets is documented, and every documented key is one
    /// the code interprets; a default named after a broker setting is a broker setting,
    /// the one `LOG_DEFAULT_KEYS` maps it from.
    #[test]
    fn topic_settings_match_the_code() {
        let mut code: BTreeSet<&str> = floe_storage::config::KNOWN_KEYS.iter().copied().collect();
        code.extend(floe_storage::config::SCHEMA_VALIDATION_KEYS.iter().copied());
        code.extend(floe_storage::config::FLOE_TOPIC_KEYS.iter().copied());
        let documented: BTreeSet<&str> = TOPIC_SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(documented.len(), TOPIC_SETTINGS.len(), "a topic setting is documented twice");
        let undocumented: Vec<_> = code.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&code).collect();
        assert!(
            undocumented.is_empty(),
            "topic settings without a row in TOPIC_SETTINGS: {undocumented:?}"
        );
        assert!(
            unknown.is_empty(),
            "TOPIC_SETTINGS documents keys the code does not take: {unknown:?}"
        );
        for s in TOPIC_SETTINGS {
            if let Broker(key) = s.default {
                assert!(
                    broker_default(key).is_some(),
                    "`{}`'s default names `{key}`, not a broker setting",
                    s.key
                );
            }
        }
        for (broker_key, topic_key) in crate::config::LOG_DEFAULT_KEYS {
            let row = TOPIC_SETTINGS.iter().find(|s| s.key == *topic_key);
            assert!(
                matches!(row.map(|s| s.default), Some(Broker(k)) if k == *broker_key),
                "`{topic_key}`'s default is the broker setting `{broker_key}`"
            );
        }
        for key in DYNAMIC_SETTINGS {
            assert!(
                broker_default(key).is_some(),
                "dynamic setting `{key}` is not a broker setting"
            );
        }
        // A fixed default of a storage key is the one the log applies.
        let entries =
            floe_storage::LogConfig::default().describe(&std::collections::BTreeMap::new());
        for s in TOPIC_SETTINGS {
            if let (Value(v), Some(e)) = (s.default, entries.iter().find(|e| e.name == s.key)) {
                assert_eq!(e.value, v, "`{}`'s documented default", s.key);
            }
        }
    }
}
