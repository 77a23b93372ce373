//! The broker's shared state: what every handler reads.

use std::sync::Arc;

use floe_storage::{LogManager, PartitionLog};
use kafka_protocol::error::ResponseError;

use crate::config::BrokerConfig;
use crate::metrics::Metrics;
use floe_coordinator::group::GroupCoordinators;

/// The leader epoch of a broker alone (and of the internal topics): never re-elected.
pub(crate) const LEADER_EPOCH: i32 = 0;

/// Everything a request handler needs, shared by all connections.
///
/// Immutable after startup except through the types it holds, which are
/// themselves thread-safe (`LogManager`, metrics handles).
#[derive(Debug)]
pub struct Broker {
    /// The configuration the broker started with (settings changed at run
    /// time are in `dynamic_config`, and applied where they are used).
    pub config: BrokerConfig,
    /// The partition logs.
    pub logs: Arc<LogManager>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The group coordinators, one per `__consumer_offsets` partition.
    pub groups: Arc<GroupCoordinators>,
    /// The transaction coordinators, one per `__transaction_state` partition.
    pub txns: Arc<floe_coordinator::transaction::TransactionCoordinators>,
    /// SCRAM credentials and PLAIN users.
    pub credentials: Arc<crate::security::credentials::CredentialStore>,
    /// ACL authorization (allows everything when `authorizer.class.name` is empty).
    pub authorizer: Arc<crate::authorizer::Authorizer>,
    /// Dynamic broker configs (AlterConfigs on BROKER resources) and where they apply.
    pub dynamic_config: Arc<crate::dynamic_config::DynamicBrokerConfig>,
    /// Client quotas: their configuration and the rates they are enforced on.
    pub quotas: Arc<crate::quota::ClientQuotas>,
    /// Whether fetches on TLS connections may use kernel TLS (decided at startup).
    pub ktls: bool,
    /// This broker's cluster membership: the live brokers and the controller.
    pub cluster: floe_cluster::Membership,
    /// This broker's role per partition of the cluster, and as leader its followers.
    pub replicas: Arc<floe_cluster::replication::ReplicaManager>,
    /// The built-in Schema Registry's state, when it runs (for `confluent.*.schema.validation`).
    pub schemas: Option<Arc<floe_schema::SchemaStore>>,
    /// The table read path of shared-storage topics (always started by `run::serve`;
    /// `None` only in handler tests, where a table-only offset is answered empty).
    pub table_reads: Option<Arc<floe_tiering::table_reads::TableReads>>,
    /// Turns true when shutdown begins: long-polling fetches answer at once
    /// instead of holding shutdown back for their full wait.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Broker {
    /// This broker's node id.
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The live brokers as clients of `endpoint`'s listener reach them, and the
    /// controller's id (-1 while none is known). Kafka answers with each broker's
    /// endpoint on the listener the request came in on and leaves out brokers that
    /// have no such listener; this broker is always listed, at the endpoint the client used.
    pub fn cluster_brokers(
        &self,
        endpoint: &crate::server::endpoint::Endpoint,
    ) -> (Vec<ClusterBroker>, i32) {
        let view = self.cluster.view();
        let mut brokers: Vec<ClusterBroker> = view
            .brokers
            .values()
            .filter(|b| b.node_id != self.node_id())
            .filter_map(|b| {
                let e = b.endpoint(&endpoint.name)?;
                Some(ClusterBroker {
                    node_id: b.node_id,
                    host: e.host.clone(),
                    port: e.port,
                    rack: b.rack.clone(),
                })
            })
            .collect();
        brokers.push(ClusterBroker {
            node_id: self.node_id(),
            host: endpoint.advertised_host.clone(),
            port: endpoint.advertised_port,
            rack: self.config.broker_rack.clone(),
        });
        brokers.sort_by_key(|b| b.node_id);
        (brokers, view.controller_id.unwrap_or(-1))
    }
}

impl Broker {
    /// Whether this broker's transaction coordinator holds `transactional_id` now, so
    /// KIP-890 verification (of transactional produce and TxnOffsetCommit) can ask it:
    /// alone, always; in a cluster, while it leads the id's `__transaction_state`
    /// partition. Elsewhere the checks are skipped, as Kafka does with
    /// `transaction.partition.verification.enable=false`.
    pub fn coordinates_transactions(&self, transactional_id: &str) -> bool {
        !self.is_clustered()
            || self.txns.of(transactional_id).coordinator_epoch()
                != floe_coordinator::replicated::NO_TERM
    }

