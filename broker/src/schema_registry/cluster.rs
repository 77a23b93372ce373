//! The registry's view of the cluster ([`ClusterSide`] over the broker): creating
//! `_schemas` through the controller, whether this broker leads it, the fence and
//! the replication wait of its writes (the coordinators' gate), and the URL of
//! the leading broker's registry (from its registration in the metadata store).

use std::sync::{Arc, Weak};
use std::time::Duration;

use floe_cluster::TopicPartition;
use floe_coordinator::replicated::ReplicatedWrites;
use floe_storage::PartitionLog;
use kafka_protocol::error::ResponseError;

use crate::broker::Broker;
use crate::coordinator_terms::ReplicaGate;
use floe_schema::store::{schemas_topic_config, ClusterSide, SCHEMAS_TOPIC};

/// How long a write waits for the in-sync replicas.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// See the module doc. Holds the broker weakly: the broker holds the store.
#[derive(Debug)]
pub struct BrokerCluster {
    broker: Weak<Broker>,
    runtime: tokio::runtime::Handle,
    gate: ReplicaGate,
}

impl BrokerCluster {
    /// Over `broker`; async work (topic creation, replication waits) runs on `runtime`.
    pub fn new(broker: &Arc<Broker>, runtime: tokio::runtime::Handle) -> Self {
        let gate = ReplicaGate::new(broker.replicas.clone(), runtime.clone(), COMMIT_TIMEOUT);
        Self { broker: Arc::downgrade(broker), runtime, gate }
    }

    fn broker(&self) -> Result<Arc<Broker>, String> {
        self.broker.upgrade().ok_or_else(|| "the broker is shutting down".to_string())
    }
}

/// Asks for `_schemas` every second until the cluster has it (enough brokers up,
/// a controller), so the registry is writable before its first request.
pub async fn create_topic_when_possible(
    side: Arc<BrokerCluster>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let attempt = side.clone();
        match tokio::task::spawn_blocking(move || attempt.ensure_topic()).await {
            Ok(Ok(())) => return,
            Ok(Err(why)) => tracing::debug!(why, "{SCHEMAS_TOPIC} not created yet"),
            Err(e) => tracing::warn!(error = %e, "creating {SCHEMAS_TOPIC} failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

impl ClusterSide for BrokerCluster {
    fn ensure_topic(&self) -> Result<(), String> {
        let broker = self.broker()?;
        if broker.cluster.with_view(|v| v.topics.contains_key(SCHEMAS_TOPIC)) {
            return Ok(());
        }
        // As the internal topics: offsets.topic.replication.factor, created once that many brokers are up.
        let rf = broker.config.offsets_topic_replication_factor;
        let live = broker.cluster.with_view(|v| v.brokers.len()) as i32;
        if live < rf {
            return Err(format!("{SCHEMAS_TOPIC} needs {rf} live brokers (offsets.topic.replication.factor) and the cluster has {live}"));
        }
        let created = self.runtime.block_on(crate::cluster_admin::create_topic(
            &broker,
            SCHEMAS_TOPIC,
            1,
            rf,
            &[],
            schemas_topic_config(),
        ));
        match created {
            Ok(a) => {
                tracing::info!(replicas = ?a.partitions, "created {SCHEMAS_TOPIC} in the cluster for the Schema Registry");
                Ok(())
            }
            Err((ResponseError::TopicAlreadyExists, _)) => Ok(()),
            Err((code, why)) => Err(format!("cannot create {SCHEMAS_TOPIC}: {code:?}: {why}")),
        }
    }

    fn leader_epoch(&self) -> Option<i32> {
        self.broker
            .upgrade()?
            .replicas
            .leader_epoch_of(&TopicPartition::new(SCHEMAS_TOPIC.to_string(), 0))
    }

    fn check_leader(&self, log: &PartitionLog, leader_epoch: i32) -> Result<(), String> {
        self.gate.check_leader(log, leader_epoch).map_err(|e| e.to_string())
    }

    fn wait_committed(&self, log: &PartitionLog, end_offset: i64) -> Result<(), String> {
        self.gate.wait_committed(log, end_offset).map_err(|e| e.to_string())
    }

    fn leader_url(&self) -> Option<String> {
        let broker = self.broker.upgrade()?;
        broker.cluster.with_view(|v| {
            let leader = v.partition(SCHEMAS_TOPIC, 0)?.leader;
            v.brokers.get(&leader)?.schema_registry.clone()
        })
    }
}
