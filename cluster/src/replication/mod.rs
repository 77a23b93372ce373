//! Replication between brokers (Kafka's `ReplicaManager`, `Partition` and
//! `ReplicaFetcherThread`, over the cluster state in etcd).
//!
//! - [`replica_manager`]: this broker's role per partition; as leader, its followers'
//!   fetch state, the high watermark, ISR changes and `acks=all` waits.
//! - [`isr`]: the rules of the high watermark and the ISR, as pure functions.
//! - [`fetcher`]: a follower's fetchers, one per leader broker: truncation by
//!   OffsetForLeaderEpoch, then Fetch with this broker's replica id, appending the
//!   leader's batches byte for byte.
//! - [`metrics`]: the leader's and the followers' Prometheus metrics (the broker registers them).
//! - [`registered_endpoint`]: where another broker is reached, from its registration.
//!
//! The connections to other brokers are [`floe_client::BrokerConnection`]s,
//! in the inter-broker listener's security protocol (TLS, SASL, both or
//! neither), with the [`floe_client::ClientSecurity`] the broker builds from its
//! settings. The broker starts all this (`floe_broker::cluster_replication`: the
//! fetch settings from its config, the ISR writer task) and tests it against its
//! own listeners there.

use floe_client::{Endpoint, SecurityProtocol};

use crate::BrokerRegistration;

pub mod fetcher;
pub mod isr;
pub mod metrics;
pub mod replica_manager;

pub use metrics::ReplicationMetrics;
pub use replica_manager::ReplicaManager;

/// `broker`'s endpoint on `listener`.
///
/// # Errors
/// Why it has none usable (for a log line).
pub fn registered_endpoint(
    broker: &BrokerRegistration,
    listener: &str,
) -> Result<Endpoint, String> {
    let ep = broker.endpoint(listener).ok_or_else(|| {
        format!("broker {} has no endpoint on the inter-broker listener {listener}", broker.node_id)
    })?;
    let port = u16::try_from(ep.port)
        .map_err(|_| format!("broker {} has an invalid port {}", broker.node_id, ep.port))?;
    let protocol = SecurityProtocol::parse(&ep.security_protocol).ok_or_else(|| {
        format!(
            "broker {} registered an unknown security protocol {}",
            broker.node_id, ep.security_protocol
        )
    })?;
    Ok(Endpoint { host: ep.host.clone(), port, protocol })
}
