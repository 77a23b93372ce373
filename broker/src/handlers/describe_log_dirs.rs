//! DescribeLogDirs: the log directory and the size of every partition in it.
//!
//! Floe has one log directory, the data directory (`log.dirs`). As Kafka's
//! `ReplicaManager.describeLogDirs`: each partition's size is the bytes of
//! its segments, its offset lag is 0 (the leader's high watermark minus its
//! own log end offset, never positive), `is_future_key` is false (no
//! replica is being moved between directories), and the directory's total
//! and usable bytes (v4+) are the file system's, from statvfs(2). Null
//! topics asks for every partition; partitions that do not exist are left
//! out. Authorization: DESCRIBE on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED with no results.

use std::path::Path;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeLogDirsRequest,
    _version: i16,
) -> DescribeLogDirsResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut topics = Vec::new();
    match request.topics {
        None => {
            for topic in broker.logs.topics() {
                let partitions: Vec<_> = topic
                    .partitions()
                    .iter()
                    .map(|log| partition(log.partition(), log.size_bytes()))
                    .collect();
                topics.push(entry(topic.name(), partitions));
            }
        }
        Some(wanted) => {
            for t in wanted {
                let Some(topic) = broker.logs.topic(t.topic.as_str()) else { continue };
                let partitions: Vec<_> = t
                    .partitions
                    .iter()
                    .filter_map(|&p| topic.partition(p))
                    .map(|log| partition(log.partition(), log.size_bytes()))
                    .collect();
                if !partitions.is_empty() {
                    topics.push(entry(topic.name(), partitions));
                }
            }
        }
    }
    let dir = broker.logs.data_dir().to_path_buf();
    let (log_dir, space) = broker
        .blocking(move |_| (absolute(&dir), file_system_space(&dir)))
        .await
        .unwrap_or_default();
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(log_dir))
        .with_topics(topics);
    match space {
        Some((total, usable)) => {
            result.total_bytes = total;
            result.usable_bytes = usable;
        }
        // Kafka's UNKNOWN_VOLUME_BYTES, when the file system cannot tell.
        None => {
            result.total_bytes = -1;
            result.usable_bytes = -1;
        }
    }
    if let Err(e) = broker.logs.log_dir_failure().check() {
        tracing::debug!(error = %e, "DescribeLogDirs: the log directory is offline");
        result = DescribeLogDirsResult::default()
            .with_log_dir(result.log_dir)
            .with_error_code(ResponseError::KafkaStorageError.code());
    }
    DescribeLogDirsResponse::default().with_results(vec![result])
}

fn partition(index: i32, size: u64) -> DescribeLogDirsPartition {
    DescribeLogDirsPartition::default()
        .with_partition_index(index)
        .with_partition_size(i64::try_from(size).unwrap_or(i64::MAX))
        .with_offset_lag(0)
        .with_is_future_key(false)
}

fn entry(name: &str, partitions: Vec<DescribeLogDirsPartition>) -> DescribeLogDirsTopic {
    DescribeLogDirsTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_partitions(partitions)
}

/// The directory as an absolute path, as Kafka reports it.
fn absolute(dir: &Path) -> String {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()).display().to_string()
}

/// (total, usable) bytes of the file system holding `dir`; usable is what
/// an unprivileged writer may still use (`f_bavail`), as Java's `getUsableSpace`.
fn file_system_space(dir: &Path) -> Option<(i64, i64)> {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(st) => {
            let block = st.fragment_size() as u128;
            let clamp = |blocks: u128| i64::try_from(blocks * block).unwrap_or(i64::MAX);
            Some((clamp(st.blocks() as u128), clamp(st.blocks_available() as u128)))
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "statvfs failed: DescribeLogDirs reports unknown volume bytes");
            None
        }
    }
}
