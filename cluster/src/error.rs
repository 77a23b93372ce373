//! The errors of joining and keeping a cluster membership.

/// Why a broker could not join or stay in its cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `floe.metadata.store` does not parse.
    #[error("floe.metadata.store `{value}`: {reason}")]
    InvalidStoreUrl { value: String, reason: String },
    /// etcd refused or failed a request (or could not be reached).
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// An etcd request did not complete in time.
    #[error("etcd did not answer {what} within {timeout_ms} ms")]
    Timeout { what: &'static str, timeout_ms: u64 },
    /// Another live broker holds this `node.id`.
    #[error("node.id {node_id} is registered by another live broker ({holder}); node ids must be unique in a cluster")]
    NodeIdInUse { node_id: i32, holder: String },
    /// The lease this broker's registration lives under expired (etcd did not hear
    /// from the broker within `broker.session.timeout.ms`).
    #[error("the etcd lease of this broker's registration expired")]
    LeaseExpired,
    /// A value stored in etcd does not parse (or cannot be written).
    #[error("etcd key {key}: {reason}")]
    BadValue { key: String, reason: String },
    /// CreateTopics for a name that exists (Kafka's TOPIC_ALREADY_EXISTS).
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    /// A topic or partition that is not in the cluster's metadata.
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    /// A partition the topic does not have.
    #[error("topic '{topic}' has no partition {partition}")]
    UnknownPartition { topic: String, partition: i32 },
    /// ElectLeaders changes nothing for a partition.
    #[error("{0}")]
    Election(#[from] crate::ElectionError),
    /// Replicas cannot be placed as asked.
    #[error("{0}")]
    Assignment(#[from] crate::AssignmentError),
    /// AlterPartitionReassignments changes nothing for a partition.
    #[error("{0}")]
    Reassignment(#[from] crate::ReassignmentError),
    /// An operation that needs the metadata store, on a broker alone.
    #[error("this broker is not in a cluster (floe.metadata.store=local)")]
    NotInCluster,
    /// This broker's controller role ended: another won the election.
    #[error("no longer the controller (controller epoch {0} is over)")]
    ControllerFenced(i64),
    /// An etcd stream (watch, observe, keep-alive) ended.
    #[error("etcd {0} stream ended")]
    StreamEnded(&'static str),
}
