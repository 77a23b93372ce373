//! How the transaction coordinator's markers reach the partitions (Kafka's
//! WriteTxnMarkers): [`LocalMarkerWriter`] for a broker alone, in process;
//! [`ClusterMarkerWriter`] in a cluster, where each marker goes to its
//! partition's leader, this broker or another; and [`write_as_leader`], the
//! leader's side of both (also behind the WriteTxnMarkers handler).
//!
//! A partition of a user topic gets a control batch appended to its log
//! before the coordinator records the transaction complete. The append
//! honours the partition's `flush.messages` as any other does: with
//! `flush.messages=1` the marker is fsynced before the completion record is
//! written, so after a power cut the completion never outlives a marker (the
//! partition's last stable offset would otherwise stay behind the
//! transaction); with the default, neither is fsynced, as in Kafka.
//! In a cluster the leader also waits until the in-sync replicas have the
//! marker (Kafka appends markers with `acks=all`): a completion recorded for a
//! marker only the old leader had would leave the transaction open forever on
//! the new one.
//! The `__consumer_offsets` partition goes through the group coordinator,
//! which writes the marker in order with its other writes and makes the
//! transaction's offsets the group's committed ones.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use floe_client::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
use floe_coordinator::clock::wall_ms;
use floe_coordinator::group::{GroupCoordinators, OFFSETS_TOPIC};
use floe_coordinator::transaction::{TxnMarker, TxnMarkerWriter};
use floe_storage::{ControlRecordType, LogManager};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

/// How long a leader waits for its in-sync replicas to have a marker (Kafka
/// uses `request.timeout.ms`, 30 s, for the same wait).
pub const MARKER_REPLICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The WriteTxnMarkers version sent: v1, flexible, spoken by every Kafka 3.x
/// broker (and the only one Kafka 4 keeps).
pub const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// Writes markers into this broker's logs.
#[derive(Debug)]
pub struct LocalMarkerWriter {
    logs: Arc<LogManager>,
    groups: Arc<GroupCoordinators>,
}

impl LocalMarkerWriter {
    /// A writer over `logs`, with `groups` for the offsets partitions.
    pub fn new(logs: Arc<LogManager>, groups: Arc<GroupCoordinators>) -> Self {
        Self { logs, groups }
    }
}

impl TxnMarkerWriter for LocalMarkerWriter {
    fn write_marker(&self, m: &TxnMarker) -> Result<(), String> {
        let (topic, partition) = (&m.partition.0, m.partition.1);
        if topic == OFFSETS_TOPIC {
            let Some(groups) = self.groups.partition(partition) else {
                tracing::warn!(
                    topic,
                    partition,
                    producer_id = m.producer_id,
                    "no marker for a partition the topic does not have"
                );
                return Ok(());
            };
            return groups
                .complete_txn_at(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch)
                .map_err(|e| e.to_string());
        }
        let Some(log) = self.logs.partition(topic, partition) else {
            tracing::info!(
                topic,
                partition,
                producer_id = m.producer_id,
                "no marker for a partition that no longer exists"
            );
            return Ok(());
        };
        log.append_txn_marker(
            m.producer_id,
            m.producer_epoch,
            control_type(m.commit),
            m.coordinator_epoch,
            wall_ms(),
        )
        .map_err(|e| e.to_string())?;
        Ok(())
    }
}

fn control_type(commit: bool) -> ControlRecordType {
    if commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    }
}

/// Where a marker for one partition goes, as this broker's cluster view says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// This broker leads it (or it is an internal topic not yet in the view:
    /// each broker's own).
    Local,
    /// Another broker leads it.
    Remote(i32),
    /// Its topic is gone: the marker went with the data.
    Gone,
    /// Offline, or not yet placed: try again later.
    Unavailable(String),
}

fn route(broker: &Broker, topic: &str, partition: i32) -> Route {
    broker.cluster.with_view(|v| match v.partition(topic, partition) {
        Some(s) if s.leader == broker.node_id() => Route::Local,
        Some(s) if s.leader == floe_cluster::NO_LEADER => {
            Route::Unavailable(format!("{topic}-{partition} has no leader (offline)"))
        }
        Some(s) => Route::Remote(s.leader),
        // An internal topic is created by the first FindCoordinator: not yet, retry.
        None if floe_protocol::topic::is_internal(topic) => {
            Route::Unavailable(format!("{topic} is not created yet"))
        }
        None if !v.topics.contains_key(topic) => Route::Gone,
        None => Route::Unavailable(format!("{topic}-{partition} has no partition state yet")),
    })
}

