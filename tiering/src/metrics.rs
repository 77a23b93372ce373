//! The tiering metrics (`floe_iceberg_*`): what the tiering thread, maintenance
//! and the Iceberg REST catalog record. The broker registers them with the rest
//! of its metrics and serves them on its Prometheus endpoint.

use std::sync::Arc;

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

/// Iceberg tiering metrics; `topic` is the table's name, `partition` the Kafka partition.
#[derive(Debug, Clone)]
pub struct IcebergMetrics {
    /// Next offset to tier (everything below is committed), by topic and partition.
    pub committed_offset: IntGaugeVec,
    /// Records in the log not yet committed to the table, by topic and partition.
    pub lag_records: IntGaugeVec,
    /// Commits made, by topic.
    pub commits: IntCounterVec,
    /// Rows committed, by topic.
    pub rows: IntCounterVec,
    /// Bytes of Parquet data files committed, by topic.
    pub bytes: IntCounterVec,
    /// Data files committed, by topic.
    pub files: IntCounterVec,
    /// Record batches skipped because they could not be decoded, by topic.
    pub skipped_batches: IntCounterVec,
    /// Records of typed tables written to their dead-letter tables.
    pub dead_letters: IntCounterVec,
    /// Failed tiering passes, by topic and error kind (catalog down, I/O, stale plan...).
    pub errors: IntCounterVec,
    /// Unix time of the last failed pass, by topic.
    pub last_error_time: IntGaugeVec,
    /// 1 for the last error of each topic (its message in the `error` label).
    pub last_error: IntGaugeVec,
    /// Requests to the Iceberg REST catalog, by route and HTTP status.
    pub rest_requests: IntCounterVec,
    /// Snapshots expired, by topic.
    pub expired_snapshots: IntCounterVec,
    /// Snapshots in the table after its last expiry, by topic.
    pub snapshots: IntGaugeVec,
    /// Live data files in the table's current snapshot (after its last maintenance), by topic.
    pub data_files: IntGaugeVec,
    /// Bytes of the table's metadata a reader opens (metadata file, manifest list, manifests), by topic.
    pub metadata_bytes: IntGaugeVec,
    /// Compactions committed, by topic.
    pub compactions: IntCounterVec,
    /// Small data files replaced by compaction, by topic.
    pub compacted_files: IntCounterVec,
    /// Data files a shared table's retention removed (main table), by topic.
    pub retention_removed_files: IntCounterVec,
    last_messages: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

impl IcebergMetrics {
    /// The metrics, not yet registered (the broker registers [`Self::collectors`]).
    pub fn new() -> Self {
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("metric")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("metric")
        };
        Self {
            committed_offset: gauge("floe_iceberg_committed_offset", "Next offset to tier: everything below is in the table", &["topic", "partition"]),
            lag_records: gauge("floe_iceberg_lag_records", "Records in the log not yet committed to the table", &["topic", "partition"]),
            commits: counter("floe_iceberg_commits_total", "Iceberg commits made", &["topic"]),
            rows: counter("floe_iceberg_committed_rows_total", "Rows committed to the table", &["topic"]),
            bytes: counter("floe_iceberg_committed_bytes_total", "Bytes of Parquet data files committed", &["topic"]),
            files: counter("floe_iceberg_committed_files_total", "Parquet data files committed", &["topic"]),
            skipped_batches: counter("floe_iceberg_skipped_batches_total", "Record batches that could not be decoded and were skipped", &["topic"]),
            dead_letters: counter("floe_iceberg_dead_letters_total", "Records of a typed table written to its dead-letter table instead", &["topic"]),
            errors: counter("floe_iceberg_errors_total", "Failed tiering passes, by error kind", &["topic", "kind"]),
            last_error_time: gauge("floe_iceberg_last_error_timestamp_seconds", "Unix time of the last failed tiering pass", &["topic"]),
            last_error: gauge("floe_iceberg_last_error", "1 for the last tiering error, its message in the `error` label", &["topic", "error"]),
            rest_requests: counter("floe_iceberg_rest_requests_total", "Iceberg REST catalog requests, by route and HTTP status", &["route", "status"]),
            expired_snapshots: counter("floe_iceberg_expired_snapshots_total", "Snapshots removed from the table by expiry", &["topic"]),
            snapshots: gauge("floe_iceberg_snapshots", "Snapshots in the table after its last expiry", &["topic"]),
            data_files: gauge("floe_iceberg_data_files", "Live data files in the table's current snapshot, after its last maintenance", &["topic"]),
            metadata_bytes: gauge("floe_iceberg_metadata_bytes", "Bytes of table metadata a reader opens: the metadata file, manifest list and manifests", &["topic"]),
            compactions: counter("floe_iceberg_compactions_total", "Compactions (replace snapshots) committed", &["topic"]),
            compacted_files: counter("floe_iceberg_compacted_files_total", "Small data files replaced by compaction", &["topic"]),
            retention_removed_files: counter("floe_iceberg_retention_removed_files_total", "Data files removed by a shared table's retention (retention.ms, retention.bytes)", &["topic"]),
            last_messages: Arc::default(),
        }
    }

    /// Every metric, for the broker's registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.committed_offset.clone()),
            Box::new(self.lag_records.clone()),
            Box::new(self.commits.clone()),
            Box::new(self.rows.clone()),
            Box::new(self.bytes.clone()),
            Box::new(self.files.clone()),
            Box::new(self.skipped_batches.clone()),
            Box::new(self.dead_letters.clone()),
            Box::new(self.errors.clone()),
            Box::new(self.last_error_time.clone()),
            Box::new(self.last_error.clone()),
            Box::new(self.rest_requests.clone()),
            Box::new(self.expired_snapshots.clone()),
            Box::new(self.snapshots.clone()),
            Box::new(self.data_files.clone()),
            Box::new(self.metadata_bytes.clone()),
            Box::new(self.compactions.clone()),
            Box::new(self.compacted_files.clone()),
            Box::new(self.retention_removed_files.clone()),
        ]
    }

    /// Records a failed pass of `topic`: counts it and replaces the last-error message.
    pub fn record_error(&self, topic: &str, kind: &str, message: &str, now_secs: i64) {
        self.errors.with_label_values(&[topic, kind]).inc();
        self.last_error_time.with_label_values(&[topic]).set(now_secs);
        // Only the latest message stays exposed. The lock is held for the label swap only.
        let message: String = message.chars().take(200).collect();
        let mut last = self.last_messages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = last.insert(topic.to_string(), message.clone()) {
            let _ = self.last_error.remove_label_values(&[topic, &old]);
        }
        self.last_error.with_label_values(&[topic, &message]).set(1);
    }
}

impl Default for IcebergMetrics {
    fn default() -> Self {
        Self::new()
    }
}
