//! OffsetCommit, OffsetFetch and OffsetDelete: committed offsets, kept by
//! the [`floe_coordinator::group::GroupCoordinator`] and made durable in
//! `__consumer_offsets` before OffsetCommit answers.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_coordinator::clock::wall_ms;
use floe_coordinator::group::coordinator::TopicOffsets;
use floe_coordinator::group::records::OffsetAndMetadata;

/// Kafka's `offset.metadata.max.bytes` default.
const OFFSET_METADATA_MAX_BYTES: usize = 4096;

fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker.partition_exists(topic, partition)
}

/// A partition and the error it gets before committing (`None`: committed).
type Verdict = (i32, Option<ResponseError>);

pub(super) async fn handle_commit(
    broker: &Broker,
    ctx: &RequestContext,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let now = wall_ms();
    // READ on the group, then READ on each topic, as Kafka checks them.
    let group_denied = !broker.authorizer.authorize(
        ctx,
        AclOperation::Read,
        ResourceType::Group,
        request.group_id.as_str(),
    );
    // Per partition: Some(error) decided now, or None (to commit).
    let mut verdicts: Vec<(TopicName, Vec<Verdict>)> = Vec::with_capacity(request.topics.len());
    let mut to_commit = Vec::new();
    for t in &request.topics {
        let name = t.name.0.to_string();
        let topic_denied = !group_denied
            && !broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Topic, &name);
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default();
            let verdict = if group_denied {
                Some(ResponseError::GroupAuthorizationFailed)
            } else if topic_denied {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if !partition_exists(broker, &name, p.partition_index) {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                let leader_epoch = if version >= 6 { p.committed_leader_epoch } else { -1 };
                to_commit.push((
                    name.clone(),
                    p.partition_index,
                    OffsetAndMetadata {
                        offset: p.committed_offset,
                        leader_epoch,
                        metadata,
                        commit_timestamp: now,
                    },
                ));
                None
            };
            parts.push((p.partition_index, verdict));
        }
        verdicts.push((t.name.clone(), parts));
    }
    let committed = if group_denied {
        // Nothing to commit, and the group must not learn of this member.
        Ok(())
    } else {
        broker
            .groups
            .of(request.group_id.as_str())
            .commit_offsets(
                request.group_id.as_str(),
                request.member_id.as_str(),
                request.group_instance_id.as_ref().map(|i| i.as_str()),
                request.generation_id_or_member_epoch,
                to_commit,
            )
            .await
    };
    let group_error = committed.err();
    let topics = verdicts
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, v)| {
                    let e = v.or(group_error);
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(e.map_or(0, |e| e.code()))
                })
                .collect();
            OffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

type Found = (i32, Option<OffsetAndMetadata>);

/// (offset, leader epoch, metadata) of a lookup; -1 and "" when nothing is committed.
fn committed(found: &Found, version: i16) -> (i64, i32, Option<StrBytes>) {
    match &found.1 {
        Some(o) => (
            o.offset,
            if version >= 5 { o.leader_epoch } else { -1 },
            Some(StrBytes::from_string(o.metadata.clone())),
        ),
        None => (-1, -1, Some(StrBytes::default())),
    }
}

/// Committed offsets of topics `ctx` may DESCRIBE: of the others, topics
/// asked for by name answer TOPIC_AUTHORIZATION_FAILED and a request for
/// every topic leaves them out, as Kafka does.
fn authorized_offsets(
    broker: &Broker,
    ctx: &RequestContext,
    found: Vec<TopicOffsets>,
    by_name: bool,
) -> Vec<(TopicOffsets, Option<ResponseError>)> {
    found
        .into_iter()
        .filter_map(|t| {
            let allowed = if by_name {
                broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, &t.0)
            } else {
                broker.authorizer.check(ctx, AclOperation::Describe, ResourceType::Topic, &t.0)
            };
            match (allowed, by_name) {
                (true, _) => Some((t, None)),
                (false, true) => Some((
                    (t.0, t.1.into_iter().map(|(p, _)| (p, None)).collect()),
                    Some(ResponseError::TopicAuthorizationFailed),
                )),
                (false, false) => None,
            }
        })
        .collect()
}

