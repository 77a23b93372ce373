//! In a cluster, replication between the brokers ([`floe_cluster::replication`]: the
//! replica manager, the ISR, the replica fetchers), started from this broker's settings.
//!
//! What stays here is what needs the broker: the fetchers' settings read from
//! [`BrokerConfig`], and the task that writes the leader's ISR changes to the
//! metadata store through this broker's membership. The tests that run the
//! fetchers and the inter-broker connection against a real broker (`run::serve`,
//! its listeners, TLS and SASL) are here too: `client_tests.rs`, `fetcher_tests.rs`.

use std::sync::Arc;
use std::time::Duration;

use floe_client::ClientSecurity;
use floe_cluster::replication::fetcher::FetcherSettings;
use floe_cluster::replication::replica_manager::IsrRequest;
use tokio::sync::mpsc;

use crate::config::BrokerConfig;

/// The broker's `replica.fetch.*` settings, and `security` for connecting.
pub fn fetcher_settings(config: &BrokerConfig, security: Arc<ClientSecurity>) -> FetcherSettings {
    let max_wait_ms = i32::try_from(config.replica_fetch_wait_max_ms).unwrap_or(i32::MAX);
    let defaults = FetcherSettings::default();
    FetcherSettings {
        max_bytes: config.replica_fetch_max_bytes,
        response_max_bytes: config.replica_fetch_response_max_bytes,
        max_wait_ms,
        min_bytes: config.replica_fetch_min_bytes,
        backoff: Duration::from_millis(config.replica_fetch_backoff_ms),
        // A long poll must never look like a dead leader.
        socket_timeout: defaults.socket_timeout.max(
            Duration::from_millis(u64::from(config.replica_fetch_wait_max_ms))
                + Duration::from_secs(5),
        ),
        security,
    }
}

/// Writes the ISR changes the leader asks for, one at a time, until the channel closes.
pub async fn run_isr_writer(
    broker: Arc<crate::broker::Broker>,
    mut requests: mpsc::UnboundedReceiver<IsrRequest>,
) {
    while let Some(r) = requests.recv().await {
        broker.replicas.write_isr_change(&broker.cluster, r).await;
    }
}

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod fetcher_tests;
