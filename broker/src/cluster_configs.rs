//! The cluster's shared settings, applied to this broker.
//!
//! In a cluster, topic config changes, dynamic broker configs, ACLs and SCRAM
//! credentials live in etcd ([`floe_cluster::SharedStore`]): the broker handling
//! AlterConfigs, CreateAcls, AlterUserScramCredentials... writes there, and every
//! broker applies what it sees to the places that enforce it:
//! - a topic's overrides (altered, else its creation configs) to the `LogManager`;
//! - `configs/brokers/<default>` and `configs/brokers/<node.id>` to the cluster-wide
//!   and per-broker layers of [`crate::dynamic_config::DynamicBrokerConfig`];
//! - the ACL bindings to the authorizer's [`crate::authorizer::store::AclStore`];
//! - the SCRAM credentials to the [`crate::security::credentials::CredentialStore`];
//! - the client quotas (`configs/quotas/...`) to [`crate::quota::ClientQuotas`].
//!
//! Each of those keeps writing its local file, which is then only a cache: the
//! broker reads etcd's state again at startup. A broker cut off from etcd keeps
//! enforcing the last state it applied.
//!
//! Every application applies the newest state whole, under one lock, so a handler
//! that waits for its own write ([`apply_latest`]) and the background task can never
//! put an older state back over a newer one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_cluster::{broker_config_key, SharedState};
use tracing::{info, warn};

use crate::authorizer::acl::AclBinding;
use crate::broker::Broker;
use crate::dynamic_config::Scope;
use crate::security::credentials::ScramUsers;
use crate::server::limits::LogLimiter;

/// How often the state is applied again without a change (topic logs created after
/// their configs were altered).
const TICK: Duration = Duration::from_secs(1);

/// How long a handler waits for its own write to reach this broker's mirror.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The etcd directories of the kinds of shared state.
pub const CONFIGS_DIR: &str = "configs/";
pub const ACLS_DIR: &str = "acls/";
pub const SCRAM_DIR: &str = "scram/";

/// Serializes applications: each applies the newest state whole (no `.await` under it).
static APPLYING: Mutex<()> = Mutex::new(());

/// One warning a minute about a stored value that cannot be applied.
static APPLY_WARNINGS: LogLimiter = LogLimiter::new(Duration::from_secs(60));

/// Applies the shared state on every change of it or of the view, and on a tick,
/// until the membership ends. Does nothing for a broker alone.
pub async fn run(broker: Arc<Broker>) {
    let Some(shared) = broker.cluster.shared() else { return };
    let mut state = shared.subscribe();
    let mut view = broker.cluster.subscribe();
    let mut tick = tokio::time::interval(TICK);
    loop {
        apply_latest(&broker).await;
        tokio::select! {
            r = state.changed() => if r.is_err() { return },
            r = view.changed() => if r.is_err() { return },
            _ = tick.tick() => {}
        }
    }
}

/// What applying touches: the enforcing stores, and where the newest state is read.
struct Targets {
    node_id: i32,
    state: tokio::sync::watch::Receiver<SharedState>,
    view: tokio::sync::watch::Receiver<floe_cluster::ClusterView>,
    logs: Arc<floe_storage::LogManager>,
    dynamic_config: Arc<crate::dynamic_config::DynamicBrokerConfig>,
    authorizer: Arc<crate::authorizer::Authorizer>,
    credentials: Arc<crate::security::credentials::CredentialStore>,
    quotas: Arc<crate::quota::ClientQuotas>,
}

/// Applies the newest shared state now (on the blocking pool: the stores write their
/// cache files). Does nothing for a broker alone.
pub async fn apply_latest(broker: &Broker) {
    let Some(shared) = broker.cluster.shared() else { return };
    let targets = Targets {
        node_id: broker.node_id(),
        state: shared.subscribe(),
        view: broker.cluster.subscribe(),
        logs: broker.logs.clone(),
        dynamic_config: broker.dynamic_config.clone(),
        authorizer: broker.authorizer.clone(),
        credentials: broker.credentials.clone(),
        quotas: broker.quotas.clone(),
    };
    if let Err(e) = tokio::task::spawn_blocking(move || apply(&targets)).await {
        tracing::error!(error = %e, "applying the cluster's shared state failed");
    }
}

