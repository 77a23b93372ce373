//! The etcd key layout of a cluster's metadata and what every reader and writer
//! of it shares: the topic and partition keys under the cluster's prefix, JSON
//! values, and requests bounded by a timeout.

use std::time::Duration;

use etcd_client::KeyValue;

use crate::{ClusterError, TopicPartition};

/// The prefix of every topic's assignment.
pub(crate) fn topics_prefix(prefix: &str) -> String {
    format!("{prefix}/topics/")
}

/// The prefix of every partition's state.
pub(crate) fn partitions_prefix(prefix: &str) -> String {
    format!("{prefix}/partitions/")
}

/// The key of one topic's assignment.
pub(crate) fn topic_key(prefix: &str, topic: &str) -> String {
    format!("{}{topic}", topics_prefix(prefix))
}

/// The key of one partition's state.
pub(crate) fn partition_key(prefix: &str, tp: &TopicPartition) -> String {
    format!("{}{}/{}", partitions_prefix(prefix), tp.topic, tp.partition)
}

/// A stored JSON value, or why it does not parse (naming its key).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(kv: &KeyValue) -> Result<T, ClusterError> {
    serde_json::from_slice(kv.value()).map_err(|e| ClusterError::BadValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: e.to_string(),
    })
}

/// `fut`, or a timeout error after `timeout`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    what: &'static str,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ClusterError::Timeout { what, timeout_ms: timeout.as_millis() as u64 }),
    }
}
