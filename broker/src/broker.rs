//! The broker's shared state: what every handler reads.

use std::sync::Arc;

use floe_storage::LogManager;

use crate::config::BrokerConfig;
use floe_coordinator::group::GroupCoordinator;
use crate::metrics::Metrics;

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
    /// The group coordinator (of every group: Floe is one node).
    pub groups: Arc<GroupCoordinator>,
    /// The transaction coordinator (of every transactional id).
    pub txns: Arc<floe_coordinator::transaction::TransactionCoordinator>,
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
    /// Turns true when shutdown begins: long-polling fetches answer at once
    /// instead of holding shutdown back for their full wait.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Broker {
    /// This broker's node id.
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }
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
