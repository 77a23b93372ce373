//! Kafka API handlers: one file per API (or API family), one dispatch table.
//!
//! Every handler has the same shape: take the decoded request, apply it to
//! the broker's state, return the response message. [`dispatch`] decodes the
//! body at the header's version, calls the handler and encodes the response
//! with the right header, so handlers never see bytes.
//!
//! Authorization happens in the handlers, per resource, because Kafka
//! answers a refusal per topic, partition or group, beside the elements that
//! were allowed. [`dispatch`] hands them the caller's
//! [`RequestContext`](crate::authorizer::RequestContext).

mod acls;
mod alter_configs;
mod api_versions;
mod client_quotas;
mod consumer_group;
mod create_partitions;
mod create_topics;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_log_dirs;
mod describe_producers;
mod describe_topic_partitions;
mod elect_leaders;
mod fetch;
mod find_coordinator;
mod group_admin;
mod group_membership;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod offset_for_leader_epoch;
mod offsets;
mod partition_reassignments;
mod produce;
mod reply;
mod sasl;
mod scram_credentials;
mod throttle;
mod transactions;
#[cfg(test)]
mod version_tests;
mod write_txn_markers;

use floe_protocol::apis::is_supported;
use floe_protocol::frame::RequestFrame;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Encodable, HeaderVersion};

use crate::broker::Broker;
use crate::quota::charge::{BusyTimed, Charge};
use crate::quota::{quota_user, QuotaType};
use crate::session::Session;
use reply::{clamp_ms, decode, encode_failure, frame};
pub use reply::{PendingProduce, Reject, Reply};
use throttle::ThrottleTime;

/// The API's name for logs and metric labels.
pub fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
        ApiKey::EndTxn => "EndTxn",
        ApiKey::WriteTxnMarkers => "WriteTxnMarkers",
        ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
        ApiKey::DescribeTransactions => "DescribeTransactions",
        ApiKey::ListTransactions => "ListTransactions",
        ApiKey::DescribeProducers => "DescribeProducers",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::DescribeLogDirs => "DescribeLogDirs",
        ApiKey::DescribeTopicPartitions => "DescribeTopicPartitions",
        ApiKey::ElectLeaders => "ElectLeaders",
        ApiKey::AlterPartitionReassignments => "AlterPartitionReassignments",
        ApiKey::ListPartitionReassignments => "ListPartitionReassignments",
        ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        ApiKey::AlterClientQuotas => "AlterClientQuotas",
        _ => "Other",
    }
}

/// The target of the request log, one `debug` line per request: an operator turns it on
/// alone with `RUST_LOG=info,floe_broker::request=debug` (Kafka's `kafka.request.logger`).
pub const REQUEST_LOG_TARGET: &str = "floe_broker::request";

/// Handles a frame that is a bare SASL token, not a request: what a client
/// sends after a SaslHandshake v0 (`session.auth.unframed_tokens`). The reply is
/// the framed answer token, or [`Reply::None`] when the login failed and
/// `session.close_after_reply` is set.
pub async fn sasl_unframed_token(
    broker: &Broker,
    session: &mut Session,
    token: bytes::Bytes,
) -> Reply {
    sasl::handle_unframed_token(broker, session, token).await
}

/// Decodes, handles and encodes one request, logging it at `debug` under
/// [`REQUEST_LOG_TARGET`] when that is enabled.
///
/// # Errors
/// [`Reject`] when the connection must be closed.
pub async fn dispatch(
    broker: &Broker,
    request: RequestFrame,
    session: &mut Session,
) -> Result<Reply, Reject> {
    // With the request log off this check is its whole cost: no clock read, no principal
    // string, no field is formatted (tracing caches the callsite's interest).
    if !tracing::enabled!(target: REQUEST_LOG_TARGET, tracing::Level::DEBUG) {
        return dispatch_quota(broker, request, session).await;
    }
    let api = request.api_key;
    let version = request.header.request_api_version;
    let correlation_id = request.header.correlation_id;
    let client_id = request.header.client_id.clone();
    // The principal the request is made as: a SaslAuthenticate logs the one before it.
    let principal = session.request_context().principal;
    let started = std::time::Instant::now();
    let reply = dispatch_quota(broker, request, session).await;
    let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    tracing::debug!(
        target: REQUEST_LOG_TARGET,
        api = api_name(api),
        api_version = version,
        correlation_id,
        client_id = client_id.as_deref().unwrap_or(""),
        principal = %principal,
        listener = %session.endpoint.name,
        peer = %session.peer,
        elapsed_us,
        // An acks=all Produce in a cluster: elapsed_us covers the append, not the followers' wait.
        awaiting_replication = matches!(reply, Ok(Reply::AwaitingReplication(_))),
        error = reply.as_ref().err().map(tracing::field::display),
        "request"
    );
    reply
}