/// Writes of the handlers: waits until this broker's mirror of `dir` has `revision`
/// (its own write), then applies it, so the answer follows the change.
pub async fn await_applied(broker: &Broker, dir: &str, revision: i64) {
    let Some(shared) = broker.cluster.shared() else { return };
    // Crash point: the change is in etcd, this broker has neither applied it nor answered.
    if let Err(e) = floe_storage::failpoint::check("cluster.shared_state.written") {
        warn!(dir, revision, error = %e, "failpoint after a shared state write");
    }
    if !shared.wait_for_revision(dir, revision, APPLY_TIMEOUT).await {
        warn!(dir, revision, "this broker's view of the shared state has not reached its own write yet; answering anyway");
    }
    apply_latest(broker).await;
}

fn apply(t: &Targets) {
    let _applying = APPLYING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Read under the lock: whoever applies, applies the newest state.
    let state = t.state.borrow().clone();
    if !state.synced {
        return;
    }
    apply_topic_configs(t, &state);
    apply_broker_configs(t, &state);
    apply_acls(t, &state);
    apply_scram(t, &state);
    apply_quotas(t, &state);
}

/// The Kafka error of a failed write of shared state: etcd not answering is
/// REQUEST_TIMED_OUT (the client may retry), as Kafka answered when ZooKeeper did not.
pub fn error_code(e: &floe_cluster::ClusterError) -> kafka_protocol::error::ResponseError {
    use floe_cluster::ClusterError;
    use kafka_protocol::error::ResponseError;
    match e {
        ClusterError::UnknownTopic(_) | ClusterError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        ClusterError::Timeout { .. } | ClusterError::Etcd(_) => ResponseError::RequestTimedOut,
        _ => ResponseError::UnknownServerError,
    }
}

fn warn_limited(what: &str, error: &dyn std::fmt::Display) {
    if let Some(events) = APPLY_WARNINGS.admit() {
        warn!(what, %error, events, "cannot apply the cluster's shared state here; keeping what was in force");
    }
}

fn apply_topic_configs(t: &Targets, state: &SharedState) {
    let topics = t.view.borrow().topics.clone();
    for (name, assignment) in topics.iter() {
        // A topic never altered keeps the creation configs its logs were made with.
        let Some(desired) = state.topic_config(name, &assignment.topic_id) else { continue };
        let Some(local) = t.logs.topic(name) else { continue };
        if uuid::Uuid::parse_str(&assignment.topic_id).ok() != Some(local.id()) {
            continue;
        }
        if local.overrides() == desired {
            continue;
        }
        drop(local);
        match t.logs.alter_topic_config(name, desired) {
            Ok(()) => info!(topic = %name, "applied the cluster's topic configs"),
            Err(e) => warn_limited(&format!("configs of topic {name}"), &e),
        }
    }
}

/// The dynamic config layer stored under `key` (empty when absent).
pub fn stored_layer(state: &SharedState, key: &str) -> BTreeMap<String, String> {
    state.entries.get(key).and_then(|v| serde_json::from_slice(&v.value).ok()).unwrap_or_default()
}

fn apply_broker_configs(t: &Targets, state: &SharedState) {
    for (scope, key) in [
        (Scope::ClusterDefault, broker_config_key(None)),
        (Scope::Broker, broker_config_key(Some(t.node_id))),
    ] {
        let desired = stored_layer(state, &key);
        if t.dynamic_config.layer(scope) == desired {
            continue;
        }
        match t.dynamic_config.alter(scope, desired) {
            Ok(()) => info!(?scope, "applied the cluster's dynamic broker configs"),
            Err(e) => warn_limited(&key, &e),
        }
    }
}

/// The ACL bindings of the shared state, by their key under `acls/`.
pub fn stored_acls(
    entries: impl IntoIterator<Item = (String, Vec<u8>)>,
) -> BTreeMap<String, BTreeSet<AclBinding>> {
    entries
        .into_iter()
        .filter_map(|(key, value)| match serde_json::from_slice::<Vec<AclBinding>>(&value) {
            Ok(bindings) => Some((key, bindings.into_iter().collect())),
            Err(e) => {
                warn_limited(&format!("ACLs at {key}"), &e);
                None
            }
        })
        .collect()
}

