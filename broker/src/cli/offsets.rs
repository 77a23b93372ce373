//! Partition offsets through ListOffsets, asked of each partition's leader:
//! the log start offset (earliest), the high watermark or last stable offset
//! (latest), or the first offset at a timestamp.

use std::collections::BTreeMap;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::admin::{check, Admin, Target};

/// ListOffsets' timestamp for the log start offset.
pub const EARLIEST: i64 = -2;
/// ListOffsets' timestamp for the end (high watermark, or the last stable offset at read_committed).
pub const LATEST: i64 = -1;

/// `(topic, partition)` → offset, for every partition of `topics` in `metadata`,
/// at `timestamp` ([`EARLIEST`], [`LATEST`] or milliseconds since the epoch;
/// `-1` as the offset where no record is that late). `read_committed`: the
/// latest is the last stable offset.
///
/// # Errors
/// A call's error, or a partition's error code (NOT_LEADER_OR_FOLLOWER while leadership moves...).
pub async fn list_offsets(
    admin: &mut Admin,
    metadata: &MetadataResponse,
    topics: &[String],
    timestamp: i64,
    read_committed: bool,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    // Group the partitions by leader: one request per broker.
    let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
        if !topics.contains(&name) {
            continue;
        }
        for p in &t.partitions {
            by_leader
                .entry(p.leader_id.0)
                .or_default()
                .entry(name.clone())
                .or_default()
                .push(p.partition_index);
        }
    }
    let mut out = BTreeMap::new();
    for (leader, topics) in by_leader {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(i8::from(read_committed))
            .with_topics(
                topics
                    .iter()
                    .map(|(name, parts)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(name.clone())))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|&p| {
                                        ListOffsetsPartition::default()
                                            .with_partition_index(p)
                                            .with_current_leader_epoch(-1)
                                            .with_timestamp(timestamp)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let target = if leader >= 0 { Target::Node(leader) } else { Target::Any };
        let response = admin.call(target, &request).await?;
        for t in response.topics {
            for p in t.partitions {
                check(
                    p.error_code,
                    None,
                    &format!("offsets of {}-{}", t.name.0.as_str(), p.partition_index),
                )?;
                out.insert((t.name.0.to_string(), p.partition_index), p.offset);
            }
        }
    }
    Ok(out)
}