pub(super) fn handle_fetch(
    broker: &Broker,
    ctx: &RequestContext,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let topics: Option<Vec<(String, Vec<i32>)>> = g.topics.map(|ts| {
                    ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect()
                });
                let by_name = topics.is_some();
                let group = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                if !broker.authorizer.authorize(
                    ctx,
                    AclOperation::Describe,
                    ResourceType::Group,
                    g.group_id.as_str(),
                ) {
                    return group.with_error_code(ResponseError::GroupAuthorizationFailed.code());
                }
                // v9: a consumer group member names itself and its epoch (KIP-848).
                if let Some(member) = g.member_id.as_ref().filter(|_| version >= 9) {
                    if let Err(e) = broker.groups.of(g.group_id.as_str()).validate_offset_fetch(
                        g.group_id.as_str(),
                        member.as_str(),
                        g.member_epoch,
                    ) {
                        return group.with_error_code(e.code());
                    }
                }
                let group_id = g.group_id.as_str();
                let coordinator = broker.groups.of(group_id);
                let unstable = |t: &str, p: i32| {
                    request.require_stable && coordinator.has_pending_txn_offset(group_id, t, p)
                };
                match coordinator.fetch_offsets(group_id, topics) {
                    Err(e) => group.with_error_code(e.code()),
                    Ok(found) => group.with_topics(
                        authorized_offsets(broker, ctx, found, by_name)
                            .into_iter()
                            .map(|(t, e)| group_topic(t, version, e, &unstable))
                            .collect(),
                    ),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    // v1 has no "all topics" (null) form; an empty list asks for nothing.
    let topics: Option<Vec<(String, Vec<i32>)>> = request
        .topics
        .map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
    if !broker.authorizer.authorize(
        ctx,
        AclOperation::Describe,
        ResourceType::Group,
        request.group_id.as_str(),
    ) {
        let e = ResponseError::GroupAuthorizationFailed;
        if version >= 2 {
            return OffsetFetchResponse::default().with_error_code(e.code());
        }
        let asked = topics
            .unwrap_or_default()
            .into_iter()
            .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, None)).collect()));
        return OffsetFetchResponse::default().with_topics(
            asked.map(|t| single_topic(t, version, Some(e), &|_, _| false)).collect(),
        );
    }
    let by_name = topics.is_some();
    let group_id = request.group_id.as_str();
    let coordinator = broker.groups.of(group_id);
    let unstable = |t: &str, p: i32| {
        version >= 7 && request.require_stable && coordinator.has_pending_txn_offset(group_id, t, p)
    };
    let never = |_: &str, _: i32| false;
    match coordinator.fetch_offsets(group_id, topics.clone()) {
        Ok(found) => OffsetFetchResponse::default().with_topics(
            authorized_offsets(broker, ctx, found, by_name)
                .into_iter()
                .map(|(t, e)| single_topic(t, version, e, &unstable))
                .collect(),
        ),
        Err(e) if version >= 2 => OffsetFetchResponse::default().with_error_code(e.code()),
        Err(e) => {
            // v1: errors only per partition.
            let asked = topics
                .unwrap_or_default()
                .into_iter()
                .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, None)).collect()));
            OffsetFetchResponse::default()
                .with_topics(asked.map(|t| single_topic(t, version, Some(e), &never)).collect())
        }
    }
}

/// KIP-447: with `require_stable`, a partition whose offset was committed in a
/// transaction that has not ended answers UNSTABLE_OFFSET_COMMIT (retriable)
/// and no offset, so a new consumer does not start from an offset that may be aborted.
fn stable_or_not(
    topic: &str,
    found: &Found,
    version: i16,
    error: Option<ResponseError>,
    unstable: &dyn Fn(&str, i32) -> bool,
) -> (Option<ResponseError>, (i64, i32, Option<StrBytes>)) {
    if error.is_none() && unstable(topic, found.0) {
        return (Some(ResponseError::UnstableOffsetCommit), (-1, -1, Some(StrBytes::default())));
    }
    (error, committed(found, version))
}

fn single_topic(
    (name, parts): TopicOffsets,
    version: i16,
    error: Option<ResponseError>,
    unstable: &dyn Fn(&str, i32) -> bool,
) -> OffsetFetchResponseTopic {
    let partitions = parts
        .iter()
        .map(|found| {
            let (error, (offset, epoch, metadata)) =
                stable_or_not(&name, found, version, error, unstable);
            let p = OffsetFetchResponsePartition::default()
                .with_partition_index(found.0)
                .with_committed_offset(offset)
                .with_metadata(metadata)
                .with_error_code(error.map_or(0, |e| e.code()));
            if version >= 5 {
                p.with_committed_leader_epoch(epoch)
            } else {
                p
            }
        })
        .collect();
    OffsetFetchResponseTopic::default()
        .with_name(TopicName(StrBytes::from_string(name)))
        .with_partitions(partitions)
}

fn group_topic(
    (name, parts): TopicOffsets,
    version: i16,
    error: Option<ResponseError>,
    unstable: &dyn Fn(&str, i32) -> bool,
) -> OffsetFetchResponseTopics {
    let partitions = parts
        .iter()
        .map(|found| {
            let (error, (offset, epoch, metadata)) =
                stable_or_not(&name, found, version, error, unstable);
            OffsetFetchResponsePartitions::default()
                .with_partition_index(found.0)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(epoch)
                .with_metadata(metadata)
                .with_error_code(error.map_or(0, |e| e.code()))
        })
        .collect();
    OffsetFetchResponseTopics::default()
        .with_name(TopicName(StrBytes::from_string(name)))
        .with_partitions(partitions)
}