/// The leader's side of a marker: appends it to `m.partition`'s log and, in a
/// cluster, waits until the in-sync replicas have it; the `__consumer_offsets`
/// partition goes through the group coordinator. Blocking work runs on the
/// blocking pool.
///
/// # Errors
/// Kafka's code and a reason: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
/// (another broker leads it, or this one is still becoming its leader),
/// NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, and the storage
/// refusals (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
/// KAFKA_STORAGE_ERROR...).
pub async fn write_as_leader(
    broker: &Broker,
    m: &TxnMarker,
) -> Result<(), (ResponseError, String)> {
    let (topic, partition) = (m.partition.0.as_str(), m.partition.1);
    let (producer_id, epoch, commit, coordinator_epoch) =
        (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch);
    if topic == OFFSETS_TOPIC {
        match route(broker, topic, partition) {
            Route::Local | Route::Gone => {}
            Route::Remote(l) => {
                return Err((
                    ResponseError::NotLeaderOrFollower,
                    format!("{topic}-{partition} is led by broker {l}"),
                ))
            }
            Route::Unavailable(why) => return Err((ResponseError::NotLeaderOrFollower, why)),
        }
        let Some(groups) = broker.groups.partition(partition) else {
            return Err((
                ResponseError::UnknownTopicOrPartition,
                format!("{topic}-{partition} does not exist"),
            ));
        };
        let done = tokio::task::spawn_blocking(move || {
            groups.complete_txn_at(producer_id, epoch, commit, coordinator_epoch)
        })
        .await;
        return match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err((crate::errors::offsets_store_error(&e), e.to_string())),
            Err(e) => Err((ResponseError::UnknownServerError, format!("marker task failed: {e}"))),
        };
    }
    let log = broker.leader_log(topic, partition)?;
    let replicated = broker.is_clustered();
    let tp = floe_cluster::TopicPartition::new(topic, partition);
    let min_isr = log.config().min_insync_replicas;
    if replicated {
        // As Kafka's acks=all append: too small an ISR refuses at once.
        broker.replicas.check_min_isr(&tp, min_isr)?;
    }
    let appending = log.clone();
    let appended = tokio::task::spawn_blocking(move || {
        appending.append_txn_marker(
            producer_id,
            epoch,
            control_type(commit),
            coordinator_epoch,
            wall_ms(),
        )
    })
    .await;
    let offset = match appended {
        Ok(Ok(offset)) => offset,
        Ok(Err(e)) => {
            return Err((crate::errors::kafka_error(&e), format!("{topic}-{partition}: {e}")))
        }
        Err(e) => {
            return Err((ResponseError::UnknownServerError, format!("marker task failed: {e}")))
        }
    };
    if replicated {
        broker.replicas.on_leader_append(&tp);
        let deadline = tokio::time::Instant::now() + MARKER_REPLICATION_TIMEOUT;
        broker.replicas.wait_for_replication(&tp, &log, offset + 1, min_isr, deadline).await?;
    }
    Ok(())
}

/// Writes markers in a cluster: each to its partition's leader. This broker's
/// own partitions are written as [`write_as_leader`] does; another leader gets a
/// WriteTxnMarkers request over one connection per broker, kept open and
/// opened again after an error, in the inter-broker listener's security
/// protocol (as the replica fetchers': the same [`BrokerConnection::connect`]).
///
/// Built before the [`Broker`] it serves (the transaction coordinator inside
/// the broker owns it) and [`attach`](Self::attach)ed once the broker exists:
/// until then every marker fails and the coordinator retries. Thread-safe;
/// `write_marker` blocks (the coordinator calls it on the blocking pool).
#[derive(Debug)]
pub struct ClusterMarkerWriter {
    broker: OnceLock<Weak<Broker>>,
    runtime: tokio::runtime::Handle,
    /// One slot per destination broker. The map's lock is held only to find a
    /// slot; a slot's async lock is held across its request, so markers to one
    /// broker go one at a time and markers to different brokers do not wait
    /// on each other.
    peers: Mutex<BTreeMap<i32, Arc<tokio::sync::Mutex<Option<Peer>>>>>,
    /// Bounds connecting and each request; above the leader's replication wait.
    timeout: Duration,
    /// The TLS client configuration and SASL login presented to the other brokers.
    security: Arc<ClientSecurity>,
}

/// An open connection to one broker, and where it was opened to.
#[derive(Debug)]
struct Peer {
    endpoint: Endpoint,
    conn: BrokerConnection,
}

impl ClusterMarkerWriter {
    /// A writer whose requests run on `runtime`, connecting with `security`;
    /// [`attach`](Self::attach) it to its broker.
    pub fn new(runtime: tokio::runtime::Handle, security: Arc<ClientSecurity>) -> Self {
        Self {
            broker: OnceLock::new(),
            runtime,
            peers: Mutex::new(BTreeMap::new()),
            timeout: MARKER_REPLICATION_TIMEOUT + Duration::from_secs(5),
            security,
        }
    }

    /// Gives the writer its broker (held weakly: the broker owns the writer).
    pub fn attach(&self, broker: &Arc<Broker>) {
        let _ = self.broker.set(Arc::downgrade(broker));
    }

    fn slot(&self, node: i32) -> Arc<tokio::sync::Mutex<Option<Peer>>> {
        // Held for a map lookup only: no .await under it.
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.entry(node).or_default().clone()
    }