/// [`dispatch`] without the request log: charges the client's quotas when any are set.
async fn dispatch_quota(
    broker: &Broker,
    request: RequestFrame,
    session: &mut Session,
) -> Result<Reply, Reject> {
    // The one check on the request path when no quota is configured.
    if !broker.quotas.active()
        || matches!(
            request.api_key,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        )
    {
        return dispatch_charged(broker, request, session, None).await;
    }
    let principal = session.request_context().principal;
    let client_id = request.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    let charge = Charge::new(broker.quotas.clone(), quota_user(&principal).to_string(), client_id);
    let reply =
        BusyTimed::new(dispatch_charged(broker, request, session, Some(&charge)), &charge).await;
    session.throttled_for = charge.mute();
    reply
}

/// [`dispatch`], counting the request against `charge` when the client has quotas.
async fn dispatch_charged(
    broker: &Broker,
    request: RequestFrame,
    session: &mut Session,
    charge: Option<&Charge>,
) -> Result<Reply, Reject> {
    let RequestFrame { api_key, header, mut body } = request;
    let request_bytes = body.len();
    let peer = session.peer;
    let version = header.request_api_version;
    let correlation_id = header.correlation_id;
    if !is_supported(api_key, version) {
        if api_key == ApiKey::ApiVersions {
            // KIP-511: answer a version we do not know in v0, with the ranges we do.
            tracing::debug!(%peer, version, "ApiVersions at an unsupported version; answering v0");
            return frame(api_key, correlation_id, 0, &api_versions::unsupported_version());
        }
        return Err(Reject::Unsupported { api: api_key, version, correlation_id });
    }
    let body = &mut body;
    let ctx = &session.request_context();
    let out = Responder { api: api_key, correlation_id, version, charge };
    match api_key {
        ApiKey::ApiVersions => {
            let req = decode(api_key, body, version)?;
            out.frame(api_versions::handle(broker, req, version))
        }
        ApiKey::Metadata => {
            let req = decode(api_key, body, version)?;
            out.frame(metadata::handle(broker, session, ctx, req, version).await)
        }
        ApiKey::Produce => {
            let req: kafka_protocol::messages::ProduceRequest = decode(api_key, body, version)?;
            let acks = req.acks;
            if let Some(charge) = charge {
                charge.bytes(QuotaType::Produce, request_bytes);
            }
            let appended = produce::append_all(broker, ctx, req, peer);
            if charge.is_none() && appended.awaits_replication() {
                // No quota to charge the wait to: the second stage may overlap the next request.
                return Ok(Reply::AwaitingReplication(PendingProduce {
                    appended,
                    correlation_id,
                    version,
                }));
            }
            let response = appended.finish(broker).await;
            if acks == 0 {
                // No response, but the time is counted and a throttle still mutes the connection.
                if let Some(charge) = charge {
                    charge.finish();
                }
                return Ok(Reply::None);
            }
            out.frame(response)
        }
        ApiKey::Fetch => {
            let req = decode(api_key, body, version)?;
            session.reply_to_replica = fetch::follower_id(&req, version).is_some();
            let data = fetch::handle(broker, ctx, req, version).await;
            let encode = |data: &floe_protocol::fetch::FetchResponseData| {
                floe_protocol::fetch::encode_fetch_response(correlation_id, version, data)
                    .map(Reply::Parts)
                    .map_err(|e| encode_failure(api_key, version, e.to_string()))
            };
            let Some(charge) = charge else { return encode(&data) };
            let Reply::Parts(full) = encode(&data)? else { return encode(&data) };
            charge.bytes(QuotaType::Fetch, full.total_len);
            let throttle = charge.finish();
            if throttle == 0 {
                return Ok(Reply::Parts(full));
            }
            // As Kafka: a throttled fetch sends no records, and they are not counted.
            charge.unrecord(QuotaType::Fetch, full.total_len);
            encode(&floe_protocol::fetch::FetchResponseData {
                throttle_time_ms: clamp_ms(throttle),
                ..Default::default()
            })
        }
        ApiKey::ListOffsets => {
            let req = decode(api_key, body, version)?;
            out.frame(list_offsets::handle(broker, ctx, req, version).await)
        }
        ApiKey::CreateTopics => {
            let req = decode(api_key, body, version)?;
            out.frame(create_topics::handle(broker, ctx, req, version).await)
        }
        ApiKey::DeleteTopics => {
            let req = decode(api_key, body, version)?;
            out.frame(delete_topics::handle(broker, ctx, req, version).await)
        }
        ApiKey::CreatePartitions => {
            let req = decode(api_key, body, version)?;
            out.frame(create_partitions::handle(broker, ctx, req, version).await)
        }
        ApiKey::DescribeConfigs => {
            let req = decode(api_key, body, version)?;
            out.frame(describe_configs::handle(broker, ctx, req, version))
        }
        ApiKey::AlterConfigs => {
            let req = decode(api_key, body, version)?;
            out.frame(alter_configs::handle_alter(broker, ctx, req, version).await)
        }
        ApiKey::IncrementalAlterConfigs => {
            let req = decode(api_key, body, version)?;
            out.frame(alter_configs::handle_incremental(broker, ctx, req, version).await)
        }
        ApiKey::DescribeCluster => {
            let req = decode(api_key, body, version)?;
            out.frame(describe_cluster::handle(broker, session, ctx, req, version))
        }
        ApiKey::DeleteRecords => {
            let req = decode(api_key, body, version)?;
            out.frame(delete_records::handle(broker, ctx, req, version).await)
        }
        ApiKey::InitProducerId => {
            let req = decode(api_key, body, version)?;
            out.frame(init_producer_id::handle(broker, ctx, req, version).await)
        }
        ApiKey::FindCoordinator => {
            let req = decode(api_key, body, version)?;
            out.frame(find_coordinator::handle(broker, session, ctx, req, version).await)
        }
        ApiKey::JoinGroup => {
            let req = decode(api_key, body, version)?;
            let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
            out.frame(
                group_membership::handle_join(broker, ctx, req, version, client_id, peer).await,
            )
        }
        ApiKey::SyncGroup => {
            let req = decode(api_key, body, version)?;
            out.frame(group_membership::handle_sync(broker, ctx, req, version).await)
        }
        ApiKey::Heartbeat => {
            let req = decode(api_key, body, version)?;
            out.frame(group_membership::handle_heartbeat(broker, ctx, req, version))
        }
        ApiKey::LeaveGroup => {
            let req = decode(api_key, body, version)?;
            out.frame(group_membership::handle_leave(broker, ctx, req, version))
        }
        ApiKey::OffsetCommit => {
            let req = decode(api_key, body, version)?;
            out.frame(offsets::handle_commit(broker, ctx, req, version).await)
        }
        ApiKey::OffsetFetch => {
            let req = decode(api_key, body, version)?;
            out.frame(offsets::handle_fetch(broker, ctx, req, version))
        }
        ApiKey::OffsetDelete => {
            let req = decode(api_key, body, version)?;
            out.frame(offsets::handle_delete(broker, ctx, req, version).await)
        }
        ApiKey::ListGroups => {
            let req = decode(api_key, body, version)?;
            out.frame(group_admin::handle_list(broker, ctx, req, version))
        }
        ApiKey::DescribeGroups => {
            let req = decode(api_key, body, version)?;
            out.frame(group_admin::handle_describe(broker, ctx, req, version))
        }
        ApiKey::DeleteGroups => {
            let req = decode(api_key, body, version)?;
            out.frame(group_admin::handle_delete(broker, ctx, req, version).await)
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let req = decode(api_key, body, version)?;
            let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
            out.frame(consumer_group::handle_heartbeat(broker, ctx, req, version, client_id, peer))
        }
        ApiKey::ConsumerGroupDescribe => {
            let req = decode(api_key, body, version)?;
            out.frame(consumer_group::handle_describe(broker, ctx, req, version))
        }
        ApiKey::SaslHandshake => {
            let req = decode(api_key, body, version)?;
            out.frame(sasl::handle_handshake(broker, session, req, version))
        }
        ApiKey::SaslAuthenticate => {
            let req = decode(api_key, body, version)?;
            out.frame(sasl::handle_authenticate(broker, session, req, version).await)
        }
        ApiKey::DescribeUserScramCredentials => {
            let req = decode(api_key, body, version)?;
            out.frame(scram_credentials::handle_describe(broker, ctx, req))
        }
        ApiKey::AlterUserScramCredentials => {
            let req = decode(api_key, body, version)?;
            out.frame(scram_credentials::handle_alter(broker, ctx, req).await)
        }
        ApiKey::DescribeAcls => {
            let req = decode(api_key, body, version)?;
            out.frame(acls::handle_describe(broker, ctx, req))
        }
        ApiKey::CreateAcls => {
            let req = decode(api_key, body, version)?;
            out.frame(acls::handle_create(broker, ctx, req).await)
        }
        ApiKey::DeleteAcls => {
            let req = decode(api_key, body, version)?;
            out.frame(acls::handle_delete(broker, ctx, req).await)
        }
        ApiKey::OffsetForLeaderEpoch => {
            let req = decode(api_key, body, version)?;
            out.frame(offset_for_leader_epoch::handle(broker, ctx, req, version))
        }
        ApiKey::DescribeLogDirs => {
            let req = decode(api_key, body, version)?;
            out.frame(describe_log_dirs::handle(broker, ctx, req, version).await)
        }
        ApiKey::DescribeTopicPartitions => {
            let req = decode(api_key, body, version)?;
            out.frame(describe_topic_partitions::handle(broker, ctx, req, version))
        }
        ApiKey::ElectLeaders => {
            let req = decode(api_key, body, version)?;
            out.frame(elect_leaders::handle(broker, ctx, req, version).await)
        }
        ApiKey::AlterPartitionReassignments => {
            let req = decode(api_key, body, version)?;
            out.frame(partition_reassignments::handle_alter(broker, ctx, req, version).await)
        }
        ApiKey::ListPartitionReassignments => {
            let req = decode(api_key, body, version)?;
            out.frame(partition_reassignments::handle_list(broker, ctx, req, version))
        }
        ApiKey::DescribeClientQuotas => {
            let req = decode(api_key, body, version)?;
            out.frame(client_quotas::handle_describe(broker, ctx, req))
        }
        ApiKey::AlterClientQuotas => {
            let req = decode(api_key, body, version)?;
            out.frame(client_quotas::handle_alter(broker, ctx, req).await)
        }
        ApiKey::AddPartitionsToTxn => {
            let req = decode(api_key, body, version)?;
            out.frame(transactions::handle_add_partitions(broker, ctx, req, version).await)
        }
        ApiKey::AddOffsetsToTxn => {
            let req = decode(api_key, body, version)?;
            out.frame(transactions::handle_add_offsets(broker, ctx, req, version).await)
        }
        ApiKey::EndTxn => {
            let req = decode(api_key, body, version)?;
            out.frame(transactions::handle_end_txn(broker, ctx, req, version).await)
        }
        ApiKey::WriteTxnMarkers => {
            let req = decode(api_key, body, version)?;
            out.frame(write_txn_markers::handle(broker, ctx, req, version).await)
        }
        ApiKey::TxnOffsetCommit => {
            let req = decode(api_key, body, version)?;
            out.frame(offsets::handle_txn_commit(broker, ctx, req, version).await)
        }
        ApiKey::DescribeTransactions => {
            let req = decode(api_key, body, version)?;
            out.frame(transactions::handle_describe(broker, ctx, req))
        }
        ApiKey::ListTransactions => {
            let req = decode(api_key, body, version)?;
            out.frame(transactions::handle_list(broker, ctx, req, version))
        }
        ApiKey::DescribeProducers => {
            let req = decode(api_key, body, version)?;
            out.frame(describe_producers::handle(broker, ctx, req))
        }
        other => Err(Reject::Unsupported { api: other, version, correlation_id }),
    }
}

/// Encodes responses at the request's version, with the throttle time its quota charge decided.
struct Responder<'a> {
    api: ApiKey,
    correlation_id: i32,
    version: i16,
    charge: Option<&'a Charge>,
}

impl Responder<'_> {
    fn frame<R: Encodable + HeaderVersion + ThrottleTime>(
        &self,
        mut response: R,
    ) -> Result<Reply, Reject> {
        if let Some(charge) = self.charge {
            response.set_throttle_time_ms(clamp_ms(charge.finish()));
        }
        frame(self.api, self.correlation_id, self.version, &response)
    }
}