pub(super) async fn handle_delete(
    broker: &Broker,
    ctx: &RequestContext,
    request: OffsetDeleteRequest,
    _version: i16,
) -> OffsetDeleteResponse {
    if !broker.authorizer.authorize(
        ctx,
        AclOperation::Delete,
        ResourceType::Group,
        request.group_id.as_str(),
    ) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let mut asked: Vec<(String, i32)> = Vec::new();
    let mut unknown = Vec::new();
    let mut denied = Vec::new();
    for t in &request.topics {
        let topic_denied = !broker.authorizer.authorize(
            ctx,
            AclOperation::Read,
            ResourceType::Topic,
            t.name.0.as_str(),
        );
        for p in &t.partitions {
            let name = t.name.0.to_string();
            if topic_denied {
                denied.push((name, p.partition_index));
            } else if partition_exists(broker, &name, p.partition_index) {
                asked.push((name, p.partition_index));
            } else {
                unknown.push((name, p.partition_index));
            }
        }
    }
    let results = match broker
        .groups
        .of(request.group_id.as_str())
        .delete_offsets(request.group_id.as_str(), asked.clone())
        .await
    {
        Ok(r) => r,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    let verdict = |topic: &str, p: i32| -> i16 {
        if denied.iter().any(|(t, q)| t == topic && *q == p) {
            return ResponseError::TopicAuthorizationFailed.code();
        }
        if unknown.iter().any(|(t, q)| t == topic && *q == p) {
            return ResponseError::UnknownTopicOrPartition.code();
        }
        asked
            .iter()
            .position(|(t, q)| t == topic && *q == p)
            .and_then(|i| results[i])
            .map_or(0, |e| e.code())
    };
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(verdict(t.name.0.as_str(), p.partition_index))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}

/// TxnOffsetCommit: offsets committed inside a transaction (a consumer's
/// position sent with `send_offsets_to_transaction`). They are durable when
/// this answers and visible to OffsetFetch only once the transaction commits.
///
/// The producer must own the transaction and have added the group's offsets
/// partition with AddOffsetsToTxn (KIP-890 part 1: otherwise
/// INVALID_TXN_STATE); a member id and generation, when given, are checked as
/// for OffsetCommit (KIP-447).
pub(super) async fn handle_txn_commit(
    broker: &Broker,
    ctx: &RequestContext,
    request: kafka_protocol::messages::TxnOffsetCommitRequest,
    version: i16,
) -> kafka_protocol::messages::TxnOffsetCommitResponse {
    use kafka_protocol::messages::txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    let now = wall_ms();
    let txn_id = request.transactional_id.0.as_str();
    let group_id = request.group_id.0.as_str();
    let (producer_id, epoch) = (request.producer_id.0, request.producer_epoch);
    let request_error = if !broker.authorizer.authorize(
        ctx,
        AclOperation::Write,
        ResourceType::TransactionalId,
        txn_id,
    ) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Group, group_id) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else if !broker.coordinates_transactions(txn_id) {
        // The transaction coordinator is another broker: nothing here to verify against.
        None
    } else {
        let partition = super::transactions::offsets_partition(broker, group_id);
        broker.txns.of(txn_id).verify_and_append(txn_id, producer_id, epoch, &partition, || ()).err().map(|e| {
            tracing::info!(transactional_id = txn_id, group = group_id, producer_id, epoch, error = %e, "TxnOffsetCommit refused");
            crate::errors::fenced_for_version(crate::errors::txn_error(&e), version, 3)
        })
    };
    let mut verdicts: Vec<(TopicName, Vec<Verdict>)> = Vec::with_capacity(request.topics.len());
    let mut to_commit = Vec::new();
    for t in &request.topics {
        let name = t.name.0.to_string();
        let topic_denied = request_error.is_none()
            && !broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Topic, &name);
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default();
            let verdict = if let Some(e) = request_error {
                Some(e)
            } else if topic_denied {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if !partition_exists(broker, &name, p.partition_index) {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > OFFSET_METADATA_MAX_BYTES {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                let leader_epoch = if version >= 2 { p.committed_leader_epoch } else { -1 };
                to_commit.push((
                    name.clone(),
                    p.partition_index,
                    OffsetAndMetadata {
                        offset: p.committed_offset,
                        leader_epoch,
                        metadata,
                        commit_timestamp: now,
                    },
                ));
                None
            };
            parts.push((p.partition_index, verdict));
        }
        verdicts.push((t.name.clone(), parts));
    }
    let group_error = if request_error.is_some() {
        None
    } else {
        let (member, instance, generation) = if version >= 3 {
            (
                request.member_id.as_str(),
                request.group_instance_id.as_ref().map(|i| i.as_str()),
                request.generation_id,
            )
        } else {
            ("", None, -1)
        };
        broker
            .groups
            .of(group_id)
            .txn_commit_offsets(
                group_id,
                (producer_id, epoch),
                member,
                instance,
                generation,
                to_commit,
            )
            .await
            .err()
    };
    let topics = verdicts
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, v)| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(v.or(group_error).map_or(0, |e| e.code()))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    kafka_protocol::messages::TxnOffsetCommitResponse::default().with_topics(topics)
}