/// The key under `acls/` of a binding's resource pattern.
pub fn acl_key(binding: &AclBinding) -> String {
    let p = &binding.pattern;
    format!("{:?}/{:?}/{}", p.resource_type, p.pattern_type, p.name)
}

fn apply_acls(t: &Targets, state: &SharedState) {
    let Some(store) = t.authorizer.store() else { return };
    let entries = state.under(ACLS_DIR).map(|(k, v)| (k.to_string(), v.value.clone()));
    let desired: BTreeSet<AclBinding> = stored_acls(entries).into_values().flatten().collect();
    if *store.snapshot() == desired {
        return;
    }
    let count = desired.len();
    match store.replace(desired) {
        Ok(()) => info!(acls = count, "applied the cluster's ACLs"),
        Err(e) => warn_limited("ACLs", &e),
    }
}

/// The SCRAM users of the shared state, by name.
pub fn stored_scram(entries: impl IntoIterator<Item = (String, Vec<u8>)>) -> ScramUsers {
    entries
        .into_iter()
        .filter_map(|(user, value)| match serde_json::from_slice(&value) {
            Ok(credentials) => Some((user, credentials)),
            Err(e) => {
                warn_limited(&format!("SCRAM credentials of {user}"), &e);
                None
            }
        })
        .collect()
}

fn apply_scram(t: &Targets, state: &SharedState) {
    let desired =
        stored_scram(state.under(SCRAM_DIR).map(|(k, v)| (k.to_string(), v.value.clone())));
    if t.credentials.users() == desired {
        return;
    }
    let count = desired.len();
    match t.credentials.replace(desired) {
        Ok(()) => info!(users = count, "applied the cluster's SCRAM credentials"),
        Err(e) => warn_limited("SCRAM credentials", &e),
    }
}

/// Where the client quotas are, under `configs/`.
pub const QUOTAS_SUBDIR: &str = "quotas/";

/// One entity's quotas as stored at `configs/quotas/...` (the key is only its address:
/// the entity is in the value).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredQuota {
    pub entity: crate::quota::entity::QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// The key under `configs/` of an entity's quotas, in Kafka's layout
/// (`quotas/users/U/clients/C`, `quotas/clients/<default>`...), names with `%`, `/`
/// and `<` percent-encoded so that no two entities share a key.
pub fn quota_key(entity: &crate::quota::entity::QuotaEntity) -> String {
    use crate::quota::entity::EntityName;
    let name = |n: &EntityName| match n {
        EntityName::Default => "<default>".to_string(),
        EntityName::Named(n) => n.replace('%', "%25").replace('/', "%2F").replace('<', "%3C"),
    };
    let mut key = QUOTAS_SUBDIR.to_string();
    if let Some(u) = &entity.user {
        key.push_str(&format!("users/{}", name(u)));
    }
    if let Some(c) = &entity.client_id {
        if entity.user.is_some() {
            key.push('/');
        }
        key.push_str(&format!("clients/{}", name(c)));
    }
    key
}

fn apply_quotas(t: &Targets, state: &SharedState) {
    let dir = format!("{CONFIGS_DIR}{QUOTAS_SUBDIR}");
    let desired: crate::quota::store::QuotaSet = state
        .under(&dir)
        .filter_map(|(key, v)| match serde_json::from_slice::<StoredQuota>(&v.value) {
            Ok(q) => Some((q.entity, q.values)),
            Err(e) => {
                warn_limited(&format!("client quotas at {key}"), &e);
                None
            }
        })
        .filter(|(_, values)| !values.is_empty())
        .collect();
    if *t.quotas.snapshot() == desired {
        return;
    }
    let count = desired.len();
    match t.quotas.replace(desired) {
        Ok(()) => info!(entities = count, "applied the cluster's client quotas"),
        Err(e) => warn_limited("client quotas", &e),
    }
}
