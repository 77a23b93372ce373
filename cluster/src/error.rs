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
    /// A registration stored in etcd does not parse.
    #[error("registration at {key} does not parse: {reason}")]
    BadRegistration { key: String, reason: String },
    /// An etcd stream (watch, observe, keep-alive) ended.
    #[error("etcd {0} stream ended")]
    StreamEnded(&'static str),
}
