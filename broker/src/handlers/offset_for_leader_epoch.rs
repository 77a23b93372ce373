//! OffsetForLeaderEpoch: the end offset of a leader epoch (KIP-101, KIP-320).
//!
//! Consumers call it after a leader change to check that the offset they
//! will fetch from was not truncated away; followers call it to find where
//! their log diverges from the leader's. The answer is the log's leader-epoch
//! cache's (Kafka's `LeaderEpochFileCache.endOffsetFor`,
//! `PartitionLog::end_offset_for_epoch`):
//! - the latest epoch: (epoch, log end offset);
//! - an older epoch: the largest known epoch at or below it, ending where
//!   the next known epoch began;
//! - an epoch below every known one: (requested epoch, start offset of the
//!   first epoch);
//! - no epoch (-1) or one above every known one: UNDEFINED, leader epoch -1
//!   and end offset -1, with no error.
//!
//! A log never written to has no epoch yet; it answers as one epoch,
//! [`LEADER_EPOCH`], starting at the log start offset ([`end_offset_for`]).
//!
//! `current_leader_epoch` is checked as `Partition.checkCurrentLeaderEpoch`:
//! older than the leader's is FENCED_LEADER_EPOCH, newer is
//! UNKNOWN_LEADER_EPOCH, -1 skips the check. Authorization: CLUSTER_ACTION
//! on the cluster (a follower), else DESCRIBE per topic (KIP-320).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::authorizer::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::broker::LEADER_EPOCH;
use crate::errors::kafka_error;

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

pub(super) fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
    _version: i16,
) -> OffsetForLeaderEpochResponse {
    let cluster_action = broker.authorizer.check(
        ctx,
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.as_str();
            let authorized = cluster_action
                || broker.authorizer.authorize(
                    ctx,
                    AclOperation::Describe,
                    ResourceType::Topic,
                    name,
                );
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let base = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(UNDEFINED)
                        .with_end_offset(UNDEFINED_OFFSET);
                    if !authorized {
                        return base
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let log = match broker.leader_log(name, p.partition) {
                        Ok(log) => log,
                        Err((code, _)) => return base.with_error_code(code.code()),
                    };
                    if let Some(e) =
                        broker.check_current_leader_epoch(name, p.partition, p.current_leader_epoch)
                    {
                        return base.with_error_code(e.code());
                    }
                    if let Err(e) = log.check_online() {
                        return base.with_error_code(kafka_error(&e).code());
                    }
                    let current = broker.leader_epoch(name, p.partition);
                    let answer = match log.latest_epoch() {
                        // The log's leader-epoch cache: Kafka's `endOffsetFor`, which a follower truncates by.
                        Some(_) => Some(log.end_offset_for_epoch(p.leader_epoch))
                            .filter(|&(_, offset)| offset != UNDEFINED_OFFSET),
                        // A log never written to has no epoch yet.
                        None => end_offset_for(
                            p.leader_epoch,
                            current,
                            log.log_start_offset(),
                            log.log_end_offset(),
                        ),
                    };
                    match answer {
                        Some((epoch, offset)) => {
                            base.with_leader_epoch(epoch).with_end_offset(offset)
                        }
                        None => base,
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// The answer of a log with no epoch recorded yet (nothing was ever written
/// to it): Kafka's `endOffsetFor` over a cache holding the `current` epoch,
/// starting at `log_start_offset`. `None` is UNDEFINED.
fn end_offset_for(
    requested: i32,
    current: i32,
    log_start_offset: i64,
    log_end_offset: i64,
) -> Option<(i32, i64)> {
    if requested == UNDEFINED || requested > current {
        None
    } else if requested >= LEADER_EPOCH {
        Some((requested, log_end_offset))
    } else {
        Some((requested, log_start_offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafkas_epoch_cache() {
        assert_eq!(end_offset_for(LEADER_EPOCH, LEADER_EPOCH, 5, 42), Some((LEADER_EPOCH, 42)));
        assert_eq!(end_offset_for(LEADER_EPOCH + 1, LEADER_EPOCH, 5, 42), None);
        assert_eq!(end_offset_for(UNDEFINED, LEADER_EPOCH, 5, 42), None);
        assert_eq!(end_offset_for(-7, LEADER_EPOCH, 5, 42), Some((-7, 5)));
        assert_eq!(end_offset_for(2, 3, 5, 42), Some((2, 42)));
        assert_eq!(end_offset_for(4, 3, 5, 42), None);
    }
}