    /// Sends `m` to `leader` and reads its answer for the partition.
    fn send(&self, broker: &Broker, leader: i32, m: &TxnMarker) -> Result<(), String> {
        let (topic, partition) = (m.partition.0.as_str(), m.partition.1);
        let endpoint = endpoint_of(broker, leader)?;
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(m.producer_id))
                .with_producer_epoch(m.producer_epoch)
                .with_transaction_result(m.commit)
                .with_coordinator_epoch(m.coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partition_indexes(vec![partition])])]);
        let slot = self.slot(leader);
        let client_id = format!("broker-{}-txn-markers", broker.node_id());
        let timeout = self.timeout;
        let security = self.security.clone();
        let answered = self.runtime.block_on(async move {
            let mut peer = slot.lock().await;
            // None yet, or the broker moved to another endpoint: a new connection.
            let cached = peer.take().filter(|p| p.endpoint == endpoint);
            let reused = cached.is_some();
            let mut p = match cached {
                Some(p) => p,
                None => Peer {
                    conn: BrokerConnection::connect(&endpoint, &client_id, timeout, &security)
                        .await?,
                    endpoint,
                },
            };
            let mut answer = p.conn.call(WRITE_TXN_MARKERS_VERSION, &request).await;
            if reused && matches!(answer, Err(ClientError::Closed { .. } | ClientError::Io { .. }))
            {
                // The peer closes idle connections (connections.max.idle.ms): once more on a
                // new one rather than wait for the coordinator's next tick. A marker written
                // twice is harmless.
                p.conn =
                    BrokerConnection::connect(&p.endpoint, &client_id, timeout, &security).await?;
                answer = p.conn.call(WRITE_TXN_MARKERS_VERSION, &request).await;
            }
            // Kept only after a clean exchange: an error may leave the stream mid-frame.
            if answer.is_ok() {
                *peer = Some(p);
            }
            answer
        });
        let response = answered.map_err(|e: ClientError| {
            format!("WriteTxnMarkers for {topic}-{partition} to broker {leader}: {e}")
        })?;
        match partition_error(&response, m.producer_id, topic, partition) {
            Some(0) => Ok(()),
            Some(code) => {
                let name = ResponseError::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"));
                Err(format!("{topic}-{partition}: broker {leader} answered WriteTxnMarkers with {name}"))
            }
            None => Err(format!("{topic}-{partition}: broker {leader} left the partition out of its WriteTxnMarkers answer")),
        }
    }
}

impl TxnMarkerWriter for ClusterMarkerWriter {
    fn write_marker(&self, m: &TxnMarker) -> Result<(), String> {
        let broker = self
            .broker
            .get()
            .and_then(|w| w.upgrade())
            .ok_or("the broker is starting or stopping")?;
        let (topic, partition) = (m.partition.0.as_str(), m.partition.1);
        match route(&broker, topic, partition) {
            Route::Local => {
                self.runtime.block_on(write_as_leader(&broker, m)).map_err(|(code, reason)| {
                    format!(
                        "{topic}-{partition} on this broker ({}): {code:?}: {reason}",
                        broker.node_id()
                    )
                })
            }
            Route::Remote(leader) => self.send(&broker, leader, m),
            Route::Gone => {
                tracing::info!(
                    topic,
                    partition,
                    producer_id = m.producer_id,
                    "no marker for a partition that no longer exists"
                );
                Ok(())
            }
            Route::Unavailable(why) => Err(why),
        }
    }
}

/// Where `node` is reached on the inter-broker listener.
fn endpoint_of(broker: &Broker, node: i32) -> Result<Endpoint, String> {
    let listener = &broker.config.inter_broker.listener;
    broker.cluster.with_view(|v| {
        let b = v.brokers.get(&node).ok_or_else(|| format!("broker {node} is not registered"))?;
        floe_cluster::replication::registered_endpoint(b, listener)
    })
}

/// The error code `response` gives `topic`-`partition` of `producer_id`'s marker.
fn partition_error(
    response: &WriteTxnMarkersResponse,
    producer_id: i64,
    topic: &str,
    partition: i32,
) -> Option<i16> {
    response
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == producer_id)
        .flat_map(|m| &m.topics)
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition)
        .map(|p| p.error_code)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };

    use super::*;

    #[test]
    fn the_answer_for_the_partition_is_found() {
        let part = |p: i32, code: i16| {
            WritableTxnMarkerPartitionResult::default()
                .with_partition_index(p)
                .with_error_code(code)
        };
        let topic = WritableTxnMarkerTopicResult::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![part(0, 0), part(1, ResponseError::NotLeaderOrFollower.code())]);
        let response = WriteTxnMarkersResponse::default().with_markers(vec![
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(7))
                .with_topics(vec![topic]),
        ]);
        assert_eq!(partition_error(&response, 7, "t", 0), Some(0));
        assert_eq!(
            partition_error(&response, 7, "t", 1),
            Some(ResponseError::NotLeaderOrFollower.code())
        );
        assert_eq!(partition_error(&response, 8, "t", 0), None, "another producer's answer");
        assert_eq!(partition_error(&response, 7, "u", 0), None);
    }
}
