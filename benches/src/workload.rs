//! Workloads in the shape of the OpenMessaging Benchmark's, read from TOML files in
//! `benches/workloads/`.
//!
//! ```toml
//! name = "1-topic-16-partitions-1kb"
//! topics = 1
//! partitions_per_topic = 16
//! message_size = 1024
//! random_payload_share = 0.5   # share of each payload that is random (the rest zeros)
//! producers_per_topic = 1
//! consumers_per_topic = 1
//! producer_rate = 0            # messages/s over all producers; 0 = as fast as possible
//! consumer_backlog_mb = 0      # data written before a catch-up consumer starts
//! duration_s = 60
//! warmup_s = 10
//! acks = "1"                   # "0", "1" or "all"
//! compression = "none"         # none, gzip, snappy, lz4, zstd
//! batch_size = 131072          # librdkafka batch.size (bytes)
//! linger_ms = 1
//! fresh_random = false         # true: no two payloads alike (costs the producer CPU)
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Name, as in OMB (`1-topic-16-partitions-1kb`).
    pub name: String,
    /// Number of topics.
    pub topics: u32,
    /// Partitions of each topic.
    pub partitions_per_topic: u32,
    /// Payload bytes of each message (at least 8: the send timestamp).
    pub message_size: usize,
    /// Share (0–1) of each payload that is random bytes; the rest is zeros.
    #[serde(default = "one")]
    pub random_payload_share: f64,
    /// Producers per topic, each on its own thread with its own librdkafka producer.
    pub producers_per_topic: u32,
    /// Consumers per topic; the topic's partitions are split between them.
    pub consumers_per_topic: u32,
    /// Messages per second over all producers; 0 is as fast as possible.
    #[serde(default)]
    pub producer_rate: u64,
    /// MB (10^6 bytes) written before a catch-up consumer reads them all.
    #[serde(default)]
    pub consumer_backlog_mb: u64,
    /// Seconds measured.
    pub duration_s: f64,
    /// Seconds run before measuring.
    #[serde(default)]
    pub warmup_s: f64,
    /// Producer `acks`: "0", "1" or "all".
    #[serde(default = "acks_default")]
    pub acks: String,
    /// Producer `compression.type`.
    #[serde(default = "none")]
    pub compression: String,
    /// Producer `batch.size`, bytes.
    #[serde(default = "batch_default")]
    pub batch_size: usize,
    /// Producer `linger.ms`.
    #[serde(default = "linger_default")]
    pub linger_ms: f64,
    /// Refill the random share of every payload (otherwise 64 templates repeat), so no
    /// two payloads are alike: what `tiering-cost` needs for an honest Parquet size.
    #[serde(default)]
    pub fresh_random: bool,
}

fn one() -> f64 {
    1.0
}
fn acks_default() -> String {
    "1".into()
}
fn none() -> String {
    "none".into()
}
fn batch_default() -> usize {
    131_072
}
fn linger_default() -> f64 {
    1.0
}

impl Workload {
    /// Reads and checks a workload file.
    ///
    /// # Errors
    /// Unreadable file, unknown keys, or values out of range.
    pub fn load(path: &Path) -> anyhow::Result<Workload> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read workload {}", path.display()))?;
        let w: Workload =
            toml::from_str(&text).with_context(|| format!("bad workload {}", path.display()))?;
        w.check().with_context(|| format!("bad workload {}", path.display()))?;
        Ok(w)
    }

    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.topics >= 1 && self.partitions_per_topic >= 1,
            "need at least one topic and partition"
        );
        anyhow::ensure!(
            self.message_size >= 8,
            "message_size must be at least 8 (the send timestamp)"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.random_payload_share),
            "random_payload_share is 0..1"
        );
        anyhow::ensure!(self.producers_per_topic >= 1, "need at least one producer per topic");
        anyhow::ensure!(
            ["0", "1", "all", "-1"].contains(&self.acks.as_str()),
            "acks is 0, 1 or all"
        );
        anyhow::ensure!(
            ["none", "gzip", "snappy", "lz4", "zstd"].contains(&self.compression.as_str()),
            "compression is none, gzip, snappy, lz4 or zstd"
        );
        anyhow::ensure!(self.duration_s > 0.0 && self.warmup_s >= 0.0, "duration must be positive");
        Ok(())
    }

    /// The same workload cut down to a few seconds, for `--quick` (CI) runs.
    pub fn quick(&self) -> Workload {
        Workload {
            duration_s: self.duration_s.min(2.0),
            warmup_s: self.warmup_s.min(1.0),
            consumer_backlog_mb: self.consumer_backlog_mb.min(64),
            ..self.clone()
        }
    }

    /// The workload named `name` in the built-in directory (`benches/workloads/NAME.toml`).
    ///
    /// # Errors
    /// As [`Workload::load`].
    pub fn builtin(name: &str) -> anyhow::Result<Workload> {
        Self::load(&workloads_dir().join(format!("{name}.toml")))
    }
}

/// `benches/workloads/` of the source tree this binary was built from.
pub fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_workloads_load() {
        for entry in std::fs::read_dir(workloads_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Workload::load(&path).unwrap();
            }
        }
    }
}