    /// Whether this broker is part of an etcd cluster (rather than alone).
    pub fn is_clustered(&self) -> bool {
        self.cluster.is_clustered()
    }

    /// The log of `topic`-`partition`, if this broker may write and serve it: in a
    /// cluster, only while it is the partition's leader (Kafka's
    /// `getPartitionOrException` with its leader check), the coordinators' internal
    /// topics included.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster (or, alone, this broker)
    /// does not have; NOT_LEADER_OR_FOLLOWER when another broker leads it, or none does
    /// (clients refresh their metadata and retry); with a reason for the log.
    pub fn leader_log(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<PartitionLog>, (ResponseError, String)> {
        let unknown = || {
            (ResponseError::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist"))
        };
        if self.is_clustered() {
            let leader =
                self.cluster.with_view(|v| v.partition(topic, partition).map(|s| s.leader));
            match leader {
                None => return Err(unknown()),
                Some(l) if l != self.node_id() => {
                    let why = if l == floe_cluster::NO_LEADER {
                        "has no leader (offline)".to_string()
                    } else {
                        format!("is led by broker {l}")
                    };
                    return Err((
                        ResponseError::NotLeaderOrFollower,
                        format!(
                            "{topic}-{partition} {why}, not by this broker ({})",
                            self.node_id()
                        ),
                    ));
                }
                Some(_) => {}
            }
            // Given the leadership, but not taken it yet (log not open, epoch not
            // recorded): retriable.
            let taken =
                self.replicas.is_leader(&floe_cluster::TopicPartition::new(topic, partition));
            return self.logs.partition(topic, partition).filter(|_| taken).ok_or_else(|| {
                (
                    ResponseError::NotLeaderOrFollower,
                    format!("{topic}-{partition}: this broker is becoming its leader"),
                )
            });
        }
        self.logs.partition(topic, partition).ok_or_else(unknown)
    }
}

impl Broker {
    /// Whether `topic`-`partition` exists: in the cluster's metadata, or (alone) in this
    /// broker's data directory.
    pub fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        if self.is_clustered() {
            return self.cluster.with_view(|v| v.partition(topic, partition).is_some());
        }
        self.logs.partition(topic, partition).is_some()
    }

    /// The leader epoch of `topic`-`partition`: the cluster's (it grows with every
    /// leader change), or 0 for a broker alone.
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> i32 {
        if self.is_clustered() {
            return self.cluster.with_view(|v| {
                v.partition(topic, partition).map_or(LEADER_EPOCH, |s| s.leader_epoch)
            });
        }
        LEADER_EPOCH
    }

    /// Kafka's `checkCurrentLeaderEpoch` (KIP-320): a request that names the leader
    /// epoch it expects gets FENCED_LEADER_EPOCH when that epoch is older than the
    /// leader's (its metadata is stale), UNKNOWN_LEADER_EPOCH when newer (this broker's
    /// is); -1 skips the check.
    pub fn check_current_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        current: i32,
    ) -> Option<ResponseError> {
        if current == -1 {
            return None;
        }
        let epoch = self.leader_epoch(topic, partition);
        match current.cmp(&epoch) {
            std::cmp::Ordering::Less => Some(ResponseError::FencedLeaderEpoch),
            std::cmp::Ordering::Greater => Some(ResponseError::UnknownLeaderEpoch),
            std::cmp::Ordering::Equal => None,
        }
    }
}

/// A live broker as a client of one listener reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl Broker {
    /// Runs `f` on the blocking pool: for calls that create or delete files
    /// and fsync (topic creation, config changes, record deletion), which must
    /// not stall a request worker.
    ///
    /// Returns `None` only if `f` panicked, which is logged.
    pub async fn blocking<T, F>(&self, f: F) -> Option<T>
    where
        F: FnOnce(&LogManager) -> T + Send + 'static,
        T: Send + 'static,
    {
        let logs = self.logs.clone();
        match tokio::task::spawn_blocking(move || f(&logs)).await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(error = %e, "storage task failed");
                None
            }
        }
    }
}
